//! Loom models of a tracker that keeps offsets inline in its partition
//! cells (`Builder::inline_offsets`, I1-I4): a send whose publish is a
//! plain store racing a revoke, and a send of an ended life racing a
//! revoke and a send of the new life, with and without a seal between
//! them, which must not leave the ended life's offset in the cell where
//! the new life's was. See `models.rs` for how the models are written, and
//! IMPLEMENTATION.md, "Offsets inline".
#![cfg(loom)]

use inflight::mode::Inline;
use inflight::{ResolveError, Tracker};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;

use common::run_model;

/// An inline tracker of the models' partitions, with `i64` offsets (a
/// negative one takes the held path).
type I = Tracker<&'static str, i64, Inline>;

fn inline() -> I {
    Tracker::builder().inline_offsets().build()
}

/// The offsets a flush begun now returns, committed, in order.
fn flushed(tracker: &I) -> Vec<(&'static str, i64)> {
    let mut flush = tracker.begin_flush().unwrap();
    let mut offsets: Vec<_> = flush.wait(Duration::ZERO).unwrap().into_iter().collect();
    flush.commit().unwrap();
    offsets.sort();
    offsets
}

/// I1. Model 25 (`revoke_vs_send_to_the_same_partition`) on an inline
/// tracker, whose send publishes with a plain Release store: the record is
/// released exactly once (by the scan or by its own send) and no flush
/// reports it, or it belongs to the new life, is delivered and reported.
#[test]
fn revoke_vs_inline_send_to_the_same_partition() {
    run_model("revoke_vs_inline_send_to_the_same_partition", || {
        common::revoke_vs_send(inline(), |o| o as i64, |&o| o as u64)
    });
}

/// The race of I2-I4: a send of `stale` on another thread; here a revoke of
/// its partition and a send of the new life (`new`, acked), then with
/// `seal` an aborted flush. If the first send's ack answers `Revoked` it
/// was of the ended life, and a flush reports `new`; if it was delivered,
/// it belongs to the new life too, and the flush reports one of the two.
fn stale_send_race(stale: i64, new: i64, seal: bool) {
    let tracker: Arc<I> = Arc::new(inline());
    let zero = tracker.send("p", 0).unwrap();
    tracker.ack(zero).unwrap();
    let t2 = tracker.clone();
    let sender = thread::spawn(move || t2.send("p", stale).unwrap());
    let _ = tracker.revoke("p");
    let second = tracker.send("p", new).unwrap();
    tracker.ack(second).unwrap();
    if seal {
        drop(tracker.begin_flush().unwrap()); // seals, then aborts
    }
    let ticket = sender.join().unwrap();
    let ended = match tracker.ack(ticket) {
        Ok(()) => false,
        Err(ResolveError::Revoked) => true,
        Err(e) => panic!("unexpected {e:?}"),
    };
    let offsets = flushed(&tracker);
    if ended {
        assert_eq!(offsets, vec![("p", new)], "the new life's offset is lost");
    } else {
        assert!(
            offsets == vec![("p", stale)] || offsets == vec![("p", new)],
            "{offsets:?}"
        );
    }
    assert_eq!(tracker.in_flight(), 0);
}

/// I2. R1 (`stale_send_vs_revoke_and_new_send`) with both offsets inline:
/// the cell's word keeps the life beside the offset, so the stale send's
/// install gives up where the new life's offset is. Mutants
/// `inline_life_dropped` (the word keeps no life) and
/// `stale_displaces_new` are caught here.
#[test]
fn inline_stale_send_vs_revoke_and_new_send() {
    run_model("inline_stale_send_vs_revoke_and_new_send", || {
        stale_send_race(1, 2, false)
    });
}

/// I3. I2 with a seal between: the stale offset may enter the later
/// generation, and the fold must keep the new life's, by the lives the
/// cells kept (widened against the partition's).
#[test]
fn inline_stale_send_vs_revoke_seal_and_new_send() {
    run_model("inline_stale_send_vs_revoke_seal_and_new_send", || {
        stale_send_race(1, 2, true)
    });
}

/// I4. I2 with a stale offset too wide for the cell (held, in the cell's
/// slot form) against a new life's inline one, and the reverse: the two
/// forms share one cell and one life comparison.
#[test]
fn held_and_inline_sends_of_two_lives_share_the_cell() {
    run_model("held_and_inline_sends_of_two_lives_share_the_cell", || {
        stale_send_race(-1, 2, false)
    });
    run_model(
        "held_and_inline_sends_of_two_lives_share_the_cell (reversed)",
        || stale_send_race(1, -2, false),
    );
}

/// I5. Two revokes of one partition overlap at a clearing life (every
/// other life under loom, see `cell::CLEAR_EVERY`), and a send of the
/// newer life follows one of them: the clear takes only lives older than
/// the one its revoke began, so the send, acked after both revokes
/// returned, is reported by the next flush (or, if a revoke ended its
/// life, released once and not reported).
///
/// Loom does not reach the window of review 4's finding here: the newer
/// life's send installing between the slower revoke's heavy barrier and
/// its clear. With the barrier (a `SeqCst` fence under loom) removed, this
/// model fails on the old rule at once; with it, loom's exploration never
/// schedules the other thread between that fence and the clear (checked
/// at bounds 3 and 5). The rule itself is pinned by the unit test
/// `generation::tests::a_clear_keeps_a_newer_lifes_offset`, which fails
/// on the old rule.
#[test]
fn overlapping_revokes_at_a_clearing_life_keep_the_newer_lifes_offset() {
    run_model(
        "overlapping_revokes_at_a_clearing_life_keep_the_newer_lifes_offset",
        || {
            let tracker: Arc<I> = Arc::new(inline());
            // A revoke of a partition never sent is a no-op: send one.
            let zero = tracker.send("p", 0).unwrap();
            tracker.ack(zero).unwrap();
            // Life 1 now: the two revokes below begin lives 2 (a clearing
            // one) and 3, in either order.
            assert_eq!(tracker.revoke("p").released, 0);
            let t2 = tracker.clone();
            let other = thread::spawn(move || t2.revoke("p").released);
            assert_eq!(tracker.revoke("p").released, 0, "nothing sent yet");
            let ticket = tracker.send("p", 7).unwrap();
            let first = other.join().unwrap();
            common::check_revoke_outcome(&*tracker, first, ticket, 7, |&o| o as u64);
        },
    );
}
