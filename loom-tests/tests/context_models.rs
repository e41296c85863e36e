//! Loom models of a thread's context block (issue 41, `src/counts.rs`'s
//! `Own`): the partition hint a shard's owner keeps between its sends,
//! and the pointer to the generation its count word counts for.
//!
//! Under loom the model's main thread (loom's thread 0) owns shard 0 and
//! the first spawned thread shard 1 (see `count_models.rs`), so both have
//! a context block. Thread numbers are never reused under loom; the reuse
//! of a number, with its block, is tested natively
//! (`tests/context_block.rs`).
//!
//! Mutants caught here: `stale_partition_cache` (a hinted key taken
//! without comparing it), `stale_generation_cache` (the generation
//! pointer not moved when the owner's word rolls to a newer generation)
//! and `cell_hint_across_generations` (the cell hint used without
//! comparing its generation).
#![cfg(loom)]

use inflight::Tracker;
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;

use common::{check_revoke_outcome, off, plain, run_model, T};

/// X1. A send through the owner's partition hint races a revoke of that
/// partition: the hint gives the partition's number and its lifecycle,
/// whose life the send reads as any send does, so the record belongs to
/// the ended life (released exactly once, never reported) or to the new
/// one (delivered and reported), as in model 25.
#[test]
fn hinted_send_vs_revoke_of_its_partition() {
    run_model("hinted_send_vs_revoke_of_its_partition", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        // Main's hint names "p" from here on.
        let zero = tracker.send("p", off(0)).unwrap();
        tracker.ack(zero).unwrap();
        let t2 = tracker.clone();
        let revoker = thread::spawn(move || t2.revoke("p").released);
        let ticket = tracker.send("p", off(1)).unwrap(); // through the hint
        let first = revoker.join().unwrap();
        check_revoke_outcome(&tracker, first, ticket, 1, |o| **o);
    });
}

/// X2. An owner sends to two partitions, the second while a flush seals
/// the generation of the first: the hint, naming the first partition,
/// must not take the second's record, and the second send enters the
/// generation its word rolled to, through the pointer the roll set. The
/// first flush reports the first record and perhaps the second; the
/// next reports the rest; each record once.
#[test]
fn owner_sends_two_partitions_across_a_seal() {
    run_model("owner_sends_two_partitions_across_a_seal", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let first = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let flusher = thread::spawn(move || {
            let mut flush = t2.begin_flush().unwrap();
            let offsets = plain(flush.wait(Duration::from_secs(3600)).unwrap());
            flush.commit().unwrap();
            offsets
        });
        let second = tracker.send("q", off(2)).unwrap(); // misses the hint
        tracker.ack(second).unwrap();
        tracker.ack(first).unwrap();
        let covered = flusher.join().unwrap();
        let mut next = tracker.begin_flush().unwrap();
        let rest = plain(next.wait(Duration::ZERO).unwrap());
        next.commit().unwrap();
        assert!(covered.contains(&("p", 1)), "{covered:?}");
        let mut all: Vec<_> = covered.iter().chain(&rest).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all, vec![("p", 1), ("q", 2)], "{covered:?} {rest:?}");
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// X3. An owner sends to one partition on either side of a flush's seal,
/// which another thread makes: the second send's cell is the newer
/// generation's, not the one its cell hint names, so the next flush
/// reports it.
#[test]
fn owner_sends_one_partition_on_either_side_of_a_seal() {
    run_model("owner_sends_one_partition_on_either_side_of_a_seal", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let first = tracker.send("p", off(1)).unwrap();
        tracker.ack(first).unwrap();
        let t2 = tracker.clone();
        let flusher = thread::spawn(move || {
            let mut flush = t2.begin_flush().unwrap();
            let offsets = plain(flush.wait(Duration::ZERO).unwrap());
            flush.commit().unwrap();
            offsets
        });
        let covered = flusher.join().unwrap();
        let second = tracker.send("p", off(2)).unwrap();
        tracker.ack(second).unwrap();
        let mut next = tracker.begin_flush().unwrap();
        let rest = plain(next.wait(Duration::ZERO).unwrap());
        next.commit().unwrap();
        assert_eq!(covered, vec![("p", 1)]);
        assert_eq!(rest, vec![("p", 2)], "the send after the seal is reported");
    });
}
