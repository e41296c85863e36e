//! Loom models of progress trackers (`Builder::progress`): acks racing
//! `progress()`, two senders of one partition racing for its order, and a
//! failure racing an ack behind it (progress survives a failure).
//!
//! Offsets here are [`Seq`], a loom-tracked `Arc<u64>` with a position, so
//! that leaks and double drops are still reported.
#![cfg(loom)]

use inflight::{Progress, SendError, SeqOffset, Tracker};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::collections::HashMap;

mod common;
use common::{run_model, run_model_bounded};

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

fn progress_tracker() -> Arc<T> {
    Arc::new(Tracker::builder().progress(4096).build())
}

/// The latest progress of `p` after folding in a `progress()` call's map.
fn fold(latest: &mut Option<Progress>, mut reported: HashMap<&'static str, Progress>) {
    if let Some(p) = reported.remove("p") {
        *latest = Some(p);
    }
}

/// P1. An ack of a record past the first gap races `progress()`: offsets
/// 0, 1, 2 are in flight and another thread acks 1. The call reports 1 as
/// done only if the ack started (never done before acked), never reports
/// 0 or 2 as done, and `next` stays 0; after the ack, a later call reports
/// 1 as done (nothing lost).
#[test]
fn ack_vs_progress_never_done_before_acked() {
    run_model("ack_vs_progress_never_done_before_acked", || {
        let tracker = progress_tracker();
        let _zero = tracker.send("p", seq(0)).unwrap();
        let one = tracker.send("p", seq(1)).unwrap();
        let _two = tracker.send("p", seq(2)).unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let (t2, s2) = (tracker.clone(), started.clone());
        let acker = thread::spawn(move || {
            // Release: a report of 1 as done implies this store.
            s2.store(true, Ordering::Release);
            t2.ack(one).unwrap();
        });
        let mut latest = None;
        fold(&mut latest, tracker.progress());
        let during = latest.clone().expect("p has records");
        // Acquire: pairs with the acker's store, through the ack.
        let ack_started = started.load(Ordering::Acquire);
        assert_eq!(during.next(), 0);
        assert!(!during.is_done(0) && !during.is_done(2));
        if during.is_done(1) {
            assert!(ack_started, "1 reported done before its ack: {during:?}");
        }
        acker.join().unwrap();
        fold(&mut latest, tracker.progress());
        let after = latest.unwrap();
        assert_eq!(after.next(), 0);
        assert!(after.is_done(1) && !after.is_done(2), "lost: {after:?}");
    });
}

/// P2. Two acks of one partition race a `progress()` call: offsets 0, 1, 2
/// are in flight; one thread acks 0 (the head: the watermark moves), the
/// other acks 2 (past the gap). Whatever the call sees, each offset it
/// reports done was acked (its ack started), `next` never moves back, and
/// after both acks the progress is `next` 1 with 2 done.
#[test]
fn two_acks_vs_progress() {
    run_model("two_acks_vs_progress", || {
        let tracker = progress_tracker();
        let zero = tracker.send("p", seq(0)).unwrap();
        let _one = tracker.send("p", seq(1)).unwrap();
        let two = tracker.send("p", seq(2)).unwrap();
        let flags = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let (t2, f2) = (tracker.clone(), flags.clone());
        let head = thread::spawn(move || {
            f2[0].store(true, Ordering::Release);
            t2.ack(zero).unwrap();
        });
        let (t3, f3) = (tracker.clone(), flags.clone());
        let past = thread::spawn(move || {
            f3[1].store(true, Ordering::Release);
            t3.ack(two).unwrap();
        });
        let mut latest = None;
        fold(&mut latest, tracker.progress());
        let during = latest.clone().expect("p has records");
        let (zero_started, two_started) = (
            flags[0].load(Ordering::Acquire),
            flags[1].load(Ordering::Acquire),
        );
        assert!(!during.is_done(1), "1 was never acked: {during:?}");
        if during.is_done(0) {
            assert!(zero_started, "0 reported done before its ack");
        }
        if during.is_done(2) {
            assert!(two_started, "2 reported done before its ack");
        }
        head.join().unwrap();
        past.join().unwrap();
        fold(&mut latest, tracker.progress());
        let after = latest.unwrap();
        assert!(after.next() >= during.next(), "next moved back");
        assert_eq!(after.next(), 1);
        assert!(after.is_done(2) && !after.is_done(1), "{after:?}");
    });
}

/// P3. Two senders of one partition race for its order: offsets 5 and 6.
/// Either both are accepted, 5 first in the queue, or 6 goes first and 5
/// is refused with its record (`OutOfOrder`): never 5 queued behind 6,
/// which would let the watermark pass 5 unacked. Checked by acking 6 alone
/// first: the watermark and the progress must wait for 5 if 5 was taken.
/// Mutant `unordered_link` is caught here.
#[test]
fn two_senders_of_one_partition_race_for_its_order() {
    run_model("two_senders_of_one_partition_race_for_its_order", || {
        let tracker = progress_tracker();
        // The partition exists, so the race is about its order only.
        let first = tracker.send("p", seq(1)).unwrap();
        tracker.ack(first).unwrap();
        let _ = tracker.committable();
        let _ = tracker.progress();
        let t2 = tracker.clone();
        let five = thread::spawn(move || t2.send("p", seq(5)));
        let six = tracker.send("p", seq(6));
        let five = five.join().unwrap();
        let six = six.expect("6 is above everything sent before it");
        match five {
            Ok(five) => {
                tracker.ack(six).unwrap();
                let mut marks = tracker.committable();
                assert!(
                    marks.remove("p").is_none(),
                    "the watermark passed 5 unacked"
                );
                assert_eq!(tracker.progress()["p"].next(), 5);
                tracker.ack(five).unwrap();
                assert_eq!(*tracker.committable()["p"].0, 6);
                assert_eq!(tracker.progress()["p"].next(), 7);
            }
            Err(SendError::OutOfOrder("p", offset)) => {
                assert_eq!(*offset.0, 5, "the refused record comes back");
                tracker.ack(six).unwrap();
                assert_eq!(*tracker.committable()["p"].0, 6);
                assert_eq!(tracker.progress()["p"].next(), 7);
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// P4. A walk that loses its place: `progress()` races acks that let the
/// watermark pass the records it is reading, and a send that reuses a
/// freed slot for a new record of the partition. The walk's predecessor
/// check must send it back to the start rather than read the new record
/// as the old one's successor: whatever the call returns, an offset it
/// reports done was acked (its ack began), offset 3 (in flight) is never
/// done, and after the race the progress is `next` 3.
#[test]
fn progress_vs_acks_and_slot_reuse() {
    // Bound capped at 2: at 3 it is 650,000 executions (4 to 5 minutes);
    // at 2 it still fails at once without the walk's fence (mutant
    // `unfenced_walk`).
    run_model_bounded("progress_vs_acks_and_slot_reuse", 2, || {
        let tracker = progress_tracker();
        let zero = tracker.send("p", seq(0)).unwrap();
        let one = tracker.send("p", seq(1)).unwrap();
        let two = tracker.send("p", seq(2)).unwrap();
        tracker.ack(zero).unwrap(); // the watermark's head is now offset 0
        let flags = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let (t2, f2) = (tracker.clone(), flags.clone());
        let other = thread::spawn(move || {
            f2[0].store(true, Ordering::Release);
            t2.ack(one).unwrap(); // passes 1: offset 0's slot is freed
            f2[1].store(true, Ordering::Release);
            t2.ack(two).unwrap();
            t2.send("p", seq(3)).unwrap() // may reuse offset 0's slot
        });
        let mut latest = None;
        fold(&mut latest, tracker.progress());
        let (one_started, two_started) = (
            flags[0].load(Ordering::Acquire),
            flags[1].load(Ordering::Acquire),
        );
        if let Some(during) = &latest {
            assert!(!during.is_done(3), "3 is in flight: {during:?}");
            if during.is_done(1) || during.next() > 1 {
                assert!(one_started, "1 reported done before its ack: {during:?}");
            }
            if during.is_done(2) || during.next() > 2 {
                assert!(two_started, "2 reported done before its ack: {during:?}");
            }
        }
        let three = other.join().unwrap();
        fold(&mut latest, tracker.progress());
        let after = latest.clone().unwrap();
        assert_eq!(after.next(), 3, "{after:?}");
        tracker.ack(three).unwrap();
        fold(&mut latest, tracker.progress());
        assert_eq!(latest.unwrap().next(), 4);
    });
}

/// P5. Progress survives a failure: offsets 0, 1, 2 are sent and 0 acked;
/// one thread fails 1 while another acks 2, behind it, and `progress()`
/// runs beside both. A failed offset is never reported done, 2 only once
/// its ack began, and `next` never passes 1. After both, the latest
/// progress is `next` 1 with 2 done: the advance passed the failure and 2
/// without forgetting 2. A record sent and acked after that is added.
/// Mutant `progress_forgets_after_failure` (the advance keeps nothing past
/// a failure, so the walk reports nothing beyond it) is caught here.
#[test]
fn fail_vs_ack_behind_it_and_progress() {
    run_model("fail_vs_ack_behind_it_and_progress", || {
        let tracker = progress_tracker();
        let zero = tracker.send("p", seq(0)).unwrap();
        let one = tracker.send("p", seq(1)).unwrap();
        let two = tracker.send("p", seq(2)).unwrap();
        tracker.ack(zero).unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let t2 = tracker.clone();
        let failer = thread::spawn(move || t2.fail(one).unwrap());
        let (t3, s3) = (tracker.clone(), started.clone());
        let acker = thread::spawn(move || {
            // Release: a report of 2 as done implies this store.
            s3.store(true, Ordering::Release);
            t3.ack(two).unwrap();
        });
        let mut latest = None;
        fold(&mut latest, tracker.progress());
        // Acquire: pairs with the acker's store, through the ack.
        let two_started = started.load(Ordering::Acquire);
        if let Some(during) = &latest {
            assert!(during.next() <= 1, "next passed unacked 1: {during:?}");
            assert!(!during.is_done(1), "failed 1 reported done: {during:?}");
            if during.is_done(2) {
                assert!(two_started, "2 reported done before its ack: {during:?}");
            }
        }
        failer.join().unwrap();
        acker.join().unwrap();
        fold(&mut latest, tracker.progress());
        let after = latest.clone().unwrap();
        assert_eq!(after.next(), 1, "{after:?}");
        assert!(!after.is_done(1), "failed 1 reported done: {after:?}");
        assert!(
            after.is_done(2),
            "2, acked behind the failure, forgotten: {after:?}"
        );
        let three = tracker.send("p", seq(3)).unwrap();
        tracker.ack(three).unwrap();
        fold(&mut latest, tracker.progress());
        let later = latest.unwrap();
        assert_eq!(later.next(), 1);
        assert!(
            !later.is_done(1) && later.is_done(2) && later.is_done(3),
            "{later:?}"
        );
        // The watermark stays below the failure.
        assert_eq!(*tracker.committable()["p"].0, 0);
        assert!(tracker.committable().is_empty());
    });
}

/// P6. A walk of what a failure kept races the revoke that lets it go:
/// offset 0 of `p` failed, 1 and 2 acked behind it (kept for the walk);
/// another thread revokes `p` (the records kept are let go, front to
/// back), then sends and acks offset 7 of `q`, which may reuse their
/// slots. `progress()` beside it reports, for `p`, only its ended life's
/// progress (`next` 0, 1 and 2 done) or nothing past the failure; never
/// the reused slot's record as `p`'s.
#[test]
fn progress_of_a_kept_failure_vs_revoke_and_slot_reuse() {
    run_model_bounded(
        "progress_of_a_kept_failure_vs_revoke_and_slot_reuse",
        2,
        || {
            let tracker = progress_tracker();
            let zero = tracker.send("p", seq(0)).unwrap();
            let one = tracker.send("p", seq(1)).unwrap();
            let two = tracker.send("p", seq(2)).unwrap();
            tracker.fail(zero).unwrap();
            tracker.ack(one).unwrap();
            tracker.ack(two).unwrap();
            let t2 = tracker.clone();
            let other = thread::spawn(move || {
                let _ = t2.revoke("p");
                let seven = t2.send("q", seq(7)).unwrap();
                t2.ack(seven).unwrap();
            });
            if let Some(p) = tracker.progress().remove("p") {
                assert_eq!(p.next(), 0, "{p:?}");
                assert!(!p.is_done(0), "failed 0 reported done: {p:?}");
                assert!(
                    (3..=7).all(|o| !p.is_done(o)),
                    "another record read as p's: {p:?}"
                );
            }
            other.join().unwrap();
            assert!(
                tracker.progress().get("p").is_none(),
                "p's ended life reported"
            );
        },
    );
}

/// P7. A failure keeps at most `KEEP_LIMIT` records (3 under loom): offset
/// 0 of `p` failed, 1 and 2 acked behind it (kept: 0, 1, 2). Another
/// thread acks 3, whose pass goes past the bound: the life stops keeping
/// and lets its records go, front to back; it then sends and acks offset
/// 7 of `q`, which may reuse their slots. `progress()` beside it reports,
/// for `p`, `next` 0 with 0 never done and nothing of `q` read as `p`'s;
/// after both, the failed offset alone (the old behaviour), nothing past
/// it. Mutant `kept_past_bound` (the advance keeps past the bound) is
/// caught here.
#[test]
fn keep_past_the_bound_vs_progress_and_slot_reuse() {
    run_model_bounded("keep_past_the_bound_vs_progress_and_slot_reuse", 2, || {
        let tracker = progress_tracker();
        let zero = tracker.send("p", seq(0)).unwrap();
        let one = tracker.send("p", seq(1)).unwrap();
        let two = tracker.send("p", seq(2)).unwrap();
        let three = tracker.send("p", seq(3)).unwrap();
        tracker.fail(zero).unwrap();
        tracker.ack(one).unwrap();
        tracker.ack(two).unwrap();
        let t2 = tracker.clone();
        let other = thread::spawn(move || {
            t2.ack(three).unwrap();
            let seven = t2.send("q", seq(7)).unwrap();
            t2.ack(seven).unwrap();
        });
        let mut latest = None;
        fold(&mut latest, tracker.progress());
        if let Some(p) = &latest {
            assert_eq!(p.next(), 0, "{p:?}");
            assert!(!p.is_done(0), "failed 0 reported done: {p:?}");
            assert!(
                (4..=7).all(|o| !p.is_done(o)),
                "another record read as p's: {p:?}"
            );
        }
        other.join().unwrap();
        fold(&mut latest, tracker.progress());
        let after = latest.unwrap();
        assert_eq!(after.next(), 0, "{after:?}");
        assert!(
            (0..=7).all(|o| !after.is_done(o)),
            "kept past the bound: {after:?}"
        );
    });
}

/// P8 (issue 38, item 10). What a failure keeps is let go once the
/// partition is revoked, however the failure, the acks behind it and a
/// revoke race: 0 and 1 of `p` in flight; one thread fails 0 and acks 1
/// (the advance keeps 0 and 1 for `progress()`, or passes them as records
/// of an ended life), another revokes `p` meanwhile, and a send of the new
/// life follows on the first. After both, a last revoke: nothing is held
/// (`held_records` 0: no kept record, nothing unpassed).
#[test]
fn kept_records_go_after_racing_revokes() {
    run_model_bounded("kept_records_go_after_racing_revokes", 2, || {
        let tracker = progress_tracker();
        let zero = tracker.send("p", seq(0)).unwrap();
        let one = tracker.send("p", seq(1)).unwrap();
        let t2 = tracker.clone();
        let other = thread::spawn(move || {
            let _ = t2.revoke("p");
        });
        let _ = tracker.fail(zero);
        let _ = tracker.ack(one);
        if let Ok(two) = tracker.send("p", seq(2)) {
            let _ = tracker.ack(two);
        }
        other.join().unwrap();
        let _ = tracker.revoke("p");
        let stats = tracker.stats();
        assert_eq!(stats.held_records, 0, "{stats:?}");
    });
}

/// P8b. As P8, with a failure in the new life too: the revoking thread
/// sends offset 5 of the new life and fails it (a keep of the new life),
/// while the first fails 0, acks 1 and sends 2 (of whichever life it
/// reads). After both, a last revoke: nothing held.
#[test]
fn kept_records_of_two_lives_go_after_racing_revokes() {
    run_model_bounded(
        "kept_records_of_two_lives_go_after_racing_revokes",
        2,
        || {
            let tracker = progress_tracker();
            let zero = tracker.send("p", seq(0)).unwrap();
            let one = tracker.send("p", seq(1)).unwrap();
            let t2 = tracker.clone();
            let other = thread::spawn(move || {
                let _ = t2.revoke("p");
                if let Ok(five) = t2.send("p", seq(5)) {
                    let _ = t2.fail(five);
                }
            });
            let _ = tracker.fail(zero);
            let _ = tracker.ack(one);
            if let Ok(two) = tracker.send("p", seq(9)) {
                let _ = tracker.ack(two);
            }
            other.join().unwrap();
            let _ = tracker.revoke("p");
            let stats = tracker.stats();
            assert_eq!(stats.held_records, 0, "{stats:?}");
        },
    );
}
