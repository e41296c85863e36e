//! The partition index: maps each source partition `P` to a small number,
//! so that generations can keep per-partition cells in plain arrays.
//!
//! Keys live in an append-only arena ([`Pages`]), written once and kept for
//! the tracker's life. A lookup hashes the key and probes an immutable
//! open-addressing table of `(hash, number)` pairs, read through an
//! epoch-protected pointer under the guard `send` already holds: one
//! Acquire load, no read-modify-write. A partition seen for the first time
//! is written to the arena first, then published by swapping in a copy of
//! the table that includes it (a CAS); the old table goes to the epoch
//! collector. Tables hold no `P`, so retiring them never runs user code late
//! (and needs no `P: 'static`).
//!
//! Two threads adding the same partition at once both write it to the
//! arena, but only one table CAS can win; the loser finds the winner's
//! number on its retry and its own arena entry stays unused. Numbers are
//! never reused. Sources have few partitions and add them rarely, so the
//! table copy is paid a handful of times in a tracker's life, never per
//! record.

use crate::generation::MAX_PARTITIONS;
use crate::pages::Pages;
use crate::sync::epoch::{self, Atomic, Guard, Owned};
use crate::sync::{AtomicBool, AtomicUsize, Ordering, UnsafeCell};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::mem::MaybeUninit;

/// An immutable open-addressing table: `(hash, number + 1)`, 0 when empty.
struct Table {
    entries: Box<[(u64, u32)]>,
    len: usize,
}

impl Table {
    fn with_capacity(len: usize) -> Self {
        let slots = (2 * len).next_power_of_two().max(8);
        Self {
            entries: vec![(0, 0); slots].into_boxed_slice(),
            len: 0,
        }
    }

    /// The number of the key with `hash` for which `is_key` holds.
    fn find(&self, hash: u64, mut is_key: impl FnMut(usize) -> bool) -> Option<usize> {
        let mask = self.entries.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let (h, n) = self.entries[i];
            if n == 0 {
                return None;
            }
            if h == hash && is_key(n as usize - 1) {
                return Some(n as usize - 1);
            }
            i = (i + 1) & mask;
        }
    }

    fn insert(&mut self, hash: u64, number: usize) {
        let mask = self.entries.len() - 1;
        let mut i = hash as usize & mask;
        while self.entries[i].1 != 0 {
            i = (i + 1) & mask;
        }
        self.entries[i] = (hash, number as u32 + 1);
        self.len += 1;
    }

    /// A copy with one more entry (half full at most, so probes stay short).
    fn with(&self, hash: u64, number: usize) -> Self {
        let mut next = Self::with_capacity(self.len + 1);
        for &(h, n) in self.entries.iter().filter(|e| e.1 != 0) {
            next.insert(h, n as usize - 1);
        }
        next.insert(hash, number);
        next
    }
}

/// One arena entry: a key, once written.
struct Key<P> {
    written: AtomicBool,
    value: UnsafeCell<MaybeUninit<P>>,
}

impl<P> Key<P> {
    fn empty() -> Self {
        Self {
            written: AtomicBool::new(false),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

pub(crate) struct Partitions<P> {
    hasher: RandomState,
    /// The current table; never null.
    table: Atomic<Table>,
    keys: Pages<Key<P>, 16, 20>,
    /// Arena entries handed out (some may be unused, see the module docs).
    claimed: AtomicUsize,
}

impl<P: Hash + Eq + Clone> Partitions<P> {
    pub(crate) fn new() -> Self {
        Self {
            hasher: RandomState::new(),
            table: Atomic::new(Table::with_capacity(0)),
            keys: Pages::new(),
            claimed: AtomicUsize::new(0),
        }
    }

    /// The key numbered `number`, if that number was given out.
    pub(crate) fn key(&self, number: usize) -> Option<&P> {
        let key = self.keys.get(number)?;
        // Acquire: pairs with the Release store after the key was written.
        if !key.written.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: written once before `written` was set, never again, and
        // dropped only with the arena.
        Some(key.value.with(|v| unsafe { (*v).assume_init_ref() }))
    }

    /// The number of `partition`, adding it if new. `None` when the tracker
    /// already holds [`MAX_PARTITIONS`] partitions.
    #[inline]
    pub(crate) fn number(&self, partition: &P, guard: &Guard) -> Option<usize> {
        let hash = self.hasher.hash_one(partition);
        // Acquire: pairs with the Release CAS that published the table (and,
        // through it, the keys it names).
        let table = self.table.load(Ordering::Acquire, guard);
        // SAFETY: never null; a replaced table is destroyed only through the
        // collector, after `guard` is released.
        let table = unsafe { table.deref() };
        if let Some(n) = table.find(hash, |n| self.key(n) == Some(partition)) {
            return Some(n);
        }
        self.add(partition, hash, guard)
    }

    #[cold]
    fn add(&self, partition: &P, hash: u64, guard: &Guard) -> Option<usize> {
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
            // Acquire: as in `number`.
            let current = self.table.load(Ordering::Acquire, guard);
            // SAFETY: as in `number`.
            let table = unsafe { current.deref() };
            if let Some(n) = table.find(hash, |n| self.key(n) == Some(partition)) {
                return Some(n); // another thread added it first
            }
            let next = Owned::new(table.with(hash, number));
            // AcqRel: Release publishes the new table and the key written
            // above; Acquire (on failure) sees the competing table.
            match self.table.compare_exchange(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
                guard,
            ) {
                Ok(_) => {
                    // SAFETY: unlinked by the CAS; readers reach it only
                    // under guards, which the collector waits for. A table
                    // holds no `P`, so it may be freed at any later time.
                    unsafe { guard.defer_destroy(current) };
                    return Some(number);
                }
                Err(_) => continue,
            }
        }
    }

    /// How many distinct partitions were seen.
    pub(crate) fn len(&self) -> usize {
        let guard = epoch::pin();
        // Acquire: as in `number`.
        let table = self.table.load(Ordering::Acquire, &guard);
        // SAFETY: as in `number`.
        unsafe { table.deref() }.len
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
        // SAFETY: `&mut self`: the current table is ours alone.
        let guard = unsafe { epoch::unprotected() };
        // Relaxed: exclusive access.
        let table = self.table.load(Ordering::Relaxed, guard);
        // SAFETY: never null, owned by `self`, unreachable by anyone else.
        drop(unsafe { table.into_owned() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_stable_and_keys_come_back() {
        let p = Partitions::new();
        let guard = epoch::pin();
        assert_eq!(p.number(&"a", &guard), Some(0));
        assert_eq!(p.number(&"b", &guard), Some(1));
        assert_eq!(p.number(&"a", &guard), Some(0));
        assert_eq!(
            (p.key(0), p.key(1), p.key(2)),
            (Some(&"a"), Some(&"b"), None)
        );
        assert_eq!(p.len(), 2);
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
        let p = Partitions::new();
        let guard = epoch::pin();
        for i in 0..100 {
            assert_eq!(p.number(&Colliding(i), &guard), Some(i as usize));
        }
        for i in 0..100 {
            assert_eq!(p.number(&Colliding(i), &guard), Some(i as usize));
            assert_eq!(p.key(i as usize), Some(&Colliding(i)));
        }
        assert_eq!(p.len(), 100);
    }

    #[test]
    fn concurrent_first_sends_agree_on_one_number() {
        let p = Partitions::<String>::new();
        let numbers: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let guard = epoch::pin();
                        (0..50)
                            .map(|k| p.number(&format!("p{k}"), &guard).unwrap())
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
