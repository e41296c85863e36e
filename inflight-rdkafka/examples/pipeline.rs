//! A consume → process → produce pipeline in a consumer group, committing
//! exactly what was delivered:
//!
//! ```text
//! cargo run -p inflight-rdkafka --release --example pipeline -- BROKERS SOURCE SINK GROUP [SECONDS]
//! ```
//!
//! Each record of `SOURCE` is processed on a pool of threads (out of order,
//! with random delays), its result produced to `SINK` with the record's
//! ticket as the delivery opaque; the delivery acks the source record, and
//! every 100 ms the source offsets are committed with their progress as
//! metadata (a commit that fails is made again at the next one). On a
//! rebalance (start a second copy with the same `GROUP` to see one) the
//! revoked partitions are handed off (drained for up to 5 s, committed,
//! revoked), outside rdkafka's callback: the loop goes on polling, and the
//! regular commit finishes the hand-off when the records are delivered; on
//! assignment the committed progress is read back, and
//! records done before are skipped; a context of the example's own prints
//! both, wrapped by `HandOffContext`. No record is dropped: a send the
//! tracker refuses (at capacity, or at a partition's metadata budget)
//! waits for room and is retried, and so is one the producer refuses while
//! its queue is full (`SendTracked::send_tracked_timeout`). No released
//! record is produced: a worker asks `is_current` before it produces, and
//! a capacity keeps the records in flight few enough to drain within the
//! hand-off's bound. Runs for `SECONDS` (default 30), then stops cleanly,
//! with the recipe of `HandOffContext`'s docs: stop consuming, finish a
//! waiting hand-off, let every record deliver, commit, leave the group
//! (which hands the partitions off). `examples/async_pipeline.rs` is the
//! same pipeline on tokio.

use inflight::mode::Progress;
use inflight::{ProgressTracker, SendError, Tracker};
use inflight_rdkafka::{
    commit_progress, finish_hand_off, HandOffContext, OnRebalance, Resumable, SendTracked,
    TicketOpaque, TopicPartition, TrackingContext,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{ClientContext, Message};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Pipeline = ProgressTracker<TopicPartition, i64>;

/// Records in flight at most: what the workers and the sink finish well
/// within the hand-off's 5 s drain (the pool here takes about 4,000 a
/// second: four threads, 1 ms each on average).
const CAPACITY: usize = 2_048;

/// The example's own consumer context: it prints each rebalance.
/// `HandOffContext` wraps it and still calls it.
struct Announce;

impl ClientContext for Announce {}
impl ConsumerContext for Announce {}

impl OnRebalance for Announce {
    fn pre_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        _: &K,
        rebalance: &Rebalance<'_>,
    ) {
        if let Rebalance::Revoke(partitions) = rebalance {
            eprintln!("revoked {partitions:?}: handing them off");
        }
    }

    fn post_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        consumer: &K,
        rebalance: &Rebalance<'_>,
    ) {
        if let Rebalance::Revoke(_) = rebalance {
            // How many records in flight it released, how its final
            // commit went.
            if let Some(done) = consumer.context().last_hand_off() {
                eprintln!("{done}");
            }
        }
        if let Rebalance::Assign(partitions) = rebalance {
            let resume = consumer.context().resume();
            for element in partitions.elements() {
                let partition = TopicPartition::new(element.topic(), element.partition());
                match resume.get(&partition) {
                    Some(progress) => {
                        eprintln!("assigned {partition:?}: resuming at {}", progress.next())
                    }
                    None => eprintln!("assigned {partition:?}: no commit yet"),
                }
            }
        }
    }
}

type Context = HandOffContext<Progress, Announce>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [brokers, source, sink, group] = [0, 1, 2, 3].map(|i| {
        args.get(i)
            .cloned()
            .unwrap_or_else(|| panic!("usage: pipeline BROKERS SOURCE SINK GROUP [SECONDS]"))
    });
    let seconds: u64 = args.get(4).map_or(30, |s| s.parse().expect("SECONDS"));

    // Each partition's progress within Kafka's default metadata budget.
    // The capacity bounds the records in flight, so that a hand-off's
    // drain (5 s, below) can finish them: size it to what the sink takes in
    // well under that bound. Without one, a rebalance releases the records
    // still queued for the workers, and the next owner redoes them.
    let tracker: Arc<Pipeline> =
        Arc::new(Tracker::builder().capacity(CAPACITY).progress(4096).build());
    let context =
        HandOffContext::wrap(Announce, tracker.clone(), Duration::from_secs(5)).defer_hand_off();
    let consumer: BaseConsumer<Context> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "range")
        .create_with_context(context)
        .expect("consumer");
    consumer.subscribe(&[&source]).expect("subscribe");
    let producer: Arc<ThreadedProducer<TrackingContext<TopicPartition, i64, Progress>>> = Arc::new(
        ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("acks", "all")
            .create_with_context(TrackingContext::new(tracker.clone()))
            .expect("producer"),
    );

    // The processing pool: each job is a record and its ticket.
    let (jobs, queue) = mpsc::channel::<(Vec<u8>, TicketOpaque)>();
    let queue = Arc::new(std::sync::Mutex::new(queue));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (queue, producer, sink) = (queue.clone(), producer.clone(), sink.clone());
            std::thread::spawn(move || {
                let mut seed = 0x9e37_79b9_u64 + w;
                loop {
                    let job = queue.lock().unwrap().recv();
                    let Ok((payload, ticket)) = job else { return };
                    let tracker = producer.context().tracker();
                    if !tracker.is_current_raw(ticket.raw()) {
                        // Its partition was handed off (a rebalance) since
                        // it was consumed: the next owner produces it.
                        // Failing the ticket of an ended life changes
                        // nothing that is committed.
                        let _ = ticket.fail(tracker);
                        continue;
                    }
                    // "Processing": a random delay, so acks come out of order.
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    std::thread::sleep(Duration::from_micros(seed % 2_000));
                    let result = [b"processed: ".as_slice(), &payload].concat();
                    let record =
                        BaseRecord::<(), [u8], TicketOpaque>::with_opaque_to(&sink, ticket)
                            .payload(&result);
                    // While the producer's queue is full, wait for room (its
                    // deliveries make it); a record refused for good has its
                    // ticket failed: it is redone after a restart.
                    if let Err(e) = producer.send_tracked_timeout(record, Duration::from_secs(30)) {
                        eprintln!("produce: {e}");
                    }
                }
            })
        })
        .collect();

    let started = Instant::now();
    let mut last_commit = Instant::now();
    let (mut consumed, mut skipped) = (0_u64, 0_u64);
    while started.elapsed() < Duration::from_secs(seconds) {
        if let Some(message) = consumer.poll(Duration::from_millis(20)) {
            let message = match message {
                Ok(message) => message,
                Err(e) => {
                    eprintln!("consume: {e}"); // librdkafka retries on its own
                    continue;
                }
            };
            let partition = TopicPartition::new(message.topic(), message.partition());
            if consumer.context().skip(&partition, message.offset()) {
                // Done before this consumer had the partition, or the
                // partition is being handed off (its next owner's).
                skipped += 1;
            } else {
                // A refused record is never dropped: at the capacity or the
                // metadata budget (a stuck record) the partition owes this
                // offset, and nothing after it could be tracked anyway, so
                // wait for room (the deliveries' acks make it) and retry
                // the same record.
                let mut record = (partition, message.offset());
                let sent = loop {
                    match tracker.send_timeout(record.0, record.1, Duration::from_secs(1)) {
                        Err(SendError::Full(partition, offset, _)) => {
                            eprintln!("waiting for room for {partition:?}@{offset}");
                            record = (partition, offset);
                        }
                        other => break other,
                    }
                };
                match sent {
                    Ok(ticket) => {
                        let payload = message.payload().unwrap_or_default().to_vec();
                        jobs.send((payload, TicketOpaque::from(ticket)))
                            .expect("workers");
                        consumed += 1;
                    }
                    // Fetched again after a higher offset of the same life
                    // was sent: it is on its way already.
                    Err(SendError::OutOfOrder(..)) => skipped += 1,
                    // `Closed` cannot happen: only the clean stop closes.
                    Err(e) => eprintln!("tracker: {e}"),
                }
            }
        }
        if last_commit.elapsed() >= Duration::from_millis(100) {
            // A commit that fails (here or in its callback) is made
            // again at the next call. It also finishes a revocation's
            // hand-off once the revoked partitions' records are delivered.
            if let Err(e) = commit_progress(&consumer, CommitMode::Async) {
                eprintln!("commit: {e}");
            }
            last_commit = Instant::now();
        }
    }

    // The clean stop (`HandOffContext`'s recipe, as in
    // `examples/async_pipeline.rs`).
    // 1. Stop taking records: the workers end when the queue is empty.
    drop(jobs);
    // 2. A deferred hand-off that still waits ends (within its bound; its
    //    records are with the workers, who deliver them meanwhile).
    finish_hand_off(&consumer);
    // 3. Every record in flight delivered (or failed).
    for worker in workers {
        worker.join().expect("a worker");
    }
    if let Err(e) = producer.flush(Duration::from_secs(30)) {
        eprintln!("flush: {e}");
    }
    if let Err(e) = tracker.drain(Duration::from_secs(30)) {
        eprintln!("not everything delivered: {e} (redone after a restart)");
    }
    // 4. Commit it all.
    if let Err(e) = commit_progress(&consumer, CommitMode::Sync) {
        eprintln!("final commit: {e} (redone after a restart)");
    }
    // 5. Leave the group: the revocation hands the partitions off (nothing
    //    is in flight: at once) in a poll; then drop the consumer.
    consumer.unsubscribe();
    let deadline = Instant::now() + Duration::from_secs(10);
    while consumer.assignment().is_ok_and(|a| a.count() > 0) && Instant::now() < deadline {
        consumer.poll(Duration::from_millis(50));
    }
    let (delivered, failed, _) = producer.context().counts();
    let context = consumer.context();
    println!(
        "pipeline: {consumed} consumed, {skipped} skipped as done, {delivered} delivered, {failed} failed, {} commits failed (and made again), errors {:?}",
        context.commit_failures(),
        context.errors()
    );
}
