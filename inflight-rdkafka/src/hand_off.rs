//! The consumer context: commits that are kept until confirmed, progress
//! read back on assignment, and the clean hand-off when a rebalance
//! revokes partitions, around a context of yours.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use inflight::Tracker;
//! use inflight_rdkafka::{commit_progress, HandOffContext, TopicPartition};
//! use rdkafka::config::ClientConfig;
//! use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
//! use rdkafka::Message;
//!
//! let tracker = Arc::new(Tracker::<TopicPartition, i64>::builder().progress(4096).build());
//! let context = HandOffContext::new(tracker.clone(), Duration::from_secs(5));
//! let consumer: BaseConsumer<HandOffContext> = ClientConfig::new()
//!     .set("bootstrap.servers", "127.0.0.1:9092")
//!     .set("group.id", "pipeline")
//!     .set("enable.auto.commit", "false")
//!     .set("enable.auto.offset.store", "false")
//!     .create_with_context(context)
//!     .expect("consumer");
//! consumer.subscribe(&["source"]).expect("subscribe");
//! loop {
//!     if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
//!         let partition = TopicPartition::new(message.topic(), message.partition());
//!         if consumer.context().skip(&partition, message.offset()) {
//!             continue; // done before a restart or a rebalance, or being handed off
//!         }
//!         let ticket = tracker.send(partition, message.offset()).expect("in order, in budget");
//!         // ... process it, then:
//!         tracker.ack(ticket).expect("a live ticket");
//!     }
//!     // Also finishes a revocation's hand-off once its records are done.
//!     // An error here is counted and its progress committed again later.
//!     let _ = commit_progress(&consumer, CommitMode::Async);
//! }
//! ```

use crate::commits::Commits;
use crate::consumer::{Resumable, Resume, TopicPartition};
use crate::store::{GroupCommitStore, ProgressStore};
use inflight::mode::{self, Mode};
use inflight::Tracker;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, DefaultConsumerContext, Rebalance,
    RebalanceProtocol,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::util::Timeout;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Your rebalance callbacks, for a context that [`HandOffContext`] wraps.
///
/// rdkafka passes `ConsumerContext::pre_rebalance` and `post_rebalance` a
/// `BaseConsumer<Self>`, and the consumer is a
/// `BaseConsumer<HandOffContext<M, Self>>`: those two cannot be called on
/// your context as they are. Implement this trait instead (its methods
/// default to doing nothing, so `impl OnRebalance for MyContext {}` is
/// enough when there are none); the consumer they get is the real one, and
/// `consumer.context().inner()` is your context.
pub trait OnRebalance: ConsumerContext {
    /// Runs before the rebalance is applied. On a revocation it runs
    /// **before** the hand-off: the revoked partitions are still tracked.
    #[allow(unused_variables)]
    fn pre_rebalance<M: Resumable>(
        &self,
        consumer: &BaseConsumer<HandOffContext<M, Self>>,
        rebalance: &Rebalance<'_>,
    ) {
    }

    /// Runs after the rebalance is applied. On an assignment it runs
    /// **after** the committed progress was read back:
    /// [`HandOffContext::is_done`] already answers for the new partitions.
    #[allow(unused_variables)]
    fn post_rebalance<M: Resumable>(
        &self,
        consumer: &BaseConsumer<HandOffContext<M, Self>>,
        rebalance: &Rebalance<'_>,
    ) {
    }
}

impl OnRebalance for DefaultConsumerContext {}

/// A consumer context that keeps commits until they are confirmed, reads
/// progress back on assignment and runs the clean hand-off on revocation.
///
/// `M` is the tracker's mode: [`mode::Progress`] (the default: progress
/// with its metadata) or [`mode::Watermarks`] (watermarks `+ 1`, no
/// metadata); see [`Resumable`]. `C` is a context of yours, rdkafka's
/// `DefaultConsumerContext` unless you [`wrap`](Self::wrap) one.
///
/// - **Commits** ([`commit_progress`]): what changed on the tracker, and
///   what is due again, saved in the [`store`](Self::store) (nothing to
///   do for the default [`GroupCommitStore`]) and committed; each commit
///   point is kept until a result confirms it, so a failed commit's point
///   is sent again at the next call (see [`Commits`]). A point keeps what
///   was read back for its partition on assignment: offsets done there
///   past what the tracker was sent since stay done, so a partition that
///   moves on soon after it came here does not lose them.
/// - **Revoked** partitions: the hand-off. A bounded
///   [`drain_partition`](Tracker::drain_partition) of each, waiting at most
///   `drain_timeout` (yours; nothing else waits); then a synchronous
///   commit (the drained progress and whatever else is due; rdkafka's
///   synchronous commit takes no timeout: it returns when the broker
///   answers or librdkafka's request times out); then
///   [`revoke`](Tracker::revoke) of each (a watermark tracker's
///   `Revoked::committable` is committed `+ 1` as well); then the
///   partitions are let go (`unassign`, or `incremental_unassign` under
///   the cooperative protocol) and your `post_rebalance` runs. When the
///   bound passes, the partition is revoked all the same: its un-drained
///   records are released (their tickets answer `Revoked`, their acks
///   change nothing) and its committed point is what was done before
///   them, so its next owner redoes them and skips nothing. When the
///   assignment was **lost** (the session timed out: the partitions belong
///   to another member already), nothing is drained or committed: they are
///   revoked on the tracker and let go at once, and their next owner
///   redoes what was not committed.
///
///   By default the drain runs in rdkafka's rebalance callback, which
///   then blocks the consumer's `poll` for up to `drain_timeout`. With
///   [`defer_hand_off`](Self::defer_hand_off) it runs **outside** it: the
///   callback pauses the revoked partitions and returns, and the group's
///   rebalance waits (librdkafka applies a revocation only when the
///   consumer lets the partitions go; the group waits for that within
///   `max.poll.interval.ms`, or, under the cooperative protocol, for the
///   moving partitions only, the others flowing on). Your loop goes on
///   polling, and each [`commit_progress`] (or [`continue_hand_off`])
///   looks at the revoked partitions without waiting: once every record
///   they had in flight is resolved, or the bound has passed since the
///   revocation, it finishes the hand-off. Records of a partition being
///   handed off that your loop still polls are the next owner's:
///   [`skip`](Self::skip) says so. The deferred hand-off still runs in the
///   callback when it has nothing to wait for (no record of the revoked
///   partitions in flight), when the consumer is closing or unsubscribing
///   (its subscription is empty), or when pausing fails. **Call
///   [`finish_hand_off`] before dropping the consumer**: rdkafka's `Drop`
///   closes it, and the close waits for the partitions of a waiting
///   hand-off to be let go, which nothing else does then.
///
/// **The clean stop**: `unsubscribe()`, then poll (and
/// [`commit_progress`]) until the consumer's assignment is empty, then
/// drop it; the hand-off runs as the partitions are revoked. A consumer
/// dropped with partitions still assigned is closed by rdkafka's `Drop`,
/// which serves the revocation itself; librdkafka may terminate the group
/// meanwhile, and then answers no request (a commit or an unassign would
/// wait for ever): the context makes none once the consumer reads as
/// closed, and its partitions are released without a final commit (their
/// next owner redoes what was not committed).
/// - **Assigned** partitions (`post_rebalance`): the group's committed
///   offsets and what the [`store`](Self::store) kept for them
///   ([`ProgressStore::load`]), waiting at most the read timeout in all
///   (`drain_timeout` unless [`read_timeout`](Self::read_timeout) says
///   otherwise), into the context's [`Resume`], which the processing loop asks
///   ([`is_done`](Self::is_done)) before it handles a record. If the read
///   fails, the partitions resume from rdkafka's committed offset with
///   nothing known done beyond it: records are redone, never skipped.
///
/// Your context's callbacks all still run: `log`, `stats`, `stats_raw`,
/// `error`, `generate_oauth_token` (and `ENABLE_REFRESH_OAUTH_TOKEN`) and
/// `main_queue_min_poll_interval` as they are; `commit_callback` after the
/// result settled the kept commits; your [`OnRebalance`] callbacks as
/// their docs say (a revocation: yours in the callback, then the hand-off,
/// then your `post_rebalance` once the partitions are let go, which may be
/// in a later [`commit_progress`]; an assignment: the read-back, then
/// yours). The context implements rdkafka's `rebalance` itself (to let
/// revoked partitions go after the hand-off rather than in the callback);
/// it applies assignments as rdkafka's does, eager or cooperative, and a
/// rebalance error as rdkafka's does (your two callbacks, around an
/// `unassign`).
///
/// Errors in the rebalance callbacks (a drain that times out, a final
/// commit or a read-back that fails) are kept in [`errors`](Self::errors):
/// the callbacks cannot return them. A failed asynchronous commit counts
/// in [`commit_failures`](Self::commit_failures) and goes on to your
/// `commit_callback`.
pub struct HandOffContext<M: Mode = mode::Progress, C = DefaultConsumerContext> {
    tracker: Arc<Tracker<TopicPartition, i64, M>>,
    inner: C,
    drain_timeout: Duration,
    read_timeout: Duration,
    resume: Mutex<Resume>,
    commits: Commits,
    store: Box<dyn ProgressStore>,
    errors: Mutex<Vec<String>>,
    /// Whether a revocation's drain runs outside rdkafka's callback.
    defer: bool,
    /// Whether the group's rebalance protocol is cooperative, as the last
    /// assignment found it.
    cooperative: AtomicBool,
    /// A revocation whose hand-off waits for its records.
    pending: Mutex<Option<Pending>>,
}

/// A revocation handed off outside rdkafka's callback: its partitions are
/// paused, and let go once their records are resolved or the bound passes.
struct Pending {
    /// The list rdkafka revoked (to pause, resume and let go).
    revoked: TopicPartitionList,
    partitions: Vec<TopicPartition>,
    /// When the drain bound passes.
    deadline: Instant,
}

impl<M: Resumable> HandOffContext<M> {
    /// A context handing off `tracker`'s partitions, waiting at most
    /// `drain_timeout` for each revoked partition's records, around
    /// rdkafka's `DefaultConsumerContext`.
    pub fn new(tracker: Arc<Tracker<TopicPartition, i64, M>>, drain_timeout: Duration) -> Self {
        Self::wrap(DefaultConsumerContext, tracker, drain_timeout)
    }
}

impl<M: Resumable, C> HandOffContext<M, C> {
    /// A context handing off `tracker`'s partitions around `inner`, your
    /// context: its callbacks still run (see the type's docs).
    pub fn wrap(
        inner: C,
        tracker: Arc<Tracker<TopicPartition, i64, M>>,
        drain_timeout: Duration,
    ) -> Self {
        Self {
            tracker,
            inner,
            drain_timeout,
            read_timeout: drain_timeout,
            resume: Mutex::new(Resume::default()),
            commits: Commits::new(),
            store: Box::new(GroupCommitStore),
            errors: Mutex::new(Vec::new()),
            defer: false,
            cooperative: AtomicBool::new(false),
            pending: Mutex::new(None),
        }
    }

    /// Keeps the commit points in `store` (saved before each group commit,
    /// read back on assignment) rather than in the group commit's metadata
    /// alone ([`GroupCommitStore`], the default). See [`crate::store`].
    pub fn store(mut self, store: impl ProgressStore + 'static) -> Self {
        self.store = Box::new(store);
        self
    }

    /// Runs a revocation's drain outside rdkafka's rebalance callback: the
    /// callback pauses the partitions and returns, [`commit_progress`] (or
    /// [`continue_hand_off`]) finishes the hand-off when their records are
    /// done or the drain bound passed, and [`finish_hand_off`] must run
    /// before the consumer is dropped (see the type's docs).
    pub fn defer_hand_off(mut self) -> Self {
        self.defer = true;
        self
    }

    /// Waits at most `timeout` to read the committed progress back on an
    /// assignment (the drain timeout unless set).
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// The tracker.
    pub fn tracker(&self) -> &Arc<Tracker<TopicPartition, i64, M>> {
        &self.tracker
    }

    /// The context it wraps.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// The commit points handed out and not yet confirmed.
    pub fn commits(&self) -> &Commits {
        &self.commits
    }

    /// Commit points whose commit failed so far (each was due again).
    pub fn commit_failures(&self) -> u64 {
        self.commits.failures()
    }

    /// Whether `offset` of `partition` was done before the partition was
    /// assigned here (see [`Resume::is_done`]): skip it.
    pub fn is_done(&self, partition: &TopicPartition, offset: i64) -> bool {
        self.resume
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_done(partition, offset)
    }

    /// Whether your loop should pass over the record at `offset` of
    /// `partition`: it was done before the partition was assigned here
    /// ([`is_done`](Self::is_done)), or the partition is being handed off
    /// (revoked; its records are the next owner's, see the type's docs).
    pub fn skip(&self, partition: &TopicPartition, offset: i64) -> bool {
        self.handing_off(partition) || self.is_done(partition, offset)
    }

    /// Whether `partition` was revoked and its hand-off still waits for
    /// its records (see the type's docs).
    pub fn handing_off(&self, partition: &TopicPartition) -> bool {
        self.lock_pending()
            .as_ref()
            .is_some_and(|pending| pending.partitions.contains(partition))
    }

    /// Whether a revocation's hand-off waits for its records: the group's
    /// rebalance waits for it, until [`commit_progress`] or
    /// [`continue_hand_off`] finishes it.
    pub fn is_handing_off(&self) -> bool {
        self.lock_pending().is_some()
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What was done in the partitions assigned so far (a snapshot).
    pub fn resume(&self) -> Resume {
        self.resume
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The errors met in callbacks, oldest first, taken.
    pub fn errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.errors.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn error(&self, what: String) {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(what);
    }
}

impl<M: Resumable, C: OnRebalance> HandOffContext<M, C> {
    /// rdkafka revoked `revoked`: hands the partitions off now, or pauses
    /// them and leaves the hand-off to [`continue_hand_off`].
    fn revoke(&self, consumer: &BaseConsumer<Self>, revoked: &TopicPartitionList) {
        let partitions = partitions_of(revoked);
        if consumer.assignment_lost() {
            // Another member owns them already: a commit would be refused
            // (and would be behind the new owner's), so release and go.
            self.error(format!(
                "assignment lost: {partitions:?} released without a commit"
            ));
            self.release(&partitions);
            self.let_go(consumer, revoked);
            return;
        }
        // No subscription: closing (rdkafka's `Drop` closes the consumer and
        // serves this callback itself) or unsubscribing. Nobody would call
        // `continue_hand_off` again, so a deferred hand-off runs here.
        // (Asked last, only when the hand-off could wait: a request to the
        // group, as `rebalance_protocol` in `let_go`.)
        let closing = || {
            consumer
                .subscription()
                .map_or(true, |subscribed| subscribed.count() == 0)
        };
        if self.defer && !partitions.iter().all(|p| self.drained(p)) && !closing() {
            match consumer.pause(revoked) {
                Ok(()) => {
                    *self.lock_pending() = Some(Pending {
                        revoked: revoked.clone(),
                        partitions,
                        deadline: Instant::now() + self.drain_timeout,
                    });
                    return;
                }
                // Not paused: the hand-off runs here, as by default.
                Err(e) => self.error(format!("pausing the revoked {partitions:?}: {e}")),
            }
        }
        self.drain(&partitions, self.drain_timeout);
        self.complete(consumer, revoked, &partitions, false);
    }

    /// Whether every record of `partition` sent so far is resolved (on a
    /// watermark tracker: passed by its watermark). Does not wait, and
    /// takes no interrupt meant for a wait of yours.
    fn drained(&self, partition: &TopicPartition) -> bool {
        self.tracker.is_partition_drained(partition)
    }

    /// A bounded drain of each of `partitions` (the bound for all of them).
    fn drain(&self, partitions: &[TopicPartition], timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for partition in partitions {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = self.tracker.drain_partition(partition, left) {
                self.error(format!("drain of {partition:?}: {e}"));
            }
        }
    }

    /// The hand-off after the drain: the final commit, the revoke, the
    /// revoked watermarks' commit, and nothing kept of the partitions.
    fn settle_revoked(&self, consumer: &BaseConsumer<Self>, partitions: &[TopicPartition]) {
        // (A closed consumer's group answers no request: see `let_go`.)
        if consumer.closed() {
            self.error(format!(
                "final commit: the consumer closed first; {partitions:?} released without it"
            ));
            self.release(partitions);
            return;
        }
        if let Err(e) = commit_changes(consumer, CommitMode::Sync) {
            self.error(format!("final commit: {e}"));
        }
        let mut handed = HashMap::new();
        for partition in partitions {
            let revoked = self.tracker.revoke(partition);
            if let Some(point) = M::revoked(&revoked) {
                handed.insert(partition.clone(), point);
            }
        }
        if !handed.is_empty() {
            let due = self.commits.due(handed);
            let result = self.store.save(&due).and_then(|()| {
                let list = crate::consumer::commit_list(&due)?;
                consumer_commit(consumer, &list)
            });
            if let Err(e) = result {
                self.error(format!("final commit of the revoked watermarks: {e}"));
            }
        }
        self.forget(partitions);
    }

    /// Revokes `partitions` on the tracker and forgets them, committing
    /// nothing (a lost assignment).
    fn release(&self, partitions: &[TopicPartition]) {
        for partition in partitions {
            // Its last committable offset goes nowhere: the new owner's
            // commits are the group's now.
            let _uncommitted = self.tracker.revoke(partition);
        }
        self.forget(partitions);
    }

    fn forget(&self, partitions: &[TopicPartition]) {
        for partition in partitions {
            self.commits.forget(partition);
        }
        let mut resume = self.resume.lock().unwrap_or_else(PoisonError::into_inner);
        for partition in partitions {
            resume.progress.remove(partition);
        }
    }

    /// Lets the revoked partitions go (the protocol's unassign), then runs
    /// your `post_rebalance`.
    fn let_go(&self, consumer: &BaseConsumer<Self>, revoked: &TopicPartitionList) {
        // A closing consumer's group may be terminated by now (its final
        // commit done): librdkafka's group then drops every request without
        // an answer, and a request would wait for ever. It let the
        // partitions go itself. (The protocol is the one the assignment
        // found, for the same reason.)
        if consumer.closed() {
            OnRebalance::post_rebalance(&self.inner, consumer, &Rebalance::Revoke(revoked));
            return;
        }
        let result = if self.cooperative.load(Ordering::Relaxed) {
            consumer.incremental_unassign(revoked)
        } else {
            consumer.unassign()
        };
        if let Err(e) = result {
            self.error(format!("letting the revoked partitions go: {e}"));
        }
        OnRebalance::post_rebalance(&self.inner, consumer, &Rebalance::Revoke(revoked));
    }

    /// Finishes the waiting hand-off if its records are resolved or its
    /// bound passed; returns whether one still waits.
    fn continue_hand_off(&self, consumer: &BaseConsumer<Self>) -> bool {
        let mut slot = self.lock_pending();
        let Some(pending) = slot.as_ref() else {
            return false;
        };
        let timed_out = Instant::now() >= pending.deadline;
        if !timed_out && !pending.partitions.iter().all(|p| self.drained(p)) {
            return true;
        }
        let Some(pending) = slot.take() else {
            return false;
        };
        drop(slot);
        if timed_out {
            for partition in pending.partitions.iter().filter(|p| !self.drained(p)) {
                self.error(format!(
                    "drain of {partition:?}: the records sent before the revocation were not \
                     all resolved within the drain timeout ({:?}): released",
                    self.drain_timeout
                ));
            }
        }
        self.complete(consumer, &pending.revoked, &pending.partitions, true);
        false
    }

    /// Finishes the waiting hand-off, if any, draining for what is left of
    /// its bound.
    fn finish_hand_off(&self, consumer: &BaseConsumer<Self>) {
        let Some(pending) = self.lock_pending().take() else {
            return;
        };
        let left = pending.deadline.saturating_duration_since(Instant::now());
        self.drain(&pending.partitions, left);
        self.complete(consumer, &pending.revoked, &pending.partitions, true);
    }

    /// The hand-off after its drain: the final commit and the revoke, then
    /// the partitions (`revoked`, `paused` by a deferred hand-off or not)
    /// are let go.
    fn complete(
        &self,
        consumer: &BaseConsumer<Self>,
        revoked: &TopicPartitionList,
        partitions: &[TopicPartition],
        paused: bool,
    ) {
        self.settle_revoked(consumer, partitions);
        // An application pause outlives the assignment: lift it before the
        // partitions go, or they come back paused the next time.
        if paused {
            if let Err(e) = consumer.resume(revoked) {
                self.error(format!("resuming the revoked partitions: {e}"));
            }
        }
        self.let_go(consumer, revoked);
    }

    /// rdkafka assigned `assigned`: applies it, reads their progress back,
    /// then runs your `post_rebalance`.
    fn assign(&self, consumer: &BaseConsumer<Self>, assigned: &TopicPartitionList) {
        // The group assigns only after a revocation was let go; finish one
        // that still waits all the same (bounded by its drain timeout).
        self.finish_hand_off(consumer);
        if consumer.closed() {
            // Served after the close terminated the group (see `let_go`):
            // nothing to apply, and a request would wait for ever.
            return;
        }
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        // Relaxed: read and written on the polling thread only.
        self.cooperative.store(cooperative, Ordering::Relaxed);
        let result = if cooperative {
            consumer.incremental_assign(assigned)
        } else {
            consumer.assign(assigned)
        };
        if let Err(e) = result {
            self.error(format!("applying the assignment: {e}"));
        }
        self.read_committed(consumer, assigned);
        OnRebalance::post_rebalance(&self.inner, consumer, &Rebalance::Assign(assigned));
    }

    /// Reads the committed progress of `assigned` into the context, as an
    /// assignment by the group does (see the type's docs), so that
    /// [`is_done`](Self::is_done) answers for them: for partitions you
    /// `assign` yourself, which no rebalance reports. A failed read is kept
    /// in [`errors`](Self::errors), and the partitions then resume from
    /// rdkafka's committed offset with nothing known done beyond it.
    pub fn read_committed(&self, consumer: &BaseConsumer<Self>, assigned: &TopicPartitionList) {
        if assigned.count() == 0 {
            return;
        }
        let started = std::time::Instant::now();
        let read = consumer
            .committed_offsets(assigned.clone(), self.read_timeout)
            .and_then(|committed| {
                let left = self.read_timeout.saturating_sub(started.elapsed());
                self.store.load(&committed, left)
            });
        match read {
            Ok(progress) => self
                .resume
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(progress, M::max_metadata_bytes(&self.tracker)),
            Err(e) => self.error(format!("reading committed progress: {e}")),
        }
    }
}

/// The partitions of `list`.
fn partitions_of(list: &TopicPartitionList) -> Vec<TopicPartition> {
    list.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}

/// A synchronous commit of `list`, settled in the context's commits.
fn consumer_commit<M: Resumable, C: OnRebalance>(
    consumer: &BaseConsumer<HandOffContext<M, C>>,
    list: &TopicPartitionList,
) -> KafkaResult<()> {
    let result = consumer.commit(list, CommitMode::Sync);
    consumer.context().commits.settle(&result, list);
    result
}

/// Commits what changed on the context's tracker since the last call, and
/// what is due again after a failed commit (see [`Commits::commit`]): for
/// a progress tracker each partition's `next()` (**next to read**, as it
/// is) with its `encode()`d progress as metadata; for a watermark tracker
/// `committable()` (**last done**) `+ 1`. A partition's point keeps
/// what was read back for it on assignment (offsets done there stay done,
/// past the tracker's last record too). Returns how many partitions it
/// sent.
///
/// With [`CommitMode::Async`] the result comes to the commit callback,
/// which settles it (a failure makes the points due again, counts in
/// [`HandOffContext::commit_failures`] and goes on to your
/// `commit_callback`); call this again regularly (each poll loop, or every
/// 100 ms) so that what failed is sent again.
pub fn commit_progress<M: Resumable, C: OnRebalance>(
    consumer: &BaseConsumer<HandOffContext<M, C>>,
    mode: CommitMode,
) -> KafkaResult<usize> {
    continue_hand_off(consumer);
    commit_changes(consumer, mode)
}

/// Finishes a revocation's hand-off (see [`HandOffContext`]) once every
/// record its partitions had in flight is resolved, or its drain bound has
/// passed: the final commit, the revoke, then the partitions are let go
/// and the group's rebalance goes on. Does not wait. Returns whether a
/// hand-off still waits.
///
/// [`commit_progress`] calls it first: a loop that calls that regularly
/// needs nothing else. A loop that commits rarely calls this on each poll
/// instead, since the group's rebalance waits for it.
pub fn continue_hand_off<M: Resumable, C: OnRebalance>(
    consumer: &BaseConsumer<HandOffContext<M, C>>,
) -> bool {
    consumer.context().continue_hand_off(consumer)
}

/// Finishes a revocation's deferred hand-off (see
/// [`HandOffContext::defer_hand_off`]), waiting for its records at most
/// until its drain bound passes; returns at once when none waits. Call it
/// before dropping the consumer: rdkafka's `Drop` closes the consumer, and
/// the close waits for the revoked partitions to be let go.
pub fn finish_hand_off<M: Resumable, C: OnRebalance>(
    consumer: &BaseConsumer<HandOffContext<M, C>>,
) {
    consumer.context().finish_hand_off(consumer);
}

/// [`commit_progress`] without the hand-off.
fn commit_changes<M: Resumable, C: OnRebalance>(
    consumer: &BaseConsumer<HandOffContext<M, C>>,
    mode: CommitMode,
) -> KafkaResult<usize> {
    let context = consumer.context();
    let changes = context
        .resume
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .merged(
            M::changes(&context.tracker),
            M::max_metadata_bytes(&context.tracker),
        );
    context
        .commits
        .commit_changes(consumer, changes, mode, &*context.store)
}

impl<M: Resumable, C: ClientContext> ClientContext for HandOffContext<M, C> {
    crate::delegate_client_context!(C);
}

impl<M: Resumable, C: OnRebalance> ConsumerContext for HandOffContext<M, C> {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        list: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // Yours first: the revoked partitions are still tracked.
                OnRebalance::pre_rebalance(&self.inner, consumer, &Rebalance::Revoke(list));
                self.revoke(consumer, list);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                OnRebalance::pre_rebalance(&self.inner, consumer, &Rebalance::Assign(list));
                self.assign(consumer, list);
            }
            other => {
                // As rdkafka's own `rebalance`: the assignment goes.
                let rebalance = Rebalance::Error(KafkaError::Rebalance(other.into()));
                OnRebalance::pre_rebalance(&self.inner, consumer, &rebalance);
                if let Err(e) = consumer.unassign() {
                    self.error(format!("unassigning after a rebalance error: {e}"));
                }
                OnRebalance::post_rebalance(&self.inner, consumer, &rebalance);
            }
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        self.commits.settle(&result, offsets);
        self.inner.commit_callback(result, offsets);
    }

    fn main_queue_min_poll_interval(&self) -> Timeout {
        self.inner.main_queue_min_poll_interval()
    }
}
