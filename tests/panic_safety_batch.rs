//! Guarantee 14 for batches: `send_batch`, `ack_all` and `fail_all` run user
//! code (the key's `Hash`, `Eq` and `Clone`, an old offset's `Drop`, the
//! offsets' iterator, wakers) only where a panic takes nothing or leaves
//! every resolution done; after it the tracker is consistent and usable,
//! and every value is dropped exactly once. (The iterators' panics are in
//! `batch.rs`.)

#[macro_use]
mod modes;

use inflight::Tracker;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::task::Poll;

mod panicky;
use panicky::*;

/// `send_batch` hashes and compares its key (and clones a new one into
/// the index) before it takes anything: a panic there sends nothing of the
/// batch and keeps no permit.
#[test]
fn a_batch_whose_key_panics_takes_nothing() {
    let cases = [
        // The thread's partition hint names another partition (below),
        // so the known key is looked up: hashed and compared.
        (Act::Hash, K, "hash of a known key"),
        (Act::Eq, K, "eq with a known key"),
        // The hint names this partition: compared once, not hashed.
        (Act::Eq, K, "eq with the hinted key"),
        (Act::Hash, K + 5, "hash of a new key"),
        (Act::Clone, K + 5, "clone of a new key into the index"),
    ];
    for (act, armed, what) in cases {
        let tracker: W = Tracker::builder().capacity(4).watermarks().build();
        let t = send(&tracker, 0, 1);
        tracker.ack(t).unwrap();
        if !what.contains("hinted") {
            // Moves this thread's partition hint to another partition.
            let t = send(&tracker, 1, 1);
            tracker.ack(t).unwrap();
        }
        let key = Key::new(armed);
        let mut tickets = Vec::new();
        arm(act, armed);
        expect_planned_panic(what, || {
            tracker.send_batch(&key, [Off::new(2), Off::new(3)], &mut tickets)
        });
        assert!(tickets.is_empty(), "{what}");
        assert_eq!(tracker.in_flight(), 0, "{what}");
        // Every permit came back: a batch of the whole capacity goes.
        assert_eq!(
            tracker
                .send_batch(&key, (4..8).map(Off::new), &mut tickets)
                .unwrap(),
            4
        );
        assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(4));
        let committable = ids(&tracker.committable());
        assert!(
            committable.contains(&(armed - K, 7)),
            "{what}: {committable:?}"
        );
        drop(key);
        disarm();
        let _ = fired();
        assert_usable(&tracker, 9);
        assert_all_dropped(tracker);
    }
}

/// The offsets a batch's slots kept are dropped when the batch reuses the
/// slots, before it takes them; the first `Drop` that panics ends the
/// batch with nothing of its chunk sent, and the rest of the old offsets
/// are dropped later, once each.
#[test]
fn a_batch_reusing_slots_whose_old_offset_panics() {
    each_mode!(tracker = [Tracker::new(), Tracker::builder().watermarks().build()] {
        let tracker: Tracker<Key, Off, _> = tracker;
        let key = Key::new(K);
        let mut tickets = Vec::new();
        tracker
            .send_batch(&key, (1..=5).map(Off::new), &mut tickets)
            .unwrap();
        assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(5));
        assert_eq!(flush(&tracker), vec![(0, 5)]);
        // The five slots are on top of the thread's free list: a batch of
        // five reuses them all, dropping their old offsets, 3 among them.
        arm(Act::Drop, 3);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            tracker.send_batch(&key, (10..15).map(Off::new), &mut tickets)
        }));
        assert!(outcome.is_err());
        assert_eq!(fired(), vec![(Act::Drop, 3)]);
        assert!(tickets.is_empty(), "the chunk was backed out");
        assert_eq!(tracker.in_flight(), 0);
        // The batch goes through on a second try.
        let sent = tracker
            .send_batch(&key, (10..15).map(Off::new), &mut tickets)
            .unwrap();
        assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(sent));
        assert_eq!(flush(&tracker), vec![(0, 14)]);
        drop(key);
        assert_usable(&tracker, 20);
        assert_all_dropped(tracker);
    });
}

/// `ack_all` wakes waiters once, after every ticket is resolved and every
/// generation left: a waker that panics surfaces from `ack_all`, whose
/// resolutions all took effect, and the other waiter is woken too.
#[test]
fn ack_all_with_a_panicking_waker_resolves_every_ticket_first() {
    for fail in [false, true] {
        let tracker: T = Tracker::new();
        let key = Key::new(K);
        let mut tickets = Vec::new();
        tracker
            .send_batch(&key, (1..=3).map(Off::new), &mut tickets)
            .unwrap();
        let mut flush_ = tracker.begin_flush().unwrap();
        let (bad, bad_waker) = test_waker(true, false);
        let (good, good_waker) = test_waker(false, false);
        {
            let mut waiting = pin!(flush_.wait_async());
            assert!(poll_with(waiting.as_mut(), &bad_waker).is_pending());
            let mut drain = pin!(tracker.drain_async());
            assert!(poll_with(drain.as_mut(), &good_waker).is_pending());
            let resolve = || {
                if fail {
                    tracker.fail_all(tickets.drain(..))
                } else {
                    tracker.ack_all(tickets.drain(..))
                }
            };
            assert!(catch_unwind(AssertUnwindSafe(resolve)).is_err());
            assert!(bad.woken.load(Ordering::SeqCst) >= 1);
            assert!(good.woken.load(Ordering::SeqCst) >= 1, "the other waiter");
            assert_eq!(tracker.in_flight(), 0, "every resolution took effect");
            assert!(matches!(
                poll_with(drain.as_mut(), &good_waker),
                Poll::Ready(Ok(()))
            ));
            match poll_with(waiting.as_mut(), &good_waker) {
                Poll::Ready(Ok(offsets)) => {
                    assert!(!fail);
                    assert_eq!(ids(&offsets), vec![(0, 3)]);
                }
                Poll::Ready(Err(inflight::FlushError::Failed { failed })) => {
                    assert!(fail);
                    assert_eq!(failed, 3);
                }
                other => panic!("{other:?}"),
            }
        }
        if fail {
            flush_.abort();
            // A failed partition is restarted by a revoke.
            let _ = tracker.revoke(&key);
        } else {
            flush_.commit().unwrap();
        }
        drop(key);
        assert_usable(&tracker, 4);
        assert_all_dropped(tracker);
    }
}
