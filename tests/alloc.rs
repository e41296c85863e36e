//! Steady-state `send` and `ack` allocate nothing; a flush cycle allocates a
//! small, bounded amount (a new generation and its partition cells).
//!
//! A counting global allocator counts allocations made by the measuring
//! thread only, so tests running in parallel do not disturb the count.

#[macro_use]
mod modes;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: defers every call to `System`, only counting on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // `try_with`: thread-local storage may be gone during thread exit.
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

const PARTITIONS: u64 = 4;

#[test]
fn steady_state_send_and_ack_allocate_nothing() {
    steady_state(inflight::Tracker::new());
}

/// With watermarks too: records queue and leave their partition's queue,
/// and the slots they free are reused.
#[test]
fn steady_state_send_and_ack_allocate_nothing_with_watermarks() {
    steady_state(inflight::Tracker::builder().watermarks().build());
}

fn steady_state<M: inflight::mode::Mode>(tracker: inflight::Tracker<u64, u64, M>) {
    // Warm up: slot pages, partition index, thread registrations, one flush.
    let mut tickets = Vec::with_capacity(64);
    let mut rest = Vec::with_capacity(32);
    let mut cycle = |tracker: &inflight::Tracker<u64, u64, M>, base: u64| {
        for i in 0..64 {
            tickets.push(tracker.send(i % PARTITIONS, base + i).unwrap());
        }
        // Out of order: every other one first.
        for (i, t) in tickets.drain(..).enumerate() {
            if i % 2 == 0 {
                tracker.ack(t).unwrap();
            } else {
                rest.push(t);
            }
        }
        for t in rest.drain(..).rev() {
            tracker.ack(t).unwrap();
        }
    };
    for round in 0..16 {
        cycle(&tracker, round * 64);
    }
    let mut flush = tracker.begin_flush().unwrap();
    flush.wait(Duration::ZERO).unwrap();
    flush.commit().unwrap();
    for round in 16..32 {
        cycle(&tracker, round * 64);
    }

    let allocations = allocations_during(|| {
        for round in 32..2_000 {
            cycle(&tracker, round * 64);
        }
    });
    assert_eq!(allocations, 0, "send/ack allocated in the steady state");
    assert_eq!(tracker.in_flight(), 0);
}

/// Batches too: `send_batch` into a reused `Vec`, `ack_all` out of it.
#[test]
fn steady_state_batches_allocate_nothing() {
    each_mode!(tracker = [
        inflight::Tracker::new(),
        inflight::Tracker::builder().watermarks().build(),
        inflight::Tracker::builder().inline_offsets().build(),
        inflight::Tracker::builder().inline_offsets().watermarks().build(),
    ] {
        let mut tickets = Vec::with_capacity(256);
        let mut cycle = |tracker: &inflight::Tracker<u64, u64, _>, base: u64| {
            for p in 0..PARTITIONS {
                let from = base + p * 1_000;
                tracker
                    .send_batch(&p, from..from + 100, &mut tickets)
                    .unwrap();
            }
            tickets.reverse();
            assert_eq!(tracker.ack_all(tickets.drain(..)).unwrap(), 400);
        };
        for round in 0..16 {
            cycle(&tracker, round * 10_000);
        }
        let mut flush = tracker.begin_flush().unwrap();
        flush.wait(Duration::ZERO).unwrap();
        flush.commit().unwrap();
        for round in 16..32 {
            cycle(&tracker, round * 10_000);
        }
        let allocations = allocations_during(|| {
            for round in 32..500 {
                cycle(&tracker, round * 10_000);
            }
        });
        assert_eq!(
            allocations, 0,
            "send_batch/ack_all allocated in the steady state"
        );
        assert_eq!(tracker.in_flight(), 0);
    });
}

#[test]
fn a_flush_cycle_allocates_a_bounded_amount() {
    let tracker = inflight::Tracker::new();
    let mut tickets = Vec::with_capacity(32);
    let mut run = |cycles: u64| {
        for c in 0..cycles {
            tickets.extend((0..32).map(|i| tracker.send(i % PARTITIONS, c * 32 + i).unwrap()));
            let mut flush = tracker.begin_flush().unwrap();
            for t in tickets.drain(..) {
                tracker.ack(t).unwrap();
            }
            let offsets = flush.wait(Duration::from_secs(60)).unwrap();
            assert_eq!(offsets.len(), PARTITIONS as usize);
            flush.commit().unwrap();
        }
    };
    run(50); // warm up
    let cycles = 1_000;
    let allocations = allocations_during(|| run(cycles));
    // Per cycle: the new generation, its first cell page, and the offsets
    // map returned by `wait` (3); plus the epoch collector's occasional batch.
    let per_cycle = allocations as f64 / cycles as f64;
    assert!(
        per_cycle <= 3.5,
        "a flush cycle allocated {per_cycle} times on average"
    );
}
