//! A quick throughput probe: send+ack pairs per second, each thread sending
//! and acking its own records at depth 64, with no flush running, next to a
//! bare atomic counter (the floor: tracks nothing per record).
//!
//! ```text
//! cargo run --release --example throughput [seconds-per-run]
//! ```
//!
//! The criterion benchmarks are the full picture; this prints one table in a
//! few seconds.

use inflight::Tracker;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const DEPTH: usize = 64;

fn run(threads: usize, run_for: Duration, work: impl Fn(usize) -> u64 + Sync) -> f64 {
    let barrier = Barrier::new(threads);
    let started = Instant::now();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let deadline = Instant::now() + run_for;
                    let mut pairs = 0;
                    while Instant::now() < deadline {
                        pairs += work(t);
                    }
                    pairs
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    total as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let run_for = Duration::from_secs_f64(secs);
    println!(
        "{:>8} {:>16} {:>16} {:>8}",
        "threads", "inflight pairs/s", "floor pairs/s", "ratio"
    );
    for threads in [1, 2] {
        let tracker = Tracker::new();
        let inflight = run(threads, run_for, |t| {
            let mut tickets = [const { None }; DEPTH];
            for (i, slot) in tickets.iter_mut().enumerate() {
                *slot = Some(tracker.send(t, i as u64).unwrap());
            }
            for slot in tickets.iter_mut() {
                tracker.ack(slot.take().unwrap()).unwrap();
            }
            DEPTH as u64
        });
        assert_eq!(tracker.in_flight(), 0);
        let counter = crossbeam_utils::CachePadded::new(AtomicU64::new(0));
        let floor = run(threads, run_for, |_| {
            for _ in 0..DEPTH {
                counter.fetch_add(1, Ordering::AcqRel);
            }
            for _ in 0..DEPTH {
                counter.fetch_sub(1, Ordering::AcqRel);
            }
            DEPTH as u64
        });
        println!(
            "{threads:>8} {:>16.0} {:>16.0} {:>8.2}",
            inflight,
            floor,
            inflight / floor
        );
    }
}
