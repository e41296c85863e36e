//! One transactional consume → transform → produce worker (the
//! `exactly-once-worker` process).
//!
//! Task `k` of `T` owns the source partitions `p` with `p % T == k`, under
//! the transactional id `<group>-task-<k>`, stable across restarts: a
//! successor's `init_transactions` fences its predecessor and aborts what
//! that one left open. Then it reads the group's committed offsets
//! (`require_stable`: librdkafka asks for them with read_committed) and
//! resumes there.
//!
//! Each transaction (`run_transactions`, the one place the protocol
//! lives): `begin_transaction`; records polled for at most
//! `txn_interval` or `max_per_txn` records, each tracked in an
//! [`inflight::Tracker`] and produced as `p seq` to partition `p` of the
//! sink with its ticket as the delivery opaque (a barrier tracker's
//! [`TrackingContext`] acks it on delivery); `begin_flush` seals, `wait`
//! until every covered record is delivered; the flush's offsets `+ 1` go
//! into the transaction (`send_offsets_to_transaction` with the
//! consumer's group metadata); `commit_transaction`; `Flush::commit`.
//! Every call is bounded by a deadline. An abortable error is a rewind,
//! not a merge: `abort_transaction`, revoke every owned partition (the
//! ended life's records count no more), assign the source again at the
//! offsets last committed. A fatal or fenced error, or a call that got no
//! answer in time, ends the process (the broker refuses the epoch bump
//! that would let the producer go on; a successor's init is the
//! recovery).
//!
//! The worker reports each phase on stdout (`phase NAME N`) and, at each,
//! waits for a line on stdin (`go`) before it goes on: the driver kills at
//! a chosen point by counting lines, never by sleeping. The end of stdin
//! ends the process.

use crate::kafka::client_config;
use crate::Error;
use inflight::Tracker;
use inflight_rdkafka::{TicketOpaque, TrackingContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    pub brokers: String,
    pub source: String,
    pub sink: String,
    pub group: String,
    pub task: i32,
    pub tasks: i32,
    /// The source's end per partition: the worker is done once it has
    /// committed every owned partition up to it.
    pub ends: Vec<i64>,
    pub txn_interval: Duration,
    pub max_per_txn: usize,
    /// What the phases do: wait for the driver's `go`, print, or nothing.
    pub phases: Phases,
    /// The bound of every transactional call.
    pub call_timeout: Duration,
    /// Whose transaction loop: this module's or the crate's.
    pub api: Api,
    /// When the direct loop calls `commit_transaction`: after `wait` (the
    /// default), or (measurements only) also after librdkafka's count, or
    /// right after the seal.
    pub commit: Commit,
}

/// When the direct transaction loop commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// `begin_flush` seals, `wait` until every covered record is
    /// delivered, the offsets in, `commit_transaction`: the commit has
    /// nothing left to flush.
    AfterWait,
    /// As `AfterWait`, then until librdkafka counts nothing in flight
    /// (`in_flight_count`, its `outq_len`: a message is counted until it is
    /// destroyed, after its delivery callback, where the tracker's ack
    /// already woke `wait`), yielding the thread, at most the call
    /// timeout: `commit_transaction`'s own flush finds nothing to poll for.
    /// For `exactly-once-throughput`'s comparison; `--api direct` only.
    AfterDrain,
    /// `begin_flush` seals, the offsets consumed in, `commit_transaction`
    /// at once, with records still in flight: rust-rdkafka's
    /// `commit_transaction` flushes them itself, polling 100 ms at a time.
    /// `wait` afterwards (delivered by then) and its offsets checked
    /// against the ones committed. For `exactly-once-throughput`'s
    /// comparison; `--api direct` only.
    WithoutWait,
}

/// Which transaction loop a worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// This module's, on rdkafka's transactional producer and a barrier
    /// tracker: every step gated.
    Direct,
    /// `inflight_rdkafka::transaction::ExactlyOnce`
    /// ([`crate_worker`](super::crate_worker)): `sent`, `delivered` and
    /// `committed` gated.
    Crate,
}

impl Api {
    /// The phases a driver can kill at, in the order of a transaction.
    pub fn points(self) -> &'static [&'static str] {
        match self {
            Api::Direct => &["sent", "flushed", "offsets", "committed"],
            Api::Crate => &["sent", "delivered", "committed"],
        }
    }

    /// Where a zombie is stopped: its records in the log, its commit not
    /// yet asked for.
    pub fn zombie_point(self) -> &'static str {
        match self {
            Api::Direct => "offsets",
            Api::Crate => "delivered",
        }
    }
}

impl TxnConfig {
    /// The transactional id of task `task` of `group`.
    pub fn transactional_id(group: &str, task: i32) -> String {
        format!("{group}-task-{task}")
    }

    pub(crate) fn owned(&self) -> Vec<i32> {
        (0..self.ends.len() as i32)
            .filter(|p| p % self.tasks == self.task)
            .collect()
    }
}

type Sink = ThreadedProducer<TrackingContext<i32, i64>>;

/// How a worker's run ended.
#[derive(Debug)]
pub enum Ended {
    /// Every owned partition committed up to its end.
    Done {
        transactions: u64,
        rewinds: u64,
        /// Summed over the committed transactions: from the end of the
        /// records (the seal) to the commit's return.
        ending: Duration,
        /// Summed over the committed transactions: in the commit call
        /// (`commit_transaction`; the crate's `commit_to_group`).
        committing: Duration,
        /// The commit calls that took [`SLOW_COMMIT`] or more.
        slow_commits: u64,
    },
    /// The driver closed stdin.
    Closed,
}

/// A commit call this long or longer counts as slow: half of one of
/// rust-rdkafka's 100 ms flush polls (`commit_transaction` flushes first,
/// polling 100 ms at a time while librdkafka counts anything in flight).
pub const SLOW_COMMIT: Duration = Duration::from_millis(50);

/// What a worker does at each phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phases {
    /// Print the phase line, then wait for a line on stdin (the driver's
    /// `go`); the end of stdin ends the worker.
    Gate,
    /// Nothing (an in-process run, for throughput).
    Quiet,
}

/// The phase line and the gate.
pub(crate) struct Gate {
    phases: Phases,
}

impl Gate {
    /// Reports `line`; with the gate, waits for the driver's `go`. False
    /// when stdin ended.
    pub(crate) fn pass(&self, line: &str) -> Result<bool, Error> {
        self.say(line)?;
        if self.phases != Phases::Gate {
            return Ok(true);
        }
        let mut answer = String::new();
        let read = std::io::stdin().lock().read_line(&mut answer)?;
        Ok(read > 0)
    }

    /// Reports `line` unless quiet.
    pub(crate) fn say(&self, line: &str) -> Result<(), Error> {
        if self.phases != Phases::Quiet {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")?;
            out.flush()?;
        }
        Ok(())
    }
}

/// A transactional call's failure, in librdkafka's error classes.
fn class(e: &KafkaError) -> &'static str {
    match e {
        KafkaError::Transaction(e) if e.is_fatal() => "fatal",
        KafkaError::Transaction(e) if e.txn_requires_abort() => "abortable",
        KafkaError::Transaction(e) if e.is_retriable() => "retriable",
        _ => "other",
    }
}

fn abortable(e: &KafkaError) -> bool {
    class(e) == "abortable"
}

fn txn_error(what: &str, e: &KafkaError) -> Error {
    Error::kafka(what, format!("{e} ({})", class(e)))
}

/// Retries a retriable transactional call until `deadline`.
fn with_deadline(
    what: &str,
    deadline: Instant,
    mut call: impl FnMut(Duration) -> Result<(), KafkaError>,
) -> Result<(), KafkaError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match call(left.max(Duration::from_millis(1))) {
            Ok(()) => return Ok(()),
            Err(e) if class(&e) == "retriable" && !left.is_zero() => {
                eprintln!("{what}: {e}: retrying until the deadline");
            }
            Err(e) => return Err(e),
        }
    }
}

/// Runs the worker: init (fencing any predecessor), resume from the
/// group's committed offsets, then transactions until done.
pub fn run(config: &TxnConfig) -> Result<Ended, Error> {
    if config.api == Api::Crate {
        if config.commit != Commit::AfterWait {
            return Err(Error::Other(
                "a commit other than after wait: the direct loop only (--api direct)".into(),
            ));
        }
        let gate = Gate {
            phases: config.phases,
        };
        return super::crate_worker::run(config, &gate);
    }
    let tracker = Arc::new(Tracker::<i32, i64>::new());
    let producer: Sink = client_config(&config.brokers)
        .set(
            "transactional.id",
            TxnConfig::transactional_id(&config.group, config.task),
        )
        // Plain batches: the verifier reads the raw log and decompresses
        // nothing.
        .set("compression.type", "none")
        .set("linger.ms", "5")
        .set("transaction.timeout.ms", "60000")
        .create_with_context(TrackingContext::new(tracker.clone()))
        .map_err(|e| Error::kafka("creating the transactional producer", e))?;
    let consumer: BaseConsumer = client_config(&config.brokers)
        .set("group.id", &config.group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "20")
        .create()
        .map_err(|e| Error::kafka("creating the consumer", e))?;
    let deadline = Instant::now() + config.call_timeout;
    with_deadline("init_transactions", deadline, |t| {
        producer.init_transactions(t)
    })
    .map_err(|e| txn_error("init_transactions", &e))?;
    let owned = config.owned();
    let mut wanted = TopicPartitionList::new();
    for &p in &owned {
        wanted.add_partition(&config.source, p);
    }
    let committed = consumer
        .committed_offsets(wanted, config.call_timeout)
        .map_err(|e| Error::kafka("reading the committed offsets", e))?;
    let mut positions = BTreeMap::new();
    for &p in &owned {
        let at = match committed
            .find_partition(&config.source, p)
            .map(|e| e.offset())
        {
            Some(Offset::Offset(at)) => at,
            _ => 0,
        };
        positions.insert(p, at);
    }
    let gate = Gate {
        phases: config.phases,
    };
    if !gate.pass(&format!("ready {positions:?}"))? {
        return Ok(Ended::Closed);
    }
    run_transactions(config, &producer, &consumer, &tracker, positions, &gate)
}

/// Assigns the owned source partitions at `positions`.
pub(crate) fn assign(
    consumer: &BaseConsumer,
    source: &str,
    positions: &BTreeMap<i32, i64>,
) -> Result<(), Error> {
    let mut assignment = TopicPartitionList::new();
    for (&p, &at) in positions {
        assignment
            .add_partition_offset(source, p, Offset::Offset(at))
            .map_err(|e| Error::kafka("assignment", e))?;
    }
    consumer
        .assign(&assignment)
        .map_err(|e| Error::kafka("assigning the source", e))
}

/// The transaction loop: the one function that holds the protocol (see
/// the module docs), so that a crate-level transactional flush can take
/// its place.
fn run_transactions(
    config: &TxnConfig,
    producer: &Sink,
    consumer: &BaseConsumer,
    tracker: &Tracker<i32, i64>,
    mut committed: BTreeMap<i32, i64>,
    gate: &Gate,
) -> Result<Ended, Error> {
    let metadata = consumer
        .group_metadata()
        .ok_or_else(|| Error::Other("the consumer has no group metadata".into()))?;
    assign(consumer, &config.source, &committed)?;
    // The next offset to consume per owned partition.
    let mut position = committed.clone();
    let (mut transactions, mut rewinds) = (0_u64, 0_u64);
    let (mut ending, mut committing) = (Duration::ZERO, Duration::ZERO);
    let mut slow_commits = 0;
    let done = |at: &BTreeMap<i32, i64>| at.iter().all(|(&p, &at)| at >= config.ends[p as usize]);
    loop {
        if done(&committed) {
            gate.say(&format!(
                "done {transactions} transactions, {rewinds} rewinds, at {committed:?}"
            ))?;
            return Ok(Ended::Done {
                transactions,
                rewinds,
                ending,
                committing,
                slow_commits,
            });
        }
        let n = transactions + 1;
        producer
            .begin_transaction()
            .map_err(|e| txn_error("begin_transaction", &e))?;
        if !gate.pass(&format!("phase begin {n}"))? {
            return Ok(Ended::Closed);
        }
        match transaction(
            config,
            producer,
            consumer,
            tracker,
            &metadata,
            gate,
            n,
            &mut position,
        )? {
            Outcome::Committed {
                offsets,
                ending: this_ending,
                committing: this_committing,
            } => {
                committed.extend(offsets);
                transactions += 1;
                ending += this_ending;
                committing += this_committing;
                slow_commits += u64::from(this_committing >= SLOW_COMMIT);
            }
            Outcome::Closed => return Ok(Ended::Closed),
            Outcome::Rewind(why) => {
                rewinds += 1;
                gate.say(&format!("rewind {n}: {why}"))?;
                let deadline = Instant::now() + config.call_timeout;
                with_deadline("abort_transaction", deadline, |t| {
                    producer.abort_transaction(t)
                })
                .map_err(|e| txn_error("abort_transaction", &e))?;
                // A barrier tracker: the ended life's committable is
                // nothing to take, its records are aborted with it.
                for p in committed.keys() {
                    let _ = tracker.revoke(p);
                }
                assign(consumer, &config.source, &committed)?;
                position = committed.clone();
            }
        }
    }
}

enum Outcome {
    /// The offsets (next to consume) the transaction committed, the time
    /// from the seal to the commit's return and the time in
    /// `commit_transaction`.
    Committed {
        offsets: BTreeMap<i32, i64>,
        ending: Duration,
        committing: Duration,
    },
    Rewind(String),
    Closed,
}

/// One open transaction, from the first record to its commit.
#[allow(clippy::too_many_arguments)]
fn transaction(
    config: &TxnConfig,
    producer: &Sink,
    consumer: &BaseConsumer,
    tracker: &Tracker<i32, i64>,
    metadata: &rdkafka::consumer::ConsumerGroupMetadata,
    gate: &Gate,
    n: u64,
    position: &mut BTreeMap<i32, i64>,
) -> Result<Outcome, Error> {
    let started = Instant::now();
    let before = position.clone();
    let mut sent = 0;
    // Until the interval or the record limit, or the source's end: no
    // transaction waits for records that will not come.
    let at_end = |position: &BTreeMap<i32, i64>| {
        position
            .iter()
            .all(|(&p, &at)| at >= config.ends[p as usize])
    };
    while sent < config.max_per_txn && !at_end(position) {
        let left = config.txn_interval.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        let message = match consumer.poll(left) {
            None => continue,
            Some(Err(e)) => return Ok(Outcome::Rewind(format!("consume: {e}"))),
            Some(Ok(message)) => message,
        };
        let (p, offset) = (message.partition(), message.offset());
        let seq = message
            .payload()
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.split(' ').nth(1)?.parse::<u64>().ok())
            .ok_or_else(|| Error::Other(format!("source record {p}/{offset} is not `p seq`")))?;
        let ticket = tracker
            .send(p, offset)
            .map_err(|e| Error::Other(format!("tracking {p}/{offset}: {e}")))?;
        let payload = format!("{p} {seq}");
        let mut record = BaseRecord::<(), String, TicketOpaque>::with_opaque_to(
            &config.sink,
            TicketOpaque::from(ticket),
        )
        .partition(p)
        .payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, back)) if inflight_rdkafka::producer::is_queue_full(&e) => {
                    record = back;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, back)) => {
                    let _ = back.delivery_opaque.fail(tracker);
                    return Ok(Outcome::Rewind(format!("send: {e}")));
                }
            }
        }
        sent += 1;
        position.insert(p, offset + 1);
    }
    // Mid-transaction: records sent, not all delivered yet.
    if !gate.pass(&format!("phase sent {n} {sent}"))? {
        return Ok(Outcome::Closed);
    }
    let sealed = Instant::now();
    let mut flush = tracker
        .begin_flush()
        .map_err(|e| Error::Other(format!("begin_flush: {e}")))?;
    let next: BTreeMap<i32, i64> = match config.commit {
        Commit::AfterWait | Commit::AfterDrain => {
            let offsets = match flush.wait(config.call_timeout) {
                Ok(offsets) => offsets,
                Err(e) => return Ok(Outcome::Rewind(format!("flush: {e}"))),
            };
            if config.commit == Commit::AfterDrain {
                let deadline = Instant::now() + config.call_timeout;
                while producer.in_flight_count() > 0 && Instant::now() < deadline {
                    std::thread::yield_now();
                }
            }
            if !gate.pass(&format!("phase flushed {n}"))? {
                return Ok(Outcome::Closed);
            }
            offsets.into_iter().map(|(p, o)| (p, o + 1)).collect()
        }
        // What this transaction consumed: every record consumed was sent
        // into it (checked against `wait` after the commit).
        Commit::WithoutWait => position
            .iter()
            .filter(|&(p, at)| before.get(p) != Some(at))
            .map(|(&p, &at)| (p, at))
            .collect(),
    };
    let mut list = TopicPartitionList::new();
    for (&p, &at) in &next {
        list.add_partition_offset(&config.source, p, Offset::Offset(at))
            .map_err(|e| Error::kafka("offsets", e))?;
    }
    let deadline = Instant::now() + config.call_timeout;
    match with_deadline("send_offsets_to_transaction", deadline, |t| {
        producer.send_offsets_to_transaction(&list, metadata, t)
    }) {
        Ok(()) => {}
        Err(e) if abortable(&e) => return Ok(Outcome::Rewind(format!("send offsets: {e}"))),
        Err(e) => return Err(txn_error("send_offsets_to_transaction", &e)),
    }
    if !gate.pass(&format!("phase offsets {n}"))? {
        return Ok(Outcome::Closed);
    }
    let commit_started = Instant::now();
    let deadline = commit_started + config.call_timeout;
    match with_deadline("commit_transaction", deadline, |t| {
        producer.commit_transaction(t)
    }) {
        Ok(()) => {}
        Err(e) if abortable(&e) => return Ok(Outcome::Rewind(format!("commit: {e}"))),
        Err(e) => return Err(txn_error("commit_transaction", &e)),
    }
    let committing = commit_started.elapsed();
    if config.commit == Commit::WithoutWait {
        // The commit flushed the producer: every record is delivered and
        // the tracker's offsets must be the ones committed.
        let offsets = flush
            .wait(config.call_timeout)
            .map_err(|e| Error::Other(format!("wait after the commit: {e}")))?;
        let delivered: BTreeMap<i32, i64> = offsets.into_iter().map(|(p, o)| (p, o + 1)).collect();
        if delivered != next {
            return Err(Error::Other(format!(
                "transaction {n} committed offsets {next:?}, the tracker's are {delivered:?}"
            )));
        }
    }
    let ending = sealed.elapsed();
    flush
        .commit()
        .map_err(|e| Error::Other(format!("Flush::commit: {e}")))?;
    if !gate.pass(&format!("phase committed {n} {sent}"))? {
        return Ok(Outcome::Closed);
    }
    Ok(Outcome::Committed {
        offsets: next,
        ending,
        committing,
    })
}
