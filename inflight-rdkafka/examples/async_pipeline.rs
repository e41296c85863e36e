//! The pipeline of `examples/pipeline.rs` on tokio: a `StreamConsumer`,
//! workers as tasks, a `FutureProducer`.
//!
//! ```text
//! cargo run -p inflight-rdkafka --release --example async_pipeline -- BROKERS SOURCE SINK GROUP [SECONDS]
//! ```
//!
//! Each record of `SOURCE` goes to the tracker (`send_async` waits for
//! room at the capacity), then to a pool of worker tasks, which process it
//! (out of order), ask `is_current` (a record a rebalance released is the
//! next owner's: it is not produced here), produce the result to `SINK`
//! and resolve the ticket from the delivery (`resolve_delivery`). A timer
//! commits the source offsets every 100 ms with their progress as
//! metadata, and finishes a revocation's hand-off (deferred: rdkafka's
//! callback, which a `StreamConsumer` runs inside `recv()`, never waits).
//! Runs for `SECONDS` (default 30), then stops cleanly, with the recipe of
//! `HandOffContext`'s docs.

use inflight::mode::Progress;
use inflight::{ProgressTracker, Ticket, Tracker};
use inflight_rdkafka::{
    commit_progress, finish_hand_off, resolve_delivery, HandOffContext, OnRebalance, Resumable,
    TopicPartition,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientContext, Message};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Mutex};

type Pipeline = ProgressTracker<TopicPartition, i64>;

/// Records in flight at most: what the workers and the sink finish well
/// within the hand-off's 5 s drain (see `HandOffContext`'s docs).
const CAPACITY: usize = 2_048;

/// The example's own context: it says what each hand-off did.
struct Announce;

impl ClientContext for Announce {}
impl ConsumerContext for Announce {}

impl OnRebalance for Announce {
    fn post_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        consumer: &K,
        rebalance: &Rebalance<'_>,
    ) {
        match rebalance {
            Rebalance::Revoke(_) => {
                if let Some(done) = consumer.context().last_hand_off() {
                    eprintln!("{done}");
                }
            }
            Rebalance::Assign(partitions) => eprintln!("assigned {partitions:?}"),
            Rebalance::Error(e) => eprintln!("rebalance: {e}"),
        }
    }
}

type Context = HandOffContext<Progress, Announce>;
type Job = (Vec<u8>, Ticket);

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [brokers, source, sink, group] = [0, 1, 2, 3].map(|i| {
        args.get(i)
            .cloned()
            .unwrap_or_else(|| panic!("usage: async_pipeline BROKERS SOURCE SINK GROUP [SECONDS]"))
    });
    let seconds: u64 = args.get(4).map_or(30, |s| s.parse().expect("SECONDS"));

    let tracker: Arc<Pipeline> =
        Arc::new(Tracker::builder().capacity(CAPACITY).progress(4096).build());
    let context =
        HandOffContext::wrap(Announce, tracker.clone(), Duration::from_secs(5)).defer_hand_off();
    let consumer: StreamConsumer<Context> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .create_with_context(context)
        .expect("consumer");
    consumer.subscribe(&[&source]).expect("subscribe");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("acks", "all")
        .create()
        .expect("producer");

    // The workers: tasks taking jobs from one queue.
    let (jobs, queue) = mpsc::unbounded_channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (queue, producer, tracker, sink) = (
                queue.clone(),
                producer.clone(),
                tracker.clone(),
                sink.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let job = queue.lock().await.recv().await;
                    let Some((payload, ticket)) = job else { return };
                    let result = [b"processed: ".as_slice(), &payload].concat();
                    // Asked last before producing: a rebalance may have
                    // released the record while it waited here.
                    if !tracker.is_current(&ticket) {
                        let _ = tracker.fail(ticket); // an ended life: changes nothing
                        continue;
                    }
                    let delivery = producer
                        .send(
                            FutureRecord::<(), _>::to(&sink).payload(&result),
                            Duration::from_secs(30),
                        )
                        .await;
                    if let Err((e, _)) = &delivery {
                        eprintln!("produce: {e} (redone after a restart)");
                    }
                    // Acked when delivered, failed otherwise.
                    let _ = resolve_delivery(&tracker, ticket, &delivery);
                }
            })
        })
        .collect();

    let stop = tokio::time::sleep(Duration::from_secs(seconds));
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let (mut consumed, mut skipped) = (0_u64, 0_u64);
    loop {
        tokio::select! {
            () = &mut stop => break,
            message = consumer.recv() => {
                let message = match message {
                    Ok(message) => message,
                    Err(e) => {
                        eprintln!("consume: {e}");
                        continue;
                    }
                };
                let partition = TopicPartition::new(message.topic(), message.partition());
                if consumer.context().skip(&partition, message.offset()) {
                    // Done before, or its partition is being handed off.
                    skipped += 1;
                    continue;
                }
                // Waits for room at the capacity (the deliveries make it).
                match tracker.send_async(partition, message.offset()).await {
                    Ok(ticket) => {
                        let payload = message.payload().unwrap_or_default().to_vec();
                        jobs.send((payload, ticket)).expect("workers");
                        consumed += 1;
                    }
                    // Fetched again after a later offset was sent: on its way.
                    Err(inflight::SendError::OutOfOrder(..)) => skipped += 1,
                    Err(e) => eprintln!("tracker: {e}"),
                }
            }
            _ = tick.tick() => {
                // Commits what was delivered (a failed commit is made
                // again here), and finishes a deferred hand-off: on a
                // timer, as a paused partition brings no record.
                if let Err(e) = commit_progress(&consumer, CommitMode::Async) {
                    eprintln!("commit: {e}");
                }
            }
        }
    }

    // The clean stop (`HandOffContext`'s recipe). The glue's calls are
    // synchronous: the waiting ones run in `block_in_place`.
    // 1. Stop taking records: the workers end when the queue is empty.
    drop(jobs);
    // 2. A deferred hand-off that still waits ends (within its bound).
    tokio::task::block_in_place(|| finish_hand_off(&consumer));
    // 3. Every record in flight delivered (or failed).
    for worker in workers {
        worker.await.expect("a worker");
    }
    if let Err(e) = producer.flush(Duration::from_secs(30)) {
        eprintln!("flush: {e}");
    }
    match tokio::time::timeout(Duration::from_secs(30), tracker.drain_async()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("not everything delivered: {e} (redone after a restart)"),
        Err(_) => eprintln!("not everything delivered in 30 s (redone after a restart)"),
    }
    // 4. Commit it all.
    if let Err(e) = tokio::task::block_in_place(|| commit_progress(&consumer, CommitMode::Sync)) {
        eprintln!("final commit: {e} (redone after a restart)");
    }
    // 5. Leave the group: the revocation hands the partitions off (nothing
    //    is in flight: at once) in a poll; then drop the consumer.
    consumer.unsubscribe();
    let deadline = Instant::now() + Duration::from_secs(10);
    while consumer.assignment().is_ok_and(|a| a.count() > 0) && Instant::now() < deadline {
        let _ = tokio::time::timeout(Duration::from_millis(50), consumer.recv()).await;
    }
    let context = consumer.context();
    println!(
        "async pipeline: {consumed} consumed, {skipped} skipped, {} commits failed (and made again), errors {:?}",
        context.commit_failures(),
        context.errors()
    );
}
