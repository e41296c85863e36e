//! A refused offset is owed on watermark trackers too (review 4, item 7):
//! the same rules as on a progress tracker (`tests/owed.rs`). An offset
//! refused for want of room (capacity, a batch's first unsent offset, a
//! `send_timeout` giving up) must be sent before any other offset of its
//! partition, or the partition revoked: otherwise the next offset, once
//! acked, would carry the watermark past the one never sent, and
//! `committable()` would commit it unprocessed. A watermark tracker keeps
//! no order, so the debt is told by the offset itself (its `Hash`).
//!
//! Every test runs on a plain and an inline watermark tracker.

use inflight::mode::{Inline, Watermarks};
use inflight::{Refused, ResolveError, SendError, Ticket, Tracker};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

#[macro_use]
mod modes;

fn plain(capacity: usize) -> inflight::WatermarkTracker<&'static str, u64> {
    Tracker::builder().capacity(capacity).watermarks().build()
}

fn inline(capacity: usize) -> Tracker<&'static str, u64, Inline<Watermarks>> {
    Tracker::builder()
        .capacity(capacity)
        .inline_offsets()
        .watermarks()
        .build()
}

/// The issue's case: 360 refused at capacity; 365 sent and acked must not
/// make 360 committable unsent.
#[test]
fn the_issue_case_the_watermark_never_passes_the_owed_offset() {
    each_mode!(tracker = [plain(1), inline(1)] {
        let first = tracker.send("p", 300).unwrap();
        assert!(matches!(tracker.send("p", 360), Err(SendError::Full("p", 360, _))));
        tracker.ack(first).unwrap();
        assert_eq!(tracker.committable().get("p"), Some(&300));
        // 360 is owed: 365 waits for it, and so does any other offset.
        assert!(matches!(tracker.send("p", 365), Err(SendError::OutOfOrder("p", 365))));
        assert!(matches!(tracker.send("p", 359), Err(SendError::OutOfOrder("p", 359))));
        assert_eq!(tracker.committable().get("p"), None, "nothing new is done");
        let owed = tracker.send("p", 360).unwrap();
        tracker.ack(owed).unwrap();
        let later = tracker.send("p", 365).unwrap();
        tracker.ack(later).unwrap();
        assert_eq!(tracker.committable().get("p"), Some(&365));
        assert_eq!(tracker.in_flight(), 0);
    });
}

#[test]
fn a_refusal_while_another_offset_is_owed_is_for_order() {
    each_mode!(tracker = [plain(1), inline(1)] {
        let first = tracker.send("p", 1).unwrap();
        assert!(matches!(tracker.send("p", 5), Err(SendError::Full("p", 5, _))));
        // At capacity still, but 5 is owed: 7 is refused for order, and
        // owes nothing.
        assert!(matches!(tracker.send("p", 7), Err(SendError::OutOfOrder("p", 7))));
        // A retry of the owed offset at capacity is `Full` again.
        assert!(matches!(tracker.send("p", 5), Err(SendError::Full("p", 5, _))));
        tracker.ack(first).unwrap();
        let owed = tracker.send("p", 5).unwrap();
        tracker.ack(owed).unwrap();
        let next = tracker.send("p", 7).unwrap();
        tracker.ack(next).unwrap();
        assert_eq!(tracker.committable().get("p"), Some(&7));
    });
}

#[test]
fn other_partitions_do_not_owe() {
    each_mode!(tracker = [plain(1), inline(1)] {
        let first = tracker.send("p", 1).unwrap();
        assert!(matches!(tracker.send("p", 5), Err(SendError::Full("p", 5, _))));
        tracker.ack(first).unwrap();
        let other = tracker.send("q", 9).unwrap();
        tracker.ack(other).unwrap();
        assert_eq!(tracker.committable().get("q"), Some(&9));
    });
}

#[test]
fn a_batch_owes_its_first_unsent_offset() {
    each_mode!(tracker = [plain(3), inline(3)] {
        let mut tickets: Vec<Ticket> = Vec::new();
        let err = tracker.send_batch(&"p", 10_u64..15, &mut tickets).unwrap_err();
        assert_eq!(err.reason, Refused::Full);
        assert_eq!(err.into_offsets().collect::<Vec<_>>(), [13, 14]);
        assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(3));
        assert_eq!(tracker.committable().get("p"), Some(&12));
        assert!(matches!(tracker.send("p", 14), Err(SendError::OutOfOrder("p", 14))));
        // A batch that does not start with the owed offset is refused
        // whole, for order, and gives every offset back.
        let err = tracker.send_batch(&"p", 14_u64..16, &mut tickets).unwrap_err();
        assert_eq!(err.reason, Refused::OutOfOrder);
        assert_eq!(err.into_offsets().collect::<Vec<_>>(), [14, 15]);
        assert!(tickets.is_empty());
        assert_eq!(tracker.in_flight(), 0);
        // One that starts with it pays the debt.
        assert_eq!(tracker.send_batch(&"p", 13_u64..15, &mut tickets).ok(), Some(2));
        assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(2));
        assert_eq!(tracker.committable().get("p"), Some(&14));
    });
}

#[test]
fn a_batch_refused_at_its_first_offset_owes_it() {
    each_mode!(tracker = [plain(1), inline(1)] {
        let held = tracker.send("p", 1).unwrap();
        let mut tickets: Vec<Ticket> = Vec::new();
        let err = tracker.send_batch(&"p", 2_u64..4, &mut tickets).unwrap_err();
        assert_eq!(err.reason, Refused::Full);
        assert_eq!(err.into_offsets().collect::<Vec<_>>(), [2, 3]);
        tracker.ack(held).unwrap();
        assert!(matches!(tracker.send("p", 3), Err(SendError::OutOfOrder("p", 3))));
        assert_eq!(tracker.send_batch(&"p", 2_u64..3, &mut tickets).ok(), Some(1));
        assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(1));
        assert_eq!(tracker.committable().get("p"), Some(&2));
    });
}

#[test]
fn a_send_timeout_that_gives_up_owes_its_offset() {
    each_mode!(tracker = [plain(1), inline(1)] {
        let first = tracker.send("p", 1).unwrap();
        let refused = tracker.send_timeout("p", 5, Duration::from_millis(1));
        assert!(matches!(refused, Err(SendError::Full("p", 5, _))));
        tracker.ack(first).unwrap();
        assert!(matches!(tracker.send("p", 6), Err(SendError::OutOfOrder("p", 6))));
        let owed = tracker.send_timeout("p", 5, Duration::from_secs(60)).unwrap();
        tracker.ack(owed).unwrap();
        assert_eq!(tracker.committable().get("p"), Some(&5));
    });
}

#[test]
fn a_revoke_forgets_the_debt() {
    each_mode!(tracker = [plain(1), inline(1)] {
        let first = tracker.send("p", 1).unwrap();
        assert!(matches!(tracker.send("p", 5), Err(SendError::Full("p", 5, _))));
        let _ = tracker.revoke(&"p");
        assert_eq!(tracker.ack(first), Err(ResolveError::Revoked));
        // The new life starts afresh: any offset, no debt.
        let next = tracker.send("p", 9).unwrap();
        // A refusal in the new life is owed again, in the new life.
        assert!(matches!(tracker.send("p", 12), Err(SendError::Full("p", 12, _))));
        tracker.ack(next).unwrap();
        assert!(matches!(tracker.send("p", 13), Err(SendError::OutOfOrder("p", 13))));
        let owed = tracker.send("p", 12).unwrap();
        tracker.ack(owed).unwrap();
        assert_eq!(tracker.committable().get("p"), Some(&12));
    });
}

#[test]
fn a_new_life_takes_an_ended_lifes_debt_over() {
    each_mode!(tracker = [plain(1), inline(1)] {
        let first = tracker.send("p", 1).unwrap();
        assert!(matches!(tracker.send("p", 5), Err(SendError::Full("p", 5, _))));
        // `first` is released, its permit back; q takes it.
        let _ = tracker.revoke(&"p");
        let other = tracker.send("q", 1).unwrap();
        // The new life's first send is refused before anything links: it
        // takes the ended life's debt over, and owes 9.
        assert!(matches!(tracker.send("p", 9), Err(SendError::Full("p", 9, _))));
        assert!(matches!(tracker.send("p", 10), Err(SendError::OutOfOrder("p", 10))));
        // The ended life's offset is nothing now.
        assert!(matches!(tracker.send("p", 5), Err(SendError::OutOfOrder("p", 5))));
        tracker.ack(other).unwrap();
        let owed = tracker.send("p", 9).unwrap();
        tracker.ack(owed).unwrap();
        let next = tracker.send("p", 10).unwrap();
        tracker.ack(next).unwrap();
        assert_eq!(tracker.committable().get("p"), Some(&10));
        assert_eq!(tracker.ack(first), Err(ResolveError::Revoked));
    });
}

/// `send_async` of the owed offset waits for room and pays the debt.
#[test]
fn send_async_pays_the_debt_when_room_comes() {
    each_mode!(tracker = [plain(1), inline(1)] {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let first = tracker.send("p", 1).unwrap();
        assert!(matches!(tracker.send("p", 2), Err(SendError::Full("p", 2, _))));
        std::thread::scope(|s| {
            let acker = s.spawn(|| tracker.ack(first).unwrap());
            let owed = runtime.block_on(tracker.send_async("p", 2)).unwrap();
            acker.join().unwrap();
            tracker.ack(owed).unwrap();
        });
        assert_eq!(tracker.committable().get("p"), Some(&2));
    });
}

/// Threads send distinct offsets of one partition (each acks what it sent
/// at once) through a capacity of 1; a thread refused `Full` stops,
/// leaving its offset owed. Then at most one offset was refused `Full`, no
/// send begun after that refusal returned is accepted, and after the owed
/// offset is sent it is what `committable` reports.
#[test]
fn concurrent_senders_see_one_debt() {
    const THREADS: usize = 4;
    // Fewer under Miri, which runs every step of every thread.
    let (sends, rounds) = if cfg!(miri) { (20, 2) } else { (200, 50) };
    for _ in 0..rounds {
        let tracker = plain(1);
        let counter = AtomicU64::new(1);
        let full = Mutex::new(Vec::new());
        let owes = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..sends {
                        let offset = counter.fetch_add(1, Ordering::Relaxed);
                        let after_the_debt = owes.load(Ordering::SeqCst);
                        match tracker.send("p", offset) {
                            Ok(ticket) => {
                                assert!(!after_the_debt, "{offset} accepted after a debt");
                                tracker.ack(ticket).unwrap();
                            }
                            Err(SendError::OutOfOrder(..)) => {}
                            Err(SendError::Full(_, offset, _)) => {
                                full.lock().unwrap().push(offset);
                                owes.store(true, Ordering::SeqCst);
                                return;
                            }
                            Err(other) => panic!("unexpected {other:?}"),
                        }
                    }
                });
            }
        });
        let full = full.into_inner().unwrap();
        assert!(full.len() <= 1, "several offsets refused Full: {full:?}");
        let Some(&owed) = full.first() else {
            continue;
        };
        assert_ne!(tracker.committable().get("p"), Some(&owed));
        assert!(matches!(
            tracker.send("p", u64::MAX),
            Err(SendError::OutOfOrder(..))
        ));
        let ticket = tracker.send("p", owed).unwrap();
        tracker.ack(ticket).unwrap();
        assert_eq!(tracker.committable().get("p"), Some(&owed));
        assert_eq!(tracker.in_flight(), 0);
    }
}
