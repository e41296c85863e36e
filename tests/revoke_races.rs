//! A send that raced a revoke must not act for the partition's new life.
//!
//! Each test makes the race deterministic: the stale sender reads the
//! partition's life, then blocks in the `Drop` of the old offset its slot
//! still holds (user code that `send` runs after reading the life), while
//! the test revokes the partition and sends to its new life; then the stale
//! send goes on. These are the findings 1, 4 and 5 of the review of the
//! lifecycle and progress code (the loom models in
//! `loom-tests/tests/revoke_race_models.rs` check every interleaving).

#[macro_use]
mod modes;

use inflight::mode::Mode;
use inflight::{SendError, SeqOffset, Ticket, Tracker};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Holds the stale sender inside an offset's `Drop`.
struct Gate {
    armed: AtomicBool,
    /// Set by the `Drop` that blocks: the set-up placed the gated slot
    /// where the stale send takes it.
    entered: AtomicBool,
    /// Two waits: "blocked after reading the life", "go on".
    barrier: Barrier,
}

impl Gate {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            armed: AtomicBool::new(false),
            entered: AtomicBool::new(false),
            barrier: Barrier::new(2),
        })
    }

    fn hold(&self) {
        self.barrier.wait();
        self.barrier.wait();
    }
}

/// An offset at position `.0`; the one carrying an armed gate blocks in
/// its `Drop`.
#[derive(Clone)]
struct Off(u64, Option<Arc<Gate>>);

impl std::hash::Hash for Off {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Drop for Off {
    fn drop(&mut self) {
        if let Some(gate) = &self.1 {
            if gate.armed.swap(false, Ordering::SeqCst) {
                gate.entered.store(true, Ordering::SeqCst);
                gate.hold();
            }
        }
    }
}

impl SeqOffset for Off {
    fn seq(self) -> u64 {
        self.0
    }
}

impl std::fmt::Debug for Off {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn off(seq: u64) -> Off {
    Off(seq, None)
}

/// Runs `stale_send` on a thread of its own after `setup` (on the same
/// thread) freed a slot holding a gated offset at the top of that
/// thread's free list; while the stale send is blocked after reading the
/// life, runs `meanwhile`; returns the stale send's result and
/// `meanwhile`'s.
fn race<R: Send, M, Md: Mode>(
    tracker: &Tracker<&'static str, Off, Md>,
    setup: impl FnOnce(&Tracker<&'static str, Off, Md>, Arc<Gate>) + Send,
    stale_send: impl FnOnce(&Tracker<&'static str, Off, Md>) -> R + Send,
    meanwhile: impl FnOnce() -> M,
) -> (R, M) {
    let gate = Gate::new();
    std::thread::scope(|s| {
        let stale = s.spawn({
            let gate = gate.clone();
            move || {
                setup(tracker, gate.clone());
                gate.armed.store(true, Ordering::SeqCst);
                let result = stale_send(tracker);
                // The set-up missed: release the test thread all the same,
                // which then fails on `entered`.
                if gate.armed.swap(false, Ordering::SeqCst) {
                    gate.hold();
                }
                result
            }
        });
        gate.barrier.wait();
        assert!(
            gate.entered.load(Ordering::SeqCst),
            "the stale send did not take the gated slot: the test's set-up is wrong"
        );
        let during = meanwhile();
        gate.barrier.wait();
        (stale.join().unwrap(), during)
    })
}

/// On a barrier tracker: the gated record is displaced from its cell, then
/// acked, so its slot is the last this thread freed.
fn free_gated_barrier<M: Mode>(tracker: &Tracker<&'static str, Off, M>, gate: Arc<Gate>) {
    let gated = tracker.send("setup", Off(0, Some(gate))).unwrap();
    let displacing = tracker.send("setup", off(1)).unwrap();
    tracker.ack(gated).unwrap();
    tracker.ack(displacing).unwrap();
}

/// On a watermark or progress tracker: the watermark passes the gated
/// record and then the next, which frees the gated slot (a passed record
/// keeps its queue hold until the next one is passed); the next stays
/// held as the watermark's head and as its cell's record.
fn free_gated_queued<M: Mode>(tracker: &Tracker<&'static str, Off, M>, gate: Arc<Gate>) {
    let gated = tracker.send("setup", Off(0, Some(gate))).unwrap();
    let second = tracker.send("setup", off(1)).unwrap();
    let third = tracker.send("setup", off(2)).unwrap();
    tracker.ack(gated).unwrap();
    tracker.ack(second).unwrap();
    let _in_flight = third.into_raw(); // holds `second` as the head
}

fn flush_offsets<M: Mode>(tracker: &Tracker<&'static str, Off, M>) -> Vec<(&'static str, u64)> {
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = flush.wait(Duration::ZERO).unwrap();
    flush.commit().unwrap();
    let mut offsets: Vec<_> = offsets.into_iter().map(|(p, o)| (p, o.0)).collect();
    offsets.sort_unstable();
    offsets
}

/// Finding 1: the stale send installs itself in the partition's cell after
/// the new life's send did; the flush must still report the new life's
/// offset.
#[test]
fn a_stale_send_does_not_displace_the_new_lifes_offset_from_a_flush() {
    each_mode!(tracker = [Tracker::new(), Tracker::builder().watermarks().build()] {
        let watermarks = tracker.has_watermarks();
        let setup = if watermarks {
            free_gated_queued
        } else {
            free_gated_barrier
        };
        let (stale, ()) = race(
            &tracker,
            setup,
            |t| t.send("p", off(100)),
            || {
                let _ = tracker.revoke("p");
                let new = tracker.send("p", off(200)).unwrap();
                tracker.ack(new).unwrap();
            },
        );
        let stale = stale.expect("a send that raced a revoke is accepted, then released");
        assert_eq!(tracker.ack(stale), Err(inflight::ResolveError::Revoked));
        if !watermarks {
            assert_eq!(
                flush_offsets(&tracker),
                vec![("p", 200), ("setup", 1)],
                "the new life's offset is reported"
            );
        } else {
            // The setup partition's third record is still in flight; only p.
            let mut flush = tracker.begin_flush().unwrap();
            assert!(
                flush.wait(Duration::ZERO).is_err(),
                "setup's third is pending"
            );
            drop(flush);
            assert_eq!(tracker.committable().get("p").map(|o| o.0), Some(200));
        }
    });
}

/// Finding 1 with a seal between the two sends: the new life's record is
/// in an older generation than the stale one, and a flush that covers both
/// (the first was aborted) must keep the new life's.
#[test]
fn a_stale_send_in_a_later_generation_does_not_hide_the_new_lifes_offset() {
    let tracker: Tracker<&'static str, Off> = Tracker::new();
    let (stale, ()) = race(
        &tracker,
        free_gated_barrier,
        |t| t.send("p", off(100)),
        || {
            let _ = tracker.revoke("p");
            let new = tracker.send("p", off(200)).unwrap();
            tracker.ack(new).unwrap();
            // Seal (the stale send enters the next generation), and abort.
            drop(tracker.begin_flush().unwrap());
        },
    );
    assert_eq!(
        tracker.ack(stale.unwrap()),
        Err(inflight::ResolveError::Revoked)
    );
    tracker.close();
    assert_eq!(
        flush_offsets(&tracker),
        vec![("p", 200), ("setup", 1)],
        "the final flush after close reports the new life"
    );
}

/// Finding 1 through a batch: the chunk's last record is installed.
#[test]
fn a_stale_batch_does_not_displace_the_new_lifes_offset() {
    let tracker: Tracker<&'static str, Off> = Tracker::new();
    let (stale, ()) = race(
        &tracker,
        free_gated_barrier,
        |t| {
            let mut tickets: Vec<Ticket> = Vec::new();
            let sent = t.send_batch(&"p", [off(100), off(101)], &mut tickets);
            (sent.ok(), tickets)
        },
        || {
            let _ = tracker.revoke("p");
            let new = tracker.send("p", off(200)).unwrap();
            tracker.ack(new).unwrap();
        },
    );
    let (sent, tickets) = stale;
    assert_eq!(sent, Some(2));
    for ticket in tickets {
        assert_eq!(tracker.ack(ticket), Err(inflight::ResolveError::Revoked));
    }
    assert_eq!(flush_offsets(&tracker), vec![("p", 200), ("setup", 1)]);
}

/// Finding 4: after the race, the next send of the new life is still
/// checked against the new life's order, and the stale send, which starts
/// again in the new life, is checked too.
#[test]
fn order_holds_after_a_stale_send_on_a_progress_tracker() {
    let tracker: inflight::ProgressTracker<&'static str, Off> =
        Tracker::builder().progress(256).build();
    let (stale, lower) = race(
        &tracker,
        free_gated_queued,
        |t| t.send("p", off(30)),
        || {
            let _ = tracker.revoke("p");
            let new = tracker.send("p", off(50)).unwrap();
            tracker.ack(new).unwrap();
        },
    )
    .map_second(|()| tracker.send("p", off(40)));
    assert!(
        matches!(lower, Err(SendError::OutOfOrder("p", Off(40, _)))),
        "40 after 50 in one life: {lower:?}"
    );
    assert!(
        matches!(stale, Err(SendError::OutOfOrder("p", Off(30, _)))),
        "the stale send is decided in the new life: {stale:?}"
    );
    let above = tracker.send("p", off(51)).unwrap();
    tracker.ack(above).unwrap();
    assert_eq!(
        tracker.progress()["p"].next(),
        52,
        "the watermark never moves back"
    );
}

/// Finding 5: after the race, a far send of the new life is charged for the
/// distance from the new life's last record, and refused over the budget.
#[test]
fn the_budget_holds_after_a_stale_send_on_a_progress_tracker() {
    // Without a race, 2^62 after 50 (unacked) is over a 12-character budget.
    let control: inflight::ProgressTracker<&'static str, u64> =
        Tracker::builder().progress(12).build();
    let _held = control.send("p", 50).unwrap();
    assert!(matches!(
        control.send("p", 1 << 62),
        Err(SendError::Full(..))
    ));

    let tracker: inflight::ProgressTracker<&'static str, Off> =
        Tracker::builder().progress(12).build();
    let (stale, far) = race(
        &tracker,
        free_gated_queued,
        |t| t.send("p", off(30)),
        || {
            let _ = tracker.revoke("p");
            let _in_flight = tracker.send("p", off(50)).unwrap().into_raw();
        },
    )
    .map_second(|()| tracker.send("p", off(1 << 62)));
    assert!(
        matches!(far, Err(SendError::Full("p", _, _))),
        "over the budget: {far:?}"
    );
    assert!(matches!(stale, Err(SendError::OutOfOrder(..))), "{stale:?}");
    let progress = tracker.progress();
    assert!(progress.get("p").is_none_or(|p| p.encode().len() <= 12));
}

trait MapSecond<A, B> {
    fn map_second<C>(self, f: impl FnOnce(B) -> C) -> (A, C);
}

impl<A, B> MapSecond<A, B> for (A, B) {
    fn map_second<C>(self, f: impl FnOnce(B) -> C) -> (A, C) {
        (self.0, f(self.1))
    }
}

/// A typed ticket of a revoked partition answers `Revoked` however long it
/// is held and however often its slot was reused (issue: revoked tickets
/// turned into double acks once the slot was reused). Raw tickets may
/// answer `AlreadyResolved` after the reuse.
#[test]
fn a_revoked_typed_ticket_answers_revoked_after_its_slot_is_reused() {
    each_mode!(tracker = [Tracker::new(), Tracker::builder().watermarks().build(), Tracker::builder().inline_offsets().build(), Tracker::builder().inline_offsets().watermarks().build()] {
        let watermarks = tracker.has_watermarks();
        let held = tracker.send("p", 1).unwrap();
        let raw = tracker.send("p", 2).unwrap().into_raw();
        assert_eq!(tracker.revoke("p").released, 2);
        // The first record's slot is free now, in the quarantine, which
        // `alloc` takes from once 1,024 fresh slots are in use and no other
        // slot is free: so enough records in flight reuse it. Revoking them
        // then makes the slot forget the first record's tag.
        let many: Vec<Ticket> = (0..1_100).map(|i| tracker.send("q", i).unwrap()).collect();
        assert_eq!(tracker.revoke("q").released, 1_100);
        // An inline barrier tracker's cell keeps the offset, not the slot:
        // the slot went to the quarantine at the revoke, `q`'s records
        // reused it and their revoke replaced its remembered tag, so the
        // raw ticket (which carries no partition) is a stale one.
        let inline = std::any::type_name_of_val(&tracker).contains("Inline");
        let expected = if inline && !watermarks {
            inflight::ResolveError::AlreadyResolved
        } else {
            // The second record's slot is still held (cell or queue), not reused.
            inflight::ResolveError::Revoked
        };
        assert_eq!(tracker.ack_raw(raw), Err(expected), "inline: {inline}");
        assert_eq!(
            tracker.ack(held),
            Err(inflight::ResolveError::Revoked),
            "watermarks: {watermarks}"
        );
        let err = tracker.ack_all(many).unwrap_err();
        assert_eq!(
            (err.resolved, err.refused, err.first),
            (0, 1_100, inflight::ResolveError::Revoked)
        );
    });
}
