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
//!   it due again (and counts in [`failures`](Commits::failures)). A
//!   result for an older point, or for a commit that is not this one's
//!   (auto-commit, a commit of your own), changes nothing.
//!
//! Points never go backwards: a change whose `next()` is below the kept
//! point's is ignored (offsets only go back after a revoke, and a revoked
//! partition is [`forget`](Commits::forget)ten).
//!
//! [`HandOffContext`](crate::HandOffContext) holds one and settles it from
//! its commit callback; a consumer with a context of its own does the same.

use crate::consumer::{commit_list, metadata_of, Resumable, TopicPartition};
use crate::store::{GroupCommitStore, ProgressStore};
use inflight::{Progress, Tracker};
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A partition's latest commit point not yet confirmed.
#[derive(Debug)]
struct Point {
    progress: Progress,
    /// Its commit was sent and has no result yet.
    sent: bool,
}

/// The commit points handed out and not yet confirmed (see the module
/// docs).
#[derive(Debug, Default)]
pub struct Commits {
    points: Mutex<HashMap<TopicPartition, Point>>,
    failures: AtomicU64,
}

impl Commits {
    /// Nothing kept.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<TopicPartition, Point>> {
        self.points.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `changes` (commit points, **next to read**, as a tracker
    /// hands them out) and returns what to commit now: each partition whose
    /// latest point is due, marked sent. A change below the kept point is
    /// ignored.
    pub fn due(
        &self,
        changes: HashMap<TopicPartition, Progress>,
    ) -> HashMap<TopicPartition, Progress> {
        let mut points = self.lock();
        for (partition, progress) in changes {
            match points.get_mut(&partition) {
                Some(point) if progress.next() < point.progress.next() => {}
                Some(point) => {
                    point.progress = progress;
                    point.sent = false;
                }
                None => {
                    points.insert(
                        partition,
                        Point {
                            progress,
                            sent: false,
                        },
                    );
                }
            }
        }
        points
            .iter_mut()
            .filter(|(_, point)| !point.sent)
            .map(|(partition, point)| {
                point.sent = true;
                (partition.clone(), point.progress.clone())
            })
            .collect()
    }

    /// Settles a commit's result: `result` and the list committed, as
    /// rdkafka's commit callback gives them (or a synchronous commit's
    /// return and the list passed to it). A partition whose sent point
    /// the list carries (its offset and metadata) is confirmed by success,
    /// and due again after an error (the call's or the partition's own).
    /// Returns how many points failed.
    pub fn settle(&self, result: &KafkaResult<()>, offsets: &TopicPartitionList) -> usize {
        let mut points = self.lock();
        let mut failed = 0;
        for element in offsets.elements() {
            let partition = TopicPartition::new(element.topic(), element.partition());
            let Some(point) = points.get_mut(&partition) else {
                continue;
            };
            let next = i64::try_from(point.progress.next()).unwrap_or(i64::MAX);
            let carries = point.sent
                && element.offset() == Offset::Offset(next)
                && metadata_of(&element) == point.progress.encode();
            if !carries {
                continue;
            }
            if result.is_ok() && element.error().is_ok() {
                points.remove(&partition);
            } else {
                point.sent = false;
                failed += 1;
            }
        }
        drop(points);
        // Relaxed: a count.
        self.failures.fetch_add(failed as u64, Ordering::Relaxed);
        failed
    }

    /// Drops what is kept for `partition`: after it was revoked, its
    /// commits are its next owner's.
    pub fn forget(&self, partition: &TopicPartition) {
        self.lock().remove(partition);
    }

    /// Partitions whose latest point is not confirmed yet.
    pub fn unconfirmed(&self) -> usize {
        self.lock().len()
    }

    /// Commit points whose commit failed (each is due again), so far.
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
    /// returned here has already made its points due again.
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
        self.commit_changes(consumer, M::changes(tracker), mode, store)
    }

    /// [`commit_to`](Self::commit_to) for commit points already taken from
    /// the tracker (`HandOffContext` merges them with what it read back).
    pub(crate) fn commit_changes<K: ConsumerContext>(
        &self,
        consumer: &impl Consumer<K>,
        changes: HashMap<TopicPartition, Progress>,
        mode: CommitMode,
        store: &dyn ProgressStore,
    ) -> KafkaResult<usize> {
        let due = self.due(changes);
        if due.is_empty() {
            return Ok(0);
        }
        let list = match commit_list(&due) {
            Ok(list) => list,
            Err(e) => {
                self.undo(due);
                return Err(e);
            }
        };
        if let Err(e) = store.save(&due) {
            self.undo(due);
            return Err(e);
        }
        let result = match mode {
            CommitMode::Sync => consumer.commit(&list, mode),
            CommitMode::Async => commit_async(consumer, &list),
        };
        if result.is_err() || matches!(mode, CommitMode::Sync) {
            self.settle(&result, &list);
        }
        result.map(|()| due.len())
    }

    /// Marks `sent` due again: their commit was never sent.
    fn undo(&self, sent: HashMap<TopicPartition, Progress>) {
        let mut points = self.lock();
        for (partition, progress) in sent {
            if let Some(point) = points.get_mut(&partition) {
                if point.progress == progress {
                    point.sent = false;
                }
            }
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
fn commit_async<K: ConsumerContext>(
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
mod tests {
    use super::*;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    fn failed() -> KafkaResult<()> {
        Err(KafkaError::ConsumerCommit(
            RDKafkaErrorCode::RequestTimedOut,
        ))
    }

    /// What the broker ends with: the last confirmed point per partition.
    fn apply(
        broker: &mut HashMap<TopicPartition, u64>,
        commits: &Commits,
        result: KafkaResult<()>,
        list: &TopicPartitionList,
    ) {
        commits.settle(&result, list);
        if result.is_ok() {
            for e in list.elements() {
                if let Offset::Offset(o) = e.offset() {
                    broker.insert(TopicPartition::new(e.topic(), e.partition()), o as u64);
                }
            }
        }
    }

    #[test]
    fn a_failed_commit_is_offered_again_and_nothing_goes_backwards() {
        let commits = Commits::new();
        let mut broker = HashMap::new();
        // Round 1: two partitions; the commit fails.
        let due = commits.due(HashMap::from([
            (tp(0), Progress::at(10)),
            (tp(1), Progress::at(5)),
        ]));
        assert_eq!(due.len(), 2);
        let first = commit_list(&due).unwrap();
        // Round 2 before round 1's result: nothing new, nothing re-sent
        // while it is on its way.
        assert!(commits.due(HashMap::new()).is_empty());
        apply(&mut broker, &commits, failed(), &first);
        assert_eq!(commits.failures(), 2);
        // Round 3: partition 0 moved on; partition 1 did not, and is
        // offered again all the same.
        let due = commits.due(HashMap::from([(tp(0), Progress::at(20))]));
        assert_eq!(due[&tp(0)], Progress::at(20));
        assert_eq!(due[&tp(1)], Progress::at(5), "the failed point again");
        let third = commit_list(&due).unwrap();
        apply(&mut broker, &commits, Ok(()), &third);
        assert_eq!(commits.unconfirmed(), 0);
        assert_eq!(broker, HashMap::from([(tp(0), 20), (tp(1), 5)]));
        // A late result of round 1 (a callback after the sync return, or a
        // retry's) confirms or fails nothing now.
        apply(&mut broker, &commits, failed(), &first);
        assert!(commits.due(HashMap::new()).is_empty());
        // A change backwards (a stale hand-out) is ignored while a newer
        // point is kept.
        let due = commits.due(HashMap::from([(tp(0), Progress::at(30))]));
        let fourth = commit_list(&due).unwrap();
        assert!(commits
            .due(HashMap::from([(tp(0), Progress::at(25))]))
            .is_empty());
        apply(&mut broker, &commits, failed(), &fourth);
        let due = commits.due(HashMap::from([(tp(0), Progress::at(25))]));
        assert_eq!(due[&tp(0)], Progress::at(30), "never backwards");
    }

    #[test]
    fn a_result_for_an_older_point_confirms_nothing_newer() {
        let commits = Commits::new();
        let done_past_gap = {
            let tracker = inflight::Tracker::builder().progress(4096).build();
            let tickets: Vec<_> = (10..13_u64).map(|o| tracker.send(0, o).unwrap()).collect();
            let mut tickets = tickets.into_iter();
            let _stuck = tickets.next();
            for t in tickets {
                tracker.ack(t).unwrap();
            }
            tracker.progress().remove(&0).unwrap()
        };
        assert_eq!(done_past_gap.next(), 10);
        let older = commit_list(&commits.due(HashMap::from([(tp(0), Progress::at(10))]))).unwrap();
        // The same offset with more done past it: a newer point.
        let newer = commits.due(HashMap::from([(tp(0), done_past_gap.clone())]));
        assert_eq!(newer.len(), 1);
        commits.settle(&Ok(()), &older);
        assert_eq!(
            commits.unconfirmed(),
            1,
            "the older result does not confirm the newer"
        );
        let newer = commit_list(&newer).unwrap();
        assert_eq!(commits.settle(&failed(), &newer), 1);
        assert_eq!(commits.due(HashMap::new())[&tp(0)], done_past_gap);
        commits.settle(&Ok(()), &newer);
        assert_eq!(commits.unconfirmed(), 0);
    }

    #[test]
    fn a_revoked_partition_is_forgotten() {
        let commits = Commits::new();
        let _ = commits.due(HashMap::from([(tp(0), Progress::at(10))]));
        commits.forget(&tp(0));
        assert_eq!(commits.unconfirmed(), 0);
        // Its next life may start lower.
        assert_eq!(
            commits.due(HashMap::from([(tp(0), Progress::at(3))])).len(),
            1
        );
    }
}
