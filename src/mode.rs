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
    /// The mode [`Builder::watermarks`](crate::Builder::watermarks) turns
    /// this one into.
    #[doc(hidden)]
    type WithWatermarks: Mode;
}

/// The modes whose trackers keep watermarks: [`Watermarks`] and
/// [`Progress`]. [`Tracker::committable`](crate::Tracker::committable) and
/// [`committable_with_stats`](crate::Tracker::committable_with_stats)
/// exist on their trackers.
pub trait Watermarked: Mode {}

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

impl Mode for Barrier {
    const WATERMARKS: bool = false;
    const PROGRESS: bool = false;
    type WithWatermarks = Watermarks;
}

impl Mode for Watermarks {
    const WATERMARKS: bool = true;
    const PROGRESS: bool = false;
    type WithWatermarks = Watermarks;
}

impl Mode for Progress {
    const WATERMARKS: bool = true;
    const PROGRESS: bool = true;
    type WithWatermarks = Progress;
}

impl Watermarked for Watermarks {}
impl Watermarked for Progress {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Barrier {}
    impl Sealed for super::Watermarks {}
    impl Sealed for super::Progress {}
}
