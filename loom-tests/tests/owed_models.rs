//! Loom models of owed offsets (issue #26 item 2): on a progress tracker,
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

type T = Tracker<&'static str, Seq>;

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

/// O1. Offset 1 is refused at capacity (owed) while another thread acks 0
/// (freeing the permit) and sends 2. If 1 was refused `Full`, 2 is never
/// accepted (it would make 1 a gap, done unprocessed); if 1 was refused
/// for order, 2 was linked or owed before it. Afterwards the debt still
/// holds: 3 is refused until the owed offset is sent, and the progress
/// never reports 1 done before its ack. Mutants `owed_forgotten` (a
/// refusal owes nothing) and `owed_unchecked` (the debt is set without
/// checking the tail it was decided against) are caught here.
#[test]
fn owed_offset_vs_higher_send_of_the_same_partition() {
    run_model("owed_offset_vs_higher_send_of_the_same_partition", || {
        let tracker = bounded();
        let zero = tracker.send("p", seq(0)).unwrap();
        let t2 = tracker.clone();
        let other = thread::spawn(move || {
            t2.ack(zero).unwrap();
            send(&t2, 2)
        });
        let one = send(&tracker, 1);
        let two = other.join().unwrap();
        match (one, two) {
            (Sent::Full, Sent::Accepted(_)) => {
                panic!("2 accepted though 1 was refused Full (owed)")
            }
            (Sent::Full, _) => {
                // 1 is owed: nothing else of p goes through.
                assert!(matches!(send(&tracker, 3), Sent::OutOfOrder));
                if let Some(progress) = tracker.progress().get("p") {
                    assert!(!progress.is_done(1), "1 done unsent: {progress:?}");
                }
                let Sent::Accepted(one) = send(&tracker, 1) else {
                    panic!("the owed offset refused with the permit free");
                };
                tracker.ack(one).unwrap();
                let Sent::Accepted(three) = send(&tracker, 3) else {
                    panic!("3 refused once 1 was sent");
                };
                tracker.ack(three).unwrap();
                assert_eq!(tracker.progress()["p"].next(), 4);
            }
            // 1 refused for order: 2 was linked first, or owed first (its
            // refusal at capacity while 1's send held the permit, before
            // 1 backed out).
            (Sent::OutOfOrder, Sent::OutOfOrder) => panic!("1 and 2 both out of order"),
            (Sent::OutOfOrder, Sent::Accepted(two)) => tracker.ack(two).unwrap(),
            (Sent::OutOfOrder, Sent::Full) => {
                assert!(matches!(send(&tracker, 3), Sent::OutOfOrder));
                let Sent::Accepted(two) = send(&tracker, 2) else {
                    panic!("the owed 2 refused with the permit free");
                };
                tracker.ack(two).unwrap();
            }
            (Sent::Accepted(one), two) => {
                // 2 refused at capacity (owed) or accepted after 1's ack:
                // never out of order.
                assert!(!matches!(two, Sent::OutOfOrder), "2 after 1: in order");
                tracker.ack(one).unwrap();
                match two {
                    Sent::Accepted(two) => tracker.ack(two).unwrap(),
                    _ => {
                        let Sent::Accepted(two) = send(&tracker, 2) else {
                            panic!("the owed 2 refused with the permit free");
                        };
                        tracker.ack(two).unwrap();
                    }
                }
            }
        }
        assert_eq!(tracker.in_flight(), 0);
    });
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
