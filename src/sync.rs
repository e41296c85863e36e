//! The one door to shared memory.
//!
//! Every atomic, cell, shared pointer, epoch guard and parking call the crate
//! makes goes through this module. In a normal build it re-exports `std` and
//! `crossbeam-epoch`; under `--cfg loom` it re-exports loom's model-checked
//! versions instead (and crossbeam-epoch becomes loom-aware with
//! `--cfg crossbeam_loom`), so turning the model on cannot miss a file.
//! No other module names `std::sync::atomic` or `loom`.
//!
//! What falls outside the model under `cfg(loom)`:
//!
//! - Timeouts. Loom has no clock, so `Parker::park_timeout` parks until
//!   unparked and a deadline is never what ends a wait; timeouts are tested
//!   with std threads instead.
//! - Free-list sharding. Under loom there is a single free-list shard, which
//!   keeps the state space small; the shard a thread uses never affects
//!   correctness, only contention. (Count shards are different: their
//!   capture is part of the seal, so models run with two, and threads spread
//!   over them by loom's thread number.)
//! - Randomness and constants: tags start at 0 rather than at a random
//!   value (loom needs deterministic executions), a waiting flush does not
//!   spin before parking.

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    };

    /// What a waker calls to end a park: the parked thread's handle.
    pub(crate) type Unparker = std::thread::Thread;

    /// The parking side: parks the thread that made it.
    pub(crate) struct Parker(());

    impl Parker {
        /// Parks the calling thread for at most `timeout`, or until
        /// unparked (or spuriously).
        pub(crate) fn park_timeout(&self, timeout: std::time::Duration) {
            std::thread::park_timeout(timeout);
        }
    }

    /// A parker for the calling thread, and the handle that wakes it.
    pub(crate) fn parker() -> (Parker, Unparker) {
        (Parker(()), std::thread::current())
    }

    /// A short pause inside a spin.
    pub(crate) fn spin_hint() {
        std::hint::spin_loop();
    }

    /// `std::cell::UnsafeCell` with loom's closure-based API, so that the same
    /// code compiles in both builds and loom can check every access.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        #[inline(always)]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }

    /// Assigns each thread a small, stable number (round robin, from 0), used
    /// to spread count and free-list traffic over shards.
    pub(crate) fn thread_index() -> usize {
        use std::cell::Cell;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
        }
        INDEX.with(|index| {
            let mut i = index.get();
            if i == usize::MAX {
                // Relaxed: the numbers only need to differ, nothing is published.
                i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                index.set(i);
            }
            i
        })
    }

    /// How many free-list shards to use.
    pub(crate) const FREE_SHARDS: usize = 8;

    /// Spins of a waiting flush before it parks.
    pub(crate) const SPINS_BEFORE_PARK: u32 = 64;

    /// Marks an allocation that loom should check for leaks; nothing here.
    #[derive(Debug)]
    pub(crate) struct LeakCheck(());

    impl LeakCheck {
        pub(crate) fn new() -> Self {
            Self(())
        }
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    };
    pub(crate) use loom::sync::Arc;

    /// Under loom a wait parks on a `Notify` made for it rather than with
    /// `thread::park`: a late unpark (a waker that read the handle just
    /// before the waiter left) is harmless in std, but loom's `unpark` would
    /// also wake the thread out of an unrelated `join`.
    #[derive(Clone)]
    pub(crate) struct Unparker(Arc<loom::sync::Notify>);

    impl Unparker {
        pub(crate) fn unpark(&self) {
            self.0.notify();
        }
    }

    /// The parking side of an [`Unparker`].
    pub(crate) struct Parker(Arc<loom::sync::Notify>);

    impl Parker {
        /// Loom has no clock: park until unparked. A lost wake-up then shows
        /// up as a deadlock, which loom reports.
        pub(crate) fn park_timeout(&self, _timeout: std::time::Duration) {
            self.0.wait();
        }
    }

    /// A parker and the handle that wakes it.
    pub(crate) fn parker() -> (Parker, Unparker) {
        let notify = Arc::new(loom::sync::Notify::new());
        (Parker(notify.clone()), Unparker(notify))
    }

    /// Inside a spin, let loom schedule another thread.
    pub(crate) fn spin_hint() {
        loom::thread::yield_now();
    }

    /// One shard keeps the model small; sharding affects contention only.
    pub(crate) const FREE_SHARDS: usize = 1;

    /// Loom's number for the thread (0 for the model's main thread, then 1,
    /// 2, … in spawn order), so that models reach threads on different
    /// count shards, deterministically. Loom exposes that number only
    /// through `Debug`. (All threads share the one free-list shard.)
    pub(crate) fn thread_index() -> usize {
        let id = format!("{:?}", loom::thread::current().id());
        id.trim_start_matches("ThreadId(")
            .trim_end_matches(')')
            .parse()
            .unwrap_or(0)
    }

    /// No spinning under loom: every spin would multiply the interleavings.
    pub(crate) const SPINS_BEFORE_PARK: u32 = 0;

    /// Loom reports a `LeakCheck` that is still alive at the end of an
    /// execution, so a value holding one is checked for leaks.
    #[derive(Debug)]
    pub(crate) struct LeakCheck(#[allow(dead_code)] loom::alloc::Track<()>);

    impl LeakCheck {
        pub(crate) fn new() -> Self {
            Self(loom::alloc::Track::new(()))
        }
    }
}

pub(crate) use imp::*;

pub(crate) use crossbeam_utils::CachePadded;
pub(crate) use std::sync::atomic::Ordering;

/// Epoch-based reclamation: crossbeam-epoch, which becomes loom-aware when it
/// is built with `--cfg crossbeam_loom` and its `loom` feature.
pub(crate) mod epoch {
    pub(crate) use crossbeam_epoch::{pin, unprotected, Atomic, Guard, Owned, Shared};
}

/// Two random words to seed a tracker's partition-key hasher (see
/// `partition::KeyHasher`), so that keys cannot be chosen to collide.
/// Fixed under loom, whose executions must be deterministic (the probe
/// sequence decides which atomics a lookup touches).
pub(crate) fn hash_seeds() -> [u64; 2] {
    #[cfg(not(loom))]
    {
        use std::hash::BuildHasher;
        // `RandomState` is seeded from the OS once per process and then
        // varies per instance.
        let state = std::collections::hash_map::RandomState::new();
        [state.hash_one(1_u8), state.hash_one(2_u8)]
    }
    #[cfg(loom)]
    {
        [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344]
    }
}

/// A random starting tag for a tracker's slots, so that two trackers whose
/// 8-bit ids collide still issue different tickets (see `ticket`). Fixed
/// under loom, whose executions must be deterministic.
pub(crate) fn tag_seed() -> u32 {
    #[cfg(not(loom))]
    {
        use std::hash::{BuildHasher, Hasher};
        // `RandomState` is seeded from the OS once per process and then
        // varies per instance: enough to tell trackers apart.
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish() as u32
    }
    #[cfg(loom)]
    {
        0
    }
}

/// Hands out tracker ids for raw tickets. Not part of any model: ids only
/// need to differ between trackers that are alive at the same time, and they
/// are never used to order memory.
pub(crate) fn next_tracker_id() -> u8 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    // Relaxed: a counter, nothing is published through it.
    (NEXT.fetch_add(1, Ordering::Relaxed) & 0xff) as u8
}
