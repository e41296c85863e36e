//! The tracker: its state, its constructors and the calls that only read
//! or flag it (`close`, `interrupt`, `in_flight`).
//!
//! This module owns the open-generation pointer, the chain from the oldest
//! uncommitted generation to the open one, the `closed`, `interrupted` and
//! `flushing` flags, and the flush carry (which only the holder of
//! `flushing`, the live [`Flush`], may touch). The calls that change them
//! live beside it: `send` (the send path), `resolve`
//! (`ack`, `fail`), `seal` (`begin_flush`, `drain` and the captures). See
//! [`crate::implementation`] for the whole design.

use crate::counts::Shards;
use crate::flush::Carry;
use crate::generation::Generation;
use crate::mode::{Barrier, Mode};
use crate::partition::Partitions;
use crate::permits::Permits;
use crate::progress::ProgressConfig;
use crate::slab::Slab;
use crate::sync::epoch::{self, Atomic, Guard, Owned};
use crate::sync::{thread_index, AtomicBool, AtomicU64, Ordering, UnsafeCell};
use crate::ticket::MAX_SLOTS;
use crate::waiter::Waiter;
use crate::watermark::Watermarks;
use std::any::Any;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;

/// In a word of wake flags (see [`Tracker::wake_flags`]): wake the
/// waiters of a flush or drain.
pub(crate) const WAKE_WAITERS: u8 = 1;
/// In a word of wake flags: wake the senders waiting for room.
pub(crate) const WAKE_ROOM: u8 = 2;

/// Tracks records in flight and tells which source offsets are safe to
/// commit.
///
/// `send` a record when you hand it to the sink and keep the [`Ticket`](crate::Ticket);
/// `ack` (or `fail`) the ticket when the sink reports delivery. A committer
/// calls [`begin_flush`](Tracker::begin_flush), which seals the records sent
/// so far, then [`Flush::wait`](crate::Flush::wait) returns, once every one of them was acked,
/// the latest offset of each partition among them. `send`, `ack`, `fail`,
/// `begin_flush`, `commit` and `abort` never lock and never wait for another
/// thread; only `wait` blocks.
///
/// `Tracker` is `Send + Sync`: share it by reference or in an `Arc`.
///
/// ```
/// use std::time::Duration;
/// use inflight::Tracker;
///
/// let tracker = Tracker::new();
/// let a = tracker.send("users", 10_u64).unwrap();
/// let b = tracker.send("users", 11_u64).unwrap();
///
/// let mut flush = tracker.begin_flush().unwrap();   // covers a and b
/// let late = tracker.send("users", 12_u64).unwrap(); // not covered
/// tracker.ack(b).unwrap();
/// tracker.ack(a).unwrap();
/// let offsets = flush.wait(Duration::from_secs(1)).unwrap();
/// assert_eq!(offsets["users"], 11); // 12 is not covered, so not committable
/// flush.commit().unwrap();
/// tracker.ack(late).unwrap();
/// ```
pub struct Tracker<P, O, M: Mode = Barrier> {
    /// This tracker's id in raw tickets.
    pub(crate) id: u8,
    /// A bounded tracker's permits, one per record in flight, and the
    /// bound (see `permits`); `None` for an unbounded tracker.
    pub(crate) permits: Option<Permits>,
    pub(crate) slots: Slab<O>,
    pub(crate) partitions: Partitions<P>,
    /// Where records are counted into generations (see `generation`).
    pub(crate) shards: Shards,
    /// The generation sends enter. Never null.
    pub(crate) open: Atomic<Generation>,
    /// The number of `open`, or of one that was open before it: it moves
    /// (by `fetch_max`) only after `open` did, and before any count shard
    /// is captured for the generation it leaves. Senders read this rather
    /// than `open`, so they need no epoch guard.
    pub(crate) open_id: AtomicU64,
    /// The oldest generation not yet folded into the flush carry. Never null;
    /// following `next` from here reaches `open`.
    pub(crate) oldest: Atomic<Generation>,
    /// Set while a `Flush` is alive: the holder owns `carry`.
    pub(crate) flushing: AtomicBool,
    /// Offsets and failures of generations already folded; see `Carry`.
    pub(crate) carry: UnsafeCell<Carry>,
    /// An interrupt not yet delivered to a `wait`.
    pub(crate) interrupted: AtomicBool,
    pub(crate) closed: AtomicBool,
    pub(crate) waiter: Waiter,
    /// Where `send_timeout` and `send_async` wait for room.
    pub(crate) room: Waiter,
    /// Per-partition watermark queues; used only when `M::WATERMARKS`
    /// (empty pages otherwise: a few hundred bytes, never touched).
    pub(crate) watermarks: Watermarks,
    /// Set by `Builder::progress`; read only when `M::PROGRESS`.
    pub(crate) progress: ProgressConfig<O>,
    /// The failed records named for `failed_records` (see `failed`).
    pub(crate) failures: crate::failed::Log<O>,
    pub(crate) _mode: PhantomData<fn() -> M>,
    /// What `sync::register_barrier` answered when the tracker was made:
    /// whether the light barrier is a compiler fence. Kept here so that a
    /// send's barriers read a field of the tracker, not a global (issue
    /// 41); the mode never changes once decided.
    pub(crate) expedited: bool,
}

// SAFETY: the tracker shares `P` (partition index snapshots) and `O` (slot
// values, cloned by the flusher and dropped by whichever thread frees the
// slot) between threads, so both must be `Send + Sync`. Its own cells are
// guarded: a slot's value and generation by the slot's state word (only the
// owner of the current state transition touches them), the carry by the
// `flushing` flag, each thread-owned free list by its thread number (held
// by one live thread at a time), and everything else is atomic.
unsafe impl<P: Send + Sync, O: Send + Sync, M: Mode> Send for Tracker<P, O, M> {}
// SAFETY: as above.
unsafe impl<P: Send + Sync, O: Send + Sync, M: Mode> Sync for Tracker<P, O, M> {}

/// **Make a tracker.** [`new`](Self::new) and
/// [`with_capacity`](Self::with_capacity) give a barrier tracker;
/// [`builder`](Self::builder) chooses a capacity and a
/// [mode](crate::mode): [`watermarks`](Builder::watermarks) for a
/// [`WatermarkTracker`](crate::WatermarkTracker),
/// [`progress`](Builder::progress) for a
/// [`ProgressTracker`](crate::ProgressTracker).
///
/// ```
/// use inflight::{ProgressTracker, Tracker, WatermarkTracker};
/// let barrier: Tracker<&str, u64> = Tracker::with_capacity(10_000);
/// let marks: WatermarkTracker<&str, u64> = Tracker::builder().watermarks().build();
/// let resumable: ProgressTracker<&str, u64> = Tracker::builder().progress(4096).build();
/// # let _ = (barrier, marks, resumable);
/// ```
impl<P, O> Tracker<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// An unbounded barrier tracker: it grows on demand, up to its internal
    /// limit of 2^24 − 1 slots, one per record it holds: records in flight
    /// (with watermarks, those the watermark has not passed: acked records
    /// held behind an unresolved one count too), plus the offsets kept for
    /// commits (one per partition and unflushed generation, or a
    /// partition's untaken watermark). At that limit `send` returns
    /// [`SendError::Full`](crate::SendError::Full) naming
    /// [the internal limit](crate::Limit::Internal), not a capacity: no
    /// resolution makes room until the records held are let go (acked, and
    /// passed by their watermark; or revoked). A
    /// [capacity](Self::with_capacity) bounds the memory instead. Partitions
    /// have a limit of their own (see [`partitions`](Self::partitions)).
    ///
    /// ```
    /// let tracker: inflight::Tracker<String, i64> = inflight::Tracker::new();
    /// assert_eq!(tracker.in_flight(), 0);
    /// ```
    pub fn new() -> Self {
        Self::build(None, ProgressConfig::none())
    }

    /// A barrier tracker that holds at most `max_in_flight` records in
    /// flight (as [`in_flight`](Self::in_flight) counts them): a further
    /// `send` returns [`SendError::Full`](crate::SendError::Full) with the
    /// record, until a resolution makes room. Values above 2^24 − 1 are
    /// lowered to it. See [`Builder::capacity`] for what it bounds on a
    /// tracker with watermarks, and the memory it bounds.
    ///
    /// ```
    /// use inflight::{SendError, Tracker};
    /// let tracker = Tracker::with_capacity(2);
    /// let a = tracker.send(0_u8, 1_u32).unwrap();
    /// let _b = tracker.send(0_u8, 2_u32).unwrap();
    /// assert!(matches!(tracker.send(0, 3), Err(SendError::Full(0, 3, _))));
    /// tracker.ack(a).unwrap();
    /// let _c = tracker.send(0_u8, 3_u32).unwrap();
    /// ```
    pub fn with_capacity(max_in_flight: usize) -> Self {
        Self::build(Some(max_in_flight.min(MAX_SLOTS)), ProgressConfig::none())
    }

    /// A [`Builder`] for a tracker with options: a capacity, and a mode:
    /// [watermarks](Builder::watermarks) (a
    /// [`WatermarkTracker`](crate::WatermarkTracker)) or
    /// [progress](Builder::progress) (a
    /// [`ProgressTracker`](crate::ProgressTracker)).
    ///
    /// ```
    /// let tracker: inflight::WatermarkTracker<&str, u64> =
    ///     inflight::Tracker::builder().capacity(10_000).watermarks().build();
    /// assert_eq!(tracker.capacity(), Some(10_000));
    /// ```
    pub fn builder() -> Builder<P, O> {
        Builder {
            capacity: None,
            progress: ProgressConfig::none(),
            _types: PhantomData,
            _mode: PhantomData,
        }
    }
}

impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    pub(crate) fn build(capacity: Option<usize>, progress: ProgressConfig<O>) -> Self {
        // Once per process: decide whether a revoke's barrier is the system
        // call, so that sends take the light path from their first.
        let expedited = crate::sync::register_barrier();
        // SAFETY: the generation is not shared with anyone yet.
        let first = Owned::new(Generation::new(0, std::ptr::null()))
            .into_shared(unsafe { epoch::unprotected() });
        Self {
            id: crate::sync::next_tracker_id(),
            expedited,
            permits: capacity.map(Permits::new),
            slots: Slab::new(capacity),
            partitions: Partitions::new(),
            // SAFETY: `first` was just made from an owned generation.
            shards: Shards::new(unsafe { first.deref() }),
            open: Atomic::from(first),
            open_id: AtomicU64::new(0),
            oldest: Atomic::from(first),
            flushing: AtomicBool::new(false),
            carry: UnsafeCell::new(Carry::default()),
            interrupted: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            waiter: Waiter::new(),
            room: Waiter::new(),
            watermarks: Watermarks::new(M::PROGRESS, progress.max_metadata_bytes),
            progress,
            failures: crate::failed::Log::new(),
            _mode: PhantomData,
        }
    }
}

impl<P, O, M: Mode> Tracker<P, O, M> {
    /// The watermark queues, on a tracker whose mode keeps them. The mode
    /// is a constant: on a barrier tracker this is `None` at compile time,
    /// and the code behind it is not there at all.
    #[inline(always)]
    pub(crate) fn marks(&self) -> Option<&Watermarks> {
        if M::WATERMARKS {
            Some(&self.watermarks)
        } else {
            None
        }
    }

    /// The progress configuration, on a progress tracker (a constant test,
    /// as for [`marks`](Self::marks)).
    #[inline(always)]
    pub(crate) fn progress_config(&self) -> Option<ProgressConfig<O>> {
        if M::PROGRESS {
            Some(self.progress)
        } else {
            None
        }
    }

    /// Takes a permit for a send on the thread numbered `home` (see
    /// `permits`): false when the capacity is all in use. Always true on an
    /// unbounded tracker.
    #[inline]
    pub(crate) fn take_permit(&self, home: usize) -> bool {
        self.permits
            .as_ref()
            .is_none_or(|permits| permits.take(home))
    }

    /// Gives a permit back. Returns true if a sender waits for room: the
    /// caller then calls [`wake`](Self::wake) with `room`, last (wakers are
    /// user code).
    #[inline]
    #[must_use]
    pub(crate) fn return_permit(&self) -> bool {
        self.return_permits(1)
    }

    /// Gives `n` permits back at once (a batch's resolutions), as
    /// [`return_permit`](Self::return_permit) gives one.
    #[inline]
    #[must_use]
    pub(crate) fn return_permits(&self, n: usize) -> bool {
        match &self.permits {
            Some(permits) if n != 0 => permits.give_back(n, thread_index()),
            _ => false,
        }
    }

    /// For a sender registered in `room`, after `send` said `Full` for want
    /// of a permit: true if a permit is free now (send again); false once
    /// the permits are flagged, so that the next
    /// [`return_permit`](Self::return_permit) sees it and wakes the sender
    /// (see `permits`).
    pub(crate) fn want_room(&self) -> bool {
        // No permits, no `Full` for want of one: send again.
        self.permits.as_ref().is_none_or(Permits::want_room)
    }

    /// Wakes the waiters of a flush or drain (`waiters`) and the senders
    /// waiting for room (`room`). Wakers are user code: call this last. If
    /// one panics, every waiter is still woken, then the first panic goes on.
    #[inline]
    pub(crate) fn wake(&self, waiters: bool, room: bool) {
        if !(waiters || room) {
            return;
        }
        if let Err(panic) = self.wake_catching(waiters, room) {
            std::panic::resume_unwind(panic);
        }
    }

    /// [`wake`](Self::wake) for what a resolution gathered in one word of
    /// [`WAKE_WAITERS`] and [`WAKE_ROOM`] flags. Wakers are user code: call
    /// this last.
    #[inline]
    pub(crate) fn wake_flags(&self, flags: u8) {
        if flags != 0 {
            self.wake(flags & WAKE_WAITERS != 0, flags & WAKE_ROOM != 0);
        }
    }

    /// [`wake`](Self::wake), swallowing a waker's panic: for a caller that
    /// is already unwinding.
    pub(crate) fn wake_quietly(&self, waiters: bool, room: bool) {
        let _ = self.wake_catching(waiters, room);
    }

    #[cold]
    fn wake_catching(&self, waiters: bool, room: bool) -> Result<(), Box<dyn Any + Send>> {
        let woken = if waiters {
            self.waiter.wake_catching()
        } else {
            Ok(())
        };
        let made_room = if room {
            self.room.wake_catching()
        } else {
            Ok(())
        };
        woken.and(made_room)
    }

    /// Counts `n` failed resolutions of records of `partition` sent in
    /// `life` in `generation` (before their leave), and marks the
    /// partition failed in that life for `Stats::stopped`. Cold: a
    /// failure allocates its generation's note anyway.
    #[cold]
    pub(crate) fn add_failed(&self, generation: &Generation, partition: u32, life: u32, n: u64) {
        generation.add_failed(partition, life, n);
        if let Some(lifecycle) = self.partitions.lifecycle(partition as usize) {
            let marked = crate::partition::FAILED_IN | u64::from(life);
            // Relaxed, both: read by `stats` as a statistic; the flush
            // decides from the generation's note. Never back to an older
            // life: a failure of an ended life that lands late leaves a
            // newer life's mark.
            let _ =
                lifecycle
                    .failed_in
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |seen| {
                        let older = seen != 0 && crate::watermark::newer(seen as u32, life);
                        (seen != marked && !older).then_some(marked)
                    });
        }
    }

    /// Whether `life` is the current life of partition `partition`: no
    /// revoke ended it.
    pub(crate) fn is_current_life(&self, partition: u32, life: u32) -> bool {
        self.partitions
            .life(partition as usize)
            // Acquire: pairs with the revoke's bump, so what the revoke did
            // before (releasing the old life's records) is seen too.
            .is_some_and(|current| current.load(Ordering::Acquire) == life)
    }

    /// Calls `f` on each generation from `oldest` on, through the one
    /// numbered `upto` if given, else through the open one. Generations
    /// numbered up to `upto` that already left the chain are skipped: they
    /// were folded, so they had no records left.
    pub(crate) fn walk(&self, guard: &Guard, upto: Option<u64>, mut f: impl FnMut(&Generation)) {
        // Acquire: see the generations' initialisation.
        let mut current = self.oldest.load(Ordering::Acquire, guard);
        // SAFETY: generations reachable from `oldest` under a guard are freed
        // only through `defer_destroy`, after the guard is released.
        while let Some(generation) = unsafe { current.as_ref() } {
            if upto.is_some_and(|upto| generation.id > upto) {
                return;
            }
            f(generation);
            // Acquire: see the next generation's initialisation.
            current = generation.next.load(Ordering::Acquire, guard);
        }
    }

    /// Takes a pending interrupt, if any.
    pub(crate) fn take_interrupt(&self) -> bool {
        // Mutant `ignored_interrupt` (loom suite only): `wait` never sees an
        // interrupt, the second half of KAFKA-2867.
        #[cfg(inflight_mutant = "ignored_interrupt")]
        return false;
        // Acquire: pairs with `interrupt`'s store; the swap consumes the
        // interrupt, so exactly one `wait` gets it.
        self.interrupted.swap(false, Ordering::AcqRel)
    }

    /// Ends the current flush's ownership of the carry.
    pub(crate) fn end_flush(&self) {
        // Release: hands the carry to the next `begin_flush` (Acquire).
        self.flushing.store(false, Ordering::Release);
    }
}

/// Builds a [`Tracker`] with options; from [`Tracker::builder`]. Its mode
/// ([`Barrier`] unless [`watermarks`](Self::watermarks) or
/// [`progress`](Self::progress) says otherwise) is the built tracker's.
///
/// ```
/// use inflight::{Tracker, WatermarkTracker};
/// let plain: Tracker<u32, u64> = Tracker::builder().build();
/// assert!(plain.capacity().is_none());
/// let bounded: WatermarkTracker<u32, u64> =
///     Tracker::builder().capacity(100).watermarks().build();
/// assert_eq!(bounded.capacity(), Some(100));
/// ```
#[must_use = "a builder does nothing until `build`"]
pub struct Builder<P, O, M: Mode = Barrier> {
    pub(crate) capacity: Option<usize>,
    pub(crate) progress: ProgressConfig<O>,
    pub(crate) _types: PhantomData<fn() -> (P, O)>,
    pub(crate) _mode: PhantomData<M>,
}

impl<P, O, M: Mode> Builder<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// Bounds the records in flight, as [`Tracker::with_capacity`] does.
    /// A capacity of 0 refuses every record, for good: `send`,
    /// [`send_timeout`](Tracker::send_timeout) and
    /// [`send_async`](Tracker::send_async) all answer
    /// [`SendError::Full`](crate::SendError::Full) at once.
    ///
    /// With [watermarks](Self::watermarks) (or [progress](Self::progress)),
    /// a record holds its place in the capacity until the watermark has
    /// passed it, not just until it is resolved: acked records held behind
    /// an unresolved one of their partition (a gap, on a progress tracker)
    /// count against it, as they count in
    /// [`in_flight`](Tracker::in_flight) (see
    /// [`Stats::held_records`](crate::Stats::held_records)). So one stuck
    /// record fills the capacity with the records acked behind it, and
    /// `send` then refuses every partition until it is resolved (or its
    /// partition revoked). A failed record holds no permit: the watermark
    /// stops there, and passes the records behind it. On a progress
    /// tracker a failed record and the records passed after it keep their
    /// slots (not their permits) for [`progress`](crate::Tracker::progress),
    /// at most 4,096 per failed partition (see [`progress`](Self::progress)),
    /// until its life ends: that many slots beyond the bound below.
    ///
    /// Memory: a tracker of capacity `N` holds at most `N` records, and
    /// the slots it allocates (each keeping its last offset until it is
    /// reused, see [`Stats::slots`](crate::Stats::slots)) stay within
    /// `2N + 1,024`, plus, on a progress tracker, those a failure keeps
    /// (above), plus, however many threads send and resolve, a few
    /// per partition (the offsets kept for commits: the latest of each
    /// unflushed generation, or an untaken watermark), one per thread
    /// between taking a slot and being refused a permit, and 128 per
    /// thread that finds every free slot taken at the same moment as
    /// another: freed slots wait on per-thread lists of at most `N` slots
    /// in all, and go back where every thread's sends find them.
    pub fn capacity(mut self, max_in_flight: usize) -> Self {
        self.capacity = Some(max_in_flight.min(MAX_SLOTS));
        self
    }

    /// Keeps a watermark per partition, for [`Tracker::committable`]: the
    /// last done offset of each partition (the latest record such that it
    /// and every earlier record of its partition were acked), available at
    /// any moment without a flush. The tracker built is a
    /// [`WatermarkTracker`](crate::WatermarkTracker) (on a builder already
    /// given [`progress`](Self::progress), this changes nothing: progress
    /// keeps watermarks).
    ///
    /// It costs each record a place in its partition's queue (one more
    /// atomic compare-and-swap per send, one per chunk of a batch, and an
    /// advance per resolution), so it is off unless asked for. On such a
    /// tracker a record counts as in flight
    /// ([`in_flight`](Tracker::in_flight), [`drain`](Tracker::drain),
    /// [`Flush::pending`](crate::Flush::pending)) until the watermark has
    /// passed it: an acked record behind an unacked one of its partition
    /// is still counted, and keeps its slot. A [capacity](Self::capacity)
    /// counts them too.
    ///
    /// An offset refused for want of room
    /// ([`SendError::Full`](crate::SendError::Full), a batch's first unsent
    /// offset, a `send_timeout` that gives up) is *owed*: until it is sent,
    /// or the partition revoked, every other send of the partition is
    /// refused [`OutOfOrder`](crate::SendError::OutOfOrder), so the
    /// watermark never passes an offset that was never sent. The tracker
    /// tells the owed offset by its `Hash` (hence the bound; run on a
    /// refusal and on a send to an owing partition only), so that hash must
    /// tell offsets apart: one that hashes only part of an offset (a
    /// position's file but not its line) lets another offset of the same
    /// hash pass for the owed one. Integers, strings, and a derived `Hash`
    /// over every field do; then a different offset passes only if the
    /// 64-bit hashes collide, one chance in 2^64.
    ///
    /// ```
    /// use inflight::{SendError, Tracker};
    ///
    /// let tracker: inflight::WatermarkTracker<&str, u64> =
    ///     Tracker::builder().capacity(1).watermarks().build();
    /// let first = tracker.send("p", 300).unwrap();
    /// assert!(matches!(tracker.send("p", 360), Err(SendError::Full("p", 360, _))));
    /// tracker.ack(first).unwrap();
    /// // 360 is owed: 365 waits for it, so the watermark cannot pass it.
    /// assert!(matches!(tracker.send("p", 365), Err(SendError::OutOfOrder("p", 365))));
    /// tracker.ack(tracker.send("p", 360).unwrap()).unwrap();
    /// tracker.ack(tracker.send("p", 365).unwrap()).unwrap();
    /// assert_eq!(tracker.committable()["p"], 365);
    /// ```
    pub fn watermarks(self) -> Builder<P, O, M::WithWatermarks>
    where
        O: Hash,
    {
        Builder {
            capacity: self.capacity,
            progress: ProgressConfig {
                key_of: crate::progress::key_of::<O>,
                ..self.progress
            },
            _types: PhantomData,
            _mode: PhantomData,
        }
    }

    /// Keeps each partition's latest offset in the tracker's partition
    /// cells, inline, instead of keeping its record's slot for the flush:
    /// the tracker built is of mode [`Inline<M>`](crate::mode::Inline),
    /// for offsets of the primitive integer types
    /// ([`InlineOffset`](crate::InlineOffset): Kafka's `i64`, `u64`, ...).
    ///
    /// What it saves: a send no longer takes a hold on its slot, hands the
    /// hold of the record it displaces back, or publishes with a
    /// read-modify-write: two locked steps fewer per send and ack of a
    /// barrier tracker (four left of six; see the crate's `BENCHMARKS.md`),
    /// and a resolved record's slot is free at once. Nothing else changes:
    /// the same offsets are committed, with the same guarantees. An offset
    /// whose bits do not fit in 47 (a negative `i64`, or one from 2^47 - 1
    /// up) takes the held path, record by record.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::mode::Inline;
    /// use inflight::Tracker;
    ///
    /// let tracker: Tracker<&str, i64, Inline> = Tracker::builder().inline_offsets().build();
    /// let a = tracker.send("orders-0", 41).unwrap();
    /// let b = tracker.send("orders-0", -1).unwrap(); // too wide: held, still kept
    /// tracker.ack(a).unwrap();
    /// tracker.ack(b).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.wait(Duration::from_secs(1)).unwrap()["orders-0"], -1);
    /// flush.commit().unwrap();
    /// ```
    pub fn inline_offsets(self) -> Builder<P, O, M::Inlined>
    where
        O: crate::InlineOffset,
    {
        Builder {
            capacity: self.capacity,
            progress: self.progress,
            _types: PhantomData,
            _mode: PhantomData,
        }
    }

    /// The tracker.
    pub fn build(self) -> Tracker<P, O, M> {
        Tracker::build(self.capacity, self.progress)
    }
}

impl<P, O, M: Mode> fmt::Debug for Builder<P, O, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut builder = f.debug_struct("Builder");
        builder
            .field("capacity", &self.capacity)
            .field("watermarks", &M::WATERMARKS);
        if M::PROGRESS {
            builder.field("max_metadata_bytes", &self.progress.max_metadata_bytes);
        }
        builder.finish()
    }
}

impl<P, O> Default for Tracker<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<P, O, M: Mode> fmt::Debug for Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracker")
            .field("in_flight", &self.in_flight())
            .field("capacity", &self.capacity())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl<P, O, M: Mode> Drop for Tracker<P, O, M> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no thread can reach the chain any more, and
        // folded generations were already handed to the collector.
        let guard = unsafe { epoch::unprotected() };
        // Relaxed: exclusive access.
        let mut current = self.oldest.load(Ordering::Relaxed, guard);
        while !current.is_null() {
            // SAFETY: every generation from `oldest` on is owned by the chain
            // and reachable only from its predecessor (or `oldest`).
            let owned = unsafe { current.into_owned() };
            current = owned.next.load(Ordering::Relaxed, guard);
            drop(owned);
        }
    }
}
