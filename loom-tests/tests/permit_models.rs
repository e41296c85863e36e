//! Loom models of a bounded tracker's permits (29d): `Full` only when the
//! capacity is all in use at some moment of the send. (29-29c, waiting for
//! room and a permit freed on another thread, are in `lifecycle_models.rs`.)
//! See `models.rs` for how the models are written.
#![cfg(loom)]

use inflight::{SendError, Tracker};
use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering;

mod common;

use common::{off, plain, run_model, run_model_bounded, FOREVER, T, W};

/// 29d. A spare moved behind the sweep: on a tracker of capacity 2, both
/// permits are spare on shard 1 (acked there), and the main thread (shard
/// 0) sends while two threads, one on each shard, each send once, holding
/// a token so that at most one of them holds a record at a time: with the
/// main thread's, at most two permits are ever in use, and no send may be
/// refused. The one on shard 0 finds its own shard empty and takes a
/// permit of shard 1, then acks on shard 0 and hands the token over; the
/// one on shard 1 then takes the other permit from its own shard, and
/// keeps it. A sweep of the main thread that read shard 0 before the ack
/// and shard 1 after the second take found both empty, though a permit was
/// spare all along (issue 25, item 9). Mutant `missed_spare` (the sweep
/// makes that one pass) is caught here, at execution 7,865. Capped at two
/// preemptions (the miss above needs one): 165,815 executions in
/// 51 s; three did not end in five minutes.
#[test]
fn permit_moved_behind_a_sweep_is_not_missed() {
    run_model_bounded("permit_moved_behind_a_sweep_is_not_missed", 2, || {
        let tracker: Arc<T> = Arc::new(Tracker::with_capacity(2));
        let a = tracker.send("p", off(1)).unwrap();
        let b = tracker.send("p", off(2)).unwrap();
        // Loom thread 1: shard 1 (loom has two permit shards, by thread
        // number). Both permits end up spare there.
        let t1 = tracker.clone();
        thread::spawn(move || {
            t1.ack(a).unwrap();
            t1.ack(b).unwrap();
        })
        .join()
        .unwrap();
        // At most one of the two threads below holds a record at a time.
        let token = Arc::new(AtomicBool::new(false));
        // Loom thread 2: shard 0, as the main thread's.
        let (t2, token2) = (tracker.clone(), token.clone());
        let mover = thread::spawn(move || {
            // Acquire: after the other thread's record, if it had the
            // token first (it keeps it, so then this one does nothing).
            if token2
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                let ticket = t2.send("q", off(3)).expect("a permit is spare");
                t2.ack(ticket).unwrap();
                // Release: the ack (and its give-back) before the token.
                token2.store(false, Ordering::Release);
            }
        });
        // Loom thread 3: shard 1.
        let (t3, token3) = (tracker.clone(), token.clone());
        let taker = thread::spawn(move || {
            // Acquire: pairs with the Release above.
            token3
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .ok()
                .map(|_| t3.send("r", off(4)).expect("a permit is spare"))
        });
        match tracker.send("s", off(5)) {
            Ok(ticket) => tracker.ack(ticket).unwrap(),
            Err(e @ SendError::Full(..)) => {
                panic!("refused with a permit spare throughout: {e:?}")
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        mover.join().unwrap();
        if let Some(ticket) = taker.join().unwrap() {
            tracker.ack(ticket).unwrap();
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 29e (issue 26, item 4). The capacity with records held behind a
/// watermark: a permit comes back when the watermark passes the record,
/// never at the ack. On a watermark tracker of capacity 2, `a` and `b` of
/// one partition are in flight; another thread acks `b` while the main
/// thread sends: whether the ack came first or not, `b` counts (unresolved,
/// or held behind `a`), so the send is refused, and again once the ack is
/// joined. Then a third thread acks `a` while the main thread waits in
/// `send_timeout`: the advance that passes `a` (and `b`) gives the permits
/// back and wakes it (a lost wake-up is a loom deadlock). Mutant
/// `permit_at_ack` (the permit comes back at the ack, as before the fix) is
/// caught here, at execution 1: the send after `b`'s ack gets `b`'s
/// permit. 3,147 executions with two preemptions.
#[test]
fn held_records_keep_their_permits_until_the_watermark_passes() {
    run_model(
        "held_records_keep_their_permits_until_the_watermark_passes",
        || {
            let tracker: Arc<W> = Arc::new(Tracker::builder().watermarks().capacity(2).build());
            let a = tracker.send("p", off(1)).unwrap();
            let b = tracker.send("p", off(2)).unwrap();
            let t1 = tracker.clone();
            let behind = thread::spawn(move || t1.ack(b).unwrap());
            let refused = tracker.send("q", off(3));
            assert!(
                matches!(refused, Err(SendError::Full(..))),
                "a send past the capacity while b's ack ran"
            );
            behind.join().unwrap();
            let refused = tracker.send("q", off(3));
            assert!(
                matches!(refused, Err(SendError::Full(..))),
                "an acked record held behind an unacked one gave its permit back"
            );
            let t2 = tracker.clone();
            let stuck = thread::spawn(move || t2.ack(a).unwrap());
            let c = tracker
                .send_timeout("q", off(3), FOREVER)
                .expect("the watermark passing a makes room");
            stuck.join().unwrap();
            assert_eq!(tracker.in_flight(), 1);
            tracker.ack(c).unwrap();
            assert_eq!(tracker.in_flight(), 0);
            assert_eq!(plain(tracker.committable()), [("p", 2), ("q", 3)]);
        },
    );
}
