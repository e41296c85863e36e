//! Lock-free tracking of records in flight between a source and a sink, and
//! of the source offsets that are safe to commit.
//!
//! A source connector, a consumer that processes out of order, a log
//! shipper or a replication stream reads records at source offsets, hands
//! them to an asynchronous sink (a Kafka producer, say) and must
//! periodically store "where to resume". Storing an offset whose record was
//! not yet delivered loses data on a crash; storing too little duplicates
//! data on every restart. `inflight` answers "which offsets can I commit
//! now?" from any thread, without a lock on the hot path:
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
//! # Which calls for which job
//!
//! | job | calls | example |
//! |---|---|---|
//! | Source task (Kafka Connect style): every partition committed at one barrier | [`Tracker::new`], [`send`](Tracker::send), [`ack`](Tracker::ack) / [`fail`](Tracker::fail) (or [`ack_raw`](Tracker::ack_raw) from a C callback), [`begin_flush`](Tracker::begin_flush) → [`wait`](Flush::wait) → [`commit`](Flush::commit), [`close`](Tracker::close), [`interrupt`](Tracker::interrupt) | `quickstart`, `bounce` |
//! | Consumer committing watermarks | [`Builder::watermarks`] (a [`WatermarkTracker`]), [`committable`](Tracker::committable): the last done offset, so commit it **+ 1** to Kafka; [`drain`](Tracker::drain) at shutdown | `death_spiral` |
//! | Consumer group with rebalances and progress metadata | [`Builder::progress`] (a [`ProgressTracker`]), [`progress`](Tracker::progress): commit [`Progress::next`] as it is, with [`Progress::encode`] as metadata; on revocation [`drain_partition`](Tracker::drain_partition) then [`revoke`](Tracker::revoke); on assignment [`Progress::decode`] and [`Progress::is_done`] | `inflight-rdkafka`'s `pipeline` |
//! | Async, on any executor | [`Flush::wait_async`], [`drain_async`](Tracker::drain_async), [`drain_partition_async`](Tracker::drain_partition_async), [`send_async`](Tracker::send_async), [`begin_flush_owned`](Tracker::begin_flush_owned) | `async_producer` |
//! | Back-pressure | [`Tracker::with_capacity`] or [`Builder::capacity`]; [`SendError::Full`] hands the record back ([`into_inner`](SendError::into_inner)); [`send_timeout`](Tracker::send_timeout), [`send_async`](Tracker::send_async); [`send_batch`](Tracker::send_batch), [`ack_all`](Tracker::ack_all) | `tests/usability.rs` |
//! | Metrics and stuck records | [`stats`](Tracker::stats) (takes nothing), [`in_flight`](Tracker::in_flight), [`oldest_unresolved`](Tracker::oldest_unresolved), [`failed_records`](Tracker::failed_records), [`committable_with_stats`](Tracker::committable_with_stats) | `tests/usability.rs`, `tests/failed_records.rs` |
//! | Integer offsets (Kafka's `i64`), at full speed | [`Builder::inline_offsets`] (mode [`Inline`](mode::Inline), for an [`InlineOffset`]), then any of the above: offsets kept in the partition cells, two locked steps fewer per record | `compare` |
//!
//! The examples run with `cargo run --release --example NAME` from the
//! repository; the README walks through each job.
//!
//! A tracker's [`mode`] is part of its type: [`Tracker<P, O>`](Tracker)
//! flushes at barriers, a [`WatermarkTracker<P, O>`](WatermarkTracker) also
//! keeps a watermark per partition ([`committable`](Tracker::committable)),
//! a [`ProgressTracker<P, O>`](ProgressTracker) also keeps the progress
//! beyond it ([`progress`](Tracker::progress)). A call a tracker's mode does
//! not support does not compile, and a mode's `send` and `ack` run no code
//! of the features it lacks. Each comes [`Inline`](mode::Inline) too, for
//! integer offsets ([`Builder::inline_offsets`]).
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
//! # Watermarks: committing without a barrier
//!
//! A barrier flush covers everything sent before it; when the sink is slower
//! than the source, a flush that times out is merged into the next, which
//! covers more, and offsets can stop moving altogether (Kafka's "death
//! spiral", KAFKA-12226). A tracker built with [`Builder::watermarks`] keeps,
//! per partition, the offset of the longest acked prefix, and
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
//! assert_eq!(tracker.committable()["orders"], 2); // Kafka: commit 3
//! ```
//!
//! Use the barrier flush when offsets must be committed together or the
//! hot path must stay minimal; use watermarks when the sink can fall behind
//! or partitions progress independently.
//!
//! # Rebalances and progress
//!
//! [`Tracker::revoke`] ends a partition's life when a rebalance takes it
//! away or its failed record must be redone: its unresolved records are
//! released and the next send starts it afresh.
//! [`Tracker::drain_partition`] first waits, with a timeout, for what is in
//! flight there, for a clean hand-off. A tracker built with
//! [`Builder::progress`] also keeps what is done past a partition's first
//! gap, and [`Tracker::progress`] hands out a [`Progress`] per changed
//! partition: [`Progress::next`] is the offset to commit (Kafka's, as it
//! is) and [`Progress::encode`] fits the commit's metadata, so the next owner
//! skips with [`Progress::is_done`] what was done.
//!
//! # Async
//!
//! [`Flush::wait_async`], [`Tracker::drain_async`],
//! [`Tracker::drain_partition_async`] and [`Tracker::send_async`] await the
//! same conditions as their blocking twins without blocking a thread, on any
//! executor (the crate depends on none: the last resolution wakes the
//! task's [`Waker`](std::task::Waker)). Use your runtime's timeout; dropping
//! a future cancels the wait and leaves the flush usable.
//!
//! # Guarantees
//!
//! The same numbers are used in the README, the
//! [`implementation`] notes and the tests.
//!
//! 1. **Nothing lost.** Every accepted record is resolved exactly once or
//!    stays pending and counted in [`Tracker::in_flight`].
//! 2. **The seal is linearizable with send.** A send is covered by a flush
//!    or not, never half: a send that returned before `begin_flush` is
//!    covered, one that started after it returned is not, and every send
//!    that happens before a covered send is covered too. A flush returns,
//!    per partition, the offset of the latest covered record in send order
//!    (of two concurrent sends, either), and never that of an uncovered
//!    one.
//! 3. **No premature commit.** [`Flush::wait`] returns offsets only when
//!    every covered record was acked; a covered failure gives
//!    [`FlushError::Failed`], never offsets.
//! 4. **No lost wake-up.** The last covered ack wakes a waiting flush
//!    promptly.
//! 5. **Interrupt.** [`Tracker::interrupt`] is delivered to exactly one
//!    waiting call: the one in progress, else the next.
//! 6. **Exactly-once resolution.** A forged, stale, foreign or duplicate
//!    ticket (any `u64`) is an error and changes nothing. See [`Ticket`]
//!    for the tag width's ABA bound.
//! 7. **Abort merges.** An aborted (or dropped) flush is merged into the
//!    next one; later sends win.
//! 8. **One flush at a time.** A second `begin_flush` is
//!    [`BeginFlushError::InProgress`]; `commit` without a successful `wait`
//!    is [`FlushError::NotReady`].
//! 9. **Close.** After [`Tracker::close`] sends are refused with their
//!    record, and a final flush covers everything accepted before.
//! 10. **Lock-free.** `send`, `ack`, `fail`, `begin_flush`, `commit`,
//!     `abort` take no lock and never wait for another thread, but for a
//!     few steps of another sender of the same partition that holds no
//!     lock and runs no user code: on a tracker with watermarks, a send
//!     refused for want of room, which owes its offset, may spin while
//!     another refusal records or clears its debt (see
//!     `Builder::watermarks`); on a progress tracker, a send whose budget
//!     walk meets a sender between its link and its link store waits for
//!     that store, as the advance does.
//! 11. **No panics.** No public call panics; no `unsafe` is reachable by
//!     misuse.
//! 12. **Watermarks.** A watermark never passes a record that was not
//!     acked; each advance is returned by exactly one `committable` call; a
//!     failed record stops its own partition's watermark and no other.
//! 13. **Drain.** [`Tracker::drain`] returns once every record sent before
//!     it is resolved (and, with watermarks, once `committable` has them
//!     all), honouring [`Tracker::interrupt`] and its timeout.
//! 14. **Panic safety.** A panic in user code (the `Drop`, `Clone`, `Hash`
//!     or `Eq` of `P` or `O`, or a [`Waker`](std::task::Waker)) leaves the
//!     tracker consistent and usable: no value is used after it was dropped
//!     or dropped twice, no record is counted without a ticket, no advance
//!     is lost. The calls that resolve, commit and take offsets run no user
//!     `Drop`: an offset is dropped when its slot is reused by a later
//!     `send`, before that send takes anything (or when the tracker drops).
//! 15. **Fail fast.** [`Flush::wait`] returns [`FlushError::Failed`] as
//!     soon as a covered record has failed, waking a waiting call, without
//!     waiting for the covered records still in flight. (On a watermark
//!     tracker a failure counts once its partition's watermark reaches it.)
//! 16. **Revoke.** After [`Tracker::revoke`] of a partition, its unresolved
//!     records are released (their tickets answer
//!     [`ResolveError::Revoked`]), nothing of its ended life is waited for
//!     or reported, its failure is forgotten, and a later send starts it
//!     anew; its last untaken watermark goes to exactly one of
//!     `committable()` and [`Revoked::committable`].
//! 17. **Progress.** [`Tracker::progress`] reports an offset done only if
//!     its record was acked (or the offset was skipped) before the call
//!     returned; [`Progress::next`] never moves back within a life;
//!     [`Progress::encode`] never exceeds the budget given to
//!     [`Builder::progress`], which `send` enforces per partition: a send is
//!     refused for the budget only when some way its partition's records
//!     could still end would outgrow it (up to the run-length form's slack
//!     of a byte per stretch where acked and unacked records interleave).
//!
//! A failed record stays covered by every later flush, which keeps
//! returning `Failed`: restart from the last committed offsets (that is
//! at-least-once delivery).
//!
//! # Glossary
//!
//! - **record**: one unit handed to the sink, named by a source partition
//!   `P` and a source offset `O`; [`Tracker::send`] accepts it.
//! - **ticket**: the receipt `send` returns ([`Ticket`]); it is resolved
//!   exactly once, by `ack` (delivered) or `fail` (lost for good), or
//!   released by a revoke. [`Ticket::into_raw`] makes it a `u64`.
//! - **generation**: the records sent between two seals. Exactly one is
//!   open; `send` enters it, and `begin_flush` *seals* it in one atomic
//!   step.
//! - **flush**: a commit barrier ([`Flush`]) covering every sealed
//!   generation not yet committed; it returns each partition's offset of
//!   the latest covered record once all of them are acked.
//! - **watermark**: per partition, the offset of the latest record such
//!   that it and every earlier one were acked (the *last done* offset, as
//!   flushes and [`Revoked::committable`] give too: commit it + 1 to
//!   Kafka).
//! - **progress**: on a tracker built with [`Builder::progress`], what is
//!   done past the watermark too ([`Progress`]); its `next()` is the *next
//!   to read*, Kafka's committed offset, commit it as it is.
//! - **owed**: on a tracker with watermarks, an offset refused with
//!   [`SendError::Full`] must be sent before any other offset of its
//!   partition is accepted (others get [`SendError::OutOfOrder`]), so a
//!   refusal never becomes a gap counted as done, or one the watermark
//!   passes.
//! - **life**: a partition's records from its first send (or the send
//!   after a revoke) to the next revoke. Nothing of an ended life (a late
//!   ack, a send that raced the revoke) changes what the new life reports.
//! - **revoke**: [`Tracker::revoke`] ends a partition's life, releasing
//!   its unresolved records (their tickets answer
//!   [`ResolveError::Revoked`]) and handing over its last untaken
//!   watermark.
//! - **drain**: waiting until records are resolved without committing:
//!   [`Tracker::drain`] for everything sent before it (at shutdown),
//!   [`Tracker::drain_partition`] for one partition (before a revoke).
//!
//! The design, memory layout and every memory ordering are described in
//! [`implementation`]; how each guarantee is checked is in the repository's
//! `VERIFICATION.md`.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, missing_debug_implementations)]

// The modules holding `Tracker`'s public calls come first, in the order a
// user meets them: the API docs list the calls in this order, one group
// per module (make, send, resolve, commit at a barrier, by watermark, by
// progress, partitions' lives, observe, shut down).
mod failed;
mod progress;
mod resolve;
mod revoke;
mod seal;
mod send;
mod shutdown;
mod stats;
mod tracker;
mod watermark;

mod batch;
mod cell;
mod counts;
mod error;
mod flush;
mod future;
mod generation;
mod inline;
pub mod mode;
mod pages;
mod partition;
mod permits;
mod slab;
pub mod store;
mod sync;
mod ticket;
mod waiter;

pub use error::{
    BeginFlushError, DrainError, FlushError, Limit, Refused, ResolveBatchError, ResolveError,
    SendBatchError, SendError,
};
pub use failed::{FailedBy, FailedRecord, NAMED_FAILURES, PER_LIFE};
pub use flush::{Flush, OwnedFlush};
pub use inline::InlineOffset;
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

/// Whether this process's trackers order a send against a concurrent
/// [`revoke`](Tracker::revoke) with the `membarrier` system call (Linux
/// 4.14 and later), or with a full fence on both sides.
///
/// With the call, a send's side of the barrier is a compiler fence and a
/// revoke pays for both (one system call, a few microseconds on a large
/// machine); without it (another system, an older kernel, a seccomp
/// filter that forbids the call, Miri, or the environment variable
/// `INFLIGHT_NO_MEMBARRIER` set to anything but `0` when the first
/// tracker is made), a send pays one full fence, which is no more than
/// the locked instructions the barrier replaced. The choice is made once
/// per process; the answer never changes afterwards. Correctness is the
/// same either way.
///
/// ```
/// let _tracker = inflight::Tracker::<&str, u64>::new();
/// println!("membarrier in use: {}", inflight::uses_membarrier());
/// ```
pub fn uses_membarrier() -> bool {
    sync::register_barrier()
}

#[doc = include_str!("../IMPLEMENTATION.md")]
pub mod implementation {}

/// Every Rust block of `README.md`, run as a doc test by `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Every Rust block of `GUIDE.md` (the rest of the README: recovery, stopping,
/// back-pressure, metrics, guarantees), run as a doc test by `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../GUIDE.md")]
pub struct GuideDoctests;
