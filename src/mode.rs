//! What a tracker keeps beyond the barrier flush, as a type: the third
//! parameter of [`Tracker`](crate::Tracker).
//!
//! | mode | built by | adds | alias |
//! |---|---|---|---|
//! | [`Barrier`] | [`Tracker::new`](crate::Tracker::new), [`with_capacity`](crate::Tracker::with_capacity), [`builder().build()`](crate::Builder::build) | flushes, drains, revokes | `Tracker<P, O>` |
//! | [`Watermarks`] | [`builder().watermarks()`](crate::Builder::watermarks) | [`committable`](crate::Tracker::committable): the last done offset of each partition, at any moment | [`WatermarkTracker<P, O>`](crate::WatermarkTracker) |
//! | [`Progress`] | [`builder().progress(bytes)`](crate::Builder::progress) | [`progress`](crate::Tracker::progress): the next offset to read and what is done beyond it, for a commit's metadata | [`ProgressTracker<P, O>`](crate::ProgressTracker) |
//!
//! A call that a mode does not support does not compile, and a mode pays
//! nothing on its hot path for what it lacks: the mode is a constant in
//! the code of `send` and `ack`, not a flag read at run time.
//!
//! Each mode also comes [`Inline`]: for integer offsets
//! ([`InlineOffset`](crate::InlineOffset): `u64`, `i64` and the other
//! primitive integers), [`Builder::inline_offsets`](crate::Builder::inline_offsets)
//! keeps each partition's latest offset in the generation's partition cell
//! itself, so a send no longer holds its slot for the flush: two locked
//! steps fewer per send+ack pair. Everything else is the same.
//!
//! ```
//! use inflight::mode::{Inline, Watermarks};
//! use inflight::Tracker;
//!
//! let fast: Tracker<&str, i64, Inline> = Tracker::builder().inline_offsets().build();
//! let marks: Tracker<&str, i64, Inline<Watermarks>> =
//!     Tracker::builder().inline_offsets().watermarks().build();
//! # let _ = (fast, marks.committable());
//! ```
//!
//! ```
//! use inflight::{ProgressTracker, Tracker, WatermarkTracker};
//!
//! let barrier = Tracker::new();
//! let marks: WatermarkTracker<&str, u64> = Tracker::builder().watermarks().build();
//! let resumable: ProgressTracker<&str, u64> = Tracker::builder().progress(4096).build();
//! # let _: &Tracker<&str, u64> = &barrier;
//! # let _ = (marks.committable(), resumable.committable(), resumable.progress());
//! ```
//!
//! ```compile_fail
//! // A barrier tracker keeps no watermarks: `committable` does not exist.
//! let tracker: inflight::Tracker<&str, u64> = inflight::Tracker::new();
//! tracker.committable();
//! ```
//!
//! ```compile_fail
//! // A watermark tracker keeps no progress: `progress` does not exist.
//! let tracker: inflight::WatermarkTracker<&str, u64> =
//!     inflight::Tracker::builder().watermarks().build();
//! tracker.progress();
//! ```

use std::marker::PhantomData;

/// A tracker's mode: [`Barrier`], [`Watermarks`] or [`Progress`]. Sealed:
/// the crate's three are the only ones.
pub trait Mode: sealed::Sealed + Send + Sync + 'static {
    /// The tracker keeps a watermark queue per partition.
    #[doc(hidden)]
    const WATERMARKS: bool;
    /// The tracker keeps progress beyond the watermarks (and checks order
    /// and the metadata budget in `send`).
    #[doc(hidden)]
    const PROGRESS: bool;
    /// Offsets are kept in the partition cells (see [`Inline`]).
    #[doc(hidden)]
    const INLINE: bool;
    /// The mode [`Builder::watermarks`](crate::Builder::watermarks) turns
    /// this one into.
    #[doc(hidden)]
    type WithWatermarks: Mode;
    /// The mode [`Builder::progress`](crate::Builder::progress) turns this
    /// one into.
    #[doc(hidden)]
    type WithProgress: Mode;
    /// The mode [`Builder::inline_offsets`](crate::Builder::inline_offsets)
    /// turns this one into.
    #[doc(hidden)]
    type Inlined: Mode;
}

/// The modes whose trackers keep watermarks: [`Watermarks`] and
/// [`Progress`]. [`Tracker::committable`](crate::Tracker::committable) and
/// [`committable_with_stats`](crate::Tracker::committable_with_stats)
/// exist on their trackers.
pub trait Watermarked: Mode {}

/// The modes whose trackers keep progress: [`Progress`] and
/// `Inline<Progress>`. [`Tracker::progress`](crate::Tracker::progress)
/// exists on their trackers.
pub trait Progressive: Watermarked {}

/// Barrier flushes only: the mode of [`Tracker::new`](crate::Tracker::new)
/// and of a builder given no mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Barrier;

/// Barrier flushes and a watermark per partition
/// ([`Builder::watermarks`](crate::Builder::watermarks)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Watermarks;

/// Barrier flushes, watermarks and progress beyond them
/// ([`Builder::progress`](crate::Builder::progress)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Progress;

/// Mode `M` (by default [`Barrier`]) with offsets kept inline in the
/// partition cells: built by
/// [`Builder::inline_offsets`](crate::Builder::inline_offsets), for
/// offsets of a type that is [`InlineOffset`](crate::InlineOffset).
///
/// A send of such a tracker copies its offset into its partition's cell
/// with the install it makes anyway, and its slot is then free as soon as
/// the record is resolved: no hold to take, hand over and release, and a
/// publish that nothing else writes at the same moment (a plain store).
/// An offset that does not fit in 47 bits (a negative `i64`, or beyond
/// 1.4 * 10^14) takes the held path of the plain mode, record by record,
/// so every value is kept: only the speed differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Inline<M = Barrier>(PhantomData<M>);

impl Mode for Barrier {
    const WATERMARKS: bool = false;
    const PROGRESS: bool = false;
    const INLINE: bool = false;
    type WithWatermarks = Watermarks;
    type WithProgress = Progress;
    type Inlined = Inline<Barrier>;
}

impl Mode for Watermarks {
    const WATERMARKS: bool = true;
    const PROGRESS: bool = false;
    const INLINE: bool = false;
    type WithWatermarks = Watermarks;
    type WithProgress = Progress;
    type Inlined = Inline<Watermarks>;
}

impl Mode for Progress {
    const WATERMARKS: bool = true;
    const PROGRESS: bool = true;
    const INLINE: bool = false;
    type WithWatermarks = Progress;
    type WithProgress = Progress;
    type Inlined = Inline<Progress>;
}

impl<M: Plain> Mode for Inline<M> {
    const WATERMARKS: bool = M::WATERMARKS;
    const PROGRESS: bool = M::PROGRESS;
    const INLINE: bool = true;
    type WithWatermarks = Inline<M::Watermarked>;
    type WithProgress = Inline<Progress>;
    type Inlined = Self;
}

impl Watermarked for Watermarks {}
impl Watermarked for Progress {}
impl Watermarked for Inline<Watermarks> {}
impl Watermarked for Inline<Progress> {}
impl Progressive for Progress {}
impl Progressive for Inline<Progress> {}

/// The three modes without [`Inline`].
#[doc(hidden)]
pub trait Plain: Mode<WithWatermarks = Self::Watermarked> {
    /// `WithWatermarks`, known to be plain.
    type Watermarked: Plain;
}

impl Plain for Barrier {
    type Watermarked = Watermarks;
}
impl Plain for Watermarks {
    type Watermarked = Watermarks;
}
impl Plain for Progress {
    type Watermarked = Progress;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Barrier {}
    impl Sealed for super::Watermarks {}
    impl Sealed for super::Progress {}
    impl<M: super::Plain> Sealed for super::Inline<M> {}
}
