//! Lock-free tracking of records in flight between a source and a sink, and
//! of the source offsets that are safe to commit.
//!
//! A source connector, log shipper or replication stream reads records at
//! source offsets, hands them to an asynchronous sink (a Kafka producer, say)
//! and must periodically store "where to resume". Storing an offset whose
//! record was not yet delivered loses data on a crash; storing too little
//! duplicates data on every clean restart. `inflight` answers the question
//! "which offsets can I commit now?" without a lock on the hot path:
//!
//! ```
//! use std::time::Duration;
//! use inflight::Tracker;
//!
//! let tracker = Tracker::new();
//! // The source loop: send each record, keep its ticket for the callback.
//! let t1 = tracker.send("table-a", 100_u64).unwrap();
//! let t2 = tracker.send("table-a", 101_u64).unwrap();
//! // The committer: seal what was sent so far, wait for it, store, commit.
//! let mut flush = tracker.begin_flush().unwrap();
//! // The sink's delivery callbacks, in any order, on any thread.
//! tracker.ack(t2).unwrap();
//! tracker.ack(t1).unwrap();
//! let offsets = flush.wait(Duration::from_secs(5)).unwrap();
//! assert_eq!(offsets["table-a"], 101);
//! // ... write `offsets` durably, then:
//! flush.commit().unwrap();
//! ```
//!
//! # Generations, and the bug they rule out
//!
//! Records enter the *open generation*. [`Tracker::begin_flush`] *seals* it
//! with one atomic step (the flush's linearization point) and opens the next,
//! so every send is either covered by the flush or not, never half. The
//! flush waits for the covered generations to drain; sends go on into the
//! new one meanwhile.
//!
//! Kafka Connect's 2015 design kept an `outstanding` and a `backlog` map
//! under the task's lock and swapped them when a flush finished. In
//! KAFKA-2867 that swap ran outside the lock: a send racing it landed in the
//! wrong map, its ack found nothing ("CRITICAL Saw callback for record that
//! was not present"), the record came back as outstanding-but-acked, no flush
//! could complete again, and clean restarts duplicated data. An interrupt
//! during the flush wait was also ignored. Here a send's generation is fixed
//! by the same atomic word that the seal sets, a ticket names its slot and
//! tag rather than a map, and [`Tracker::interrupt`] ends a waiting flush.
//!
//! # Guarantees
//!
//! 1. Nothing lost: every accepted record is resolved exactly once or stays
//!    pending and counted in [`Tracker::in_flight`].
//! 2. The seal is linearizable with send; a flush returns, per partition, the
//!    offset of the latest covered record.
//! 3. [`Flush::wait`] returns offsets only when every covered record was
//!    acked; a covered failure gives [`FlushError::Failed`], never offsets,
//!    and at once (guarantee 15).
//! 4. The last covered ack wakes a waiting flush promptly.
//! 5. [`Tracker::interrupt`] is delivered to exactly one `wait`.
//! 6. A forged, stale, foreign or duplicate ticket (any `u64`) is an error
//!    and changes nothing. See [`Ticket`] for the tag width's ABA bound.
//! 7. An aborted (or dropped) flush is merged into the next one.
//! 8. One flush at a time; `commit` without a successful `wait` is an error.
//! 9. After [`Tracker::close`] sends are refused with their record, and a
//!    final flush covers everything accepted before.
//! 10. `send`, `ack`, `fail`, `begin_flush`, `commit`, `abort` take no lock
//!     and never wait for another thread.
//! 11. No public call panics; no `unsafe` is reachable by misuse.
//! 14. A panic in user code (the `Drop`, `Clone`, `Hash` or `Eq` of `P` or
//!     `O`, or a [`Waker`](std::task::Waker)) leaves the tracker consistent
//!     and usable: no value is used after it was dropped or dropped twice,
//!     no record is counted without a ticket, no advance is lost. The calls
//!     that resolve, commit and take offsets run no user `Drop`: an offset
//!     is dropped when its slot is reused by a later `send`, before that
//!     send takes anything (or when the tracker drops).
//! 15. [`Flush::wait`] returns [`FlushError::Failed`] as soon as a covered
//!     record has failed, waking a waiting call.
//! 16. After [`Tracker::revoke`] of a partition, its unresolved records are
//!     released (their tickets answer [`ResolveError::Revoked`]), nothing of
//!     its ended life is waited for or reported, its failure is forgotten,
//!     and a later send starts it anew; its last untaken watermark goes to
//!     exactly one of `committable()` and [`Revoked::committable`].
//!
//! A failed record stays covered by every later flush, which keeps
//! returning `Failed`: restart from the last committed offsets (that is
//! at-least-once delivery).
//!
//! # Watermarks: committing without a barrier
//!
//! A barrier flush covers everything sent before it; when the sink is slower
//! than the source, a flush that times out is merged into the next, which
//! covers more, and offsets can stop moving altogether (Kafka's "death
//! spiral", KAFKA-12226). A tracker built with [`Builder::watermarks`] also
//! keeps, per partition, the offset of the longest acked prefix, and
//! [`Tracker::committable`] hands out the ones that advanced, at any moment:
//!
//! ```
//! use inflight::Tracker;
//!
//! let tracker = Tracker::builder().watermarks().build();
//! let a = tracker.send("orders", 1_u64).unwrap();
//! let b = tracker.send("orders", 2_u64).unwrap();
//! let c = tracker.send("users", 9_u64).unwrap();
//! tracker.ack(b).unwrap();                 // behind a: not committable yet
//! tracker.ack(c).unwrap();
//! let offsets = tracker.committable();     // merge into what you store
//! assert_eq!(offsets.get("users"), Some(&9));
//! assert!(!offsets.contains_key("orders"));
//! tracker.ack(a).unwrap();
//! assert_eq!(tracker.committable()["orders"], 2);
//! ```
//!
//! 12. A watermark never passes a record that was not acked; each advance
//!     is returned by exactly one `committable` call; a failed record stops
//!     its own partition's watermark and no other.
//! 13. [`Tracker::drain`] returns once every record sent before it is
//!     resolved (and, with watermarks, once `committable` has them all),
//!     honouring [`Tracker::interrupt`] and its timeout.
//!
//! Use the barrier flush when offsets must be committed together or the
//! hot path must stay minimal; use watermarks when the sink can fall behind
//! or partitions progress independently. Both work on one tracker.
//!
//! # Async
//!
//! [`Flush::wait_async`] and [`Tracker::drain_async`] await the same
//! conditions as `wait` and `drain` without blocking a thread, on any
//! executor (the crate depends on none: the last resolution wakes the
//! task's [`Waker`](std::task::Waker)). Use your runtime's timeout; dropping
//! the future cancels the wait and leaves the flush usable.
//!
//! The design, memory layout and every memory ordering are described in
//! [`implementation`].

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, missing_debug_implementations)]

mod batch;
mod error;
mod flush;
mod future;
mod generation;
pub mod mode;
mod pages;
mod partition;
mod permits;
mod progress;
mod resolve;
mod revoke;
mod seal;
mod send;
mod slab;
mod stats;
mod sync;
mod ticket;
mod tracker;
mod waiter;
mod watermark;

pub use error::{
    BeginFlushError, DrainError, FlushError, Limit, Refused, ResolveBatchError, ResolveError,
    SendBatchError, SendError,
};
pub use flush::{Flush, OwnedFlush};
pub use progress::{DecodeError, Progress, SeqOffset, NO_POSITION};
pub use revoke::Revoked;
pub use stats::{Stats, Unresolved, LARGEST_PARTITIONS};
pub use ticket::Ticket;
pub use tracker::{Builder, Tracker};

/// A tracker that keeps a watermark per partition: [`Tracker::committable`]
/// gives each partition's **last done** offset at any moment. Built by
/// [`Tracker::builder()`](Tracker::builder)`.watermarks().build()`.
///
/// ```
/// use inflight::{Tracker, WatermarkTracker};
/// let tracker: WatermarkTracker<&str, u64> = Tracker::builder().watermarks().build();
/// let ticket = tracker.send("orders", 41).unwrap();
/// tracker.ack(ticket).unwrap();
/// assert_eq!(tracker.committable()["orders"], 41); // commit 42 to Kafka
/// ```
pub type WatermarkTracker<P, O> = Tracker<P, O, mode::Watermarks>;

/// A tracker that keeps each partition's progress beyond its watermark:
/// [`Tracker::progress`] gives the **next** offset to read and which
/// offsets past it are done, encoded for a commit's metadata. Built by
/// [`Tracker::builder()`](Tracker::builder)`.progress(max_metadata_bytes).build()`.
///
/// ```
/// use inflight::{ProgressTracker, Tracker};
/// let tracker: ProgressTracker<&str, u64> = Tracker::builder().progress(4096).build();
/// let ticket = tracker.send("orders", 41).unwrap();
/// tracker.ack(ticket).unwrap();
/// assert_eq!(tracker.progress()["orders"].next(), 42); // commit 42 to Kafka
/// ```
pub type ProgressTracker<P, O> = Tracker<P, O, mode::Progress>;
pub use watermark::Committable;

#[doc = include_str!("../IMPLEMENTATION.md")]
pub mod implementation {}
