//! Ack cost against the backlog (issue 17), criterion: what one ack costs
//! with 1,000, 100,000 and 1,000,000 records in flight on one partition,
//! acked in random order.
//!
//! ```text
//! cargo bench --bench backlog
//! ```
//!
//! Contenders, each fed the same records and the same shuffled ack order:
//!
//! - `inflight_wm`: this crate with `watermarks()`; the watermark advances
//!   as the acks arrive (the ack of the oldest record passes everything
//!   acked behind it);
//! - `inflight_progress`: this crate with `progress(1 << 20)`: as above,
//!   plus the order check and the budget's walks at send;
//! - `mutex_btreeset`: what the Rust peers do, a `Mutex<BTreeSet<u64>>` of
//!   the partition's unacked offsets; an ack removes its offset and reads
//!   the first one left (the committable point).
//!
//! One iteration sends `N` records (not timed), then acks them all in a
//! shuffled order (timed): the figure is nanoseconds per ack. For scale,
//! published figures of other trackers: reactor-kafka about 0.3 ms per ack
//! with 100,000 deferred offsets (before its fix), Akka 35.3 ms per
//! 100,000 offset updates (0.35 µs each).

#[path = "contenders/mod.rs"]
mod contenders;

use contenders::Rng;
use criterion::measurement::WallTime;
use criterion::{criterion_group, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use inflight::{Ticket, Tracker};
use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BACKLOGS: [usize; 3] = [1_000, 100_000, 1_000_000];

/// A shuffled order of `0..n`.
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i + 1));
    }
    order
}

/// Times acking `n` records of `tracker`, sent first, in `order`.
fn inflight_acks<M: inflight::mode::Watermarked>(
    tracker: &Tracker<u32, u64, M>,
    base: &mut u64,
    order: &[usize],
) -> Duration {
    let tickets: Vec<Ticket> = (0..order.len() as u64)
        .map(|i| tracker.send(0, *base + i).expect("room"))
        .collect();
    *base += order.len() as u64;
    let mut tickets: Vec<Option<Ticket>> = tickets.into_iter().map(Some).collect();
    let started = Instant::now();
    for &i in order {
        let ticket = tickets[i].take().expect("acked once");
        tracker.ack(ticket).expect("a live ticket");
    }
    let elapsed = started.elapsed();
    black_box(tracker.committable());
    elapsed
}

fn btreeset_acks(set: &Mutex<BTreeSet<u64>>, base: &mut u64, order: &[usize]) -> Duration {
    {
        let mut set = set.lock().unwrap();
        for i in 0..order.len() as u64 {
            set.insert(*base + i);
        }
    }
    let first = *base;
    *base += order.len() as u64;
    let started = Instant::now();
    for &i in order {
        let mut set = set.lock().unwrap();
        set.remove(&(first + i as u64));
        black_box(set.first());
    }
    started.elapsed()
}

fn one(group: &mut BenchmarkGroup<'_, WallTime>, n: usize) {
    let order = shuffled(n, n as u64);
    group.throughput(Throughput::Elements(n as u64));
    let watermarks: inflight::WatermarkTracker<u32, u64> = Tracker::builder().watermarks().build();
    let progress: inflight::ProgressTracker<u32, u64> =
        Tracker::builder().progress(1 << 20).build();
    macro_rules! contender {
        ($name:expr, $tracker:expr) => {{
            let (name, tracker) = ($name, $tracker);
            let mut base = 0;
            group.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| inflight_acks(&tracker, &mut base, &order))
                        .sum()
                })
            });
        }};
    }
    contender!("inflight_wm", watermarks);
    contender!("inflight_progress", progress);
    let set = Mutex::new(BTreeSet::new());
    let mut base = 0;
    group.bench_function(BenchmarkId::new("mutex_btreeset", n), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| btreeset_acks(&set, &mut base, &order))
                .sum()
        })
    });
}

fn backlog(c: &mut Criterion) {
    let mut group = c.benchmark_group("ack_with_backlog");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in BACKLOGS {
        one(&mut group, n);
    }
    group.finish();
}

criterion_group!(benches, backlog);
fn main() {
    // What `criterion_main!` does, after stating the machine.
    println!("machine: {}", contenders::machine());
    benches();
    Criterion::default().configure_from_args().final_summary();
}
