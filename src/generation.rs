//! Generations: what each one holds, and how it knows it has drained.
//!
//! This module owns a generation's pending count, its failure count, its
//! link to the next generation and its partition cells.
//! The tracker owns the chain of generations and decides when one is sealed,
//! folded or freed.
//!
//! # Counts
//!
//! Records are counted in the tracker's count words (see [`crate::counts`]),
//! which a seal captures for each generation it closes.
//!
//! # The pending count
//!
//! A generation's `pending` is `UNIT` for each count word (two per shard)
//! not yet captured for it, plus the (signed) counts captures handed over,
//! minus the resolutions that came after. It starts at `2 × SHARDS ×
//! UNIT`. A leave may reach it before the capture of its word has added
//! that word's records, and one word's count may be negative while another
//! holds the records it cancels, so it may dip a little below a multiple
//! of `UNIT` for a moment; but every count and sum of counts is far below
//! `UNIT`, so it reads zero only once every word was captured and every
//! record resolved; whoever takes it to zero wakes waiters, and that
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
//! A tracker with offsets inline keeps the offset itself in the cell
//! instead, and holds no slot (see `cell` for both formats).
//! Cells live in [`Pages`], page `k` holding `64 << k` cells, allocated on
//! first use; consecutive partition numbers go to different cache lines
//! (see [`cell_index`]), so threads with partitions of their own do not
//! share one.

use crate::cell::{self, Latest};
use crate::counts::{Snapshot, SHARDS};
use crate::pages::Pages;
use crate::sync::epoch::Atomic;
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, CachePadded, LeakCheck, Ordering};
use std::time::Instant;

/// What each count word not yet captured adds to a generation's pending
/// count; far above any count (within ±2^25) or sum of them, so the two
/// never mix.
const UNIT: u64 = 1 << 40;

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

/// Aligned so that a record's shard and entry word fit in the low bits of
/// its generation's address (see `counts::entered_at`).
#[repr(align(128))]
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
    /// The generation's number: its predecessor's plus one. Its low 36 bits
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
            pending: CachePadded::new(AtomicU64::new(2 * SHARDS as u64 * UNIT)),
            failures: AtomicPtr::new(std::ptr::null_mut()),
            next: Atomic::null(),
            cells: Pages::new(),
            _leak_check: LeakCheck::new(),
        }
    }

    /// Adds the records of `words` captured count words (`live`, the sum
    /// of their signed counts) and drops their `UNIT`s. Returns true if
    /// that drained the generation.
    pub(crate) fn hand_over(&self, words: u64, live: i64) -> bool {
        if words == 0 {
            return false;
        }
        let drop = (words * UNIT).wrapping_sub(live as u64);
        // AcqRel: Release passes the resolutions the capture acquired on to
        // the flusher's Acquire read of `pending`; Acquire, when this makes
        // it zero, sees every resolution settled before.
        let previous = self.pending.fetch_sub(drop, Ordering::AcqRel);
        previous == drop
    }

    /// Removes `n` resolved records after their shard was captured.
    pub(crate) fn settle(&self, n: u64) -> bool {
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

    /// Unresolved records of the generation, given a
    /// `counts::Shards::snapshot` taken just before: 0 exactly when [`drained`](Self::drained),
    /// otherwise a moment's estimate of at least 1.
    pub(crate) fn pending(&self, shards: &Snapshot) -> usize {
        if self.drained() {
            0
        } else {
            self.live(shards).max(1)
        }
    }

    /// Unresolved records of the generation, given a
    /// `counts::Shards::snapshot`:
    /// exact when nothing runs concurrently, a moment's estimate otherwise.
    pub(crate) fn live(&self, shards: &Snapshot) -> usize {
        // Acquire: as in `drained`.
        let pending = self.pending.load(Ordering::Acquire);
        // Captured records: `pending` less its multiple of UNIT, which may
        // be a little negative for a moment (see the module docs).
        let captured = (pending.wrapping_add(UNIT / 2) & (UNIT - 1)) as i64 - (UNIT / 2) as i64;
        (captured + shards.uncaptured(self.id)).max(0) as usize
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

    /// Makes `latest` (a held slot, or an inline offset's bits), a record
    /// of its partition's life `life`, the partition's latest record in
    /// this generation, unless the cell holds a record of a newer life (the
    /// caller's send raced a revoke and a send of the new life came first:
    /// see [`Installed::Outranked`]). `inline` is the cell format (the
    /// tracker's mode, a constant; see `cell`). The caller's record is in
    /// this generation and unresolved, so the generation cannot be folded
    /// meanwhile.
    ///
    /// In the inline format a cell keeps its life's low 16 bits, which a
    /// word of an older life may alias as newer (a generation left
    /// unflushed across 2^15 revokes): the install then looks at
    /// `partition_life` again, and displaces the word if it still reads
    /// `life` (see below).
    #[inline(always)]
    pub(crate) fn install(
        &self,
        partition: usize,
        latest: Latest,
        (life, partition_life): (u32, &AtomicU32),
        inline: bool,
    ) -> Installed {
        let cell = self.cell(partition);
        self.install_in(cell, latest, (life, partition_life), inline)
    }

    /// `partition`'s cell in this generation, allocating its page on
    /// first use. The cell's address is fixed for the generation's life
    /// (a thread's context block keeps it, see `counts::CellHint`).
    #[inline(always)]
    pub(crate) fn cell(&self, partition: usize) -> &AtomicU64 {
        debug_assert!(partition < MAX_PARTITIONS);
        // The cell at `cell_index(partition)`, with one page lookup.
        let cell = self
            .cells
            .get_or_alloc_placed(partition, cell_offset, || AtomicU64::new(0));
        debug_assert!(self
            .cells
            .get(cell_index(partition))
            .is_some_and(|at| std::ptr::eq(at, cell)));
        cell
    }

    /// [`install`](Self::install) into `cell`, this generation's cell of
    /// the record's partition (from [`cell`](Self::cell)).
    #[inline(always)]
    pub(crate) fn install_in(
        &self,
        cell: &AtomicU64,
        latest: Latest,
        (life, partition_life): (u32, &AtomicU32),
        inline: bool,
    ) -> Installed {
        debug_assert!(!matches!(latest, Latest::Slot(s) if s as u64 >= u64::from(u32::MAX)));
        let mine = cell::word(latest, life, inline);
        // Relaxed: a first guess; the CAS below decides, and its Acquire
        // (on success or failure) is what orders what we then read.
        let mut current = cell.load(Ordering::Relaxed);
        loop {
            // Mutant `stale_displaces_new` (loom suite only): an older
            // life's record displaces a newer one's, whose offset a flush
            // then never reports.
            #[cfg(not(inflight_mutant = "stale_displaces_new"))]
            if current != 0 && cell::newer_than(current, life, inline) {
                // Acquire: the newer record's sender read the bumped life
                // before its Release install, so our re-load of the life
                // after this sees the bump too (the send then releases its
                // record as a late one).
                crate::sync::fence(Ordering::Acquire);
                // Acquire: as the send's own load. If a newer life's send
                // wrote the word, this load sees its bump (by the fence
                // above); so a life still ours means the word is of an
                // older life whose 16 bits alias a newer one: displace it.
                if !inline || partition_life.load(Ordering::Acquire) != life {
                    return Installed::Outranked;
                }
            }
            // AcqRel: Release publishes our slot's prepared state (or, for
            // an inline offset, nothing the cell does not carry) to
            // whoever displaces it or folds the cell; Acquire takes over
            // the hold of a slot we displace, and sees a newer life's
            // install.
            match cell.compare_exchange_weak(current, mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return match cell::latest(current, inline) {
                        Some(Latest::Slot(displaced)) => Installed::Displaced(displaced),
                        Some(Latest::Bits(_)) | None => Installed::First,
                    }
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Clears `partition`'s cell if it keeps an inline offset of a life
    /// older than `life`, the one a revoke began (every
    /// `cell::CLEAR_EVERY` lives; a newer life, begun by a revoke beside
    /// it, is current and stays): ended, so never reported, and its 16
    /// bits must not be left to alias a later life's. A held slot is left
    /// alone (its hold is the cell's, and its life is whole in the slot).
    /// The generation may be folding meanwhile: a fold that read the word
    /// first keeps an ended life's offset, which is never reported; one
    /// that reads the cleared word keeps nothing of it.
    pub(crate) fn forget_ended(&self, partition: usize, life: u32) {
        let Some(cell) = self.cells.get(cell_index(partition)) else {
            return;
        };
        // Relaxed: only the word's value matters; the CAS decides.
        let word = cell.load(Ordering::Relaxed);
        if cell::older_bits(word, life) {
            // Relaxed, both: an inline word publishes nothing but itself. A
            // send that displaced it meanwhile wins, and its word stays.
            let _ = cell.compare_exchange(word, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Calls `f(partition, latest, life)` for every cell that holds a
    /// record (`life` as the cell keeps it: its low 16 bits in the inline
    /// format, see `cell::widen`). Only for a drained generation, whose
    /// cells are final (but for a revoke's `forget_ended`).
    pub(crate) fn for_each_cell(&self, inline: bool, mut f: impl FnMut(usize, Latest, u32)) {
        self.cells.for_each(|index, cell| {
            // Relaxed: the caller's Acquire read of `pending` == 0 ordered
            // every install before this read.
            let value = cell.load(Ordering::Relaxed);
            if let Some(latest) = cell::latest(value, inline) {
                f(
                    partition_of_cell(index),
                    latest,
                    cell::life_of(value, inline),
                );
            }
        });
    }
}

/// What [`Generation::install`] did with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Installed {
    /// Nothing to hand back: the cell was empty (the record is the
    /// partition's first here), or it kept an inline offset, which holds
    /// no slot.
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
    use Latest::{Bits, Slot};

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
    fn cells_keep_the_latest_install() {
        let g = Generation::new(0, std::ptr::null());
        assert_eq!(install(&g, 3, 10, 0), Installed::First);
        assert_eq!(install(&g, 3, 11, 0), Installed::Displaced(10));
        assert_eq!(install(&g, 100, 13, 0), Installed::First);
        assert_eq!(cells(&g, false), vec![(3, Slot(11), 0), (100, Slot(13), 0)]);
    }

    #[test]
    fn an_older_life_never_displaces_a_newer_one() {
        let g = Generation::new(0, std::ptr::null());
        assert_eq!(install(&g, 3, 10, 5), Installed::First);
        assert_eq!(install(&g, 3, 11, 4), Installed::Outranked, "stale");
        assert_eq!(install(&g, 3, 12, 5), Installed::Displaced(10), "same life");
        assert_eq!(
            install(&g, 3, 13, 6),
            Installed::Displaced(12),
            "newer life"
        );
        // Lives compare as serial numbers: u32::MAX is older than 0.
        assert_eq!(install(&g, 7, 20, 0), Installed::First);
        assert_eq!(install(&g, 7, 21, u32::MAX), Installed::Outranked);
        assert_eq!(cells(&g, false), vec![(3, Slot(13), 6), (7, Slot(20), 0)]);
    }

    #[test]
    fn inline_cells_keep_offsets_and_hand_back_only_slots() {
        let g = Generation::new(0, std::ptr::null());
        let word = AtomicU32::new(0);
        let inline = |p, latest, life| {
            word.store(life, Ordering::Relaxed);
            g.install(p, latest, (life, &word), true)
        };
        assert_eq!(inline(3, Bits(40), 5), Installed::First);
        assert_eq!(
            inline(3, Bits(41), 5),
            Installed::First,
            "an offset holds nothing"
        );
        word.store(5, Ordering::Relaxed);
        assert_eq!(
            g.install(3, Bits(39), (4, &word), true),
            Installed::Outranked,
            "stale"
        );
        assert_eq!(
            inline(3, Slot(8), 5),
            Installed::First,
            "held path: too big"
        );
        assert_eq!(
            inline(3, Bits(43), 6),
            Installed::Displaced(8),
            "newer life"
        );
        assert_eq!(inline(9, Bits(0), 0), Installed::First);
        assert_eq!(cells(&g, true), vec![(3, Bits(43), 6), (9, Bits(0), 0)]);
        // Life 6 + 2^15 + 1 reads 6's word as newer; its life has not moved
        // on, so the word is of an older life that aliases: displaced.
        let later = 6 + (1 << 15) + 1;
        assert_eq!(inline(3, Bits(44), later), Installed::First);
        assert_eq!(cells(&g, true)[0], (3, Bits(44), later & 0xffff));
    }

    /// Review 4, item 1, in the order that breaks it: a revoke begins
    /// life 2^14 (a clearing one); before its clear, a second revoke
    /// begins 2^14 + 1 and a send of that life installs its offset; then
    /// the first revoke clears with the life it began. The newer life's
    /// offset stays (the old rule, "every life but mine", erased it), and
    /// an older life's goes, across the 16-bit wrap too.
    #[test]
    fn a_clear_keeps_a_newer_lifes_offset() {
        let g = Generation::new(0, std::ptr::null());
        let clearing = cell::CLEAR_EVERY;
        let partition_life = AtomicU32::new(clearing + 1);
        let sent = g.install(3, Bits(70), (clearing + 1, &partition_life), true);
        assert_eq!(sent, Installed::First);
        g.forget_ended(3, clearing);
        assert_eq!(
            cells(&g, true),
            vec![(3, Bits(70), (clearing + 1) & 0xffff)]
        );
        // The next clearing revoke, 2^14 lives on: that life has ended.
        g.forget_ended(3, 2 * clearing);
        assert_eq!(cells(&g, true), vec![]);
        // Across the wrap of the cell's 16 bits: 0x1_0001 is newer than
        // 0x1_0000, and 0xffff older.
        let wrap = AtomicU32::new(0x1_0001);
        assert_eq!(
            g.install(5, Bits(9), (0x1_0001, &wrap), true),
            Installed::First
        );
        g.forget_ended(5, 0x1_0000);
        assert_eq!(cells(&g, true), vec![(5, Bits(9), 1)]);
        let wrap = AtomicU32::new(0xffff);
        assert_eq!(
            g.install(6, Bits(9), (0xffff, &wrap), true),
            Installed::First
        );
        g.forget_ended(6, 0x1_0000);
        assert_eq!(cells(&g, true), vec![(5, Bits(9), 1)]);
    }

    fn install(g: &Generation, partition: usize, slot: usize, life: u32) -> Installed {
        // The held format never looks at the partition's life again.
        g.install(
            partition,
            Slot(slot),
            (life, &AtomicU32::new(u32::MAX)),
            false,
        )
    }

    fn cells(g: &Generation, inline: bool) -> Vec<(usize, Latest, u32)> {
        let mut seen = Vec::new();
        g.for_each_cell(inline, |p, l, life| seen.push((p, l, life)));
        seen.sort_unstable_by_key(|&(p, _, _)| p);
        seen
    }
}
