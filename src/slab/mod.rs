//! Where records live: pages of slots, a state word per slot, and sharded
//! free lists.
//!
//! This module owns slot memory and every transition of a slot's state word.
//! It knows nothing of generations or flushes: a slot stores an opaque
//! generation pointer for the tracker and hands it back on resolution.
//!
//! # Pages
//!
//! Slots live in [`Pages`]: page `k` holds `32 << k` slots and is allocated
//! the first time an index in it is handed out; pages are kept for the life
//! of the slab, so a slot reference never dangles and a raw ticket can be
//! checked against any index without a guard. Twenty pages cover
//! [`MAX_SLOTS`].
//!
//! # The state word
//!
//! ```text
//!  63                    32 31      5   4        3       2     1  0
//! +------------------------+---------+--------+--------+------+------+
//! |          tag           | unused  | MARKED | QUEUED | HELD |status|
//! +------------------------+---------+--------+--------+------+------+
//! ```
//!
//! `status` is `FREE` (no record), `LIVE` (sent, unresolved), `ACKED` or
//! `FAILED`. The three hold bits each mean that some structure still points
//! at the slot and will read its offset or links:
//!
//! - `HELD`: a generation's partition cell (or the flush carry), because it
//!   is the latest record of its partition there;
//! - `QUEUED`: its partition's watermark queue (watermark trackers only),
//!   from its send until the watermark has moved past it;
//! - `MARKED`: its partition's untaken watermark (see `watermark`). A
//!   queued record is born with it (`QUEUE_HOLDS`), held for the mark it
//!   may become: the advance hands it to the mark when it publishes the
//!   record as one, and drops it with `QUEUED` when it passes a record it
//!   did not (one step fewer than adding the hold at the publish).
//!
//! A held slot keeps its offset after resolution, and whoever drops the last
//! of {resolution, holds} frees it. The transitions, each one atomic step
//! (`HELD` stands for any hold bit):
//!
//! ```text
//! FREE(t-1) --prepare--> FREE(t)|HELD? --publish--> LIVE(t)|HELD?
//! FREE(t-1) --fill, then publish_filled--> LIVE(t)  (a batch's unheld record)
//! LIVE(t)        --resolve--> FREE(t)                 (not held: freed at once)
//! LIVE(t)|HELD   --resolve--> ACKED(t)|HELD or FAILED(t)|HELD
//! ACKED(t)|HELD  --release--> FREE(t)                 (the hold was the last owner)
//! LIVE(t)|HELD   --release--> LIVE(t)
//! ```
//!
//! A ticket resolves only by a compare-and-swap from `LIVE(its tag)`, so a
//! stale, forged or duplicate ticket fails that CAS and changes nothing.
//!
//! # Free lists
//!
//! Each thread whose number (see [`thread_index`]) is below
//! `LOCAL_THREADS` has a free list of its own, a plain linked list through
//! the slots' `link` fields that no other thread touches: a thread that
//! sends and acks its own records allocates and frees with no atomic
//! read-modify-write at all. Thread numbers are held by one live thread at
//! a time and reused after a thread exits, with its list. A list that
//! reaches its limit (`LOCAL_MAX` slots) is spliced onto a shared stack in
//! one CAS, so a thread that only frees (an acker) does not hoard them.
//!
//! Slots on a thread's own list are out of every other thread's reach, and
//! each keeps its last offset: with many threads, lists of `LOCAL_MAX` would
//! keep up to 256 × 255 slots no send can use (a review measured 32,000 at
//! a capacity of 256). So a bounded slab (capacity `N`) gives own lists to
//! as few threads as it can afford: the first `max(1, N / (L − 1))` thread
//! numbers that use it get lists of limit `L = min(N + 1, LOCAL_MAX)`
//! (at least 2), the rest free through the shared stacks at once (a limit
//! of 1). So its own lists hold at most `max(N, 1)` slots in all, and a
//! single thread that sends `N` records and acks them never spills.
//!
//! The shared free lists are Treiber stacks threaded through the same
//! links. Each stack head packs a 32-bit version with the top index, so a
//! pop that raced a pop-and-push of the same slot fails its CAS (the
//! classic ABA). There are a few stacks, cache-padded; a thread pops from
//! the one its number picks, then (past a young slab's first chunks) from
//! the others, and only then takes never-used slots, so memory stays
//! bounded by what is in flight. Never-used slots are taken 128 at a time,
//! so that two threads do not cycle through slots on one cache line.

mod record;

use crate::pages::Pages;
use crate::sync::{
    fence, stack, thread_index, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, CachePadded,
    Ordering, UnsafeCell, FREE_SHARDS, LOCAL_THREADS,
};
use crate::ticket::MAX_SLOTS;
use crate::ResolveError;
use std::mem::MaybeUninit;

/// How many never-used slots a thread takes at once (see
/// [`Slab::alloc_fresh`]); one under loom, to keep the models small.
const FRESH_CHUNK: usize = if cfg!(loom) { 1 } else { 128 };
/// How many slots at the end of a chunk a thread uses last: at least 128
/// bytes (a slot is at least 32), so that the slots two threads cycle
/// through sit neither on one cache line nor on adjacent ones, which x86's
/// spatial prefetcher fetches in pairs.
const CHUNK_MARGIN: usize = 4;
/// Below this many slots handed out, a thread whose free list is empty takes
/// a fresh chunk before it takes another thread's free slots: one chunk per
/// free-list shard.
const YOUNG: usize = FRESH_CHUNK * FREE_SHARDS;

pub(crate) const FREE: u64 = 0;
pub(crate) const LIVE: u64 = 1;
pub(crate) const ACKED: u64 = 2;
pub(crate) const FAILED: u64 = 3;
const STATUS: u64 = 0b11;
pub(crate) const HELD: u64 = 0b100;
pub(crate) const QUEUED: u64 = 0b1000;
pub(crate) const MARKED: u64 = 0b1_0000;
/// The holds a record queued for a watermark is prepared with: `QUEUED`,
/// and `MARKED` for the mark it may become (see the module docs).
pub(crate) const QUEUE_HOLDS: u64 = QUEUED | MARKED;
/// A hold taken by [`Tracker::oldest_unresolved`](crate::Tracker::oldest_unresolved)
/// while it copies a record's offset.
pub(crate) const INSPECTED: u64 = 0b100_0000;
const HOLDS: u64 = HELD | QUEUED | MARKED | INSPECTED;
/// On a resolved or freed slot: its record was released by
/// [`Tracker::revoke`](crate::Tracker::revoke), not acked or failed, so its
/// ticket answers `ResolveError::Revoked` (until the slot is reused, which
/// such slots are last; see `quarantine`).
pub(crate) const REVOKED: u64 = 0b1000_0000;
/// On an unresolved record: a `drain_partition` waits for it, so its
/// resolution must wake waiters. Not a hold.
pub(crate) const WATCHED: u64 = 0b1_0000_0000;
/// The slot's `covered` word holds the tag of a record of this slot that a
/// revoke released (a record never marked, so `covered` was free), and
/// keeps it across reuses until the slot's next mark: so that record's
/// ticket still answers `Revoked` after its slot was reused. Both are
/// written when the revoked record's slot is freed, by the thread that
/// frees it (see `Slab::quarantine`): never by the revoke before its CAS,
/// which an ack may win (the record is then marked, and `covered` is its
/// count).
const REMEMBERS: u64 = 0b10_0000_0000;
/// On a `FREE` slot: it still holds the offset of the record it last held,
/// not yet dropped. Whoever next takes the slot from a free list drops it
/// (see [`Slab::alloc`]), so no user `Drop` runs while the crate's
/// bookkeeping is half done.
const STALE: u64 = 0b10_0000;

#[inline]
fn status(state: u64) -> u64 {
    state & STATUS
}

#[inline]
pub(crate) fn status_of_state(state: u64) -> u64 {
    status(state)
}

#[inline]
pub(crate) fn tag(state: u64) -> u32 {
    (state >> 32) as u32
}

/// The tag a slot's next record takes: one past its last, skipping 0.
#[inline]
fn next_tag(state: u64) -> u32 {
    match tag(state).wrapping_add(1) {
        0 => 1,
        t => t,
    }
}

/// How a resolution ended for the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ack,
    Fail,
    /// Released by a revoke: neither delivered nor failed.
    Revoke,
}

/// One record's home.
pub(crate) struct Slot<O> {
    /// Tag, hold bit and status; see the module docs.
    state: AtomicU64,
    /// While the slot is free: the next free slot + 1 (0: end of list).
    /// While it holds a record: the record's partition number, read like
    /// `generation` (only a successful resolution CAS makes it trustworthy).
    link: AtomicU32,
    /// The generation the record entered, opaque to the slab. Written before
    /// publish; read by a resolver *before* its resolution CAS, because once
    /// a held slot is resolved its holder may free and reuse it at once.
    generation: AtomicPtr<()>,
    /// The next record of the partition in its watermark queue: its slot +
    /// 1, 0 until that record links itself (see `watermark`).
    pub(crate) next_queued: AtomicU32,
    /// While `MARKED`: how many acked records its partition's watermark had
    /// passed when it reached this one, modulo 2^32 (a statistic for
    /// `committable`).
    covered: AtomicU32,
    /// The life of the record's partition it was sent in (see
    /// `Tracker::revoke`). Written at prepare, read like `generation`.
    life: AtomicU32,
    /// The record's offset, present unless the status is `FREE`.
    value: UnsafeCell<MaybeUninit<O>>,
}

impl<O> Slot<O> {
    fn new(tag: u32) -> Self {
        Self {
            state: AtomicU64::new((u64::from(tag) << 32) | FREE),
            link: AtomicU32::new(0),
            generation: AtomicPtr::new(std::ptr::null_mut()),
            next_queued: AtomicU32::new(0),
            covered: AtomicU32::new(0),
            life: AtomicU32::new(0),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The state word (tag, holds, status), for the watermark advance.
    pub(crate) fn state(&self) -> u64 {
        // Acquire: pairs with the Release CAS of the record's resolution, so
        // a reader that sees ACKED or FAILED sees everything before it.
        self.state.load(Ordering::Acquire)
    }

    /// The generation the record entered. Meaningful while the caller holds
    /// the slot and has seen it resolved (ordered by [`state`](Self::state)).
    pub(crate) fn generation(&self) -> *const () {
        // Relaxed: written before the Release publish, which the caller's
        // Acquire read of the resolved state (through the resolution's
        // Release CAS, an RMW on the same word) happens after.
        self.generation.load(Ordering::Relaxed)
    }

    /// The count [`Slab::mark`] stored. Meaningful while the caller owns the
    /// `MARKED` hold.
    pub(crate) fn covered(&self) -> u32 {
        // Relaxed: written before the Release swap that published the mark,
        // which the caller's Acquire swap took.
        self.covered.load(Ordering::Relaxed)
    }

    /// The life of its partition the record was sent in. Meaningful while
    /// the caller holds the slot (or has seen the record in a state that
    /// a CAS then proved, as for [`generation`](Self::generation)).
    pub(crate) fn life(&self) -> u32 {
        // Relaxed: written at prepare, before the Release publish (or the
        // Release cell swap or queue link) that the caller's Acquire saw.
        self.life.load(Ordering::Relaxed)
    }

    /// The record's partition number (while it holds one; see `link`).
    pub(crate) fn partition(&self) -> u32 {
        // Relaxed: as for `life`.
        self.link.load(Ordering::Relaxed)
    }

    /// The slot's offset.
    ///
    /// # Safety
    ///
    /// SAFETY: callers ensure the slot holds a value (status not `FREE`, or
    /// prepared by the caller) and that nobody frees it for the lifetime of
    /// the borrow: the caller owns the slot or holds it (`HELD`).
    pub(crate) unsafe fn value(&self) -> &O {
        // SAFETY: by the contract above the value is initialised and not
        // concurrently written or dropped.
        self.value.with(|v| unsafe { (*v).assume_init_ref() })
    }
}

/// A free list that only the thread holding one thread number touches
/// (see `sync::thread_index`), threaded through the slots' links like the
/// shared stacks: no atomic read-modify-write on either end.
struct Local(UnsafeCell<LocalList>);

#[derive(Default)]
struct LocalList {
    /// Top slot + 1, 0 when empty.
    head: u32,
    /// Bottom slot + 1 while the list is not empty (left as it was when
    /// the list empties): where a spill splices the list.
    tail: u32,
    len: u32,
    /// The length at which the list spills (see the module docs); 0 until
    /// its first push decides it.
    limit: u32,
}

// SAFETY: a `Local` is read and written only by the thread holding the
// thread number it belongs to (see `Local::list`), one live thread at a
// time; a thread gives its number back (and its writes with it, through
// the Release/Acquire hand-over in `sync::thread_index`) before another
// takes it. So sharing `&Local` between threads shares no access. (In
// `locals` the lists sat behind the pages' atomic pointers, which made
// the slab `Sync` without this; the lists kept inline need it said.)
unsafe impl Sync for Local {}

impl Local {
    fn new() -> Self {
        Self(UnsafeCell::new(LocalList::default()))
    }

    /// The list.
    ///
    /// # Safety
    ///
    /// SAFETY: the caller holds the thread number this list belongs to, which
    /// no other live thread holds (a thread that held it before handed its
    /// writes over when it gave the number back), and keeps no other
    /// reference from this function alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn list(&self) -> &mut LocalList {
        // SAFETY: exclusive by the contract above.
        self.0.with_mut(|list| unsafe { &mut *list })
    }
}

/// A thread's own list moves onto its shared stack, all at once, when it
/// reaches this many slots: it keeps a thread that only frees (an acker
/// handed tickets by senders) from hoarding slots the senders need. A
/// bounded slab's lists have lower limits (see the module docs).
const LOCAL_MAX: u32 = 2 * FRESH_CHUNK as u32;

/// How many thread numbers have their own list inline in the slab (the
/// count shards' owners, see `counts`); the others' are in pages.
const OWN_INLINE: usize = if LOCAL_THREADS < 64 {
    LOCAL_THREADS
} else {
    64
};

/// Pages of slots plus their free lists.
pub(crate) struct Slab<O> {
    slots: Pages<Slot<O>, 32, 20>,
    /// Slots ever handed out; indices below it may be in use.
    next_unused: AtomicUsize,
    /// Treiber stack heads: `version << 32 | (index + 1)`, 0 when empty.
    free: [CachePadded<AtomicU64>; FREE_SHARDS],
    /// Freed slots whose last record was revoked (a stack like `free`),
    /// taken only when no other free slot is left, so that the tickets of
    /// revoked records keep answering `Revoked` as long as possible.
    quarantine: CachePadded<AtomicU64>,
    /// Per thread number below `LOCAL_THREADS`: that thread's own list,
    /// used before the shared stacks.
    locals: Pages<CachePadded<Local>, 4, 7>,
    /// The own lists of thread numbers below [`OWN_INLINE`], here rather
    /// than in `locals`: no page to look up on the hot path (issue 41).
    /// `locals` holds the rest, from number `OWN_INLINE` on.
    own: [CachePadded<Local>; OWN_INLINE],
    /// How many own lists may have `local_limit` (the rest have 1), and
    /// how many have claimed it (see the module docs).
    local_lists: u32,
    lists_claimed: AtomicU32,
    /// The limit of an own list that claimed one.
    local_limit: u32,
    /// The tag every slot starts from (random per slab, see `ticket`).
    first_tag: u32,
}

impl<O> Slab<O> {
    /// A slab for a tracker of `capacity` records at most (`None`:
    /// unbounded), which sizes the threads' own free lists.
    pub(crate) fn new(capacity: Option<usize>) -> Self {
        let (local_lists, local_limit) = match capacity {
            None => (u32::MAX, LOCAL_MAX),
            Some(n) => {
                // n <= MAX_SLOTS < 2^24.
                let limit = (n as u32).saturating_add(1).clamp(2, LOCAL_MAX);
                ((n as u32 / (limit - 1)).max(1), limit)
            }
        };
        Self {
            slots: Pages::new(),
            next_unused: AtomicUsize::new(0),
            free: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
            quarantine: CachePadded::new(AtomicU64::new(0)),
            locals: Pages::new(),
            own: std::array::from_fn(|_| CachePadded::new(Local::new())),
            local_lists,
            lists_claimed: AtomicU32::new(0),
            local_limit,
            first_tag: crate::sync::tag_seed(),
        }
    }

    /// The slot at `index`, if its page exists. Any index is safe to ask for.
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&Slot<O>> {
        self.slots.get(index)
    }

    /// A slot known to exist (its index came from this slab).
    #[inline]
    pub(crate) fn slot_of(&self, index: usize) -> &Slot<O> {
        self.slot(index)
    }

    /// A slot known to exist (its index came from this slab).
    #[inline]
    fn slot(&self, index: usize) -> &Slot<O> {
        self.slots.existing(index)
    }

    /// Takes a free slot, or a never-used one; `None` when all
    /// [`MAX_SLOTS`] are taken. The caller owns the slot until it publishes it.
    ///
    /// The caller's own free list first. When it is empty, a young slab
    /// (fewer than [`YOUNG`] slots handed out) gives the caller a fresh
    /// chunk of its own rather than slots from another thread's list, so
    /// threads starting together do not end up cycling through slots on
    /// shared cache lines; after that, other threads' lists come before
    /// fresh slots, so memory stays bounded by what is in flight even when
    /// records are acked by other threads than sent them.
    ///
    /// `home` is the caller's [`thread_index`].
    ///
    /// Drops the offset a freed slot kept (`STALE`) before handing it out:
    /// that is where the offsets of resolved records are dropped, so user
    /// code (a `Drop` that may panic) runs only here, while the caller holds
    /// nothing else. If it panics, the slot goes back on a free list, empty.
    #[inline(always)]
    pub(crate) fn alloc(&self, home: usize) -> Option<(usize, &Slot<O>)> {
        let (index, slot) = self.take(home)?;
        if std::mem::needs_drop::<O>() {
            self.drop_stale(index, slot);
        }
        Some((index, slot))
    }

    /// Drops the offset a slot just taken from a free list still holds, if
    /// it is `STALE`.
    #[inline]
    fn drop_stale(&self, index: usize, slot: &Slot<O>) {
        // Relaxed: the slot is ours; the free list's pop acquired it.
        let state = slot.state.load(Ordering::Relaxed);
        if state & STALE == 0 {
            return;
        }
        // A store: nothing else writes the word of a slot we own. Release,
        // as `stamp`'s: a reader of this value sees what the slot's
        // earlier writes published. Cleared first: from here on the value
        // is ours to drop, and nothing else will.
        slot.state.store(state & !STALE, Ordering::Release);
        // SAFETY: `STALE` says the value is initialised and was not dropped;
        // we own the slot, and the state no longer says `STALE`.
        let value = slot.value.with(|v| unsafe { (*v).assume_init_read() });
        let unwinding = PushBack { slab: self, index };
        drop(value); // user code
        std::mem::forget(unwinding);
    }

    /// Takes a slot for [`alloc`](Self::alloc). Inlined into the send
    /// (issue 41: a call here cost a pair 8 to 11 instructions).
    #[inline(always)]
    fn take(&self, home: usize) -> Option<(usize, &Slot<O>)> {
        if let Some(local) = self.local(home) {
            if let Some(taken) = self.pop_local(local) {
                return Some(taken);
            }
        }
        let home = home % FREE_SHARDS;
        match self.pop(home) {
            Some(taken) => Some(taken),
            None => {
                let index = self.alloc_elsewhere(home)?;
                Some((index, self.slot(index)))
            }
        }
    }

    #[cold]
    fn alloc_elsewhere(&self, home: usize) -> Option<usize> {
        // Relaxed: a heuristic; `alloc_fresh` claims slots with its own CAS.
        if self.next_unused.load(Ordering::Relaxed) < YOUNG {
            if let Some(index) = self.alloc_fresh() {
                return Some(index);
            }
        }
        for i in 1..FREE_SHARDS {
            if let Some((index, _)) = self.pop((home + i) % FREE_SHARDS) {
                return Some(index);
            }
        }
        // Acquire (inside `pop`): takes the slot from its pusher.
        if let Some(index) = stack::pop(&self.quarantine, |index| &self.slot(index).link) {
            return Some(index);
        }
        self.alloc_fresh()
    }

    /// Moves the counter of never-used slots to `n` without allocating
    /// their pages: what claimers that moved it and have not yet
    /// allocated leave behind (for tests of the scans that must go past).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn claim_without_pages(&self, n: usize) {
        self.next_unused.store(n, Ordering::Relaxed);
    }

    /// Takes never-used slots, [`FRESH_CHUNK`] at once: returns the first
    /// and puts the rest on the caller's own free list, so that the slots a
    /// thread cycles through sit together rather than interleaved with
    /// another thread's on the same cache lines (two threads writing one
    /// line, or a pair of adjacent ones, run at half speed). The list
    /// hands them out in index order, the chunk's last [`CHUNK_MARGIN`]
    /// last of all, so the slots next to another thread's chunk are the
    /// ones used least.
    #[cold]
    fn alloc_fresh(&self) -> Option<usize> {
        // Relaxed: the counter only hands out distinct indices; the page they
        // live in is published by its own CAS below.
        let mut next = self.next_unused.load(Ordering::Relaxed);
        let end = loop {
            if next >= MAX_SLOTS {
                return None;
            }
            let end = (next + FRESH_CHUNK).min(MAX_SLOTS);
            // AcqRel on success: a claim is ordered against a revoke's
            // `used` by the barrier pair (the claim before the send's light
            // barrier, `used` after the revoke's heavy one, see `revoke.rs`);
            // AcqRel orders claims among themselves. A chunk is claimed once
            // per 128 slots.
            match self.next_unused.compare_exchange_weak(
                next,
                end,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break end,
                Err(seen) => next = seen,
            }
        };
        for index in next..end {
            self.slots.get_or_alloc(index, || Slot::new(self.first_tag));
        }
        // The caller's list was empty (or is shared under loom), so these
        // are all it holds: the margin at the bottom, then the rest highest
        // first, so that pops come in index order.
        let margin = end - CHUNK_MARGIN.min(end - next - 1);
        for index in (margin..end).chain((next + 1..margin).rev()) {
            self.push(index);
        }
        Some(next)
    }

    #[inline]
    fn pop(&self, shard: usize) -> Option<(usize, &Slot<O>)> {
        // Acquire (inside `pop`): takes the slot from its pusher.
        let index = stack::pop(&self.free[shard], |index| &self.slot(index).link)?;
        Some((index, self.slot(index)))
    }

    fn push(&self, index: usize) {
        self.push_slot(index, self.slot(index));
    }

    /// Frees a slot the caller owns onto its own list if its thread number
    /// has one, else onto the shared stack its number picks.
    #[inline]
    fn push_slot(&self, index: usize, slot: &Slot<O>) {
        let home = thread_index();
        match self.local(home) {
            Some(local) => self.push_local(local, home, index, slot),
            None => self.push_shared(home % FREE_SHARDS, index, slot),
        }
    }

    /// The calling thread's own list, if its number `home` (its
    /// [`thread_index`]) has one.
    #[inline]
    fn local(&self, home: usize) -> Option<&Local> {
        if home < OWN_INLINE {
            return Some(&self.own[home]);
        }
        (home < LOCAL_THREADS).then(|| {
            &**self
                .locals
                .get_or_alloc(home - OWN_INLINE, || CachePadded::new(Local::new()))
        })
    }

    /// Takes the top of the caller's own list (see [`local`](Self::local)).
    #[inline]
    fn pop_local(&self, local: &Local) -> Option<(usize, &Slot<O>)> {
        // SAFETY: `local` came from `local(thread_index())`, so the caller
        // holds its thread number; no other reference to it is alive.
        let list = unsafe { local.list() };
        let index = (list.head as usize).checked_sub(1)?;
        let slot = self.slot(index);
        // Relaxed: the slot is on our own list; nobody else touches its link.
        list.head = slot.link.load(Ordering::Relaxed);
        list.len -= 1;
        // `tail` is left as it is when the list empties: it is read only
        // by a spill, of a list that is not empty, and the push onto an
        // empty list sets it.
        Some((index, slot))
    }

    #[inline]
    fn push_local(&self, local: &Local, home: usize, index: usize, slot: &Slot<O>) {
        // SAFETY: as in `pop_local`.
        let list = unsafe { local.list() };
        // Relaxed: our own list, as in `pop_local`.
        slot.link.store(list.head, Ordering::Relaxed);
        if list.head == 0 {
            list.tail = index as u32 + 1;
        }
        list.head = index as u32 + 1;
        list.len += 1;
        if list.len >= list.limit {
            self.spill(list, home % FREE_SHARDS);
        }
    }

    /// Moves the whole of a thread's own list onto shared stack `shard`
    /// with one CAS, once the list has reached its limit (deciding the
    /// limit at the list's first push).
    #[cold]
    fn spill(&self, list: &mut LocalList, shard: usize) {
        if list.limit == 0 {
            // Relaxed: a count of claims; it orders nothing else.
            let claimed = self.lists_claimed.fetch_add(1, Ordering::Relaxed);
            list.limit = if claimed < self.local_lists {
                self.local_limit
            } else {
                1 // frees go to the shared stacks at once
            };
            if list.len < list.limit {
                return;
            }
        }
        let (first, last) = (list.head, list.tail);
        // Release (inside `push`): hands the slots to the next popper.
        stack::push(&self.free[shard], first, &self.slot(last as usize - 1).link);
        *list = LocalList {
            limit: list.limit,
            ..LocalList::default()
        };
    }

    /// Pushes a slot the caller owns onto shared stack `shard`.
    fn push_shared(&self, shard: usize, index: usize, slot: &Slot<O>) {
        // Release (inside `push`): hands the slot to the next popper.
        stack::push(&self.free[shard], index as u32 + 1, &slot.link);
    }
}

/// Puts a slot back on a free list if a user `Drop` panics while the
/// slot is taken (see [`Slab::alloc`]).
struct PushBack<'a, O> {
    slab: &'a Slab<O>,
    index: usize,
}

impl<O> Drop for PushBack<'_, O> {
    fn drop(&mut self) {
        self.slab.push(self.index);
    }
}

impl<O> Drop for Slab<O> {
    fn drop(&mut self) {
        self.slots.for_each(|_, slot| {
            // Relaxed: `&mut self`, so every other thread is done with us.
            let state = slot.state.load(Ordering::Relaxed);
            if status(state) != FREE || state & STALE != 0 {
                // SAFETY: a slot that is not FREE, or is FREE and STALE,
                // holds an initialised value (see `STALE`), and we are its
                // last owner; the pages free the memory afterwards.
                slot.value.with_mut(|v| unsafe { (*v).assume_init_drop() });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::record::classify_stale;
    use super::*;

    /// One thread takes slots, another frees them (the hand-off of a
    /// producer whose delivery callbacks run elsewhere): the freer's own
    /// list spills back, so the taker keeps reusing slots and the slab
    /// stays bounded by what is in flight, not by how many were ever sent.
    #[test]
    fn slots_freed_by_another_thread_come_back() {
        const IN_FLIGHT: usize = 64;
        let slab = Slab::<u64>::new(None);
        let (tx, rx) = std::sync::mpsc::sync_channel::<usize>(IN_FLIGHT);
        std::thread::scope(|s| {
            let slab = &slab;
            s.spawn(move || {
                for index in rx {
                    slab.recycle_slot(index, slab.slot(index));
                }
            });
            // Under Miri, which checks the cross-thread recycling, too few
            // for the bound below to fail (it needs more than the bound):
            // that is checked natively.
            for n in 0..if cfg!(miri) { 200 } else { 100_000_u64 } {
                let (index, slot) = slab.alloc(thread_index()).unwrap();
                slab.prepare(slot, n, 0, 0, 0);
                tx.send(index).unwrap();
            }
            drop(tx); // ends the freer's loop
        });
        // Relaxed: the threads are joined.
        let used = slab.next_unused.load(Ordering::Relaxed);
        assert!(
            used <= YOUNG + 2 * LOCAL_MAX as usize + 2 * IN_FLIGHT,
            "{used} slots for 64 in flight"
        );
    }

    #[test]
    fn stale_classification() {
        // Slot started at tag 10 and has issued 11..=13.
        assert_eq!(classify_stale(13, 12, 10), ResolveError::AlreadyResolved);
        assert_eq!(classify_stale(13, 11, 10), ResolveError::AlreadyResolved);
        assert_eq!(classify_stale(13, 14, 10), ResolveError::Unknown);
        assert_eq!(classify_stale(13, 10, 10), ResolveError::Unknown);
        assert_eq!(classify_stale(13, 9, 10), ResolveError::Unknown);
        // A slot never used issued nothing.
        assert_eq!(classify_stale(10, 9, 10), ResolveError::Unknown);
        // Across the wrap (tag 0 is skipped).
        assert_eq!(
            classify_stale(2, u32::MAX, u32::MAX - 3),
            ResolveError::AlreadyResolved
        );
        assert_eq!(classify_stale(2, 0, u32::MAX - 3), ResolveError::Unknown);
    }

    #[test]
    fn lifecycle_of_a_held_slot() {
        let slab = Slab::<String>::new(None);
        let (i, slot) = slab.alloc(thread_index()).unwrap();
        let tag = slab.prepare(slot, "x".into(), 0, 0, HELD);
        slab.publish(slot);
        assert_eq!(slab.status_of(i), Some((tag, LIVE, true)));
        let freed = slab.resolve(i, tag, Outcome::Ack).unwrap().freed;
        assert_eq!(
            slab.resolve(i, 0, Outcome::Ack).err(),
            Some(ResolveError::Unknown)
        );
        assert!(!freed);
        assert_eq!(slab.status_of(i), Some((tag, ACKED, true)));
        assert_eq!(
            slab.resolve(i, tag, Outcome::Ack).err(),
            Some(ResolveError::AlreadyResolved)
        );
        slab.release(i, HELD);
        assert_eq!(slab.status_of(i), Some((tag, FREE, false)));
        // The slot is reused with the next tag; the old ticket is stale.
        let (j, slot) = slab.alloc(thread_index()).unwrap();
        assert_eq!(i, j);
        let tag2 = slab.prepare(slot, "y".into(), 0, 0, 0);
        slab.publish(slot);
        assert_eq!(tag2, tag + 1);
        assert_eq!(
            slab.resolve(j, tag, Outcome::Ack).err(),
            Some(ResolveError::AlreadyResolved)
        );
        assert_eq!(
            slab.resolve(j, tag2 + 1, Outcome::Ack).err(),
            Some(ResolveError::Unknown)
        );
    }
}
