//! A producer, a simulated sink that acks out of order, and a committer.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```
//!
//! The producer reads three source partitions (offsets 0, 1, 2, …) and sends
//! each record; the sink thread receives tickets, holds a batch, and acks it
//! in a shuffled order (as a Kafka producer's callbacks arrive); the committer
//! flushes every 20 ms and "stores" the offsets it may commit. At the end the
//! source closes the tracker and a final flush commits the last offsets.

mod common;
use inflight::{FlushError, Ticket, Tracker};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PARTITIONS: [&str; 3] = ["orders-0", "orders-1", "orders-2"];
const RECORDS: u64 = 3_000_000;

fn main() {
    common::exit_when_stdout_closes();
    let tracker: Tracker<&'static str, u64> = Tracker::new();
    let (to_sink, sink) = mpsc::sync_channel::<Ticket>(4096);
    let started = Instant::now();
    let mut stored: BTreeMap<&str, u64> = BTreeMap::new();
    let mut commits = 0;

    let tracker = &tracker;
    std::thread::scope(|s| {
        // The source: send every record, hand its ticket to the sink.
        let source = s.spawn(move || {
            let mut last = HashMap::new();
            for n in 0..RECORDS {
                let partition = PARTITIONS[(n % 3) as usize];
                let offset = n / 3;
                let ticket = tracker.send(partition, offset).expect("tracker is open");
                last.insert(partition, offset);
                to_sink.send(ticket).expect("sink is running");
            }
            drop(to_sink);
            tracker.close();
            last
        });

        // The sink: deliver in batches, acking each batch shuffled.
        s.spawn(move || {
            let mut batch = Vec::with_capacity(64);
            let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
            let mut deliver = |batch: &mut Vec<Ticket>| {
                while !batch.is_empty() {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let ticket = batch.swap_remove((rng % batch.len() as u64) as usize);
                    tracker.ack(ticket).expect("a genuine ticket");
                }
            };
            for ticket in sink.iter() {
                batch.push(ticket);
                if batch.len() == 64 {
                    deliver(&mut batch);
                }
            }
            deliver(&mut batch);
        });

        // The committer: flush every 20 ms until the source is done.
        let mut commit = |timeout: Duration| -> Result<(), FlushError> {
            let mut flush = tracker.begin_flush().expect("one committer");
            let offsets = flush.wait(timeout)?;
            stored.extend(offsets.iter().map(|(p, o)| (*p, *o))); // the durable write
            flush.commit()?;
            commits += 1;
            if commits % 10 == 1 {
                println!(
                    "commit #{commits:<3} {:>8.1?}  {stored:?}",
                    started.elapsed()
                );
            }
            Ok(())
        };
        while !tracker.is_closed() {
            std::thread::sleep(Duration::from_millis(20)); // paces the commits
            if let Err(e) = commit(Duration::from_secs(1)) {
                println!("flush failed ({e}); the next one covers the same records");
            }
        }
        let last_sent = source.join().expect("source thread");
        // Final flush: `close` was called, so it covers every record sent.
        commit(Duration::from_secs(10)).expect("final flush");
        println!("final      {:>8.1?}  {stored:?}", started.elapsed());
        assert_eq!(stored, last_sent.into_iter().collect::<BTreeMap<_, _>>());
    });

    println!(
        "{RECORDS} records sent and acked out of order, {commits} commits, {} in flight; \
         the final commit is the last offset of every partition",
        tracker.in_flight()
    );
}
