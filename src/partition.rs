//! The partition index: maps each source partition `P` to a small dense
//! number, so that generations can keep per-partition cells in plain arrays.
//!
//! Lookups are lock-free reads of an immutable snapshot (arc-swap); a
//! partition seen for the first time is added by copying the snapshot and
//! swapping it in (read-copy-update). Sources have few partitions and add
//! them rarely, so the copy is paid a handful of times in a tracker's life,
//! never per record. Numbers are never reused: a partition keeps its number
//! for the life of the tracker.

use crate::generation::MAX_PARTITIONS;
use crate::sync::ArcCell;
use std::collections::HashMap;
use std::hash::Hash;

struct Snapshot<P> {
    numbers: HashMap<P, usize>,
    keys: Vec<P>,
}

pub(crate) struct Partitions<P> {
    snapshot: ArcCell<Snapshot<P>>,
}

impl<P: Hash + Eq + Clone> Partitions<P> {
    pub(crate) fn new() -> Self {
        Self {
            snapshot: ArcCell::new(Snapshot {
                numbers: HashMap::new(),
                keys: Vec::new(),
            }),
        }
    }

    /// The number of `partition`, adding it if new. `None` when the tracker
    /// already holds [`MAX_PARTITIONS`] partitions.
    #[inline]
    pub(crate) fn number(&self, partition: &P) -> Option<usize> {
        if let Some(&n) = self.snapshot.load().numbers.get(partition) {
            return Some(n);
        }
        self.add(partition)
    }

    #[cold]
    fn add(&self, partition: &P) -> Option<usize> {
        let mut number = None;
        self.snapshot.update(|current| {
            if let Some(&n) = current.numbers.get(partition) {
                number = Some(n); // another thread added it first
                return None;
            }
            if current.keys.len() >= MAX_PARTITIONS {
                number = None;
                return None;
            }
            let n = current.keys.len();
            number = Some(n);
            let mut numbers = current.numbers.clone();
            let mut keys = current.keys.clone();
            numbers.insert(partition.clone(), n);
            keys.push(partition.clone());
            Some(Snapshot { numbers, keys })
        });
        number
    }

    /// Runs `f` on the partitions known so far, indexed by number.
    pub(crate) fn with_keys<R>(&self, f: impl FnOnce(&[P]) -> R) -> R {
        let snapshot = self.snapshot.load();
        f(&snapshot.keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_dense_and_stable() {
        let p = Partitions::new();
        assert_eq!(p.number(&"a"), Some(0));
        assert_eq!(p.number(&"b"), Some(1));
        assert_eq!(p.number(&"a"), Some(0));
        p.with_keys(|keys| assert_eq!(keys, ["a", "b"]));
    }
}
