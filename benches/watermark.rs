//! Watermark commits (issue 7), criterion: `inflight` with watermarks
//! against a port of Kafka 3.x `SubmittedRecords` (see
//! `contenders/watermarks.rs`).
//!
//! ```text
//! cargo bench --bench watermark                  # everything (about a minute)
//! cargo bench --bench watermark -- throughput    # the workload only
//! cargo bench --bench watermark -- committable   # the call's latency only
//! ```
//!
//! - `throughput/{T}t`: T threads each send and ack their own records at
//!   depth 64, acks shuffled, while a committer calls `committable()` every
//!   millisecond; send+ack pairs per second (criterion's "elem/s"). Beside
//!   them, for reference, `inflight_barrier`: the same tracker without
//!   watermarks in the same workload with a barrier flusher instead (begin /
//!   wait (1 ms) / commit-or-abort every millisecond, workload 1 of
//!   `benches/throughput.rs`).
//! - `committable/10000p`: one `committable()` call (and
//!   `committable_with_stats()`; Kafka computes the statistics in every
//!   call) with 10,000 partitions, each with 8 records in flight and 4
//!   newly acked at the head of its queue, so the call returns all 10,000.
//!   Only the call is timed; the sends and acks that prepare each call are
//!   not.

#[path = "contenders/mod.rs"]
mod contenders;

use contenders::watermarks::{
    self, Backlog, InflightWatermarks, SubmittedRecords, Watermark, LATENCY_PARTITIONS,
};
use contenders::{Contender, Inflight, Until, DEPTH};
use criterion::measurement::WallTime;
use criterion::{criterion_group, BenchmarkGroup, Criterion, SamplingMode, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .throughput(Throughput::Elements(1))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
}

fn throughput_one<W: Watermark>(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let contender = W::new();
    group.bench_function(W::NAME, |b| {
        b.iter_custom(|iters| watermarks::timed_pairs(&contender, threads, iters))
    });
}

/// Batches of `DEPTH` per thread for `iters` pairs in all.
fn per_thread(iters: u64, threads: usize) -> u64 {
    iters.div_ceil((threads * DEPTH) as u64).max(1)
}

fn barrier_reference(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let contender = Inflight::new();
    group.bench_function(format!("{}_barrier", Inflight::NAME), |b| {
        b.iter_custom(|iters| {
            let run = contenders::local(
                &contender,
                threads,
                Until::Units(per_thread(iters, threads)),
            );
            run.elapsed.mul_f64(iters as f64 / run.pairs.max(1) as f64)
        })
    });
}

fn throughput(c: &mut Criterion) {
    for threads in [1, 2, 4, 8] {
        let mut group = c.benchmark_group(format!("throughput/{threads}t"));
        configure(&mut group);
        throughput_one::<InflightWatermarks>(&mut group, threads);
        throughput_one::<SubmittedRecords>(&mut group, threads);
        barrier_reference(&mut group, threads);
        group.finish();
    }
}

/// Times `call` on a fresh backlog state per iteration; `advance` (the
/// sends and acks that make 4 records per partition committable) is not
/// timed.
fn committable_one<W: Watermark, R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    call: impl Fn(&W) -> R,
) {
    let mut backlog = Backlog::<W>::new();
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                backlog.advance();
                let began = Instant::now();
                let taken = black_box(call(&backlog.contender));
                total += began.elapsed();
                drop(taken);
            }
            total
        })
    });
    backlog.finish();
}

fn committable(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("committable/{LATENCY_PARTITIONS}p"));
    // Each timed call costs ~10k sends and acks of untimed preparation:
    // keep the iteration count small.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(300));
    committable_one::<InflightWatermarks, _>(&mut group, "inflight_wm", |w| w.committable());
    committable_one::<InflightWatermarks, _>(&mut group, "inflight_wm_stats", |w| {
        w.committable_with_stats()
    });
    committable_one::<SubmittedRecords, _>(&mut group, "submitted_records", |w| {
        w.committable_with_stats()
    });
    group.finish();
}

criterion_group!(benches, throughput, committable);
fn main() {
    // What `criterion_main!` does, after stating the machine.
    println!("machine: {}", contenders::machine());
    benches();
    Criterion::default().configure_from_args().final_summary();
}
