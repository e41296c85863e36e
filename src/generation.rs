//! A generation: the records sent between two seals.
//!
//! This module owns a generation's count word, its failure count, its link to
//! the next generation and its partition cells. The tracker owns the chain of
//! generations and decides when one is sealed, folded or freed.
//!
//! # The count word
//!
//! ```text
//!  63                           32 31     30                            0
//! +-------------------------------+--------+------------------------------+
//! |            entries            | SEALED |             live             |
//! +-------------------------------+--------+------------------------------+
//! ```
//!
//! A send *enters* with one `fetch_add(1 << 32 | 1)`: `live` counts its
//! record as unresolved, and the `entries` it read is the record's place in
//! send order within the generation, so one atomic step both admits the
//! record and orders it. If the word it read had `SEALED` set, the send
//! *leaves* again (`fetch_sub(1)`) and retries on the open generation: from
//! the seal on, nothing stays in a sealed generation that was not in it
//! before. A resolution leaves with the same `fetch_sub(1)`. Whoever takes a
//! sealed generation's `live` to zero wakes the flusher.
//!
//! `entries` wraps off the top of the word without touching `SEALED`; the
//! tracker rolls over to a new generation long before it could wrap (see
//! [`ROLLOVER`]), so comparisons of entries inside one generation never
//! straddle a wrap.
//!
//! # Partition cells
//!
//! For each partition with a record in the generation, a cell holds the
//! `entries` value and slot index of the partition's latest record:
//! `entry << 32 | (slot + 1)`, 0 when empty. A send installs itself with a
//! CAS if it is newer than the cell and drops the hold on the record it
//! displaced, so each generation holds at most one slot per partition: the
//! one whose offset a flush will return. Cells live in [`Pages`], page `k`
//! holding `16 << k` cells, allocated on first use.

use crate::pages::Pages;
use crate::sync::epoch::Atomic;
use crate::sync::{AtomicU64, AtomicUsize, CachePadded, LeakCheck, Ordering};

const LIVE_MASK: u64 = (1 << 31) - 1;
const SEALED: u64 = 1 << 31;
const ENTER: u64 = (1 << 32) | 1;

/// The entry number at which a send seals its generation on its own (without
/// a flush) and opens a new one, and every `ROLLOVER_RETRY` entries after
/// that until one attempt wins. Keeps entries far below their 2^32 wrap.
/// Under loom it is tiny, so that the models exercise rollovers too.
pub(crate) const ROLLOVER: u32 = if cfg!(loom) { 2 } else { 1 << 30 };
pub(crate) const ROLLOVER_RETRY: u32 = 1 << 16;

/// Partition cells: page `k` holds `16 << k` of them.
type Cells = Pages<AtomicU64, 16, 20>;
/// The number of distinct partitions a tracker can hold cells for.
pub(crate) const MAX_PARTITIONS: usize = Cells::CAPACITY;

/// Result of a send trying to take its partition's cell.
pub(crate) enum Install {
    /// The cell now points at the new record; it displaced this slot, if any.
    Installed(Option<usize>),
    /// A newer record of the partition already holds the cell.
    Superseded,
}

pub(crate) struct Generation {
    /// `entries | SEALED | live`; see the module docs. Every send and
    /// resolution writes it, so it gets a cache line of its own, away from
    /// the read-mostly fields below.
    state: CachePadded<AtomicU64>,
    /// Records of this generation resolved by `fail`.
    failed: AtomicUsize,
    /// The generation opened when this one was sealed; null while open.
    pub(crate) next: Atomic<Generation>,
    /// Partition cells, by partition number.
    cells: Cells,
    /// The generation's number: its predecessor's plus one. Lets a walk
    /// stop at a generation that may already have left the chain.
    pub(crate) id: u64,
    /// Under loom, reports a generation that is never freed.
    _leak_check: LeakCheck,
}

impl Generation {
    pub(crate) fn new(id: u64) -> Self {
        Self {
            id,
            state: CachePadded::new(AtomicU64::new(0)),
            failed: AtomicUsize::new(0),
            next: Atomic::null(),
            cells: Pages::new(),
            _leak_check: LeakCheck::new(),
        }
    }

    /// Admits one record. `Some(entry)`: the record is in, at place `entry`.
    /// `None`: the generation is sealed; the caller must [`leave`] again
    /// and retry on the open generation.
    ///
    /// [`leave`]: Self::leave
    #[inline]
    pub(crate) fn enter(&self) -> Option<u32> {
        // Acquire: the admission and the seal are RMWs of this one word, so
        // their order alone decides coverage. Reading SEALED acquires the
        // sealer's Release, so the caller's next load of `open` (and of
        // `closed`) sees what the sealer did before sealing.
        let previous = self.state.fetch_add(ENTER, Ordering::Acquire);
        // Mutant `unsealed_enter` (loom suite only) compiles this check out:
        // a send that lands after the seal stays in the sealed generation,
        // the KAFKA-2867 class.
        #[cfg(not(inflight_mutant = "unsealed_enter"))]
        if previous & SEALED != 0 {
            return None;
        }
        Some((previous >> 32) as u32)
    }

    /// Removes one record (a resolution, or a send backing out). Returns true
    /// when it was the last live record of a sealed generation: the caller
    /// must wake the flusher, and must not touch the generation again.
    #[inline]
    #[must_use]
    pub(crate) fn leave(&self) -> bool {
        // Release: publishes this record's resolution (and failure count) to
        // the flusher's Acquire read of `live`. The wake-up that may follow
        // is ordered by the SeqCst fence in `Waiter::wake`.
        let previous = self.state.fetch_sub(1, Ordering::Release);
        debug_assert!(previous & LIVE_MASK != 0, "generation count underflow");
        let last = previous & LIVE_MASK == 1 && previous & SEALED != 0;
        // Mutant `lost_wakeup` (loom suite only): the last resolution of a
        // sealed generation forgets to wake the flusher.
        #[cfg(inflight_mutant = "lost_wakeup")]
        let last = {
            let _ = last;
            false
        };
        last
    }

    /// Removes `n` records, `failed` of them failed, at once: what the
    /// watermark advance does for the records it passes. Returns true as
    /// [`leave`](Self::leave) does.
    #[must_use]
    pub(crate) fn leave_many(&self, n: u64, failed: u64) -> bool {
        if failed != 0 {
            // Relaxed: published by the Release `fetch_sub` below.
            self.failed.fetch_add(failed as usize, Ordering::Relaxed);
        }
        // Release: as in `leave`.
        let previous = self.state.fetch_sub(n, Ordering::Release);
        debug_assert!(previous & LIVE_MASK >= n, "generation count underflow");
        previous & LIVE_MASK == n && previous & SEALED != 0
    }

    /// Closes the generation to new records. Returns true if it was already
    /// sealed.
    pub(crate) fn seal(&self) -> bool {
        // Release: a send that reads SEALED (Acquire in `enter`) also sees
        // `next` and the moved `open`, both set before this.
        self.state.fetch_or(SEALED, Ordering::Release) & SEALED != 0
    }

    /// Unresolved records of the generation.
    #[inline]
    pub(crate) fn live(&self) -> usize {
        // Acquire: sees every resolution (and failure count) released by
        // `leave`. A waiter reads this after the SeqCst fence of
        // `Waiter::register`.
        (self.state.load(Ordering::Acquire) & LIVE_MASK) as usize
    }

    /// Records that entered the generation (including sends that backed out
    /// of a sealed one). A send that returned before the caller started is
    /// counted: its entering RMW happens before this load.
    pub(crate) fn entries(&self) -> u32 {
        // Acquire: as in `live`.
        (self.state.load(Ordering::Acquire) >> 32) as u32
    }

    /// Whether the generation is sealed.
    pub(crate) fn is_sealed(&self) -> bool {
        // Acquire: a sealed generation's `next` is visible (set before seal).
        self.state.load(Ordering::Acquire) & SEALED != 0
    }

    /// Counts a failed resolution. Call before the record's [`leave`].
    ///
    /// [`leave`]: Self::leave
    pub(crate) fn add_failed(&self) {
        // Relaxed: published by the Release `leave` that follows.
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Failed records. Meaningful once `live` was read as zero.
    pub(crate) fn failed(&self) -> usize {
        // Relaxed: ordered by the caller's read of `live` == 0.
        self.failed.load(Ordering::Relaxed)
    }

    /// Makes the record (`entry`, `slot`) its partition's latest, unless a
    /// newer one got there first. The caller's record is in this generation
    /// and unresolved, so the generation cannot be folded meanwhile.
    pub(crate) fn install(&self, partition: usize, entry: u32, slot: usize) -> Install {
        debug_assert!(partition < MAX_PARTITIONS);
        let cell = self.cells.get_or_alloc(partition, || AtomicU64::new(0));
        let mine = (u64::from(entry) << 32) | (slot as u64 + 1);
        // Acquire: see the state of the slot we may displace.
        let mut current = cell.load(Ordering::Acquire);
        loop {
            if current != 0 && (current >> 32) as u32 > entry {
                return Install::Superseded;
            }
            // AcqRel: Release publishes our slot's prepared state to whoever
            // displaces it or folds the cell; Acquire takes over the hold of
            // the slot we displace.
            match cell.compare_exchange_weak(current, mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let displaced = (current != 0).then(|| (current & 0xffff_ffff) as usize - 1);
                    return Install::Installed(displaced);
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Calls `f(partition, slot)` for every cell that holds a record. Only
    /// for a sealed generation with no live records, whose cells are final.
    pub(crate) fn for_each_cell(&self, mut f: impl FnMut(usize, usize)) {
        self.cells.for_each(|partition, cell| {
            // Relaxed: the caller's Acquire read of `live` == 0 ordered every
            // install before this read.
            let value = cell.load(Ordering::Relaxed);
            if value != 0 {
                f(partition, (value & 0xffff_ffff) as usize - 1);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enter_counts_orders_and_stops_at_the_seal() {
        let g = Generation::new(0);
        assert_eq!(g.enter(), Some(0));
        assert_eq!(g.enter(), Some(1));
        assert_eq!(g.live(), 2);
        assert!(!g.seal());
        assert_eq!(g.enter(), None);
        assert!(!g.leave(), "the refused entrant is not the last record");
        assert!(!g.leave());
        assert!(g.leave(), "the last record of a sealed generation wakes");
        assert_eq!(g.live(), 0);
    }

    #[test]
    fn cells_keep_the_latest_entry() {
        let g = Generation::new(0);
        assert!(matches!(g.install(3, 5, 10), Install::Installed(None)));
        assert!(matches!(g.install(3, 4, 11), Install::Superseded));
        assert!(matches!(g.install(3, 6, 12), Install::Installed(Some(10))));
        assert!(matches!(g.install(100, 0, 13), Install::Installed(None)));
        let mut seen = Vec::new();
        g.for_each_cell(|p, s| seen.push((p, s)));
        assert_eq!(seen, vec![(3, 12), (100, 13)]);
    }
}
