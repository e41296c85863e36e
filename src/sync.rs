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
//! - The `membarrier` system call. Both sides of the asymmetric barrier
//!   (`sync/barrier.rs`) are `fence(SeqCst)` under loom, which it checks
//!   exactly; that the kernel call orders as such a pair does is covered
//!   by `tests/stress_fences.rs` on real threads.

#[cfg(not(loom))]
mod imp {
    use std::cell::Cell;
    use std::sync::atomic::Ordering;
    pub(crate) use std::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    };
    pub(crate) use std::sync::Arc;

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

    /// Thread numbers below this are each held by one live thread at a
    /// time, which may keep a free list of its own in every slab (see
    /// [`thread_index`]).
    pub(crate) const LOCAL_THREADS: usize = 256;

    /// Numbers of exited threads, for reuse: a [`stack`](super::stack)
    /// threaded through `NEXT_FREE`.
    static FREE_NUMBERS: AtomicU64 = AtomicU64::new(0);
    static NEXT_FREE: [AtomicU32; LOCAL_THREADS] = [const { AtomicU32::new(0) }; LOCAL_THREADS];
    /// Numbers never handed out yet.
    static FRESH_NUMBERS: AtomicUsize = AtomicUsize::new(0);
    /// Numbers handed out once the reusable ones ran out (or after a
    /// thread's own number was given back at its exit): at least
    /// `LOCAL_THREADS`, never reused.
    static OVERFLOW_NUMBERS: AtomicUsize = AtomicUsize::new(LOCAL_THREADS);

    /// A thread's number, given back when the thread exits.
    struct Number(usize);

    impl Number {
        fn take() -> Self {
            // Acquire (inside `pop`): takes the number, and the free lists its
            // previous holder left in every slab, from that holder's push.
            if let Some(number) = super::stack::pop(&FREE_NUMBERS, |n| &NEXT_FREE[n]) {
                return Self(number);
            }
            // Relaxed, both: the counters only hand out distinct numbers.
            let fresh = FRESH_NUMBERS.fetch_add(1, Ordering::Relaxed);
            if fresh < LOCAL_THREADS {
                Self(fresh)
            } else {
                Self(OVERFLOW_NUMBERS.fetch_add(1, Ordering::Relaxed))
            }
        }
    }

    impl Drop for Number {
        fn drop(&mut self) {
            // First: from here on the number is not ours to use (it may be
            // another thread's once pushed), and `thread_index` must not
            // hand it out from the cache.
            CACHED.set(NONE);
            if self.0 < LOCAL_THREADS {
                // Release (inside `push`): hands the number, and this
                // thread's last writes to its free lists, to the next thread
                // that takes it.
                super::stack::push(&FREE_NUMBERS, self.0 as u32 + 1, &NEXT_FREE[self.0]);
            }
        }
    }

    thread_local! {
        static NUMBER: Number = Number::take();
        /// `NUMBER`'s number while the thread holds it, else [`NONE`]: a
        /// plain word with no destructor, so reading it is one load, with
        /// no test of whether `NUMBER` was initialised or destroyed.
        static CACHED: Cell<usize> = const { Cell::new(NONE) };
    }

    /// `CACHED` before the thread took its number, and once it gave it back.
    const NONE: usize = usize::MAX;

    /// The calling thread's number. Below [`LOCAL_THREADS`], no other live
    /// thread has the same number, so the thread may use per-number state
    /// without atomics; numbers of exited threads are reused, so they stay
    /// small and dense (they also spread count and free-list traffic over
    /// shards). A thread that finds them all taken, or calls this while its
    /// thread-locals are being destroyed, gets a number of
    /// `LOCAL_THREADS` or more.
    #[inline]
    pub(crate) fn thread_index() -> usize {
        match CACHED.get() {
            NONE => thread_index_slow(),
            number => number,
        }
    }

    /// [`thread_index`] before the cache holds the number (the thread's
    /// first call), or after the thread gave it back.
    #[cold]
    fn thread_index_slow() -> usize {
        match NUMBER.try_with(|number| number.0) {
            Ok(number) => {
                CACHED.set(number);
                number
            }
            // Relaxed: only needs to differ from the reusable numbers.
            Err(_) => OVERFLOW_NUMBERS.fetch_add(1, Ordering::Relaxed),
        }
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

    /// No thread-owned free lists under loom: every slot goes through the
    /// shared free list, which the models check.
    pub(crate) const LOCAL_THREADS: usize = 0;

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

mod barrier;
/// The asymmetric barrier's sides (see `sync/barrier.rs`): the light one a
/// send runs, the heavy one a revoke runs, and the once-per-process
/// registration a tracker's constructor runs so that sends start light.
pub(crate) use barrier::{
    heavy as heavy_barrier, light as light_barrier, light_as as light_barrier_as,
    register as register_barrier,
};

pub(crate) use crossbeam_utils::CachePadded;
pub(crate) use std::sync::atomic::Ordering;

/// Versioned Treiber stacks of nodes numbered from 0, threaded through
/// `u32` links (node + 1, 0 for none). The head packs a 32-bit version with
/// the top node + 1, so a pop that raced a pop-and-push of the same node
/// fails its CAS (the classic ABA). The slab's shared free lists and the
/// thread-number registry are such stacks.
pub(crate) mod stack {
    use super::{AtomicU32, AtomicU64, Ordering};

    /// Pushes a chain of nodes: `first` is its first node + 1 (as links
    /// are), `last_link` the link of its last node. The caller owns the
    /// chain until the push.
    pub(crate) fn push(head: &AtomicU64, first: u32, last_link: &AtomicU32) {
        // Relaxed: the CAS below is what orders.
        let mut top = head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            last_link.store((top & 0xffff_ffff) as u32, Ordering::Relaxed);
            let version = (top >> 32).wrapping_add(1);
            // Release: hands the chain (and its links) to the next popper.
            match head.compare_exchange_weak(
                top,
                (version << 32) | u64::from(first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => top = seen,
            }
        }
    }

    /// Pops the top node; `link(node)` is that node's link.
    #[inline]
    pub(crate) fn pop<'a>(
        head: &AtomicU64,
        link: impl Fn(usize) -> &'a AtomicU32,
    ) -> Option<usize> {
        // Acquire: pairs with the Release push that put the top node there,
        // so its link (and the pusher's earlier writes) are visible.
        let mut top = head.load(Ordering::Acquire);
        loop {
            let node = ((top & 0xffff_ffff) as usize).checked_sub(1)?;
            // Relaxed: ordered by the Acquire load of `head`; a stale value
            // can only come with a changed head, which fails the CAS.
            let next = link(node).load(Ordering::Relaxed);
            let version = (top >> 32).wrapping_add(1);
            // Acquire: takes ownership of the node from its pusher.
            match head.compare_exchange_weak(
                top,
                (version << 32) | u64::from(next),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(node),
                Err(seen) => top = seen,
            }
        }
    }
}

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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::{Barrier, Mutex};

    /// Waves of threads that are all alive at once: no two live threads
    /// hold the same number, and numbers of exited threads are reused, so
    /// they stay below the most threads ever alive together (plus the test
    /// harness's own threads, which may hold numbers too).
    #[test]
    fn live_threads_hold_distinct_numbers_and_exited_ones_are_reused() {
        const WAVE: usize = 24;
        let live = Mutex::new(HashSet::new());
        let mut highest = 0;
        // Under Miri, which checks numbers given back by exiting threads
        // and taken again by new ones, across threads, 4 waves: too few
        // threads for the reuse check below to fail (it needs more than
        // LOCAL_THREADS); that is checked natively (20 × 24 > 256).
        for _ in 0..if cfg!(miri) { 4 } else { 20 } {
            let barrier = Barrier::new(WAVE);
            let numbers: Vec<usize> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..WAVE)
                    .map(|_| {
                        s.spawn(|| {
                            let number = thread_index();
                            assert_eq!(number, thread_index(), "stable within a thread");
                            assert!(live.lock().unwrap().insert(number), "{number} held twice");
                            barrier.wait();
                            live.lock().unwrap().remove(&number);
                            number
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            highest = highest.max(numbers.into_iter().max().unwrap());
        }
        assert!(
            highest < LOCAL_THREADS,
            "{highest}: numbers were not reused"
        );
    }
}
