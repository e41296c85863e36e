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
use crate::drive::{Edge, Live, PollEdge};
use crate::handed_off::HandedOff;
pub use crate::on_rebalance::OnRebalance;
use crate::revocation::{HandOff, State};
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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

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
/// - **Revoked** partitions: the hand-off. A bounded wait for each one's
///   records, at most `drain_timeout` (yours; nothing else waits); then,
///   in one step no other commit interleaves with, the final synchronous
///   commit, the [`revoke`](Tracker::revoke) of each partition and the end
///   of its life in the [`commits`](Self::commits); then the partitions
///   are let go (`unassign`, or `incremental_unassign` under the
///   cooperative protocol) and your `post_rebalance` runs. The final
///   commit carries each revoked partition's latest point that the broker
///   has not **confirmed**, whether or not an asynchronous commit already
///   sent it (that one may yet fail), with a watermark tracker's
///   `Revoked::committable` `+ 1`, and whatever else is due (rdkafka's
///   synchronous commit takes no timeout: it returns when the broker
///   answers or librdkafka's request times out). When the bound passes,
///   the partition is revoked all the same: its un-drained records are
///   released (their tickets answer `Revoked`, their acks change nothing)
///   and its committed point is what was done before them, so its next
///   owner redoes them and skips nothing. When the assignment was
///   **lost** (the session timed out: the partitions belong to another
///   member already), nothing is waited for or committed: they are
///   revoked on the tracker and let go at once, and their next owner
///   redoes what was not committed.
///
///   **The wait takes no interrupt.** It looks at the partitions now and
///   then ([`is_partition_drained`](Tracker::is_partition_drained), 1 ms
///   apart at first, 32 ms at most) rather than blocking in
///   [`drain_partition`](Tracker::drain_partition): a
///   [`Tracker::interrupt`] is left for the wait of yours it was meant
///   for (a flush's, a `drain`), and does not cut the hand-off short.
///
///   **A failed commit** is never lost from sight: every commit of a point
///   sent from here that fails counts in
///   [`commit_failures`](Self::commit_failures) and goes on to your
///   `commit_callback` (an asynchronous one's result; the final commit's
///   and a closing consumer's, which rdkafka reports to no callback, with
///   their list) and, for the hand-off's, into [`errors`](Self::errors),
///   also when its partition was handed off since (then its next owner
///   starts from the group's last commit, and the error says so). A point
///   whose save in the [`store`](Self::store) failed counts too; each
///   partition of a partly failed commit is judged by its own error. A point of a partition still
///   here is due again, and the next [`commit_progress`] sends it. A point
///   taken in a partition's ended life (a committer thread's snapshot from
///   before a hand-off) is never committed: the partition's committed
///   offset never moves back behind its next owner's, nor behind a point
///   the group confirmed; and after its hand-off a partition is not
///   committed from here until it is assigned here again.
///
///   **A panic** in your code during the hand-off (your store's `save`
///   in the final commit, your `post_rebalance`) does not leave it
///   half-way: the partitions are let go all the same, the panic is kept
///   in [`errors`](Self::errors) and then goes on unwinding. A drain
///   timeout too large for an `Instant` (`Duration::MAX`) means "a hundred
///   years", never a panic.
///
///   By default the wait runs in rdkafka's rebalance callback, which
///   then blocks the consumer's `poll` for up to `drain_timeout`. With
///   [`defer_hand_off`](Self::defer_hand_off) it runs **outside** it: the
///   callback pauses the revoked partitions and returns, and the group's
///   rebalance waits (librdkafka applies a revocation only when the
///   consumer lets the partitions go; the group waits for that within
///   `max.poll.interval.ms`, or, under the cooperative protocol, for the
///   moving partitions only, the others flowing on). Your loop goes on
///   polling: each `poll`, each [`commit_progress`] and each
///   [`continue_hand_off`] looks at the revoked partitions without
///   waiting: once every record they had in flight is resolved, or the
///   bound has passed since the revocation, it finishes the hand-off.
///   Records of a partition being handed off that your loop still polls
///   are the next owner's: [`skip`](Self::skip) says so. The deferred
///   hand-off still runs in the callback when it has nothing to wait for
///   (no record of the revoked partitions in flight), when the consumer
///   is closing or unsubscribing (its subscription is empty), or when
///   pausing fails.
///
///   **Dropping the consumer** (or a panic, or an early `?` return that
///   drops it) while a deferred hand-off waits never hangs: rdkafka's
///   `Drop` closes the consumer and polls until it is closed, and its
///   first poll finds the consumer closing: it commits what was done at
///   once (the revoked partitions' points and whatever else is due), then
///   waits for the rest within the bound, and hands the partitions off,
///   releasing what is left. librdkafka's close does not wait for the
///   hand-off, and may end the group first: then no request is made (it
///   would wait for ever), the records are released all the same and
///   what was not committed is redone by the next owner; a hand-off the
///   close left behind is released when the context is dropped. Your
///   `post_rebalance` for a hand-off finished in a poll runs at the next
///   call that has the consumer ([`commit_progress`],
///   [`continue_hand_off`], [`finish_hand_off`], the next rebalance): not
///   at all after a drop. [`finish_hand_off`] before the drop still
///   finishes it while the group answers, with your `post_rebalance`.
///
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
/// `main_queue_min_poll_interval` as they are (see below); `commit_callback` after the
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
/// Errors in the rebalance callbacks and polls (a drain that times out, a
/// final commit or a read-back that fails, a commit that failed after its
/// partition's hand-off) are kept in [`errors`](Self::errors): the
/// callbacks cannot return them. A failed asynchronous commit counts in
/// [`commit_failures`](Self::commit_failures) and goes on to your
/// `commit_callback`.
///
/// Your `main_queue_min_poll_interval` still decides the poll's interval;
/// the context also looks at a hand-off in progress there, as rdkafka
/// calls it at the start of each `poll`.
///
/// # Any consumer: `BaseConsumer` or tokio's `StreamConsumer`
///
/// [`commit_progress`], [`continue_hand_off`], [`finish_hand_off`],
/// [`read_committed`](Self::read_committed) and your [`OnRebalance`]
/// callbacks take any rdkafka consumer with this context
/// (`impl Consumer<HandOffContext<M, C>>`): a `BaseConsumer`, or a
/// `StreamConsumer` (rdkafka's `tokio` feature) whose `recv()` and
/// `stream()` poll it, and run rdkafka's callbacks, this context's
/// included. With a `StreamConsumer`:
///
/// - **Defer the hand-off** ([`defer_hand_off`](Self::defer_hand_off)):
///   by default it waits in rdkafka's rebalance callback, which runs
///   inside `recv()`, and would hold the task's thread for up to the
///   drain bound.
/// - **Call [`commit_progress`] on a timer** (`tokio::select!` on
///   `recv()` and an interval): a deferred hand-off finishes in a call
///   or a poll, and a `recv()` waits while the paused partitions bring
///   no record.
/// - The calls that wait ([`finish_hand_off`], a [`CommitMode::Sync`]
///   commit, a [`store`](Self::store) that saves synchronously, as
///   [`TopicStore`](crate::TopicStore)) block their thread: on a
///   multi-threaded runtime, run them in `tokio::task::block_in_place`.
///
/// `examples/async_pipeline.rs` is the whole pipeline on tokio
/// (`StreamConsumer`, workers as tasks, `FutureProducer`).
///
/// # Sizing the capacity
///
/// The hand-off waits at most `drain_timeout` for the revoked
/// partitions' records in flight; what is left then is **released**
/// (the next owner redoes it), and a worker that still holds a released
/// record must not produce it. So:
///
/// - give the tracker a capacity ([`Builder::capacity`](inflight::Builder::capacity))
///   the sink takes in well within `drain_timeout`: records per second
///   at the sink times the bound, halved. Without one, every record
///   consumed and not yet delivered is in flight: a trial of
///   `examples/pipeline.rs` before it had one reached the bound with
///   9,999 records in flight, and 39,954 of its 40,000 records came out
///   twice;
/// - a worker asks [`Tracker::is_current`] (or `is_current_raw`) last
///   before it produces a record, and fails the ticket of one that is no
///   longer current (its partition was handed off: the next owner
///   produces it).
///
/// A hand-off that released records says how many: in
/// [`errors`](Self::errors) (`drain of [..]: N records ... released`)
/// and in [`last_hand_off`](Self::last_hand_off) (a [`HandedOff`], which
/// your `post_rebalance` of the revocation reads), with how its final
/// commit went.
///
/// # A refused final commit, and 0 duplicates on a strict coordinator
///
/// A final commit the group refuses for a reason that may pass is made
/// again while the partitions are still owned (not lost, the consumer not
/// closed), within the drain bound: a coordinator that moves, loads or
/// timed out until the bound; `RebalanceInProgress` a few times only (3
/// in all), as it passes only once the group's rebalance ends, which
/// waits for this member to let the partitions go. What came of it is in
/// [`last_hand_off`](Self::last_hand_off) (`final_commit`,
/// `commit_attempts`); a commit that still failed also goes to
/// [`errors`](Self::errors) (with how many times it was made) and to your
/// `commit_callback`.
///
/// Kafka accepts a commit of the current generation while the group
/// prepares a rebalance, so the final commit goes through there. A
/// **strict coordinator** refuses every commit while its group is joining
/// (librdkafka's mock cluster does; so would a broker fencing commits
/// during rebalances): under eager assignment (`range`, `roundrobin`)
/// the final commit of every hand-off a rebalance starts (not one of a
/// member leaving) is refused, under `cooperative-sticky` now and then
/// (when its revocation races another join). Then what only
/// that commit carried is redone by the next owner, **unless a
/// [`store`](Self::store) saved it first**: [`TopicStore`](crate::TopicStore)
/// is saved before the group commit and read back on assignment, so with
/// it a clean rebalance gives 0 duplicates on a strict coordinator, with
/// any strategy; with the default [`GroupCommitStore`], commit regularly
/// ([`commit_progress`] every 100 ms or so) so that little is left to the
/// final commit, and prefer `cooperative-sticky`.
///
/// # Stopping cleanly
///
/// The recipe `examples/pipeline.rs` and `examples/async_pipeline.rs`
/// follow, so that what was consumed is delivered and committed, and the
/// partitions are handed off with nothing in flight:
///
/// 1. stop taking records (leave the poll loop; close the workers'
///    queue, so that they end once it is empty);
/// 2. [`finish_hand_off`]`(&consumer)`: a deferred hand-off that still
///    waits ends, within its bound (the workers deliver its records
///    meanwhile);
/// 3. wait for the workers, `producer.flush(..)`, then
///    [`tracker.drain(..)`](Tracker::drain): every record in flight is
///    delivered (or failed);
/// 4. [`commit_progress`]`(&consumer, CommitMode::Sync)`: it is all
///    committed;
/// 5. `consumer.unsubscribe()`, and poll (`poll`, or `recv()` under a
///    timeout) until the assignment is empty: the revocation hands the
///    partitions off, at once as nothing is in flight; then drop the
///    consumer.
///
/// A drop without the recipe (a panic, an early return) loses nothing
/// either (see **Dropping the consumer** above): what was not committed
/// is redone by the next owner.
pub struct HandOffContext<M: Mode = mode::Progress, C = DefaultConsumerContext> {
    tracker: Arc<Tracker<TopicPartition, i64, M>>,
    inner: C,
    drain_timeout: Duration,
    read_timeout: Duration,
    resume: Mutex<Resume>,
    commits: Commits,
    store: Box<dyn ProgressStore>,
    errors: Mutex<Vec<String>>,
    /// Whether the group's rebalance protocol is cooperative, as the last
    /// assignment found it.
    pub(crate) cooperative: AtomicBool,
    /// The hand-off's protocol (see [`crate::revocation`]), with the
    /// consumer's handle for the poll hook while a hand-off is in progress
    /// (see [`crate::drive`]).
    hand_off: Mutex<HandOff>,
    /// Revocations let go where no consumer was at hand (the poll hook):
    /// your `post_rebalance` runs at the next call that has one.
    owed: Mutex<Vec<TopicPartitionList>>,
    /// What the last hand-off did.
    last_hand_off: Mutex<Option<HandedOff>>,
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
            cooperative: AtomicBool::new(false),
            hand_off: Mutex::new(HandOff::new(drain_timeout, false)),
            owed: Mutex::new(Vec::new()),
            last_hand_off: Mutex::new(None),
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
        self.hand_off = Mutex::new(HandOff::new(self.drain_timeout, true));
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
        self.lock_hand_off().revokes(partition)
    }

    /// Whether a revocation's hand-off waits for its records: the group's
    /// rebalance waits for it, until [`commit_progress`] or
    /// [`continue_hand_off`] finishes it.
    pub fn is_handing_off(&self) -> bool {
        *self.lock_hand_off().state() != State::Assigned
    }

    pub(crate) fn lock_hand_off(&self) -> MutexGuard<'_, HandOff> {
        self.hand_off.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store the commit points are saved in.
    pub(crate) fn progress_store(&self) -> &dyn ProgressStore {
        &*self.store
    }

    /// `changes`, the tracker's commit points, each with what was read back
    /// for its partition (see [`Resume`]).
    pub(crate) fn merged(
        &self,
        changes: HashMap<TopicPartition, inflight::Progress>,
    ) -> HashMap<TopicPartition, inflight::Progress> {
        self.resume
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .merged(changes, M::max_metadata_bytes(&self.tracker))
    }

    /// Forgets what was read back for `partitions` (handed off).
    pub(crate) fn forget_resumed(&self, partitions: &[TopicPartition]) {
        let mut resume = self.resume.lock().unwrap_or_else(PoisonError::into_inner);
        for partition in partitions {
            resume.progress.remove(partition);
        }
    }

    /// Your `post_rebalance` for the revocation of `list`, for the next
    /// call that has the consumer.
    pub(crate) fn owe_post_rebalance(&self, list: TopicPartitionList) {
        self.owed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(list);
    }

    /// What was done in the partitions assigned so far (a snapshot).
    pub fn resume(&self) -> Resume {
        self.resume
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What the last revocation's hand-off did (none yet: `None`): how
    /// many records in flight it released, how its final commit went. Set
    /// before your `post_rebalance` of the revocation runs.
    pub fn last_hand_off(&self) -> Option<HandedOff> {
        self.last_hand_off
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn handed_off(&self, done: HandedOff) {
        *self
            .last_hand_off
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(done);
    }

    pub(crate) fn drain_timeout(&self) -> Duration {
        self.drain_timeout
    }

    /// The errors met in callbacks, oldest first, taken.
    pub fn errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.errors.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn error(&self, what: String) {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(what);
    }
}

impl<M: Resumable, C: OnRebalance> HandOffContext<M, C> {
    /// Runs your `post_rebalance` for the revocations let go where no
    /// consumer was at hand.
    fn pay_owed<K: Consumer<Self>>(&self, consumer: &K) {
        let owed = std::mem::take(&mut *self.owed.lock().unwrap_or_else(PoisonError::into_inner));
        for list in owed {
            OnRebalance::post_rebalance(&self.inner, consumer, &Rebalance::Revoke(&list));
        }
    }

    /// Finishes the hand-off in progress if its records are resolved or its
    /// bound passed; returns whether one still waits.
    fn continue_hand_off<K: Consumer<Self>>(&self, consumer: &K) -> bool {
        self.pay_owed(consumer);
        self.look(&Live(consumer), false, false);
        self.is_handing_off()
    }

    /// Finishes the hand-off in progress, if any, waiting for what is left
    /// of its bound.
    fn finish_hand_off<K: Consumer<Self>>(&self, consumer: &K) {
        self.pay_owed(consumer);
        let actions = self.lock_hand_off().finish();
        self.drive(&Live(consumer), actions);
    }

    /// rdkafka assigned `assigned`: applies it, reads their progress back,
    /// then runs your `post_rebalance`.
    fn assign(&self, consumer: &BaseConsumer<Self>, assigned: &TopicPartitionList) {
        // The group assigns only after a revocation was let go; finish one
        // that still waits all the same (bounded by its drain timeout).
        self.finish_hand_off(consumer);
        if consumer.closed() {
            // Served after the close terminated the group: nothing to
            // apply, and a request would wait for ever.
            return;
        }
        // Points of these partitions are taken again (a partition handed
        // off here earlier is this consumer's again).
        self.commits
            .assigned(&crate::drive::partitions_of(assigned));
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        // Relaxed: a revocation's let-go reads it, on this thread or on
        // one that finishes the hand-off after taking the hand-off's mutex,
        // which the revocation's callback (on this thread, after this)
        // took too.
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
    pub fn read_committed<K: Consumer<Self>>(&self, consumer: &K, assigned: &TopicPartitionList) {
        if assigned.count() == 0 {
            return;
        }
        self.commits
            .assigned(&crate::drive::partitions_of(assigned));
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
    consumer: &impl Consumer<HandOffContext<M, C>>,
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
/// Each `poll` of the consumer looks too, and [`commit_progress`] calls
/// this first: it is for a loop that wants your `post_rebalance` of a
/// hand-off finished in a poll to run now, or to know whether one waits.
pub fn continue_hand_off<M: Resumable, C: OnRebalance>(
    consumer: &impl Consumer<HandOffContext<M, C>>,
) -> bool {
    consumer.context().continue_hand_off(consumer)
}

/// Finishes a revocation's deferred hand-off (see
/// [`HandOffContext::defer_hand_off`]), waiting for its records at most
/// until its drain bound passes (looking now and then: it takes no
/// [`interrupt`](Tracker::interrupt)); returns at once when none waits.
/// Call it before dropping the consumer to finish the hand-off while the
/// group still answers: a drop finishes it too, but librdkafka's close may
/// end the group first (see [`HandOffContext`]).
pub fn finish_hand_off<M: Resumable, C: OnRebalance>(
    consumer: &impl Consumer<HandOffContext<M, C>>,
) {
    consumer.context().finish_hand_off(consumer);
}

/// [`commit_progress`] without the hand-off.
fn commit_changes<M: Resumable, C: OnRebalance>(
    consumer: &impl Consumer<HandOffContext<M, C>>,
    mode: CommitMode,
) -> KafkaResult<usize> {
    let context = consumer.context();
    context.commits.commit_taken(
        || context.merged(M::changes(&context.tracker)),
        mode,
        &*context.store,
        |list| match mode {
            CommitMode::Sync => Consumer::commit(consumer, list, mode),
            CommitMode::Async => crate::commits::commit_async(consumer, list),
        },
    )
}

impl<M: Mode, C> Drop for HandOffContext<M, C> {
    /// A hand-off still in progress when the consumer is gone (its close
    /// ended the group before a poll looked): its partitions' records are
    /// released on the tracker, as at its bound, with nothing committed.
    fn drop(&mut self) {
        let hand_off = self
            .hand_off
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for partition in hand_off.all_revoked() {
            let _uncommitted = self.tracker.revoke(&partition);
        }
    }
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
                self.pay_owed(consumer);
                // Yours first: the revoked partitions are still tracked.
                OnRebalance::pre_rebalance(&self.inner, consumer, &Rebalance::Revoke(list));
                // The hand-off keeps the consumer's handle for the poll
                // hook while it is in progress.
                self.on_revoke(&Live(consumer), list);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.pay_owed(consumer);
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
        let settled = self.commits.settled(&result, offsets);
        if !settled.handed_off.is_empty() {
            let e = result
                .as_ref()
                .err()
                .map_or_else(|| "a partition's error".to_owned(), ToString::to_string);
            self.error(format!(
                "commit of {:?} failed after their hand-off ({e}): their next owner starts \
                 from the group's last commit",
                settled.handed_off
            ));
        }
        self.inner.commit_callback(result, offsets);
    }

    /// rdkafka calls it at the start of each poll: the poll looks at a
    /// hand-off in progress (the poll loop of rdkafka's `Drop` too, so a
    /// consumer dropped mid-hand-off lets it go within its bound).
    fn main_queue_min_poll_interval(&self) -> Timeout {
        let handle = self.lock_hand_off().handle();
        if let Some(handle) = handle {
            let edge = PollEdge(handle);
            // Closing (rdkafka's `Drop`) or unsubscribing: no later look
            // would come, so this one waits, within the drain bound. (Not
            // asked of a group that ended: it answers no request.)
            let closing = !Edge::<M, C>::closed(&edge) && Edge::<M, C>::closing(&edge);
            self.look(&edge, closing, closing);
        }
        self.inner.main_queue_min_poll_interval()
    }
}
