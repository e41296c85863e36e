//! `Tracker::is_current`: whether a ticket's record is still of its
//! partition's current life, the question a worker asks before it produces
//! (so that a record a hand-off released is not produced by its old owner).
//! Every mode; the race of the check with a revoke and a reuse of the slot
//! is loom model R6 (`revoke_race_models.rs`).

#[macro_use]
mod modes;

use inflight::{ResolveError, Tracker};

#[test]
fn a_ticket_is_current_until_its_partition_is_revoked() {
    every_kind!(tracker => {
        let a = tracker.send("p", 1_u64).unwrap();
        let other = tracker.send("q", 1).unwrap();
        assert!(tracker.is_current(&a));
        assert_eq!(tracker.revoke("p").released, 1);
        assert!(!tracker.is_current(&a), "its life ended");
        assert!(tracker.is_current(&other), "another partition");
        // The partition's next life, in a slot that may be `a`'s.
        let b = tracker.send("p", 1).unwrap();
        let c = tracker.send("q", 2).unwrap();
        assert!(tracker.is_current(&b) && tracker.is_current(&c));
        assert!(!tracker.is_current(&a), "for as long as it lives");
        // Given up as the docs say: nothing counted, nothing owed.
        assert_eq!(tracker.fail(a), Err(ResolveError::Revoked));
        for ticket in [b, other, c] {
            tracker.ack(ticket).unwrap();
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// A resolved record is not current (its raw ticket may still be asked),
/// nor is an unresolved one once its partition is revoked.
#[test]
fn a_resolved_record_is_not_current() {
    let tracker = Tracker::builder().watermarks().build();
    let acked = tracker.send("p", 1_u64).unwrap().into_raw();
    let live = tracker.send("p", 2_u64).unwrap().into_raw();
    tracker.ack_raw(acked).unwrap();
    assert!(!tracker.is_current_raw(acked), "resolved");
    assert!(tracker.is_current_raw(live));
    assert_eq!(tracker.revoke("p").released, 1);
    assert!(!tracker.is_current_raw(live));
}

#[test]
fn any_raw_value_is_safe_and_foreign_tickets_are_not_current() {
    let tracker = Tracker::<&str, u64>::new();
    let other = Tracker::<&str, u64>::new();
    let mine = tracker.send("p", 1).unwrap();
    let theirs = other.send("p", 1).unwrap();
    assert!(tracker.is_current(&mine));
    assert!(!tracker.is_current(&theirs), "another tracker's");
    let raw = mine.into_raw();
    for forged in [
        0,
        1,
        u64::MAX,
        raw ^ 1,
        raw ^ (1 << 32),
        raw.wrapping_add(1 << 40),
    ] {
        assert!(!tracker.is_current_raw(forged), "{forged:#x}");
    }
    assert!(tracker.is_current_raw(raw));
    tracker.ack_raw(raw).unwrap();
    other.ack(theirs).unwrap();
}
