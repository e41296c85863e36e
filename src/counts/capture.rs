//! The sealer's side of the count words (see the parent module): the
//! heavy barrier, the captures of `remote` and `own` words for a
//! generation, the idle check of `drain`, and the snapshot for statistics.

use super::{behind, count, counts_for, pack, Shards, Snapshot, NONE, ROLLED};
use crate::generation::Generation;
use crate::sync::{heavy_barrier, Ordering};

impl Shards {
    /// Runs the heavy barrier: from here on, reads of the owners' words
    /// see every write whose owner has not seen `open_id` moved past what
    /// the caller saw it at. Call after moving (or seeing) `open_id`
    /// moved, before [`capture_own`](Self::capture_own) or
    /// [`idle`](Self::idle).
    pub(crate) fn barrier() {
        // Mutant `no_heavy_barrier` (loom suite only): the sealer reads the
        // owners' words unfenced, so it may miss a write whose owner missed
        // the seal.
        #[cfg(not(inflight_mutant = "no_heavy_barrier"))]
        heavy_barrier();
    }

    /// Moves shard `s`'s `remote` word past `generation` if it still
    /// counts for it, handing its records over to the generation's pending
    /// count. Returns true if that left the generation with nothing
    /// pending (the caller wakes waiters). Callers capture a word for
    /// generations in their order.
    pub(crate) fn capture_remote(&self, s: usize, generation: &Generation) -> bool {
        self.take_remote(s, generation)
            .is_some_and(|live| generation.hand_over(1, live))
    }

    /// [`capture_remote`](Self::capture_remote), but the caller hands the
    /// count over (and drops the word's `UNIT`): `Some(count)` if this call
    /// made the capture. A sealer adds up a generation's captures and hands
    /// them over in one step.
    pub(crate) fn take_remote(&self, s: usize, generation: &Generation) -> Option<i64> {
        let id = generation.id;
        let moved = pack(id + 1, 0);
        let word = &self.shards[s].shared.remote;
        // Acquire: see the resolutions released into the word.
        let mut current = word.load(Ordering::Acquire);
        loop {
            if !counts_for(current, id) {
                return None; // captured already, by us or a helper
            }
            // Mutant `unsealed_enter` (loom suite only): the capture reads
            // the count and then overwrites the word, two steps, so a send
            // that enters in between stays in the sealed generation without
            // being counted, the KAFKA-2867 class.
            #[cfg(inflight_mutant = "unsealed_enter")]
            {
                word.store(moved, Ordering::Release);
                return Some(count(current));
            }
            // AcqRel: Acquire takes the resolutions released into the word;
            // Release: a sender that reads the new epoch also sees `open`
            // moved on, which the sealer did before capturing.
            #[allow(unreachable_code)]
            match word.compare_exchange_weak(current, moved, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(count(current)),
                Err(seen) => current = seen,
            }
        }
    }

    /// Captures shard `s`'s `own` word for `generation`, unless that was
    /// done. Only after [`barrier`](Self::barrier), and for generations in
    /// their order. Returns true if that drained the generation.
    #[cfg(test)]
    pub(crate) fn capture_own(&self, s: usize, generation: &Generation) -> bool {
        self.take_own(s, generation)
            .is_some_and(|live| generation.hand_over(1, live))
    }

    /// `capture_own`, with the hand-over left to the caller, as
    /// [`take_remote`](Self::take_remote).
    pub(crate) fn take_own(&self, s: usize, generation: &Generation) -> Option<i64> {
        let id = generation.id;
        let shard = &self.shards[s];
        // Acquire: the capture before ours.
        let mut taken = shard.shared.taken.load(Ordering::Acquire);
        loop {
            if behind(taken, id) <= 0 {
                return None; // captured already
            }
            debug_assert_eq!(behind(taken, id), 1, "captures in order");
            // Acquire: the owner's Release stores, and what it did before.
            let word = shard.own.word.load(Ordering::Acquire);
            // The word counts for `id` only if the owner rolled to it since
            // the last capture (`ROLLED`): an epoch that only matches `id`'s
            // modulo 2^36 is a word left idle across 2^36 seals.
            let (live, record) = match count(taken) {
                ROLLED if counts_for(word, id) => (count(word), count(word)),
                ROLLED => (0, NONE),
                kept => (0, kept),
            };
            // AcqRel: one capture per generation and word (the owner's own
            // capture included); ordered with the next one.
            match shard.shared.taken.compare_exchange(
                taken,
                pack(id, record),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(live),
                Err(seen) => taken = seen,
            }
        }
    }

    /// Whether every word counts nothing unresolved in the open
    /// `generation`. Only after [`barrier`](Self::barrier) (run after the
    /// caller's `close`, if any).
    ///
    /// `drain` after `close` skips the seal when this says idle, and a send
    /// racing it must then see the close. For an owner's word, the heavy
    /// barrier does it: either our read sees the owner's write, or the
    /// owner's look at `closed` (after its light barrier) sees the close.
    /// For `remote`, each word is checked with a read-modify-write (a
    /// compare-exchange that writes back the value it expects), not a load:
    /// two RMWs on one word are ordered, so if ours comes first, the send's
    /// entering CAS reads our write and acquires what this thread did
    /// before (the close); if the send's comes first, we read its count. A
    /// plain load may read a value older than the send's entry and still
    /// hand the send nothing (a loom model catches that, mutant
    /// `idle_load`).
    pub(crate) fn idle(&self, generation: &Generation) -> bool {
        let id = generation.id;
        let empty = pack(id, 0);
        self.shards.iter().all(|shard| {
            // Acquire: the owner's write, and its leaves before.
            let own = shard.own.word.load(Ordering::Acquire);
            // A word rolled past `id` is not idle either: the roll captured
            // it for `id` (a record of `id` may be in `pending` now) while
            // `remote` may still read `(id, 0)`. Its owner saw `open_id`
            // moved past `id`, so the caller's seal must go on.
            // (The unit test `a_word_rolled_past_the_generation_is_not_idle`
            // steps through that race; a loom model of it, three threads
            // with two drains, is too large to explore.)
            if behind(own, id) < 0 || (counts_for(own, id) && count(own) != 0) {
                return false;
            }
            let word = &shard.shared.remote;
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

    /// Every word, read once: a moment's snapshot, for counting.
    pub(crate) fn snapshot(&self) -> Snapshot {
        // Relaxed: a statistic.
        Snapshot {
            words: std::array::from_fn(|i| {
                let shard = &self.shards[i];
                (
                    shard.own.word.load(Ordering::Relaxed),
                    shard.shared.taken.load(Ordering::Relaxed),
                    shard.shared.remote.load(Ordering::Relaxed),
                )
            }),
        }
    }
}

impl Snapshot {
    /// The records the words count for generation `id` and not yet
    /// captured: exact when nothing runs concurrently.
    pub(crate) fn uncaptured(&self, id: u64) -> i64 {
        self.words
            .iter()
            .map(|&(own, taken, remote)| {
                let own = if behind(taken, id) > 0 && counts_for(own, id) {
                    count(own)
                } else {
                    0
                };
                let remote = if counts_for(remote, id) {
                    count(remote)
                } else {
                    0
                };
                own + remote
            })
            .sum()
    }
}
