//! Loom models of owed offsets (issue #26 item 2, and review 4 item 7 for
//! watermark trackers, O6 and O7): on a progress tracker,
//! an offset refused for want of room is owed, and no later offset of its
//! partition is accepted until it is sent (or the partition revoked). The
//! debt is part of the order decision: senders of one partition see one.
//!
//! A capacity of 1 makes a refusal easy: the permit is held by record 0.
#![cfg(loom)]

use inflight::{SendError, SeqOffset, Ticket, Tracker};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;
use common::run_model;

#[derive(Clone, Debug)]
struct Seq(Arc<u64>);

impl SeqOffset for Seq {
    fn seq(self) -> u64 {
        *self.0
    }
}

fn seq(n: u64) -> Seq {
    Seq(Arc::new(n))
}

type T = inflight::ProgressTracker<&'static str, Seq>;

/// Long enough that only a wake-up can end the wait.
const FOREVER: Duration = Duration::from_secs(3600);

fn bounded() -> Arc<T> {
    Arc::new(Tracker::builder().capacity(1).progress(4096).build())
}

/// What a send came to, the record dropped.
#[derive(Debug)]
enum Sent {
    Accepted(Ticket),
    Full,
    OutOfOrder,
}

fn send(tracker: &T, offset: u64) -> Sent {
    match tracker.send("p", seq(offset)) {
        Ok(ticket) => Sent::Accepted(ticket),
        Err(SendError::Full(..)) => Sent::Full,
        Err(SendError::OutOfOrder(..)) => Sent::OutOfOrder,
        Err(other) => panic!("unexpected {other:?}"),
    }
}

/// Offset `low` of p is refused at capacity (owed) while another thread
/// acks `held` (freeing the permit) and sends `low + 1`. If `low` was
/// refused `Full`, `low + 1` is never accepted (it would make `low` a gap,
/// done unprocessed); if `low` was refused for order, `low + 1` was linked
/// or owed before it. Afterwards the debt still holds: `low + 2` is
/// refused until the owed offset is sent, and the progress never reports
/// `low` done before its ack.
fn owed_vs_higher(tracker: Arc<T>, held: Ticket, low: u64) {
    let (high, later) = (low + 1, low + 2);
    let t2 = tracker.clone();
    let other = thread::spawn(move || {
        t2.ack(held).unwrap();
        send(&t2, high)
    });
    let first = send(&tracker, low);
    let second = other.join().unwrap();
    match (first, second) {
        (Sent::Full, Sent::Accepted(_)) => {
            panic!("{high} accepted though {low} was refused Full (owed)")
        }
        (Sent::Full, _) => {
            // `low` is owed: nothing else of p goes through.
            assert!(matches!(send(&tracker, later), Sent::OutOfOrder));
            if let Some(progress) = tracker.progress().get("p") {
                assert!(!progress.is_done(low), "{low} done unsent: {progress:?}");
            }
            let Sent::Accepted(first) = send(&tracker, low) else {
                panic!("the owed offset refused with the permit free");
            };
            tracker.ack(first).unwrap();
            let Sent::Accepted(next) = send(&tracker, later) else {
                panic!("{later} refused once {low} was sent");
            };
            tracker.ack(next).unwrap();
            assert_eq!(tracker.progress()["p"].next(), later + 1);
        }
        // `low` refused for order: `high` was linked first, or owed first
        // (its refusal at capacity while the send of `low` held the permit,
        // before it backed out).
        (Sent::OutOfOrder, Sent::OutOfOrder) => panic!("{low} and {high} both out of order"),
        (Sent::OutOfOrder, Sent::Accepted(second)) => tracker.ack(second).unwrap(),
        (Sent::OutOfOrder, Sent::Full) => {
            assert!(matches!(send(&tracker, later), Sent::OutOfOrder));
            let Sent::Accepted(second) = send(&tracker, high) else {
                panic!("the owed {high} refused with the permit free");
            };
            tracker.ack(second).unwrap();
        }
        (Sent::Accepted(first), second) => {
            // `high` refused at capacity (owed) or accepted after the ack
            // of `low`: never out of order.
            assert!(
                !matches!(second, Sent::OutOfOrder),
                "{high} after {low}: in order"
            );
            tracker.ack(first).unwrap();
            match second {
                Sent::Accepted(second) => tracker.ack(second).unwrap(),
                _ => {
                    let Sent::Accepted(second) = send(&tracker, high) else {
                        panic!("the owed {high} refused with the permit free");
                    };
                    tracker.ack(second).unwrap();
                }
            }
        }
    }
    assert_eq!(tracker.in_flight(), 0);
}

/// O1. [`owed_vs_higher`] with 1 and 2, the permit held by 0. Mutants
/// `owed_forgotten` (a refusal owes nothing) and `owed_unchecked` (the
/// debt is set without checking the tail it was decided against) are
/// caught here.
#[test]
fn owed_offset_vs_higher_send_of_the_same_partition() {
    run_model("owed_offset_vs_higher_send_of_the_same_partition", || {
        let tracker = bounded();
        let zero = tracker.send("p", seq(0)).unwrap();
        owed_vs_higher(tracker, zero, 1);
    });
}

/// O4. [`owed_vs_higher`] with 9 and 10 in a new life of p, whose ended
/// life owes 5 (refused at capacity before the revoke), the permit held
/// by a record of q: the refusal of 9 takes the ended life's debt over
/// (clearing the flag, then setting its own) while 10 may link.
#[test]
fn takeover_of_an_ended_lifes_debt_vs_higher_send() {
    run_model("takeover_of_an_ended_lifes_debt_vs_higher_send", || {
        let tracker = bounded();
        let one = tracker.send("p", seq(1)).unwrap();
        assert!(matches!(send(&tracker, 5), Sent::Full));
        let _ = tracker.revoke(&"p");
        assert!(tracker.ack(one).is_err(), "released by the revoke");
        let held = tracker.send("q", seq(1)).unwrap();
        owed_vs_higher(tracker, held, 9);
    });
}

/// O5. The ABA the debt's epoch guards against. Offset 5 of p is owed
/// (refused at capacity), and a thread sends 5 again while the main thread
/// revokes p and sends 9 of the new life, which the retry of 5 may refuse
/// at capacity (it holds the permit): 9's refusal then takes the ended
/// life's debt over, at the same tail record. The stale send of 5, if it
/// read the old debt's word, must not link with it and clear the new debt:
/// once 9 is refused `Full`, 10 is refused until 9 is sent. Mutant
/// `owed_epochless` (a takeover's debt reuses the old word) is caught here.
#[test]
fn stale_owed_send_vs_revoke_and_takeover() {
    run_model("stale_owed_send_vs_revoke_and_takeover", || {
        stale_owed_vs_revoke_and_takeover(bounded(), seq);
    });
}

/// What a send came to, on any tracker.
fn outcome<O: std::fmt::Debug>(sent: Result<Ticket, SendError<&'static str, O>>) -> Sent {
    match sent {
        Ok(ticket) => Sent::Accepted(ticket),
        Err(SendError::Full(..)) => Sent::Full,
        Err(SendError::OutOfOrder(..)) => Sent::OutOfOrder,
        Err(other) => panic!("unexpected {other:?}"),
    }
}

/// O5 and O7: the stale retry of the owed 5 races a revoke and a refusal
/// of 9 in the new life (see O5), on a tracker of capacity 1 whose
/// offsets `off` makes.
fn stale_owed_vs_revoke_and_takeover<O, M>(
    tracker: Arc<Tracker<&'static str, O, M>>,
    off: fn(u64) -> O,
) where
    O: Clone + Send + Sync + std::fmt::Debug + 'static,
    M: inflight::mode::Mode + 'static,
{
    let send = |tracker: &Tracker<&'static str, O, M>, n: u64| outcome(tracker.send("p", off(n)));
    let one = tracker.send("p", off(1)).unwrap();
    assert!(matches!(send(&tracker, 5), Sent::Full));
    tracker.ack(one).unwrap();
    let t2 = tracker.clone();
    let stale = thread::spawn(move || outcome(t2.send("p", off(5))));
    let _ = tracker.revoke(&"p");
    let nine = send(&tracker, 9);
    let five = stale.join().unwrap();
    if matches!(nine, Sent::Full) {
        // 9 is owed in the new life, whatever became of 5.
        assert!(
            matches!(send(&tracker, 10), Sent::OutOfOrder),
            "the new life's debt of 9 was lost (5: {five:?})"
        );
    }
    if let Sent::Accepted(five) = five {
        let _ = tracker.ack(five); // `Revoked` if sent in the ended life
    }
    match nine {
        Sent::Accepted(nine) => tracker.ack(nine).unwrap(),
        Sent::Full => {
            let Sent::Accepted(nine) = send(&tracker, 9) else {
                panic!("the owed 9 refused with the permit free");
            };
            tracker.ack(nine).unwrap();
        }
        // 5 linked (or owed) first in the new life.
        Sent::OutOfOrder => {}
    }
    assert_eq!(tracker.in_flight(), 0);
}

/// O2. Two sends of one partition (1 and 2) are refused at capacity at
/// once: exactly one of them is owed (`Full`), the other refused for order
/// (`OutOfOrder`), whichever recorded its debt first; the claim's wait is
/// exercised when both try to owe. Mutant `owed_forgotten` fails it too
/// (both `Full`).
#[test]
fn two_refusals_of_one_partition_owe_one_offset() {
    run_model("two_refusals_of_one_partition_owe_one_offset", || {
        let tracker = bounded();
        let zero = tracker.send("p", seq(0)).unwrap();
        let t2 = tracker.clone();
        let other = thread::spawn(move || send(&t2, 2));
        let one = send(&tracker, 1);
        let two = other.join().unwrap();
        let owed = match (one, two) {
            (Sent::Full, Sent::OutOfOrder) => 1,
            (Sent::OutOfOrder, Sent::Full) => 2,
            (one, two) => panic!("1: {one:?}, 2: {two:?}"),
        };
        tracker.ack(zero).unwrap();
        // The other offset is still refused; the owed one goes through.
        assert!(matches!(send(&tracker, 3 - owed), Sent::OutOfOrder));
        let Sent::Accepted(ticket) = send(&tracker, owed) else {
            panic!("the owed offset refused with the permit free");
        };
        tracker.ack(ticket).unwrap();
    });
}

/// O3. A `send_timeout` refused for the metadata budget waits for it: the
/// partition's budget (3 characters) is full with record 0 in flight,
/// and another thread acks 0. The wait ends in a send (a lost wake-up is
/// a loom deadlock), and the offset it waits with is the owed one, which
/// the debt accepts.
#[test]
fn send_timeout_at_the_budget_vs_ack() {
    run_model("send_timeout_at_the_budget_vs_ack", || {
        let tracker: Arc<T> = Arc::new(Tracker::builder().progress(3).build());
        let zero = tracker.send("p", seq(0)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(zero).unwrap());
        let one = tracker
            .send_timeout("p", seq(1), FOREVER)
            .expect("the ack freed the budget");
        acker.join().unwrap();
        tracker.ack(one).unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
}

// ---- Watermark trackers (review 4, item 7) ----------------------------------

/// A watermark tracker keeps no order: the debt is told by the offset's
/// key (its hash), and only the owed offset is accepted while it stands.
type W = inflight::WatermarkTracker<&'static str, u64>;

fn watermarked() -> Arc<W> {
    Arc::new(Tracker::builder().capacity(1).watermarks().build())
}

fn send_w(tracker: &W, offset: u64) -> Sent {
    match tracker.send("p", offset) {
        Ok(ticket) => Sent::Accepted(ticket),
        Err(SendError::Full(..)) => Sent::Full,
        Err(SendError::OutOfOrder(..)) => Sent::OutOfOrder,
        Err(other) => panic!("unexpected {other:?}"),
    }
}

/// O6. Offset 5 of p is refused at capacity (owed) while another thread
/// acks the record holding the permit and then sends 6. A send of 6 that
/// begins after the refusal returned (the main thread says so through a
/// flag) is refused for order: the debt, recorded before it, is seen. The
/// watermark never passes 5 unsent: once 5 is sent and acked, it is what
/// `committable` reports last. Mutant `unowed_look` (a send never sees a
/// debt) is caught here.
#[test]
fn watermark_debt_vs_ack_and_a_later_send() {
    run_model("watermark_debt_vs_ack_and_a_later_send", || {
        use loom::sync::atomic::{AtomicBool, Ordering};
        let tracker = watermarked();
        let zero = tracker.send("p", 0).unwrap();
        let owes = Arc::new(AtomicBool::new(false));
        let (t2, owes2) = (tracker.clone(), owes.clone());
        let other = thread::spawn(move || {
            t2.ack(zero).unwrap();
            // Acquire: after the refusal, and so after the debt.
            let after_the_debt = owes2.load(Ordering::Acquire);
            let six = send_w(&t2, 6);
            if after_the_debt {
                assert!(
                    matches!(six, Sent::OutOfOrder),
                    "6 after the debt of 5: {six:?}"
                );
            }
            six
        });
        let five = send_w(&tracker, 5);
        if matches!(five, Sent::Full) {
            // Release: the refusal (and its debt) before the flag.
            owes.store(true, Ordering::Release);
        }
        let six = other.join().unwrap();
        match (five, six) {
            (Sent::Accepted(five), six) => {
                tracker.ack(five).unwrap();
                if let Sent::Accepted(six) = six {
                    tracker.ack(six).unwrap();
                }
            }
            (Sent::Full, six) => {
                // 6 linked before the debt, or was refused for it.
                if let Sent::Accepted(six) = six {
                    tracker.ack(six).unwrap();
                }
                assert!(matches!(send_w(&tracker, 7), Sent::OutOfOrder));
                let Sent::Accepted(five) = send_w(&tracker, 5) else {
                    panic!("the owed 5 refused with the permit free");
                };
                tracker.ack(five).unwrap();
                assert_eq!(tracker.committable().get("p"), Some(&5));
            }
            // 6 was refused first (the send of 5 held the permit before it
            // backed out): 6 is owed, and 5 refused for it.
            (Sent::OutOfOrder, Sent::Full) => {
                assert!(matches!(send_w(&tracker, 7), Sent::OutOfOrder));
                let Sent::Accepted(six) = send_w(&tracker, 6) else {
                    panic!("the owed 6 refused with the permit free");
                };
                tracker.ack(six).unwrap();
                assert_eq!(tracker.committable().get("p"), Some(&6));
            }
            (five, six) => panic!("5: {five:?}, 6: {six:?}"),
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// O7. O5 on a watermark tracker: the stale retry of the owed 5 races a
/// revoke and a refusal of 9 in the new life, which takes the ended
/// life's debt over at the same tail record. The new debt is never lost
/// (10 is refused while 9 is owed), and the claim is always released.
#[test]
fn watermark_stale_owed_send_vs_revoke_and_takeover() {
    run_model("watermark_stale_owed_send_vs_revoke_and_takeover", || {
        let tracker = watermarked();
        stale_owed_vs_revoke_and_takeover(tracker.clone(), |n| n);
        // The claim is free: a refusal owes again.
        let held = tracker.send("q", 1).unwrap();
        assert!(matches!(
            send_w(&tracker, 11),
            Sent::Full | Sent::OutOfOrder
        ));
        tracker.ack(held).unwrap();
    });
}

/// O8 (review 5, F1). The ABA a tail word without a tag allowed on a
/// watermark tracker: 3 is owed in life 1 at record b's slot; after a
/// revoke, a sender of life 2 (4) reads that ended debt and is preempted
/// before its CAS, which would clear it; meanwhile 10 pays it, is acked
/// and passed, 11 reuses b's slot, and 12 is refused and owed there: the
/// same slot, the flag, epoch 0. The stale CAS must fail (the word carries
/// the slot's new tag), so 13 is refused while 12 is owed. Mutant
/// `tagless_tail` (no tag in the word) is caught here.
#[test]
fn a_stale_payer_never_clears_a_debt_at_a_reused_tail_slot() {
    common::run_model_bounded(
        "a_stale_payer_never_clears_a_debt_at_a_reused_tail_slot",
        2,
        || {
            let tracker: Arc<W> = Arc::new(Tracker::builder().capacity(2).watermarks().build());
            let a = tracker.send("p", 1).unwrap();
            let _b = tracker.send("p", 2).unwrap();
            assert!(matches!(send_w(&tracker, 3), Sent::Full));
            tracker.ack(a).unwrap();
            let _ = tracker.revoke(&"p");
            let t2 = tracker.clone();
            let other = thread::spawn(move || {
                if let Sent::Accepted(t) = send_w(&t2, 4) {
                    let _ = t2.ack(t);
                }
            });
            if let Sent::Accepted(ten) = send_w(&tracker, 10) {
                let _ = tracker.ack(ten);
            }
            let _eleven = send_w(&tracker, 11);
            let twelve = send_w(&tracker, 12);
            other.join().unwrap();
            if matches!(twelve, Sent::Full) {
                let thirteen = send_w(&tracker, 13);
                assert!(
                    matches!(thirteen, Sent::OutOfOrder),
                    "12 is owed, yet 13 was {thirteen:?}"
                );
            }
        },
    );
}

/// O9 (review 5, F3). R4 on a watermark tracker without progress: a
/// `drain_partition` after a send is not `Ok` while a record sent
/// concurrently and linked ahead of it is unacked: a record is counted in
/// `sent` before its linking CAS. Mutant `counted_after_link` is caught
/// here.
#[test]
fn drain_partition_vs_concurrent_send_on_a_watermark_tracker() {
    run_model(
        "drain_partition_vs_concurrent_send_on_a_watermark_tracker",
        || {
            let tracker: Arc<W> = Arc::new(Tracker::builder().watermarks().build());
            let zero = tracker.send("p", 0).unwrap();
            tracker.ack(zero).unwrap();
            let t2 = tracker.clone();
            let drainer = thread::spawn(move || {
                let two = t2.send("p", 2).unwrap();
                assert!(
                    t2.drain_partition(&"p", Duration::ZERO).is_err(),
                    "drained while a record sent before is unacked"
                );
                t2.ack(two).unwrap();
            });
            if let Ok(one) = tracker.send("p", 1) {
                tracker.ack(one).unwrap();
            }
            drainer.join().unwrap();
        },
    );
}
