//! Regression tests for the findings of issue #25 fixed on this branch (2,
//! 6, 7, 8, 10 and 11), one or more each, named after what they pin. Each
//! makes its race deterministic with user code that panics on demand (the
//! fixtures of `panicky`) or needs none; no sleeps, no timing.

#[macro_use]
mod modes;

use inflight::{SendError, Tracker};
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

mod panicky;
use panicky::*;

// ---- 2: a watch counts and uncounts itself on one condition ------------------

/// Item 2. A `drain_partition_async` called while its partition has a
/// number but no watermark queue yet watches nothing and counts nothing;
/// the queue appears before the future is dropped. The drop must not
/// uncount what was never counted (the count wrapped to `u32::MAX`, and
/// the next watch of the partition, counted back to 0, was never woken).
///
/// A refused send owes its offset in the partition's queue (review 4, item
/// 7), so the partition is numbered by a send that panics before it looks
/// at its queue: the `Drop` of the old offset in the slot it reuses.
#[test]
fn a_drain_partition_watch_started_before_the_queue_existed_uncounts_nothing() {
    quiet_planned_panics();
    let tracker: inflight::WatermarkTracker<u32, Off> =
        Tracker::builder().watermarks().capacity(1).build();
    // Allocates the queue page of partitions 0..16.
    let held = tracker.send(0, Off::new(100)).unwrap();
    // Partitions 1..=15 are numbered (and owe) on that page.
    for partition in 1..=15_u32 {
        assert!(matches!(
            tracker.send(partition, Off::new(0)),
            Err(SendError::Full(..))
        ));
    }
    // Its slot is free once the watermark has passed the record after it
    // (the queue's head keeps the link to its successor) and its mark is
    // taken; its offset is kept until the slot is reused.
    tracker.ack(held).unwrap();
    let next = tracker.send(0, Off::new(101)).unwrap();
    tracker.ack(next).unwrap();
    assert_eq!(tracker.committable().len(), 1);
    // Partition 16 is numbered, on the second queue page, which nothing
    // has allocated: the send panics in the reused slot's old offset.
    arm(Act::Drop, 100);
    expect_planned_panic("the reused slot's old offset", || {
        tracker.send(16, Off::new(1))
    });
    let early = tracker.drain_partition_async(&16);
    let record = tracker.send(16, Off::new(1)).unwrap(); // allocates the queue page
    drop(early);
    // A watch of 16 now must be woken by the ack that drains it.
    let (woken, waker) = test_waker(false, false);
    let mut draining = pin!(tracker.drain_partition_async(&16));
    assert!(poll_with(draining.as_mut(), &waker).is_pending());
    tracker.ack(record).unwrap();
    assert!(
        woken.woken.load(Ordering::SeqCst) > 0,
        "the ack that drained the partition woke its watcher"
    );
    assert!(matches!(
        poll_with(draining.as_mut(), &waker),
        Poll::Ready(Ok(()))
    ));
    // The blocking form: the partition is drained, so it returns at once.
    tracker
        .drain_partition(&16, Duration::ZERO)
        .expect("drained");
}

// ---- 6, 7: revoke wakes before user code, and a wake cannot lose the mark ----

/// Item 6. `revoke` owes the wake of a drain waiting for the record it
/// releases; the ended life's mark's `Clone` (user code) panics. The
/// wake is delivered first, and the mark goes back for `committable()`.
#[test]
fn revoke_wakes_its_waiters_before_a_panicking_clone_of_the_mark() {
    let tracker: W = Tracker::builder().watermarks().build();
    let a = send(&tracker, 0, 1);
    let b = send(&tracker, 0, 2);
    tracker.ack(a).unwrap(); // a is the untaken mark; b is in flight
    let (woken, waker) = test_waker(false, false);
    {
        let mut drain = pin!(tracker.drain_async());
        assert!(poll_with(drain.as_mut(), &waker).is_pending());
        arm(Act::Clone, 1);
        expect_planned_panic("revoke (clone of the mark)", || {
            tracker.revoke(&Key::new(K))
        });
        assert!(
            woken.woken.load(Ordering::SeqCst) > 0,
            "the drain the revoke drained was woken"
        );
        assert!(matches!(
            poll_with(drain.as_mut(), &waker),
            Poll::Ready(Ok(()))
        ));
    }
    assert_eq!(tracker.ack(b), Err(inflight::ResolveError::Revoked));
    assert_eq!(
        ids(&tracker.committable()),
        vec![(0, 1)],
        "the mark went back"
    );
    assert_usable(&tracker, 3);
    assert_all_dropped(tracker);
}

/// Item 7. `revoke` releases the record a task's drain waits for, and the
/// task's waker panics: the revoke's caller gets the panic, not the
/// `Revoked`, so the ended life's last advance must stay where
/// `committable()` finds it (it was handed over inside the lost `Revoked`).
#[test]
fn a_panicking_waker_in_revoke_loses_no_advance() {
    let tracker: W = Tracker::builder().watermarks().build();
    let a = send(&tracker, 0, 1);
    let b = send(&tracker, 0, 2);
    tracker.ack(a).unwrap();
    let (woken, waker) = test_waker(true, false);
    {
        let mut drain = pin!(tracker.drain_async());
        assert!(poll_with(drain.as_mut(), &waker).is_pending());
        let revoke = catch_unwind(AssertUnwindSafe(|| tracker.revoke(&Key::new(K))));
        assert!(revoke.is_err(), "the waker's panic reaches the caller");
        assert!(woken.woken.load(Ordering::SeqCst) > 0);
        let (_, calm) = test_waker(false, false);
        assert!(matches!(
            poll_with(drain.as_mut(), &calm),
            Poll::Ready(Ok(()))
        ));
    }
    assert_eq!(tracker.ack(b), Err(inflight::ResolveError::Revoked));
    assert_eq!(
        ids(&tracker.committable()),
        vec![(0, 1)],
        "the ended life's last advance"
    );
    let again = tracker.revoke(&Key::new(K));
    assert_eq!((again.released, again.committable.map(|o| o.id)), (0, None));
    assert_usable(&tracker, 3);
    assert_all_dropped(tracker);
}

// ---- 8: a revoke writes nothing before the CAS that makes the record its ---

/// Item 8, as far as a test without a scheduler can pin it (the race
/// itself, a revoke losing its CAS to an ack whose advance marks the
/// record, is loom model `revoke_losing_to_an_ack_keeps_the_mark_count`):
/// revokes racing acks of the same records, round after round, and the
/// marks' counts stay exact: once every advance is taken, nothing is
/// committable, and each later acked record counts one.
#[test]
fn revokes_racing_acks_keep_the_mark_counts_exact() {
    let tracker: Arc<inflight::WatermarkTracker<u32, u64>> =
        Arc::new(Tracker::builder().watermarks().build());
    for round in 0..2_000_u64 {
        let tickets: Vec<_> = (0..4)
            .map(|i| tracker.send(0, round * 8 + i).unwrap())
            .collect();
        let acker = {
            let tracker = tracker.clone();
            std::thread::spawn(move || {
                for ticket in tickets {
                    let _ = tracker.ack(ticket);
                }
            })
        };
        let _ = tracker.revoke(&0);
        acker.join().unwrap();
        let _ = tracker.revoke(&0); // settles the advance if it ran late
        let _ = tracker.committable();
        assert_eq!(tracker.stats().committable_records, 0, "round {round}");
        let ticket = tracker.send(0, round * 8 + 5).unwrap();
        tracker.ack(ticket).unwrap();
        assert_eq!(
            tracker.committable_with_stats().committable_records,
            1,
            "round {round}"
        );
    }
}

/// Item 8's fix moves where a revoked record is remembered (by whoever
/// frees its slot, not by the revoke before its CAS): the ticket of a
/// released record still answers `Revoked` after its slot was reused, on
/// trackers with and without watermarks.
#[test]
fn a_released_records_ticket_answers_revoked_after_its_slot_is_reused() {
    each_mode!(tracker = [Tracker::builder().build(), Tracker::builder().watermarks().build(), Tracker::builder().inline_offsets().build(), Tracker::builder().inline_offsets().watermarks().build()] {
        let watermarks = tracker.has_watermarks();
        let released = tracker.send("p", 1).unwrap().into_raw();
        assert_eq!(tracker.revoke("p").released, 1);
        // The partition cell's hold goes with the flush (the queue's with
        // the advance): the slot is freed, into the quarantine.
        let mut flush = tracker.begin_flush().unwrap();
        assert!(flush.wait(Duration::ZERO).unwrap().is_empty());
        flush.commit().unwrap();
        // Enough records at once that every free list, the never-used
        // slots of a young slab and the quarantine are drawn on.
        let held: Vec<_> = (2..5_000).map(|o| tracker.send("q", o).unwrap()).collect();
        assert_eq!(
            tracker.ack_raw(released),
            Err(inflight::ResolveError::Revoked),
            "watermarks: {watermarks}"
        );
        for ticket in held {
            tracker.ack(ticket).unwrap();
        }
    });
}

// ---- 10: a waiting sender's registration goes with it ------------------------

/// A key whose user code panics at a chosen call: its `Hash`, or its
/// `Eq` when the tracker compares its kept key with this one (`kept ==
/// sent`, as the partition index and a send's partition hint both do),
/// counted over all its clones. So one attempt's count is the same
/// whether the send's thread hint names the partition (an `Eq`, no
/// `Hash`) or not.
#[derive(Debug, Clone)]
struct Countdown {
    id: u32,
    calls_left: Arc<AtomicUsize>,
}

impl Countdown {
    fn new(id: u32, calls: usize) -> Self {
        Self {
            id,
            calls_left: Arc::new(AtomicUsize::new(calls)),
        }
    }

    fn calls(&self) -> usize {
        usize::MAX - self.calls_left.load(Ordering::SeqCst)
    }

    fn count(&self, what: &str) {
        if self.calls_left.fetch_sub(1, Ordering::SeqCst) == 1 {
            panic!("{PLANNED}: {what} of {}", self.id);
        }
    }
}

impl Hash for Countdown {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.count("hash");
        self.id.hash(state);
    }
}

impl PartialEq for Countdown {
    fn eq(&self, other: &Self) -> bool {
        other.count("eq");
        self.id == other.id
    }
}

impl Eq for Countdown {}

/// Item 10. `send_timeout` on a full tracker registers to wait for room
/// and sends again; the key's `Hash` (or `Eq`) panics in that retry. The
/// registration goes with the unwinding call (20,000 leaked ones made
/// every wake-up walk them).
#[test]
fn send_timeout_unregisters_when_a_retry_panics() {
    quiet_planned_panics();
    let tracker: Tracker<Countdown, u64> = Tracker::builder().capacity(1).build();
    let held = tracker.send(Countdown::new(0, usize::MAX), 0).unwrap();
    // How many calls of user code one refused attempt takes.
    let probe = Countdown::new(0, usize::MAX);
    assert!(matches!(
        tracker.send(probe.clone(), 1),
        Err(SendError::Full(..))
    ));
    let per_attempt = probe.calls();
    // The first attempt is refused and registers; the retry panics.
    let key = Countdown::new(0, per_attempt + 1);
    let sent = catch_unwind(AssertUnwindSafe(|| tracker.send_timeout(key, 2, FOREVER)));
    assert!(sent.is_err(), "the retry's user code panicked");
    assert_eq!(tracker.stats().waiting_senders, 0, "a registration leaked");
    tracker.ack(held).unwrap();
    let ticket = tracker
        .send_timeout(Countdown::new(0, usize::MAX), 3, FOREVER)
        .unwrap();
    assert_eq!(tracker.stats().waiting_senders, 0);
    tracker.ack(ticket).unwrap();
}

/// Item 10's class in `send_async`: a poll whose retry panics leaves the
/// future's registration to its drop, which removes it.
#[test]
fn send_async_unregisters_when_a_retry_panics() {
    quiet_planned_panics();
    let tracker: Tracker<Countdown, u64> = Tracker::builder().capacity(1).build();
    let held = tracker.send(Countdown::new(0, usize::MAX), 0).unwrap();
    let probe = Countdown::new(0, usize::MAX);
    assert!(matches!(
        tracker.send(probe.clone(), 1),
        Err(SendError::Full(..))
    ));
    let per_attempt = probe.calls();
    // Pending after one attempt (registered), then a poll whose retry
    // panics.
    let (_, waker) = test_waker(false, false);
    let key = Countdown::new(0, per_attempt + 1);
    {
        let mut sending = pin!(tracker.send_async(key, 2));
        assert!(poll_with(sending.as_mut(), &waker).is_pending());
        assert_eq!(tracker.stats().waiting_senders, 1);
        let polled = catch_unwind(AssertUnwindSafe(|| poll_with(sending.as_mut(), &waker)));
        assert!(polled.is_err(), "the retry's user code panicked");
    }
    assert_eq!(tracker.stats().waiting_senders, 0, "a registration leaked");
    tracker.ack(held).unwrap();
}

// ---- 11: no budget arithmetic overflows ---------------------------------------

/// Item 11. A progress budget of any size, up to `usize::MAX`, is taken as
/// it is: sends far apart are accepted (the run form's capacity was
/// `(max - 1) * 6 / 8`, which overflows above `usize::MAX / 6`).
#[test]
fn a_progress_budget_up_to_usize_max_does_not_overflow() {
    for max in [
        usize::MAX / 6 + 1,
        usize::MAX / 2,
        usize::MAX - 1,
        usize::MAX,
    ] {
        let tracker = Tracker::builder().progress(max).build();
        let first = tracker.send("p", 0_u64).unwrap();
        let far = tracker.send("p", 1 << 62).unwrap();
        let further = tracker.send("p", u64::MAX - 1).unwrap();
        tracker.ack(far).unwrap();
        let progress = &tracker.progress()["p"];
        assert_eq!(progress.next(), 0, "budget {max}");
        assert!(progress.is_done(1 << 62));
        assert!(!progress.is_done(u64::MAX - 1));
        assert!(progress.encode().len() <= max);
        tracker.ack(first).unwrap();
        assert_eq!(tracker.progress()["p"].next(), u64::MAX - 1);
        tracker.ack(further).unwrap();
        assert_eq!(tracker.progress()["p"].next(), u64::MAX);
    }
}
