//! Generations and the sharded counts that decide which records each one
//! holds.
//!
//! This module owns the count shards, a generation's pending count, its
//! failure count, its link to the next generation and its partition cells.
//! The tracker owns the chain of generations and decides when one is sealed,
//! folded or freed.
//!
//! # Count shards
//!
//! Records are counted in [`SHARDS`] cache-padded words that belong to the
//! tracker, not to a generation. A thread uses the shard its thread number
//! (`sync::thread_index`) picks, so threads that send and resolve their own records never write a
//! cache line another thread writes.
//!
//! ```text
//!  63                                  24 23                            0
//! +--------------------------------------+------------------------------+
//! |                epoch                 |             live             |
//! +--------------------------------------+------------------------------+
//! ```
//!
//! `epoch` (the low 40 bits of a generation number) says which generation
//! the shard is counting for; `live` counts that generation's unresolved
//! records that entered through this shard and have not yet been handed
//! over (fewer than 2^24, the slot limit).
//!
//! - **enter** (send): CAS `live + 1`, only if `epoch` is the number of the
//!   open generation the sender loaded. A shard whose epoch is newer makes
//!   the sender reload `open`; one whose epoch is older is being captured by
//!   a sealer, and the sender helps capture it.
//! - **capture** (seal): CAS the word from `(e, n)` to `(e + 1, 0)` and add
//!   `n` to generation `e`'s pending count. Each shard moves past each
//!   generation exactly once, in generation order.
//! - **leave** (resolution): CAS `live − 1` while the word still has the
//!   record's epoch; once the shard was captured, subtract one from the
//!   generation's pending count instead.
//!
//! Coverage is decided per shard by the order of two RMWs on its word: a
//! send whose entering CAS precedes the capture is counted in the sealed
//! generation (and covered by the flush that sealed it); a later one finds
//! the newer epoch and enters the newer generation. Because the sealer
//! moves `open` before capturing any shard, and a sender only enters the
//! epoch of the `open` it loaded, a send that happens after another one of
//! the same thread, or after one it heard about, never lands in an older
//! generation than it: covered sends form a prefix of every chain of
//! sends ordered by happens-before.
//!
//! # The pending count
//!
//! A generation's `pending` is `UNIT` for each shard not yet captured for
//! it, plus the records handed over by captures, minus the resolutions that
//! came after. It starts at `SHARDS × UNIT`. A leave may reach it before
//! the capture of its shard has added that shard's records (the capture is
//! a CAS, then an add), so it may dip by a few below a multiple of `UNIT`
//! for a moment, but it reads zero only once every shard was captured and
//! every record resolved; whoever takes it to zero wakes waiters, and that
//! happens exactly once.
//!
//! # Partition cells
//!
//! For each partition with a record in the generation, a cell holds the slot
//! index of the partition's latest record, `slot + 1`, 0 when empty, with
//! the partition's life that record was sent in. A send CASes itself in
//! and drops the hold on the record it displaced, unless the cell holds a
//! record of a newer life (a send that raced a revoke never displaces the
//! new life's record: see "A send of an ended life" in `revoke`), so each
//! generation holds at most one slot per partition: the one whose offset a
//! flush will return. Sends ordered by happens-before swap in that order;
//! concurrent sends of one partition have no order of their own, and
//! whichever swaps last is the latest (both are covered by the same flush).
//! Cells live in [`Pages`], page `k` holding `64 << k` cells, allocated on
//! first use; consecutive partition numbers go to different cache lines
//! (see [`cell_index`]), so threads with partitions of their own do not
//! share one.

use crate::pages::Pages;
use crate::sync::epoch::Atomic;
use crate::sync::{AtomicPtr, AtomicU64, CachePadded, LeakCheck, Ordering};
use std::time::Instant;

/// How many count shards a tracker has. Two under loom: enough for the
/// models to reach a shard that lags behind `open`, few enough to keep them
/// small.
pub(crate) const SHARDS: usize = if cfg!(loom) { 2 } else { 64 };

const LIVE_BITS: u32 = 24;
const LIVE_MASK: u64 = (1 << LIVE_BITS) - 1;
/// Shard words keep generation numbers modulo 2^40: a record would have to
/// stay unresolved across 2^40 seals (35 years of a flush every
/// millisecond) for two of them to be confused.
const EPOCH_MASK: u64 = (1 << (64 - LIVE_BITS)) - 1;
/// What each shard not yet captured adds to a generation's pending count;
/// far above any live count (< 2^24), so the two never mix.
const UNIT: u64 = 1 << 32;

#[inline]
fn epoch_of(id: u64) -> u64 {
    id & EPOCH_MASK
}

#[inline]
fn word_epoch(word: u64) -> u64 {
    word >> LIVE_BITS
}

#[inline]
fn word_live(word: u64) -> u64 {
    word & LIVE_MASK
}

/// Partition cells: page `k` holds `64 << k` of them.
type Cells = Pages<AtomicU64, CELLS_FIRST, 18>;
const CELLS_FIRST: usize = 64;
/// Cells per 64-byte cache line.
const CELLS_PER_LINE: usize = 8;
/// The number of distinct partitions a tracker can hold cells for.
pub(crate) const MAX_PARTITIONS: usize = Cells::CAPACITY;

/// Where partition `partition`'s cell sits: within each page, consecutive
/// partitions go to consecutive cache lines, wrapping round, so partitions
/// numbered close together (typically those of different threads) do not
/// share a line. A bijection on each page; [`partition_of_cell`] inverts it.
#[inline]
fn cell_index(partition: usize) -> usize {
    let (start, offset) = page_of(partition);
    start + cell_offset(start + CELLS_FIRST, offset)
}

/// [`cell_index`] within a page of `len` cells: where the cell of the
/// partition at `offset` in the page sits in it.
#[inline]
fn cell_offset(len: usize, offset: usize) -> usize {
    let lines = len / CELLS_PER_LINE;
    (offset % lines) * CELLS_PER_LINE + offset / lines
}

/// The partition whose cell is at `index`: the inverse of [`cell_index`].
fn partition_of_cell(index: usize) -> usize {
    let (start, offset) = page_of(index);
    let lines = (start + CELLS_FIRST) / CELLS_PER_LINE;
    start + (offset % CELLS_PER_LINE) * lines + offset / CELLS_PER_LINE
}

/// The first index of the page holding `index`, and `index`'s offset in it.
#[inline]
fn page_of(index: usize) -> (usize, usize) {
    let x = index + CELLS_FIRST;
    // The page's length, `CELLS_FIRST << page`: the highest bit of `x`.
    let len = 1 << (usize::BITS - 1 - x.leading_zeros());
    (len - CELLS_FIRST, x - len)
}

/// A record's generation and count shard in one pointer, for its slot:
/// generations are aligned to at least `SHARDS` bytes, so the shard fits in
/// the pointer's low bits.
#[inline]
pub(crate) fn entered_at(generation: &Generation, shard: usize) -> *const () {
    debug_assert!(shard < SHARDS);
    (generation as *const Generation)
        .cast::<()>()
        .wrapping_byte_add(shard)
}

/// The generation and shard that [`entered_at`] packed.
#[inline]
pub(crate) fn entered_from(packed: *const ()) -> (*const Generation, usize) {
    let shard = packed.addr() % SHARDS;
    (packed.wrapping_byte_sub(shard).cast::<Generation>(), shard)
}

const _: () = assert!(SHARDS.is_power_of_two() && std::mem::align_of::<Generation>() >= SHARDS);

/// How [`Shards::enter`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The record is counted in the generation.
    Entered,
    /// The shard counts for a newer generation: `open` moved on; reload it.
    Moved,
    /// The shard still counts for an older generation, being sealed: help
    /// capture it, then retry.
    Lagging,
}

/// The tracker's count shards; see the module docs.
pub(crate) struct Shards {
    words: [CachePadded<AtomicU64>; SHARDS],
}

impl Shards {
    pub(crate) fn new() -> Self {
        Self {
            words: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
        }
    }

    /// Counts `n` records (one send, or one chunk of a batch) into the
    /// generation numbered `id` (the open one, as the caller loaded it)
    /// through `shard`, if the shard counts for it: all of them, or none.
    #[inline]
    pub(crate) fn enter(&self, shard: usize, id: u64, n: u64) -> Entry {
        let epoch = epoch_of(id);
        let word = &self.words[shard];
        // Acquire: a newer epoch here was set by a capture, which came after
        // its capturer saw `open` moved on; acquiring it makes the caller's
        // reload of the open generation's number (and of `closed`) see that.
        let mut current = word.load(Ordering::Acquire);
        loop {
            let seen = word_epoch(current);
            if seen != epoch {
                // Epochs only grow, one capture at a time (modulo 2^40).
                let ahead = seen.wrapping_sub(epoch) & EPOCH_MASK;
                return if ahead < EPOCH_MASK / 2 {
                    Entry::Moved
                } else {
                    Entry::Lagging
                };
            }
            debug_assert!(word_live(current) + n <= LIVE_MASK, "shard count overflow");
            // AcqRel: this RMW and the capture's CAS on the same word decide
            // coverage by their order alone; Acquire (also on failure) as
            // for the load above.
            match word.compare_exchange_weak(
                current,
                current + n,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Entry::Entered,
                Err(seen) => current = seen,
            }
        }
    }

    /// Removes one record of `generation` that entered through `shard` (a
    /// resolution, or a send backing out). Returns true when that left the
    /// generation with nothing pending: the caller must wake waiters, and
    /// must not touch the generation again.
    #[inline]
    #[must_use]
    pub(crate) fn leave(&self, shard: usize, generation: &Generation) -> bool {
        self.leave_many(shard, generation, 1)
    }

    /// [`leave`](Self::leave) for `n` records at once (the watermark
    /// advance passing several).
    #[inline]
    #[must_use]
    pub(crate) fn leave_many(&self, shard: usize, generation: &Generation, n: u64) -> bool {
        let epoch = epoch_of(generation.id);
        let word = &self.words[shard];
        // Relaxed: only the CAS's success counts; a newer epoch means the
        // shard was captured, and the count goes to `pending` instead.
        let mut current = word.load(Ordering::Relaxed);
        while word_epoch(current) == epoch {
            debug_assert!(word_live(current) >= n, "shard count underflow");
            // Release: publishes the resolution to the capture that takes
            // this word (its Acquire), and through it to the flusher.
            match word.compare_exchange_weak(
                current,
                current - n,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return false,
                Err(seen) => current = seen,
            }
        }
        generation.settle(n)
    }

    /// Moves `shard` past `generation` if it still counts for it, handing
    /// its records over to the generation's pending count. Returns true if
    /// that left the generation with nothing pending (the caller wakes
    /// waiters). Callers capture a shard for generations in their order.
    pub(crate) fn capture(&self, shard: usize, generation: &Generation) -> bool {
        let epoch = epoch_of(generation.id);
        let moved = epoch_of(generation.id + 1) << LIVE_BITS;
        let word = &self.words[shard];
        // Acquire: see the resolutions released into the word.
        let mut current = word.load(Ordering::Acquire);
        loop {
            if word_epoch(current) != epoch {
                return false; // captured already, by us or a helper
            }
            // Mutant `unsealed_enter` (loom suite only): the capture reads
            // the count and then overwrites the word, two steps, so a send
            // that enters in between stays in the sealed generation without
            // being counted, the KAFKA-2867 class.
            #[cfg(inflight_mutant = "unsealed_enter")]
            {
                word.store(moved, Ordering::Release);
                return generation.hand_over(word_live(current));
            }
            // AcqRel: Acquire takes the resolutions released into the word;
            // Release: a sender that reads the new epoch also sees `open`
            // moved on, which the sealer did before capturing.
            #[allow(unreachable_code)]
            match word.compare_exchange_weak(current, moved, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return generation.hand_over(word_live(current)),
                Err(seen) => current = seen,
            }
        }
    }

    /// Whether every shard counts for `generation` and holds no record of
    /// it: nothing sent into it is unresolved.
    ///
    /// Each shard is checked with a read-modify-write (a compare-exchange
    /// that writes back the value it expects), not a load: `drain` after
    /// `close` skips the seal when this says idle, and a send racing it
    /// must then see the close. Two RMWs on one word are ordered: if ours
    /// comes first, the send's entering CAS reads our write and acquires
    /// what this thread did before (the close), so the send backs out; if
    /// the send's comes first, we read its count and the shard is not idle.
    /// A plain load may read a value older than the send's entry and still
    /// hand the send nothing (a loom model catches that, mutant `idle_load`).
    pub(crate) fn idle(&self, generation: &Generation) -> bool {
        let empty = epoch_of(generation.id) << LIVE_BITS;
        self.words.iter().all(|word| {
            // Mutant `idle_load` (loom suite only): the check is a plain
            // load, so a racing send may neither be waited for nor refused.
            #[cfg(inflight_mutant = "idle_load")]
            return word.load(Ordering::Acquire) == empty;
            // AcqRel: Release hands this thread's earlier writes (the close)
            // to a send whose entering CAS comes next on this word; Acquire
            // (also on failure) sees the resolutions released into it.
            #[allow(unreachable_code)]
            word.compare_exchange(empty, empty, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    /// Each shard's word, read once: a moment's snapshot, for counting.
    pub(crate) fn snapshot(&self) -> [u64; SHARDS] {
        // Relaxed: a statistic.
        std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed))
    }
}

pub(crate) struct Generation {
    /// See the module docs. Written by captures and by resolutions after
    /// the capture of their shard, so it gets a cache line of its own, away
    /// from the read-mostly fields below.
    pending: CachePadded<AtomicU64>,
    /// Records of this generation resolved by `fail`, as a list of
    /// `(partition, life, count)` (pushed before the records' leave, so
    /// final once the generation drained). Failures are rare: a node per
    /// failed resolution (or per run of them, from a watermark advance).
    /// Kept per partition and life so that a revoke can forgive them.
    failures: AtomicPtr<Failure>,
    /// The generation opened when this one was sealed; null while open.
    pub(crate) next: Atomic<Generation>,
    /// Partition cells, by [`cell_index`] of the partition number.
    cells: Cells,
    /// The generation's number: its predecessor's plus one. Its low 40 bits
    /// are the epoch of the shards counting for it.
    pub(crate) id: u64,
    /// The generation sealed to open this one (null for the first). Only
    /// followed while a record counts in a generation at least that old,
    /// which keeps every generation from there on alive (they are folded
    /// oldest first).
    pub(crate) prev: *const Generation,
    /// When the generation opened (its predecessor was sealed): the age of
    /// its records, to within the time it stayed open (for `stats` only;
    /// the hot path reads no clock).
    pub(crate) opened: Instant,
    /// Under loom, reports a generation that is never freed.
    _leak_check: LeakCheck,
}

impl Generation {
    pub(crate) fn new(id: u64, prev: *const Generation) -> Self {
        Self {
            id,
            prev,
            opened: Instant::now(),
            pending: CachePadded::new(AtomicU64::new(SHARDS as u64 * UNIT)),
            failures: AtomicPtr::new(std::ptr::null_mut()),
            next: Atomic::null(),
            cells: Pages::new(),
            _leak_check: LeakCheck::new(),
        }
    }

    /// Adds a captured shard's `live` records and drops its `UNIT`.
    fn hand_over(&self, live: u64) -> bool {
        // AcqRel: Release passes the resolutions the capture acquired on to
        // the flusher's Acquire read of `pending`; Acquire, when this makes
        // it zero, sees every resolution settled before.
        let previous = self.pending.fetch_sub(UNIT - live, Ordering::AcqRel);
        previous == UNIT - live
    }

    /// Removes `n` resolved records after their shard was captured.
    fn settle(&self, n: u64) -> bool {
        // Release: publishes the resolutions to the flusher's Acquire read
        // of `pending`. The wake-up that may follow is ordered by the SeqCst
        // fence in `Waiter::wake`.
        let previous = self.pending.fetch_sub(n, Ordering::Release);
        debug_assert!(previous >= n, "generation count underflow");
        let last = previous == n;
        // Mutant `lost_wakeup` (loom suite only): the last resolution of a
        // sealed generation forgets to wake the flusher.
        #[cfg(inflight_mutant = "lost_wakeup")]
        let last = {
            let _ = last;
            false
        };
        last
    }

    /// Whether every shard was captured for the generation and every record
    /// in it resolved: its cells and failure count are final.
    #[inline]
    pub(crate) fn drained(&self) -> bool {
        // Acquire: sees every resolution (and failure count) released into
        // `pending`. A waiter reads this after the SeqCst fence of
        // `Waiter::register`.
        self.pending.load(Ordering::Acquire) == 0
    }

    /// Unresolved records of the generation, given a [`Shards::snapshot`]
    /// taken just before: 0 exactly when [`drained`](Self::drained),
    /// otherwise a moment's estimate of at least 1.
    pub(crate) fn pending(&self, shards: &[u64; SHARDS]) -> usize {
        if self.drained() {
            0
        } else {
            self.live(shards).max(1)
        }
    }

    /// Unresolved records of the generation, given a [`Shards::snapshot`]:
    /// exact when nothing runs concurrently, a moment's estimate otherwise.
    pub(crate) fn live(&self, shards: &[u64; SHARDS]) -> usize {
        // Acquire: as in `drained`.
        let pending = self.pending.load(Ordering::Acquire);
        // Captured records: `pending` less its multiple of UNIT, which may
        // be a little negative for a moment (see the module docs).
        let captured = (pending.wrapping_add(UNIT / 2) & (UNIT - 1)) as i64 - (UNIT / 2) as i64;
        let epoch = epoch_of(self.id);
        let uncaptured: u64 = shards
            .iter()
            .filter(|&&word| word_epoch(word) == epoch)
            .map(|&word| word_live(word))
            .sum();
        (captured + uncaptured as i64).max(0) as usize
    }

    /// Counts `n` failed resolutions of records of `partition` sent in
    /// its life `life`. Call before the records' leave. Allocates (a
    /// failure is not the steady state).
    pub(crate) fn add_failed(&self, partition: u32, life: u32, n: u64) {
        if n == 0 {
            return;
        }
        let node = Box::into_raw(Box::new(Failure {
            partition,
            life,
            count: n,
            next: std::ptr::null_mut(),
        }));
        // Relaxed: a first guess; the CAS decides.
        let mut head = self.failures.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is ours until the CAS publishes it.
            unsafe { (*node).next = head };
            // Release: publishes the node to readers of the list (Acquire);
            // Relaxed on failure: we only retry.
            match self.failures.compare_exchange_weak(
                head,
                node,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => head = seen,
            }
        }
    }

    /// Calls `f(partition, life, count)` for each failure counted so far
    /// (all of them, once the generation drained).
    pub(crate) fn for_each_failure(&self, mut f: impl FnMut(u32, u32, u64)) {
        // Acquire: pairs with the Release CAS that pushed the first node;
        // nodes never change after they are pushed.
        let mut node = self.failures.load(Ordering::Acquire);
        // SAFETY: nodes are freed only when the generation drops, and the
        // caller holds it.
        while let Some(failure) = unsafe { node.as_ref() } {
            f(failure.partition, failure.life, failure.count);
            node = failure.next;
        }
    }

    /// Makes `slot`, a record of its partition's life `life`, the
    /// partition's latest record in this generation, unless the cell holds
    /// a record of a newer life (the caller's send raced a revoke and a
    /// send of the new life came first: see [`Installed::Outranked`]).
    /// The caller's record is in this generation and unresolved, so the
    /// generation cannot be folded meanwhile.
    #[inline]
    pub(crate) fn install(&self, partition: usize, slot: usize, life: u32) -> Installed {
        debug_assert!(partition < MAX_PARTITIONS);
        debug_assert!((slot as u64) < u64::from(u32::MAX));
        // The cell at `cell_index(partition)`, with one page lookup.
        let cell = self
            .cells
            .get_or_alloc_placed(partition, cell_offset, || AtomicU64::new(0));
        debug_assert!(self
            .cells
            .get(cell_index(partition))
            .is_some_and(|at| std::ptr::eq(at, cell)));
        let mine = cell_word(slot, life);
        // Relaxed: a first guess; the CAS below decides, and its Acquire
        // (on success or failure) is what orders what we then read.
        let mut current = cell.load(Ordering::Relaxed);
        loop {
            // Mutant `stale_displaces_new` (loom suite only): an older
            // life's record displaces a newer one's, whose offset a flush
            // then never reports.
            #[cfg(not(inflight_mutant = "stale_displaces_new"))]
            if current != 0 && crate::watermark::newer(cell_life(current), life) {
                // Acquire: the newer record's sender read the bumped life
                // before its Release install, so our re-load of the life
                // after this sees the bump too (the send then releases its
                // record as a late one).
                crate::sync::fence(Ordering::Acquire);
                return Installed::Outranked;
            }
            // AcqRel: Release publishes our slot's prepared state to whoever
            // displaces it or folds the cell; Acquire takes over the hold of
            // the slot we displace, and sees a newer life's install.
            match cell.compare_exchange_weak(current, mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return match cell_slot(current) {
                        Some(displaced) => Installed::Displaced(displaced),
                        None => Installed::First,
                    }
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Calls `f(partition, slot)` for every cell that holds a record. Only
    /// for a drained generation, whose cells are final.
    pub(crate) fn for_each_cell(&self, mut f: impl FnMut(usize, usize, u32)) {
        self.cells.for_each(|index, cell| {
            // Relaxed: the caller's Acquire read of `pending` == 0 ordered
            // every install before this read.
            let value = cell.load(Ordering::Relaxed);
            if let Some(slot) = cell_slot(value) {
                f(partition_of_cell(index), slot, cell_life(value));
            }
        });
    }
}

/// What [`Generation::install`] did with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Installed {
    /// The cell was empty: the record is the partition's first here.
    First,
    /// The record displaced this slot's, whose `HELD` hold passes to the
    /// caller.
    Displaced(usize),
    /// The cell holds a record of a newer life of the partition: the
    /// caller's record is of an ended life, and stays out of the cell
    /// (its `HELD` hold is the caller's to drop). Its send then finds the
    /// life moved on and releases it.
    Outranked,
}

/// A cell's word: the life of the record's partition in the high half,
/// `slot + 1` in the low half (0 for an empty cell). The life rides along
/// so that an install can compare lives without reading a slot that may be
/// moving on.
#[inline]
fn cell_word(slot: usize, life: u32) -> u64 {
    (u64::from(life) << 32) | (slot as u64 + 1)
}

#[inline]
fn cell_slot(word: u64) -> Option<usize> {
    ((word & 0xffff_ffff) as usize).checked_sub(1)
}

#[inline]
fn cell_life(word: u64) -> u32 {
    (word >> 32) as u32
}

/// One entry of a generation's failure list.
pub(crate) struct Failure {
    partition: u32,
    life: u32,
    count: u64,
    next: *mut Failure,
}

impl Drop for Generation {
    fn drop(&mut self) {
        // Relaxed: `&mut self`, nobody else reads the list any more.
        let mut node = self.failures.load(Ordering::Relaxed);
        while !node.is_null() {
            // SAFETY: every node was made by `Box::into_raw` in `add_failed`
            // and is reachable once, from its predecessor or the head.
            let failure = unsafe { Box::from_raw(node) };
            node = failure.next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_placement_is_a_bijection_that_spreads_neighbours() {
        for partition in 0..CELLS_FIRST * 7 {
            let index = cell_index(partition);
            assert_eq!(partition_of_cell(index), partition);
            assert_eq!(page_of(index).0, page_of(partition).0, "stays in its page");
        }
        let lines: Vec<usize> = (0..8).map(|p| cell_index(p) / CELLS_PER_LINE).collect();
        let mut distinct = lines.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), 8, "partitions 0..8 on 8 lines: {lines:?}");
        assert!(partition_of_cell(MAX_PARTITIONS - 1) < MAX_PARTITIONS);
    }

    #[test]
    fn shards_count_capture_and_settle() {
        let shards = Shards::new();
        let g = Generation::new(0, std::ptr::null());
        assert_eq!(shards.enter(0, g.id, 1), Entry::Entered);
        assert_eq!(shards.enter(1, g.id, 1), Entry::Entered);
        assert_eq!(shards.enter(1, g.id, 1), Entry::Entered);
        assert!(!shards.idle(&g));
        assert_eq!(g.live(&shards.snapshot()), 3);
        assert!(!shards.leave(1, &g), "an open generation never drains");
        // Seal: capture every shard in turn.
        let next = Generation::new(1, std::ptr::null());
        assert!(!shards.capture(0, &g));
        assert_eq!(shards.enter(0, g.id, 1), Entry::Moved);
        assert_eq!(shards.enter(1, next.id, 1), Entry::Lagging);
        for shard in 1..SHARDS {
            assert!(!shards.capture(shard, &g));
        }
        assert!(!shards.capture(0, &g), "a second capture is a no-op");
        assert_eq!(g.live(&shards.snapshot()), 2);
        assert!(!g.drained());
        assert!(!shards.leave(0, &g));
        assert!(shards.leave(1, &g), "the last resolution drains it");
        assert!(g.drained());
        assert_eq!(g.live(&shards.snapshot()), 0);
        assert_eq!(g.pending(&shards.snapshot()), 0);
        assert!(shards.idle(&next));
        assert_eq!(next.live(&shards.snapshot()), 0, "open and empty");
        assert_eq!(
            next.pending(&shards.snapshot()),
            1,
            "not drained: at least 1"
        );
        assert_eq!(shards.enter(1, next.id, 1), Entry::Entered);
        assert!(!shards.idle(&next));
    }

    #[test]
    fn a_resolution_may_settle_before_its_shard_is_handed_over() {
        let shards = Shards::new();
        let g = Generation::new(0, std::ptr::null());
        assert_eq!(shards.enter(0, g.id, 1), Entry::Entered);
        // The capture's CAS moved the word, but its add has not landed: the
        // resolution settles against `pending` first.
        shards.words[0].store(1 << LIVE_BITS, Ordering::Relaxed);
        assert!(!shards.leave(0, &g));
        assert!(!g.drained());
        for shard in 1..SHARDS {
            assert!(!shards.capture(shard, &g));
        }
        assert!(g.hand_over(1), "the late add drains it");
        assert!(g.drained());
    }

    #[test]
    fn the_shard_rides_in_the_generation_pointer() {
        let g = Generation::new(7, std::ptr::null());
        for shard in 0..SHARDS {
            let (back, s) = entered_from(entered_at(&g, shard));
            assert_eq!((back, s), (&g as *const Generation, shard));
        }
    }

    #[test]
    fn cells_keep_the_latest_install() {
        let g = Generation::new(0, std::ptr::null());
        assert_eq!(g.install(3, 10, 0), Installed::First);
        assert_eq!(g.install(3, 11, 0), Installed::Displaced(10));
        assert_eq!(g.install(100, 13, 0), Installed::First);
        let mut seen = Vec::new();
        g.for_each_cell(|p, s, l| seen.push((p, s, l)));
        seen.sort_unstable();
        assert_eq!(seen, vec![(3, 11, 0), (100, 13, 0)]);
    }

    #[test]
    fn an_older_life_never_displaces_a_newer_one() {
        let g = Generation::new(0, std::ptr::null());
        assert_eq!(g.install(3, 10, 5), Installed::First);
        assert_eq!(g.install(3, 11, 4), Installed::Outranked, "stale");
        assert_eq!(g.install(3, 12, 5), Installed::Displaced(10), "same life");
        assert_eq!(g.install(3, 13, 6), Installed::Displaced(12), "newer life");
        // Lives compare as serial numbers: u32::MAX is older than 0.
        assert_eq!(g.install(7, 20, 0), Installed::First);
        assert_eq!(g.install(7, 21, u32::MAX), Installed::Outranked);
        let mut seen = Vec::new();
        g.for_each_cell(|p, s, l| seen.push((p, s, l)));
        seen.sort_unstable();
        assert_eq!(seen, vec![(3, 13, 6), (7, 20, 0)]);
    }
}
