//! The fuzz harness, shared by the cargo-fuzz targets (`fuzz/fuzz_targets/`,
//! where it is the `inflight_fuzz` library) and by the stable corpus replay
//! test (`tests/fuzz_replay.rs`, which includes this file with `#[path]`;
//! the files below sit next to it and resolve from this directory). It
//! depends only on `inflight`, `arbitrary` and `std`.
//!
//! - [`run_ops`]: an arbitrary sequence of [`Op`]s applied to a real
//!   [`Tracker`] and to [`Model`], a sequential reference model of the
//!   contract; every return value, `in_flight()`, `pending()` and every
//!   offset map must agree after every step. Its partition and offset
//!   types ([`Part`], [`Off`]) can be armed to panic in their `Hash`, `Eq`,
//!   `Clone` or `Drop` (guarantee 14).
//! - [`run_raw_tickets`]: live records, resolved (stale) records and a
//!   pending flush, then a flood of hostile raw tickets: only genuine ones
//!   may change anything.
//! - [`run_threaded`]: operations split across 2-3 threads, then end-state
//!   invariants that hold under every interleaving.
//!
//! Who owns what:
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | what the others share ([`Offsets`], [`build_tracker`], [`peek_raw`], the setup byte), and the public paths |
//! | `model.rs` | [`Model`], the sequential reference model, and its rules |
//! | `ops.rs` | the `ops` target: [`Op`], [`Which`], the lockstep simulator, [`run_ops`], [`run_op_list`], [`run_op_list_traced`], and the rules for a panic in user code |
//! | `user.rs` | the panicking user types [`Part`] and [`Off`], arming, and the counts of live values and user-code calls |
//! | `raw.rs` | the `raw_tickets` target: [`Probe`], [`run_raw_tickets`] |
//! | `threaded.rs` | the `threaded` target: [`ThreadOp`], [`run_threaded`], [`run_threaded_ops`] and its invariants |

use arbitrary::{Arbitrary, Unstructured};
use inflight::{Ticket, Tracker};
use std::collections::HashMap;
use std::hash::Hash;

mod model;
mod ops;
mod raw;
mod threaded;
mod user;

// The public paths of the fuzz targets (the `inflight_fuzz` library) and of
// `tests/fuzz_replay.rs`, which uses only some of them.
#[allow(unused_imports)]
pub use self::{
    model::{Model, REVOKED_COUNTS_REPORTED_AGAIN},
    ops::{run_op_list, run_op_list_traced, run_ops, run_ops_fired, Fired, Op, Traced, Which},
    raw::{run_raw_tickets, Probe},
    threaded::{run_threaded, run_threaded_ops, ThreadOp},
    user::{arm, disarm, Act, Off, Part},
};

/// The offsets a flush returns.
pub type Offsets = HashMap<u8, u64>;

/// Partitions used by `run_ops`: few, so that offsets collide.
const PARTITIONS: u8 = 4;
/// Longest operation sequence taken from one input.
const MAX_OPS: usize = 4096;

/// What became of a record (the model's, and a `threaded` thread's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Live,
    Acked,
    Failed,
    /// Released by a `revoke` of its partition: no longer in flight, and
    /// its ticket answers `Revoked` (or `AlreadyResolved`).
    Released,
}

/// Builds the tracker the harness runs: with or without a capacity and
/// watermarks.
pub fn build_tracker<P, O>(capacity: Option<usize>, watermarks: bool) -> Tracker<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    if !watermarks {
        // The plain constructors, as before the builder existed.
        return match capacity {
            Some(c) => Tracker::with_capacity(c),
            None => Tracker::new(),
        };
    }
    let builder = Tracker::builder().watermarks();
    let tracker = match capacity {
        Some(c) => builder.capacity(c).build(),
        None => builder.build(),
    };
    assert!(tracker.has_watermarks());
    tracker
}

/// The raw value a `Ticket` will have. `Ticket` has no accessor short of
/// `into_raw`, but its derived `Debug` shows the field.
pub fn peek_raw(ticket: &Ticket) -> u64 {
    let text = format!("{ticket:?}");
    text.strip_prefix("Ticket { raw: ")
        .and_then(|rest| rest.strip_suffix(" }"))
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("unexpected Debug format of Ticket: {text}"))
}

/// The tracker id byte of a raw ticket.
fn raw_id(raw: u64) -> u8 {
    (raw >> 56) as u8
}

/// The tracker's setup from one byte: watermarks if the top bit is set; a
/// capacity below `modulo` from the other bits a quarter of the time.
fn pick_setup(u: &mut Unstructured<'_>, modulo: u8) -> (Option<usize>, bool) {
    let byte = u8::arbitrary(u).unwrap_or(0);
    let capacity = match byte & 0x7f {
        c @ 0..=31 => Some(usize::from(c % modulo)),
        _ => None,
    };
    (capacity, byte & 0x80 != 0)
}
