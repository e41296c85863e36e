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
use crate::handed_off::HandedOff;
use crate::revocation::{Action, Look, Revoked};
use rdkafka::bindings;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, Rebalance};
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

/// The consumer itself as the hand-off's edge: any rdkafka consumer with
/// the context (a `BaseConsumer` in rdkafka's callbacks, yours in the
/// crate's calls: a `BaseConsumer` or a `StreamConsumer`).
pub(crate) struct Live<'a, K>(pub(crate) &'a K);

impl<M, C, K> Edge<M, C> for Live<'_, K>
where
    M: Resumable,
    C: OnRebalance,
    K: Consumer<HandOffContext<M, C>>,
{
    fn handle(&self) -> Option<Handle> {
        Some(Handle(self.0.client().native_ptr()))
    }

    fn lost(&self) -> bool {
        self.0.assignment_lost()
    }

    fn closing(&self) -> bool {
        self.0
            .subscription()
            .map_or(true, |subscribed| subscribed.count() == 0)
    }

    fn closed(&self) -> bool {
        // SAFETY: the consumer's live handle (borrowed for this call).
        unsafe { bindings::rd_kafka_consumer_closed(self.0.client().native_ptr()) == 1 }
    }

    fn pause(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        self.0.pause(list)
    }

    fn resume(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        self.0.resume(list)
    }

    fn let_go(&self, list: &TopicPartitionList, cooperative: bool) -> KafkaResult<()> {
        if cooperative {
            self.0.incremental_unassign(list)
        } else {
            self.0.unassign()
        }
    }

    fn commit(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        self.0.commit(list, CommitMode::Sync)
    }

    fn post_rebalance(&self, context: &HandOffContext<M, C>, list: &TopicPartitionList) {
        OnRebalance::post_rebalance(context.inner(), self.0, &Rebalance::Revoke(list));
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

/// How many times at most the final commit is made while the group
/// answers `RebalanceInProgress`: that refusal passes only when the
/// group's rebalance ends, which (eager, or a deferred cooperative
/// hand-off) waits for this member to let its partitions go, so a longer
/// retry would only hold the group up (and a strict coordinator evicts a
/// member that does not rejoin in time; librdkafka's mock cluster does
/// within the session timeout). A few catch a refusal racing the end of
/// another member's join.
const ATTEMPTS_WHILE_REBALANCING: u32 = 3;

/// How a refused commit of the hand-off may be made again while the member
/// still owns the partitions: `Some(n)` at most `n` times in all (a
/// rebalance in progress, see [`ATTEMPTS_WHILE_REBALANCING`]), `None`
/// until the drain bound (the coordinator moves, loads, or timed out);
/// not at all for other refusals (a fenced member, `IllegalGeneration` or
/// `UnknownMemberId`, owns nothing any more).
fn attempts_for(error: &KafkaError) -> Option<Option<u32>> {
    match error {
        KafkaError::ConsumerCommit(RDKafkaErrorCode::RebalanceInProgress) => {
            Some(Some(ATTEMPTS_WHILE_REBALANCING))
        }
        KafkaError::ConsumerCommit(
            RDKafkaErrorCode::NotCoordinator
            | RDKafkaErrorCode::CoordinatorLoadInProgress
            | RDKafkaErrorCode::CoordinatorNotAvailable
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::OperationTimedOut,
        ) => Some(None),
        _ => None,
    }
}

/// The hand-off's final commit of `list`: refused for a reason that may
/// pass ([`attempts_for`]), it is made again (at least once, then until
/// `deadline`, the revocation's drain bound, and as many times as the
/// refusal allows) while the member still owns the partitions (not lost,
/// not closed), a little later each time. Counts the commits made in
/// `attempts`.
fn commit_retrying<M: Resumable, C, E: Edge<M, C>>(
    edge: &E,
    list: &TopicPartitionList,
    deadline: Instant,
    attempts: &mut u32,
) -> KafkaResult<()> {
    let mut pause = Duration::from_millis(5);
    loop {
        *attempts += 1;
        let result = edge.commit(list);
        let again = match &result {
            Err(e) => match attempts_for(e) {
                None => false,
                Some(most) => {
                    most.is_none_or(|most| *attempts < most)
                        && (*attempts == 1 || Instant::now() < deadline)
                        && !edge.lost()
                        && !edge.closed()
                }
            },
            Ok(()) => false,
        };
        if !again {
            return result;
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(LONGEST_STEP);
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
        let deadline = self
            .lock_hand_off()
            .commit_deadline()
            .unwrap_or_else(Instant::now);
        let mut released = 0;
        let mut attempts = 0;
        let over = self.commits().hand_over(
            partitions,
            commit,
            || self.merged(M::changes(tracker)),
            |partition| {
                let revoked = tracker.revoke(partition);
                released += revoked.released;
                let point = M::revoked(&revoked)?;
                // With what was read back, as every point (never behind
                // what the group has).
                self.merged(HashMap::from([(partition.clone(), point)]))
                    .remove(partition)
            },
            self.progress_store(),
            |list| commit_retrying(edge, list, deadline, &mut attempts),
        );
        self.forget_resumed(partitions);
        if released > 0 && commit {
            // (A lost assignment's and a closed consumer's are reported
            // by the protocol.)
            self.error(format!(
                "drain of {partitions:?}: {released} record{} sent before the revocation not \
                 resolved within the drain timeout ({:?}): released, their next owner redoes \
                 them (size the tracker's capacity so that the records in flight drain \
                 within it)",
                if released == 1 { "" } else { "s" },
                self.drain_timeout()
            ));
        }
        self.handed_off(HandedOff {
            partitions: partitions.to_vec(),
            released,
            final_commit: (over.list.is_some() || over.result.is_err())
                .then(|| over.result.clone()),
            commit_attempts: attempts,
        });
        if let Err(e) = &over.result {
            self.error(format!(
                "final commit: {e} (made {attempts} time{} within the drain bound); \
                 {partitions:?} handed off without it (their next owner redoes what was not \
                 committed, unless a store kept it)",
                if attempts == 1 { "" } else { "s" }
            ));
            // Yours last: its panic finds the hand-over done.
            if let Some(list) = &over.list {
                edge.commit_callback(self, over.result.clone(), list);
            }
        }
    }
}

#[cfg(test)]
#[path = "drive_tests.rs"]
mod tests;
