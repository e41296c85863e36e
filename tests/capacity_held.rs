//! Issue 26, item 4: a capacity bounds memory. On a tracker with
//! watermarks (or progress), records acked but held behind an unacked one
//! of their partition count against the capacity until the watermark
//! passes them; their permits come back then, not at the ack, and a sender
//! waiting for room is woken by that advance. A barrier tracker gives the
//! permit back at the ack, as before. And however many threads send and
//! resolve, the slots a bounded tracker allocates stay within the multiple
//! of the capacity that `Builder::capacity` states.
//!
//! The user's case: a watermark tracker of `capacity(5_000)`, one record
//! unacked and others sent and acked behind it, grew to 1.3 GB and 2^24 − 1
//! records in flight, then refused every partition. Here scaled down to a
//! capacity of 64.

#[macro_use]
mod modes;

use inflight::{ProgressTracker, SendError, Tracker, WatermarkTracker};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

const CAPACITY: usize = 64;
/// Sends tried behind the stuck record once the capacity is full.
const TRIES: u64 = 10_000;
/// Slots a young tracker may take in chunks before it reuses freed ones
/// (see `Builder::capacity`).
const YOUNG: usize = 1_024;
/// Longer than any run; a lost wake-up hangs the test instead.
const FOREVER: Duration = Duration::from_secs(3_600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Watermarks,
    Progress,
    Barrier,
}

fn watermarks(capacity: usize) -> WatermarkTracker<&'static str, u64> {
    Tracker::builder().capacity(capacity).watermarks().build()
}

fn progress(capacity: usize) -> ProgressTracker<&'static str, u64> {
    Tracker::builder()
        .capacity(capacity)
        .progress(4_096)
        .build()
}

/// Sends `p`'s offset 0 and leaves it unacked, then sends and acks offsets
/// behind it until the tracker holds `CAPACITY` records; returns the stuck
/// one's ticket.
fn fill_behind_a_stuck_one<M: inflight::mode::Mode>(
    tracker: &Tracker<&'static str, u64, M>,
) -> inflight::Ticket {
    let stuck = tracker.send("p", 0).unwrap();
    for offset in 1..CAPACITY as u64 {
        let ticket = tracker.send("p", offset).unwrap();
        tracker.ack(ticket).unwrap();
    }
    stuck
}

/// One unacked record, then records sent and acked behind it: on a tracker
/// with watermarks they fill the capacity, and every further send (of any
/// partition) is refused, with nothing allocated; once the stuck record is
/// acked the watermark passes them all and sends go on.
#[test]
fn acked_records_held_behind_a_stuck_one_fill_the_capacity() {
    each_mode!((kind, tracker) = [
        (Kind::Watermarks, watermarks(CAPACITY)),
        (Kind::Progress, progress(CAPACITY)),
    ] {
        let stuck = fill_behind_a_stuck_one(&tracker);
        let stats = tracker.stats();
        assert_eq!(tracker.in_flight(), CAPACITY, "{kind:?}");
        assert_eq!(stats.held_records, CAPACITY as u64 - 1, "{kind:?}");
        let slots = stats.slots;
        let next = CAPACITY as u64;
        for _ in 0..TRIES {
            assert!(
                matches!(tracker.send("p", next), Err(SendError::Full("p", _, _))),
                "{kind:?}: a send past the capacity"
            );
        }
        // Another partition is refused too (on a progress tracker `p` now
        // owes `next`, so only `next` may be tried there).
        assert!(matches!(tracker.send("q", 0), Err(SendError::Full("q", 0, _))));
        let stats = tracker.stats();
        assert_eq!(stats.slots, slots, "{kind:?}: refused sends allocated");
        assert!(
            slots <= 2 * CAPACITY + YOUNG,
            "{kind:?}: {slots} slots at capacity {CAPACITY}"
        );
        assert_eq!(tracker.in_flight(), CAPACITY);

        tracker.ack(stuck).unwrap();
        assert_eq!(tracker.in_flight(), 0, "{kind:?}");
        assert_eq!(tracker.stats().held_records, 0);
        assert_eq!(tracker.committable()["p"], next - 1);
        // Room again: the capacity's worth, and no more.
        let mut tickets = Vec::new();
        for offset in next..next + CAPACITY as u64 {
            tickets.push(tracker.send("p", offset).unwrap());
        }
        let over = next + CAPACITY as u64;
        assert!(matches!(tracker.send("p", over), Err(SendError::Full(..))));
        assert_eq!(tracker.ack_all(tickets), Ok(CAPACITY));
        assert_eq!(tracker.committable()["p"], over - 1, "{kind:?}");
        assert!(tracker.stats().slots <= 2 * CAPACITY + YOUNG);
    });
}

/// A barrier tracker holds nothing behind an unacked record: each ack
/// gives its permit back at once, as before.
#[test]
fn a_barrier_tracker_frees_the_permit_at_the_ack() {
    let tracker = Tracker::with_capacity(CAPACITY);
    let stuck = tracker.send("p", 0).unwrap();
    for offset in 1..TRIES {
        let ticket = tracker.send("p", offset).unwrap();
        tracker.ack(ticket).unwrap();
    }
    assert_eq!(tracker.in_flight(), 1);
    let stats = tracker.stats();
    assert_eq!(stats.held_records, 0);
    assert!(stats.slots <= 2 * CAPACITY + YOUNG, "{} slots", stats.slots);
    tracker.ack(stuck).unwrap();
}

/// A batch of acks behind the stuck record holds the permits too, and a
/// revoke of the partition lets the held records go with the stuck one.
#[test]
fn batches_and_revokes_of_held_records() {
    each_mode!((kind, tracker) = [
        (Kind::Watermarks, watermarks(CAPACITY)),
        (Kind::Progress, progress(CAPACITY)),
    ] {
        let stuck = tracker.send("p", 0).unwrap();
        let mut tickets = Vec::new();
        let refused = tracker
            .send_batch(&"p", 1..=CAPACITY as u64, &mut tickets)
            .unwrap_err();
        assert_eq!(tickets.len(), CAPACITY - 1, "{kind:?}: {refused:?}");
        assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(CAPACITY - 1));
        assert!(matches!(tracker.send("q", 0), Err(SendError::Full(..))));
        assert_eq!(tracker.stats().held_records, CAPACITY as u64 - 1);
        let revoked = tracker.revoke("p");
        assert_eq!(revoked.released, 1, "{kind:?}");
        assert_eq!(tracker.in_flight(), 0);
        assert!(tracker.ack(stuck).is_err());
        // The whole capacity is free again.
        tracker
            .send_batch(&"q", 0..CAPACITY as u64, &mut tickets)
            .unwrap();
        assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(CAPACITY));
    });
}

/// A failed record holds no permit: the watermark stops there but passes
/// the records behind it, so their permits come back.
#[test]
fn a_failure_holds_no_permit() {
    each_mode!((kind, tracker) = [
        (Kind::Watermarks, watermarks(2)),
        (Kind::Progress, progress(2)),
    ] {
        let failed = tracker.send("p", 0).unwrap();
        tracker.fail(failed).unwrap();
        for offset in 1..100 {
            let ticket = tracker.send("p", offset).unwrap();
            tracker.ack(ticket).unwrap();
        }
        assert_eq!(tracker.in_flight(), 0, "{kind:?}");
        // A progress tracker keeps the failed record and those passed
        // after it (slots, not permits) for `progress()`, and counts them.
        let kept = if kind == Kind::Progress { 100 } else { 0 };
        assert_eq!(tracker.stats().held_records, kept, "{kind:?}");
    });
}

/// A sender waiting for room is woken when the watermark passes the held
/// records, by the ack of the stuck one (not by a timeout: its timeout is
/// an hour).
#[test]
fn send_timeout_is_woken_when_the_watermark_passes() {
    each_mode!((kind, tracker) = [
        (Kind::Watermarks, watermarks(CAPACITY)),
        (Kind::Progress, progress(CAPACITY)),
    ] {
        let stuck = fill_behind_a_stuck_one(&tracker);
        thread::scope(|s| {
            let waiter = s.spawn(|| tracker.send_timeout("p", CAPACITY as u64, FOREVER));
            // Until it waits (a state to reach, not a time to sleep).
            while tracker.stats().waiting_senders == 0 {
                thread::yield_now();
            }
            assert!(!waiter.is_finished(), "{kind:?}: sent with no room");
            tracker.ack(stuck).unwrap();
            let ticket = waiter.join().unwrap().expect("the advance made room");
            tracker.ack(ticket).unwrap();
        });
        assert_eq!(tracker.committable()["p"], CAPACITY as u64);
    });
}

/// Many threads acking the records a few others sent (the hand-off whose
/// freed slots once waited on the ackers' own lists, up to 255 each, out
/// of every sender's reach): the slots allocated stay within the bound
/// `Builder::capacity` states.
#[test]
fn slots_stay_bounded_however_many_threads_resolve() {
    const SENDERS: usize = 4;
    const ACKERS: usize = 32;
    const CAPACITY: usize = 256;
    const SENDS: u64 = 20_000;
    each_mode!((kind, tracker) = [
        (Kind::Watermarks, watermarks(CAPACITY)),
        (Kind::Progress, progress(CAPACITY)),
        (Kind::Barrier, Tracker::with_capacity(CAPACITY)),
    ] {
        thread::scope(|s| {
            let tracker = &tracker;
            let mut ackers = Vec::new();
            for _ in 0..ACKERS {
                let (tx, rx) = mpsc::channel::<inflight::Ticket>();
                ackers.push(tx);
                s.spawn(move || {
                    for ticket in rx {
                        tracker.ack(ticket).unwrap();
                    }
                });
            }
            for (i, partition) in ["p0", "p1", "p2", "p3"].into_iter().enumerate() {
                let ackers = ackers.clone();
                s.spawn(move || {
                    for offset in 0..SENDS {
                        // At capacity, retry: the ackers make room.
                        let ticket = loop {
                            match tracker.send(partition, offset) {
                                Ok(ticket) => break ticket,
                                Err(SendError::Full(..)) => thread::yield_now(),
                                Err(e) => panic!("{e:?}"),
                            }
                        };
                        let acker = (offset as usize * SENDERS + i) % ACKERS;
                        ackers[acker].send(ticket).unwrap();
                    }
                });
            }
        });
        let stats = tracker.stats();
        assert_eq!(stats.in_flight, 0, "{kind:?}");
        // The bound of `Builder::capacity`: 2N + 1,024, plus a few per
        // partition (offsets kept for commits), one per thread between a
        // slot and a refused permit, and 128 per sender growing the slab
        // at the same moment as another.
        let bound = 2 * CAPACITY + YOUNG + 3 * SENDERS + SENDERS + 128 * SENDERS;
        assert!(
            stats.slots <= bound,
            "{kind:?}: {} slots at capacity {CAPACITY}",
            stats.slots
        );
        println!("{kind:?}: {} slots at capacity {CAPACITY}", stats.slots);
    });
}
