//! An async producer on tokio: a source task, a simulated async sink whose
//! deliveries complete out of order, one spawned task per delivery that acks
//! (or fails) the record's ticket, and a committer task that awaits a flush
//! on an interval.
//!
//! ```text
//! cargo run --release --example async_producer
//! ```
//!
//! The sink stands in for an async Kafka client (rdkafka's `FutureProducer`,
//! rskafka): `enqueue` waits for room in the client's queue, then returns a
//! delivery future that resolves when the broker acknowledges the record.
//! The broker task takes records in batches and answers each batch in a
//! shuffled order. Nothing blocks a runtime thread: the committer awaits
//! `Flush::wait_async`, under a timeout of its own, and the shutdown awaits
//! `Tracker::drain_async`.

mod common;
use inflight::{FlushError, Tracker};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

const PARTITIONS: [&str; 3] = ["orders-0", "orders-1", "orders-2"];
const RECORDS: u64 = 300_000;
const COMMIT_EVERY: Duration = Duration::from_millis(20);

/// The broker's answer for one record.
type Delivery = Result<(), &'static str>;

/// A record on its way to the broker, with where to send the answer.
type Request = ((&'static str, u64), oneshot::Sender<Delivery>);

/// A simulated async producer client.
struct Producer {
    queue: mpsc::Sender<Request>,
}

impl Producer {
    /// Starts the client and its broker task.
    fn start() -> Self {
        let (queue, mut requests) = mpsc::channel::<Request>(4096);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(256);
            let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
            while requests.recv_many(&mut batch, 256).await > 0 {
                // Answer the batch out of order, as partitions and retries do.
                while !batch.is_empty() {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let (_record, reply) = batch.swap_remove((rng % batch.len() as u64) as usize);
                    let _ = reply.send(Ok(()));
                }
                tokio::task::yield_now().await;
            }
        });
        Self { queue }
    }

    /// Waits for room in the client's queue, then hands the record over and
    /// returns the future of its delivery.
    async fn enqueue(&self, partition: &'static str, offset: u64) -> oneshot::Receiver<Delivery> {
        let (reply, delivery) = oneshot::channel();
        self.queue
            .send(((partition, offset), reply))
            .await
            .expect("the broker task runs until the client is dropped");
        delivery
    }
}

#[tokio::main]
async fn main() {
    common::exit_when_stdout_closes();
    let tracker: Arc<Tracker<&'static str, u64>> = Arc::new(Tracker::new());
    let started = Instant::now();

    // The committer: every 20 ms, seal what was sent, await its delivery,
    // "store" the offsets, commit. After the source closed the tracker, one
    // last flush covers everything it accepted.
    let committer = {
        let tracker = Arc::clone(&tracker);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(COMMIT_EVERY);
            let mut stored: BTreeMap<&str, u64> = BTreeMap::new();
            let mut commits = 0_usize;
            loop {
                interval.tick().await;
                let last = tracker.is_closed();
                let mut flush = tracker.begin_flush().expect("the only committer");
                match tokio::time::timeout(Duration::from_secs(5), flush.wait_async()).await {
                    Ok(Ok(offsets)) => {
                        // A real committer writes these durably first.
                        stored.extend(offsets);
                        flush.commit().expect("wait_async returned Ok");
                        commits += 1;
                        if commits % 10 == 1 || last {
                            println!(
                                "commit #{commits:<3} {:>8.1?}  {stored:?}",
                                started.elapsed()
                            );
                        }
                    }
                    // Timed out: the future is dropped and the flush aborted;
                    // the next one covers its records too.
                    Err(_elapsed) => flush.abort(),
                    Ok(Err(FlushError::Failed { failed })) => {
                        panic!("{failed} records failed: restart from {stored:?}")
                    }
                    Ok(Err(e)) => panic!("flush: {e}"),
                }
                if last {
                    return (commits, stored);
                }
            }
        })
    };

    // The source: read records, send each through the tracker and the
    // client, and spawn a task that resolves its ticket on delivery.
    let producer = Producer::start();
    for n in 0..RECORDS {
        let partition = PARTITIONS[(n % 3) as usize];
        let offset = n / 3;
        let ticket = tracker.send(partition, offset).expect("unbounded, open");
        let delivery = producer.enqueue(partition, offset).await;
        let tracker = Arc::clone(&tracker);
        tokio::spawn(async move {
            match delivery.await {
                Ok(Ok(())) => tracker.ack(ticket).expect("resolved once"),
                _ => tracker.fail(ticket).expect("resolved once"),
            }
        });
    }
    tracker.close();
    // Shutdown: wait until everything sent is delivered, without blocking.
    tokio::time::timeout(Duration::from_secs(30), tracker.drain_async())
        .await
        .expect("every delivery completes")
        .expect("nobody interrupts");
    let drained = started.elapsed();

    let (commits, stored) = committer.await.expect("the committer finished");
    let last = RECORDS / 3 - 1;
    assert!(stored.values().all(|&offset| offset == last), "{stored:?}");
    assert_eq!(tracker.in_flight(), 0);
    println!(
        "{RECORDS} records sent through an async client, acked out of order by spawned tasks; \
         drained after {drained:.1?}; {commits} commits; the last commit is offset {last} of every partition"
    );
}
