//! The tracker: sends, resolutions, the chain of generations and the seal.
//!
//! This module owns the open-generation pointer, the chain from the oldest
//! uncommitted generation to the open one, the `closed`, `interrupted` and
//! `flushing` flags, and the flush carry (which only the holder of
//! `flushing`, the live [`Flush`], may touch). See [`crate::implementation`]
//! for the whole design.

use crate::flush::Carry;
use crate::generation::{entered_at, entered_from, Entry, Generation, Shards, SHARDS};
use crate::partition::Partitions;
use crate::slab::{Outcome, Slab, Slot, HELD, QUEUED};
use crate::sync::epoch::{self, Atomic, Guard, Owned, Shared};
use crate::sync::{
    thread_index, AtomicBool, AtomicU64, AtomicUsize, Ordering, UnsafeCell, SPINS_BEFORE_PARK,
};
use crate::ticket::{RawTicket, Ticket, MAX_SLOTS};
use crate::waiter::Waiter;
use crate::watermark::Watermarks;
use crate::{BeginFlushError, Flush, FlushError, ResolveError, SendError};
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// Tracks records in flight and tells which source offsets are safe to
/// commit.
///
/// `send` a record when you hand it to the sink and keep the [`Ticket`];
/// `ack` (or `fail`) the ticket when the sink reports delivery. A committer
/// calls [`begin_flush`](Tracker::begin_flush), which seals the records sent
/// so far, then [`Flush::wait`] returns, once every one of them was acked,
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
pub struct Tracker<P, O> {
    /// This tracker's id in raw tickets.
    id: u8,
    /// The bound on records in flight; `None` for an unbounded tracker.
    capacity: Option<usize>,
    /// Records in flight, counted only when `capacity` is set.
    permits: AtomicUsize,
    pub(crate) slots: Slab<O>,
    pub(crate) partitions: Partitions<P>,
    /// Where records are counted into generations (see `generation`).
    pub(crate) shards: Shards,
    /// The generation sends enter. Never null.
    open: Atomic<Generation>,
    /// The number of `open`, or of one that was open before it: it moves
    /// (by `fetch_max`) only after `open` did, and before any count shard
    /// is captured for the generation it leaves. Senders read this rather
    /// than `open`, so they need no epoch guard.
    open_id: AtomicU64,
    /// The oldest generation not yet folded into the flush carry. Never null;
    /// following `next` from here reaches `open`.
    pub(crate) oldest: Atomic<Generation>,
    /// Set while a `Flush` is alive: the holder owns `carry`.
    flushing: AtomicBool,
    /// Offsets and failures of generations already folded; see `Carry`.
    pub(crate) carry: UnsafeCell<Carry>,
    /// An interrupt not yet delivered to a `wait`.
    interrupted: AtomicBool,
    closed: AtomicBool,
    pub(crate) waiter: Waiter,
    /// Per-partition watermark queues, on a tracker built with them.
    pub(crate) watermarks: Option<Watermarks>,
}

// SAFETY: the tracker shares `P` (partition index snapshots) and `O` (slot
// values, cloned by the flusher and dropped by whichever thread frees the
// slot) between threads, so both must be `Send + Sync`. Its own cells are
// guarded: a slot's value and generation by the slot's state word (only the
// owner of the current state transition touches them), the carry by the
// `flushing` flag, each thread-owned free list by its thread number (held
// by one live thread at a time), and everything else is atomic.
unsafe impl<P: Send + Sync, O: Send + Sync> Send for Tracker<P, O> {}
// SAFETY: as above.
unsafe impl<P: Send + Sync, O: Send + Sync> Sync for Tracker<P, O> {}

impl<P, O> Tracker<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// An unbounded tracker: it grows on demand, up to 2^24 − 1 records in
    /// flight (plus one retained offset per partition), beyond which `send`
    /// returns [`SendError::Full`].
    ///
    /// ```
    /// let tracker: inflight::Tracker<String, i64> = inflight::Tracker::new();
    /// assert_eq!(tracker.in_flight(), 0);
    /// ```
    pub fn new() -> Self {
        Self::build(None, false)
    }

    /// A tracker that holds at most `max_in_flight` unresolved records: a
    /// further `send` returns [`SendError::Full`] with the record, until a
    /// resolution makes room. Values above 2^24 − 1 are lowered to it.
    ///
    /// ```
    /// use inflight::{SendError, Tracker};
    /// let tracker = Tracker::with_capacity(2);
    /// let a = tracker.send(0_u8, 1_u32).unwrap();
    /// let _b = tracker.send(0_u8, 2_u32).unwrap();
    /// assert!(matches!(tracker.send(0, 3), Err(SendError::Full(0, 3))));
    /// tracker.ack(a).unwrap();
    /// let _c = tracker.send(0_u8, 3_u32).unwrap();
    /// ```
    pub fn with_capacity(max_in_flight: usize) -> Self {
        Self::build(Some(max_in_flight.min(MAX_SLOTS)), false)
    }

    /// A [`Builder`] for a tracker with options: a capacity, and
    /// [watermarks](Builder::watermarks).
    ///
    /// ```
    /// let tracker: inflight::Tracker<&str, u64> =
    ///     inflight::Tracker::builder().capacity(10_000).watermarks().build();
    /// assert_eq!(tracker.capacity(), Some(10_000));
    /// assert!(tracker.has_watermarks());
    /// ```
    pub fn builder() -> Builder<P, O> {
        Builder {
            capacity: None,
            watermarks: false,
            _types: PhantomData,
        }
    }

    pub(crate) fn build(capacity: Option<usize>, watermarks: bool) -> Self {
        // SAFETY: the generation is not shared with anyone yet.
        let first = Owned::new(Generation::new(0, std::ptr::null()))
            .into_shared(unsafe { epoch::unprotected() });
        Self {
            id: crate::sync::next_tracker_id(),
            capacity,
            permits: AtomicUsize::new(0),
            slots: Slab::new(),
            partitions: Partitions::new(),
            shards: Shards::new(),
            open: Atomic::from(first),
            open_id: AtomicU64::new(0),
            oldest: Atomic::from(first),
            flushing: AtomicBool::new(false),
            carry: UnsafeCell::new(Carry::default()),
            interrupted: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            waiter: Waiter::new(),
            watermarks: watermarks.then(Watermarks::new),
        }
    }

    /// Records that `offset` of `partition` was handed to the sink, and
    /// returns the ticket to resolve when the sink reports back.
    ///
    /// The record enters the open generation: every flush begun after this
    /// call returns covers it. On error the record comes back:
    /// [`SendError::Full`] at capacity, [`SendError::Closed`] after
    /// [`close`](Self::close).
    ///
    /// Lock-free; allocates nothing in the steady state (a partition seen for
    /// the first time, and the first record of a partition in a generation,
    /// allocate once).
    ///
    /// The tracker keeps `offset` until the record is resolved and no flush
    /// or watermark needs it any more, and then until a later `send` reuses
    /// its slot (or the tracker drops): that send drops it, before it takes
    /// anything. So `ack`, `fail`, `commit` and `committable` never run an
    /// offset's `Drop`, and a `Drop` that panics surfaces here, with nothing
    /// sent. A panic in `P`'s `Hash`, `Eq`, `Clone` or `Drop` likewise sends
    /// nothing (guarantee 14).
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let ticket = tracker.send(("orders", 3), 1_000_u64).unwrap();
    /// assert_eq!(tracker.in_flight(), 1);
    /// # tracker.ack(ticket).unwrap();
    /// ```
    pub fn send(&self, partition: P, offset: O) -> Result<Ticket, SendError<P, O>> {
        // Relaxed: a fast path only; the re-check after entering decides.
        if self.closed.load(Ordering::Relaxed) {
            return Err(SendError::Closed(partition, offset));
        }
        // User code runs at three points, each before the record can be
        // resolved: `Hash`, `Eq` and `Clone` of `P` here, while nothing is
        // taken; the `Drop` of an old offset in `alloc`, which puts its slot
        // back if that panics; and the `Drop` of `partition` below, where
        // `Undo` backs the send out. Nothing after `publish` runs user code:
        // a panic there would lose the ticket of a counted record.
        let Some(number) = self.partitions.number(&partition) else {
            return Err(SendError::Full(partition, offset));
        };
        let home = thread_index();
        let Some((index, slot)) = self.slots.alloc(home) else {
            return Err(SendError::Full(partition, offset));
        };
        if !self.take_permit() {
            self.slots.recycle_slot(index, slot);
            return Err(SendError::Full(partition, offset));
        }
        // Held in advance: once the partition cell points at the slot, a
        // newer record may release the hold at any moment; and queued, on a
        // watermark tracker, until the watermark passes it.
        let holds = if self.watermarks.is_some() {
            HELD | QUEUED
        } else {
            HELD
        };
        // `number` < MAX_PARTITIONS < 2^32.
        let tag = self.slots.prepare(slot, offset, number as u32, holds);
        let mut undo = Undo {
            tracker: self,
            index,
            slot,
            holds,
            entered: None,
        };

        let shard = home % SHARDS;
        let (generation, wakes) = self.enter(shard);
        undo.entered = Some((shard, generation));
        if wakes {
            // A capture this send made for a sealer drained a generation.
            self.waiter.wake(); // user code: `undo` backs out if it panics
        }

        // Acquire: pairs with `close`'s Release store. Either this record's
        // entering CAS precedes the capture of its shard by a flush begun
        // after `close()` (so that flush covers it), or this send acquired
        // what the sealer did before capturing, the close included: through
        // the capture's CAS, if it read the moved shard and retried, or
        // through the Release `fetch_max` of the newer `open_id` it read.
        // Then this load sees the close. So a final flush covers every
        // accepted record.
        if self.closed.load(Ordering::Acquire) {
            let offset = undo.take_back();
            return Err(SendError::Closed(partition, offset));
        }
        drop(partition); // user code: `undo` backs out if it panics
        std::mem::forget(undo);

        self.slots
            .set_generation(slot, entered_at(generation, shard));
        if let Some(displaced) = generation.install(number, index) {
            // Frees the displaced record's slot if it was resolved; its
            // offset is dropped at the slot's reuse, not here.
            self.slots.release(displaced, HELD);
        }
        if let Some(watermarks) = &self.watermarks {
            // Before publishing: the record's resolution must find it linked.
            watermarks.link(&self.slots, number, index);
        }
        self.slots.publish(slot);
        Ok(Ticket::new(self.id, index, tag))
    }

    /// Counts a record into the open generation through `shard`, retrying
    /// past generations sealed under us, and returns that generation, and
    /// whether a capture made on the way drained one (the caller then wakes
    /// waiters, once it can afford user code). The reference is good while
    /// the record counts in the generation: until its resolution leaves it.
    #[inline]
    fn enter(&self, shard: usize) -> (&Generation, bool) {
        let mut wakes = false;
        loop {
            // Acquire: pairs with the sealers' Release `fetch_max`, so the
            // generation is in `open` (or older than it) and everything a
            // sealer did before moving this number on is visible.
            let id = self.open_id.load(Ordering::Acquire);
            // Unit tests widen the window between reading the open number
            // and entering (a send that may find its generation sealed).
            #[cfg(all(test, not(loom)))]
            std::thread::yield_now();
            match self.shards.enter(shard, id) {
                Entry::Entered => return (self.numbered(id), wakes),
                // Sealed under us: the sealer moved `open_id` on before
                // capturing the shard, so the next load sees a newer one.
                Entry::Moved => {}
                // A sealer moved `open` to this generation and has not yet
                // captured our shard for the one before: do it for them.
                Entry::Lagging => wakes |= self.catch_up(shard, id - 1),
            }
        }
    }

    /// The generation numbered `id`, in which the caller's record counts.
    #[inline]
    fn numbered(&self, id: u64) -> &Generation {
        // SAFETY: the guard protects nothing; what keeps the generations
        // alive is the caller's record in generation `id`, see below.
        let guard = unsafe { epoch::unprotected() };
        // Acquire: pairs with the Release CAS that published the generation.
        let open = self.open.load(Ordering::Acquire, guard);
        // SAFETY: `open` is never null, and it is generation `id` or a newer
        // one (`open_id` moves only after `open` does). Generations are
        // folded, and then freed, oldest first, and generation `id` cannot
        // be folded while the caller's record counts in it; so it and every
        // newer one, through the `prev` links between them, stay allocated
        // for as long as the caller uses them.
        let mut generation = unsafe { open.deref() };
        while generation.id != id {
            debug_assert!(generation.id > id);
            // SAFETY: as above.
            generation = unsafe { &*generation.prev };
        }
        generation
    }

    /// Captures every count shard for every generation numbered up to
    /// `upto`, oldest first, so that all of them are sealed: none admits a
    /// record any more, and the last resolution of each wakes waiters.
    /// Idempotent; concurrent callers share the work. Returns true if a
    /// capture drained a generation: the caller must wake waiters (user
    /// code, so once its own bookkeeping is done).
    #[must_use]
    pub(crate) fn capture_through(&self, upto: u64, guard: &Guard) -> bool {
        self.capture(0..SHARDS, upto, guard)
    }

    /// [`capture_through`](Self::capture_through) for one shard: what a
    /// sender does when its shard lags behind `open_id`.
    #[cold]
    #[must_use]
    fn catch_up(&self, shard: usize, upto: u64) -> bool {
        self.capture(shard..shard + 1, upto, &epoch::pin())
    }

    fn capture(&self, shards: std::ops::Range<usize>, upto: u64, guard: &Guard) -> bool {
        let mut wake = false;
        self.walk(guard, Some(upto), |generation| {
            for shard in shards.clone() {
                wake |= self.shards.capture(shard, generation);
                // Unit tests widen the window in which some shards count
                // for the new generation and others still for this one.
                #[cfg(all(test, not(loom)))]
                for _ in 0..4 {
                    std::thread::yield_now();
                }
            }
        });
        wake
    }

    /// Moves `open_id` up to `id` (never down: a slow sealer may come after a
    /// faster, later one).
    fn advance_open_id(&self, id: u64) {
        // Release: a sender that reads the new number (Acquire) sees `open`
        // moved and what this thread did before, such as a `close`.
        self.open_id.fetch_max(id, Ordering::Release);
    }

    /// Seals `current` if it is still open and opens its successor. Returns
    /// true if this call did the seal. Lock-free: a failed attempt means
    /// another thread sealed `current`, and this one helps move `open` on.
    pub(crate) fn seal(&self, current: Shared<'_, Generation>, guard: &Guard) -> bool {
        // SAFETY: `current` came from `open` under `guard`, so it is alive.
        let generation = unsafe { current.deref() };
        let fresh = Owned::new(Generation::new(generation.id + 1, generation));
        // AcqRel: Release publishes the fresh generation's initialisation to
        // whoever follows `next`; Acquire (on failure) sees the winner's.
        let (won, next) = match generation.next.compare_exchange(
            Shared::null(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
            guard,
        ) {
            Ok(next) => (true, next),
            // Lost: help the winner move `open` past `current`.
            Err(lost) => (false, lost.current),
        };
        // AcqRel: Release publishes `next` to whoever loads `open`. It fails
        // only when another thread (winner or helper) already moved it.
        let _ =
            self.open
                .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire, guard);
        // Then `open_id`, before the caller captures any shard: a sender
        // that finds its shard moved must find a newer number.
        self.advance_open_id(generation.id + 1);
        // Unit tests widen the window in which `current` is no longer open
        // but its shards still count for it, so the stress tests reach it.
        #[cfg(all(test, not(loom)))]
        std::thread::yield_now();
        won
    }

    /// Marks the ticket's record delivered.
    ///
    /// Fails, changing nothing, if the ticket belongs to another tracker
    /// ([`ResolveError::ForeignTracker`]); with a `Ticket` the type system
    /// already rules out resolving twice.
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let ticket = tracker.send(1_u16, "a".to_string()).unwrap();
    /// tracker.ack(ticket).unwrap();
    /// assert_eq!(tracker.in_flight(), 0);
    /// ```
    pub fn ack(&self, ticket: Ticket) -> Result<(), ResolveError> {
        self.resolve(ticket.into_raw(), Outcome::Ack)
    }

    /// Marks the ticket's record as failed for good. Every barrier flush that
    /// covers it then returns [`FlushError::Failed`](crate::FlushError::Failed):
    /// offsets never move past a record that was not delivered.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, Tracker};
    /// let tracker = Tracker::new();
    /// let ticket = tracker.send("p", 1_u64).unwrap();
    /// tracker.fail(ticket).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Failed { failed: 1 }));
    /// ```
    pub fn fail(&self, ticket: Ticket) -> Result<(), ResolveError> {
        self.resolve(ticket.into_raw(), Outcome::Fail)
    }

    /// [`ack`](Self::ack) for a ticket turned into an integer by
    /// [`Ticket::into_raw`]. Any `u64` is safe: a forged, stale, foreign or
    /// already resolved value returns an error and changes nothing.
    ///
    /// ```
    /// use inflight::{ResolveError, Tracker};
    /// let tracker = Tracker::<&str, u64>::new();
    /// assert!(tracker.ack_raw(0).is_err());
    /// assert!(tracker.ack_raw(u64::MAX).is_err());
    /// let raw = tracker.send("p", 1).unwrap().into_raw();
    /// tracker.ack_raw(raw).unwrap();
    /// assert_eq!(tracker.ack_raw(raw), Err(ResolveError::AlreadyResolved));
    /// ```
    pub fn ack_raw(&self, raw: u64) -> Result<(), ResolveError> {
        self.resolve(raw, Outcome::Ack)
    }

    /// [`fail`](Self::fail) for a raw ticket; any `u64` is safe, as with
    /// [`ack_raw`](Self::ack_raw).
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let raw = tracker.send("p", 1_u64).unwrap().into_raw();
    /// tracker.fail_raw(raw).unwrap();
    /// assert!(tracker.ack_raw(raw).is_err());
    /// ```
    pub fn fail_raw(&self, raw: u64) -> Result<(), ResolveError> {
        self.resolve(raw, Outcome::Fail)
    }

    fn resolve(&self, raw: u64, outcome: Outcome) -> Result<(), ResolveError> {
        let ticket = RawTicket::decode(raw);
        if ticket.tracker != self.id {
            return Err(ResolveError::ForeignTracker);
        }
        let resolved = self.slots.resolve(ticket.index, ticket.tag, outcome)?;
        if let Some(watermarks) = &self.watermarks {
            self.return_permit();
            // The record stays queued (so not freed) and live in its
            // generation until the watermark passes it; the advance (ours or
            // the thread's already advancing) counts it out of both.
            debug_assert!(!resolved.freed);
            watermarks.advance(
                &self.slots,
                resolved.partition as usize,
                |entered, n, failed| {
                    let (generation, shard) = entered_from(entered);
                    // SAFETY: the advance passes records it has not yet
                    // counted out of their generation, which therefore
                    // cannot have been folded.
                    let generation = unsafe { &*generation };
                    generation.add_failed(failed);
                    // A failure wakes waiters too: a flush that covers it
                    // fails at once (guarantee 15).
                    self.shards.leave_many(shard, generation, n) || failed != 0
                },
                || self.waiter.wake(),
            );
            return Ok(());
        }
        let freed = resolved.freed;
        let (generation, shard) = entered_from(resolved.generation);
        // SAFETY: `resolve` read the pointer while the record was LIVE and
        // its CAS proved it is this record's generation. The generation is
        // alive: this record still counts in it until our `leave` below, and
        // a generation is freed only after it drained.
        let generation = unsafe { &*generation };
        if outcome == Outcome::Fail {
            generation.add_failed(1);
        }
        self.return_permit();
        let drained = self.shards.leave(shard, generation);
        // The generation may be gone from here on; the slot is still ours.
        // Its offset stays in it until its reuse: no user code here.
        if freed {
            self.slots.recycle_slot(ticket.index, resolved.slot);
        }
        // A failure wakes waiters too: a flush that covers it fails at once
        // (guarantee 15). Wakers are user code: last.
        if drained || outcome == Outcome::Fail {
            self.waiter.wake();
        }
        Ok(())
    }

    /// Starts a barrier flush: seals the open generation (the linearization
    /// point: every send that returned before this call is covered, every
    /// send that starts after it is not) and returns the [`Flush`] to wait on.
    ///
    /// The flush also covers every earlier sealed generation not yet
    /// committed, such as those of aborted flushes. Only one flush exists at a
    /// time: while one is alive this returns [`BeginFlushError::InProgress`].
    ///
    /// ```
    /// use inflight::{BeginFlushError, Tracker};
    /// let tracker = Tracker::<u8, u8>::new();
    /// let flush = tracker.begin_flush().unwrap();
    /// assert_eq!(tracker.begin_flush().err(), Some(BeginFlushError::InProgress));
    /// flush.abort();
    /// assert!(tracker.begin_flush().is_ok());
    /// ```
    pub fn begin_flush(&self) -> Result<Flush<'_, P, O>, BeginFlushError> {
        // Acquire: takes ownership of the carry from the previous flush's
        // Release store of `false`.
        if self
            .flushing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(BeginFlushError::InProgress);
        }
        let guard = epoch::pin();
        let upto = loop {
            // Acquire: see the generation's initialisation.
            let open = self.open.load(Ordering::Acquire, &guard);
            if self.seal(open, &guard) {
                break open;
            }
        };
        // Capture every shard for every covered generation (helping any
        // drain sealing beside us): from here on none of them admits a
        // record, and each one's last resolution wakes the flusher.
        // SAFETY: `upto` is in the chain (only the flush, which we are,
        // removes generations) and the guard keeps it alive.
        let upto = unsafe { upto.deref() }.id;
        let wakes = self.capture_through(upto, &guard);
        // The flush before any user code: if a waker panics, dropping it
        // gives up the `flushing` flag.
        let flush = Flush::new(self, upto);
        if wakes {
            self.waiter.wake();
        }
        Ok(flush)
    }

    /// Waits, at most `timeout`, until every record sent before this call is
    /// resolved: the end-of-life wait of a producer that stopped sending
    /// (after [`close`](Self::close), that is everything in flight).
    /// Failed records count as resolved; a barrier flush or the watermarks
    /// report them. Does not commit anything and works beside a flush.
    ///
    /// - `Ok(())`: nothing sent before the call is in flight any more.
    /// - [`FlushError::Timeout`]: some still were at the deadline (`pending`
    ///   of them); call again to keep waiting.
    /// - [`FlushError::Interrupted`]: [`interrupt`](Self::interrupt) was
    ///   called. An interrupt is delivered once, to one waiting call (a
    ///   `drain` or a flush's `wait`).
    ///
    /// Seals the open generation, like a flush does, so records sent from
    /// now on are not waited for. (On a tracker with watermarks, where a
    /// record counts until the watermark passes it, a record sent
    /// concurrently with this call may be waited for too, when it took an
    /// earlier place in its partition's queue.) Each call that finds records
    /// sent since the last seal leaves a sealed generation behind until a
    /// barrier flush folds it (a few hundred bytes and one retained slot per
    /// partition in it), so drain at the end of a tracker's life, or retry
    /// after `close`, rather than in a loop beside live sends on a tracker
    /// that never flushes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, Tracker};
    /// let tracker = Tracker::new();
    /// let ticket = tracker.send("p", 1_u64).unwrap();
    /// tracker.close();
    /// assert_eq!(tracker.drain(Duration::ZERO), Err(FlushError::Timeout { pending: 1 }));
    /// std::thread::scope(|s| {
    ///     s.spawn(|| tracker.ack(ticket).unwrap());
    ///     tracker.drain(Duration::from_secs(10)).unwrap();
    /// });
    /// assert_eq!(tracker.in_flight(), 0);
    /// ```
    pub fn drain(&self, timeout: Duration) -> Result<(), FlushError> {
        let upto = self.seal_open();
        self.block_until_drained(timeout, || Ok(self.pending_through(upto)))
    }

    /// Seals the open generation (or helps whoever is sealing it) and
    /// returns its number: every record sent before this call is in a sealed
    /// generation numbered up to it, whose last resolution wakes waiters.
    pub(crate) fn seal_open(&self) -> u64 {
        let guard = epoch::pin();
        // Acquire: see the generation's initialisation.
        let open = self.open.load(Ordering::Acquire, &guard);
        // SAFETY: `open` was loaded under `guard`, so it is still allocated.
        let generation = unsafe { open.deref() };
        let upto = if generation.id > 0 && self.shards.idle(generation) {
            // Nothing in the open generation is unresolved: every record
            // sent before this call that is still in flight is in an older
            // one. Sealing it would only lengthen the chain (a retry loop
            // of drains after `close` would add one per call).
            generation.id - 1
        } else {
            // Won or lost, `open` has moved past it after this.
            self.seal(open, &guard);
            generation.id
        };
        // A lost race leaves the captures to the winner, who may be slow;
        // capture every generation up to ours ourselves (idempotent), as
        // `begin_flush` does, so each one's last resolution wakes us.
        if self.capture_through(upto, &guard) {
            self.waiter.wake(); // user code, last
        }
        upto
    }

    /// Unresolved records in generations numbered up to `upto`.
    pub(crate) fn pending_through(&self, upto: u64) -> usize {
        let guard = epoch::pin();
        let shards = self.shards.snapshot();
        let mut pending = 0;
        self.walk(&guard, Some(upto), |generation| {
            pending += generation.pending(&shards);
        });
        pending
    }

    /// Asks the call that is waiting, or else the next one to wait, to give
    /// up: a flush's `wait` (or `wait_async`) returns
    /// [`FlushError::Interrupted`](crate::FlushError::Interrupted) promptly,
    /// and the flush can then only be aborted; a `drain` (or `drain_async`)
    /// returns it too. Each interrupt is delivered to exactly one waiting
    /// call: with a flush and a drain waiting at once, either may take it.
    /// Interrupts are not counted: several before a wait are delivered once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, Tracker};
    /// let tracker = Tracker::new();
    /// let _pending = tracker.send("p", 1_u64).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// tracker.interrupt();
    /// assert_eq!(flush.wait(Duration::from_secs(60)), Err(FlushError::Interrupted));
    /// assert_eq!(flush.commit(), Err(FlushError::NotReady));
    /// ```
    pub fn interrupt(&self) {
        // Release: the flag is published; `wake`'s SeqCst fence then makes
        // this write and the waiter's registration a Dekker pair. A swap
        // rather than a store only for loom, which orders a plain store
        // racing `take_interrupt`'s swaps more weakly than C++ does.
        self.interrupted.swap(true, Ordering::Release);
        self.waiter.wake();
    }

    /// Stops accepting records: every `send` that starts after this returns
    /// [`SendError::Closed`] with its record. Records already sent still
    /// resolve, and a flush begun after `close` returns covers every record
    /// the tracker ever accepted, so a final flush can drain them.
    ///
    /// ```
    /// use inflight::{SendError, Tracker};
    /// let tracker = Tracker::new();
    /// let ticket = tracker.send("p", 1_u64).unwrap();
    /// tracker.close();
    /// assert!(matches!(tracker.send("p", 2), Err(SendError::Closed("p", 2))));
    /// tracker.ack(ticket).unwrap(); // still resolves
    /// ```
    pub fn close(&self) {
        // Release: see the re-check in `send`.
        self.closed.store(true, Ordering::Release);
    }

    /// Whether [`close`](Self::close) was called.
    ///
    /// ```
    /// let tracker = inflight::Tracker::<u8, u8>::new();
    /// assert!(!tracker.is_closed());
    /// tracker.close();
    /// assert!(tracker.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        // Acquire: a reader that sees the close also sees what preceded it.
        self.closed.load(Ordering::Acquire)
    }

    /// Records sent and not yet resolved. Exact when no call is running
    /// concurrently; a moment's snapshot otherwise.
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let a = tracker.send(0_u8, 0_u8).unwrap();
    /// let b = tracker.send(0_u8, 1_u8).unwrap();
    /// tracker.fail(a).unwrap();
    /// assert_eq!(tracker.in_flight(), 1);
    /// # tracker.ack(b).unwrap();
    /// ```
    pub fn in_flight(&self) -> usize {
        let guard = epoch::pin();
        let shards = self.shards.snapshot();
        let mut total = 0;
        self.walk(&guard, None, |generation| total += generation.live(&shards));
        total
    }

    /// The capacity given to [`with_capacity`](Self::with_capacity), or
    /// `None` for an unbounded tracker.
    ///
    /// ```
    /// use inflight::Tracker;
    /// assert_eq!(Tracker::<u8, u8>::with_capacity(8).capacity(), Some(8));
    /// assert_eq!(Tracker::<u8, u8>::new().capacity(), None);
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// How many distinct partitions the tracker has seen. A tracker holds at
    /// most 16,777,152; a send of a partition beyond that returns
    /// [`SendError::Full`].
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let a = tracker.send("a", 1_u8).unwrap();
    /// let b = tracker.send("b", 1_u8).unwrap();
    /// let c = tracker.send("a", 2_u8).unwrap();
    /// assert_eq!(tracker.partitions(), 2);
    /// # for t in [a, b, c] { tracker.ack(t).unwrap(); }
    /// ```
    pub fn partitions(&self) -> usize {
        self.partitions.len()
    }
}

impl<P, O> Tracker<P, O> {
    fn take_permit(&self) -> bool {
        let Some(capacity) = self.capacity else {
            return true;
        };
        // Relaxed: the count orders no other memory; the CAS makes the bound
        // exact (no transient over-count that could refuse a send wrongly).
        let mut current = self.permits.load(Ordering::Relaxed);
        loop {
            if current >= capacity {
                return false;
            }
            match self.permits.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    fn return_permit(&self) {
        if self.capacity.is_some() {
            // Relaxed: as in `take_permit`.
            self.permits.fetch_sub(1, Ordering::Relaxed);
        }
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

    /// Blocks until `pending()` returns `Ok(0)` (`Ok`) or an error (that
    /// error), an interrupt arrives (`Interrupted`, consuming it) or
    /// `timeout` passes (`Timeout`). Spins briefly, then parks; the
    /// resolution that takes a sealed generation's `live` to zero, a failed
    /// resolution, or `interrupt` wakes it. `pending` must count only
    /// records of sealed generations, whose last resolution wakes waiters.
    pub(crate) fn block_until_drained(
        &self,
        timeout: Duration,
        mut pending: impl FnMut() -> Result<usize, FlushError>,
    ) -> Result<(), FlushError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut spins = 0_u32;
        let mut registration = None;
        let result = loop {
            if self.take_interrupt() {
                break Err(FlushError::Interrupted);
            }
            let pending = match pending() {
                Ok(0) => break Ok(()),
                Ok(pending) => pending,
                Err(e) => break Err(e),
            };
            let remaining = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(remaining) if !remaining.is_zero() => remaining,
                    _ => break Err(FlushError::Timeout { pending }),
                },
                None => Duration::MAX,
            };
            if spins < SPINS_BEFORE_PARK {
                spins += 1;
                crate::sync::spin_hint();
                continue;
            }
            match &registration {
                // Register, then look again before parking (Dekker pair with
                // the last resolution; see `waiter`).
                None => registration = Some(self.waiter.register()),
                Some(registration) => registration.park_timeout(remaining),
            }
        };
        if let Some(registration) = registration {
            self.waiter.unregister(registration);
        }
        result
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

/// Backs a send out if it ends before publishing its record: the
/// `Closed` re-check, or a panic in user code (a waker, the `Drop` of the
/// partition key). It returns the permit and the slot and, once the record
/// has entered a generation, counts it out again: no record is counted
/// without a ticket. `send` forgets it once nothing can stop the record.
struct Undo<'t, P, O> {
    tracker: &'t Tracker<P, O>,
    index: usize,
    slot: &'t Slot<O>,
    /// The hold bits the slot took at `prepare`.
    holds: u64,
    /// The count shard and generation the record entered, once it has.
    entered: Option<(usize, &'t Generation)>,
}

impl<P, O> Undo<'_, P, O> {
    /// Everything but the slot itself; runs no user code. Returns true if
    /// the record's leave drained its generation: waiters must be woken.
    fn back_out(&mut self) -> bool {
        let drained = self
            .entered
            .take()
            .is_some_and(|(shard, generation)| self.tracker.shards.leave(shard, generation));
        self.tracker.slots.unhold_prepared(self.slot, self.holds);
        self.tracker.return_permit();
        drained
    }

    /// Backs out and hands the offset back, for `SendError::Closed`.
    fn take_back(self) -> O {
        let mut this = std::mem::ManuallyDrop::new(self);
        let drained = this.back_out();
        let offset = this.tracker.slots.unprepare(this.index, this.slot);
        if drained {
            this.tracker.waiter.wake(); // user code, last
        }
        offset
    }
}

impl<P, O> Drop for Undo<'_, P, O> {
    /// Only while unwinding: the offset stays in the slot for its next user
    /// to drop, and a waker's panic is swallowed (one panic is on its way).
    fn drop(&mut self) {
        let drained = self.back_out();
        self.tracker.slots.abandon_prepared(self.index, self.slot);
        if drained {
            self.tracker.waiter.wake_quietly();
        }
    }
}

/// Builds a [`Tracker`] with options; from [`Tracker::builder`].
///
/// ```
/// use inflight::Tracker;
/// let plain: Tracker<u32, u64> = Tracker::builder().build();
/// assert!(!plain.has_watermarks() && plain.capacity().is_none());
/// ```
#[must_use = "a builder does nothing until `build`"]
pub struct Builder<P, O> {
    capacity: Option<usize>,
    watermarks: bool,
    _types: PhantomData<fn() -> (P, O)>,
}

impl<P, O> Builder<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// Bounds the records in flight, as [`Tracker::with_capacity`] does.
    pub fn capacity(mut self, max_in_flight: usize) -> Self {
        self.capacity = Some(max_in_flight.min(MAX_SLOTS));
        self
    }

    /// Keeps a watermark per partition, for [`Tracker::committable`]: the
    /// offset of the latest record such that it and every earlier record of
    /// its partition were acked, available at any moment without a flush.
    ///
    /// It costs each record a place in its partition's queue (one more
    /// atomic swap per send, and an advance per resolution), so it is off
    /// unless asked for. On such a tracker a record counts as in flight
    /// ([`in_flight`](Tracker::in_flight), [`drain`](Tracker::drain),
    /// [`Flush::pending`]) until the watermark has passed it: an acked
    /// record behind an unacked one of its partition is still counted, and
    /// keeps its slot. A capacity bounds unresolved records only; records
    /// acked behind an unacked one are bounded by the tracker's 2^24 − 1
    /// slots.
    pub fn watermarks(mut self) -> Self {
        self.watermarks = true;
        self
    }

    /// The tracker.
    pub fn build(self) -> Tracker<P, O> {
        Tracker::build(self.capacity, self.watermarks)
    }
}

impl<P, O> fmt::Debug for Builder<P, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("capacity", &self.capacity)
            .field("watermarks", &self.watermarks)
            .finish()
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

impl<P, O> fmt::Debug for Tracker<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracker")
            .field("in_flight", &self.in_flight())
            .field("capacity", &self.capacity)
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl<P, O> Drop for Tracker<P, O> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn generations(tracker: &Tracker<u32, u64>) -> usize {
        let mut n = 0;
        tracker.walk(&epoch::pin(), None, |_| n += 1);
        n
    }

    /// A drain retried after `close` (nothing sent since) seals no new
    /// generation per call, so the chain every drain walks stays short.
    #[test]
    fn retried_drains_after_close_do_not_grow_the_chain() {
        let tracker = Tracker::new();
        let ticket = tracker.send(0, 1).unwrap();
        tracker.close();
        for _ in 0..100 {
            let pending = tracker.drain(Duration::ZERO);
            assert_eq!(pending, Err(crate::FlushError::Timeout { pending: 1 }));
        }
        assert_eq!(generations(&tracker), 2, "the sealed one and the open one");
        tracker.ack(ticket).unwrap();
        tracker.drain(Duration::ZERO).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(flush.wait(Duration::ZERO).unwrap()[&0], 1);
        flush.commit().unwrap();
    }

    /// A sealer that moved `open` but has not captured the shards yet (here:
    /// never will) leaves them lagging; a send through one captures it for
    /// the old generation itself, then enters the new one.
    #[test]
    fn a_send_through_a_lagging_shard_captures_it_first() {
        let tracker = Tracker::new();
        let old = tracker.send(0, 1).unwrap();
        let guard = epoch::pin();
        assert!(tracker.seal(tracker.open.load(Ordering::Acquire, &guard), &guard));
        let new = tracker.send(0, 2).unwrap();
        let mut live = Vec::new();
        let shards = tracker.shards.snapshot();
        tracker.walk(&guard, None, |g| live.push((g.id, g.live(&shards))));
        assert_eq!(live, vec![(0, 1), (1, 1)], "one record in each generation");
        tracker.ack(old).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(flush.pending(), 1);
        tracker.ack(new).unwrap();
        assert_eq!(flush.wait(Duration::ZERO).unwrap()[&0], 2);
        flush.commit().unwrap();
    }

    /// Offsets sent and not yet (about to be) acked, of one partition. The
    /// tests may lock; the tracker may not.
    type Unacked = std::sync::Mutex<std::collections::BTreeSet<u64>>;

    /// Acks every record of `window` in an order `rng` (xorshift) picks,
    /// taking each out of `unacked` first.
    fn ack_shuffled(
        tracker: &Tracker<u32, u64>,
        window: &mut Vec<(u64, Ticket)>,
        rng: &mut u64,
        unacked: &Unacked,
    ) {
        while !window.is_empty() {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            let (acked, ticket) = window.swap_remove((*rng % window.len() as u64) as usize);
            unacked.lock().unwrap().remove(&acked);
            tracker.ack(ticket).unwrap();
        }
    }

    /// Seals with `drain` in a loop until `senders` senders have added one to
    /// `finished`.
    fn drain_until_finished(tracker: &Tracker<u32, u64>, finished: &AtomicUsize, senders: usize) {
        // Acquire: nothing is published through it; Relaxed would do.
        while finished.load(Ordering::Acquire) < senders {
            let _ = tracker.drain(Duration::ZERO);
        }
    }

    /// Flushes and commits in a loop until `senders` senders have added one
    /// to `finished`, then once more, and returns the last offset flushed of
    /// each partition. Every flush must complete (a stall would surface as
    /// a timeout after a minute), and none may return an offset of partition
    /// `p` while an earlier one is in `unacked[p]`.
    fn flush_checked_until_finished(
        tracker: &Tracker<u32, u64>,
        finished: &AtomicUsize,
        senders: usize,
        unacked: &[Unacked],
    ) -> HashMap<u32, u64> {
        let mut last = HashMap::new();
        loop {
            // Acquire: pairs with the senders' Release, so that the flush
            // after the last one covers every send.
            let done = finished.load(Ordering::Acquire) == senders;
            let mut flush = tracker.begin_flush().unwrap();
            let offsets = flush.wait(Duration::from_secs(60)).unwrap();
            for (&p, &o) in &offsets {
                let oldest = unacked[p as usize].lock().unwrap().first().copied();
                assert!(
                    oldest.is_none_or(|oldest| oldest > o),
                    "partition {p}: offset {o} returned while {oldest:?} is unacked"
                );
            }
            flush.commit().unwrap();
            last.extend(offsets);
            if done {
                return last;
            }
        }
    }

    /// Seals racing sends, out-of-order acks and each other (a drainer
    /// seals beside the flusher, both capturing the same shards) from
    /// several threads: every flush completes, no offset is returned while
    /// an earlier record of its partition is unacked, and the final flush
    /// returns each last offset.
    #[test]
    fn racing_seals_lose_nothing() {
        const SENDS: u64 = 20_000;
        const WINDOW: usize = 8;
        const SENDERS: usize = 3;
        let tracker = Tracker::new();
        let finished = AtomicUsize::new(0);
        let unacked: Vec<Unacked> = (0..SENDERS).map(|_| Unacked::default()).collect();
        let last = std::thread::scope(|s| {
            for p in 0..SENDERS as u32 {
                let (tracker, finished, unacked) = (&tracker, &finished, &unacked[p as usize]);
                s.spawn(move || {
                    let mut window = Vec::with_capacity(WINDOW);
                    let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ u64::from(p);
                    for offset in 0..SENDS {
                        unacked.lock().unwrap().insert(offset);
                        window.push((offset, tracker.send(p, offset).unwrap()));
                        if window.len() == WINDOW {
                            ack_shuffled(tracker, &mut window, &mut rng, unacked);
                        }
                    }
                    ack_shuffled(tracker, &mut window, &mut rng, unacked);
                    // Release: the sends above happen before the committer's
                    // last flush.
                    finished.fetch_add(1, Ordering::Release);
                });
            }
            s.spawn(|| drain_until_finished(&tracker, &finished, SENDERS));
            flush_checked_until_finished(&tracker, &finished, SENDERS, &unacked)
        });
        for p in 0..SENDERS as u32 {
            assert_eq!(last[&p], SENDS - 1, "partition {p}");
        }
        assert_eq!(tracker.in_flight(), 0);
    }

    /// Two threads take turns sending the offsets of one partition (each
    /// send happens after the previous one, through a baton), so the
    /// partition's sends form one happens-before chain over two count
    /// shards, while a committer flushes; the seal's captures are spread out
    /// (see `capture`), so senders often meet shards that count for
    /// different generations. (Only one sealer: a drainer's seals would
    /// take the windows in which a flush can see a wrong coverage.) A covered send's
    /// predecessors must be covered too: every offset a flush returns must
    /// have every earlier offset acked.
    #[test]
    fn one_chain_of_sends_over_two_threads_is_covered_as_a_prefix() {
        const SENDS: u64 = 100_000;
        let tracker = Tracker::new();
        let turn = AtomicU64::new(0);
        let finished = AtomicUsize::new(0);
        let unacked = [Unacked::default()];
        let last = std::thread::scope(|s| {
            for me in 0..2_u64 {
                let (tracker, turn, finished, unacked) = (&tracker, &turn, &finished, &unacked[0]);
                s.spawn(move || {
                    // Each batch acks at once or late and out of order, at
                    // random, so that a flush can often drain behind a later
                    // send of one thread while an earlier one of the other
                    // still waits.
                    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ me;
                    let mut window_len = 1;
                    let mut window = Vec::with_capacity(32);
                    loop {
                        // Acquire: pairs with the other thread's Release
                        // below, so its send happens before ours.
                        let offset = turn.load(Ordering::Acquire);
                        if offset >= SENDS {
                            break;
                        }
                        if offset % 2 != me {
                            std::thread::yield_now();
                            continue;
                        }
                        unacked.lock().unwrap().insert(offset);
                        window.push((offset, tracker.send(0, offset).unwrap()));
                        // Release: hands the baton on, after our send.
                        turn.store(offset + 1, Ordering::Release);
                        if window.len() >= window_len {
                            ack_shuffled(tracker, &mut window, &mut rng, unacked);
                            window_len = if rng & 1 == 0 { 1 } else { 32 };
                        }
                    }
                    ack_shuffled(tracker, &mut window, &mut rng, unacked);
                    // Release: our sends happen before the last flush.
                    finished.fetch_add(1, Ordering::Release);
                });
            }
            flush_checked_until_finished(&tracker, &finished, 2, &unacked)
        });
        assert_eq!(last[&0], SENDS - 1);
        assert_eq!(tracker.in_flight(), 0);
    }
}
