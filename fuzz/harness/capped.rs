//! An allocation cap for the targets that read hostile input
//! (`metadata`): [`Capped`], a global allocator that counts the bytes Rust
//! holds and refuses any single allocation past [`CAP`] (the process then
//! aborts, "memory allocation of ... bytes failed": a crash the fuzzer
//! reports, where the old code asked for 128 GiB), and [`measure`], the
//! most bytes a call held beyond what was held before it. A binary opts in
//! with `#[global_allocator] static A: Capped = Capped;` (the `metadata`
//! target and `fuzz-replay/tests/fuzz_metadata.rs` do); elsewhere
//! `measure` says it measured nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The largest single allocation [`Capped`] grants: far above what a
/// budget of a few thousand characters needs, far below what listing a
/// hostile run offset by offset asks for.
pub const CAP: usize = 64 << 20;

/// The counting, capped global allocator (see the module docs).
pub struct Capped;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

// SAFETY: forwards to `System`, which upholds `GlobalAlloc`'s contract;
// refusing an allocation (null) is allowed by it.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as `System::alloc` requires.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            // Relaxed, all: counters read after the fact by the thread that
            // allocated (the targets are single-threaded).
            INSTALLED.store(true, Ordering::Relaxed);
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // Relaxed: a counter (see `alloc`).
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: allocated by `System` with this layout (see `alloc`).
        unsafe { System.dealloc(pointer, layout) }
    }
}

/// Runs `f`, and returns what it returned with the most bytes it held at
/// once beyond what was held when it began; `None` for the bytes when
/// [`Capped`] is not this binary's allocator.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Option<usize>) {
    // Relaxed, all: see `Capped::alloc`.
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let result = f();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    (result, INSTALLED.load(Ordering::Relaxed).then_some(peak))
}
