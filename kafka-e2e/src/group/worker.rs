//! One worker of the consumer group: consume the source, process each
//! record on a pool of threads (random delays: acks out of order), produce
//! the result to the sink with the record's ticket as the delivery opaque
//! ([`TicketOpaque`]; [`TrackingContext`]'s delivery callback acks it, so a
//! record is done only once its result is delivered), and every 100 ms
//! [`commit_progress`]: each owned partition's progress saved in a
//! [`TopicStore`] (awaited), then committed to the group.
//!
//! The consumer's context is `inflight_rdkafka`'s [`HandOffContext`],
//! around the [ledger](super::ledger)'s [`Claims`]: on revocation the
//! context's hand-off (a bounded `drain_partition`, the final commit,
//! `revoke`), deferred: rdkafka's callback pauses the partitions and
//! returns, and the loop's next [`commit_progress`] finishes the hand-off
//! once their records are delivered (or the bound passed), then a
//! *release*; on assignment a *claim* and the wait for
//! the previous owner's release, then the context's read-back from the
//! store, then the partitions start a little early (see
//! [`REFETCH_WINDOW`](super::claims::REFETCH_WINDOW)). A record is
//! skipped when the context says it was done
//! ([`HandOffContext::is_done`]). All of it runs on the consumer's polling
//! thread, as the commits do, so nothing of a partition is saved after its
//! release.
//!
//! With metadata the tracker is a progress tracker
//! ([`Builder::progress`](inflight::Builder::progress), with offsets
//! inline: `HandOffContext<Inline<Progress>>`), whose progress
//! past the first gap is saved and read back; without, a watermark
//! tracker (`HandOffContext<Watermarks>`), which commits
//! [`committable`](Tracker::committable) `+ 1` and nothing past it.

use super::claims::{Admit, Claims};
pub use super::events::{Events, WorkerEvent};
use super::ledger::Writer;
use super::saves::Reported;
use super::Rng;
use crate::kafka::{self, client_config};
use crate::Error;
use inflight::mode::{Inline, Progress, Watermarks};
use inflight::{SendError, Tracker};
use inflight_rdkafka::producer::is_queue_full;
use inflight_rdkafka::{
    commit_progress, finish_hand_off, HandOffContext, Resumable, TicketOpaque, TopicPartition,
    TopicStore, TrackingContext,
};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub brokers: String,
    pub source: String,
    pub sink: String,
    /// The ledger topic (one partition): claims and releases.
    pub ledger: String,
    /// The progress store's topic (one partition, compacted).
    pub store: String,
    pub group: String,
    /// Unique per process (incarnation): written into each sink record.
    pub name: String,
    /// Progress metadata on (a progress tracker, resuming past the first
    /// gap) or off (watermark commits, resuming at the committed offset).
    pub metadata: bool,
    /// Processing threads.
    pub threads: usize,
    /// Per mille of records that take [`slow`](Self::slow) to process.
    pub slow_per_mille: u64,
    pub slow: Duration,
    /// The others take a random time below this.
    pub fast_max: Duration,
    pub seed: u64,
    pub commit_every: Duration,
    /// How long a new owner waits for the previous owner's release.
    pub release_wait: Duration,
    /// How long the hand-off waits for a revoked partition's records.
    pub drain_timeout: Duration,
    /// The group session: a member silent this long is dropped.
    pub session_timeout: Duration,
    /// `Some(n)`: no group membership; own partitions `0..n` from the
    /// start (no claims, no releases: the only worker; commits still go to
    /// the store and the group). The throughput run uses it: saturated,
    /// tansu 0.6.0 was seen to revoke a lone member's partitions and never
    /// assign them again.
    pub static_partitions: Option<i32>,
}

impl WorkerConfig {
    /// The system test's defaults for worker `name` on topics `prefix-*`.
    pub fn new(brokers: &str, prefix: &str, name: &str, metadata: bool) -> WorkerConfig {
        WorkerConfig {
            brokers: brokers.into(),
            source: format!("{prefix}-source"),
            sink: format!("{prefix}-sink"),
            ledger: format!("{prefix}-ledger"),
            store: format!("{prefix}-progress"),
            group: format!("{prefix}-group"),
            name: name.into(),
            metadata,
            threads: 8,
            slow_per_mille: 5,
            slow: Duration::from_millis(500),
            fast_max: Duration::from_micros(1_000),
            seed: 1,
            commit_every: Duration::from_millis(100),
            release_wait: Duration::from_secs(8),
            drain_timeout: Duration::from_secs(10),
            session_timeout: Duration::from_secs(6),
            static_partitions: None,
        }
    }
}

/// What a clean stop found.
#[derive(Debug, Default, Clone)]
pub struct WorkerReport {
    /// Records sent to the tracker and processed.
    pub consumed: u64,
    /// Records skipped as done before the partition came here.
    pub skipped: u64,
    /// Records below the resume offset, fetched again and skipped (see
    /// [`REFETCH_WINDOW`](super::claims::REFETCH_WINDOW)).
    pub refetched: u64,
    /// Sink records delivered and failed.
    pub delivered: u64,
    pub failed: u64,
    /// Errors reported.
    pub errors: u64,
}

/// A record to process.
struct Job {
    partition: i32,
    seq: u64,
    ticket: TicketOpaque,
}

type SinkProducer<M> = ThreadedProducer<TrackingContext<TopicPartition, i64, M>>;

/// Runs a worker until `stop`, then stops it cleanly: leave the group (the
/// hand-off releases every partition), let every record deliver.
pub fn run(config: WorkerConfig, stop: &AtomicBool, events: Events) -> Result<WorkerReport, Error> {
    kafka::check_reachable(&config.brokers, kafka::CONNECT_TIMEOUT)?;
    if config.metadata {
        // Offsets inline (Kafka's `i64` qualifies): the run with metadata
        // takes the inline path end to end, the run without the held one.
        let tracker = Tracker::builder().inline_offsets().progress(4096).build();
        run_with::<Inline<Progress>>(config, Arc::new(tracker), stop, events)
    } else {
        let tracker = Tracker::builder().watermarks().build();
        run_with::<Watermarks>(config, Arc::new(tracker), stop, events)
    }
}

fn run_with<M: Resumable>(
    config: WorkerConfig,
    tracker: Arc<Tracker<TopicPartition, i64, M>>,
    stop: &AtomicBool,
    events: Events,
) -> Result<WorkerReport, Error> {
    let producer: Arc<SinkProducer<M>> = Arc::new(
        client_config(&config.brokers)
            .set("linger.ms", "5")
            .set("acks", "all")
            .set("queue.buffering.max.messages", "100000")
            .create_with_context(TrackingContext::new(tracker.clone()))
            .map_err(|e| Error::kafka("creating the sink producer", e))?,
    );
    let store = TopicStore::new(
        &client_config(&config.brokers),
        &config.store,
        &config.group,
        Duration::from_secs(5),
    )
    .map_err(|e| Error::kafka("creating the progress store", e))?;
    let claims = Claims::new(
        config.clone(),
        events.clone(),
        Writer::new(&config.brokers, &config.ledger)?,
    );
    // The hand-off's drain runs outside rdkafka's callback: the loop goes
    // on polling, and the regular commit finishes it.
    let context = HandOffContext::wrap(claims, tracker.clone(), config.drain_timeout)
        .store(Reported::new(store, events.clone()))
        .defer_hand_off();
    let consumer: BaseConsumer<HandOffContext<M, Claims>> = client_config(&config.brokers)
        .set("group.id", &config.group)
        .set("client.id", &config.name)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "range")
        .set(
            "session.timeout.ms",
            config.session_timeout.as_millis().to_string(),
        )
        .set(
            "heartbeat.interval.ms",
            (config.session_timeout.as_millis() / 6).to_string(),
        )
        .set("fetch.wait.max.ms", "50")
        .create_with_context(context)
        .map_err(|e| Error::kafka("creating the consumer", e))?;
    let claims = consumer.context().inner();
    match config.static_partitions {
        None => consumer
            .subscribe(&[&config.source])
            .map_err(|e| Error::kafka("subscribing", e))?,
        Some(partitions) => {
            // Fresh topics: nothing to read back, every partition from 0.
            let mut assignment = TopicPartitionList::new();
            for p in 0..partitions {
                assignment
                    .add_partition_offset(&config.source, p, Offset::Beginning)
                    .map_err(|e| Error::kafka("assignment", e))?;
            }
            consumer
                .assign(&assignment)
                .map_err(|e| Error::kafka("assigning", e))?;
            claims.own(&(0..partitions).collect::<Vec<_>>());
            claims.report(WorkerEvent::Assigned((0..partitions).collect()));
        }
    }

    // The processing pool, behind a bounded queue: a hand-off's drain
    // waits for at most that many records.
    let (jobs, queue) = mpsc::sync_channel::<Job>(256);
    let queue = Arc::new(Mutex::new(queue));
    let pool: Vec<_> = (0..config.threads)
        .map(|t| {
            let (queue, producer, config, events) = (
                queue.clone(),
                producer.clone(),
                config.clone(),
                events.clone(),
            );
            thread::Builder::new()
                .name(format!("process-{t}"))
                .spawn(move || process(&config, &queue, &producer, &events, t as u64))
        })
        .collect::<Result<_, _>>()?;

    let mut report = WorkerReport::default();
    let mut partitions: HashMap<i32, TopicPartition> = HashMap::new();
    let mut last_commit = Instant::now();
    let mut leaving: Option<Instant> = None;
    loop {
        if leaving.is_none() && stop.load(Ordering::Acquire) {
            if config.static_partitions.is_some() {
                // No rebalance to hand them off: drain, commit, unassign.
                let owned = claims.owned();
                for &p in &owned {
                    let partition = TopicPartition::new(&config.source, p);
                    if let Err(e) = tracker.drain_partition(&partition, config.drain_timeout) {
                        claims.report(WorkerEvent::Error(format!("drain of {p}: {e}")));
                    }
                }
                if let Err(e) = commit_progress(&consumer, CommitMode::Sync) {
                    claims.report(WorkerEvent::Error(format!("final commit: {e}")));
                }
                consumer
                    .unassign()
                    .map_err(|e| Error::kafka("unassigning", e))?;
                claims.disown(&owned);
                claims.report(WorkerEvent::Revoked(owned));
            } else {
                // A revocation's hand-off that still waits ends first: the
                // group's rebalance waits for it.
                finish_hand_off(&consumer);
                consumer.unsubscribe();
            }
            leaving = Some(Instant::now());
        }
        if let Some(since) = leaving {
            let assigned = consumer.assignment().map_or(0, |a| a.count());
            if assigned == 0 && claims.owns_nothing() {
                break;
            }
            if since.elapsed() > Duration::from_secs(30) {
                return Err(Error::Other("no hand-off within 30s of leaving".into()));
            }
        }
        match consumer.poll(Duration::from_millis(20)) {
            None => {}
            Some(Err(e)) => claims.report(WorkerEvent::Error(format!("consume: {e}"))),
            Some(Ok(message)) if leaving.is_none() => {
                let p = message.partition();
                let offset = message.offset();
                match claims.admit(p, offset) {
                    Admit::NotOurs => continue,
                    Admit::Refetched => {
                        report.refetched += 1;
                        continue;
                    }
                    Admit::Next => {}
                }
                let partition = partitions
                    .entry(p)
                    .or_insert_with(|| TopicPartition::new(&config.source, p))
                    .clone();
                // Done before this worker had the partition, or being
                // handed off (the next owner's).
                if consumer.context().skip(&partition, offset) {
                    report.skipped += 1;
                    continue;
                }
                let seq = message
                    .payload()
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .and_then(|v| v.split(' ').nth(1)?.parse().ok())
                    .unwrap_or(offset as u64);
                match tracker.send(partition, offset) {
                    Ok(ticket) => {
                        report.consumed += 1;
                        let job = Job {
                            partition: p,
                            seq,
                            ticket: TicketOpaque::from(ticket),
                        };
                        if jobs.send(job).is_err() {
                            return Err(Error::Other("the processing pool is gone".into()));
                        }
                    }
                    // Fetched again (offsets rise per life): done or on
                    // its way already.
                    Err(SendError::OutOfOrder(..)) => report.skipped += 1,
                    Err(e) => {
                        return Err(Error::Other(format!("tracker refused {p}/{offset}: {e}")))
                    }
                }
            }
            Some(Ok(_)) => {} // leaving: the hand-off decides
        }
        if last_commit.elapsed() >= config.commit_every {
            // Saved in the store (awaited), then committed to the group;
            // a failure is counted, and its points are due again next time.
            if let Err(e) = commit_progress(&consumer, CommitMode::Async) {
                claims.report(WorkerEvent::Error(format!("commit: {e}")));
            }
            claims.report_context_errors(consumer.context());
            last_commit = Instant::now();
        }
    }
    drop(jobs);
    for thread in pool {
        let _ = thread.join();
    }
    producer
        .flush(Duration::from_secs(30))
        .map_err(|e| Error::kafka("flushing the sink producer", e))?;
    let (delivered, failed, _) = producer.context().counts();
    report.delivered = delivered;
    report.failed = failed;
    let failures = consumer.context().commit_failures();
    if failures > 0 {
        claims.report(WorkerEvent::Error(format!(
            "{failures} group commits failed (each made again)"
        )));
    }
    report.errors = claims.errors();
    drop(consumer); // leaves the group
    Ok(report)
}

/// A processing thread: a random delay, then the result to the sink.
fn process<M: Resumable>(
    config: &WorkerConfig,
    queue: &Mutex<mpsc::Receiver<Job>>,
    producer: &SinkProducer<M>,
    events: &Events,
    thread: u64,
) {
    let mut rng = Rng::new(config.seed ^ (thread + 1).wrapping_mul(0x5851_f42d_4c95_7f2d));
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else { return };
        let delay = if rng.below(1000) < config.slow_per_mille {
            config.slow
        } else {
            let max = config.fast_max.as_micros() as u64;
            Duration::from_micros(if max == 0 { 0 } else { rng.below(max) })
        };
        if !delay.is_zero() {
            thread::sleep(delay); // the "processing"
        }
        let payload = format!("{} {} {}", job.partition, job.seq, config.name);
        let mut record =
            BaseRecord::<(), String, TicketOpaque>::with_opaque_to(&config.sink, job.ticket)
                .partition(job.partition)
                .payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, back)) if is_queue_full(&e) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, back)) => {
                    let _ = back.delivery_opaque.fail(producer.context().tracker());
                    events(WorkerEvent::Error(format!("sink refused {payload:?}: {e}")));
                    break;
                }
            }
        }
    }
}
