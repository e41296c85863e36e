//! Loom models of a partition's lifecycle (24-29c): revokes racing acks,
//! sends, `committable()` and a waiting flush, a failed partition's
//! restart, a send waiting for room, and the capacity's permits. See `models.rs` for how the
//! models are written.
#![cfg(loom)]

use inflight::{ResolveError, Tracker};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;

use common::{off, plain, run_model, watermarked, FOREVER, T};

/// 24. R: an `ack` and a `revoke` race for the same record, and exactly one
/// wins its compare-and-swap from `LIVE`: either the ack is delivered
/// (`Ok`) and the revoke released nothing, or the revoke released the
/// record (`released == 1`) and the ack answers `Revoked`. Never both,
/// never neither; nothing is in flight afterwards. And since the revoke
/// ended the partition's life either way, a flush begun after both returns
/// no offset of it, even when the ack won. Mutant `ack_after_revoke` (a
/// released record's ticket still resolves) is caught here.
#[test]
fn revoke_vs_ack_of_the_same_record() {
    run_model("revoke_vs_ack_of_the_same_record", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let ticket = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(ticket));
        let revoked = tracker.revoke("p");
        let acked = acker.join().unwrap();
        match acked {
            Ok(()) => assert_eq!(revoked.released, 0, "delivered and released"),
            Err(ResolveError::Revoked) => {
                assert_eq!(revoked.released, 1, "neither delivered nor released")
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert!(revoked.committable.is_none(), "no watermarks");
        assert_eq!(tracker.in_flight(), 0);
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(
            plain(flush.wait(Duration::ZERO).unwrap()),
            vec![],
            "an offset of the ended life (ack {acked:?})"
        );
        flush.commit().unwrap();
    });
}

/// 25. R: a send races a revoke of its partition (which exists already, so
/// the race is about lives, not partition creation). The send returns a
/// ticket either way. Either its record belongs to the ended life and is
/// released, by the revoke's scan or by the send itself (which then counts
/// it in `released_late`, collected by this revoke or the next): its ack
/// answers `Revoked`, the two revokes count it exactly once, and no flush
/// reports it. Or it belongs to the new life: its ack is delivered, no
/// revoke counts it, and a flush reports its offset. Never both, never
/// neither; nothing is in flight at the end.
#[test]
fn revoke_vs_send_to_the_same_partition() {
    run_model("revoke_vs_send_to_the_same_partition", || {
        common::revoke_vs_send(Tracker::new(), off, |o| **o)
    });
}

/// 25b. R: model 25 with the send reusing a freed slot (one below the
/// slots the revoke scans) rather than taking a never-used one: the
/// send's slot is written (its stale offset dropped, its next tag
/// prepared) while the revoke's scan may touch it. Same guarantee: the
/// record is released exactly once (its ack answers `Revoked`, and the
/// two revokes count it once), or it belongs to the new life (delivered,
/// counted by no revoke, reported by a flush); nothing is in flight at the
/// end. (The send's writes to a reused slot's state word, the stale
/// offset's clear and the prepare, are read-modify-writes: a store there
/// would end the release sequence the scan's `touch` heads, and loom 0.7
/// would also let it land inside the `touch`, tokio-rs/loom#254.)
#[test]
fn revoke_vs_send_reusing_a_freed_slot() {
    run_model("revoke_vs_send_reusing_a_freed_slot", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let a = tracker.send("p", off(0)).unwrap();
        let b = tracker.send("p", off(1)).unwrap(); // takes over a's hold
        tracker.ack(a).unwrap(); // frees a's slot onto this thread's list
        tracker.ack(b).unwrap();
        let t2 = tracker.clone();
        let revoker = thread::spawn(move || t2.revoke("p"));
        let ticket = tracker.send("p", off(2)).unwrap(); // reuses a's slot
        let first = revoker.join().unwrap();
        common::check_revoke_outcome(&tracker, first.released, ticket, 2, |o| **o);
    });
}

/// 26. R + W: a record of `p` was acked (so its advance is published as
/// `p`'s mark) before a `committable()` call races a revoke of `p`: the
/// mark is a hand-over of its own, so exactly one of them returns the
/// offset (the call's map, or `Revoked::committable`), never both, never
/// neither; a later `committable()` returns nothing.
#[test]
fn revoke_vs_committable_hands_the_last_advance_out_once() {
    run_model(
        "revoke_vs_committable_hands_the_last_advance_out_once",
        || {
            let tracker = watermarked();
            let ticket = tracker.send("p", off(1)).unwrap();
            tracker.ack(ticket).unwrap();
            let t2 = tracker.clone();
            let taker = thread::spawn(move || plain(t2.committable()));
            let revoked = tracker.revoke("p");
            let taken = taker.join().unwrap();
            assert_eq!(revoked.released, 0);
            let by_revoke = revoked.committable.map(|o| *o);
            match (taken.as_slice(), by_revoke) {
                ([("p", 1)], None) | ([], Some(1)) => {}
                other => panic!("the advance was returned twice or lost: {other:?}"),
            }
            assert!(plain(tracker.committable()).is_empty(), "returned again");
            assert_eq!(tracker.in_flight(), 0);
        },
    );
}

/// 27. R: a flush covers an unacked record of `p` and an acked record of
/// `q`, and waits (for ever) while another thread revokes `p`. The
/// released record no longer counts in its generation, and its release
/// wakes the flusher: the wait returns `Ok` with `q`'s offset and none of
/// `p` (whose life ended). A lost wake-up, or a released record still
/// counted, is a loom deadlock: mutant `revoke_keeps_pending` is caught
/// here.
#[test]
fn revoke_vs_waiting_barrier_flush() {
    run_model("revoke_vs_waiting_barrier_flush", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let stuck = tracker.send("p", off(1)).unwrap();
        let done = tracker.send("q", off(2)).unwrap();
        tracker.ack(done).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let revoker = thread::spawn(move || t2.revoke("p").released);
        assert_eq!(
            plain(flush.wait(FOREVER).unwrap()),
            vec![("q", 2)],
            "the flush reports q, and nothing of p's ended life"
        );
        flush.commit().unwrap();
        assert_eq!(revoker.join().unwrap(), 1, "the revoke released p's record");
        assert_eq!(tracker.ack(stuck), Err(ResolveError::Revoked));
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 28. R + W: a revoke restarts a failed partition. `p`'s record failed
/// (its watermark is stopped); the revoke forgives the failure; then a new
/// record of `p` is sent and acked on one thread while another calls
/// `committable()`. The watermark moves again: the new record's offset is
/// returned exactly once, by the racing call or by the one after the join,
/// and `p` is no longer reported stopped.
#[test]
fn revoke_of_a_failed_partition_then_send_and_ack() {
    run_model("revoke_of_a_failed_partition_then_send_and_ack", || {
        let tracker = watermarked();
        let doomed = tracker.send("p", off(1)).unwrap();
        tracker.fail(doomed).unwrap();
        let stopped = tracker.committable_with_stats();
        assert!(stopped.offsets.is_empty());
        assert_eq!(stopped.stopped, vec!["p"]);
        let revoked = tracker.revoke("p");
        assert_eq!(revoked.released, 0, "the failed record was resolved");
        assert!(
            revoked.committable.is_none(),
            "a failed record is never marked"
        );
        let t2 = tracker.clone();
        let restarted = thread::spawn(move || {
            let ticket = t2.send("p", off(2)).unwrap();
            t2.ack(ticket).unwrap();
        });
        let mut all = plain(tracker.committable());
        restarted.join().unwrap();
        let after = tracker.committable_with_stats();
        assert!(after.stopped.is_empty(), "stopped: {:?}", after.stopped);
        all.extend(plain(after.offsets));
        assert_eq!(all, vec![("p", 2)], "the new life's advance, exactly once");
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 29. Waiting for room: on a tracker of capacity 1 with one record in
/// flight, `send_timeout` (with no clock, only a wake-up can end its wait)
/// races the ack of that record on another thread, whose permit stays
/// spare on that thread's shard. The ack's give-back either sees the
/// sender's flag on its shard (`WANTED`) and wakes it, or comes first and
/// the sender's sweep or flagging finds the spare permit: the send returns
/// `Ok`, and the bound holds. A lost wake-up is a loom deadlock: mutant
/// `lost_room_wakeup` is caught here.
#[test]
fn send_timeout_vs_ack_makes_room() {
    run_model("send_timeout_vs_ack_makes_room", || {
        let tracker: Arc<T> = Arc::new(Tracker::with_capacity(1));
        let first = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(first).unwrap());
        let second = tracker
            .send_timeout("p", off(2), FOREVER)
            .expect("the ack made room");
        acker.join().unwrap();
        assert_eq!(tracker.in_flight(), 1);
        tracker.ack(second).unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 29b. The bound is exact across threads: on a tracker of capacity 1, a
/// thread sends and acks a record (its permit stays spare on that thread's
/// shard) while the main thread sends too. The main thread's send may be
/// refused only while the other thread's record could still be in flight:
/// once that thread's ack happened before the send, the send finds the
/// spare permit. Mutant `unswept_spares` (a full capacity count refuses
/// the send without looking at other shards' spares) is caught here.
#[test]
fn permit_freed_on_one_thread_serves_a_send_on_another() {
    run_model(
        "permit_freed_on_one_thread_serves_a_send_on_another",
        || {
            let tracker: Arc<T> = Arc::new(Tracker::with_capacity(1));
            let done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let (t2, d2) = (tracker.clone(), done.clone());
            let other = thread::spawn(move || {
                if let Ok(ticket) = t2.send("p", off(1)) {
                    t2.ack(ticket).unwrap();
                    // Release: the ack (and its give-back) before the flag.
                    d2.store(true, std::sync::atomic::Ordering::Release);
                }
            });
            // Acquire: pairs with the store above.
            let other_done = done.load(std::sync::atomic::Ordering::Acquire);
            match tracker.send("q", off(2)) {
                Ok(ticket) => tracker.ack(ticket).unwrap(),
                Err(e) => assert!(!other_done, "refused with every permit free: {e:?}"),
            }
            other.join().unwrap();
            assert_eq!(tracker.in_flight(), 0);
            let last = tracker.send("q", off(3)).expect("every permit is free");
            tracker.ack(last).unwrap();
        },
    );
}

/// 29c. No permit in transit: on a tracker of capacity 2, another thread
/// acks two records, raising a flag between the acks, while the main
/// thread sends. Once the flag is seen, the first record's permit is free
/// for the whole of the send, and the send must get a permit, however the
/// second ack's give-back interleaves with it. Found in review: a shard
/// that gave its surplus spares back to the capacity count in two steps
/// left them, in between, where no sweep looks. Mutant `spares_in_transit`
/// (that two-step give-back) is caught here.
#[test]
fn permit_freed_before_a_send_is_never_in_transit() {
    run_model("permit_freed_before_a_send_is_never_in_transit", || {
        let tracker: Arc<T> = Arc::new(Tracker::with_capacity(2));
        let done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let a = tracker.send("p", off(1)).unwrap();
        let b = tracker.send("p", off(2)).unwrap();
        let (t2, d2) = (tracker.clone(), done.clone());
        let other = thread::spawn(move || {
            t2.ack(a).unwrap();
            // Release: the first ack (and its give-back) before the flag.
            d2.store(true, std::sync::atomic::Ordering::Release);
            t2.ack(b).unwrap();
        });
        // Acquire: pairs with the store above.
        let a_acked = done.load(std::sync::atomic::Ordering::Acquire);
        match tracker.send("q", off(3)) {
            Ok(ticket) => tracker.ack(ticket).unwrap(),
            Err(e) => assert!(!a_acked, "refused with a permit free throughout: {e:?}"),
        }
        other.join().unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
}
