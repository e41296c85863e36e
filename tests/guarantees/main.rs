//! One or more integration tests per guarantee of the design contract
//! (`DESIGN.md`, "Guarantees" 1-11), named `gN_...` after the guarantee they
//! check. Every test would fail if its guarantee were broken.
//!
//! Multi-threaded tests synchronize with scoped threads, joins, channels and
//! barriers only; no test depends on timing. Where a test waits for a wake-up
//! (`Flush::wait` with an hour-long timeout) a lost wake-up shows up as a
//! hung test, which is the intended failure mode.

use inflight::{BeginFlushError, Flush, FlushError, ResolveError, SendError, Ticket, Tracker};
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::Duration;

/// Long enough that reaching it means a wake-up was lost.
const FOREVER: Duration = Duration::from_secs(3600);
/// A generous upper bound for waits whose records are all resolved (or will
/// be, by a thread that does not wait on anything).
const GENEROUS: Duration = Duration::from_secs(30);

#[path = "../common/mod.rs"]
mod common;
use common::{scaled, Rng};

/// The tracker id of a raw ticket (`tracker:8 | slot:24 | tag:32`, as
/// documented in `Ticket` / IMPLEMENTATION.md).
fn raw_tracker(raw: u64) -> u8 {
    (raw >> 56) as u8
}

/// The slot index of a raw ticket.
fn raw_slot(raw: u64) -> u64 {
    (raw >> 32) & 0xFF_FFFF
}

/// The tracker id of `tracker`, read from a ticket it issues (the record is
/// acked straight away, so the tracker is left as it was, apart from a
/// retained offset of partition `p`).
fn tracker_id<P, O>(tracker: &Tracker<P, O>, p: P, o: O) -> u8
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    let Ok(ticket) = tracker.send(p, o) else {
        panic!("refused");
    };
    let raw = ticket.into_raw();
    tracker.ack_raw(raw).unwrap();
    raw_tracker(raw)
}

fn wait_ok<P, O>(flush: &mut Flush<'_, P, O>) -> HashMap<P, O>
where
    P: Hash + Eq + Clone + Send + Sync + std::fmt::Debug,
    O: Clone + Send + Sync + std::fmt::Debug,
{
    match flush.wait(GENEROUS) {
        Ok(offsets) => offsets,
        Err(e) => panic!("expected Ok offsets, got {e:?}"),
    }
}

fn map<P: Hash + Eq, O>(pairs: impl IntoIterator<Item = (P, O)>) -> HashMap<P, O> {
    pairs.into_iter().collect()
}

/// Waits on `flush` (for up to `timeout`) while `resolve` runs on another
/// thread. That thread stays alive until the wait has returned: the end of a
/// scoped thread unparks the thread that owns the scope, which would hide a
/// lost wake-up.
fn wait_while<P, O>(
    flush: &mut Flush<'_, P, O>,
    timeout: Duration,
    resolve: impl FnOnce() + Send,
) -> Result<HashMap<P, O>, FlushError>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    let (done_tx, done_rx) = mpsc::channel::<()>();
    thread::scope(|s| {
        s.spawn(move || {
            resolve();
            let _ = done_rx.recv();
        });
        let result = flush.wait(timeout);
        drop(done_tx);
        result
    })
}

mod close_and_misuse;
mod commit;
mod counting;
mod tickets;
