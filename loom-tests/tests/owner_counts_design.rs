//! The owner-only count protocol of issue 30's first item as it was first
//! designed, modelled before the code. This file is a miniature of the
//! protocol, not the crate, kept as the record of that design. The crate
//! (`src/counts.rs`, IMPLEMENTATION.md "Owner-only counts") differs in one
//! place: what a capture read is kept in a per-shard `taken` word (with a
//! `ROLLED` mark) rather than per generation, so that an owner never reads
//! a generation that may have drained. The crate's own models are in
//! `count_models.rs`, where the design mutants below are `inflight_mutant`s
//! (`no_count_fence`, `no_heavy_barrier`, `unsettled_straddle`).
//!
//! The design, per shard `s` (one per owned thread number):
//!
//! - `own[s]`: `epoch:32 | count:32`, written only by the shard's owner,
//!   with Release stores: its sends and the leaves of its own records while
//!   their generation is open. Each write is followed by the light barrier
//!   (here `fence(SeqCst)`) and a look at `open`: unchanged, and the write
//!   is counted in the generation (a sealer's read after its heavy barrier
//!   sees it); moved, and the owner captures its shard itself, with the
//!   value it wrote, unless a capture came first: the count the capture
//!   recorded says whether the write was in it.
//! - `remote[s]`: today's CAS word (`epoch | count`), for the leaves of the
//!   shard's records by other threads (a hand-off). The owner folds a
//!   negative count into its own word now and then, which keeps both
//!   bounded when nobody seals.
//! - per generation, `captured[s]`: the count a capture read from
//!   `own[s]`, set once by CAS (a sealer's, or the owner's).
//! - a generation's `pending` starts at one `UNIT` per word to capture;
//!   a capture adds what it read less a `UNIT`; a leave the words no longer
//!   take settles on it directly. Zero means drained.
//!
//! What each model checks, beyond its scenario: a generation is never
//! touched after it drained (in the crate it would be freed), its pending
//! count never reads below zero, and when every record is resolved every
//! sealed generation has drained (nothing lost, nothing counted twice).
//!
//! The design mutants (each must make a model fail, checked by
//! `design_mutants_are_caught`): `NoLightFence` (the owner's barrier left
//! out), `NoHeavyBarrier` (the sealer's), `UnsettledStraddle` (a leave the
//! capture missed is not settled).

use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Shards (owners) in the models.
const S: usize = 2;
/// Generations the models reach.
const GENS: usize = 3;
/// A shard word's share of `pending` until it is captured.
const UNIT: i64 = 1 << 20;
/// `captured[s]` before any capture.
const NONE: u64 = u64::MAX;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mutant {
    None,
    NoLightFence,
    NoHeavyBarrier,
    UnsettledStraddle,
}

fn word(epoch: u64, count: i64) -> u64 {
    (epoch << 32) | u64::from(count as i32 as u32)
}

fn epoch(word: u64) -> u64 {
    word >> 32
}

fn count(word: u64) -> i64 {
    i64::from(word as u32 as i32)
}

struct Gen {
    pending: AtomicU64,
    captured: [AtomicU64; S],
    drained: AtomicBool,
}

impl Gen {
    fn new() -> Self {
        Self {
            // Two words per shard: `own` and `remote`.
            pending: AtomicU64::new((2 * S as i64 * UNIT) as u64),
            captured: std::array::from_fn(|_| AtomicU64::new(NONE)),
            drained: AtomicBool::new(false),
        }
    }

    /// Adds `n` (negative: settles) to `pending`; true if that drained it.
    fn add(&self, n: i64) -> bool {
        // AcqRel: whoever drains it sees every leave before.
        let previous = self.pending.fetch_add(n as u64, Ordering::AcqRel) as i64;
        assert!(
            !self.drained.load(Ordering::SeqCst),
            "a drained generation was touched (freed, in the crate)"
        );
        let now = previous + n;
        assert!(now >= 0, "pending below zero: a record counted out twice");
        if now == 0 {
            self.drained.store(true, Ordering::SeqCst);
        }
        now == 0
    }
}

/// What an owner's write did.
#[derive(PartialEq, Eq, Debug)]
enum Applied {
    /// Counted in this generation.
    In(u64),
    /// Not counted: the generation was captured without it.
    Out(u64),
    /// Not made: the generation the caller expected is not open any more.
    Stale,
}

struct Counts {
    open: AtomicU64,
    gens: [Gen; GENS],
    own: [AtomicU64; S],
    remote: [AtomicU64; S],
    mutant: Mutant,
}

impl Counts {
    fn new(mutant: Mutant) -> Self {
        Self {
            open: AtomicU64::new(0),
            gens: std::array::from_fn(|_| Gen::new()),
            own: std::array::from_fn(|_| AtomicU64::new(word(0, 0))),
            remote: std::array::from_fn(|_| AtomicU64::new(word(0, 0))),
            mutant,
        }
    }

    fn light(&self) {
        if self.mutant != Mutant::NoLightFence {
            fence(Ordering::SeqCst);
        }
    }

    fn heavy(&self) {
        if self.mutant != Mutant::NoHeavyBarrier {
            fence(Ordering::SeqCst);
        }
    }

    /// Captures `own[s]` for generation `g`, with `value` if the caller is
    /// the owner (it knows its word), else with what a load reads. Returns
    /// the count recorded for `g`.
    fn capture_own(&self, s: usize, g: u64, value: Option<u64>) -> i64 {
        let gen = &self.gens[g as usize];
        // Acquire: the owner's Release stores.
        let value = value.unwrap_or_else(|| self.own[s].load(Ordering::Acquire));
        let c = match epoch(value) {
            e if e == g => count(value),
            e if e < g => 0,
            _ => {
                // The owner moved past `g`, which it does only once `g` was
                // captured for its shard (the Release store of its word
                // follows that CAS).
                let recorded = gen.captured[s].load(Ordering::Acquire);
                assert_ne!(
                    recorded, NONE,
                    "an owner rolled past an uncaptured generation"
                );
                return count(recorded);
            }
        };
        // AcqRel: one capture per generation and shard.
        match gen.captured[s].compare_exchange(
            NONE,
            u64::from(c as i32 as u32),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                gen.add(c - UNIT);
                c
            }
            Err(recorded) => count(recorded),
        }
    }

    /// Captures `remote[s]` for generation `g` (today's capture).
    fn capture_remote(&self, s: usize, g: u64) {
        let remote = &self.remote[s];
        let mut current = remote.load(Ordering::Acquire);
        while epoch(current) == g {
            match remote.compare_exchange(
                current,
                word(g + 1, 0),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.gens[g as usize].add(count(current) - UNIT);
                    return;
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Seals the open generation: moves `open` on, runs the heavy barrier,
    /// captures every word for it. Returns the sealed generation.
    fn seal(&self) -> u64 {
        let g = self.open.load(Ordering::Acquire);
        // An RMW, so that the heavy barrier after it orders it.
        self.open.fetch_max(g + 1, Ordering::AcqRel);
        self.heavy();
        for s in 0..S {
            self.capture_remote(s, g);
            self.capture_own(s, g, None);
        }
        g
    }

    /// The owner of shard `s` adds `delta` to its word for the open
    /// generation (or for `expect`, if given and still open).
    fn own_add(&self, s: usize, delta: i64, expect: Option<u64>) -> Applied {
        let id = self.open.load(Ordering::Acquire);
        if expect.is_some_and(|g| g != id) {
            return Applied::Stale;
        }
        // Relaxed: the owner's own word.
        let mut w = self.own[s].load(Ordering::Relaxed);
        if epoch(w) < id {
            // Roll: every older generation captured for this shard first.
            for g in epoch(w)..id {
                let mine = if g == epoch(w) { w } else { word(g, 0) };
                self.capture_own(s, g, Some(mine));
            }
            w = word(id, 0);
        }
        let new = word(id, count(w) + delta);
        // Release: a capture that reads it sees what the owner did before.
        self.own[s].store(new, Ordering::Release);
        self.light();
        if self.open.load(Ordering::Acquire) == id {
            return Applied::In(id);
        }
        // A seal began: whose capture has our write?
        let recorded = self.capture_own(s, id, Some(new));
        if recorded == count(new) {
            Applied::In(id)
        } else {
            assert_eq!(recorded, count(w), "a capture read neither value");
            Applied::Out(id)
        }
    }

    /// A send through shard `s`: the generation it counts in.
    fn send(&self, s: usize) -> u64 {
        loop {
            match self.own_add(s, 1, None) {
                Applied::In(g) => return g,
                // Captured without it: it belongs to a newer generation.
                Applied::Out(_) => continue,
                Applied::Stale => unreachable!(),
            }
        }
    }

    /// The leave of a record of generation `g` by the owner of its shard.
    fn leave_own(&self, s: usize, g: u64) {
        assert!(
            !self.gens[g as usize].drained.load(Ordering::SeqCst),
            "drained with a record in flight"
        );
        match self.own_add(s, -1, Some(g)) {
            Applied::In(_) => {}
            Applied::Out(_) if self.mutant == Mutant::UnsettledStraddle => {}
            // Missed by the capture, or `g` sealed before: settle directly.
            Applied::Out(_) | Applied::Stale => {
                self.gens[g as usize].add(-1);
            }
        }
    }

    /// The leave of a record of generation `g`, which entered through shard
    /// `s`, by another thread (a hand-off): today's CAS, on `remote[s]`.
    fn leave_remote(&self, s: usize, g: u64) {
        assert!(
            !self.gens[g as usize].drained.load(Ordering::SeqCst),
            "drained with a record in flight"
        );
        let remote = &self.remote[s];
        let mut current = remote.load(Ordering::Relaxed);
        while epoch(current) == g {
            // Release: the capture that takes the word sees the resolution.
            match remote.compare_exchange(
                current,
                word(g, count(current) - 1),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
        // Captured already (or not yet moved to `g`, whose capture then
        // still holds its `UNIT`): settle.
        self.gens[g as usize].add(-1);
    }

    /// The owner of shard `s` folds the remote leaves of its records into
    /// its own word, if any are counted for the open generation.
    fn fold(&self, s: usize) {
        let id = self.open.load(Ordering::Acquire);
        let current = self.remote[s].load(Ordering::Acquire);
        if epoch(current) != id || count(current) >= 0 {
            return;
        }
        // AcqRel: as a capture's.
        if self.remote[s]
            .compare_exchange(current, word(id, 0), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // The leaves are out of `remote`; into our word, or, if a capture
        // missed them there too (or `id` was sealed meanwhile), settled.
        match self.own_add(s, count(current), Some(id)) {
            Applied::In(_) => {}
            Applied::Out(_) if self.mutant == Mutant::UnsettledStraddle => {}
            Applied::Out(_) | Applied::Stale => {
                self.gens[id as usize].add(count(current));
            }
        }
    }

    /// After every thread joined and every record was resolved: each sealed
    /// generation drained, and the open one counts nothing.
    fn check_quiet(&self) {
        let open = self.open.load(Ordering::SeqCst);
        for g in 0..open {
            let gen = &self.gens[g as usize];
            assert_eq!(
                gen.pending.load(Ordering::SeqCst),
                0,
                "sealed generation {g} did not drain"
            );
            assert!(gen.drained.load(Ordering::SeqCst));
        }
        let mut live = 0;
        for s in 0..S {
            for w in [
                self.own[s].load(Ordering::SeqCst),
                self.remote[s].load(Ordering::SeqCst),
            ] {
                if epoch(w) == open {
                    live += count(w);
                }
            }
        }
        let settled =
            self.gens[open as usize].pending.load(Ordering::SeqCst) as i64 - 2 * S as i64 * UNIT;
        assert_eq!(
            live + settled,
            0,
            "the open generation counts a record that is not there"
        );
    }
}

/// A model: one scenario, under a design mutant or none.
type Model = fn(Mutant);

fn check(name: &str, mutant: Mutant, f: Model) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(3));
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f(mutant)
    });
    let n = runs.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("model {name} ({mutant:?}): {n} executions");
}

/// D1. A send straddles a seal: it is counted in the sealed generation or
/// in the next, never in neither; its record and one sent before the seal
/// are then acked by their owner.
fn send_straddles_a_seal(mutant: Mutant) {
    let counts = Arc::new(Counts::new(mutant));
    let first = counts.send(0);
    let c = counts.clone();
    let owner = thread::spawn(move || {
        let second = c.send(0);
        c.leave_own(0, second);
        c.leave_own(0, first);
    });
    assert_eq!(counts.seal(), 0);
    owner.join().unwrap();
    counts.check_quiet();
}

/// D2. An owner's leave straddles a seal of its record's generation.
fn leave_straddles_a_seal(mutant: Mutant) {
    let counts = Arc::new(Counts::new(mutant));
    let record = counts.send(0);
    let other = counts.send(1); // shard 1's owner is idle: the seal captures it alone
    let c = counts.clone();
    let owner = thread::spawn(move || c.leave_own(0, record));
    counts.seal();
    owner.join().unwrap();
    counts.leave_own(1, other);
    counts.check_quiet();
}

/// D3. A hand-off: shard 1's record is acked by shard 0's owner (a remote
/// leave) while the seal runs, and shard 1's owner, sending again, folds.
fn hand_off_leave_and_fold_straddle_a_seal(mutant: Mutant) {
    let counts = Arc::new(Counts::new(mutant));
    let a = counts.send(1);
    let b = counts.send(1);
    counts.leave_remote(1, a); // before the threads: remote[1] holds -1
    let c = counts.clone();
    let owner = thread::spawn(move || {
        c.fold(1);
        c.leave_own(1, b);
    });
    counts.seal();
    owner.join().unwrap();
    counts.check_quiet();
}

/// D4. A new owner of a thread number (the old one exited) finds its word
/// two generations behind and rolls while a second seal runs.
fn new_owner_rolls_across_seals(mutant: Mutant) {
    let counts = Arc::new(Counts::new(mutant));
    let old = counts.send(0);
    counts.leave_own(0, old); // the old owner's last act; then it exits
    counts.seal(); // generation 0, captured while the word is idle
    let c = counts.clone();
    let owner = thread::spawn(move || {
        let record = c.send(0);
        c.leave_own(0, record);
    });
    counts.seal(); // generation 1
    owner.join().unwrap();
    counts.check_quiet();
}

#[test]
fn owner_count_design_models() {
    check("send_straddles_a_seal", Mutant::None, send_straddles_a_seal);
    check(
        "leave_straddles_a_seal",
        Mutant::None,
        leave_straddles_a_seal,
    );
    check(
        "hand_off_leave_and_fold_straddle_a_seal",
        Mutant::None,
        hand_off_leave_and_fold_straddle_a_seal,
    );
    check(
        "new_owner_rolls_across_seals",
        Mutant::None,
        new_owner_rolls_across_seals,
    );
}

/// Each design mutant makes at least one model fail.
#[test]
fn design_mutants_are_caught() {
    let models: [(&str, Model); 4] = [
        ("send_straddles_a_seal", send_straddles_a_seal),
        ("leave_straddles_a_seal", leave_straddles_a_seal),
        (
            "hand_off_leave_and_fold_straddle_a_seal",
            hand_off_leave_and_fold_straddle_a_seal,
        ),
        ("new_owner_rolls_across_seals", new_owner_rolls_across_seals),
    ];
    for mutant in [
        Mutant::NoLightFence,
        Mutant::NoHeavyBarrier,
        Mutant::UnsettledStraddle,
    ] {
        let caught: Vec<&str> = models
            .iter()
            .filter(|(name, model)| {
                let model = *model;
                std::panic::catch_unwind(move || check(name, mutant, model)).is_err()
            })
            .map(|(name, _)| *name)
            .collect();
        eprintln!("design mutant {mutant:?}: caught by {caught:?}");
        assert!(
            !caught.is_empty(),
            "design mutant {mutant:?} was not caught"
        );
    }
}
