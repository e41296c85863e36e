//! Memory, workload 5 of issue 4: bytes per record in flight, at 1,000,000
//! records in flight.
//!
//! ```text
//! cargo bench --bench memory
//! ```
//!
//! A counting global allocator keeps the net bytes (allocated minus freed).
//! Each contender is built and sent 1,000,000 records (8 partitions, P =
//! u32, O = u64) without acking any; the tokens go into a vector allocated
//! beforehand, outside the count. "net" subtracts size_of::<P>() +
//! size_of::<O>() = 12 bytes per record, the payload every tracker must
//! keep somewhere; what remains (padding included) is the tracker's own
//! overhead. One more row, `inflight <(), ()>`, measures the crate with
//! zero-sized P and O directly. "allocs" counts allocator calls over the
//! million sends: amortised growth, not one per record.

#[path = "contenders/mod.rs"]
mod contenders;

use contenders::{Contender, DashTracker, Floor, Inflight, InflightInline, Kafka2015};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

struct Counting;

static NET: AtomicI64 = AtomicI64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);

// SAFETY: defers every call to `System`, counting on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: plain counters, read by the measuring thread only after
        // the measured calls (on the same thread) returned.
        NET.fetch_add(layout.size() as i64, Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        NET.fetch_add(layout.size() as i64, Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NET.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        NET.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const RECORDS: u64 = 1_000_000;
const PARTITIONS: u64 = 8;
const PAYLOAD: usize = std::mem::size_of::<u32>() + std::mem::size_of::<u64>();

fn row(name: &str, bytes: i64, calls: u64, payload: usize) {
    let per = bytes as f64 / RECORDS as f64;
    println!(
        "{:<22} {:>12} {:>10.1} {:>10.1} {:>8}",
        name,
        bytes,
        per,
        (per - payload as f64).max(0.0),
        calls
    );
}

fn measure<C: Contender>() {
    let mut tokens: Vec<C::Token> = Vec::with_capacity(RECORDS as usize);
    let (net0, calls0) = (NET.load(Ordering::Relaxed), CALLS.load(Ordering::Relaxed));
    let c = C::new();
    for i in 0..RECORDS {
        tokens.push(c.send((i % PARTITIONS) as u32, i));
    }
    let (net1, calls1) = (NET.load(Ordering::Relaxed), CALLS.load(Ordering::Relaxed));
    row(C::NAME, net1 - net0, calls1 - calls0, PAYLOAD);
    for token in tokens {
        c.ack(token);
    }
}

fn measure_inflight_zst() {
    let mut tokens = Vec::with_capacity(RECORDS as usize);
    let (net0, calls0) = (NET.load(Ordering::Relaxed), CALLS.load(Ordering::Relaxed));
    let tracker = inflight::Tracker::<(), ()>::new();
    for _ in 0..RECORDS {
        tokens.push(tracker.send((), ()).unwrap());
    }
    let (net1, calls1) = (NET.load(Ordering::Relaxed), CALLS.load(Ordering::Relaxed));
    row("inflight <(), ()>", net1 - net0, calls1 - calls0, 0);
    for token in tokens {
        tracker.ack(token).unwrap();
    }
}

fn main() {
    println!("machine: {}", contenders::machine());
    println!(
        "workload 5: memory at {RECORDS} records in flight ({PARTITIONS} partitions, P = u32, O = u64)"
    );
    println!(
        "{:<22} {:>12} {:>10} {:>10} {:>8}",
        "contender", "bytes", "B/record", "net B/rec", "allocs"
    );
    measure::<Inflight>();
    measure::<InflightInline>();
    measure_inflight_zst();
    measure::<Kafka2015>();
    measure::<DashTracker>();
    measure::<Floor>();
    println!("(net = B/record minus the 12 bytes of P and O, floored at 0; the () row subtracts nothing)");
}
