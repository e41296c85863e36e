//! Loom models of a send that raced a revoke (R1-R4): it must not act for
//! the partition's new life, in the generation's cell (with and without a
//! seal between the two sends) or in the progress queue; and a
//! `drain_partition` of a progress tracker racing a send; and (R6) a
//! worker's `is_current` racing a revoke and the reuse of its slot. See
//! `models.rs` for how the models are written, and IMPLEMENTATION.md, "A
//! send of an ended life".
#![cfg(loom)]

use inflight::{ResolveError, SendError, Tracker};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;

use common::{off, plain, run_model, T};

/// A progress tracker of the models (a budget large enough never to
/// refuse).
type Progress = inflight::ProgressTracker<&'static str, u64>;

/// The offsets a flush begun now returns, committed.
fn flushed(tracker: &T) -> Vec<(&'static str, u64)> {
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = plain(flush.wait(Duration::ZERO).unwrap());
    flush.commit().unwrap();
    offsets
}

/// Checks the outcome of the stale candidate's send (`ticket`, offset 1)
/// against a flush: if its ack answers `Revoked` it was of the ended life,
/// and the flush reports the new life's offset 2; if it was delivered, it
/// belongs to the new life too, and the flush reports one of the two.
fn check_cell(tracker: &T, ticket: inflight::Ticket) {
    let stale = match tracker.ack(ticket) {
        Ok(()) => false,
        Err(ResolveError::Revoked) => true,
        Err(e) => panic!("unexpected {e:?}"),
    };
    let offsets = flushed(tracker);
    if stale {
        assert_eq!(offsets, vec![("p", 2)], "the new life's offset is lost");
    } else {
        assert!(
            offsets == vec![("p", 1)] || offsets == vec![("p", 2)],
            "{offsets:?}"
        );
    }
    assert_eq!(tracker.in_flight(), 0);
}

/// The race of R1 and R2: a send (offset 1) on another thread, here a
/// revoke of its partition and a send of the new life (offset 2, acked),
/// then with `seal` an aborted flush; then [`check_cell`].
fn stale_send_race(seal: bool) {
    let tracker: Arc<T> = Arc::new(Tracker::new());
    let zero = tracker.send("p", off(0)).unwrap();
    tracker.ack(zero).unwrap();
    let t2 = tracker.clone();
    let sender = thread::spawn(move || t2.send("p", off(1)).unwrap());
    let _ = tracker.revoke("p");
    let new = tracker.send("p", off(2)).unwrap();
    tracker.ack(new).unwrap();
    if seal {
        drop(tracker.begin_flush().unwrap()); // seals, then aborts
    }
    let ticket = sender.join().unwrap();
    check_cell(&tracker, ticket);
}

/// R1. A send (offset 1) races a revoke of its partition followed by a
/// send of the new life (offset 2, acked). If the first send read the
/// ended life, its install must not displace the new life's record from
/// the generation's cell: a flush reports 2. Mutant
/// `stale_displaces_new` is caught here.
#[test]
fn stale_send_vs_revoke_and_new_send() {
    run_model("stale_send_vs_revoke_and_new_send", || {
        stale_send_race(false)
    });
}

/// R2. R1 with a seal (an aborted flush) after the new life's send: the
/// stale record may enter the later generation, and the flush that covers
/// both must keep the new life's record from the earlier one. Mutant
/// `stale_displaces_new` (whose fold also ignores lives) is caught here.
#[test]
fn stale_send_vs_revoke_seal_and_new_send() {
    run_model("stale_send_vs_revoke_seal_and_new_send", || {
        stale_send_race(true)
    });
}

/// R3. On a progress tracker, a send (offset 5) races a revoke and a send
/// of the new life (offset 10). Whatever the first send's fate (released
/// in the ended life, accepted in the new life before 10, or refused as
/// out of order after 10 in the new life), a later send of 7 is out of
/// order: the new life's 10 precedes it. Mutant `stale_links_behind_new`
/// (the stale record queues behind 10, and 7 takes it for its
/// predecessor) is caught here.
#[test]
fn stale_send_vs_revoke_and_new_send_in_order() {
    run_model("stale_send_vs_revoke_and_new_send_in_order", || {
        let tracker: Arc<Progress> = Arc::new(Tracker::builder().progress(4096).build());
        let zero = tracker.send("p", 0).unwrap();
        tracker.ack(zero).unwrap();
        let t2 = tracker.clone();
        let sender = thread::spawn(move || match t2.send("p", 5) {
            Ok(ticket) => Some(t2.ack(ticket)),
            Err(SendError::OutOfOrder("p", 5)) => None,
            Err(e) => panic!("unexpected {e:?}"),
        });
        let _ = tracker.revoke("p");
        let new = tracker.send("p", 10).unwrap();
        let stale = sender.join().unwrap();
        assert!(
            matches!(tracker.send("p", 7), Err(SendError::OutOfOrder("p", 7))),
            "7 after 10 in one life (the first send: {stale:?})"
        );
        tracker.ack(new).unwrap();
        assert_eq!(tracker.progress()["p"].next(), 11);
    });
}

/// R4. On a progress tracker, two sends of one partition race (1 here,
/// then acked here; 2 on another thread), and that thread's
/// `drain_partition` begins after its send of 2 returned, while 2 is
/// unacked: the drain must not return `Ok`, whichever order the two sends
/// queued and counted in. Mutant `sent_after_link` (the drain trusts the
/// `sent` count alone, which the sender of 1 may not have bumped yet
/// although it queued first) is caught here.
#[test]
fn drain_partition_vs_concurrent_send_on_a_progress_tracker() {
    run_model(
        "drain_partition_vs_concurrent_send_on_a_progress_tracker",
        || {
            let tracker: Arc<Progress> = Arc::new(Tracker::builder().progress(4096).build());
            let zero = tracker.send("p", 0).unwrap();
            tracker.ack(zero).unwrap();
            let t2 = tracker.clone();
            let drainer = thread::spawn(move || {
                let two = t2.send("p", 2).unwrap();
                assert!(
                    t2.drain_partition("p", Duration::ZERO).is_err(),
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

/// R5. A typed ticket of partition p is acked on another thread while p
/// is revoked, restarted (its new life's record passes the released one,
/// which frees its slot) and the slot is reused by a record of q that is
/// acked and marked (which ends the slot's memory of the revoked tag). The
/// ack is delivered (`Ok`, it won the race) or answers `Revoked`, never
/// `AlreadyResolved`: a typed ticket is never resolved twice. Mutant
/// `revoked_reuse` (a typed ticket answers as a raw one) is caught here.
#[test]
fn revoked_typed_ticket_vs_slot_reuse() {
    run_model("revoked_typed_ticket_vs_slot_reuse", || {
        let tracker = common::watermarked();
        let ticket = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(ticket));
        let _ = tracker.revoke("p");
        let restart = tracker.send("p", off(2)).unwrap();
        tracker.ack(restart).unwrap();
        let reuse = tracker.send("q", off(3)).unwrap();
        tracker.ack(reuse).unwrap();
        let _ = tracker.committable();
        let acked = acker.join().unwrap();
        assert!(
            matches!(acked, Ok(()) | Err(ResolveError::Revoked)),
            "{acked:?}"
        );
    });
}

/// The race of R6 and R6b: a typed ticket of p, checked with `is_current`
/// while another thread revokes p and `restart`s it (the new life's sends,
/// which may reuse the record's slot: the revoke freed it on that thread,
/// whose next send takes it; the new tickets name the same slot, with the
/// next tag). Once the revoke is seen to have returned, the ticket is not
/// current, however far the reuse has gone; the new life's tickets are;
/// the old one is given up with `Revoked`.
fn is_current_race(restart: fn(&I) -> Vec<inflight::Ticket>) {
    use loom::sync::atomic::{AtomicBool, Ordering};
    // Inline: nothing holds a released record's slot, so it is free at
    // once.
    let tracker = Arc::new(
        Tracker::<&'static str, u64, _>::builder()
            .inline_offsets()
            .build(),
    );
    let ticket = tracker.send("p", 1).unwrap();
    let revoked = Arc::new(AtomicBool::new(false));
    let (t2, flag) = (tracker.clone(), revoked.clone());
    let other = thread::spawn(move || {
        assert_eq!(t2.revoke("p").released, 1);
        // Release: the revoke's work before the flag.
        flag.store(true, Ordering::Release);
        restart(&t2)
    });
    // Any answer while the revoke runs; false once it has returned.
    let _ = tracker.is_current(&ticket);
    // Acquire: pairs with the flag's Release store.
    if revoked.load(Ordering::Acquire) {
        assert!(!tracker.is_current(&ticket), "revoked, yet current");
    }
    let restarted = other.join().unwrap();
    assert!(!tracker.is_current(&ticket));
    assert!(restarted.iter().all(|t| tracker.is_current(t)));
    assert_eq!(tracker.fail(ticket), Err(ResolveError::Revoked));
    tracker.ack_all(restarted).unwrap();
    assert_eq!(tracker.in_flight(), 0);
}

/// An inline barrier tracker of the models' partitions, with `u64` offsets.
type I = Tracker<&'static str, u64, inflight::mode::Inline>;

/// R6. `is_current` races a revoke and a send of the new life that reuses
/// the record's slot: the check reads a slot it does not hold, and drops
/// what it read if the slot moved on.
#[test]
fn is_current_vs_revoke_and_slot_reuse() {
    run_model("is_current_vs_revoke_and_slot_reuse", || {
        is_current_race(|t| vec![t.send("p", 1).unwrap()])
    });
}

/// R6b. R6 with the new life's records sent as a batch on a barrier
/// tracker, whose records but the last are only filled (no stamp) before
/// their publish: the first of the two reuses the released record's slot.
/// The batch's Release fence before each fill keeps the check from taking
/// the reused slot's fields for the ticket's.
#[test]
fn is_current_vs_revoke_and_batch_reuse() {
    run_model("is_current_vs_revoke_and_batch_reuse", || {
        is_current_race(|t| {
            let mut tickets = Vec::new();
            t.send_batch(&"p", [1, 2], &mut tickets).unwrap();
            tickets
        })
    });
}
