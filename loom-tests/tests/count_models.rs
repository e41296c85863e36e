//! Loom models of the owner-only count words (`src/counts.rs`): writes by a
//! shard's owner that straddle a seal, leaves by other threads and the
//! owner's fold of them, and a thread without a shard of its own.
//!
//! Under loom the tracker has two shards: the model's main thread (loom's
//! thread 0) owns shard 0, the first spawned thread shard 1, and a third
//! thread has none (it counts on shard 0's `remote` word). Both barriers
//! are `fence(SeqCst)` here, which loom checks exactly.
//!
//! Mutants caught here: `no_count_fence` (the owner's light barrier after
//! its write left out), `no_heavy_barrier` (the sealer's), and
//! `unsettled_straddle` (an owner's leave that the capture missed is not
//! settled).
#![cfg(loom)]

use inflight::Tracker;
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;

use common::{off, plain, run_model, T};

/// C1. An owner's ack straddles a flush that covers its record: the flush
/// returns the offset once the ack is in, whichever side of the seal the
/// ack's write lands (a straddle the capture missed settles on the
/// generation; one it did not miss must not be counted twice).
#[test]
fn owner_ack_straddles_a_flush_of_its_record() {
    run_model("owner_ack_straddles_a_flush_of_its_record", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        // Main is shard 0's owner: the send and the ack go to its own word.
        let ticket = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let flusher = thread::spawn(move || {
            let mut flush = t2.begin_flush().unwrap();
            let offsets = plain(flush.wait(Duration::from_secs(3600)).unwrap());
            flush.commit().unwrap();
            offsets
        });
        tracker.ack(ticket).unwrap();
        assert_eq!(flusher.join().unwrap(), vec![("p", 1)]);
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// C2. An owner's two sends straddle a flush: the first (before the flush)
/// is covered; the second is covered or not, never half, and a record the
/// flush did not cover is covered by the next one.
#[test]
fn owner_send_straddles_a_flush() {
    run_model("owner_send_straddles_a_flush", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let t2 = tracker.clone();
        let owner = thread::spawn(move || {
            // Thread 1: shard 1's owner.
            let first = t2.send("p", off(1)).unwrap();
            let second = t2.send("q", off(2)).unwrap();
            t2.ack(first).unwrap();
            t2.ack(second).unwrap();
        });
        let mut flush = tracker.begin_flush().unwrap();
        owner.join().unwrap();
        let first = plain(flush.wait(Duration::ZERO).unwrap());
        flush.commit().unwrap();
        let mut next = tracker.begin_flush().unwrap();
        let second = plain(next.wait(Duration::ZERO).unwrap());
        next.commit().unwrap();
        let mut all: Vec<_> = first.iter().chain(&second).copied().collect();
        all.sort_unstable();
        assert_eq!(
            all,
            vec![("p", 1), ("q", 2)],
            "each once: {first:?} {second:?}"
        );
        // Covered sends form a prefix of the owner's: the first send is
        // covered if the second is.
        assert!(first != vec![("q", 2)], "the later send covered alone");
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// C3. Another thread acks the owner's record (its leave goes to the
/// shard's `remote` word) while a flush runs, and the owner's next send
/// folds that leave into its own word: every flush completes with each
/// offset once, and nothing stays counted.
#[test]
fn hand_off_ack_and_fold_vs_flush() {
    run_model("hand_off_ack_and_fold_vs_flush", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let first = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || {
            // Thread 1 acks shard 0's record: a remote leave.
            t2.ack(first).unwrap();
            let mut flush = t2.begin_flush().unwrap();
            let offsets = plain(flush.wait(Duration::from_secs(3600)).unwrap());
            flush.commit().unwrap();
            offsets
        });
        // The owner's next send folds the remote leave if it finds it.
        let second = tracker.send("p", off(2)).unwrap();
        tracker.ack(second).unwrap();
        let offsets = acker.join().unwrap();
        assert!(
            offsets == vec![("p", 1)] || offsets == vec![("p", 2)],
            "{offsets:?}"
        );
        let mut last = tracker.begin_flush().unwrap();
        let rest = plain(last.wait(Duration::ZERO).unwrap());
        last.commit().unwrap();
        if offsets == vec![("p", 1)] {
            assert_eq!(rest, vec![("p", 2)]);
        } else {
            assert_eq!(rest, vec![]);
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// C4. `close` then `drain` against a send by a thread without a shard of
/// its own (its entry is a compare-exchange on a `remote` word): the drain
/// waits for an accepted record, or the send is refused (model 11 of
/// `models.rs` with an owner's send).
#[test]
fn close_then_drain_vs_a_send_without_a_shard() {
    run_model("close_then_drain_vs_a_send_without_a_shard", || {
        common::close_then_drain_vs_send(true)
    });
}
