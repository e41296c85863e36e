//! A refused offset is owed (issue #26 item 2): on a progress tracker, an
//! offset refused for want of room (capacity, metadata budget, a batch's
//! first unsent offset, a `send_timeout` giving up) must be sent before any
//! later offset of its partition, or the partition revoked; otherwise it
//! would count as a gap, done, and be committed unprocessed. And
//! `send_timeout` / `send_async` wait for the budget as for the capacity,
//! woken by the ack that frees it (item 3).

use inflight::{Refused, SendError, Ticket, Tracker};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

type T = inflight::ProgressTracker<&'static str, u64>;

/// A progress tracker with room for `capacity` records in flight.
fn bounded(capacity: usize) -> T {
    Tracker::builder().capacity(capacity).progress(4096).build()
}

/// Sends `p`'s offsets from `from` on, none acked, behind a stuck record,
/// until the budget refuses one: returns the tickets and the refused offset
/// (now owed).
fn fill_budget(tracker: &T, from: u64) -> (Vec<Ticket>, u64) {
    let mut tickets = Vec::new();
    for offset in from.. {
        match tracker.send("p", offset) {
            Ok(ticket) => tickets.push(ticket),
            Err(SendError::Full("p", refused, _)) => return (tickets, refused),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    unreachable!()
}

fn is_done(tracker: &T, offset: u64) -> bool {
    tracker.progress()["p"].is_done(offset)
}

#[test]
fn the_issue_case_at_capacity_360_is_not_committed_unprocessed() {
    let tracker = bounded(1);
    let first = tracker.send("p", 300).unwrap();
    assert!(matches!(
        tracker.send("p", 360),
        Err(SendError::Full("p", 360, _))
    ));
    tracker.ack(first).unwrap();
    // 360 is owed: 365 waits for it (and so does anything below it).
    assert!(matches!(
        tracker.send("p", 365),
        Err(SendError::OutOfOrder("p", 365))
    ));
    assert!(matches!(
        tracker.send("p", 359),
        Err(SendError::OutOfOrder("p", 359))
    ));
    let progress = &tracker.progress()["p"];
    assert_eq!(progress.next(), 301);
    assert!(!progress.is_done(360));
    let owed = tracker.send("p", 360).unwrap();
    tracker.ack(owed).unwrap();
    let later = tracker.send("p", 365).unwrap();
    tracker.ack(later).unwrap();
    assert_eq!(tracker.progress()["p"].next(), 366);
}

#[test]
fn the_issue_case_at_the_budget() {
    let tracker: T = Tracker::builder().progress(16).build();
    let stuck = tracker.send("p", 0).unwrap();
    let (tickets, owed) = fill_budget(&tracker, 1);
    assert!(owed > 1);
    let later = owed + 5;
    assert!(matches!(tracker.send("p", later), Err(SendError::OutOfOrder("p", o)) if o == later));
    assert!(matches!(
        tracker.send("p", owed - 1),
        Err(SendError::OutOfOrder(..))
    ));
    tracker.ack(stuck).unwrap();
    tracker.ack_all(tickets).unwrap();
    // Everything sent is acked, and the owed offset is still not done.
    assert!(!is_done(&tracker, owed));
    assert!(matches!(
        tracker.send("p", later),
        Err(SendError::OutOfOrder(..))
    ));
    let ticket = tracker.send("p", owed).unwrap();
    tracker.ack(ticket).unwrap();
    let ticket = tracker.send("p", later).unwrap();
    tracker.ack(ticket).unwrap();
    assert_eq!(tracker.progress()["p"].next(), later + 1);
}

#[test]
fn a_refusal_that_is_out_of_order_owes_nothing() {
    let tracker = bounded(1);
    let first = tracker.send("p", 10).unwrap();
    // Below the last sent: refused for order, not owed, though at capacity.
    assert!(matches!(
        tracker.send("p", 5),
        Err(SendError::OutOfOrder("p", 5))
    ));
    tracker.ack(first).unwrap();
    let next = tracker.send("p", 11).unwrap();
    tracker.ack(next).unwrap();
}

#[test]
fn a_refusal_while_another_offset_is_owed_is_for_order() {
    let tracker = bounded(1);
    let first = tracker.send("p", 1).unwrap();
    assert!(matches!(
        tracker.send("p", 5),
        Err(SendError::Full("p", 5, _))
    ));
    // At capacity still, but 5 is owed: 7 is refused for order.
    assert!(matches!(
        tracker.send("p", 7),
        Err(SendError::OutOfOrder("p", 7))
    ));
    // A retry of the owed offset at capacity is `Full` again.
    assert!(matches!(
        tracker.send("p", 5),
        Err(SendError::Full("p", 5, _))
    ));
    tracker.ack(first).unwrap();
    let owed = tracker.send("p", 5).unwrap();
    tracker.ack(owed).unwrap();
    let next = tracker.send("p", 7).unwrap();
    tracker.ack(next).unwrap();
}

#[test]
fn other_partitions_do_not_owe() {
    let tracker = bounded(1);
    let first = tracker.send("p", 1).unwrap();
    assert!(matches!(
        tracker.send("p", 5),
        Err(SendError::Full("p", 5, _))
    ));
    tracker.ack(first).unwrap();
    let other = tracker.send("q", 9).unwrap();
    tracker.ack(other).unwrap();
}

#[test]
fn a_batch_owes_its_first_unsent_offset() {
    let tracker = bounded(3);
    let mut tickets = Vec::new();
    let err = tracker
        .send_batch(&"p", 10_u64..15, &mut tickets)
        .unwrap_err();
    assert_eq!(err.reason, Refused::Full);
    assert_eq!(err.into_offsets().collect::<Vec<_>>(), [13, 14]);
    assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(3));
    assert!(matches!(
        tracker.send("p", 14),
        Err(SendError::OutOfOrder("p", 14))
    ));
    assert!(!is_done(&tracker, 13));
    assert_eq!(
        tracker.send_batch(&"p", 13_u64..15, &mut tickets).ok(),
        Some(2)
    );
    assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(2));
    assert_eq!(tracker.progress()["p"].next(), 15);
}

#[test]
fn a_send_timeout_that_gives_up_owes_its_offset() {
    let tracker = bounded(1);
    let first = tracker.send("p", 1).unwrap();
    let refused = tracker.send_timeout("p", 5, Duration::from_millis(1));
    assert!(matches!(refused, Err(SendError::Full("p", 5, _))));
    tracker.ack(first).unwrap();
    assert!(matches!(
        tracker.send("p", 6),
        Err(SendError::OutOfOrder("p", 6))
    ));
    let owed = tracker
        .send_timeout("p", 5, Duration::from_secs(60))
        .unwrap();
    tracker.ack(owed).unwrap();
}

#[test]
fn a_send_timeout_at_the_budget_that_gives_up_owes_its_offset() {
    let tracker: T = Tracker::builder().progress(16).build();
    let stuck = tracker.send("p", 0).unwrap();
    let (tickets, owed) = fill_budget(&tracker, 1);
    // The debt accepts the offset owed itself: its retries wait for room.
    let refused = tracker.send_timeout("p", owed, Duration::from_millis(1));
    assert!(matches!(refused, Err(SendError::Full("p", o, _)) if o == owed));
    assert!(matches!(
        tracker.send("p", owed + 1),
        Err(SendError::OutOfOrder(..))
    ));
    tracker.ack(stuck).unwrap();
    tracker.ack_all(tickets).unwrap();
    let ticket = tracker.send("p", owed).unwrap();
    tracker.ack(ticket).unwrap();
}

#[test]
fn a_revoke_forgets_the_debt() {
    let tracker = bounded(1);
    let first = tracker.send("p", 1).unwrap();
    assert!(matches!(
        tracker.send("p", 5),
        Err(SendError::Full("p", 5, _))
    ));
    let _ = tracker.revoke(&"p");
    assert_eq!(tracker.ack(first), Err(inflight::ResolveError::Revoked));
    // The new life starts afresh: any offset, no debt.
    let next = tracker.send("p", 9).unwrap();
    // A refusal in the new life is owed again, in the new life.
    assert!(matches!(
        tracker.send("p", 12),
        Err(SendError::Full("p", 12, _))
    ));
    tracker.ack(next).unwrap();
    assert!(matches!(
        tracker.send("p", 13),
        Err(SendError::OutOfOrder("p", 13))
    ));
    let owed = tracker.send("p", 12).unwrap();
    tracker.ack(owed).unwrap();
}

/// Threads send increasing offsets of one partition (each acks what it
/// sent at once) through a capacity of 1; a thread refused with `Full`
/// stops, leaving its offset owed. Then at most one offset was refused
/// `Full` (every later send waits for it), no offset above it was
/// accepted after it, and it is not done until it is sent.
#[test]
fn concurrent_senders_see_one_decision() {
    const THREADS: usize = 4;
    const SENDS: usize = 200;
    for _ in 0..50 {
        let tracker = bounded(1);
        let counter = AtomicU64::new(0);
        let full = Mutex::new(Vec::new());
        let accepted = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..SENDS {
                        let offset = counter.fetch_add(1, Ordering::Relaxed);
                        match tracker.send("p", offset) {
                            Ok(ticket) => {
                                tracker.ack(ticket).unwrap();
                                accepted.lock().unwrap().push(offset);
                            }
                            Err(SendError::OutOfOrder(..)) => {}
                            Err(SendError::Full(_, offset, _)) => {
                                full.lock().unwrap().push(offset);
                                return;
                            }
                            Err(other) => panic!("unexpected {other:?}"),
                        }
                    }
                });
            }
        });
        let full = full.into_inner().unwrap();
        let accepted = accepted.into_inner().unwrap();
        assert!(full.len() <= 1, "several offsets refused Full: {full:?}");
        let Some(&owed) = full.first() else {
            continue;
        };
        // A record above the owed offset linked before the refusal would
        // have made the refusal one for order; none links after it.
        assert!(accepted.iter().all(|&a| a < owed), "{accepted:?} {owed}");
        assert!(matches!(
            tracker.send("p", u64::MAX - 1),
            Err(SendError::OutOfOrder(..))
        ));
        if let Some(progress) = tracker.progress().get("p") {
            assert!(!progress.is_done(owed));
        }
        let ticket = tracker.send("p", owed).unwrap();
        tracker.ack(ticket).unwrap();
        assert_eq!(tracker.progress()["p"].next(), owed + 1);
    }
}

#[test]
fn send_timeout_waits_for_the_budget_and_is_woken_by_an_ack() {
    let tracker: T = Tracker::builder().progress(16).build();
    let stuck = tracker.send("p", 0).unwrap();
    let (tickets, owed) = fill_budget(&tracker, 1);
    let go = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            go.wait();
            tracker.ack_all(tickets).unwrap();
            tracker.ack(stuck).unwrap();
        });
        go.wait();
        // No timing threshold: the wait must end in a send.
        let ticket = tracker
            .send_timeout("p", owed, Duration::from_secs(600))
            .unwrap();
        tracker.ack(ticket).unwrap();
    });
    assert_eq!(tracker.progress()["p"].next(), owed + 1);
}

#[test]
fn send_async_waits_for_the_budget_and_is_woken_by_an_ack() {
    let tracker: T = Tracker::builder().progress(16).build();
    let stuck = tracker.send("p", 0).unwrap();
    let (tickets, owed) = fill_budget(&tracker, 1);
    let go = Barrier::new(2);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            go.wait();
            tracker.ack(stuck).unwrap();
            tracker.ack_all(tickets).unwrap();
        });
        go.wait();
        let ticket = runtime.block_on(tracker.send_async("p", owed)).unwrap();
        tracker.ack(ticket).unwrap();
    });
    assert_eq!(tracker.progress()["p"].next(), owed + 1);
}

#[test]
fn send_timeout_waits_for_the_budget_across_many_acks() {
    // The acks come one at a time; some free too little: the sender waits
    // again (flag, look, park) until one frees enough.
    let tracker: T = Tracker::builder().progress(16).build();
    let stuck = tracker.send("p", 0).unwrap();
    let (tickets, owed) = fill_budget(&tracker, 1);
    let go = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            go.wait();
            for ticket in tickets.into_iter().rev() {
                tracker.ack(ticket).unwrap();
            }
            tracker.ack(stuck).unwrap();
        });
        go.wait();
        let ticket = tracker
            .send_timeout("p", owed, Duration::from_secs(600))
            .unwrap();
        tracker.ack(ticket).unwrap();
    });
}

#[test]
fn a_new_life_takes_an_ended_lifes_debt_over() {
    let tracker = bounded(1);
    let first = tracker.send("p", 1).unwrap();
    assert!(matches!(
        tracker.send("p", 5),
        Err(SendError::Full("p", 5, _))
    ));
    // `first` is released, its permit back; q takes it.
    let _ = tracker.revoke(&"p");
    let other = tracker.send("q", 1).unwrap();
    // The new life's first send is refused before anything links: it
    // takes the ended life's debt over, and owes 9.
    assert!(matches!(
        tracker.send("p", 9),
        Err(SendError::Full("p", 9, _))
    ));
    assert!(matches!(
        tracker.send("p", 10),
        Err(SendError::OutOfOrder("p", 10))
    ));
    // The ended life's offset is nothing now.
    assert!(matches!(
        tracker.send("p", 5),
        Err(SendError::OutOfOrder("p", 5))
    ));
    tracker.ack(other).unwrap();
    let owed = tracker.send("p", 9).unwrap();
    tracker.ack(owed).unwrap();
    let next = tracker.send("p", 10).unwrap();
    tracker.ack(next).unwrap();
    assert_eq!(tracker.ack(first), Err(inflight::ResolveError::Revoked));
}
