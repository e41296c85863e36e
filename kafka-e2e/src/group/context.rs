//! The consumer's context of a [worker](super::worker): the periodic
//! commit and the hand-off, both on the consumer's polling thread, so
//! nothing of a partition is written to the ledger after its release.

use super::events::{Events, WorkerEvent};
use super::ledger::{self, Decision, Entry, Kind, Writer};
use super::worker::WorkerConfig;
use inflight::{Progress, ProgressTracker};
use inflight_rdkafka::consumer::commit_list;
use inflight_rdkafka::TopicPartition;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// How far before its resume offset a partition is fetched from. tansu
/// 0.6.0 answers a fetch at an offset inside a record batch with the batch
/// *after* it (the records between are never returned), so a consumer
/// must start at or before the batch's first offset and skip what is
/// below; a batch holds at most `batch.num.messages` (10,000) records.
pub const REFETCH_WINDOW: u64 = 10_000;

/// An owned partition's progress: as resumed, as now, as last written; and
/// the next offset the consumer should deliver.
struct Owned {
    expect: u64,
    resumed: Progress,
    current: Progress,
    written: Progress,
}

struct State {
    ledger: Writer,
    /// `<name>.<assignment number>`: the owner in ledger entries.
    me: String,
    assignments: u64,
    commits: u64,
    owned: BTreeMap<i32, Owned>,
}

/// The consumer's context: the hand-off and the commits.
pub struct GroupContext {
    config: WorkerConfig,
    tracker: Arc<ProgressTracker<TopicPartition, i64>>,
    events: Events,
    errors: AtomicU64,
    state: Mutex<State>,
}

/// The worker's consumer.
pub type GroupConsumer = BaseConsumer<GroupContext>;

/// What to do with a consumed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Its partition is not (or no longer) this worker's: drop it.
    NotOurs,
    /// Below the resume offset, fetched again (see [`REFETCH_WINDOW`]).
    Refetched,
    /// Done before the partition came here: skip it.
    Done,
    /// Process it.
    Process,
}

impl GroupContext {
    /// A context for `config`'s worker, tracking in `tracker`, writing the
    /// ledger through `ledger`.
    pub fn new(
        config: WorkerConfig,
        tracker: Arc<ProgressTracker<TopicPartition, i64>>,
        events: Events,
        ledger: Writer,
    ) -> GroupContext {
        GroupContext {
            config,
            tracker,
            events,
            errors: AtomicU64::new(0),
            state: Mutex::new(State {
                ledger,
                me: String::new(),
                assignments: 0,
                commits: 0,
                owned: BTreeMap::new(),
            }),
        }
    }

    /// Errors reported so far.
    pub fn errors(&self) -> u64 {
        // Relaxed: a count.
        self.errors.load(Ordering::Relaxed)
    }

    /// Whether this worker owns no partition (after leaving: handed off).
    pub fn owns_nothing(&self) -> bool {
        self.lock().owned.is_empty()
    }

    /// The partitions this worker owns.
    pub fn owned(&self) -> Vec<i32> {
        self.lock().owned.keys().copied().collect()
    }

    /// What to do with record `offset` of partition `p`. The source has no
    /// gaps: an offset past the expected one means the broker skipped
    /// records, which is reported as an error.
    pub fn admit(&self, p: i32, offset: i64) -> Admit {
        let mut state = self.lock();
        let Some(owned) = state.owned.get_mut(&p) else {
            return Admit::NotOurs;
        };
        let at = offset as u64;
        if at < owned.expect {
            return Admit::Refetched;
        }
        let gap = (at > owned.expect).then_some(owned.expect);
        owned.expect = at + 1;
        let done = owned.resumed.is_done(at);
        drop(state);
        if let Some(from) = gap {
            self.report(WorkerEvent::Error(format!(
                "offsets {from}..{at} of {p} never delivered"
            )));
        }
        if done {
            Admit::Done
        } else {
            Admit::Process
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports `event` (and counts errors).
    pub fn report(&self, event: WorkerEvent) {
        if matches!(event, WorkerEvent::Error(_)) {
            // Relaxed: a count.
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        (self.events)(event);
    }

    fn partition(&self, p: i32) -> TopicPartition {
        TopicPartition::new(&self.config.source, p)
    }

    /// The tracker's progress since the last call, merged into `current`.
    fn update(&self, state: &mut State) {
        let tracked: Vec<(i32, Progress)> = if self.config.metadata {
            self.tracker
                .progress()
                .into_iter()
                .map(|(tp, progress)| (tp.partition, progress))
                .collect()
        } else {
            self.tracker
                .committable()
                .into_iter()
                .map(|(tp, last)| (tp.partition, Progress::at(last as u64 + 1)))
                .collect()
        };
        for (p, progress) in tracked {
            if let Some(owned) = state.owned.get_mut(&p) {
                owned.current = ledger::merge(&owned.resumed, &progress);
            }
        }
    }

    /// Writes `kind` entries for `partitions` (those whose progress changed,
    /// unless `all`) and commits them to the group.
    fn write(&self, consumer: &GroupConsumer, kind: Kind, partitions: &[i32], all: bool) {
        let mut state = self.lock();
        self.update(&mut state);
        let me = state.me.clone();
        let entries: Vec<Entry> = partitions
            .iter()
            .filter_map(|p| Some((p, state.owned.get(p)?)))
            .filter(|(_, o)| all || o.current != o.written)
            .map(|(&partition, o)| Entry {
                partition,
                kind,
                owner: me.clone(),
                next: o.current.next(),
                metadata: o.current.encode(),
            })
            .collect();
        if entries.is_empty() {
            return;
        }
        if let Err(e) = state.ledger.write(&entries, Duration::from_secs(5)) {
            self.report(WorkerEvent::Error(format!("ledger write: {e}")));
            return;
        }
        let mut group = HashMap::new();
        let mut next = BTreeMap::new();
        for entry in &entries {
            if let Some(owned) = state.owned.get_mut(&entry.partition) {
                owned.written = owned.current.clone();
                group.insert(self.partition(entry.partition), owned.current.clone());
                next.insert(entry.partition, entry.next);
            }
        }
        state.commits += 1;
        let count = state.commits;
        drop(state);
        let mode = if kind == Kind::Release {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        if let Err(e) = commit_list(&group).and_then(|list| consumer.commit(&list, mode)) {
            self.report(WorkerEvent::Error(format!("group commit: {e}")));
        }
        self.report(WorkerEvent::Committed { count, next });
    }

    /// The periodic commit: each owned partition whose progress changed,
    /// to the ledger (awaited), then to the group.
    pub fn commit(&self, consumer: &GroupConsumer) {
        let owned: Vec<i32> = self.lock().owned.keys().copied().collect();
        self.write(consumer, Kind::Progress, &owned, false);
    }

    /// The clean hand-off of `partitions`: drain, release, revoke.
    pub fn hand_off(&self, consumer: &GroupConsumer, partitions: &[i32]) {
        let partitions: Vec<i32> = {
            let state = self.lock();
            partitions
                .iter()
                .copied()
                .filter(|p| state.owned.contains_key(p))
                .collect()
        };
        for &p in &partitions {
            if let Err(e) = self
                .tracker
                .drain_partition(&self.partition(p), self.config.drain_timeout)
            {
                self.report(WorkerEvent::Error(format!("drain of {p}: {e}")));
            }
        }
        self.write(consumer, Kind::Release, &partitions, true);
        let mut state = self.lock();
        for &p in &partitions {
            let _ = self.tracker.revoke(&self.partition(p));
            state.owned.remove(&p);
        }
        drop(state);
        self.report(WorkerEvent::Revoked(partitions));
    }

    /// Claims `assigned`, waits for each previous owner's release (or the
    /// deadline), and sets each partition's start offset in `assigned`.
    pub fn take_over(&self, assigned: &mut TopicPartitionList) {
        let partitions: Vec<i32> = assigned
            .elements()
            .iter()
            .filter(|e| e.topic() == self.config.source)
            .map(|e| e.partition())
            .collect();
        let mut state = self.lock();
        state.assignments += 1;
        state.me = format!("{}.{}", self.config.name, state.assignments);
        let me = state.me.clone();
        let claim = |partitions: &[i32], state: &mut State| {
            let claims: Vec<Entry> = partitions
                .iter()
                .map(|&partition| Entry {
                    partition,
                    kind: Kind::Claim,
                    owner: me.clone(),
                    next: 0,
                    metadata: String::new(),
                })
                .collect();
            if let Err(e) = state.ledger.write(&claims, Duration::from_secs(5)) {
                self.report(WorkerEvent::Error(format!("claim: {e}")));
            }
        };
        claim(&partitions, &mut state);
        let started = Instant::now();
        let mut pending = partitions.clone();
        let mut granted: HashMap<i32, Option<Entry>> = HashMap::new();
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
                Decision::Granted(entry) => {
                    granted.insert(p, entry);
                    false
                }
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
                break;
            }
            if started.elapsed() >= 6 * self.config.release_wait {
                // The ledger could not be read all along: start from the
                // beginning (records redone, never skipped), and say so.
                self.report(WorkerEvent::Error(format!(
                    "no ledger for {pending:?} after {:?}: starting them from offset 0",
                    started.elapsed()
                )));
                break;
            }
            if started.elapsed() >= self.config.release_wait && !entries.is_empty() {
                // The holder never released: killed. Resume from its last
                // progress.
                for &p in &pending {
                    granted.insert(p, ledger::latest_progress(&entries, p));
                    let holder = holders.remove(&p).unwrap_or_else(|| "?".into());
                    self.report(WorkerEvent::GaveUp {
                        partition: p,
                        holder,
                    });
                }
                break;
            }
            claim(&reclaim, &mut state);
            // Bounded polling of the ledger (the deadline above).
            thread::sleep(Duration::from_millis(50));
        }
        for &p in &partitions {
            let progress = granted
                .remove(&p)
                .flatten()
                .map_or_else(|| Progress::at(0), |e| e.progress(self.config.metadata));
            // Before the resume offset (see REFETCH_WINDOW): what is below
            // it is skipped as done.
            let start = progress.next().saturating_sub(REFETCH_WINDOW);
            let offset = Offset::Offset(start as i64);
            if let Err(e) = assigned.set_partition_offset(&self.config.source, p, offset) {
                self.report(WorkerEvent::Error(format!("start offset of {p}: {e}")));
            }
            state.owned.insert(
                p,
                Owned {
                    expect: progress.next(),
                    resumed: progress.clone(),
                    current: progress.clone(),
                    written: progress,
                },
            );
        }
        drop(state);
        self.report(WorkerEvent::Assigned(partitions));
    }
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn rebalance(
        &self,
        consumer: &GroupConsumer,
        err: RDKafkaRespErr,
        partitions: &mut TopicPartitionList,
    ) {
        let owned: Vec<i32> = self.lock().owned.keys().copied().collect();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                // Eager: everything was revoked before; just in case.
                if !owned.is_empty() {
                    self.hand_off(consumer, &owned);
                }
                self.take_over(partitions);
                if let Err(e) = consumer.assign(partitions) {
                    self.report(WorkerEvent::Error(format!("assign: {e}")));
                }
            }
            _ => {
                if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS {
                    self.report(WorkerEvent::Error(format!("rebalance: {err:?}")));
                }
                self.hand_off(consumer, &owned);
                if let Err(e) = consumer.unassign() {
                    self.report(WorkerEvent::Error(format!("unassign: {e}")));
                }
            }
        }
    }
}
