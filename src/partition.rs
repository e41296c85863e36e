//! The partition index: maps each source partition `P` to a small number,
//! so that generations can keep per-partition cells in plain arrays.
//!
//! Keys live in an append-only arena ([`Pages`]), written once and kept for
//! the tracker's life. A lookup hashes the key and probes an open-addressing
//! table of one-word entries `hash_high:32 | number+1:32`: Acquire loads,
//! no read-modify-write, and no epoch guard, because tables are never freed
//! before the index is (see below). A partition seen for the first time is
//! written to the arena first, then inserted in place with one CAS on the
//! first empty entry of its probe sequence (entries are never removed, so
//! linear probing stays valid), so adding a partition costs O(1), not a copy
//! of the table.
//!
//! When the table is half full, the inserter that crossed the mark grows
//! it: it *freezes* every empty entry of the old table (CAS 0 → `FROZEN`),
//! copies the filled ones into a table twice the size and swaps it in with
//! a CAS. An insert that meets a frozen entry helps with the same steps and
//! retries on the new table, and an insert that succeeded before its entry
//! was frozen is copied, so none is lost. A replaced table stays allocated,
//! linked from its successor, until the index drops: a lookup may still be
//! reading it, and keeping it costs less than guarding every lookup (the
//! tables a table replaced add up to less than itself). Lookups in a frozen
//! table stay correct for the keys it had.
//!
//! Two threads adding the same partition at once both write it to the
//! arena, but they race for the same first empty entry of its probe
//! sequence; the loser sees the winner's entry there, finds its key, and
//! uses the winner's number; its own arena entry stays unused. Numbers are
//! never reused.

use crate::counts::Hint;
use crate::generation::MAX_PARTITIONS;
use crate::pages::Pages;
use crate::sync::{
    hash_seeds, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, UnsafeCell,
};
use std::hash::{BuildHasher, Hash, Hasher};
use std::mem::MaybeUninit;

/// An entry that a resize froze while empty: no insert may take it.
const FROZEN: u64 = u64::MAX;

/// The high half of a hash, as entries keep it.
fn fragment(hash: u64) -> u64 {
    hash >> 32
}

/// Where a key's probe starts: its fragment's low bits, so that a resize,
/// which sees only fragments, puts every key where lookups look. Tables
/// have at most 2^25 entries (twice `MAX_PARTITIONS`), within the fragment.
fn home(fragment: u64, mask: usize) -> usize {
    fragment as usize & mask
}

/// An open-addressing table of `hash_high:32 | number+1:32`, 0 when empty.
struct Table {
    entries: Box<[AtomicU64]>,
    /// Entries filled, to know when to grow.
    filled: AtomicUsize,
    /// The table this one replaced (null for the first): kept until the
    /// index drops, which frees the whole chain.
    older: *mut Table,
}

/// What an insert found.
enum Insert {
    /// The key was added with the given number.
    Added,
    /// The key was there already, with this number.
    Found(usize),
    /// The table is being replaced: help, then retry on the new one.
    Frozen,
}

impl Table {
    fn with_slots(slots: usize, older: *mut Table) -> Self {
        Self {
            entries: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            filled: AtomicUsize::new(0),
            older,
        }
    }

    /// The number of the key with `hash` for which `is_key` holds.
    fn find(&self, hash: u64, mut is_key: impl FnMut(usize) -> bool) -> Option<usize> {
        let mask = self.entries.len() - 1;
        let mut i = home(fragment(hash), mask);
        for _ in 0..self.entries.len() {
            // Acquire: pairs with the Release CAS that filled the entry, so
            // the key it numbers is written (see `Partitions::add`).
            let entry = self.entries[i].load(Ordering::Acquire);
            if entry == 0 || entry == FROZEN {
                return None; // empty when frozen: the probe ends here
            }
            let number = (entry & 0xffff_ffff) as usize - 1;
            if entry >> 32 == fragment(hash) && is_key(number) {
                return Some(number);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Adds `number` for the key with `hash`, unless the key is there.
    fn insert(&self, hash: u64, number: usize, mut is_key: impl FnMut(usize) -> bool) -> Insert {
        let mask = self.entries.len() - 1;
        let mine = (fragment(hash) << 32) | (number as u64 + 1);
        let mut i = home(fragment(hash), mask);
        for _ in 0..self.entries.len() {
            // Acquire: as in `find`.
            let mut entry = self.entries[i].load(Ordering::Acquire);
            loop {
                if entry == FROZEN {
                    return Insert::Frozen;
                }
                if entry == 0 {
                    // AcqRel: Release publishes our arena entry with the
                    // number; Acquire (on failure) sees the key of whoever
                    // took the entry first.
                    match self.entries[i].compare_exchange(
                        0,
                        mine,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => {
                            // Relaxed: only decides when to grow.
                            self.filled.fetch_add(1, Ordering::Relaxed);
                            return Insert::Added;
                        }
                        Err(seen) => {
                            entry = seen;
                            continue;
                        }
                    }
                }
                let theirs = (entry & 0xffff_ffff) as usize - 1;
                if entry >> 32 == fragment(hash) && is_key(theirs) {
                    return Insert::Found(theirs);
                }
                break;
            }
            i = (i + 1) & mask;
        }
        Insert::Frozen // full: cannot happen below half load, but grow anyway
    }

    /// Whether the table should grow (more than half full).
    fn crowded(&self) -> bool {
        // Relaxed: a heuristic; the resize itself is exact.
        2 * self.filled.load(Ordering::Relaxed) > self.entries.len()
    }

    /// Freezes every empty entry and returns a table twice the size with
    /// every filled entry, linked to `older`, the owning pointer to `self`
    /// (from `Box::into_raw`, as the index keeps it: it will free the table
    /// through it, which a pointer made from `&self` may not do). After
    /// this, the entries of `self` never change.
    fn grown(&self, older: *mut Table) -> Table {
        debug_assert!(std::ptr::eq(older, self));
        let next = Table::with_slots(2 * self.entries.len(), older);
        let mask = next.entries.len() - 1;
        let mut filled = 0;
        for entry in self.entries.iter() {
            // Acquire: as in `find`.
            let mut value = entry.load(Ordering::Acquire);
            // Mutant `unfrozen_grow` (loom suite only): copy without
            // freezing, so an insert that lands behind the copy is lost.
            #[cfg(inflight_mutant = "unfrozen_grow")]
            if value == 0 {
                continue;
            }
            if value == 0 {
                // AcqRel: Release is for symmetry; Acquire (on failure) sees
                // the key of the insert that beat the freeze.
                match entry.compare_exchange(0, FROZEN, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => continue,
                    Err(seen) => value = seen,
                }
            }
            if value == FROZEN {
                continue;
            }
            // `next` is private: a plain probe for an empty entry, from the
            // key's home, as lookups probe.
            let mut i = home(value >> 32, mask);
            // Relaxed, both: `next` is published by the Release CAS that
            // installs it.
            while next.entries[i].load(Ordering::Relaxed) != 0 {
                i = (i + 1) & mask;
            }
            next.entries[i].store(value, Ordering::Relaxed);
            filled += 1;
        }
        // Relaxed: published with the table.
        next.filled.store(filled, Ordering::Relaxed);
        next
    }
}

/// How the index hashes keys: a folded multiply (the 128-bit product's two
/// halves xored, as foldhash and ahash do) per word written, from two
/// random per-tracker seeds. A few instructions for the integer and short
/// string keys partitions have, where SipHash costs more than the rest of
/// a lookup; the seeds keep keys from being chosen to collide.
pub(crate) struct KeyHasher {
    seeds: [u64; 2],
}

impl KeyHasher {
    fn new() -> Self {
        Self {
            seeds: hash_seeds(),
        }
    }
}

impl BuildHasher for KeyHasher {
    type Hasher = FoldHasher;

    #[inline]
    fn build_hasher(&self) -> FoldHasher {
        FoldHasher {
            state: self.seeds[0],
            last: self.seeds[1],
        }
    }
}

/// The hasher [`KeyHasher`] builds.
pub(crate) struct FoldHasher {
    state: u64,
    last: u64,
}

/// An odd constant with well-spread bits (the golden ratio's).
const SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

impl FoldHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, SPREAD);
    }
}

impl Hasher for FoldHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length in the top byte (free: at most 7 bytes here) tells
            // a short tail from one padded with zeros.
            self.mix(u64::from_le_bytes(word) | (rest.len() as u64) << 56);
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        folded_multiply(self.state, self.last ^ SPREAD)
    }
}

/// A partition's lifecycle words (see `Tracker::revoke`).
pub(crate) struct Lifecycle {
    /// The partition's life: how many times it was revoked. A record is
    /// stamped with the life it was sent in.
    pub(crate) life: AtomicU32,
    /// Records that their own sends released, having found the life moved
    /// on after they published; the next revoke counts them.
    pub(crate) released_late: AtomicU64,
    /// `FAILED_IN | life` once a record of the partition sent in `life`
    /// failed (0: none yet): a barrier tracker's flushes fail while it is
    /// the partition's current life, and `Stats::stopped` names it.
    pub(crate) failed_in: AtomicU64,
}

/// The flag of [`Lifecycle::failed_in`] beside the life.
pub(crate) const FAILED_IN: u64 = 1 << 32;

/// One arena entry: a key, once written, and its partition's lifecycle.
struct Key<P> {
    written: AtomicBool,
    value: UnsafeCell<MaybeUninit<P>>,
    lifecycle: Lifecycle,
}

impl<P> Key<P> {
    fn empty() -> Self {
        Self {
            written: AtomicBool::new(false),
            value: UnsafeCell::new(MaybeUninit::uninit()),
            lifecycle: Lifecycle {
                life: AtomicU32::new(0),
                released_late: AtomicU64::new(0),
                failed_in: AtomicU64::new(0),
            },
        }
    }

    /// The key, once written.
    fn value(&self) -> Option<&P> {
        // Acquire: pairs with the Release store after the key was written.
        if !self.written.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: written once before `written` was set, never again, and
        // dropped only with the arena.
        Some(self.value.with(|v| unsafe { (*v).assume_init_ref() }))
    }
}

pub(crate) struct Partitions<P> {
    hasher: KeyHasher,
    /// The current table, from `Box::into_raw`; never null. It and every
    /// table before it (through `older`) live until the index drops.
    table: AtomicPtr<Table>,
    keys: Pages<Key<P>, 16, 20>,
    /// Arena entries handed out (some may be unused, see the module docs).
    claimed: AtomicUsize,
    /// Distinct partitions added.
    len: AtomicUsize,
}

impl<P> Partitions<P> {
    /// The life word of partition `number` (see `Lifecycle`).
    pub(crate) fn life(&self, number: usize) -> Option<&AtomicU32> {
        Some(&self.keys.get(number)?.lifecycle.life)
    }

    /// The lifecycle words of partition `number`.
    pub(crate) fn lifecycle(&self, number: usize) -> Option<&Lifecycle> {
        Some(&self.keys.get(number)?.lifecycle)
    }
}

impl<P: Hash + Eq + Clone> Partitions<P> {
    pub(crate) fn new() -> Self {
        Self {
            hasher: KeyHasher::new(),
            table: AtomicPtr::new(Box::into_raw(Box::new(Table::with_slots(
                8,
                std::ptr::null_mut(),
            )))),
            keys: Pages::new(),
            claimed: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
        }
    }

    /// The key numbered `number`, if that number was given out.
    pub(crate) fn key(&self, number: usize) -> Option<&P> {
        self.keys.get(number)?.value()
    }

    /// The number of `partition`, adding it if new, and its lifecycle.
    /// `None` when the tracker already holds [`MAX_PARTITIONS`] partitions.
    #[inline]
    pub(crate) fn number(&self, partition: &P) -> Option<(usize, &Lifecycle)> {
        let (n, key) = self.number_and_key(partition)?;
        Some((n, &key.lifecycle))
    }

    /// [`number`](Self::number) for a send by the thread whose partition
    /// hint is `hint` (`counts::Hint`, the owner of a count shard): the
    /// hinted key is checked first, with `P`'s `Eq` alone; a match is the
    /// answer, with no hash and no probe. Otherwise the full lookup, and
    /// the hint moves to its answer. `P`'s `Hash` runs only on a miss, and
    /// `Eq` once more than on the full lookup.
    ///
    /// A hint never misleads: it names a key of this arena with that key's
    /// number, both written by `number_and_key`, and keys and numbers are
    /// never reused, moved or freed while the index lives (revokes change
    /// a partition's life, not its key or number; a table growth moves
    /// entries of the table, not of the arena). So the key it names is
    /// written, and what `Eq` compares with is the partition's own key.
    #[inline(always)]
    pub(crate) fn number_hinted(
        &self,
        partition: &P,
        hint: Option<&Hint>,
    ) -> Option<(usize, &Lifecycle)> {
        let Some(hint) = hint else {
            return self.number(partition);
        };
        // Relaxed: the hint is the owner's own (see `counts::Hint`).
        let hinted = hint.key.load(Ordering::Relaxed).cast::<Key<P>>();
        if !hinted.is_null() {
            // SAFETY: a non-null hint is a key of this arena that
            // `number_and_key` returned to this thread (or to the one that
            // held its number before, which handed its writes over with
            // the number): it lives as long as `self`, and its value was
            // written (and its `written` flag acquired) before the hint
            // named it, and is never written again.
            let key = unsafe { &*hinted };
            // Read before `Eq` runs: user code may send from inside it, on
            // this thread, and move the hint to another partition (review
            // of issue 41); the number must be the hinted key's.
            // Relaxed: as above.
            let number = hint.number.load(Ordering::Relaxed);
            // SAFETY: as above, the value is written and immutable.
            let value = key.value.with(|v| unsafe { (*v).assume_init_ref() });
            // Mutant `stale_partition_cache` (loom suite only): the hinted
            // key is taken without comparing it, so a send of another
            // partition counts in the last one's.
            #[cfg(inflight_mutant = "stale_partition_cache")]
            let hit = true;
            #[cfg(not(inflight_mutant = "stale_partition_cache"))]
            let hit = value == partition; // user code (`Eq`)
            if hit {
                return Some((number, &key.lifecycle));
            }
        }
        self.number_missed(partition, hint)
    }

    /// [`number_hinted`](Self::number_hinted) past a hint that did not
    /// match: the full lookup, and the hint set to its answer.
    #[inline(never)]
    fn number_missed(&self, partition: &P, hint: &Hint) -> Option<(usize, &Lifecycle)> {
        let (n, key) = self.number_and_key(partition)?;
        // Relaxed, both: the owner's own words (see `counts::Hint`); a
        // reader that does not find both of these stores is no owner.
        hint.number.store(n, Ordering::Relaxed);
        hint.key
            .store((key as *const Key<P>).cast_mut().cast(), Ordering::Relaxed);
        Some((n, &key.lifecycle))
    }

    /// The number of `partition`, adding it if new, and its arena entry
    /// (written).
    #[inline]
    fn number_and_key(&self, partition: &P) -> Option<(usize, &Key<P>)> {
        let hash = self.hasher.hash_one(partition);
        let mut found_key = None;
        let found = self.current().find(hash, |n| match self.keys.get(n) {
            Some(key) if key.value() == Some(partition) => {
                found_key = Some(key);
                true
            }
            _ => false,
        });
        if let (Some(n), Some(key)) = (found, found_key) {
            return Some((n, key));
        }
        let n = self.add(partition, hash)?;
        let key = self.keys.get(n)?;
        // `add` returns the number of a written key (ours, or the racing
        // adder's that won the table's entry).
        key.value()?;
        Some((n, key))
    }

    /// The number of a partition already seen, looked up by any borrowed
    /// form of its key (as `HashMap::get` does); adds nothing.
    pub(crate) fn find<Q>(&self, partition: &Q) -> Option<usize>
    where
        P: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // `Borrow` promises that `Q` hashes as `P` does.
        let hash = self.hasher.hash_one(partition);
        self.current().find(hash, |n| {
            self.key(n).is_some_and(|key| key.borrow() == partition)
        })
    }

    /// The current table.
    #[inline]
    fn current(&self) -> &Table {
        // SAFETY: never null, and no table is freed before `self` drops.
        unsafe { &*self.current_owned() }
    }

    /// The current table's owning pointer, as `Box::into_raw` made it: what
    /// a resize links and compares, so that `drop` frees through it.
    #[inline]
    fn current_owned(&self) -> *mut Table {
        // Acquire: pairs with the Release CAS that published the table (and,
        // through it, the keys it names).
        self.table.load(Ordering::Acquire)
    }

    #[cold]
    fn add(&self, partition: &P, hash: u64) -> Option<usize> {
        // Relaxed: only hands out distinct arena entries.
        let number = self.claimed.fetch_add(1, Ordering::Relaxed);
        if number >= MAX_PARTITIONS {
            return None;
        }
        let key = self.keys.get_or_alloc(number, Key::empty);
        // SAFETY: entry `number` is ours alone (the counter handed it out),
        // and nobody reads it before `written` is set.
        key.value
            .with_mut(|v| unsafe { (*v).write(partition.clone()) });
        // Release: publishes the key to readers that see `written`.
        key.written.store(true, Ordering::Release);
        loop {
            let owned = self.current_owned();
            // SAFETY: never null, and no table is freed before `self` drops.
            let table = unsafe { &*owned };
            match table.insert(hash, number, |n| self.key(n) == Some(partition)) {
                Insert::Found(n) => return Some(n), // another thread added it first
                Insert::Added => {
                    // Relaxed: a count; nothing is published through it.
                    self.len.fetch_add(1, Ordering::Relaxed);
                    if table.crowded() {
                        self.grow(owned);
                    }
                    return Some(number);
                }
                Insert::Frozen => self.grow(owned),
            }
        }
    }

    /// Replaces `current` with a grown copy, unless another thread already
    /// replaced it. Lock-free: every thread that finds the table crowded or
    /// frozen may do the whole copy; one CAS wins.
    /// `current` is the owning pointer loaded from `self.table`, never one
    /// made from a `&Table`: the new table keeps it in `older`, and `drop`
    /// frees the old table through it.
    #[cold]
    fn grow(&self, current: *mut Table) {
        // SAFETY: `current` was loaded from `self.table`: never null, and no
        // table is freed before `self` drops.
        let grown = unsafe { &*current }.grown(current);
        let next = Box::into_raw(Box::new(grown));
        // AcqRel: Release publishes the copy's entries (and the keys they
        // name, acquired when the copy read them); Acquire (on failure)
        // sees the winner's table.
        if self
            .table
            .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread installed its copy; ours was never shared.
            // SAFETY: `next` came from `Box::into_raw` above and nobody else
            // saw it; dropping a table frees only its own entries.
            drop(unsafe { Box::from_raw(next) });
        }
    }

    /// A bound on the partition numbers handed out: every number a send was
    /// given is below it. A send's number is claimed before the send does
    /// anything with it, so whatever happens after that send (its ack, an
    /// advance, a drain seeing it resolved) also sees the bound include it.
    pub(crate) fn numbered(&self) -> usize {
        // Relaxed: the claim happens before everything the caller learned
        // about the send, and a later load sees it (read coherence).
        self.claimed.load(Ordering::Relaxed).min(MAX_PARTITIONS)
    }

    /// How many distinct partitions were seen.
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a count.
        self.len.load(Ordering::Relaxed)
    }
}

impl<P> Drop for Partitions<P> {
    fn drop(&mut self) {
        self.keys.for_each(|_, key| {
            // Relaxed: `&mut self`, every other thread is done with us.
            if key.written.load(Ordering::Relaxed) {
                // SAFETY: written once and not dropped since; last owner.
                key.value.with_mut(|v| unsafe { (*v).assume_init_drop() });
            }
        });
        // Relaxed: `&mut self`, exclusive access.
        let mut table = self.table.load(Ordering::Relaxed);
        while !table.is_null() {
            // SAFETY: the current table and every one it replaced came from
            // `Box::into_raw`, are owned by `self` and freed only here, once.
            let owned = unsafe { Box::from_raw(table) };
            table = owned.older;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A send's partition hint (issue 41) is only a guess: each lookup
    /// checks it, so alternating partitions, a new one among them, get
    /// their own numbers, and the hint follows the last one looked up.
    #[test]
    fn a_hint_is_checked_and_follows_the_last_partition() {
        let p = Partitions::new();
        let hint = Hint::new();
        let seen: Vec<_> = ["a", "b", "b", "a", "c", "a", "c", "c"]
            .into_iter()
            .map(|key| p.number_hinted(&key, Some(&hint)).map(|(n, _)| n))
            .collect();
        let expected = [0, 1, 1, 0, 2, 0, 2, 2].map(Some);
        assert_eq!(seen, expected);
        // Relaxed: this thread's own hint.
        assert_eq!(hint.number.load(Ordering::Relaxed), 2);
        // Every lifecycle is the one of its number.
        for key in ["a", "b", "c"] {
            let (n, hinted) = p.number_hinted(&key, Some(&hint)).unwrap();
            assert!(std::ptr::eq(hinted, p.lifecycle(n).unwrap()));
        }
    }

    #[test]
    fn numbers_are_stable_and_keys_come_back() {
        let p = Partitions::new();
        assert_eq!(p.number(&"a").map(|(n, _)| n), Some(0));
        assert_eq!(p.number(&"b").map(|(n, _)| n), Some(1));
        assert_eq!(p.number(&"a").map(|(n, _)| n), Some(0));
        assert_eq!(
            (p.key(0), p.key(1), p.key(2)),
            (Some(&"a"), Some(&"b"), None)
        );
        assert_eq!(p.len(), 2);
    }

    /// The fragment (the hash's high half) drives both probing and the
    /// equality prefilter, so neighbouring keys must spread over it, and
    /// two trackers hash the same key differently.
    #[test]
    fn key_hashes_spread_and_differ_per_tracker() {
        // Fewer keys under Miri, where each hash is slow: still 8 times
        // the 64 below, and almost all must differ.
        const KEYS: u32 = if cfg!(miri) { 512 } else { 4096 };
        let (a, b) = (KeyHasher::new(), KeyHasher::new());
        let mut fragments: Vec<u64> = (0..KEYS).map(|k| fragment(a.hash_one(k))).collect();
        fragments.sort_unstable();
        fragments.dedup();
        assert!(
            fragments.len() > KEYS as usize - 6,
            "{} distinct of {KEYS}",
            fragments.len()
        );
        let homes: std::collections::HashSet<usize> = (0..64_u32)
            .map(|k| home(fragment(a.hash_one(k)), 127))
            .collect();
        assert!(homes.len() > 32, "64 keys over 128 homes: {}", homes.len());
        assert_ne!(a.hash_one("orders-3"), b.hash_one("orders-3"));
        assert_ne!(a.hash_one("ab"), a.hash_one("ab\0"));
    }

    #[test]
    fn many_keys_and_hash_collisions_are_told_apart() {
        // A hash that collides for every key: numbers must still differ.
        #[derive(Clone, PartialEq, Eq, Debug)]
        struct Colliding(u32);
        impl Hash for Colliding {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                state.write_u8(0);
            }
        }
        // Each lookup compares every key before it: fewer under Miri, still
        // across four resizes (at 5, 9, 17 and 33 keys).
        const KEYS: u32 = if cfg!(miri) { 40 } else { 100 };
        let p = Partitions::new();
        for i in 0..KEYS {
            assert_eq!(p.number(&Colliding(i)).map(|(n, _)| n), Some(i as usize));
        }
        for i in 0..KEYS {
            assert_eq!(p.number(&Colliding(i)).map(|(n, _)| n), Some(i as usize));
            assert_eq!(p.key(i as usize), Some(&Colliding(i)));
        }
        assert_eq!(p.len(), KEYS as usize);
    }

    /// Many partitions, added by several threads at once across many
    /// resizes: each key gets one number, every thread sees the same one,
    /// and lookups find them all afterwards.
    #[test]
    fn many_partitions_from_many_threads_across_resizes() {
        // Under Miri, still five resizes.
        const KEYS: u32 = if cfg!(miri) { 100 } else { 20_000 };
        let p = Partitions::<u32>::new();
        let numbers: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4_u32)
                .map(|t| {
                    let p = &p;
                    s.spawn(move || {
                        // Each thread walks the keys from a different start.
                        let mut seen = vec![0; KEYS as usize];
                        for k in 0..KEYS {
                            let key = (k + t * KEYS / 4) % KEYS;
                            seen[key as usize] = p.number(&key).map(|(n, _)| n).unwrap();
                        }
                        seen
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(numbers.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(p.len(), KEYS as usize);
        for key in 0..KEYS {
            let n = numbers[0][key as usize];
            assert_eq!(p.key(n), Some(&key));
            assert_eq!(p.number(&key).map(|(n, _)| n), Some(n));
        }
    }

    #[test]
    fn concurrent_first_sends_agree_on_one_number() {
        let p = Partitions::<String>::new();
        let numbers: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..50)
                            .map(|k| p.number(&format!("p{k}")).map(|(n, _)| n).unwrap())
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(numbers.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(p.len(), 50);
        for (k, &n) in numbers[0].iter().enumerate() {
            assert_eq!(p.key(n), Some(&format!("p{k}")));
        }
    }
}
