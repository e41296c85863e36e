//! Loom models of batches: `send_batch` enters a chunk in one step, and
//! `ack_all` leaves it in one; a revoke sees a batch whole.
//!
//! Build with `--cfg loom --cfg crossbeam_loom` (see `../run`).
#![cfg(loom)]

use inflight::{ResolveError, Tracker};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;

use common::{off, plain, run_model, FOREVER, T};

/// B1. A batch racing `begin_flush` is covered whole or not at all: the
/// flush waits for both records or neither, and reports the batch's last
/// offset or nothing (the next flush does).
#[test]
fn batch_send_vs_begin_flush_covers_all_or_none() {
    run_model("batch_send_vs_begin_flush_covers_all_or_none", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let t2 = tracker.clone();
        let sender = thread::spawn(move || {
            let mut tickets = Vec::new();
            assert_eq!(
                t2.send_batch(&"p", [off(1), off(2)], &mut tickets).unwrap(),
                2
            );
            tickets
        });
        let mut flush = tracker.begin_flush().unwrap();
        let tickets = sender.join().unwrap();
        let covered = flush.pending();
        assert!(
            covered == 0 || covered == 2,
            "covered {covered} of a batch of 2"
        );
        assert_eq!(tracker.ack_all(tickets), Ok(2));
        let first = plain(flush.wait(FOREVER).unwrap());
        flush.commit().unwrap();
        let mut next = tracker.begin_flush().unwrap();
        let second = plain(next.wait(FOREVER).unwrap());
        next.commit().unwrap();
        if covered == 2 {
            assert_eq!((first, second), (vec![("p", 2)], vec![]));
        } else {
            assert_eq!((first, second), (vec![], vec![("p", 2)]));
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// B2. `ack_all` of a flush's records on another thread wakes the waiting
/// flusher (one leave for the run), which then reports the last offset.
#[test]
fn ack_all_vs_wait_no_lost_wakeup() {
    run_model("ack_all_vs_wait_no_lost_wakeup", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let mut tickets = Vec::new();
        tracker
            .send_batch(&"p", [off(1), off(2)], &mut tickets)
            .unwrap();
        let first = tracker.send("q", off(7)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        tracker.ack(first).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || {
            tickets.reverse();
            assert_eq!(t2.ack_all(tickets), Ok(2));
        });
        assert_eq!(
            plain(flush.wait(FOREVER).unwrap()),
            vec![("p", 2), ("q", 7)]
        );
        flush.commit().unwrap();
        acker.join().unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// B3. A batch races a revoke of its partition: its records share the life
/// the batch read, so they end alike: both released (by the revoke's scan
/// or by the batch's own re-check, counted once across two revokes, never
/// reported) or both of the new life (delivered and reported).
#[test]
fn revoke_vs_batch_send_to_the_same_partition() {
    run_model("revoke_vs_batch_send_to_the_same_partition", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let zero = tracker.send("p", off(0)).unwrap();
        tracker.ack(zero).unwrap();
        let t2 = tracker.clone();
        let sender = thread::spawn(move || {
            let mut tickets = Vec::new();
            t2.send_batch(&"p", [off(1), off(2)], &mut tickets).unwrap();
            tickets
        });
        let first = tracker.revoke("p");
        let tickets = sender.join().unwrap();
        let resolved = tracker.ack_all(tickets);
        let mut flush = tracker.begin_flush().unwrap();
        let reported = plain(flush.wait(Duration::ZERO).unwrap());
        flush.commit().unwrap();
        // After the flush: this revoke ends the new life too.
        let second = tracker.revoke("p");
        match resolved {
            Ok(2) => {
                assert_eq!((first.released, second.released), (0, 0));
                assert_eq!(reported, vec![("p", 2)], "the new life's batch");
            }
            Err(e) => {
                assert_eq!(
                    (e.resolved, e.refused, e.first),
                    (0, 2, ResolveError::Revoked)
                );
                assert_eq!(first.released + second.released, 2, "each released once");
                assert_eq!(reported, vec![], "offsets of the ended life");
            }
            other => panic!("a batch ended half released: {other:?}"),
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}
