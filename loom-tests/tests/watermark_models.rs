//! Loom models of watermarks (18-22): acks, senders, failures and drains
//! racing `committable()`, and watermarks beside a barrier flush. See
//! `models.rs` for how the models are written.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;

use common::{off, plain, run_model, watermarked, FOREVER};

/// 18. W: acks racing `committable()`. Two records of one partition are
/// acked by two threads while the main thread takes the watermark: a
/// watermark never passes a record whose ack has not started, each advance
/// is returned once, and none is lost (the last call ends on the last
/// record). `skip_unacked` is caught here.
#[test]
fn watermark_acks_vs_committable() {
    run_model("watermark_acks_vs_committable", || {
        let tracker = watermarked();
        let first = tracker.send("p", off(1)).unwrap();
        let second = tracker.send("p", off(2)).unwrap();
        let started = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (t2, s2) = (tracker.clone(), started.clone());
        let acker = thread::spawn(move || {
            // Release: a watermark at or past record 1 implies this store.
            s2.store(true, std::sync::atomic::Ordering::Release);
            t2.ack(first).unwrap();
        });
        let t3 = tracker.clone();
        let other = thread::spawn(move || t3.ack(second).unwrap());
        let during = plain(tracker.committable());
        // Acquire: pairs with the acker's store, through the mark.
        let first_started = started.load(std::sync::atomic::Ordering::Acquire);
        if !during.is_empty() {
            assert!(
                first_started,
                "watermark {during:?} passed an unacked record"
            );
        }
        acker.join().unwrap();
        other.join().unwrap();
        let after = plain(tracker.committable());
        match (during.as_slice(), after.as_slice()) {
            ([], [("p", 2)]) | ([("p", 1)], [("p", 2)]) | ([("p", 2)], []) => {}
            other => panic!("advances returned twice or lost: {other:?}"),
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 19. W: two senders of one partition race each other and their acks. Send
/// order is the order the sends took their place in the partition's queue;
/// whatever it is, the watermark never passes the earlier record before its
/// ack started, each record is returned at most once, and the last
/// watermark is the later record. (The partition exists and a fresh
/// generation is open before the race, so that the model explores the
/// queue, not partition creation or racing seals, which have models of their
/// own.)
#[test]
fn watermark_two_senders_one_partition() {
    run_model("watermark_two_senders_one_partition", || {
        let tracker = watermarked();
        let zero = tracker.send("p", off(0)).unwrap();
        tracker.ack(zero).unwrap();
        assert_eq!(plain(tracker.committable()), vec![("p", 0)]);
        tracker.drain(Duration::ZERO).unwrap(); // seals: a fresh generation
        let started = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (t2, s2) = (tracker.clone(), started.clone());
        let other = thread::spawn(move || {
            let ticket = t2.send("p", off(2)).unwrap();
            // Release: see the first model.
            s2.store(true, std::sync::atomic::Ordering::Release);
            t2.ack(ticket).unwrap();
        });
        let mine = tracker.send("p", off(1)).unwrap();
        tracker.ack(mine).unwrap();
        let during = plain(tracker.committable());
        // Acquire: as in the first model; read after the call.
        let theirs_started = started.load(std::sync::atomic::Ordering::Acquire);
        other.join().unwrap();
        let after = plain(tracker.committable());
        // The last watermark returned is the later record in send order.
        let last = after
            .first()
            .or(during.first())
            .expect("an advance was lost")
            .1;
        if let [("p", o)] = during.as_slice() {
            assert!(after.first().is_none_or(|a| a.1 != *o), "returned twice");
            if *o == 1 && last == 2 {
                // Ours is the earlier record and it was acked: fine.
            } else if *o == 1 {
                // Ours is the later record: the earlier (theirs) was passed.
                assert!(theirs_started, "passed their unacked record");
            }
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 20. W: a failure stops its own partition only. `p`'s record fails while
/// `q`'s is acked, racing `committable()`: `p` is never returned, `q`
/// exactly once, and `p` is reported stopped.
#[test]
fn watermark_failure_isolation() {
    run_model("watermark_failure_isolation", || {
        let tracker = watermarked();
        let p = tracker.send("p", off(1)).unwrap();
        let q = tracker.send("q", off(1)).unwrap();
        let t2 = tracker.clone();
        let failer = thread::spawn(move || t2.fail(p).unwrap());
        let t3 = tracker.clone();
        let acker = thread::spawn(move || t3.ack(q).unwrap());
        let during = plain(tracker.committable());
        failer.join().unwrap();
        acker.join().unwrap();
        let after = tracker.committable_with_stats();
        let mut all = during;
        all.extend(plain(after.offsets));
        assert_eq!(all, vec![("q", 1)]);
        assert_eq!(after.stopped, vec!["p"]);
        assert_eq!(after.uncommittable_records, 0);
    });
}

/// 21. D: `drain` returns only once everything sent before it is resolved,
/// and then the watermarks are complete: out-of-order acks from two
/// threads (one of which may leave its advance to the other) race a drain,
/// and the `committable()` right after it has the last offset.
#[test]
fn drain_then_watermarks_are_complete() {
    run_model("drain_then_watermarks_are_complete", || {
        let tracker = watermarked();
        let first = tracker.send("p", off(1)).unwrap();
        let second = tracker.send("p", off(2)).unwrap();
        let t2 = tracker.clone();
        let a = thread::spawn(move || t2.ack(second).unwrap());
        let t3 = tracker.clone();
        let b = thread::spawn(move || t3.ack(first).unwrap());
        tracker.drain(FOREVER).unwrap();
        assert_eq!(plain(tracker.committable()), vec![("p", 2)]);
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// 22. W + barrier: one slot held by a partition cell (then the flush
/// carry), the watermark queue and a mark at once. An acker passes records
/// while the flush folds, commits and releases the cell holds: every offset
/// is dropped exactly once (loom's leak and double-drop tracking), the flush
/// returns the covered record, and the watermarks end on the last record.
#[test]
fn watermarks_beside_a_barrier_flush() {
    run_model("watermarks_beside_a_barrier_flush", || {
        let tracker = watermarked();
        let first = tracker.send("p", off(1)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let second = tracker.send("p", off(2)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || {
            t2.ack(first).unwrap();
            let during = plain(t2.committable());
            t2.ack(second).unwrap();
            during
        });
        assert_eq!(plain(flush.wait(FOREVER).unwrap()), vec![("p", 1)]);
        flush.commit().unwrap();
        let during = acker.join().unwrap();
        let after = plain(tracker.committable());
        assert!(during.is_empty() || during == vec![("p", 1)], "{during:?}");
        assert_eq!(after, vec![("p", 2)]);
        assert_eq!(tracker.in_flight(), 0);
    });
}
