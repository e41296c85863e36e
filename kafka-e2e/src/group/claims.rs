//! A [worker](super::worker)'s rebalance hooks around
//! `inflight_rdkafka`'s [`HandOffContext`]: the [ledger]'s
//! claims and releases (the hand-off order tansu 0.6.0 does not give), and
//! each assigned partition's start offset (see [`REFETCH_WINDOW`]).
//!
//! The context runs them in this order, all on the consumer's polling
//! thread:
//!
//! - **assigned**: [`pre_rebalance`](OnRebalance::pre_rebalance) claims
//!   each partition and waits (bounded polling of the ledger,
//!   [`WorkerConfig::release_wait`]) until the previous owner released it;
//!   then the context reads the progress back from its store (what the
//!   previous owner saved last); then
//!   [`post_rebalance`](OnRebalance::post_rebalance) assigns each
//!   partition again, [`REFETCH_WINDOW`] offsets before its resume offset.
//! - **revoked**: the context's hand-off (a bounded `drain_partition`, the
//!   final commit, saved in the store first, then `revoke`); then
//!   `post_rebalance` writes a *release* for each partition.
//!
//! The type is the context `HandOffContext` wraps: the trait bound of
//! [`OnRebalance`] makes it a `ConsumerContext`, with rdkafka's defaults
//! for every callback.

use super::events::{Events, WorkerEvent};
use super::ledger::{self, Decision, Entry, Kind, Writer};
use super::worker::WorkerConfig;
use inflight_rdkafka::{HandOffContext, OnRebalance, Resumable, TopicPartition};
use rdkafka::consumer::{Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// How far before its resume offset a partition is fetched from. tansu
/// 0.6.0 answers a fetch at an offset inside a record batch with the batch
/// *after* it (the records between are never returned), so a consumer
/// must start at or before the batch's first offset and skip what is
/// below; a batch holds at most `batch.num.messages` (10,000) records.
pub const REFETCH_WINDOW: u64 = 10_000;

struct State {
    ledger: Writer,
    /// `<name>.<assignment number>`: the owner in ledger entries.
    me: String,
    assignments: u64,
    /// Each owned partition's next expected offset.
    owned: BTreeMap<i32, u64>,
}

/// The worker's rebalance hooks (see the module docs).
pub struct Claims {
    config: WorkerConfig,
    events: Events,
    errors: AtomicU64,
    state: Mutex<State>,
}

/// What to do with a consumed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Its partition is not (or no longer) this worker's: drop it.
    NotOurs,
    /// Below the resume offset, fetched again (see [`REFETCH_WINDOW`]).
    Refetched,
    /// Past the resume offset: ask the context whether it was done.
    Next,
}

impl Claims {
    /// Hooks for `config`'s worker, writing the ledger through `ledger`.
    pub fn new(config: WorkerConfig, events: Events, ledger: Writer) -> Claims {
        Claims {
            config,
            events,
            errors: AtomicU64::new(0),
            state: Mutex::new(State {
                ledger,
                me: String::new(),
                assignments: 0,
                owned: BTreeMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Errors reported so far.
    pub fn errors(&self) -> u64 {
        // Relaxed: a count.
        self.errors.load(Ordering::Relaxed)
    }

    /// Reports `event` (and counts errors).
    pub fn report(&self, event: WorkerEvent) {
        if matches!(event, WorkerEvent::Error(_)) {
            // Relaxed: a count.
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        (self.events)(event);
    }

    /// Reports the errors `context` met in its callbacks (a drain that
    /// timed out, a final commit or a read-back that failed).
    pub fn report_context_errors<M: Resumable>(&self, context: &HandOffContext<M, Claims>) {
        for error in context.errors() {
            self.report(WorkerEvent::Error(error));
        }
    }

    /// Whether this worker owns no partition (after leaving: handed off).
    pub fn owns_nothing(&self) -> bool {
        self.lock().owned.is_empty()
    }

    /// The partitions this worker owns.
    pub fn owned(&self) -> Vec<i32> {
        self.lock().owned.keys().copied().collect()
    }

    /// Owns `partitions` from offset 0 without the ledger (a worker that
    /// is not in a group: `WorkerConfig::static_partitions`).
    pub fn own(&self, partitions: &[i32]) {
        let mut state = self.lock();
        for &p in partitions {
            state.owned.insert(p, 0);
        }
    }

    /// Gives `partitions` up without the ledger (see [`own`](Self::own)).
    pub fn disown(&self, partitions: &[i32]) {
        let mut state = self.lock();
        for p in partitions {
            state.owned.remove(p);
        }
    }

    /// What to do with record `offset` of partition `p`. The source has no
    /// gaps: an offset past the expected one means the broker skipped
    /// records, which is reported as an error.
    pub fn admit(&self, p: i32, offset: i64) -> Admit {
        let mut state = self.lock();
        let Some(expect) = state.owned.get_mut(&p) else {
            return Admit::NotOurs;
        };
        let at = offset as u64;
        if at < *expect {
            return Admit::Refetched;
        }
        let gap = (at > *expect).then_some(*expect);
        *expect = at + 1;
        drop(state);
        if let Some(from) = gap {
            self.report(WorkerEvent::Error(format!(
                "offsets {from}..{at} of {p} never delivered"
            )));
        }
        Admit::Next
    }

    fn source_partitions(&self, list: &TopicPartitionList) -> Vec<i32> {
        list.elements()
            .iter()
            .filter(|e| e.topic() == self.config.source)
            .map(|e| e.partition())
            .collect()
    }

    fn write(&self, state: &mut State, kind: Kind, partitions: &[i32]) {
        let entries: Vec<Entry> = partitions
            .iter()
            .map(|&partition| Entry {
                partition,
                kind,
                owner: state.me.clone(),
            })
            .collect();
        if entries.is_empty() {
            return;
        }
        if let Err(e) = state.ledger.write(&entries, Duration::from_secs(5)) {
            self.report(WorkerEvent::Error(format!("ledger {kind:?}: {e}")));
        }
    }

    /// Claims `partitions` and waits until each previous owner released
    /// them, or the deadline (a killed owner never does).
    fn claim(&self, partitions: &[i32]) {
        let mut state = self.lock();
        state.assignments += 1;
        state.me = format!("{}.{}", self.config.name, state.assignments);
        let me = state.me.clone();
        self.write(&mut state, Kind::Claim, partitions);
        let started = Instant::now();
        let mut pending = partitions.to_vec();
        loop {
            let entries = match ledger::read(
                &self.config.brokers,
                &self.config.ledger,
                Duration::from_secs(10),
            ) {
                Ok(entries) => entries,
                Err(e) => {
                    self.report(WorkerEvent::Error(format!("reading the ledger: {e}")));
                    Vec::new()
                }
            };
            let mut reclaim = Vec::new();
            let mut holders = HashMap::new();
            pending.retain(|&p| match ledger::decide(&entries, p, &me) {
                Decision::Granted => false,
                Decision::Claim => {
                    reclaim.push(p);
                    true
                }
                Decision::Wait { holder } => {
                    holders.insert(p, holder);
                    true
                }
            });
            if pending.is_empty() {
                return;
            }
            if started.elapsed() >= 6 * self.config.release_wait {
                // The ledger could not be read all along: take them (the
                // store says where to resume), and say so.
                self.report(WorkerEvent::Error(format!(
                    "no ledger for {pending:?} after {:?}: taking them unreleased",
                    started.elapsed()
                )));
                return;
            }
            if started.elapsed() >= self.config.release_wait && !entries.is_empty() {
                // The holder never released: killed. The store has its
                // last saved progress.
                for &p in &pending {
                    let holder = holders.remove(&p).unwrap_or_else(|| "?".into());
                    self.report(WorkerEvent::GaveUp {
                        partition: p,
                        holder,
                    });
                }
                return;
            }
            self.write(&mut state, Kind::Claim, &reclaim);
            // Bounded polling of the ledger (the deadline above).
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Assigns `partitions` again, each from [`REFETCH_WINDOW`] before the
    /// offset the context read back, and owns them.
    fn start<M: Resumable, K: Consumer<HandOffContext<M, Claims>>>(
        &self,
        consumer: &K,
        partitions: &[i32],
    ) {
        let resume = consumer.context().resume();
        let mut list = TopicPartitionList::new();
        let mut owned = Vec::new();
        for &p in partitions {
            let partition = TopicPartition::new(&self.config.source, p);
            // Nothing read back (a new partition, or a read-back that
            // failed, reported): rdkafka's committed offset, or the start.
            let next = resume.get(&partition).map_or(0, |progress| progress.next());
            let start = match resume.get(&partition) {
                Some(_) => Offset::Offset(next.saturating_sub(REFETCH_WINDOW) as i64),
                None => Offset::Stored,
            };
            if let Err(e) = list.add_partition_offset(&self.config.source, p, start) {
                self.report(WorkerEvent::Error(format!("start offset of {p}: {e}")));
            }
            owned.push((p, next));
        }
        // rdkafka assigned them from the committed offsets a moment ago,
        // still inside this callback: nothing was delivered from there yet,
        // and this assignment replaces that one.
        if let Err(e) = consumer.assign(&list) {
            self.report(WorkerEvent::Error(format!("assign: {e}")));
        }
        self.lock().owned.extend(owned);
    }
}

impl ClientContext for Claims {}

impl ConsumerContext for Claims {}

impl OnRebalance for Claims {
    fn pre_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        _: &K,
        rebalance: &Rebalance<'_>,
    ) {
        match rebalance {
            Rebalance::Assign(assigned) => self.claim(&self.source_partitions(assigned)),
            Rebalance::Revoke(_) => {} // the context hands them off next
            Rebalance::Error(e) => self.report(WorkerEvent::Error(format!("rebalance: {e}"))),
        }
    }

    fn post_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        consumer: &K,
        rebalance: &Rebalance<'_>,
    ) {
        self.report_context_errors(consumer.context());
        match rebalance {
            Rebalance::Assign(assigned) => {
                let partitions = self.source_partitions(assigned);
                self.start(consumer, &partitions);
                self.report(WorkerEvent::Assigned(partitions));
            }
            Rebalance::Revoke(revoked) => {
                let mut state = self.lock();
                let partitions: Vec<i32> = self
                    .source_partitions(revoked)
                    .into_iter()
                    .filter(|p| state.owned.contains_key(p))
                    .collect();
                self.write(&mut state, Kind::Release, &partitions);
                for p in &partitions {
                    state.owned.remove(p);
                }
                drop(state);
                self.report(WorkerEvent::Revoked(partitions));
            }
            Rebalance::Error(_) => {
                // rdkafka unassigned everything without a hand-off: the
                // next owners wait out the release deadline.
                self.lock().owned.clear();
            }
        }
    }
}
