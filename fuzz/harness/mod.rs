//! The fuzz harness, shared by the cargo-fuzz targets (`fuzz/fuzz_targets/`,
//! where it is the `inflight_fuzz` library) and by the stable corpus replay
//! test (`fuzz-replay/tests/fuzz_replay.rs`, which includes this file with `#[path]`;
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
//! - [`run_decode`]: `Progress::decode` of any string, and `Progress`'s
//!   encode/decode round trip from arbitrary pending offsets.
//! - [`run_metadata`]: hostile metadata through `decode_within`, `merge`
//!   with a tracker's progress and the first commit's `encode`, within the
//!   budget and under an allocation cap ([`Capped`]).
//!
//! `run_ops` also runs progress trackers (`Builder::progress`, chosen by the
//! setup byte): sends must rise per partition and life, and `Op::Progress`
//! checks `Tracker::progress()` against the model.
//!
//! Who owns what:
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | what the others share ([`Offsets`], [`build_tracker`], [`peek_raw`], the setup byte), and the public paths |
//! | `model.rs` | [`Model`], the sequential reference model, and its rules |
//! | `ops.rs` | the `ops` target: [`Op`], the lockstep simulator, [`run_ops`], [`run_op_list`], [`run_ops_traced`], [`run_op_list_traced`], [`run_setup_ops`], and the rules for a panic in user code |
//! | `resolve.rs` | resolutions in `ops`: [`Which`] ticket, and the checks of what `ack`, `fail` and their raw forms answer |
//! | `batch.rs` | batches in `ops`: [`SendBatch`] and [`ResolveAll`], checked as the loops of single calls they stand for, and their panics |
//! | `progress.rs` | the progress side of `ops`: the offsets a send picks on a progress tracker ([`offset_of`]), the model's expected [`Progress`](inflight::Progress) and what `progress()` must report |
//! | `user.rs` | the panicking user types [`Part`] and [`Off`], arming, and the counts of live values and user-code calls |
//! | `raw.rs` | the `raw_tickets` target: [`Probe`], [`run_raw_tickets`] |
//! | `threaded.rs` | the `threaded` target: [`ThreadOp`], the threads' driver, [`run_threaded`], [`run_threaded_ops`] and its end state |
//! | `threaded/checks.rs` | the invariants `threaded` checks while running and at rest |
//! | `decode.rs` | the `decode` target: [`run_decode`], [`run_decode_str`], [`run_from_pending`] |
//! | `metadata.rs` | the `metadata` target: [`run_metadata`], [`run_metadata_str`], [`bytes_allowed`] |
//! | `capped.rs` | [`Capped`], the counting allocator with a cap on one allocation, and [`measure`] |

use arbitrary::{Arbitrary, Unstructured};
use inflight::{SeqOffset, Ticket, Tracker};
pub use modal::{AnyFlush, AnyTracker};
use std::collections::HashMap;
use std::hash::Hash;

mod batch;
mod capped;
mod decode;
mod metadata;
mod modal;
mod model;
mod ops;
mod progress;
mod raw;
mod resolve;
mod threaded;
mod user;

// The public paths of the fuzz targets (the `inflight_fuzz` library) and of
// `fuzz-replay/tests/fuzz_replay.rs`, which uses only some of them.
#[allow(unused_imports)]
pub use self::{
    batch::{ResolveAll, SendBatch, MAX_RECORDS},
    capped::{measure, Capped, CAP},
    decode::{run_decode, run_decode_str, run_from_pending},
    metadata::{bytes_allowed, run_metadata, run_metadata_str, BUDGETS},
    model::{Model, REVOKED_COUNTS_REPORTED_AGAIN},
    ops::{
        run_op_list, run_op_list_traced, run_ops, run_ops_traced, run_setup_ops, Fired, Op, Traced,
    },
    progress::{offset_of, BUDGET, PROGRESS_PANIC_LOSES_REPORTS},
    raw::{run_raw_tickets, Probe},
    resolve::Which,
    threaded::{run_threaded, run_threaded_ops, set_slow_drop, ThreadOp},
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
pub fn build_tracker<P, O>(capacity: Option<usize>, watermarks: bool) -> AnyTracker<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Hash + Clone + Send + Sync,
{
    if !watermarks {
        // The plain constructors, as before the builder existed.
        return match capacity {
            Some(c) => Tracker::with_capacity(c),
            None => Tracker::new(),
        }
        .into();
    }
    let builder = Tracker::builder().watermarks();
    let tracker = match capacity {
        Some(c) => builder.capacity(c).build(),
        None => builder.build(),
    };
    assert!(tracker.has_watermarks());
    tracker.into()
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

/// The kind of tracker `ops` runs on, and its capacity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Setup {
    /// The capacity, if any.
    pub capacity: Option<usize>,
    /// Watermarks (implied by `progress`).
    pub watermarks: bool,
    /// A progress tracker (`Builder::progress(BUDGET)`).
    pub progress: bool,
}

impl Setup {
    /// A tracker of `capacity`, with or without watermarks.
    pub fn new(capacity: Option<usize>, watermarks: bool) -> Self {
        Self {
            capacity,
            watermarks,
            progress: false,
        }
    }

    /// A progress tracker of `capacity` (it keeps watermarks).
    pub fn progress(capacity: Option<usize>) -> Self {
        Self {
            capacity,
            watermarks: true,
            progress: true,
        }
    }
}

/// Builds the tracker `ops` runs: [`build_tracker`], or a progress tracker
/// with the metadata budget [`BUDGET`].
fn build_setup<P, O>(setup: Setup) -> AnyTracker<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: SeqOffset + Hash + Clone + Send + Sync,
{
    if !setup.progress {
        return build_tracker(setup.capacity, setup.watermarks);
    }
    let builder = Tracker::builder().progress(BUDGET);
    let tracker = match setup.capacity {
        Some(c) => builder.capacity(c).build(),
        None => builder.build(),
    };
    assert!(
        tracker.has_watermarks(),
        "a progress tracker keeps watermarks"
    );
    tracker.into()
}

/// The `ops` setup from one byte: with the top two bits set, a progress
/// tracker, with a capacity below `modulo` from the low six bits a quarter
/// of the time; else as [`pick_setup`] (so every other byte decodes as it
/// did before progress trackers). Half the inputs run a plain tracker, a
/// quarter a watermark tracker, a quarter a progress tracker.
fn pick_ops_setup(u: &mut Unstructured<'_>, modulo: u8) -> Setup {
    let byte = u8::arbitrary(u).unwrap_or(0);
    if byte & 0xc0 == 0xc0 {
        let capacity = match byte & 0x3f {
            c @ 0..=15 => Some(usize::from(c % modulo)),
            _ => None,
        };
        return Setup::progress(capacity);
    }
    let (capacity, watermarks) = setup_of(byte, modulo);
    Setup::new(capacity, watermarks)
}

/// The tracker's setup from one byte: watermarks if the top bit is set; a
/// capacity below `modulo` from the other bits a quarter of the time.
fn pick_setup(u: &mut Unstructured<'_>, modulo: u8) -> (Option<usize>, bool) {
    setup_of(u8::arbitrary(u).unwrap_or(0), modulo)
}

/// [`pick_setup`] of `byte`.
fn setup_of(byte: u8, modulo: u8) -> (Option<usize>, bool) {
    let capacity = match byte & 0x7f {
        c @ 0..=31 => Some(usize::from(c % modulo)),
        _ => None,
    };
    (capacity, byte & 0x80 != 0)
}
