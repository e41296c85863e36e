//! The commit points kept until confirmed, and their partitions' lives.

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

/// Records what `send` was given, and answers `result`.
fn sender(
    log: &Mutex<Vec<TopicPartitionList>>,
    result: KafkaResult<()>,
) -> impl FnOnce(&TopicPartitionList) -> KafkaResult<()> + '_ {
    move |list| {
        log.lock().unwrap().push(list.clone());
        result
    }
}

fn next_of(list: &TopicPartitionList, partition: i32) -> Option<i64> {
    match list.find_partition("t", partition)?.offset() {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

#[test]
fn the_last_commit_carries_a_point_still_on_its_way_and_its_late_failure_counts() {
    let commits = Commits::new();
    let sent = Mutex::new(Vec::new());
    // An asynchronous commit of partition 0's point 10 is on its way.
    let n = commits
        .commit_taken(
            || HashMap::from([(tp(0), Progress::at(10))]),
            CommitMode::Async,
            &GroupCommitStore,
            sender(&sent, Ok(())),
        )
        .unwrap();
    assert_eq!(n, 1);
    let on_its_way = sent.lock().unwrap()[0].clone();
    // The hand-off of partition 0 (partition 1 has a point due too).
    let over = commits.hand_over(
        &[tp(0)],
        true,
        || HashMap::from([(tp(1), Progress::at(4))]),
        |_| None,
        &GroupCommitStore,
        sender(&sent, Ok(())),
    );
    assert!(over.result.is_ok());
    let last = sent.lock().unwrap()[1].clone();
    assert_eq!(next_of(&last, 0), Some(10), "sent, not confirmed: again");
    assert_eq!(next_of(&last, 1), Some(4));
    assert_eq!(commits.unconfirmed(), 0);
    // The earlier commit fails after the hand-off: counted, and said to
    // be a handed-off partition's.
    let settled = commits.settled(&failed(), &on_its_way);
    assert_eq!((settled.failed, settled.handed_off), (1, vec![tp(0)]));
    assert_eq!(commits.failures(), 1);
}

#[test]
fn a_failed_last_commit_counts_and_is_not_due_again() {
    let commits = Commits::new();
    let sent = Mutex::new(Vec::new());
    let over = commits.hand_over(
        &[tp(0)],
        true,
        || HashMap::from([(tp(0), Progress::at(7))]),
        |_| None,
        &GroupCommitStore,
        sender(&sent, failed()),
    );
    assert!(over.result.is_err());
    assert_eq!(over.settled.handed_off, vec![tp(0)]);
    assert_eq!(commits.failures(), 1);
    assert!(commits.due(HashMap::new()).is_empty(), "its life ended");
}

#[test]
fn a_revoked_watermark_point_goes_into_the_last_commit() {
    let commits = Commits::new();
    let sent = Mutex::new(Vec::new());
    let mut revoked = Vec::new();
    let over = commits.hand_over(
        &[tp(0)],
        true,
        || HashMap::from([(tp(0), Progress::at(3))]),
        |p| {
            revoked.push(p.clone());
            Some(Progress::at(5))
        },
        &GroupCommitStore,
        sender(&sent, Ok(())),
    );
    assert!(over.result.is_ok());
    assert_eq!(revoked, vec![tp(0)]);
    assert_eq!(next_of(&sent.lock().unwrap()[0], 0), Some(5));
}

#[test]
fn a_lost_partition_is_revoked_and_nothing_is_committed() {
    let commits = Commits::new();
    let _ = commits.due(HashMap::from([(tp(0), Progress::at(10))]));
    let sent = Mutex::new(Vec::new());
    let mut revoked = 0;
    let over = commits.hand_over(
        &[tp(0)],
        false,
        || unreachable!("nothing is taken"),
        |_| {
            revoked += 1;
            None
        },
        &GroupCommitStore,
        sender(&sent, Ok(())),
    );
    assert!(over.result.is_ok());
    assert_eq!(revoked, 1);
    assert!(sent.lock().unwrap().is_empty());
    assert_eq!(commits.unconfirmed(), 0);
}

#[test]
fn a_point_taken_in_an_ended_life_is_never_committed() {
    let commits = Commits::new();
    let before = commits.stamp();
    commits.forget(&tp(0));
    // A snapshot of the ended life, offered after the end.
    assert!(commits
        .due_taken(before, HashMap::from([(tp(0), Progress::at(10))]))
        .is_empty());
    // Another partition's is kept; a point taken after the end is the
    // new life's.
    let due = commits.due_taken(
        before,
        HashMap::from([(tp(1), Progress::at(1)), (tp(0), Progress::at(10))]),
    );
    assert_eq!(due.keys().collect::<Vec<_>>(), [&tp(1)]);
    let after = commits.stamp();
    assert_eq!(
        commits.due_taken(after, HashMap::from([(tp(0), Progress::at(3))]))[&tp(0)],
        Progress::at(3)
    );
}

/// A committer on another thread commits partition 0's progress while
/// the poll thread hands it off and its next life begins at 1000 (as a
/// reassignment after another owner's commits would): no commit after
/// the hand-off's carries a point of the ended life.
#[test]
fn a_committer_racing_a_hand_off_never_commits_the_ended_life() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let tracker: Arc<inflight::ProgressTracker<TopicPartition, i64>> =
        Arc::new(inflight::Tracker::builder().progress(4096).build());
    let commits = Arc::new(Commits::new());
    // Every commit sent, in order, and each end of partition 0's life.
    #[derive(Clone, Copy)]
    enum Sent {
        Committer(Option<i64>),
        End,
        HandOff,
    }
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let committer = {
        let (tracker, commits, sent, stop) =
            (tracker.clone(), commits.clone(), sent.clone(), stop.clone());
        std::thread::spawn(move || {
            // Relaxed: a flag; the join orders the rest.
            while !stop.load(Ordering::Relaxed) {
                let _ = commits.commit_taken(
                    || tracker.progress(),
                    CommitMode::Sync,
                    &GroupCommitStore,
                    |list| {
                        sent.lock().unwrap().push(Sent::Committer(next_of(list, 0)));
                        Ok(())
                    },
                );
            }
        })
    };
    for round in 0..200_i64 {
        let base = round * 1000;
        for offset in base..base + 20 {
            let ticket = tracker.send(tp(0), offset).unwrap();
            tracker.ack(ticket).unwrap();
        }
        // The committer commits some of this life before the hand-off
        // (and then races it).
        while !sent
            .lock()
            .unwrap()
            .iter()
            .any(|&s| matches!(s, Sent::Committer(Some(next)) if next > base))
        {
            std::thread::yield_now();
        }
        let over = commits.hand_over(
            &[tp(0)],
            true,
            || tracker.progress(),
            |p| {
                let _ = tracker.revoke(p);
                // The life ends now (under the gate): mark it here.
                sent.lock().unwrap().push(Sent::End);
                None
            },
            &GroupCommitStore,
            |_| {
                sent.lock().unwrap().push(Sent::HandOff);
                Ok(())
            },
        );
        assert!(over.result.is_ok());
        // Assigned here again (the context does it on the assignment).
        commits.assigned(&[tp(0)]);
    }
    // Relaxed: the join orders what the committer did.
    stop.store(true, Ordering::Relaxed);
    committer.join().unwrap();
    let sent = sent.lock().unwrap();
    let mut life_floor = 0; // the current life's lowest offset
    for &event in sent.iter() {
        match event {
            Sent::Committer(Some(next)) => {
                assert!(
                    next >= life_floor,
                    "a point of an ended life ({next}) committed after its hand-off"
                );
            }
            Sent::Committer(None) | Sent::HandOff => {}
            Sent::End => life_floor += 1000,
        }
    }
}

/// A list of `(partition, next)` where the partitions in `failed` carry an
/// error of their own, as librdkafka reports a partly failed commit.
fn with_errors(list: &TopicPartitionList, failed: &[i32]) -> TopicPartitionList {
    let list = list.clone();
    for (i, element) in list.elements().iter().enumerate() {
        if failed.contains(&element.partition()) {
            // SAFETY: `i` indexes the list's live elements (`cnt` of them);
            // the error field is a plain enum librdkafka reads back.
            unsafe {
                (*(*list.ptr()).elems.add(i)).err =
                    rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS;
            }
        }
    }
    list
}

/// Review finding 4: a commit that failed for one partition fails only
/// that one: the other's point is confirmed, not due again nor counted.
#[test]
fn a_partly_failed_commit_fails_only_the_partitions_that_failed() {
    let commits = Commits::new();
    let due = commits.due(HashMap::from([
        (tp(0), Progress::at(10)),
        (tp(1), Progress::at(5)),
    ]));
    let list = with_errors(&commit_list(&due).unwrap(), &[1]);
    assert_eq!(commits.settle(&failed(), &list), 1);
    assert_eq!(commits.failures(), 1);
    let again = commits.due(HashMap::new());
    assert_eq!(
        again.keys().collect::<Vec<_>>(),
        [&tp(1)],
        "only the failed one"
    );
}

/// Review finding 4: a store's failed save counts (no commit was made),
/// and its points are due again.
#[test]
fn a_failed_save_counts() {
    struct Refuses;
    impl ProgressStore for Refuses {
        fn save(&self, _: &HashMap<TopicPartition, Progress>) -> KafkaResult<()> {
            failed()
        }
        fn load(
            &self,
            _: &TopicPartitionList,
            _: std::time::Duration,
        ) -> KafkaResult<HashMap<TopicPartition, Progress>> {
            Ok(HashMap::new())
        }
    }
    let commits = Commits::new();
    let sent = Mutex::new(Vec::new());
    let result = commits.commit_taken(
        || HashMap::from([(tp(0), Progress::at(3)), (tp(1), Progress::at(4))]),
        CommitMode::Sync,
        &Refuses,
        sender(&sent, Ok(())),
    );
    assert!(result.is_err());
    assert_eq!(commits.failures(), 2);
    assert_eq!(commits.unconfirmed(), 2);
    let over = commits.hand_over(
        &[tp(0)],
        true,
        HashMap::new,
        |_| None,
        &Refuses,
        sender(&sent, Ok(())),
    );
    assert!(over.result.is_err() && over.list.is_some());
    assert_eq!(commits.failures(), 4, "the final commit's two too");
    assert!(sent.lock().unwrap().is_empty());
    assert_eq!(
        commits.due(HashMap::new()).keys().collect::<Vec<_>>(),
        [&tp(1)],
        "the other partition's point is due again"
    );
}

/// Review finding 4: a commit forgotten on its way (more than
/// `ON_THE_WAY` of one partition without a result) counts as failed.
#[test]
fn a_commit_forgotten_on_its_way_counts() {
    let commits = Commits::new();
    for next in 1..=ON_THE_WAY as u64 + 1 {
        assert_eq!(
            commits
                .due(HashMap::from([(tp(0), Progress::at(next))]))
                .len(),
            1
        );
    }
    assert_eq!(commits.failures(), 1);
}

/// Review finding 7: a store whose save panics leaves the points due
/// (every way out before the send undoes; a list that librdkafka refuses
/// takes the same path, and cannot be made from a `Progress`).
#[test]
fn a_panicking_save_leaves_the_points_due() {
    struct Panics;
    impl ProgressStore for Panics {
        fn save(&self, _: &HashMap<TopicPartition, Progress>) -> KafkaResult<()> {
            panic!("the store's save");
        }
        fn load(
            &self,
            _: &TopicPartitionList,
            _: std::time::Duration,
        ) -> KafkaResult<HashMap<TopicPartition, Progress>> {
            Ok(HashMap::new())
        }
    }
    let commits = Commits::new();
    let sent = Mutex::new(Vec::new());
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        commits.commit_taken(
            || HashMap::from([(tp(0), Progress::at(3))]),
            CommitMode::Sync,
            &Panics,
            sender(&sent, Ok(())),
        )
    }));
    assert!(unwound.is_err());
    assert_eq!(commits.unconfirmed(), 1);
    // The hand-over's too: the other partition's point is due again.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        commits.hand_over(
            &[tp(1)],
            true,
            || HashMap::from([(tp(1), Progress::at(4))]),
            |_| None,
            &Panics,
            sender(&sent, Ok(())),
        )
    }));
    assert!(unwound.is_err());
    assert!(sent.lock().unwrap().is_empty());
    assert_eq!(
        commits.due(HashMap::new()).keys().collect::<Vec<_>>(),
        [&tp(0)],
        "due again (not sent for good)"
    );
}

/// Review finding 5: an ack that lands between the hand-over's take and
/// its revoke (a timed-out hand-off) is in the final commit: the revoke's
/// point carries it, on a progress tracker too.
#[test]
fn an_ack_between_the_take_and_the_revoke_is_in_the_final_commit() {
    let tracker: inflight::ProgressTracker<TopicPartition, i64> =
        inflight::Tracker::builder().progress(4096).build();
    let mut tickets: Vec<_> = (0..3).map(|o| tracker.send(tp(0), o).unwrap()).collect();
    let _stuck = tickets.pop();
    let late = tickets.pop().unwrap();
    tracker.ack(tickets.pop().unwrap()).unwrap();
    let commits = Commits::new();
    let sent = Mutex::new(Vec::new());
    let mut late = Some(late);
    let over = commits.hand_over(
        &[tp(0)],
        true,
        || tracker.progress(),
        |p| {
            tracker.ack(late.take().unwrap()).unwrap();
            <inflight::mode::Progress as crate::Resumable>::revoked(&tracker.revoke(p))
        },
        &GroupCommitStore,
        sender(&sent, Ok(())),
    );
    assert!(over.result.is_ok());
    assert_eq!(next_of(&sent.lock().unwrap()[0], 0), Some(2));
}

/// Review finding 5: a point behind what the group confirmed in the
/// partition's life (a revoke's prefix, when what was read back was
/// ahead) is never committed: the group's offset never moves back.
#[test]
fn a_point_behind_a_confirmed_one_is_never_committed() {
    let commits = Commits::new();
    let due = commits.due(HashMap::from([(tp(0), Progress::at(170))]));
    commits.settle(&Ok(()), &commit_list(&due).unwrap());
    assert_eq!(commits.unconfirmed(), 0);
    assert!(commits
        .due(HashMap::from([(tp(0), Progress::at(102))]))
        .is_empty());
    let sent = Mutex::new(Vec::new());
    let over = commits.hand_over(
        &[tp(0)],
        true,
        HashMap::new,
        |_| Some(Progress::at(102)),
        &GroupCommitStore,
        sender(&sent, Ok(())),
    );
    assert!(over.result.is_ok());
    assert!(sent.lock().unwrap().is_empty(), "nothing behind 170");
    // The next life may start lower.
    commits.assigned(&[tp(0)]);
    assert_eq!(
        commits.due(HashMap::from([(tp(0), Progress::at(3))])).len(),
        1
    );
}

/// Review finding 6: after its hand-off, no point of a partition is
/// taken until it is assigned here again (a record polled before the
/// hand-off and sent after it starts a tracker life this consumer does
/// not own).
#[test]
fn a_handed_off_partition_is_not_committed_until_assigned_again() {
    let commits = Commits::new();
    let sent = Mutex::new(Vec::new());
    let _ = commits.hand_over(
        &[tp(0)],
        false,
        HashMap::new,
        |_| None,
        &GroupCommitStore,
        sender(&sent, Ok(())),
    );
    let n = commits
        .commit_taken(
            || HashMap::from([(tp(0), Progress::at(8)), (tp(1), Progress::at(2))]),
            CommitMode::Sync,
            &GroupCommitStore,
            sender(&sent, Ok(())),
        )
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(next_of(&sent.lock().unwrap()[0], 0), None, "not ours");
    commits.assigned(&[tp(0)]);
    let n = commits
        .commit_taken(
            || HashMap::from([(tp(0), Progress::at(9))]),
            CommitMode::Sync,
            &GroupCommitStore,
            sender(&sent, Ok(())),
        )
        .unwrap();
    assert_eq!(n, 1, "ours again");
}
