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
//!         if consumer.context().is_done(&partition, message.offset()) {
//!             continue; // done before a restart or a rebalance
//!         }
//!         let ticket = tracker.send(partition, message.offset()).expect("in order, in budget");
//!         // ... process it, then:
//!         tracker.ack(ticket).expect("a live ticket");
//!     }
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
};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::util::Timeout;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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
/// - **Revoked** partitions (`pre_rebalance`): a bounded
///   [`drain_partition`](Tracker::drain_partition) of each, waiting at most
///   `drain_timeout` (yours; nothing else waits); then a synchronous
///   commit (the drained progress and whatever else is due; rdkafka's
///   synchronous commit takes no timeout: it returns when the broker
///   answers or librdkafka's request times out); then
///   [`revoke`](Tracker::revoke) of each (a watermark tracker's
///   `Revoked::committable` is committed `+ 1` as well). When the bound
///   passes, the partition is revoked all the same: its un-drained records
///   are released (their tickets answer `Revoked`, their acks change
///   nothing) and its committed point is what was done before them, so
///   its next owner redoes them and skips nothing.
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
/// their docs say (a revocation: yours, then the hand-off; an assignment:
/// the read-back, then yours). rdkafka's own `rebalance` (which calls the
/// two and applies the assignment) is not overridden.
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
        }
    }

    /// Keeps the commit points in `store` (saved before each group commit,
    /// read back on assignment) rather than in the group commit's metadata
    /// alone ([`GroupCommitStore`], the default). See [`crate::store`].
    pub fn store(mut self, store: impl ProgressStore + 'static) -> Self {
        self.store = Box::new(store);
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
    fn hand_off(&self, consumer: &BaseConsumer<Self>, revoked: &TopicPartitionList) {
        let partitions: Vec<TopicPartition> = revoked
            .elements()
            .iter()
            .map(|e| TopicPartition::new(e.topic(), e.partition()))
            .collect();
        for partition in &partitions {
            if let Err(e) = self.tracker.drain_partition(partition, self.drain_timeout) {
                self.error(format!("drain of {partition:?}: {e}"));
            }
        }
        if let Err(e) = commit_progress(consumer, CommitMode::Sync) {
            self.error(format!("final commit: {e}"));
        }
        let mut handed = HashMap::new();
        for partition in &partitions {
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
        for partition in &partitions {
            self.commits.forget(partition);
        }
        let mut resume = self.resume.lock().unwrap_or_else(PoisonError::into_inner);
        for partition in &partitions {
            resume.progress.remove(partition);
        }
    }

    fn take_over(&self, consumer: &BaseConsumer<Self>, assigned: &TopicPartitionList) {
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
                .progress
                .extend(progress),
            Err(e) => self.error(format!("reading committed progress: {e}")),
        }
    }
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
    let context = consumer.context();
    let changes = context
        .resume
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .merged(M::changes(&context.tracker));
    context
        .commits
        .commit_changes(consumer, changes, mode, &*context.store)
}

impl<M: Resumable, C: ClientContext> ClientContext for HandOffContext<M, C> {
    crate::delegate_client_context!(C);
}

impl<M: Resumable, C: OnRebalance> ConsumerContext for HandOffContext<M, C> {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        OnRebalance::pre_rebalance(&self.inner, consumer, rebalance);
        if let Rebalance::Revoke(revoked) = rebalance {
            self.hand_off(consumer, revoked);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(assigned) = rebalance {
            self.take_over(consumer, assigned);
        }
        OnRebalance::post_rebalance(&self.inner, consumer, rebalance);
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        self.commits.settle(&result, offsets);
        self.inner.commit_callback(result, offsets);
    }

    fn main_queue_min_poll_interval(&self) -> Timeout {
        self.inner.main_queue_min_poll_interval()
    }
}
