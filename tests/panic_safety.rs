//! Guarantee 14: a panic in user code leaves the tracker consistent and
//! usable. For each place where the crate runs user code (the `Hash`, `Eq`,
//! `Clone` and `Drop` of `P` and `O`, and wakers), a type that panics there
//! on a chosen value, and checks that after the panic:
//!
//! - no offset of a dropped value is ever returned (offsets carry a canary
//!   that their `Drop` poisons, and `Clone` checks it);
//! - nothing is wedged: `in_flight`, flushes, `drain` and a bounded
//!   tracker's capacity still work;
//! - no advance is lost: the next call returns what the panicked call took;
//! - nothing is dropped twice or leaked: every value made is dropped exactly
//!   once by the time the tracker is (counted per test thread).
//!
//! Also guarantee 15 (a covered failure fails a waiting flush at once), and
//! the rule behind these fixes: the calls that resolve, commit and take
//! run no user `Drop` at all (offsets are dropped when their slot is next
//! used, by a `send`, before it takes anything).

use inflight::{FlushError, SendError, Tracker};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

mod panicky;
use panicky::*;

// ---- O: Drop --------------------------------------------------------------

/// Resolving, committing, folding and taking marks free slots, but run no
/// user code: an offset is dropped when its slot is next used.
#[test]
fn resolve_commit_fold_and_take_run_no_user_code() {
    let tracker: W = Tracker::builder().watermarks().build();
    let a = send(&tracker, 0, 1);
    let b = send(&tracker, 0, 2);
    no_user_code("ack", || tracker.ack(a).unwrap());
    // An aborted flush leaves a sealed generation to fold into the next.
    no_user_code("begin_flush and abort", || {
        tracker.begin_flush().unwrap().abort()
    });
    let c = send(&tracker, 0, 3);
    no_user_code("ack and fail", || {
        tracker.ack(b).unwrap();
        tracker.ack(c).unwrap();
    });
    let mut flush = no_user_code("begin_flush", || tracker.begin_flush().unwrap());
    let offsets = flush.wait(FOREVER).unwrap(); // clones: user code
    assert_eq!(ids(&offsets), vec![(0, 3)]);
    drop(offsets);
    no_user_code("commit", || flush.commit().unwrap());
    assert_eq!(ids(&tracker.committable()), vec![(0, 3)]);
    no_user_code("drain and in_flight", || {
        tracker.drain(Duration::ZERO).unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
    assert_all_dropped(tracker);
}

/// KAFKA's 2015 design had no such case; ours had: `commit` released the
/// carry's slot, dropping its offset, before the carry forgot it, so a
/// panicking `Drop` left the carry naming a freed slot, and the next flush
/// cloned the dropped offset. Now the drop comes at the slot's reuse.
#[test]
fn a_panicking_offset_drop_after_commit_surfaces_in_a_send_that_takes_nothing() {
    let tracker: T = Tracker::with_capacity(2);
    let t = send(&tracker, 0, 1);
    tracker.ack(t).unwrap();
    assert_eq!(flush(&tracker), vec![(0, 1)]);
    arm(Act::Drop, 1);
    // Slots are reused first-in-last-out: the next send takes offset 1's.
    expect_planned_panic("send reusing the slot", || send(&tracker, 0, 2));
    assert_eq!(tracker.in_flight(), 0, "the panicked send counted nothing");
    // No permit leaked: two records fit.
    let a = send(&tracker, 0, 3);
    let b = send(&tracker, 1, 4);
    assert!(matches!(
        tracker.send(Key::new(K), Off::new(5)),
        Err(SendError::Full(..))
    ));
    tracker.ack(a).unwrap();
    tracker.ack(b).unwrap();
    assert_eq!(flush(&tracker), vec![(0, 3), (1, 4)]);
    assert_usable(&tracker, 6);
    assert_all_dropped(tracker);
}

/// The fold of a drained generation released the carry's older slot (a
/// user `Drop`) before `oldest` moved on; a panic made the next flush fold
/// the generation again and return another partition's offset. Every
/// offset is armed in turn here, over flushes that fold two generations.
#[test]
fn every_offset_drop_may_panic_over_folds_and_commits() {
    for armed in 1..=12 {
        let tracker: T = Tracker::new();
        arm(Act::Drop, armed);
        let mut next = 1;
        let mut step = |tracker: &T| {
            let offset = next;
            next += 1;
            let key = offset % 2;
            match catch_unwind(AssertUnwindSafe(|| send(tracker, key, offset))) {
                Ok(ticket) => {
                    tracker.ack(ticket).unwrap();
                    Some((key, offset))
                }
                Err(_) => None,
            }
        };
        for _ in 0..3 {
            let mut sent = vec![step(&tracker), step(&tracker)];
            tracker.begin_flush().unwrap().abort();
            sent.push(step(&tracker));
            sent.push(step(&tracker));
            let flushed = flush(&tracker);
            // Each partition's latest offset among those accepted.
            let mut expected: HashMap<u64, u64> = HashMap::new();
            for (key, offset) in sent.into_iter().flatten() {
                expected.insert(key, offset);
            }
            for (key, offset) in &flushed {
                assert_eq!(
                    expected.get(key),
                    Some(offset),
                    "armed {armed}: flushed {flushed:?}"
                );
            }
        }
        disarm();
        let _ = fired();
        assert_usable(&tracker, 100);
        assert_all_dropped(tracker);
    }
}

/// A send displacing its partition's previous record from the generation's
/// cell used to drop that record's offset after counting itself and before
/// publishing: a panic left a counted record with no ticket, and every
/// later flush and drain timed out. Now the displaced offset stays in its
/// slot until reused.
#[test]
fn a_send_that_displaces_an_acked_record_runs_no_user_drop() {
    let tracker: T = Tracker::with_capacity(1);
    let t = send(&tracker, 0, 1);
    tracker.ack(t).unwrap();
    arm(Act::Drop, 1);
    // The partition exists, so the key's lookup is the only user code.
    let before = calls();
    let t = send(&tracker, 0, 2); // displaces offset 1's slot: no drop
    assert!(fired().is_empty());
    assert!(calls() - before <= 4, "hash, eq and the key's drop only");
    tracker.ack(t).unwrap();
    assert_eq!(flush(&tracker), vec![(0, 2)]);
    // Offset 1 is dropped when its slot is reused, by a send that then
    // takes nothing.
    let mut panicked = false;
    for offset in 3..10 {
        match catch_unwind(AssertUnwindSafe(|| send(&tracker, 0, offset))) {
            Ok(t) => tracker.ack(t).unwrap(),
            Err(_) => panicked = true,
        }
        assert_eq!(tracker.in_flight(), 0);
    }
    assert!(panicked && fired() == vec![(Act::Drop, 1)]);
    assert_usable(&tracker, 20);
    assert_all_dropped(tracker);
}

/// The watermark advance frees the slots it passes; their offsets, too, are
/// dropped only at reuse, so a panicking `Drop` cannot strand a partition
/// without an advancer or lose an advance.
#[test]
fn watermark_advances_survive_panicking_offset_drops() {
    let tracker: W = Tracker::builder().watermarks().build();
    for armed in [1, 3, 5] {
        arm(Act::Drop, armed);
        let mut last = None;
        for offset in 1..=6 {
            if let Ok(t) = catch_unwind(AssertUnwindSafe(|| send(&tracker, 7, offset))) {
                no_user_code("ack on a watermark tracker", || tracker.ack(t).unwrap());
                last = Some(offset);
            }
        }
        assert_eq!(ids(&tracker.committable()), vec![(7, last.unwrap())]);
        tracker.drain(Duration::ZERO).unwrap();
        disarm();
        let _ = fired();
    }
    assert_usable(&tracker, 50);
    assert_all_dropped(tracker);
}

// ---- O and P: Clone, Hash, Eq in the calls that hand out offsets ------------

/// `committable` swapped each mark out before cloning it: a panicking
/// `Clone` lost every advance taken so far in that call. Now every taken
/// mark is put back.
#[test]
fn committable_with_a_panicking_clone_loses_no_advance() {
    for act in [Act::Clone] {
        for armed in [1, 2, K, K + 1] {
            let tracker: W = Tracker::builder().watermarks().build();
            let a = send(&tracker, 0, 1);
            let b = send(&tracker, 1, 2);
            tracker.ack(a).unwrap();
            tracker.ack(b).unwrap();
            arm(act, armed);
            expect_planned_panic("committable", || tracker.committable());
            assert_eq!(ids(&tracker.committable()), vec![(0, 1), (1, 2)]);
            assert!(tracker.committable().is_empty(), "each advance once");
            assert_all_dropped(tracker);
        }
    }
}

/// After a panicked `committable`, a newer advance of the same partition
/// supersedes the put-back mark; the counts stay exact.
#[test]
fn a_put_back_mark_is_superseded_by_a_newer_advance() {
    let tracker: W = Tracker::builder().watermarks().build();
    let a = send(&tracker, 0, 1);
    let b = send(&tracker, 1, 2);
    tracker.ack(a).unwrap();
    tracker.ack(b).unwrap();
    arm(Act::Hash, K + 1);
    expect_planned_panic("committable_with_stats", || {
        tracker.committable_with_stats()
    });
    let c = send(&tracker, 0, 3);
    tracker.ack(c).unwrap();
    let now = tracker.committable_with_stats();
    assert_eq!(ids(&now.offsets), vec![(0, 3), (1, 2)]);
    assert_eq!(now.committable_records, 3, "a, b and c, each counted once");
    assert_eq!(now.uncommittable_records, 0);
    drop(now);
    assert_all_dropped(tracker);
}

/// `committable_with_stats` clones keys for its statistics too (the
/// largest backlog, stopped partitions): before it takes any advance.
#[test]
fn committable_with_stats_whose_statistics_panic_loses_no_advance() {
    let tracker: W = Tracker::builder().watermarks().build();
    let a = send(&tracker, 0, 1);
    let waiting = send(&tracker, 1, 2); // partition 1's backlog
    tracker.ack(a).unwrap();
    arm(Act::Clone, K + 1);
    expect_planned_panic("committable_with_stats", || {
        tracker.committable_with_stats()
    });
    let now = tracker.committable_with_stats();
    assert_eq!(ids(&now.offsets), vec![(0, 1)]);
    assert_eq!(now.committable_records, 1);
    assert_eq!(
        now.largest_backlog.as_ref().map(|(k, n)| (k.id - K, *n)),
        Some((1, 1))
    );
    drop(now);
    tracker.ack(waiting).unwrap();
    assert_all_dropped(tracker);
}

/// A flush's `wait` clones offsets and keys (and hashes keys into its map)
/// only once everything is folded; a panic there leaves the flush as it
/// was, and the next `wait` returns the offsets.
#[test]
fn wait_with_a_panicking_clone_or_hash_can_be_retried() {
    for (act, armed) in [(Act::Clone, 2), (Act::Clone, K + 1), (Act::Hash, K)] {
        let tracker: T = Tracker::new();
        let a = send(&tracker, 0, 1);
        let b = send(&tracker, 1, 2);
        tracker.ack(a).unwrap();
        tracker.ack(b).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        arm(act, armed);
        expect_planned_panic("wait", || flush.wait(FOREVER));
        assert_eq!(flush.commit(), Err(FlushError::NotReady), "not ready yet");
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(ids(&flush.wait(FOREVER).unwrap()), vec![(0, 1), (1, 2)]);
        flush.commit().unwrap();
        assert_usable(&tracker, 3);
        assert_all_dropped(tracker);
    }
}

/// The stuck-record report clones what it reports under holds it takes
/// on the slots; a panicking `Clone` releases them all.
#[test]
fn the_stuck_record_report_with_a_panicking_clone_holds_nothing() {
    let tracker: T = Tracker::new();
    let a = send(&tracker, 0, 1);
    let b = send(&tracker, 1, 2);
    arm(Act::Clone, 2);
    expect_planned_panic("oldest_unresolved", || tracker.oldest_unresolved(10));
    tracker.ack(a).unwrap();
    tracker.ack(b).unwrap();
    assert_eq!(flush(&tracker), vec![(0, 1), (1, 2)]);
    // The slots were released: sends reuse them (dropping their offsets).
    for offset in 3..6 {
        let t = send(&tracker, 0, offset);
        tracker.ack(t).unwrap();
    }
    assert!(tracker.oldest_unresolved(10).is_empty());
    assert_usable(&tracker, 9);
    assert_all_dropped(tracker);
}

/// `revoke` hashes and compares the key before it changes anything, and
/// clones the ended life's last offset holding its mark: if that `Clone`
/// panics, the mark goes back and `committable()` still has it.
#[test]
fn revoke_with_a_panicking_hash_or_clone_loses_nothing() {
    let tracker: W = Tracker::builder().watermarks().build();
    let a = send(&tracker, 0, 1);
    let b = send(&tracker, 0, 2);
    tracker.ack(a).unwrap();
    arm(Act::Hash, K);
    expect_planned_panic("revoke (hash)", || tracker.revoke(&Key::new(K)));
    assert_eq!(tracker.in_flight(), 1, "nothing released");
    arm(Act::Clone, 1);
    expect_planned_panic("revoke (clone)", || tracker.revoke(&Key::new(K)));
    // The records were released, the advance was put back.
    assert_eq!(tracker.ack(b), Err(inflight::ResolveError::Revoked));
    assert_eq!(ids(&tracker.committable()), vec![(0, 1)]);
    assert_eq!(tracker.in_flight(), 0);
    let revoked = tracker.revoke(&Key::new(K));
    assert_eq!(
        (revoked.released, revoked.committable.map(|o| o.id)),
        (0, None)
    );
    assert_usable(&tracker, 3);
    assert_all_dropped(tracker);
}

// ---- P: Hash, Eq, Clone, Drop in send ------------------------------------------

/// `send` hashes, compares and (for a new partition) clones its key before
/// taking anything, and drops it after the `Closed` check, backing out if
/// that panics: in every case nothing is counted and no permit is lost.
#[test]
fn a_send_whose_key_panics_takes_nothing() {
    let cases = [
        // The thread's partition hint names another partition (below),
        // so the known key is looked up: hashed and compared.
        (Act::Hash, K, "hash of a known key"),
        (Act::Eq, K, "eq with a known key"),
        // The hint names this partition: compared once, not hashed.
        (Act::Eq, K, "eq with the hinted key"),
        (Act::Drop, K, "drop of a known key"),
        (Act::Hash, K + 5, "hash of a new key"),
        (Act::Clone, K + 5, "clone of a new key into the index"),
        (Act::Drop, K + 5, "drop of a new key"),
    ];
    for (act, armed, what) in cases {
        let tracker: W = Tracker::builder().capacity(1).watermarks().build();
        let t = send(&tracker, 0, 1);
        tracker.ack(t).unwrap();
        if !what.contains("hinted") {
            // Moves this thread's partition hint to another partition.
            let t = send(&tracker, 1, 1);
            tracker.ack(t).unwrap();
        }
        arm(act, armed);
        expect_planned_panic(what, || tracker.send(Key::new(armed), Off::new(2)));
        assert_eq!(tracker.in_flight(), 0, "{what}");
        // The permit came back, and the partition works.
        let t = tracker.send(Key::new(armed), Off::new(3)).unwrap();
        tracker.ack(t).unwrap();
        let committable = ids(&tracker.committable());
        assert!(
            committable.contains(&(armed - K, 3)),
            "{what}: {committable:?}"
        );
        assert_usable(&tracker, 4);
        assert_all_dropped(tracker);
    }
}

/// A waker that panics when woken does not keep the other waiters from
/// being woken: the resolution that wakes them completes, wakes everyone,
/// and only then passes the panic on.
#[test]
fn a_panicking_waker_does_not_lose_another_waiters_wake_up() {
    let tracker: T = Tracker::new();
    let t = send(&tracker, 0, 1);
    let mut flush = tracker.begin_flush().unwrap();
    let (bad, bad_waker) = test_waker(true, false);
    let (good, good_waker) = test_waker(false, false);
    {
        let mut waiting = pin!(flush.wait_async());
        assert!(poll_with(waiting.as_mut(), &bad_waker).is_pending());
        let mut drain = pin!(tracker.drain_async());
        assert!(poll_with(drain.as_mut(), &good_waker).is_pending());
        assert!(catch_unwind(AssertUnwindSafe(|| tracker.ack(t))).is_err());
        assert!(bad.woken.load(Ordering::SeqCst) >= 1);
        assert!(good.woken.load(Ordering::SeqCst) >= 1, "the other waiter");
        assert_eq!(tracker.in_flight(), 0, "the ack took effect");
        assert!(matches!(
            poll_with(drain.as_mut(), &good_waker),
            Poll::Ready(Ok(()))
        ));
        match poll_with(waiting.as_mut(), &good_waker) {
            Poll::Ready(Ok(offsets)) => assert_eq!(ids(&offsets), vec![(0, 1)]),
            other => panic!("{other:?}"),
        }
    }
    flush.commit().unwrap();
    assert_usable(&tracker, 2);
    assert_all_dropped(tracker);
}

/// A waker whose clone panics: the poll that registers it panics before
/// the registry changes, and the flush stays usable.
#[test]
fn a_waker_whose_clone_panics_leaves_the_flush_usable() {
    let tracker: T = Tracker::new();
    let t = send(&tracker, 0, 1);
    let mut flush = tracker.begin_flush().unwrap();
    let (_, waker) = test_waker(false, true);
    {
        let mut waiting = pin!(flush.wait_async());
        let polled = catch_unwind(AssertUnwindSafe(|| {
            poll_with(waiting.as_mut(), &waker).is_pending()
        }));
        assert!(polled.is_err());
    }
    tracker.ack(t).unwrap();
    assert_eq!(ids(&flush.wait(FOREVER).unwrap()), vec![(0, 1)]);
    flush.commit().unwrap();
    assert_usable(&tracker, 2);
    assert_all_dropped(tracker);
}

/// An interrupt, a seal and a failure wake waiters last, after their own
/// work: a panicking waker surfaces from the call, which has taken effect.
#[test]
fn calls_that_wake_finish_their_work_before_a_waker_panics() {
    let tracker: T = Tracker::new();
    let t = send(&tracker, 0, 1);
    let mut flush = tracker.begin_flush().unwrap();
    let (_, bad_waker) = test_waker(true, false);
    let (_, good_waker) = test_waker(false, false);
    {
        let mut waiting = pin!(flush.wait_async());
        assert!(poll_with(waiting.as_mut(), &bad_waker).is_pending());
        // interrupt: delivered despite the panic.
        assert!(catch_unwind(AssertUnwindSafe(|| tracker.interrupt())).is_err());
        assert!(matches!(
            poll_with(waiting.as_mut(), &good_waker),
            Poll::Ready(Err(FlushError::Interrupted))
        ));
    }
    flush.abort();
    // fail: counted despite the panic.
    let mut flush = tracker.begin_flush().unwrap();
    {
        let mut waiting = pin!(flush.wait_async());
        assert!(poll_with(waiting.as_mut(), &bad_waker).is_pending());
        assert!(catch_unwind(AssertUnwindSafe(|| tracker.fail(t))).is_err());
        assert_eq!(tracker.in_flight(), 0);
        assert!(matches!(
            poll_with(waiting.as_mut(), &good_waker),
            Poll::Ready(Err(FlushError::Failed { failed: 1 }))
        ));
    }
    flush.abort();
    drop(tracker);
    assert_eq!(live(), 0);
}

// ---- Guarantee 15: fail fast ---------------------------------------------------

/// A covered failure fails the flush at once, without waiting for the
/// covered records still in flight, and wakes a waiting `wait`.
#[test]
fn a_covered_failure_fails_a_waiting_flush_at_once() {
    let tracker = Tracker::new();
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("q", 2_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    std::thread::scope(|s| {
        // Would wait out FOREVER (b is never acked) if the failure did not
        // wake it.
        let waiter = s.spawn(|| flush.wait(FOREVER));
        tracker.fail(a).unwrap();
        assert_eq!(
            waiter.join().unwrap(),
            Err(FlushError::Failed { failed: 1 })
        );
    });
    assert_eq!(flush.pending(), 1, "b is still in flight");
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    tracker.ack(b).unwrap();
}

/// The async wait fails at once too, woken by the failure.
#[test]
fn a_covered_failure_wakes_an_async_wait() {
    let tracker = Tracker::builder().watermarks().build();
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("p", 2_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let (woken, waker) = test_waker(false, false);
    {
        let mut waiting = pin!(flush.wait_async());
        assert!(poll_with(waiting.as_mut(), &waker).is_pending());
        // On a watermark tracker the failure counts once the watermark
        // reaches it: `a` is first in its partition.
        tracker.fail(a).unwrap();
        assert!(woken.woken.load(Ordering::SeqCst) >= 1);
        assert!(matches!(
            poll_with(waiting.as_mut(), &waker),
            Poll::Ready(Err(FlushError::Failed { failed: 1 }))
        ));
    }
    flush.abort();
    tracker.ack(b).unwrap();
}
