//! Commits that cannot be lost: what was handed out for a commit is kept
//! until the broker confirms it.
//!
//! A tracker hands each change of a partition's commit point out once
//! (`progress()`, `committable()`): if the commit carrying it failed and
//! nothing changed since, nothing would ever offer it again, and the
//! group's committed offset would stay behind for as long as the partition
//! is quiet (and a rebalance then redoes what was done). [`Commits`] keeps
//! each partition's latest point until a commit result confirms it:
//!
//! - a point is **due** when it is new (or its commit failed): the next
//!   [`commit`](Commits::commit) sends it;
//! - then **sent**: it waits for its result, from a synchronous commit's
//!   return or from the commit callback of an asynchronous one
//!   ([`settle`](Commits::settle));
//! - a result that confirms it removes it; one that reports an error makes
//!   it due again. Each partition of a result is judged by its own error
//!   when the result names one (librdkafka fails a whole commit when one
//!   partition failed), by the call's otherwise. Every failed commit of a
//!   point sent from here counts in [`failures`](Commits::failures), an
//!   older point's and a handed-off partition's too (those are not due
//!   again: a newer point, or the partition's next owner, supersedes
//!   them), and so does a point whose save in the store failed (no commit
//!   was made) and a commit forgotten on its way (more than 16 of one
//!   partition without a result: its result can no longer be told). A
//!   result for a commit that is not this one's (auto-commit, a commit of
//!   your own) changes nothing.
//!
//! Points never go backwards: a change whose `next()` is below the kept
//! point's, or below the highest point confirmed in the partition's life,
//! is ignored (offsets only go back after a revoke, and a revoked
//! partition is [`forget`](Commits::forget)ten).
//!
//! **Lives.** [`forget`](Commits::forget) ends a partition's life here (a
//! hand-off does, once its final commit is made): what was kept of it is
//! dropped, and a point taken in the ended life is never committed. A
//! point taken from the tracker before the end and offered after it (a
//! committer on another thread with an older snapshot) would move the
//! partition's committed offset back behind its next owner's; so a point
//! carries the life it was taken in, and `commit` takes the tracker's
//! points, saves and sends them while no life can end (see
//! IMPLEMENTATION.md, "The hand-off as a state machine"). After a
//! [`HandOffContext`](crate::HandOffContext)'s hand-off, no point of the
//! partition is taken until it is assigned to the consumer again (a
//! record polled before the hand-off and sent after it starts a tracker
//! life the consumer does not own).
//!
//! [`HandOffContext`](crate::HandOffContext) holds one and settles it from
//! its commit callback; a consumer with a context of its own does the same.

use crate::consumer::{commit_list, metadata_of, Resumable, TopicPartition};
use crate::store::{GroupCommitStore, ProgressStore};
use inflight::{Progress, Tracker};
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList, TopicPartitionListElem};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Commits of one partition sent and not settled that are remembered (the
/// oldest is forgotten past it: a result that never comes, from a consumer
/// that closed, keeps nothing for ever). A commit forgotten so counts as a
/// failure: its result can no longer be told.
const ON_THE_WAY: usize = 16;

/// A partition's latest commit point not yet confirmed.
#[derive(Debug)]
struct Point {
    progress: Progress,
    /// Its commit was sent and has no result yet.
    sent: bool,
}

/// A commit sent for a partition, whose result has not come back.
#[derive(Debug)]
struct Sent {
    progress: Progress,
    /// The partition's life it was taken in (see [`Ledger::ended_at`]).
    life: u64,
}

/// What [`Commits`] keeps, under one lock.
#[derive(Debug, Default)]
struct Ledger {
    /// Each partition's latest point not yet confirmed, of its current life.
    points: HashMap<TopicPartition, Point>,
    /// The commits sent per partition whose result has not come back,
    /// oldest first: a result is this one's when it carries one of them.
    on_the_way: HashMap<TopicPartition, Vec<Sent>>,
    /// Lives ended so far, all partitions together: a [`Stamp`].
    ended: u64,
    /// Per partition, the count `ended` had when its last life ended (0:
    /// never): its current life's number.
    ended_at: HashMap<TopicPartition, u64>,
    /// Partitions handed off ([`Commits::hand_over`]) and not assigned
    /// here again since ([`Commits::assigned`]): no point of theirs is
    /// taken (a record polled before the hand-off and sent after it starts
    /// a tracker life this consumer does not own).
    gone: HashSet<TopicPartition>,
    /// Commits forgotten on their way since the last count (see
    /// [`ON_THE_WAY`]).
    evicted: usize,
    /// Per partition, the highest offset (**next to read**) confirmed in
    /// its current life: no point below it is taken (it would move the
    /// group's offset back). Dropped when the life ends.
    floor: HashMap<TopicPartition, u64>,
}

impl Ledger {
    fn life(&self, partition: &TopicPartition) -> u64 {
        self.ended_at.get(partition).copied().unwrap_or(0)
    }

    /// Takes `changes`, taken when `ended` was `stamp`: a change of a
    /// partition whose life ended since is dropped, one below the kept
    /// point ignored.
    fn take(&mut self, stamp: u64, changes: HashMap<TopicPartition, Progress>) {
        for (partition, progress) in changes {
            if self.life(&partition) > stamp || self.gone.contains(&partition) {
                continue; // taken in a life that ended since, or not ours
            }
            if self
                .floor
                .get(&partition)
                .is_some_and(|&floor| progress.next() < floor)
            {
                continue; // behind what the group confirmed
            }
            match self.points.get_mut(&partition) {
                Some(point) if progress.next() < point.progress.next() => {}
                Some(point) => {
                    point.progress = progress;
                    point.sent = false;
                }
                None => {
                    self.points.insert(
                        partition,
                        Point {
                            progress,
                            sent: false,
                        },
                    );
                }
            }
        }
    }

    /// The points due (new or failed), marked sent and remembered on their
    /// way.
    fn due(&mut self) -> HashMap<TopicPartition, Progress> {
        let due: HashMap<_, _> = self
            .points
            .iter_mut()
            .filter(|(_, point)| !point.sent)
            .map(|(partition, point)| {
                point.sent = true;
                (partition.clone(), point.progress.clone())
            })
            .collect();
        for (partition, progress) in &due {
            self.send(partition, progress.clone());
        }
        due
    }

    /// Remembers a commit of `progress` for `partition`, in its current life.
    fn send(&mut self, partition: &TopicPartition, progress: Progress) {
        let life = self.life(partition);
        let sent = self.on_the_way.entry(partition.clone()).or_default();
        if sent.len() == ON_THE_WAY {
            sent.remove(0);
            self.evicted += 1;
        }
        sent.push(Sent { progress, life });
    }

    /// Ends `partition`'s life: its kept point is dropped, and a point
    /// taken before now is never kept again; `gone`: no point of it is
    /// kept until it is assigned here again.
    fn end(&mut self, partition: &TopicPartition, gone: bool) {
        self.ended += 1;
        self.ended_at.insert(partition.clone(), self.ended);
        self.points.remove(partition);
        self.floor.remove(partition);
        if gone {
            self.gone.insert(partition.clone());
        }
    }
}

/// Whether `element` of a commit's list carries `progress`: its offset and
/// metadata.
fn carries(element: &TopicPartitionListElem<'_>, progress: &Progress) -> bool {
    let next = i64::try_from(progress.next()).unwrap_or(i64::MAX);
    element.offset() == Offset::Offset(next) && metadata_of(element) == progress.encode()
}

/// A commit's result, settled.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// The points of this one's whose commit failed.
    pub(crate) failed: usize,
    /// The partitions among those whose life had ended (handed off): not
    /// due again, nothing here will commit them.
    pub(crate) handed_off: Vec<TopicPartition>,
}

/// The life count when a tracker's commit points were taken:
/// [`Commits::stamp`] before taking them, [`Commits::due_taken`] with them.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp(u64);

/// The commit points handed out and not yet confirmed (see the module
/// docs).
#[derive(Debug, Default)]
pub struct Commits {
    /// Held while a commit's points are taken, saved and sent, and while a
    /// hand-off ends its partitions' lives: a point is sent in the life it
    /// was taken in, or not at all. Taken before `ledger`.
    gate: Mutex<()>,
    ledger: Mutex<Ledger>,
    failures: AtomicU64,
}

impl Commits {
    /// Nothing kept.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn gate(&self) -> MutexGuard<'_, ()> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lives ended so far: take it before taking commit points from
    /// the tracker, and give it to [`due_taken`](Self::due_taken) with
    /// them.
    #[cfg(test)]
    pub(crate) fn stamp(&self) -> Stamp {
        Stamp(self.lock().ended)
    }

    /// Takes `changes` (commit points, **next to read**, as a tracker
    /// hands them out, taken now) and returns what to commit now: each
    /// partition whose latest point is due, marked sent. A change below the
    /// kept point is ignored. Crate-only (its tests): a caller that sent
    /// what it returns after the gate could commit a point of a life that
    /// ended meanwhile; [`commit_taken`](Self::commit_taken) sends under it.
    #[cfg(test)]
    pub(crate) fn due(
        &self,
        changes: HashMap<TopicPartition, Progress>,
    ) -> HashMap<TopicPartition, Progress> {
        let mut ledger = self.lock();
        let stamp = ledger.ended;
        ledger.take(stamp, changes);
        let due = ledger.due();
        self.count_evicted(&mut ledger);
        due
    }

    /// [`due`](Self::due) for `changes` taken from the tracker after
    /// `stamp`: a change of a partition [`forget`](Self::forget)ten since
    /// (handed off: its point belongs to an ended life) is dropped, and is
    /// never committed.
    #[cfg(test)]
    pub(crate) fn due_taken(
        &self,
        stamp: Stamp,
        changes: HashMap<TopicPartition, Progress>,
    ) -> HashMap<TopicPartition, Progress> {
        let mut ledger = self.lock();
        ledger.take(stamp.0, changes);
        let due = ledger.due();
        self.count_evicted(&mut ledger);
        due
    }

    /// Counts the commits forgotten on their way as failed (their result
    /// can no longer be told).
    fn count_evicted(&self, ledger: &mut Ledger) {
        let evicted = std::mem::take(&mut ledger.evicted);
        // Relaxed: a count.
        self.failures.fetch_add(evicted as u64, Ordering::Relaxed);
    }

    /// Counts `n` points whose commit failed before it was sent (the
    /// store's save).
    fn count_failed(&self, n: usize) {
        // Relaxed: a count.
        self.failures.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// `partitions` were assigned here (again): their points are taken
    /// again (see [`hand_over`](Self::hand_over)).
    pub(crate) fn assigned(&self, partitions: &[TopicPartition]) {
        let _gate = self.gate();
        let mut ledger = self.lock();
        for partition in partitions {
            ledger.gone.remove(partition);
        }
    }

    /// Settles a commit's result: `result` and the list committed, as
    /// rdkafka's commit callback gives them (or a synchronous commit's
    /// return and the list passed to it). An element that carries a point
    /// sent from here (its offset and metadata) is this one's: on success
    /// it confirms the partition's latest point if it is that one; on an
    /// error it counts as a failure, and the latest point is due again if
    /// it is that one. Each element is judged by its own error when any
    /// element of the list carries one (librdkafka reports a commit as
    /// failed when one partition failed: the others were committed), by
    /// `result` otherwise. Returns how many points failed.
    pub fn settle(&self, result: &KafkaResult<()>, offsets: &TopicPartitionList) -> usize {
        self.settled(result, offsets).failed
    }

    /// [`settle`](Self::settle), saying which partitions failed after their
    /// hand-off.
    pub(crate) fn settled(
        &self,
        result: &KafkaResult<()>,
        offsets: &TopicPartitionList,
    ) -> Settled {
        let elements = offsets.elements();
        // Per partition where the list says which failed; else the call's
        // result is every element's.
        let per_element = elements.iter().any(|e| e.error().is_err());
        let mut ledger = self.lock();
        let mut settled = Settled::default();
        for element in elements {
            let partition = TopicPartition::new(element.topic(), element.partition());
            let Some(sent) = ledger.on_the_way.get_mut(&partition) else {
                continue;
            };
            let Some(at) = sent.iter().position(|s| carries(&element, &s.progress)) else {
                continue; // not a commit of this one's
            };
            let sent = sent.remove(at);
            if ledger.on_the_way[&partition].is_empty() {
                ledger.on_the_way.remove(&partition);
            }
            let failed = if per_element {
                element.error().is_err()
            } else {
                result.is_err()
            };
            let current = sent.life == ledger.life(&partition);
            if current && !failed {
                let floor = ledger.floor.entry(partition.clone()).or_default();
                *floor = (*floor).max(sent.progress.next());
            }
            if current {
                if let Some(point) = ledger.points.get_mut(&partition) {
                    if point.sent && point.progress == sent.progress {
                        if failed {
                            point.sent = false;
                        } else {
                            ledger.points.remove(&partition);
                        }
                    }
                }
            }
            if failed {
                settled.failed += 1;
                if !current {
                    settled.handed_off.push(partition);
                }
            }
        }
        drop(ledger);
        // Relaxed: a count.
        self.failures
            .fetch_add(settled.failed as u64, Ordering::Relaxed);
        settled
    }

    /// Ends `partition`'s life here: what is kept for it is dropped, and a
    /// point taken before (by a [`commit`](Self::commit) on another
    /// thread) is never committed. After a revoke, its commits are its
    /// next owner's.
    pub fn forget(&self, partition: &TopicPartition) {
        let _gate = self.gate();
        self.lock().end(partition, false);
    }

    /// Partitions whose latest point is not confirmed yet.
    pub fn unconfirmed(&self) -> usize {
        self.lock().points.len()
    }

    /// Commit points of this one's whose commit failed, so far (see the
    /// module docs).
    pub fn failures(&self) -> u64 {
        // Relaxed: a count.
        self.failures.load(Ordering::Relaxed)
    }

    /// Commits what changed on `tracker` since the last call and what is
    /// due again: for a progress tracker each partition's `next()` (**next
    /// to read**, as it is) with its `encode()`d progress as metadata; for
    /// a watermark tracker `committable()` (**last done**) `+ 1`. Returns
    /// how many partitions it sent (none: nothing is sent).
    ///
    /// A [`CommitMode::Sync`] commit is settled here; an asynchronous one
    /// by the consumer context's commit callback, which must call
    /// [`settle`](Self::settle) (`HandOffContext`'s does). An error
    /// returned here has already made its points due again. May run on any
    /// thread: the points are taken from the tracker and sent while no
    /// partition's life ends here (see the module docs).
    pub fn commit<K, M>(
        &self,
        consumer: &impl Consumer<K>,
        tracker: &Tracker<TopicPartition, i64, M>,
        mode: CommitMode,
    ) -> KafkaResult<usize>
    where
        K: ConsumerContext,
        M: Resumable,
    {
        self.commit_to(consumer, tracker, mode, &GroupCommitStore)
    }

    /// [`commit`](Self::commit), saving the points in `store` first: if
    /// the save fails, no group commit is made and the points are due
    /// again.
    pub fn commit_to<K, M>(
        &self,
        consumer: &impl Consumer<K>,
        tracker: &Tracker<TopicPartition, i64, M>,
        mode: CommitMode,
        store: &dyn ProgressStore,
    ) -> KafkaResult<usize>
    where
        K: ConsumerContext,
        M: Resumable,
    {
        self.commit_taken(
            || M::changes(tracker),
            mode,
            store,
            |list| match mode {
                CommitMode::Sync => consumer.commit(list, mode),
                CommitMode::Async => commit_async(consumer, list),
            },
        )
    }

    /// [`commit_to`](Self::commit_to) with the tracker's points taken by
    /// `take` (`HandOffContext` merges them with what it read back) and the
    /// commit made by `send` (settled here when `mode` is synchronous or it
    /// fails).
    pub(crate) fn commit_taken(
        &self,
        take: impl FnOnce() -> HashMap<TopicPartition, Progress>,
        mode: CommitMode,
        store: &dyn ProgressStore,
        send: impl FnOnce(&TopicPartitionList) -> KafkaResult<()>,
    ) -> KafkaResult<usize> {
        self.commit_listed(take, mode, store, send).result
    }

    /// [`commit_taken`](Self::commit_taken), returning the list of a
    /// commit that failed (for your `commit_callback`).
    pub(crate) fn commit_listed(
        &self,
        take: impl FnOnce() -> HashMap<TopicPartition, Progress>,
        mode: CommitMode,
        store: &dyn ProgressStore,
        send: impl FnOnce(&TopicPartitionList) -> KafkaResult<()>,
    ) -> Committed {
        // No life ends from here until the commit is sent: its points are
        // of their partitions' current lives (see the module docs).
        let _gate = self.gate();
        let due = {
            let mut ledger = self.lock();
            let stamp = ledger.ended;
            ledger.take(stamp, take());
            let due = ledger.due();
            self.count_evicted(&mut ledger);
            due
        };
        if due.is_empty() {
            return Committed {
                result: Ok(0),
                failed: None,
            };
        }
        // Due again on every way out before the send (an error, a panic
        // in the store's save).
        let unsent = Unsent::new(self, &due);
        let list = match commit_list(&due) {
            Ok(list) => list,
            Err(e) => {
                return Committed {
                    result: Err(e),
                    failed: None,
                }
            }
        };
        if let Err(e) = store.save(&due) {
            self.count_failed(due.len());
            return Committed {
                result: Err(e.clone()),
                failed: Some((e, list)),
            };
        }
        unsent.sent();
        let result = send(&list);
        if result.is_err() || matches!(mode, CommitMode::Sync) {
            self.settled(&result, &list);
        }
        match result {
            Ok(()) => Committed {
                result: Ok(due.len()),
                failed: None,
            },
            Err(e) => Committed {
                result: Err(e.clone()),
                failed: Some((e, list)),
            },
        }
    }

    /// A hand-off's last commit and the end of `partitions`' lives, in one
    /// step no other commit interleaves with: the tracker's points are
    /// taken (`take`), each partition is revoked on the tracker (`revoke`,
    /// which returns the point it hands over, if the mode commits one),
    /// and the final commit carries every partition's latest point not
    /// yet **confirmed** (sent or not: an asynchronous commit still on its
    /// way may yet fail) and every other point due. Then their lives end
    /// (and no point of theirs is taken until they are
    /// [`assigned`](Self::assigned) here again), and the commit is saved
    /// in `store` and made by `send` (synchronous), and settled. With
    /// `commit` false (a lost assignment, a closed consumer) nothing is
    /// taken or committed: the partitions are revoked and their lives end.
    pub(crate) fn hand_over(
        &self,
        partitions: &[TopicPartition],
        commit: bool,
        take: impl FnOnce() -> HashMap<TopicPartition, Progress>,
        mut revoke: impl FnMut(&TopicPartition) -> Option<Progress>,
        store: &dyn ProgressStore,
        send: impl FnOnce(&TopicPartitionList) -> KafkaResult<()>,
    ) -> HandedOver {
        let _gate = self.gate();
        let last = {
            let mut ledger = self.lock();
            let stamp = ledger.ended;
            if commit {
                ledger.take(stamp, take());
            }
            let mut handed = HashMap::new();
            for partition in partitions {
                if let Some(point) = revoke(partition) {
                    handed.insert(partition.clone(), point);
                }
            }
            let mut last = HashMap::new();
            if commit {
                // A revoke's point (a prefix) only where it is ahead of
                // the kept one, which may say more is done beyond.
                handed.retain(|partition, point| {
                    ledger
                        .points
                        .get(partition)
                        .is_none_or(|kept| kept.progress.next() < point.next())
                });
                ledger.take(stamp, handed);
                for partition in partitions {
                    // Unconfirmed, whether sent or not.
                    if let Some(point) = ledger.points.get_mut(partition) {
                        point.sent = false;
                    }
                }
                last = ledger.due();
                self.count_evicted(&mut ledger);
            }
            for partition in partitions {
                ledger.end(partition, true);
            }
            last
        };
        let mut handed_over = HandedOver::default();
        if last.is_empty() {
            return handed_over;
        }
        // Never sent, on every way out before the send (the list, the
        // save's error or panic): the points of the other partitions are
        // due again; the handed-off ones go nowhere.
        let unsent = Unsent::new(self, &last);
        let list = match commit_list(&last) {
            Ok(list) => list,
            Err(e) => {
                handed_over.result = Err(e);
                return handed_over;
            }
        };
        if let Err(e) = store.save(&last) {
            self.count_failed(last.len());
            handed_over.result = Err(e);
            handed_over.list = Some(list);
            return handed_over;
        }
        unsent.sent();
        let result = send(&list);
        handed_over.settled = self.settled(&result, &list);
        handed_over.result = result;
        handed_over.list = Some(list);
        handed_over
    }

    /// Marks `sent` due again and forgets them on their way: their commit
    /// was never sent.
    fn undo(&self, sent: &HashMap<TopicPartition, Progress>) {
        let mut ledger = self.lock();
        for (partition, progress) in sent {
            if let Some(point) = ledger.points.get_mut(partition) {
                if point.progress == *progress {
                    point.sent = false;
                }
            }
            if let Some(on_the_way) = ledger.on_the_way.get_mut(partition) {
                if let Some(at) = on_the_way.iter().rposition(|s| s.progress == *progress) {
                    on_the_way.remove(at);
                }
                if on_the_way.is_empty() {
                    ledger.on_the_way.remove(partition);
                }
            }
        }
    }
}

/// Points marked sent whose commit was not sent yet: [`Commits::undo`]ne
/// when dropped (every way out before the send, a panic's included)
/// unless [`sent`](Self::sent).
struct Unsent<'a> {
    commits: &'a Commits,
    points: Option<&'a HashMap<TopicPartition, Progress>>,
}

impl<'a> Unsent<'a> {
    fn new(commits: &'a Commits, points: &'a HashMap<TopicPartition, Progress>) -> Self {
        Self {
            commits,
            points: Some(points),
        }
    }

    /// The commit is sent: nothing to undo.
    fn sent(mut self) {
        self.points = None;
    }
}

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some(points) = self.points {
            self.commits.undo(points);
        }
    }
}

/// A commit made by [`Commits::commit_listed`].
#[derive(Debug)]
pub(crate) struct Committed {
    /// How many partitions it sent, or why it failed.
    pub(crate) result: KafkaResult<usize>,
    /// A commit that failed (its save or its send), and its list: for your
    /// `commit_callback`.
    pub(crate) failed: Option<(rdkafka::error::KafkaError, TopicPartitionList)>,
}

/// A hand-off's last commit ([`Commits::hand_over`]).
#[derive(Debug)]
pub(crate) struct HandedOver {
    /// The commit's result (or the save's, the list's).
    pub(crate) result: KafkaResult<()>,
    /// Its result, settled.
    pub(crate) settled: Settled,
    /// The list it committed (or would have), if one was made.
    pub(crate) list: Option<TopicPartitionList>,
}

impl Default for HandedOver {
    fn default() -> Self {
        Self {
            result: Ok(()),
            settled: Settled::default(),
            list: None,
        }
    }
}

/// An asynchronous commit of `list` whose result reaches the consumer
/// context's `commit_callback`.
///
/// rdkafka's `commit(list, CommitMode::Async)` reports no result:
/// librdkafka posts a manual asynchronous commit's result only to an
/// `offset_commit_cb` (which rust-rdkafka does not set) or to a queue
/// given with the commit; rust-rdkafka's commit events are those of
/// auto-commits. So the commit is made with `rd_kafka_commit_queue` and
/// the consumer's own queue: its result comes back as an offset commit
/// event, which the consumer's `poll` hands to `commit_callback`.
pub(crate) fn commit_async<K: ConsumerContext>(
    consumer: &impl Consumer<K>,
    list: &TopicPartitionList,
) -> KafkaResult<()> {
    use rdkafka::bindings;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the consumer's live handle (borrowed for this call);
    // the queue handle is a new reference, released below.
    let queue = unsafe { bindings::rd_kafka_queue_get_consumer(rk) };
    if queue.is_null() {
        // No consumer group (no `group.id`): nothing to commit to.
        return Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::UnknownGroup));
    }
    // SAFETY: `rk`, `list` and `queue` are live; librdkafka copies the list
    // and keeps its own reference to the queue until the result is posted.
    let err = unsafe {
        bindings::rd_kafka_commit_queue(rk, list.ptr(), queue, None, std::ptr::null_mut())
    };
    // SAFETY: the reference taken above, released once.
    unsafe { bindings::rd_kafka_queue_destroy(queue) };
    if err == bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(KafkaError::ConsumerCommit(err.into()))
    }
}

#[cfg(test)]
#[path = "commits_tests.rs"]
mod tests;
