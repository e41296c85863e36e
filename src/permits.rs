//! The capacity of a bounded tracker: one permit per record in flight, with
//! the permits that resolutions give back kept near the threads that gave
//! them, so that sends and resolutions of different threads do not all
//! write one cache line.
//!
//! This module owns the permit counts and the protocol by which a sender
//! that found the tracker full is woken. The tracker takes a permit in
//! every send and gives it back in every resolution (see `send`, `resolve`
//! and `batch`).
//!
//! # Where permits are
//!
//! `taken` counts the permits ever taken out of the capacity; it only
//! grows. Each of them is held by a record in flight or *spare* in one of
//! the shards. A send takes a spare permit of its own shard (the one its
//! thread number picks, as for the count shards), else a fresh one from
//! `taken` while it is below the capacity, else a spare one of another
//! shard, starting where the last such sweep found one (`hint`). A
//! resolution puts its permit in its own shard's spares, and there it
//! stays until a send takes it. So a thread that sends and resolves its own
//! records writes only its own shard's line.
//!
//! # The bound is exact
//!
//! Records in flight never exceed the capacity (`taken` never does), and a
//! send is refused only when every permit is in use: `taken` is at the
//! capacity (for good) and the send found its own spares and every other
//! shard's empty. A permit never moves but with a record: from `taken` or
//! a shard to a send, from a resolution to a shard. So a permit that a
//! resolution freed before the send began sits in one shard for the whole
//! of the send, unless another send takes it, and the sweep finds it. (An
//! earlier version gave a shard's surplus back to `taken`, in two steps;
//! in between, the permits were in neither place, and a sweep could miss
//! them: loom model 29c.)
//!
//! # Waiting for room
//!
//! A sender that was refused and waits (`send_timeout`, `send_async`)
//! registers, then flags every shard with `WANTED` (a `fetch_or` that also
//! reads the shard's spares: any there mean room, send again; so does
//! `taken` below the capacity). A resolution gives its permit back with the
//! `fetch_add` on its shard it always makes; if that reads `WANTED`, it
//! clears the flag and, last, wakes the room's waiters, who send again
//! and find the permit in the sweep. Flag and give-back are read-modify-
//! writes of one word, so one of the two sees the other. A resolution that
//! finds no flag pays nothing more.

use crate::generation::SHARDS;
use crate::sync::{AtomicUsize, CachePadded, Ordering};

/// The bit of a shard's spare count that says a sender waits for room.
const WANTED: usize = 1 << (usize::BITS - 1);
const COUNT: usize = !WANTED;

/// A bounded tracker's permits; see the module docs.
pub(crate) struct Permits {
    capacity: usize,
    /// Permits ever taken out of the capacity; only grows.
    taken: CachePadded<AtomicUsize>,
    /// Per shard: spare permits, and `WANTED`.
    spare: Box<[CachePadded<AtomicUsize>]>,
    /// The shard where a sweep last found a spare permit: the next sweep
    /// starts there (in a hand-off, the ackers' shards).
    hint: CachePadded<AtomicUsize>,
}

impl Permits {
    /// The bound on records in flight.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            taken: CachePadded::new(AtomicUsize::new(0)),
            spare: (0..SHARDS)
                .map(|_| CachePadded::new(AtomicUsize::new(0)))
                .collect(),
            hint: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Takes a permit for a send on the thread numbered `home`: false when
    /// every permit is in use.
    #[inline]
    pub(crate) fn take(&self, home: usize) -> bool {
        // Relaxed, all permit counts: they order no other memory (only a
        // waiter's registration, see `want_room` and `give_back`).
        if take_one(&self.spare[home % SHARDS]) {
            return true;
        }
        self.take_slow()
    }

    #[cold]
    fn take_slow(&self) -> bool {
        // Relaxed: as in `take`.
        let mut taken = self.taken.load(Ordering::Relaxed);
        while taken < self.capacity {
            // Relaxed: as in `take`.
            match self.taken.compare_exchange_weak(
                taken,
                taken + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => taken = seen,
            }
        }
        // Mutant `unswept_spares` (loom suite only): a capacity all taken
        // out refuses the send, though shards hold spare permits.
        if cfg!(inflight_mutant = "unswept_spares") {
            return false;
        }
        // Relaxed: a hint; any shard may be tried first.
        let start = self.hint.load(Ordering::Relaxed);
        for i in 0..SHARDS {
            let shard = (start + i) % SHARDS;
            if take_one(&self.spare[shard]) {
                if shard != start {
                    // Relaxed: a hint.
                    self.hint.store(shard, Ordering::Relaxed);
                }
                return true;
            }
        }
        false
    }

    /// Gives back `n` permits of records resolved (or backed out) on the
    /// thread numbered `home`. Returns true if a sender waits for room: the
    /// caller then wakes the room's waiters (user code), last.
    #[inline]
    #[must_use]
    pub(crate) fn give_back(&self, n: usize, home: usize) -> bool {
        let spare = &self.spare[home % SHARDS];
        // AcqRel: Acquire, when this reads `WANTED`, sees the registration
        // of the sender that set it (its Release `fetch_or`).
        let before = spare.fetch_add(n, Ordering::AcqRel);
        // Mutant `spares_in_transit` (loom suite only): a shard over one
        // spare permit gives its spares back to `taken` in two steps, so
        // that in between they are in neither place.
        #[cfg(inflight_mutant = "spares_in_transit")]
        if (before & COUNT) + n > 1 {
            let moved = spare.swap(before & WANTED, Ordering::AcqRel) & COUNT;
            crate::sync::spin_hint();
            self.taken.fetch_sub(moved, Ordering::AcqRel);
        }
        if before & WANTED == 0 {
            return false;
        }
        // Relaxed: the flag's sender is woken below, and sends again.
        spare.fetch_and(COUNT, Ordering::Relaxed);
        // Mutant `lost_room_wakeup` (loom suite only): a resolution never
        // tells that a sender waits for room, so nobody wakes it.
        !cfg!(inflight_mutant = "lost_room_wakeup")
    }

    /// For a sender registered in the room's waiters, after a send was
    /// refused for want of a permit: true if a permit is free now (send
    /// again); false once every shard is flagged, in the same atomic steps
    /// that saw it hold no spare permit, so that the next give-back sees a
    /// flag and wakes the sender.
    pub(crate) fn want_room(&self) -> bool {
        let mut room = false;
        for spare in self.spare.iter() {
            // AcqRel: Release publishes our registration to the give-back
            // whose `fetch_add` reads the flag; Acquire is for symmetry.
            room |= spare.fetch_or(WANTED, Ordering::AcqRel) & COUNT != 0;
        }
        // Relaxed: `taken` only grows; below the capacity, a fresh permit.
        room || self.taken.load(Ordering::Relaxed) < self.capacity
    }
}

/// Takes one spare permit from `spare`, if it has one.
#[inline]
fn take_one(spare: &AtomicUsize) -> bool {
    // Relaxed, both: as in `Permits::take`.
    let mut current = spare.load(Ordering::Relaxed);
    while current & COUNT != 0 {
        match spare.compare_exchange_weak(
            current,
            current - 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return true,
            Err(seen) => current = seen,
        }
    }
    false
}
