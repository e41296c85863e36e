//! The count words that decide which records each generation holds: an
//! owner's word, written with plain stores by one thread, and a shared word
//! per shard, written with compare-exchanges, for everyone else.
//!
//! # Shards and their words
//!
//! The tracker has [`SHARDS`] count shards. A thread uses the shard its
//! thread number (`sync::thread_index`) picks. A thread whose number is
//! below `SHARDS` is the shard's **owner**: no other live thread holds that
//! number (`sync::LOCAL_THREADS`), so no other thread writes its word.
//! Each shard has three words, all of the same layout:
//!
//! ```text
//!  63                               28 27                       0
//! +-----------------------------------+--------------------------+
//! |              epoch                |     count (signed)       |
//! +-----------------------------------+--------------------------+
//! ```
//!
//! `epoch` is the low 36 bits of a generation number; `count` a signed
//! count of records (28 bits; every count stays within ±2^25, see
//! "Counts stay bounded").
//!
//! - `own`, on a cache line of its own: the owner's net count for the
//!   generation `epoch`: its sends, less the leaves of its own records.
//!   Written by the owner alone, with Release stores (a plain `mov`),
//!   each followed by the light barrier (`sync::light_barrier`) and a look
//!   at `open_id`.
//! - `remote`: today's compare-exchange word, for the sends of threads
//!   without a shard of their own and for leaves by any thread other than
//!   the owner of a record that entered through `own`.
//! - `taken`: what the capture of `own` for the generation `epoch` (the
//!   latest generation `own` was captured for) read: a count, or [`NONE`]
//!   when it read an older epoch, or [`ROLLED`] while the owner has moved
//!   its word on to the next generation and no capture has read it yet.
//!
//! # The owner's side
//!
//! A write by the owner, of the open generation `g` as it loaded it:
//!
//! 1. If its word counts for an older generation, it **rolls**: every
//!    generation before `g` is captured for its word (it captures those
//!    not yet captured itself, with the counts it knows), then it zeroes
//!    its word for `g` and marks `taken` [`ROLLED`] (a compare-exchange:
//!    once per generation, not per record).
//! 2. It stores `(g, count + delta)`, runs the light barrier, and loads
//!    `open_id`. Unchanged: the write counts in `g`. A sealer that moves
//!    `open_id` on runs the heavy barrier before it reads `own`, and the
//!    two barriers order like `SeqCst` fences: if the sealer's read missed
//!    the write, the owner's load sees `open_id` moved.
//! 3. Moved: the write **straddles** a seal. If `own` was not captured for
//!    `g` yet, the owner captures it, with the value it wrote, and the
//!    write is in. Otherwise `taken` says what the capture read: the new
//!    count (the write is in) or the old one (it is out). A send that is
//!    out enters again in a newer generation; a leave that is out settles
//!    on `g`'s `pending` directly.
//!
//! A leave of a record of a generation that is not open any more (or not
//! the one the word counts for) settles on its `pending` directly: `own`'s
//! capture counted the record, or will.
//!
//! # The sealer's side
//!
//! A seal moves `open_id` on, runs the heavy barrier (every thread of the
//! process executes a full fence), then captures every shard for every
//! generation up to the sealed one, oldest first: `remote` with a
//! compare-exchange as before; `own` by reading it and recording what it
//! read in `taken` with a compare-exchange (a capture happens once per
//! generation and word, whoever makes it: a sealer, a helper, or the owner
//! itself). An idle owner costs the seal one load and never holds it up.
//!
//! # Counts stay bounded
//!
//! Only the owner's leaves of records that entered through `own` go to
//! `own`; other threads' leaves of them go to `remote`. An owner folds a
//! negative `remote` count into its next send's write (a compare-exchange
//! that zeroes `remote`, taken only when it is negative), so on a tracker
//! that never seals, both words stay within the records in flight (under
//! 2^24) of a small multiple of it. `pending`'s one `UNIT` per word not yet
//! captured (2^40) is far above any sum of them, so it reads zero only
//! once every word was captured and every record left.

use crate::generation::Generation;
use crate::sync::{light_barrier_as, AtomicPtr, AtomicU64, AtomicUsize, CachePadded, Ordering};

/// How many count shards a tracker has. Two under loom: enough for the
/// models to reach an owner, a thread without a shard of its own (loom's
/// third thread), and a shard that lags behind `open`.
pub(crate) const SHARDS: usize = if cfg!(loom) { 2 } else { 64 };

#[cfg(not(loom))]
const _: () = assert!(SHARDS <= crate::sync::LOCAL_THREADS);

const COUNT_BITS: u32 = 28;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Words keep generation numbers modulo 2^36: a record would have to stay
/// unresolved across 2^36 seals (two years of a flush every millisecond)
/// for two of them to be confused.
const EPOCH_MASK: u64 = (1 << (64 - COUNT_BITS)) - 1;
/// `taken`'s count when the capture read an older epoch than its own.
pub(crate) const NONE: i64 = -(1 << (COUNT_BITS - 1));
/// `taken`'s count while the owner moved its word to the generation after
/// `taken`'s, which no capture has read yet.
pub(crate) const ROLLED: i64 = NONE + 1;

/// Counts are kept biased by `BIAS` (so the field is never negative): a
/// word plus a small signed delta is the word with its count moved by it,
/// one add, never a borrow from the epoch.
const BIAS: i64 = 1 << (COUNT_BITS - 1);

#[inline]
fn pack(id: u64, count: i64) -> u64 {
    debug_assert!((NONE..-NONE).contains(&count), "count out of range");
    ((id & EPOCH_MASK) << COUNT_BITS) | ((count + BIAS) as u64 & COUNT_MASK)
}

/// `word` with its count moved by `delta`.
#[inline]
fn plus(word: u64, delta: i64) -> u64 {
    debug_assert!(
        (NONE..-NONE).contains(&(count(word) + delta)),
        "count out of range"
    );
    word.wrapping_add(delta as u64)
}

#[inline]
fn epoch(word: u64) -> u64 {
    word >> COUNT_BITS
}

#[inline]
fn count(word: u64) -> i64 {
    (word & COUNT_MASK) as i64 - BIAS
}

/// Whether `word` counts for generation `id`.
#[inline]
fn counts_for(word: u64, id: u64) -> bool {
    epoch(word) == id & EPOCH_MASK
}

/// How far generation `id` is past `word`'s epoch (negative: behind it).
#[inline]
fn behind(word: u64, id: u64) -> i64 {
    let d = (id & EPOCH_MASK).wrapping_sub(epoch(word)) & EPOCH_MASK;
    // Sign-extend the 36-bit difference.
    ((d << COUNT_BITS) as i64) >> COUNT_BITS
}

/// A record's generation, count shard, and whether it entered through the
/// shard's `own` word, in one pointer, for its slot: generations are
/// aligned to at least `2 * SHARDS` bytes, so both fit in the low bits.
#[inline]
pub(crate) fn entered_at(generation: &Generation, shard: usize, own: bool) -> *const () {
    debug_assert!(shard < SHARDS);
    (generation as *const Generation)
        .cast::<()>()
        .wrapping_byte_add(shard + SHARDS * usize::from(own))
}

/// The generation and the route (shard and `own` flag, see [`Route`])
/// that [`entered_at`] packed.
#[inline]
pub(crate) fn entered_from(packed: *const ()) -> (*const Generation, Route) {
    let low = packed.addr() % (2 * SHARDS);
    (
        packed.wrapping_byte_sub(low).cast::<Generation>(),
        Route(low),
    )
}

/// How a record entered: its shard, plus `SHARDS` if through the shard's
/// `own` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route(usize);

impl Route {
    /// Whether the thread numbered `home` leaves it through its own word:
    /// it entered through `own`, and `home` owns that shard.
    #[inline(always)]
    fn owned_by(self, home: usize) -> bool {
        self.0 == home + SHARDS
    }

    #[inline(always)]
    fn shard(self) -> usize {
        self.0 % SHARDS
    }
}

const _: () = assert!(SHARDS.is_power_of_two() && std::mem::align_of::<Generation>() >= 2 * SHARDS);

/// How [`Shards::enter`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The records are counted in the generation.
    Entered,
    /// The generation is sealed (or being sealed) without them: reload
    /// `open_id` and enter the newer one.
    Moved,
    /// The shard's `remote` word still counts for an older generation,
    /// being sealed: help capture it, then retry.
    Lagging,
}

/// What an owner's write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    /// Counted in the generation.
    In,
    /// Not counted: the generation was captured without it.
    Out,
}

/// The owner's word and the generation it counts for, and, on the same
/// cache line, what the owner's sends remember between them (its
/// [`Hint`]): the thread's context block.
struct Own {
    /// See the module docs. Written by the owner, read by captures.
    word: AtomicU64,
    /// The full number of the generation `word` counts for. Read and
    /// written by the owner alone (a thread that takes a reused number
    /// inherits it with the number, see `sync::thread_index`).
    id: AtomicU64,
    /// Generation `id` itself, set with `id` (when the word rolls), so
    /// that the owner's sends need not look it up: it stays allocated
    /// while the word counts for it (its `UNIT` for the word is in its
    /// pending count until the word is captured for it) or a record
    /// counts in it. Read and written by the owner alone, like `id`.
    generation: AtomicPtr<Generation>,
    /// The partition the owner sent to last.
    hint: Hint,
    /// Its cell in a generation the owner installed in last.
    cell: CellHint,
}

/// The cell of the partition an owner last installed a record in, and the
/// generation it belongs to, for the next send to the same partition in
/// the same generation to skip the cell's look-up (`Tracker::cell_of`).
/// Read and written by the owner alone, like `Own::id`. A send uses the
/// cell only if both its generation's number and its partition's number
/// are the hint's: generation numbers are never reused, and the send's
/// record keeps its generation (so the cell) alive, so a hint whose
/// generation is gone is never used, and needs no clearing.
pub(crate) struct CellHint {
    /// The generation's number (`u64::MAX`: none).
    pub(crate) generation: AtomicU64,
    /// The partition's number.
    pub(crate) partition: AtomicUsize,
    /// The cell.
    pub(crate) cell: AtomicPtr<AtomicU64>,
}

/// The partition an owner sent to last, for its next send to check first
/// (see `Partitions::number_hinted`): a key of the tracker's partition
/// arena, type-erased (the counts know no `P`), and its number. Read and
/// written by the owner alone, like `Own::id`: a thread that takes a
/// reused number inherits the hint with it, and a hint is only a guess
/// that the send checks with the key's `Eq`. Partition numbers and keys
/// are never reused or freed before the tracker drops, so a hint never
/// dangles and never names another partition's number.
pub(crate) struct Hint {
    /// The arena entry (`partition::Key<P>`), null before the first send.
    pub(crate) key: AtomicPtr<()>,
    /// Its partition's number.
    pub(crate) number: AtomicUsize,
}

impl Hint {
    /// A hint that names nothing yet.
    pub(crate) fn new() -> Self {
        Self {
            key: AtomicPtr::new(std::ptr::null_mut()),
            number: AtomicUsize::new(0),
        }
    }
}

/// The words other threads write.
struct Shared {
    remote: AtomicU64,
    taken: AtomicU64,
}

struct Shard {
    own: CachePadded<Own>,
    shared: CachePadded<Shared>,
}

/// The tracker's count shards; see the module docs.
pub(crate) struct Shards {
    shards: [Shard; SHARDS],
}

/// A moment's snapshot of every word, for statistics.
pub(crate) struct Snapshot {
    words: [(u64, u64, u64); SHARDS],
}

/// What the callers of [`Shards`] supply: the open generation's number and
/// generations by number.
pub(crate) trait Chain {
    /// The `open_id` word.
    fn open_id(&self) -> &AtomicU64;
    /// Generation `id`, which the caller keeps from being folded (a record
    /// counted in it, or a word not yet captured for it).
    fn numbered(&self, id: u64) -> &Generation;
    /// Whether the light barrier is a compiler fence (the heavy side is
    /// the system call), as `sync::register_barrier` answered: see
    /// `sync::light_barrier_as`.
    fn expedited(&self) -> bool;
}

impl Shards {
    /// The shards of a tracker whose generation 0 is `first`.
    pub(crate) fn new(first: &Generation) -> Self {
        let first = (first as *const Generation).cast_mut();
        Self {
            shards: std::array::from_fn(|_| Shard {
                own: CachePadded::new(Own {
                    word: AtomicU64::new(pack(0, 0)),
                    id: AtomicU64::new(0),
                    generation: AtomicPtr::new(first),
                    hint: Hint::new(),
                    cell: CellHint {
                        generation: AtomicU64::new(u64::MAX),
                        partition: AtomicUsize::new(0),
                        cell: AtomicPtr::new(std::ptr::null_mut()),
                    },
                }),
                shared: CachePadded::new(Shared {
                    remote: AtomicU64::new(pack(0, 0)),
                    // No generation captured yet (the one before 0), and
                    // `own` already counting for generation 0.
                    taken: AtomicU64::new(pack(EPOCH_MASK, ROLLED)),
                }),
            }),
        }
    }

    /// Whether the thread numbered `home` owns a shard (the one numbered
    /// `home`).
    #[inline(always)]
    pub(crate) fn owns(home: usize) -> bool {
        home < SHARDS
    }

    /// The partition hint of the thread numbered `home`, if it owns a
    /// shard: only its owner may use it (see [`Hint`]).
    #[inline(always)]
    pub(crate) fn hint(&self, home: usize) -> Option<&Hint> {
        Self::owns(home).then(|| &self.shards[home].own.hint)
    }

    /// Counts `n` records (one send, or one chunk of a batch) into the
    /// generation numbered `id` (the open one, as the caller loaded it)
    /// through the shard of the thread numbered `home`: all of them, or
    /// none. Sets `wakes` if a capture made on the way drained a
    /// generation.
    #[inline(always)]
    pub(crate) fn enter(
        &self,
        home: usize,
        id: u64,
        n: u64,
        chain: &impl Chain,
        wakes: &mut bool,
    ) -> Entry {
        if Self::owns(home) {
            self.own_enter(home, id, n, chain, wakes)
        } else {
            self.remote_enter(home % SHARDS, id, n)
        }
    }

    #[inline(always)]
    fn own_enter(&self, s: usize, id: u64, n: u64, chain: &impl Chain, wakes: &mut bool) -> Entry {
        let own = &self.shards[s].own;
        // Relaxed: the owner's own words.
        let mut current = own.word.load(Ordering::Relaxed);
        if own.id.load(Ordering::Relaxed) != id {
            if !self.roll(s, id, chain, wakes) {
                return Entry::Moved;
            }
            current = pack(id, 0);
        }
        let folded = self.fold(s, id);
        match self.own_write(s, id, plus(current, n as i64 + folded), chain, wakes) {
            Applied::In => Entry::Entered,
            Applied::Out => {
                // The capture of `id` counted neither the records nor the
                // folded leaves: settle those (their records are counted
                // in `id`, which keeps it from draining meanwhile).
                if folded != 0 {
                    *wakes |= chain.numbered(id).settle(-folded as u64);
                }
                Entry::Moved
            }
        }
    }

    /// Takes a negative count out of `remote` for the owner to add to its
    /// write, when `remote` counts for `id`: the leaves of the owner's
    /// records by other threads. Returns what it took (0 or less).
    #[inline(always)]
    fn fold(&self, s: usize, id: u64) -> i64 {
        let remote = &self.shards[s].shared.remote;
        // Relaxed: a first look; the CAS decides.
        let current = remote.load(Ordering::Relaxed);
        // A negative count: the biased field below `BIAS`.
        if current & COUNT_MASK >= BIAS as u64 || !counts_for(current, id) {
            return 0;
        }
        self.fold_slow(remote, current, id)
    }

    #[cold]
    fn fold_slow(&self, remote: &AtomicU64, mut current: u64, id: u64) -> i64 {
        // Retried while the word still holds leaves for `id`: under a steady
        // stream of other threads' leaves, a fold that gave up on one lost
        // race would let the word run on.
        while current & COUNT_MASK < BIAS as u64 && counts_for(current, id) {
            // Acquire: the leaves released into the word pass, with it, to
            // the owner's write and on to whoever captures that. Relaxed on
            // failure: the CAS's own reload decides again.
            match remote.compare_exchange_weak(
                current,
                pack(id, 0),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return count(current),
                Err(seen) => current = seen,
            }
        }
        0
    }

    /// Moves the owner's word of shard `s` on to generation `id`: every
    /// older generation captured for it first (by us, with the counts only
    /// we know, where no sealer did yet), then `taken` marked [`ROLLED`].
    /// Returns false if `id` itself was captured meanwhile (it is not open
    /// any more: the caller reloads `open_id`).
    #[cold]
    fn roll(&self, s: usize, id: u64, chain: &impl Chain, wakes: &mut bool) -> bool {
        let shard = &self.shards[s];
        // Relaxed: the owner's own words.
        let mine = shard.own.id.load(Ordering::Relaxed);
        let word = shard.own.word.load(Ordering::Relaxed);
        // Acquire: what the captures recorded, and the generations they
        // captured for.
        let mut taken = shard.shared.taken.load(Ordering::Acquire);
        loop {
            let ahead = behind(taken, id);
            if ahead <= 0 {
                // `id` was captured: sealed after the caller loaded it.
                return false;
            }
            if ahead == 1 {
                // Everything before `id` captured: no capture reads the
                // word's count for an older generation any more. Zero it
                // for `id` before marking the roll, so that a capture of
                // `id` that sees the mark never reads the old count (whose
                // epoch matches `id`'s modulo 2^36 if the word sat idle for
                // a multiple of 2^36 seals). Relaxed: the Release CAS below
                // publishes it.
                shard.own.word.store(pack(id, 0), Ordering::Relaxed);
                // AcqRel: ordered with the captures' CASes on `taken`.
                match shard.shared.taken.compare_exchange(
                    taken,
                    pack(id - 1, ROLLED),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(seen) => {
                        taken = seen;
                        continue;
                    }
                }
            }
            // Capture the generation after `taken`'s ourselves.
            let g = id + 1 - ahead as u64;
            let live = if g == mine { count(word) } else { 0 };
            let record = match count(taken) {
                ROLLED if g == mine => live,
                ROLLED => NONE,
                kept => kept,
            };
            // AcqRel: one capture per generation and word; Release passes
            // it on to the next one's Acquire.
            match shard.shared.taken.compare_exchange(
                taken,
                pack(g, record),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    // `g` is alive: its `UNIT` for this word was still in.
                    *wakes |= chain.numbered(g).hand_over(1, live);
                    taken = pack(g, record);
                }
                Err(seen) => taken = seen,
            }
        }
        // Relaxed: the owner's own word; the roll is published by the
        // write that follows.
        shard.own.id.store(id, Ordering::Relaxed);
        // `id` cannot be folded: the word counts for it now, and its
        // `UNIT` for the word is in until the word is captured for it.
        // Mutant `stale_generation_cache` (loom suite only): the owner's
        // sends keep entering the generation its word counted for before.
        #[cfg(not(inflight_mutant = "stale_generation_cache"))]
        {
            let generation = (chain.numbered(id) as *const Generation).cast_mut();
            // Relaxed: the owner's own word, as `id`.
            shard.own.generation.store(generation, Ordering::Relaxed);
        }
        true
    }

    /// The cell hint of the thread numbered `home`, if it owns a shard:
    /// only its owner may use it (see [`CellHint`]).
    #[inline(always)]
    pub(crate) fn cell_hint(&self, home: usize) -> Option<&CellHint> {
        Self::owns(home).then(|| &self.shards[home].own.cell)
    }

    /// The generation numbered `id` that the thread numbered `home` just
    /// entered (`enter` answered [`Entry::Entered`] for `id`): the one its
    /// word counts for, if it owns a shard, without a look-up.
    #[inline(always)]
    pub(crate) fn entered<'c>(&self, home: usize, id: u64, chain: &'c impl Chain) -> &'c Generation
    where
        Self: 'c,
    {
        if !Self::owns(home) {
            return chain.numbered(id);
        }
        // Relaxed: the owner's own word (see `Own::generation`).
        let generation = self.shards[home].own.generation.load(Ordering::Relaxed);
        // SAFETY: the owner's write for `id` is in (`Entry::Entered`), so
        // its word counts for `id` (`Own::id`), `generation` was set with
        // that id, and the record the caller counted keeps generation
        // `id` from being folded (and freed) while the caller uses it.
        let generation = unsafe { &*generation };
        debug_assert_eq!(generation.id, id);
        generation
    }

    /// The owner's write of `new` into its word for the open generation
    /// `id` (to which the word counts already): store, light barrier, look
    /// at `open_id`, and settle a straddle.
    #[inline(always)]
    fn own_write(
        &self,
        s: usize,
        id: u64,
        new: u64,
        chain: &impl Chain,
        wakes: &mut bool,
    ) -> Applied {
        debug_assert!(counts_for(new, id));
        let own = &self.shards[s].own;
        // Release: a capture that reads it (Acquire) sees what the owner
        // did before, the resolutions of its records included.
        own.word.store(new, Ordering::Release);
        // Pairs with the sealer's heavy barrier: either the sealer's read
        // of the word sees this write, or the load below sees `open_id`
        // moved on.
        // Mutant `no_count_fence` (loom suite only): no barrier, so a
        // capture may miss the write while the owner misses the seal.
        #[cfg(not(inflight_mutant = "no_count_fence"))]
        light_barrier_as(chain.expedited());
        // Acquire: pairs with the sealers' Release `fetch_max`.
        if chain.open_id().load(Ordering::Acquire) == id {
            return Applied::In;
        }
        self.straddle(s, id, count(new), chain, wakes)
    }

    /// The owner's write of `new` for `id` raced a seal of `id`: learns
    /// whether the capture of its word counted it, capturing the word
    /// itself if nobody did yet.
    #[cold]
    fn straddle(
        &self,
        s: usize,
        id: u64,
        new: i64,
        chain: &impl Chain,
        wakes: &mut bool,
    ) -> Applied {
        let taken = &self.shards[s].shared.taken;
        // Acquire: what the capture recorded.
        let mut current = taken.load(Ordering::Acquire);
        loop {
            if behind(current, id) != 1 {
                // Captured: by whoever read the word, old or new.
                debug_assert!(behind(current, id) <= 0);
                return if count(current) == new {
                    Applied::In
                } else {
                    Applied::Out
                };
            }
            debug_assert_eq!(count(current), ROLLED);
            // AcqRel: as the sealer's capture.
            match taken.compare_exchange(
                current,
                pack(id, new),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    // `id` is alive: its `UNIT` for this word was still in.
                    *wakes |= chain.numbered(id).hand_over(1, new);
                    return Applied::In;
                }
                Err(seen) => current = seen,
            }
        }
    }

    #[inline]
    fn remote_enter(&self, s: usize, id: u64, n: u64) -> Entry {
        let word = &self.shards[s].shared.remote;
        // Acquire: a newer epoch here was set by a capture, which came after
        // its capturer saw `open` moved on; acquiring it makes the caller's
        // reload of the open generation's number (and of `closed`) see that.
        let mut current = word.load(Ordering::Acquire);
        loop {
            let ahead = behind(current, id);
            if ahead != 0 {
                // Epochs only grow, one capture at a time.
                return if ahead < 0 {
                    Entry::Moved
                } else {
                    Entry::Lagging
                };
            }
            debug_assert!(count(current) + (n as i64) < -NONE, "count overflow");
            // AcqRel: this RMW and the capture's CAS on the same word decide
            // coverage by their order alone; Acquire (also on failure) as
            // for the load above.
            match word.compare_exchange_weak(
                current,
                pack(id, count(current) + n as i64),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Entry::Entered,
                Err(seen) => current = seen,
            }
        }
    }

    /// Removes `n` records of `generation` that entered as `packed` (see
    /// [`entered_at`]) by the thread numbered `home` (a resolution, or a
    /// send backing out). Returns true when that left the generation with
    /// nothing pending: the caller must wake waiters, and must not touch
    /// the generation again.
    #[inline(always)]
    #[must_use]
    pub(crate) fn leave(
        &self,
        home: usize,
        (generation, route): (&Generation, Route),
        n: u64,
        chain: &impl Chain,
    ) -> bool {
        if route.owned_by(home) {
            self.own_leave(home, generation, n, chain)
        } else {
            self.remote_leave(route.shard(), generation, n)
        }
    }

    #[inline(always)]
    fn own_leave(&self, s: usize, generation: &Generation, n: u64, chain: &impl Chain) -> bool {
        let id = generation.id;
        let own = &self.shards[s].own;
        // Relaxed: the owner's own words. Acquire: as in `own_write`.
        if own.id.load(Ordering::Relaxed) != id || chain.open_id().load(Ordering::Acquire) != id {
            // `id` is sealed: `own`'s capture for it counted the record, or
            // will (the word counts for `id`, or rolled past it after its
            // capture).
            return generation.settle(n);
        }
        let current = own.word.load(Ordering::Relaxed);
        let mut wakes = false;
        match self.own_write(s, id, plus(current, -(n as i64)), chain, &mut wakes) {
            Applied::In => wakes,
            // Mutant `unsettled_straddle` (loom suite only): a leave the
            // capture missed is not settled, so the generation never
            // drains.
            #[cfg(inflight_mutant = "unsettled_straddle")]
            Applied::Out => wakes,
            #[cfg(not(inflight_mutant = "unsettled_straddle"))]
            Applied::Out => wakes | generation.settle(n),
        }
    }

    #[inline]
    fn remote_leave(&self, s: usize, generation: &Generation, n: u64) -> bool {
        let id = generation.id;
        let word = &self.shards[s].shared.remote;
        // Relaxed: only the CAS's success counts; another epoch means the
        // word was captured (or has not come to `id` yet, whose capture
        // then still holds its `UNIT`), and the count goes to `pending`.
        let mut current = word.load(Ordering::Relaxed);
        while counts_for(current, id) {
            debug_assert!(count(current) - (n as i64) > NONE, "count underflow");
            // Release: publishes the resolution to the capture that takes
            // this word (its Acquire), and through it to the flusher.
            match word.compare_exchange_weak(
                current,
                pack(id, count(current) - n as i64),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return false,
                Err(seen) => current = seen,
            }
        }
        generation.settle(n)
    }
}

mod capture;

#[cfg(test)]
mod tests;
