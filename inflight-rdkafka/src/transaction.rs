//! Exactly-once: a barrier flush as a Kafka transaction ([`ExactlyOnce`]).
//!
//! Each record goes into the open transaction with its ticket as its
//! delivery opaque; a commit seals the tracker (`begin_flush`), waits
//! until every sealed record is delivered (so rust-rdkafka's
//! `commit_transaction` has nothing left to flush, and never polls
//! 100 ms at a time), puts the source offsets into the same transaction,
//! commits it, and only then commits the flush. Records and source
//! offsets become visible together or not at all: a restart resumes
//! exactly after what was committed, and a `read_committed` reader sees
//! each record once.
//!
//! The source offsets go into the transaction in one of two ways:
//!
//! - **consume → transform → produce**: [`ExactlyOnce::commit_to_group`]
//!   (`send_offsets_to_transaction` with the consumer's group metadata,
//!   KIP-447): the group's committed offset of each source partition,
//!   last done `+ 1`;
//! - **a source task** (files, a database...):
//!   [`ExactlyOnce::commit_to_topic`] writes them as records into an
//!   offsets topic, in [`KafkaOffsetStore`](crate::KafkaOffsetStore)'s
//!   format (KIP-618), so `KafkaOffsetStore::load` reads them back. Read
//!   back only what was committed: on a broker whose fetch does not list
//!   aborted transactions (tansu, see `kafka-e2e/README.md`), a load can
//!   see offsets of aborted transactions; use the group flavour there.
//!
//! # A failed transaction is a rewind
//!
//! Nothing of an aborted transaction may count: not its records, not its
//! source offsets, not the acks of its records that come late. So when a
//! transaction fails in a way that needs an abort (a record not
//! delivered, an abortable error from librdkafka, a flush that timed out),
//! the commit aborts it (and, with [`overlapping`](ExactlyOnceBuilder::overlapping),
//! the one opened after it, whose records come after it in the source),
//! revokes every source partition the pipeline has sent (the ended lives'
//! late acks change nothing), and returns [`Outcome::Rewound`]: seek the
//! source back to what [`Rewind`] says (the committed offsets;
//! [`Rewind::seek`] does it for a consumer), then [`ExactlyOnce::resume`].
//! Until then `send` refuses records with [`TxnError::Rewinding`]. When
//! another thread commits, the thread that reads the source takes the
//! rewind from [`ExactlyOnce::pending_rewind`] and seeks and resumes
//! itself (`examples/transactional_pipeline.rs`).
//!
//! # Rebalances
//!
//! A consumer group's rebalance can move a source partition while the
//! open transaction holds records of it. Commit before the partitions go
//! (in your consumer context's `pre_rebalance` on a revocation, which gets
//! the consumer: `commit_to_group(&consumer.group_metadata()?)`), as
//! Kafka Streams does. A commit after the group moved on carries an old
//! generation, and a broker that checks it refuses the offsets
//! (`ILLEGAL_GENERATION`, abortable: a rewind; [`Rewind::seek`] leaves the
//! partitions no longer assigned alone).
//!
//! # Error classes
//!
//! As librdkafka classes them (`RDKafkaError::is_retriable`,
//! `txn_requires_abort`, `is_fatal`):
//!
//! - **retriable**: the call is made again until the builder's
//!   [`timeout`](ExactlyOnceBuilder::timeout) has passed; past it the
//!   pipeline stops with [`TxnError::TimedOut`] (a commit whose outcome is
//!   unknown cannot be rewound: restart);
//! - **abortable**: abort and rewind ([`Outcome::Rewound`]);
//! - **fatal**, a fenced producer included (another instance initialised
//!   the same transactional id): the pipeline stops with
//!   [`TxnError::Fatal`]; every later call returns [`TxnError::Stopped`].
//!   Drop it and start a new one: the new instance's `init_transactions`
//!   aborts what the old one left open.
//!
//! # Transactional ids
//!
//! One per task, the same across restarts ([`transactional_id`]): a
//! restart's `init_transactions` then fences the instance it replaces
//! (a zombie) and aborts its open transaction. Two instances of one task
//! must never run with different ids: nothing would fence either.
//!
//! # Usage
//!
//! ```no_run
//! use std::time::Duration;
//! use inflight_rdkafka::transaction::{transactional_id, ExactlyOnce, Outcome};
//! use inflight_rdkafka::TopicPartition;
//! use rdkafka::config::ClientConfig;
//! use rdkafka::consumer::{BaseConsumer, Consumer};
//! use rdkafka::producer::BaseRecord;
//! use rdkafka::Message;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let consumer: BaseConsumer = ClientConfig::new()
//!     .set("bootstrap.servers", "127.0.0.1:9092")
//!     .set("group.id", "copy")
//!     .set("enable.auto.commit", "false")
//!     .set("isolation.level", "read_committed")
//!     .create()?;
//! consumer.subscribe(&["source"])?;
//! let mut config = ClientConfig::new();
//! config.set("bootstrap.servers", "127.0.0.1:9092");
//! let txn = ExactlyOnce::<TopicPartition, i64>::builder(&config, &transactional_id("copy", 0))
//!     .build()?;
//! loop {
//!     if let Some(message) = consumer.poll(Duration::from_millis(100)) {
//!         let message = message?;
//!         let source = TopicPartition::new(message.topic(), message.partition());
//!         let record = BaseRecord::<[u8], [u8]>::to("sink").payload(message.payload().unwrap_or_default());
//!         // Refused only while a rewind waits for `resume`, or for good
//!         // (the next commit rewinds).
//!         let _ = txn.send(source, message.offset(), record);
//!     }
//!     # let due = true;
//!     if due {
//!         let group = consumer.group_metadata().ok_or("no group")?;
//!         if let Outcome::Rewound(rewind) = txn.commit_to_group(&group)? {
//!             rewind.seek(&consumer, Duration::from_secs(10))?;
//!             txn.resume()?;
//!         }
//!     }
//! }
//! # }
//! ```

use crate::producer::TicketOpaque;
use context::TxnContext;
use inflight::{FlushError, Tracker};
use rdkafka::config::ClientConfig;
use rdkafka::message::ToBytes;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

mod builder;
mod context;
mod offsets;
mod steps;
pub use builder::ExactlyOnceBuilder;
use steps::Step;
pub use steps::{Rewind, TxnError};

/// The transactional id of `task` in the pipeline `prefix`:
/// `"{prefix}-{task}"`. Keep both the same across restarts: the id is what
/// fences a killed instance's zombie (see the module docs). With
/// [`overlapping`](ExactlyOnceBuilder::overlapping) the producers take
/// this id with `-a` and `-b` appended.
///
/// ```
/// assert_eq!(inflight_rdkafka::transaction::transactional_id("orders-copy", 3), "orders-copy-3");
/// ```
pub fn transactional_id(prefix: &str, task: impl fmt::Display) -> String {
    format!("{prefix}-{task}")
}

/// What a commit did.
#[derive(Debug)]
#[must_use = "a rewind must be followed by a seek of the source and `resume`"]
pub enum Outcome<P, O> {
    /// The transaction committed: its records and these source offsets
    /// (the **last done** offset of each source partition it covered; the
    /// group got them `+ 1`) are in, together.
    Committed(HashMap<P, O>),
    /// The transaction was aborted: seek the source back
    /// ([`Rewind::seek`], or [`Rewind::committed`] by hand), then
    /// [`ExactlyOnce::resume`].
    Rewound(Rewind<P, O>),
}

/// A transactional pipeline: records sent into the open transaction, each
/// commit a barrier flush that commits the transaction with the source
/// offsets in it. See the [module docs](self) for the flow, the rewind and
/// the error classes.
///
/// `send` and the commits take `&self`: share it (`Arc`) between the
/// threads that send and the one that commits. Commits are serialized.
pub struct ExactlyOnce<P, O>
where
    P: Hash + Eq + Clone + Send + Sync + 'static,
    O: Clone + Send + Sync + 'static,
{
    tracker: Arc<Tracker<P, O>>,
    producers: Vec<ThreadedProducer<TxnContext<P, O>>>,
    ids: Vec<String>,
    timeout: Duration,
    /// Which producer holds the open transaction, and whether sends are
    /// let in. A send holds it shared from its ticket to its produce, a
    /// seal exclusively: a record is produced into the transaction whose
    /// flush covers its ticket.
    gate: RwLock<Gate>,
    /// Held through a commit (commits are serialized).
    books: Mutex<Books<P, O>>,
    /// The rewind waiting for `resume` (set and cleared under the gate's
    /// write lock).
    pending: Mutex<Option<Rewind<P, O>>>,
    /// Counts, apart from `books`: read without waiting for a commit.
    stats: Mutex<TxnStats>,
    /// Every source partition sent to: what a rewind revokes.
    seen: Mutex<HashSet<P>>,
    /// A record of the open transaction was refused by the tracker (no
    /// ticket, so no flush sees it): the transaction must not commit, or
    /// later records of its partition would pass over it.
    dropped: AtomicBool,
}

impl<P, O> fmt::Debug for ExactlyOnce<P, O>
where
    P: Hash + Eq + Clone + Send + Sync + 'static,
    O: Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExactlyOnce")
            .field("transactional_ids", &self.ids)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

struct Gate {
    open: usize,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Rewinding,
    Stopped,
}

/// What the commits keep.
struct Books<P, O> {
    /// The last done offset committed for each source partition.
    committed: HashMap<P, O>,
}

impl<P, O> Default for Books<P, O> {
    fn default() -> Self {
        Self {
            committed: HashMap::new(),
        }
    }
}

/// Counts of an [`ExactlyOnce`] ([`ExactlyOnce::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TxnStats {
    /// Transactions sealed: commits begun.
    pub sealed: u64,
    /// Transactions committed.
    pub committed: u64,
    /// Rewinds (aborted transactions).
    pub rewound: u64,
    /// Retriable errors retried.
    pub retried: u64,
    /// How long sends were kept out, all commits together: from each seal
    /// to the next transaction's begin. Without
    /// [`overlapping`](ExactlyOnceBuilder::overlapping) the whole wait and
    /// commit; with it, the seal alone.
    pub paused: Duration,
}

fn deadline_after(timeout: Duration) -> Instant {
    crate::revocation::deadline_after(Instant::now(), timeout)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<P, O> ExactlyOnce<P, O>
where
    P: Hash + Eq + Clone + Send + Sync + 'static,
    O: Clone + Send + Sync + 'static,
{
    /// A builder for the pipeline whose producer(s) take the transactional
    /// id `transactional_id` (see [`transactional_id`]), reaching the
    /// brokers `config` names (its `bootstrap.servers` and security
    /// settings; the builder sets `transactional.id`, `acks` and
    /// idempotence on top).
    pub fn builder(config: &ClientConfig, transactional_id: &str) -> ExactlyOnceBuilder<P, O> {
        ExactlyOnceBuilder {
            config: config.clone(),
            id: transactional_id.to_owned(),
            timeout: Duration::from_secs(30),
            capacity: None,
            overlapping: false,
            _types: std::marker::PhantomData,
        }
    }

    /// Records sent and not yet delivered (nor revoked by a rewind).
    pub fn in_flight(&self) -> usize {
        self.tracker.in_flight()
    }

    /// The producers' transactional ids.
    pub fn transactional_ids(&self) -> &[String] {
        &self.ids
    }

    /// Counts so far.
    pub fn stats(&self) -> TxnStats {
        *lock(&self.stats)
    }

    /// Sends `record` into the open transaction, as the result of source
    /// `partition`'s record at `offset`: its ticket is its delivery
    /// opaque, and the commit that covers it stores `offset` as done once
    /// it is delivered (its own opaque, if any, is replaced).
    ///
    /// Waits for room while the tracker is at capacity or the producer's
    /// queue is full (at most the timeout). A record refused, by the
    /// producer ([`TxnError::Refused`]) or the tracker
    /// ([`TxnError::Tracker`]), makes the next commit rewind: no later
    /// record of its partition may be committed past it. Keep reading;
    /// the rewind seeks back to it. [`TxnError::Rewinding`] until [`resume`](Self::resume)
    /// after a rewind; [`TxnError::Stopped`] after a fatal error.
    pub fn send<K, V, D>(
        &self,
        partition: P,
        offset: O,
        record: BaseRecord<'_, K, V, D>,
    ) -> Result<(), TxnError>
    where
        K: ToBytes + ?Sized,
        V: ToBytes + ?Sized,
        D: rdkafka::util::IntoOpaque,
    {
        let gate = self.read_gate()?;
        match gate.state {
            State::Open => {}
            State::Rewinding => return Err(TxnError::Rewinding),
            State::Stopped => return Err(TxnError::Stopped),
        }
        {
            let mut seen = lock(&self.seen);
            if !seen.contains(&partition) {
                seen.insert(partition.clone());
            }
        }
        let ticket = match self.tracker.send_timeout(partition, offset, self.timeout) {
            Ok(ticket) => ticket,
            Err(error) => {
                // Relaxed: read by the seal, under the gate's write lock,
                // which orders it after this send (held shared).
                self.dropped.store(true, Ordering::Relaxed);
                return Err(TxnError::Tracker(error.to_string()));
            }
        };
        let deadline = deadline_after(self.timeout);
        let mut record = BaseRecord {
            topic: record.topic,
            partition: record.partition,
            payload: record.payload,
            key: record.key,
            timestamp: record.timestamp,
            headers: record.headers,
            delivery_opaque: TicketOpaque::from(ticket),
        };
        let producer = &self.producers[gate.open];
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((error, back))
                    if crate::producer::is_queue_full(&error) && Instant::now() < deadline =>
                {
                    record = back;
                    // The producer's thread serves deliveries, which make
                    // room; wait for one.
                    producer.poll(Duration::from_millis(10));
                }
                Err((error, refused)) => {
                    let _ = refused.delivery_opaque.fail(&self.tracker);
                    return Err(TxnError::Refused(error));
                }
            }
        }
    }

    /// The rewind waiting for [`resume`](Self::resume), if any: what the
    /// commit that rewound returned ([`Outcome::Rewound`]), for the thread
    /// that reads the source when another one commits. That thread seeks
    /// and resumes (a record it read before the seek and sent after the
    /// resume would be produced twice); check it in its loop, or when
    /// `send` returns [`TxnError::Rewinding`].
    pub fn pending_rewind(&self) -> Option<Rewind<P, O>> {
        let gate = self.read_gate().ok()?;
        if gate.state != State::Rewinding {
            return None;
        }
        lock(&self.pending).clone()
    }

    /// After [`Outcome::Rewound`], once the source is sought back: begins
    /// the next transaction and lets sends in again. Nothing to do (`Ok`)
    /// when no rewind is pending.
    pub fn resume(&self) -> Result<(), TxnError> {
        let _books = self.books()?;
        let mut gate = self.write_gate()?;
        match gate.state {
            State::Open => Ok(()),
            State::Stopped => Err(TxnError::Stopped),
            State::Rewinding => {
                // A send refused while rewinding made no ticket; those
                // sent before the rewind were revoked with their lives.
                let open = gate.open;
                self.begin(&mut gate, open)?;
                gate.state = State::Open;
                *lock(&self.pending) = None;
                Ok(())
            }
        }
    }

    /// The gate, shared. A panic of user code (`P`'s or `O`'s `Hash`,
    /// `Eq`, `Clone`, `Serialize`) in the middle of a commit, a rewind or
    /// a resume poisons the gate or the books: the pipeline is stopped
    /// from then on, since its transactions may be half done.
    fn read_gate(&self) -> Result<RwLockReadGuard<'_, Gate>, TxnError> {
        if self.books.is_poisoned() {
            return Err(TxnError::Stopped);
        }
        self.gate.read().map_err(|_| TxnError::Stopped)
    }

    /// The gate, exclusive (see [`read_gate`](Self::read_gate)).
    fn write_gate(&self) -> Result<RwLockWriteGuard<'_, Gate>, TxnError> {
        self.gate.write().map_err(|_| TxnError::Stopped)
    }

    /// The books, held through a commit (see [`read_gate`](Self::read_gate)).
    fn books(&self) -> Result<MutexGuard<'_, Books<P, O>>, TxnError> {
        self.books.lock().map_err(|_| TxnError::Stopped)
    }

    /// Stops the pipeline cleanly: aborts the open transaction, so what
    /// was sent since the last commit is neither committed nor left open
    /// (an open transaction holds back `read_committed` readers of its
    /// partitions until the broker times it out or the next instance's
    /// `init_transactions` aborts it; a broker without a transaction
    /// timeout, such as tansu, holds them until then). Commit first what
    /// should be kept. Dropping the pipeline without `close` leaves the
    /// open transaction to the next instance.
    pub fn close(self) -> Result<(), TxnError> {
        let _books = self.books()?;
        let mut gate = self.write_gate()?;
        if gate.state != State::Open {
            // Stopped: nothing safe to do; rewinding: aborted already.
            return match gate.state {
                State::Stopped => Err(TxnError::Stopped),
                _ => Ok(()),
            };
        }
        gate.state = State::Stopped;
        let producer = &self.producers[gate.open];
        steps::retrying("abort_transaction", deadline_after(self.timeout), |left| {
            producer.abort_transaction(left)
        })
        .map(|_| ())
        .map_err(Step::into_error)
    }

    /// Begins a transaction on producer `index`; a failure stops.
    fn begin(&self, gate: &mut Gate, index: usize) -> Result<(), TxnError> {
        self.producers[index].begin_transaction().map_err(|error| {
            gate.state = State::Stopped;
            TxnError::Fatal {
                doing: "begin_transaction",
                error,
            }
        })
    }

    /// The commit: seal, wait, `write` the offsets into the sealed
    /// transaction, commit it, commit the flush.
    fn commit_with<W>(&self, write: W) -> Result<Outcome<P, O>, TxnError>
    where
        W: FnOnce(&ThreadedProducer<TxnContext<P, O>>, &HashMap<P, O>, Instant) -> Result<(), Step>,
    {
        let mut books = self.books()?;
        let sealed_at = Instant::now();
        let mut gate = self.write_gate()?;
        match gate.state {
            State::Open => {}
            State::Rewinding => return Err(TxnError::Rewinding),
            State::Stopped => return Err(TxnError::Stopped),
        }
        let mut flush = self
            .tracker
            .begin_flush_owned()
            .map_err(|e| TxnError::Tracker(e.to_string()))?;
        let sealed = gate.open;
        lock(&self.stats).sealed += 1;
        // Relaxed: under the write lock (see `send`). A refusal after the
        // seal is the next transaction's.
        let dropped = self.dropped.swap(false, Ordering::Relaxed);
        // Overlapping: the next transaction opens now, and sends go on
        // while this one waits and commits.
        let held: Option<RwLockWriteGuard<'_, Gate>> = if self.producers.len() == 2 {
            let next = 1 - sealed;
            self.begin(&mut gate, next)?;
            gate.open = next;
            drop(gate);
            lock(&self.stats).paused += sealed_at.elapsed();
            None
        } else {
            Some(gate)
        };
        let producer = &self.producers[sealed];
        let done = match flush.wait(self.timeout) {
            Ok(_) if dropped => Err(Step::Abort(
                "the tracker refused a record of the transaction".to_owned(),
            )),
            Ok(offsets) => self.finish(producer, offsets, write),
            Err(FlushError::Failed { failed }) => Err(Step::Abort(format!(
                "{failed} records of the transaction were not delivered"
            ))),
            Err(error) => Err(Step::Abort(format!("waiting for the deliveries: {error}"))),
        };
        let mut gate = match held {
            Some(gate) => gate,
            None => self.write_gate()?,
        };
        match done {
            Ok((offsets, retried)) => {
                lock(&self.stats).retried += retried;
                // Every record covered is delivered and committed: the
                // flush commits (`wait` returned `Ok`, so it cannot fail).
                let _ = flush.commit();
                lock(&self.stats).committed += 1;
                for (partition, offset) in &offsets {
                    books.committed.insert(partition.clone(), offset.clone());
                }
                if self.producers.len() == 1 {
                    // The gate was held through the commit: the next
                    // transaction begins on the same producer.
                    self.begin(&mut gate, sealed)?;
                    lock(&self.stats).paused += sealed_at.elapsed();
                }
                Ok(Outcome::Committed(offsets))
            }
            Err(Step::Abort(cause)) => {
                drop(flush);
                self.rewind(&mut books, &mut gate, sealed, cause)
            }
            Err(Step::Stop(error)) => {
                drop(flush);
                gate.state = State::Stopped;
                Err(error)
            }
        }
    }

    /// Puts the offsets into the sealed transaction and commits it: each
    /// step with a timeout of its own. `Ok` carries the retries.
    fn finish<W>(
        &self,
        producer: &ThreadedProducer<TxnContext<P, O>>,
        offsets: HashMap<P, O>,
        write: W,
    ) -> Result<(HashMap<P, O>, u64), Step>
    where
        W: FnOnce(&ThreadedProducer<TxnContext<P, O>>, &HashMap<P, O>, Instant) -> Result<(), Step>,
    {
        write(producer, &offsets, deadline_after(self.timeout))?;
        drain_in_flight(producer, deadline_after(self.timeout));
        let retried =
            steps::retrying("commit_transaction", deadline_after(self.timeout), |left| {
                producer.commit_transaction(left)
            })?;
        Ok((offsets, retried))
    }

    /// Aborts the sealed transaction (and the open one, overlapping),
    /// revokes every partition sent to, and waits for `resume`.
    fn rewind(
        &self,
        books: &mut Books<P, O>,
        gate: &mut Gate,
        sealed: usize,
        cause: String,
    ) -> Result<Outcome<P, O>, TxnError> {
        let deadline = deadline_after(self.timeout);
        let mut aborting = vec![sealed];
        if gate.open != sealed {
            aborting.push(gate.open);
        }
        for index in aborting {
            let producer = &self.producers[index];
            if let Err(step) = steps::retrying("abort_transaction", deadline, |left| {
                producer.abort_transaction(left)
            }) {
                gate.state = State::Stopped;
                return Err(step.into_error());
            }
        }
        // After the aborts (which return once the purged records are
        // reported): the ended lives' late acks find their tickets revoked.
        let partitions: Vec<P> = lock(&self.seen).iter().cloned().collect();
        for partition in &partitions {
            let _ = self.tracker.revoke(partition);
        }
        gate.state = State::Rewinding;
        let committed: HashMap<P, O> = partitions
            .iter()
            .filter_map(|p| books.committed.get(p).map(|o| (p.clone(), o.clone())))
            .collect();
        let rewind = Rewind {
            partitions,
            committed,
            cause,
        };
        *lock(&self.pending) = Some(rewind.clone());
        // Relaxed: under the write lock. What the aborted transactions
        // dropped is rewound with them.
        self.dropped.store(false, Ordering::Relaxed);
        lock(&self.stats).rewound += 1;
        Ok(Outcome::Rewound(rewind))
    }
}

/// Waits, yielding, until librdkafka counts no record of `producer` in
/// flight, or until `deadline`. `wait` returned once every sealed record's
/// delivery report acked its ticket, but librdkafka counts a record in
/// flight until it destroys it, just after that report; a
/// `commit_transaction` that finds one left flushes first, and
/// rust-rdkafka's flush polls 100 ms at a time. Measured with `kafka-e2e
/// exactly-once-throughput --commit after-drain`: a record was still
/// counted right after `wait` in 242 of 836 transactions, for 7 µs to
/// 2 ms, and this wait removed every slow commit (BENCHMARKS.md). Only the
/// sealed transaction's producer is asked: with one producer, sends are
/// kept out until the commit ends; overlapping, they go to the other one.
/// Past the deadline the commit goes ahead and flushes as before.
fn drain_in_flight<C>(producer: &ThreadedProducer<C>, deadline: Instant)
where
    C: rdkafka::producer::ProducerContext + 'static,
{
    while producer.in_flight_count() > 0 && Instant::now() < deadline {
        std::thread::yield_now();
    }
}

#[cfg(test)]
#[path = "transaction_tests.rs"]
mod tests;
