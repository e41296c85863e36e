//! The capacity of a bounded tracker: one permit per record in flight, with
//! the permits that resolutions give back kept near the threads that gave
//! them, so that sends and resolutions of different threads do not all
//! write one cache line.
//!
//! This module owns the permit counts and the protocol by which a sender
//! that found the tracker full is woken. The tracker takes a permit in
//! every send and gives it back when the record stops counting in flight:
//! at its resolution, or on a tracker with watermarks when the watermark
//! passes it (the advance gives back the permits of the records it passes,
//! so an acked record held behind an unresolved one keeps its permit, and
//! its slot; issue 26, item 4). See `send`, `resolve`, `batch` and
//! `revoke`: a revoke's released records give theirs back the same way.
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
//! send is refused only when every permit is in use at some moment during
//! the send: `taken` is at the capacity (for good) and every shard is empty
//! at once. One pass over the shards cannot tell that: while it runs,
//! other sends take spare permits from shards it has not reached yet and
//! their resolutions put them back in shards it has passed, so it can find
//! every shard empty though a permit was spare all along (issue 25, item
//! 9; loom model 29d). So every give-back also bumps a *version* in its
//! shard's word (the same `fetch_add`: nothing more on the hot path), and
//! the sweep makes passes until one finds a permit, or until two passes in
//! a row found every shard empty at the same version. Then no give-back
//! reached any shard between its two reads, and a shard that was empty and
//! got nothing stayed empty: every shard was empty from its first read to
//! its second, so all of them were when the first of the two passes ended.
//! Only a resolution can make a pass fail to confirm the one before, so
//! each further pass means another thread completed a resolution: the
//! sweep is lock-free, not wait-free. (The version has 31 bits and wraps: a
//! sweep is fooled only if exactly a multiple of 2^31 give-backs reach one
//! shard between two of its reads.)
//!
//! A permit moves only with a record: from `taken` or a shard to a send,
//! from a resolution to a shard. (An earlier version gave a shard's
//! surplus back to `taken`, in two steps; in between, the permits were in
//! neither place, and a sweep could miss them: loom model 29c.)
//!
//! # Waiting for room
//!
//! A sender that was refused and waits (`send_timeout`, `send_async`)
//! registers, then flags every shard with `WANTED` (a `fetch_or` that also
//! reads the shard's spares: any there mean room, send again; so does
//! `taken` below the capacity). A resolution (or an advance) gives its
//! permit back with the `fetch_add` on its shard it always makes; if that
//! reads `WANTED`, it clears the flag and, last, wakes the room's waiters,
//! who send again and find the permit in the sweep. Flag and give-back are read-modify-
//! writes of one word, so one of the two sees the other. A resolution that
//! finds no flag pays nothing more.

use crate::counts::SHARDS;
use crate::sync::{AtomicU64, AtomicUsize, CachePadded, Ordering};

/// A shard's word: its spare permits (the low 32 bits: the capacity is at
/// most `MAX_SLOTS`, below 2^24, so they never carry out), `WANTED`, and
/// above it the version, which every give-back bumps and which wraps off
/// the top.
const COUNT: u64 = (1 << 32) - 1;
/// The bit that says a sender waits for room.
const WANTED: u64 = 1 << 32;
/// One step of the version.
const VERSION: u64 = 1 << 33;
/// The version bits.
const VERSIONS: u64 = !(COUNT | WANTED);

/// A bounded tracker's permits; see the module docs.
pub(crate) struct Permits {
    capacity: usize,
    /// Permits ever taken out of the capacity; only grows.
    taken: CachePadded<AtomicUsize>,
    /// Per shard: spare permits, `WANTED` and the version.
    spare: Box<[CachePadded<AtomicU64>]>,
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
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            hint: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Takes a permit for a send on the thread numbered `home`: false when
    /// every permit is in use.
    #[inline]
    pub(crate) fn take(&self, home: usize) -> bool {
        // Relaxed read: the sweep's second pass covers a stale one (see
        // `take_slow`).
        if take_one(&self.spare[home % SHARDS], Ordering::Relaxed).is_ok() {
            return true;
        }
        self.take_slow()
    }

    #[cold]
    fn take_slow(&self) -> bool {
        // Relaxed: `taken` orders no other memory; it only grows, so once
        // read at the capacity, it stays there.
        let mut taken = self.taken.load(Ordering::Relaxed);
        while taken < self.capacity {
            // Relaxed: as the load above.
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
        // The version each shard had, empty, in the last pass (`COUNT`, no
        // version, before the first).
        let mut seen = [COUNT; SHARDS];
        loop {
            let mut moved = false;
            for i in 0..SHARDS {
                let shard = (start + i) % SHARDS;
                // Acquire: a word that a take or give-back wrote (each a
                // Release) brings what happened before it, so that the
                // next pass sees every give-back before a take that this
                // pass saw (a permit freed, and then its room used by a
                // send that took another permit, both behind this sweep).
                match take_one(&self.spare[shard], Ordering::Acquire) {
                    Ok(()) => {
                        if shard != start {
                            // Relaxed: a hint.
                            self.hint.store(shard, Ordering::Relaxed);
                        }
                        return true;
                    }
                    Err(word) => {
                        moved |= word & VERSIONS != seen[shard];
                        seen[shard] = word & VERSIONS;
                    }
                }
            }
            // Mutant `missed_spare` (loom suite only): one pass, whose
            // empty shards may be empty at different moments, refuses the
            // send.
            if !moved || cfg!(inflight_mutant = "missed_spare") {
                return false;
            }
        }
    }

    /// Gives back `n` permits of records resolved (or backed out) on the
    /// thread numbered `home`. Returns true if a sender waits for room: the
    /// caller then wakes the room's waiters (user code), last.
    #[inline]
    #[must_use]
    pub(crate) fn give_back(&self, n: usize, home: usize) -> bool {
        let spare = &self.spare[home % SHARDS];
        // The permits, and a step of the version (see the module docs).
        // AcqRel: Acquire, when this reads `WANTED`, sees the registration
        // of the sender that set it (its Release `fetch_or`); Release, for
        // a sweep that reads this word (its Acquire, in `take_slow`).
        let before = spare.fetch_add(n as u64 + VERSION, Ordering::AcqRel);
        // Mutant `spares_in_transit` (loom suite only): a shard over one
        // spare permit gives its spares back to `taken` in two steps, so
        // that in between they are in neither place.
        #[cfg(inflight_mutant = "spares_in_transit")]
        if (before & COUNT) + n as u64 > 1 {
            let moved = spare.swap((before + VERSION) & !COUNT, Ordering::AcqRel) & COUNT;
            crate::sync::spin_hint();
            self.taken.fetch_sub(moved as usize, Ordering::AcqRel);
        }
        if before & WANTED == 0 {
            return false;
        }
        // Relaxed: the flag's sender is woken below, and sends again.
        spare.fetch_and(!WANTED, Ordering::Relaxed);
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

/// Takes one spare permit from `spare`, if it has one; else returns the
/// word it read, which holds none. `read` orders the reads: Relaxed on the
/// hot path, Acquire in the sweep (see `Permits::take_slow`).
#[inline]
fn take_one(spare: &AtomicU64, read: Ordering) -> Result<(), u64> {
    let mut current = spare.load(read);
    while current & COUNT != 0 {
        match spare.compare_exchange_weak(
            current,
            current - 1,
            // Release: what happened before this take (a give-back that
            // the caller's own synchronization put first) reaches a sweep
            // whose Acquire reads this word; Relaxed, loom model 29d fails
            // (so does it with a Relaxed sweep). The failure reads as
            // `read`.
            if read == Ordering::Relaxed {
                Ordering::Release
            } else {
                Ordering::AcqRel
            },
            read,
        ) {
            Ok(_) => return Ok(()),
            Err(seen) => current = seen,
        }
    }
    Err(current)
}
