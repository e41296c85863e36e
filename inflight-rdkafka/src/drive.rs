//! The hand-off's driver: the rdkafka calls at the edges of the protocol
//! ([`crate::revocation`]), and the loop that carries its actions out.
//!
//! An [`Edge`] is what the protocol asks of rdkafka: the consumer itself
//! (in rdkafka's callbacks and the crate's calls, which get it), or the
//! consumer's handle alone (in the poll hook, which rdkafka calls without
//! the consumer: each poll looks at a waiting hand-off, so the poll loop
//! of rdkafka's `Drop` finishes it too).

use crate::consumer::{Resumable, TopicPartition};
use crate::hand_off::{HandOffContext, OnRebalance};
use crate::revocation::{Action, Look, Revoked};
use rdkafka::bindings;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::topic_partition_list::TopicPartitionList;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The longest step of a wait for revoked partitions: a wait looks
/// ([`Tracker::is_partition_drained`](inflight::Tracker::is_partition_drained),
/// which takes no interrupt) then sleeps, 1 ms at first, doubling to this.
const LONGEST_STEP: Duration = Duration::from_millis(32);

/// What the hand-off asks of rdkafka (see the module docs).
pub(crate) trait Edge<M: Resumable, C> {
    /// The consumer's librdkafka handle, for the poll hook while a
    /// hand-off is in progress (none where there is no consumer).
    fn handle(&self) -> Option<Handle>;
    /// Whether the consumer's assignment was lost.
    fn lost(&self) -> bool;
    /// Whether the consumer is closing or unsubscribing (its subscription
    /// is empty).
    fn closing(&self) -> bool;
    /// Whether the consumer's group terminated (a request would wait for
    /// ever).
    fn closed(&self) -> bool;
    fn pause(&self, list: &TopicPartitionList) -> KafkaResult<()>;
    fn resume(&self, list: &TopicPartitionList) -> KafkaResult<()>;
    /// The protocol's unassign of `list`.
    fn let_go(&self, list: &TopicPartitionList, cooperative: bool) -> KafkaResult<()>;
    /// A synchronous commit of `list`.
    fn commit(&self, list: &TopicPartitionList) -> KafkaResult<()>;
    /// Your `post_rebalance` for the revocation of `list`.
    fn post_rebalance(&self, context: &HandOffContext<M, C>, list: &TopicPartitionList);
    /// Your `commit_callback` for a commit of the hand-off's that failed
    /// (rdkafka gives a synchronous commit's result to none).
    fn commit_callback(
        &self,
        context: &HandOffContext<M, C>,
        result: KafkaResult<()>,
        list: &TopicPartitionList,
    );
}

impl<M: Resumable, C: OnRebalance> Edge<M, C> for BaseConsumer<HandOffContext<M, C>> {
    fn handle(&self) -> Option<Handle> {
        Some(Handle::of(self))
    }

    fn lost(&self) -> bool {
        self.assignment_lost()
    }

    fn closing(&self) -> bool {
        self.subscription()
            .map_or(true, |subscribed| subscribed.count() == 0)
    }

    fn closed(&self) -> bool {
        BaseConsumer::closed(self)
    }

    fn pause(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        Consumer::pause(self, list)
    }

    fn resume(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        Consumer::resume(self, list)
    }

    fn let_go(&self, list: &TopicPartitionList, cooperative: bool) -> KafkaResult<()> {
        if cooperative {
            self.incremental_unassign(list)
        } else {
            self.unassign()
        }
    }

    fn commit(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        Consumer::commit(self, list, CommitMode::Sync)
    }

    fn post_rebalance(&self, context: &HandOffContext<M, C>, list: &TopicPartitionList) {
        OnRebalance::post_rebalance(context.inner(), self, &Rebalance::Revoke(list));
    }

    fn commit_callback(
        &self,
        context: &HandOffContext<M, C>,
        result: KafkaResult<()>,
        list: &TopicPartitionList,
    ) {
        ConsumerContext::commit_callback(context.inner(), result, list);
    }
}

/// The consumer's librdkafka handle, kept while a hand-off is in progress
/// for the poll hook ([`HandOffContext::look_from_poll`]), which rdkafka
/// calls without the consumer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handle(*mut bindings::rd_kafka_t);

// SAFETY: librdkafka's handle is thread-safe (every call used here may be
// made from any thread); it is only a pointer to share.
unsafe impl Send for Handle {}
// SAFETY: as `Send`.
unsafe impl Sync for Handle {}

impl Handle {
    /// A handle that is never used (the protocol's tests hold one).
    #[cfg(test)]
    pub(crate) fn unused() -> Self {
        Self(std::ptr::null_mut())
    }

    pub(crate) fn of<C: rdkafka::consumer::ConsumerContext>(consumer: &BaseConsumer<C>) -> Self {
        Self(consumer.client().native_ptr())
    }
}

/// The poll hook's edge: the handle of the consumer whose poll calls it.
///
/// Soundness rests on when it is used: only inside the poll hook
/// (`ConsumerContext::main_queue_min_poll_interval`), which rdkafka calls
/// at the start of each `poll` of the consumer that owns the context, so
/// the handle is live; and only while a hand-off is in progress, which
/// rdkafka's `Drop` finishes (its poll loop calls the hook) before it
/// destroys the handle. The handle is dropped when the hand-off ends.
pub(crate) struct PollEdge(pub(crate) Handle);

fn code(err: bindings::rd_kafka_resp_err_t) -> KafkaResult<()> {
    if err == bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::from(err)))
    }
}

impl<M: Resumable, C: ConsumerContext> Edge<M, C> for PollEdge {
    fn handle(&self) -> Option<Handle> {
        Some(self.0)
    }

    fn lost(&self) -> bool {
        false // asked in rdkafka's callback only
    }

    fn closing(&self) -> bool {
        let mut list = std::ptr::null_mut();
        // SAFETY: a live handle (see the type's docs); the list returned
        // is ours to destroy, once.
        unsafe {
            let err = bindings::rd_kafka_subscription(self.0 .0, &mut list);
            if list.is_null() {
                return err != bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
            }
            let count = (*list).cnt;
            bindings::rd_kafka_topic_partition_list_destroy(list);
            count == 0
        }
    }

    fn closed(&self) -> bool {
        // SAFETY: a live handle (see the type's docs).
        unsafe { bindings::rd_kafka_consumer_closed(self.0 .0) == 1 }
    }

    fn pause(&self, _: &TopicPartitionList) -> KafkaResult<()> {
        Err(KafkaError::PauseResume("not from the poll hook".into()))
    }

    fn resume(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        // SAFETY: a live handle (see the type's docs) and a live list,
        // which librdkafka reads (and writes each partition's error into).
        code(unsafe { bindings::rd_kafka_resume_partitions(self.0 .0, list.ptr()) })
    }

    fn let_go(&self, list: &TopicPartitionList, cooperative: bool) -> KafkaResult<()> {
        if !cooperative {
            // SAFETY: a live handle; a null list clears the assignment.
            return code(unsafe { bindings::rd_kafka_assign(self.0 .0, std::ptr::null()) });
        }
        // SAFETY: a live handle and list; the error returned is ours to
        // destroy, once.
        unsafe {
            let error = bindings::rd_kafka_incremental_unassign(self.0 .0, list.ptr());
            if error.is_null() {
                return Ok(());
            }
            let err = bindings::rd_kafka_error_code(error);
            bindings::rd_kafka_error_destroy(error);
            code(err)
        }
    }

    fn commit(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        // SAFETY: a live handle and list; synchronous (`async` 0): it
        // returns when the broker answered.
        code(unsafe { bindings::rd_kafka_commit(self.0 .0, list.ptr(), 0) })
    }

    fn post_rebalance(&self, context: &HandOffContext<M, C>, list: &TopicPartitionList) {
        // No consumer to give it: the next call that has one runs it.
        context.owe_post_rebalance(list.clone());
    }

    fn commit_callback(
        &self,
        context: &HandOffContext<M, C>,
        result: KafkaResult<()>,
        list: &TopicPartitionList,
    ) {
        // The context is at hand: yours runs now, as rdkafka's poll would.
        ConsumerContext::commit_callback(context.inner(), result, list);
    }
}

/// The list of `partitions`, for rdkafka.
pub(crate) fn list_of(partitions: &[TopicPartition]) -> TopicPartitionList {
    let mut list = TopicPartitionList::with_capacity(partitions.len());
    for partition in partitions {
        list.add_partition(&partition.topic, partition.partition);
    }
    list
}

/// The partitions of `list`.
pub(crate) fn partitions_of(list: &TopicPartitionList) -> Vec<TopicPartition> {
    list.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}

impl<M: Resumable, C> HandOffContext<M, C> {
    /// rdkafka revoked `revoked` (its callback): the protocol decides.
    pub(crate) fn on_revoke<E: Edge<M, C>>(&self, edge: &E, revoked: &TopicPartitionList) {
        let partitions = partitions_of(revoked);
        let lost = edge.lost();
        let drained = !lost && partitions.iter().all(|p| self.drained(p));
        // Asked last, only when the hand-off could wait: a request to the
        // group. No subscription: closing (rdkafka's `Drop` closes the
        // consumer) or unsubscribing.
        let defers = self.lock_hand_off().defers();
        let closing = !lost && !drained && defers && edge.closing();
        let found = Revoked {
            lost,
            drained,
            closing,
        };
        let actions = {
            let mut hand_off = self.lock_hand_off();
            let actions = hand_off.revoked(partitions, found, Instant::now());
            // Under the same lock as the transition: kept while the
            // hand-off is in progress, cleared by the one that ends it.
            hand_off.hold(edge.handle());
            actions
        };
        self.drive(edge, actions);
    }

    /// Whether every record of `partition` sent so far is resolved (on a
    /// watermark tracker: passed by its watermark). Does not wait, and
    /// takes no interrupt meant for a wait of yours.
    pub(crate) fn drained(&self, partition: &TopicPartition) -> bool {
        self.tracker().is_partition_drained(partition)
    }

    /// A look at the hand-off in progress, if any (`closing`: the consumer
    /// is closing; `can_wait`: the one who looks may wait for it).
    pub(crate) fn look<E: Edge<M, C>>(&self, edge: &E, closing: bool, can_wait: bool) {
        let partitions = self.lock_hand_off().partitions().to_vec();
        if partitions.is_empty() {
            return;
        }
        let look = Look {
            drained: partitions.iter().all(|p| self.drained(p)),
            closed: edge.closed(),
            closing,
            can_wait,
        };
        let actions = self.lock_hand_off().look(look, Instant::now());
        self.drive(edge, actions);
    }

    /// Carries `actions` out, in order, with those each answer brings.
    ///
    /// A panic while carrying one out (your store's `save` in the final
    /// commit, your `post_rebalance`) does not stop the hand-off half-way:
    /// the protocol is told the action was done (a pause as failed), the
    /// rest is carried out (the partitions are let go), and the first
    /// panic then goes on unwinding.
    pub(crate) fn drive<E: Edge<M, C>>(&self, edge: &E, actions: Vec<Action>) {
        let mut actions = VecDeque::from(actions);
        let mut step = Duration::from_millis(1);
        let mut panicked = None;
        while let Some(action) = actions.pop_front() {
            let next = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.act(edge, action.clone(), &mut step)
            })) {
                Ok(next) => next,
                Err(payload) => {
                    self.error(format!("the hand-off's {action:?} panicked: carried on"));
                    panicked.get_or_insert(payload);
                    self.recover(action)
                }
            };
            actions.extend(next);
        }
        if let Some(payload) = panicked {
            std::panic::resume_unwind(payload);
        }
    }

    /// What the protocol answers once `action` was carried out, where it
    /// panicked (see [`drive`](Self::drive)).
    fn recover(&self, action: Action) -> Vec<Action> {
        match action {
            Action::Pause(_) => self
                .lock_hand_off()
                .paused(Err("the pause panicked".to_owned())),
            Action::HandOver { partitions, .. } => {
                // Only the store's save runs user code in the hand-over,
                // after the revoke and the end of the lives.
                self.forget_resumed(&partitions);
                self.lock_hand_off().handed_over()
            }
            Action::LetGo(_) => self.lock_hand_off().let_go(),
            Action::Wait { .. }
            | Action::Commit
            | Action::Resume(_)
            | Action::PostRebalance(_)
            | Action::Report(_) => Vec::new(),
        }
    }

    /// Carries `action` out; returns what the protocol answers.
    fn act<E: Edge<M, C>>(&self, edge: &E, action: Action, step: &mut Duration) -> Vec<Action> {
        match action {
            Action::Pause(partitions) => {
                let result = edge.pause(&list_of(&partitions));
                self.lock_hand_off()
                    .paused(result.map_err(|e| e.to_string()))
            }
            Action::Wait { deadline } => {
                // A look now and then: no wait that could take the
                // tracker's interrupt.
                let left = deadline.saturating_duration_since(Instant::now());
                std::thread::sleep((*step).min(left));
                *step = (*step * 2).min(LONGEST_STEP);
                let partitions = self.lock_hand_off().partitions().to_vec();
                let look = Look {
                    drained: partitions.iter().all(|p| self.drained(p)),
                    closed: edge.closed(),
                    closing: false,
                    can_wait: true,
                };
                self.lock_hand_off().look(look, Instant::now())
            }
            Action::Commit => {
                let tracker = self.tracker();
                let committed = self.commits().commit_listed(
                    || self.merged(M::changes(tracker)),
                    rdkafka::consumer::CommitMode::Sync,
                    self.progress_store(),
                    |list| edge.commit(list),
                );
                if let Err(e) = &committed.result {
                    self.error(format!("commit as the consumer closes: {e}"));
                }
                if let Some((e, list)) = committed.failed {
                    edge.commit_callback(self, Err(e), &list);
                }
                Vec::new()
            }
            Action::HandOver { partitions, commit } => {
                self.hand_over(edge, &partitions, commit);
                self.lock_hand_off().handed_over()
            }
            Action::Resume(partitions) => {
                // An application pause outlives the assignment: lift it
                // before the partitions go, or they come back paused the
                // next time.
                if let Err(e) = edge.resume(&list_of(&partitions)) {
                    self.error(format!("resuming the revoked partitions: {e}"));
                }
                Vec::new()
            }
            Action::LetGo(partitions) => {
                // Relaxed: written by the assignment before the
                // revocation's callback took the hand-off's mutex, which
                // this driver took since (see `assign`).
                let cooperative = self.cooperative.load(Ordering::Relaxed);
                if let Err(e) = edge.let_go(&list_of(&partitions), cooperative) {
                    self.error(format!("letting the revoked partitions go: {e}"));
                }
                self.lock_hand_off().let_go()
            }
            Action::PostRebalance(partitions) => {
                // The hand-off is over (its handle went with it, under the
                // hand-off's lock).
                edge.post_rebalance(self, &list_of(&partitions));
                Vec::new()
            }
            Action::Report(what) => {
                self.error(what);
                Vec::new()
            }
        }
    }

    /// The hand-over: the final commit (unless `commit` is false), the
    /// revoke of each partition on the tracker and the end of their lives
    /// in the commits, as one step (see [`crate::Commits`]); its errors are
    /// kept.
    fn hand_over<E: Edge<M, C>>(&self, edge: &E, partitions: &[TopicPartition], commit: bool) {
        let tracker = self.tracker();
        let over = self.commits().hand_over(
            partitions,
            commit,
            || self.merged(M::changes(tracker)),
            |partition| {
                let point = M::revoked(&tracker.revoke(partition))?;
                // With what was read back, as every point (never behind
                // what the group has).
                self.merged(HashMap::from([(partition.clone(), point)]))
                    .remove(partition)
            },
            self.progress_store(),
            |list| edge.commit(list),
        );
        self.forget_resumed(partitions);
        if let Err(e) = &over.result {
            self.error(format!(
                "final commit: {e}; {partitions:?} handed off without it (their next owner \
                 redoes what was not committed)"
            ));
            // Yours last: its panic finds the hand-over done.
            if let Some(list) = &over.list {
                edge.commit_callback(self, over.result.clone(), list);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inflight::{DrainError, Tracker};
    use rdkafka::consumer::DefaultConsumerContext;
    use rdkafka::topic_partition_list::Offset;
    use std::cell::RefCell;
    use std::sync::Arc;

    /// A consumer that records the calls the driver makes, and answers
    /// each commit with `commit`.
    struct Fake {
        calls: RefCell<Vec<String>>,
        commit: KafkaResult<()>,
    }

    impl Fake {
        fn new(commit: KafkaResult<()>) -> Self {
            Self {
                calls: RefCell::new(Vec::new()),
                commit,
            }
        }

        fn record(&self, call: &str, list: &TopicPartitionList) {
            let what: Vec<_> = list
                .elements()
                .iter()
                .map(|e| match e.offset() {
                    Offset::Offset(o) => format!("{}/{}@{o}", e.topic(), e.partition()),
                    _ => format!("{}/{}", e.topic(), e.partition()),
                })
                .collect();
            self.calls
                .borrow_mut()
                .push(format!("{call} {}", what.join(",")));
        }
    }

    type Context = HandOffContext<inflight::mode::Progress, DefaultConsumerContext>;

    impl Edge<inflight::mode::Progress, DefaultConsumerContext> for Fake {
        fn handle(&self) -> Option<Handle> {
            None
        }
        fn lost(&self) -> bool {
            false
        }
        fn closing(&self) -> bool {
            false
        }
        fn closed(&self) -> bool {
            false
        }
        fn pause(&self, list: &TopicPartitionList) -> KafkaResult<()> {
            self.record("pause", list);
            Ok(())
        }
        fn resume(&self, list: &TopicPartitionList) -> KafkaResult<()> {
            self.record("resume", list);
            Ok(())
        }
        fn let_go(&self, list: &TopicPartitionList, _: bool) -> KafkaResult<()> {
            self.record("let go", list);
            Ok(())
        }
        fn commit(&self, list: &TopicPartitionList) -> KafkaResult<()> {
            self.record("commit", list);
            self.commit.clone()
        }
        fn post_rebalance(&self, _: &Context, list: &TopicPartitionList) {
            self.record("post", list);
        }
        fn commit_callback(&self, _: &Context, result: KafkaResult<()>, list: &TopicPartitionList) {
            self.record(
                if result.is_ok() {
                    "callback ok"
                } else {
                    "callback failed"
                },
                list,
            );
        }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    /// A progress tracker with offsets 0..5 of `t/0` acked and 5 in flight.
    fn tracker() -> (
        Arc<inflight::ProgressTracker<TopicPartition, i64>>,
        inflight::Ticket,
    ) {
        let tracker = Arc::new(Tracker::builder().progress(4096).build());
        for offset in 0..5 {
            let ticket = tracker.send(tp(0), offset).unwrap();
            tracker.ack(ticket).unwrap();
        }
        let stuck = tracker.send(tp(0), 5).unwrap();
        (tracker, stuck)
    }

    #[test]
    fn a_deferred_hand_off_on_a_fake_consumer_pauses_then_finishes_at_a_look() {
        let (tracker, stuck) = tracker();
        let context = Context::new(tracker.clone(), Duration::from_secs(600)).defer_hand_off();
        let fake = Fake::new(Ok(()));
        context.on_revoke(&fake, &list_of(&[tp(0)]));
        assert_eq!(*fake.calls.borrow(), ["pause t/0"]);
        assert!(context.handing_off(&tp(0)));
        context.look(&fake, false, false);
        assert_eq!(fake.calls.borrow().len(), 1, "not drained: nothing more");
        tracker.ack(stuck).unwrap();
        context.look(&fake, false, false);
        assert_eq!(
            *fake.calls.borrow(),
            [
                "pause t/0",
                "commit t/0@6",
                "resume t/0",
                "let go t/0",
                "post t/0"
            ]
        );
        assert!(!context.is_handing_off());
        assert_eq!(context.errors(), Vec::<String>::new());
    }

    /// Finding 3, without a cluster: a pending interrupt stays for the
    /// user's wait while the hand-off (in the callback) waits for a record.
    #[test]
    fn the_hand_offs_wait_leaves_the_interrupt_for_the_users_wait() {
        let (tracker, stuck) = tracker();
        let _users = tracker.send(tp(9), 0).unwrap();
        let context = Context::new(tracker.clone(), Duration::from_secs(600));
        let fake = Fake::new(Ok(()));
        tracker.interrupt();
        std::thread::scope(|s| {
            let acker = s.spawn(|| {
                while !context.is_handing_off() {
                    std::thread::yield_now();
                }
                tracker.ack(stuck)
            });
            context.on_revoke(&fake, &list_of(&[tp(0)]));
            assert_eq!(acker.join().unwrap(), Ok(()), "waited for, not released");
        });
        // The final commit carries what else is due: the user's partition.
        assert_eq!(fake.calls.borrow()[0], "commit t/0@6,t/9@0");
        assert_eq!(tracker.drain(Duration::ZERO), Err(DrainError::Interrupted));
    }

    /// Finding 3, concurrently: a user's wait and the hand-off's wait run
    /// at once, and the user's interrupt reaches the user's wait, never the
    /// hand-off (which goes on waiting for its record).
    #[test]
    fn a_users_wait_is_interrupted_while_a_hand_off_waits() {
        let (tracker, stuck) = tracker();
        let _users = tracker.send(tp(9), 0).unwrap();
        let context = Context::new(tracker.clone(), Duration::from_secs(600));
        std::thread::scope(|s| {
            let hand_off = s.spawn(|| {
                let fake = Fake::new(Ok(()));
                context.on_revoke(&fake, &list_of(&[tp(0)]));
                fake.calls.into_inner()
            });
            while !context.is_handing_off() {
                std::thread::yield_now();
            }
            let user = s.spawn(|| tracker.drain(Duration::from_secs(30)));
            tracker.interrupt();
            let users = user.join().unwrap();
            let still_waits = context.is_handing_off();
            // (Acked before asserting: a failure does not wait the bound.)
            tracker.ack(stuck).unwrap();
            let calls = hand_off.join().unwrap();
            assert_eq!(users, Err(DrainError::Interrupted));
            assert!(still_waits, "the hand-off still waited");
            assert_eq!(calls[0], "commit t/0@6,t/9@0");
        });
        assert_eq!(context.errors(), Vec::<String>::new());
    }

    /// Finding 2, without a cluster: a failed final commit counts and is
    /// reported, in `errors()` and to your `commit_callback`.
    #[test]
    fn a_failed_final_commit_counts_and_is_reported() {
        let (tracker, stuck) = tracker();
        tracker.ack(stuck).unwrap();
        let context = Context::new(tracker, Duration::from_secs(600));
        let fake = Fake::new(Err(KafkaError::ConsumerCommit(
            RDKafkaErrorCode::RebalanceInProgress,
        )));
        context.on_revoke(&fake, &list_of(&[tp(0)]));
        assert_eq!(context.commit_failures(), 1);
        let errors = context.errors();
        assert!(
            errors.len() == 1 && errors[0].starts_with("final commit:"),
            "{errors:?}"
        );
        // Review finding 4: it reaches your `commit_callback` too.
        assert_eq!(
            *fake.calls.borrow(),
            [
                "commit t/0@6",
                "callback failed t/0@6",
                "let go t/0",
                "post t/0"
            ]
        );
    }

    /// A store whose save panics (user code).
    struct Panics;

    impl crate::ProgressStore for Panics {
        fn save(
            &self,
            _: &std::collections::HashMap<TopicPartition, inflight::Progress>,
        ) -> KafkaResult<()> {
            panic!("the store's save");
        }
        fn load(
            &self,
            committed: &TopicPartitionList,
            _: Duration,
        ) -> KafkaResult<std::collections::HashMap<TopicPartition, inflight::Progress>> {
            Ok(crate::consumer::progress_of(committed))
        }
    }

    /// Review finding 1 (A): a `Duration::MAX` drain timeout hands off
    /// (by default and deferred), never panics in the callback.
    #[test]
    fn a_drain_timeout_of_duration_max_hands_off() {
        for defer in [false, true] {
            let (tracker, stuck) = tracker();
            let context = Context::new(tracker.clone(), Duration::MAX);
            let context = if defer {
                context.defer_hand_off()
            } else {
                context
            };
            let fake = Fake::new(Ok(()));
            if !defer {
                tracker.ack(stuck).unwrap();
                context.on_revoke(&fake, &list_of(&[tp(0)]));
            } else {
                context.on_revoke(&fake, &list_of(&[tp(0)]));
                tracker.ack(stuck).unwrap();
                context.look(&fake, false, false);
            }
            assert!(!context.is_handing_off());
            assert!(fake.calls.borrow().contains(&"let go t/0".to_owned()));
        }
    }

    /// Review finding 1 (B): a store whose save panics in the final commit
    /// does not leave the hand-off half-way: the partitions are let go,
    /// your `post_rebalance` runs, then the panic goes on.
    #[test]
    fn a_panicking_store_still_lets_the_partitions_go() {
        for defer in [false, true] {
            let (tracker, stuck) = tracker();
            let context = Context::new(tracker.clone(), Duration::from_secs(600)).store(Panics);
            let context = if defer {
                context.defer_hand_off()
            } else {
                context
            };
            let fake = Fake::new(Ok(()));
            if defer {
                context.on_revoke(&fake, &list_of(&[tp(0)]));
                tracker.ack(stuck).unwrap();
            } else {
                tracker.ack(stuck).unwrap();
            }
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if defer {
                    context.look(&fake, false, false);
                } else {
                    context.on_revoke(&fake, &list_of(&[tp(0)]));
                }
            }));
            assert!(unwound.is_err(), "the panic goes on");
            assert!(!context.is_handing_off());
            let calls = fake.calls.borrow();
            assert_eq!(
                calls[calls.len() - 2..],
                ["let go t/0".to_owned(), "post t/0".to_owned()]
            );
            assert!(context.errors().iter().any(|e| e.contains("panicked")));
            assert_eq!(
                tracker.ack(tracker.send(tp(0), 6).unwrap()),
                Ok(()),
                "a new life"
            );
        }
    }
}
