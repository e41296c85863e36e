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
//! `taken` counts the permits taken out of the capacity: each is held by a
//! record in flight, or *spare* in one of the shards. A send takes a spare
//! permit of its own shard (the one its thread number picks, as for the
//! count shards), else a fresh one from `taken`, else a spare one of another
//! shard. A resolution puts its permit in its own shard's spares; a shard
//! holding more than [`SPARE_MAX`] gives the surplus back to `taken`. So a
//! thread that sends and resolves its own records writes only its own
//! shard's line, as it does for its counts.
//!
//! # The bound is exact
//!
//! Records in flight never exceed the capacity (`taken` never does), and a
//! send is refused only when the capacity is all in use: it has found its
//! own spares empty, `taken` full, every other shard's spares empty, and
//! `taken` still full after that sweep. Spare permits only come from
//! resolutions and only go to sends or back to `taken`, so a permit free
//! for the whole of the call is either in `taken` (the second look sees
//! room, and the send goes round again) or in a shard the sweep found
//! empty, which cannot be. (A resolution that gives its permit back
//! during the call is concurrent with it, and may as well come after.)
//!
//! # Waiting for room
//!
//! A sender that was refused and waits (`send_timeout`, `send_async`)
//! registers, then flags `taken` with `ROOM_WANTED` if it is still full and
//! every shard with `WANTED`; a shard that had spare permits means room
//! (send again). A resolution that gives a permit back reads the flag in
//! the same read-modify-write: the `fetch_sub` on `taken`, or its shard's
//! `fetch_add`, which, on `WANTED`, gives the whole shard's spares back to
//! `taken` and wakes the room's waiters. Each flag and each give-back is an
//! RMW of one word, so one of the two sees the other. A `WANTED` left on a
//! shard after the wake only makes that shard's next give-back go to
//! `taken`.

use crate::generation::SHARDS;
use crate::sync::{AtomicUsize, CachePadded, Ordering};

/// The bit of `taken` that says a sender waits for room.
const ROOM_WANTED: usize = 1 << (usize::BITS - 1);
/// The bit of a shard's spare count that says a sender waits for room.
const WANTED: usize = ROOM_WANTED;
const COUNT: usize = !ROOM_WANTED;
/// Spare permits a shard keeps; a give-back beyond it returns the surplus
/// (down to half of it) to `taken`. One under loom, so that the models
/// reach the give-back to `taken`.
const SPARE_MAX: usize = if cfg!(loom) { 1 } else { 64 };

/// A bounded tracker's permits; see the module docs.
pub(crate) struct Permits {
    capacity: usize,
    /// Permits out of the capacity (held by a record, or spare in a shard),
    /// and `ROOM_WANTED`.
    taken: CachePadded<AtomicUsize>,
    /// Per shard: spare permits, and `WANTED`.
    spare: Box<[CachePadded<AtomicUsize>]>,
}

impl Permits {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            taken: CachePadded::new(AtomicUsize::new(0)),
            spare: (0..SHARDS)
                .map(|_| CachePadded::new(AtomicUsize::new(0)))
                .collect(),
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
        self.take_slow(home)
    }

    #[cold]
    fn take_slow(&self, home: usize) -> bool {
        loop {
            // Relaxed: as in `take`.
            let mut taken = self.taken.load(Ordering::Relaxed);
            while taken & COUNT < self.capacity {
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
            // Mutant `unswept_spares` (loom suite only): a full `taken`
            // refuses the send, though other shards hold spare permits.
            #[cfg(inflight_mutant = "unswept_spares")]
            return false;
            #[allow(unreachable_code)]
            for i in 1..SHARDS {
                if take_one(&self.spare[(home + i) % SHARDS]) {
                    return true;
                }
            }
            // Full before the sweep and, unless a permit came back to
            // `taken` meanwhile, after it: refused (see the module docs).
            // Relaxed: as in `take`.
            if self.taken.load(Ordering::Relaxed) & COUNT >= self.capacity {
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
        // AcqRel: Acquire, when this reads `WANTED`, sees the registration
        // of the sender that set it (its Release `fetch_or`).
        let before = spare.fetch_add(n, Ordering::AcqRel);
        if before & WANTED == 0 && (before & COUNT) + n <= SPARE_MAX {
            return false;
        }
        self.return_spares(spare, before & WANTED != 0)
    }

    /// Moves a shard's spare permits back to `taken`: all of them when a
    /// sender waits (`wanted`, which also clears `WANTED`), else the
    /// surplus above half of [`SPARE_MAX`]. Returns true if a sender waits.
    #[cold]
    fn return_spares(&self, spare: &AtomicUsize, wanted: bool) -> bool {
        let returned = if wanted {
            // AcqRel: as in `give_back` (a newer `WANTED` is read too).
            spare.swap(0, Ordering::AcqRel) & COUNT
        } else {
            // Relaxed: as in `take`.
            let mut current = spare.load(Ordering::Relaxed);
            loop {
                let count = current & COUNT;
                if count <= SPARE_MAX / 2 {
                    break 0;
                }
                let surplus = count - SPARE_MAX / 2;
                // Relaxed: as in `take`.
                match spare.compare_exchange_weak(
                    current,
                    current - surplus,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break surplus,
                    Err(seen) => current = seen,
                }
            }
        };
        let room_wanted = if returned == 0 {
            false
        } else {
            // AcqRel: Acquire, when this reads `ROOM_WANTED`, sees the
            // waiting sender's registration, made before its Release CAS.
            self.taken.fetch_sub(returned, Ordering::AcqRel) & ROOM_WANTED != 0
        };
        let wake = wanted || room_wanted;
        // Mutant `lost_room_wakeup` (loom suite only): a resolution never
        // tells that a sender waits for room, so nobody wakes it.
        #[cfg(inflight_mutant = "lost_room_wakeup")]
        let wake = {
            let _ = wake;
            false
        };
        wake
    }

    /// For a sender registered in the room's waiters, after a send was
    /// refused for want of a permit: true if a permit is free now (send
    /// again); false once `taken` and every shard are flagged, in the same
    /// atomic steps that saw no permit free, so that the next give-back
    /// sees a flag and wakes the sender.
    pub(crate) fn want_room(&self) -> bool {
        // Relaxed: the CAS below decides.
        let mut taken = self.taken.load(Ordering::Relaxed);
        loop {
            if taken & COUNT < self.capacity {
                return true;
            }
            // AcqRel: Release publishes our registration to the give-back
            // whose `fetch_sub` reads this (even when the bit was already
            // set: the write joins the chain it reads); Acquire is for
            // symmetry.
            match self.taken.compare_exchange_weak(
                taken,
                taken | ROOM_WANTED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => taken = seen,
            }
        }
        let mut room = false;
        for spare in self.spare.iter() {
            // AcqRel: Release publishes our registration to the give-back
            // whose `fetch_add` reads the flag; Acquire is for symmetry.
            room |= spare.fetch_or(WANTED, Ordering::AcqRel) & COUNT != 0;
        }
        room
    }

    /// Before the room's waiters are woken: they flag again if they still
    /// find no room.
    pub(crate) fn room_woken(&self) {
        // AcqRel: the senders woken next set the bit again (Release) if
        // they find no room.
        self.taken.fetch_and(!ROOM_WANTED, Ordering::AcqRel);
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
