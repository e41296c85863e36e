//! Guarantee 14 where a watermark tracker runs `O`'s `Hash` (review 4,
//! item 7): the key of an offset refused for want of room, and of a send
//! that finds its partition owing; and the partition key's `Drop`, which a
//! send that finds its partition owing runs after it publishes. Each panic
//! leaves the tracker consistent: nothing counted without a ticket, the
//! debt as it was or paid, every value dropped once.

use inflight::{Refused, SendError, Tracker};

mod panicky;
use panicky::*;

/// A watermark tracker with room for one record, holding `held` (offset
/// 1 of key 0), and owing offset 5 of key 0.
fn owing() -> (W, inflight::Ticket) {
    quiet_planned_panics();
    let tracker: W = Tracker::builder().capacity(1).watermarks().build();
    let held = send(&tracker, 0, 1);
    let refused = tracker.send(Key::new(K), Off::new(5));
    assert!(matches!(refused, Err(SendError::Full(..))), "{refused:?}");
    (tracker, held)
}

#[test]
fn a_panicking_hash_at_a_refusal_owes_nothing_and_takes_nothing() {
    quiet_planned_panics();
    let tracker: W = Tracker::builder().capacity(1).watermarks().build();
    let held = send(&tracker, 0, 1);
    arm(Act::Hash, 5);
    expect_planned_panic("hash of a refused offset", || {
        tracker.send(Key::new(K), Off::new(5))
    });
    assert_eq!(tracker.in_flight(), 1);
    tracker.ack(held).unwrap();
    // The send panicked: nothing is owed.
    let next = send(&tracker, 0, 7);
    tracker.ack(next).unwrap();
    assert_eq!(ids(&tracker.committable()), [(0, 7)]);
    assert_usable(&tracker, 8);
    assert_all_dropped(tracker);
}

#[test]
fn a_panicking_hash_of_a_send_that_finds_a_debt_takes_nothing() {
    let (tracker, held) = owing();
    tracker.ack(held).unwrap();
    arm(Act::Hash, 6);
    expect_planned_panic("hash of a send to an owing partition", || {
        tracker.send(Key::new(K), Off::new(6))
    });
    // Backed out: the permit is back, and the debt stands.
    assert_eq!(tracker.in_flight(), 0);
    assert!(matches!(
        tracker.send(Key::new(K), Off::new(7)),
        Err(SendError::OutOfOrder(..))
    ));
    let owed = send(&tracker, 0, 5);
    tracker.ack(owed).unwrap();
    assert_eq!(ids(&tracker.committable()), [(0, 5)]);
    assert_usable(&tracker, 8);
    assert_all_dropped(tracker);
}

/// On the owing path the partition key is dropped after the record is
/// published (its `OutOfOrder` needs the key until then): a panic there
/// fails the record, as on a progress tracker, so nothing waits for a
/// ticket no one holds, and its offset is never committed.
#[test]
fn a_panicking_key_drop_when_paying_a_debt_fails_the_record() {
    let (tracker, held) = owing();
    tracker.ack(held).unwrap();
    assert_eq!(ids(&tracker.committable()), [(0, 1)]);
    arm(Act::Drop, K);
    expect_planned_panic("drop of the key of the owed offset", || {
        tracker.send(Key::new(K), Off::new(5))
    });
    // The record was published and failed: the debt is paid, and the
    // partition's watermark stops before the record.
    assert_eq!(tracker.in_flight(), 0);
    assert!(tracker.committable().is_empty());
    assert_eq!(tracker.stats().stopped.len(), 1);
    let _ = tracker.revoke(&Key::new(K));
    let next = send(&tracker, 0, 6);
    tracker.ack(next).unwrap();
    assert_eq!(ids(&tracker.committable()), [(0, 6)]);
    assert_usable(&tracker, 8);
    assert_all_dropped(tracker);
}

#[test]
fn a_panicking_hash_of_a_batch_that_finds_a_debt_takes_nothing() {
    let (tracker, held) = owing();
    tracker.ack(held).unwrap();
    arm(Act::Hash, 6);
    let mut tickets = Vec::new();
    expect_planned_panic("hash of a batch's first offset", || {
        tracker.send_batch(&Key::new(K), [Off::new(6), Off::new(7)], &mut tickets)
    });
    assert!(tickets.is_empty());
    assert_eq!(tracker.in_flight(), 0);
    let err = tracker
        .send_batch(&Key::new(K), [Off::new(6)], &mut tickets)
        .unwrap_err();
    assert_eq!(err.reason, Refused::OutOfOrder);
    drop(err);
    let owed = send(&tracker, 0, 5);
    tracker.ack(owed).unwrap();
    assert_usable(&tracker, 8);
    assert_all_dropped(tracker);
}

#[test]
fn a_panicking_hash_of_a_batchs_refused_offset_backs_the_chunk_out() {
    quiet_planned_panics();
    let tracker: W = Tracker::builder().capacity(2).watermarks().build();
    let mut tickets = Vec::new();
    arm(Act::Hash, 3);
    expect_planned_panic("hash of a batch's first unsent offset", || {
        let offsets = [Off::new(1), Off::new(2), Off::new(3)];
        tracker.send_batch(&Key::new(K), offsets, &mut tickets)
    });
    // The chunk was backed out before it was published: nothing sent, and
    // nothing owed.
    assert!(tickets.is_empty());
    assert_eq!(tracker.in_flight(), 0);
    let next = send(&tracker, 0, 4);
    tracker.ack(next).unwrap();
    assert_eq!(ids(&tracker.committable()), [(0, 4)]);
    assert_usable(&tracker, 8);
    assert_all_dropped(tracker);
}
