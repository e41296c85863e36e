//! Throughput, criterion: workloads 1 (local, one record at a time and in
//! batches of 64) and 2 (hand-off) of issue 4,
//! every contender in the same group, so one run compares them.
//!
//! ```text
//! cargo bench --bench throughput            # everything (a few minutes)
//! cargo bench --bench throughput -- local   # workload 1 only
//! ```
//!
//! Throughput is in send+ack pairs (criterion's "elem/s"). Each measurement
//! batch spawns its threads (and the flusher) once, releases them together
//! through a barrier and times from the release to the last worker's exit,
//! with `iter_custom`; the flusher runs begin / wait (1 ms) / commit-or-abort
//! every millisecond throughout.

#[path = "contenders/mod.rs"]
mod contenders;

use contenders::{
    Contender, DashTracker, Floor, Inflight, InflightInline, Kafka2015, Until, DEPTH,
};
use criterion::measurement::WallTime;
use criterion::{criterion_group, BenchmarkGroup, Criterion, Throughput};
use std::time::Duration;

/// Scales a run of `done` pairs to the `iters` criterion asked for.
fn scaled(run: contenders::Run, iters: u64) -> Duration {
    run.elapsed.mul_f64(iters as f64 / run.pairs.max(1) as f64)
}

fn local_one<C: Contender>(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let contender = C::new();
    group.bench_function(C::NAME, |b| {
        b.iter_custom(|iters| {
            // One iteration is one send+ack pair; each thread does whole
            // batches of DEPTH.
            let per_thread = iters.div_ceil((threads * DEPTH) as u64).max(1);
            scaled(
                contenders::local(&contender, threads, Until::Units(per_thread)),
                iters,
            )
        })
    });
}

fn batched_one<C: Contender>(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let contender = C::new();
    group.bench_function(C::NAME, |b| {
        b.iter_custom(|iters| {
            let per_thread = iters.div_ceil((threads * DEPTH) as u64).max(1);
            scaled(
                contenders::local_batched(&contender, threads, Until::Units(per_thread)),
                iters,
            )
        })
    });
}

fn handoff_one<C: Contender>(group: &mut BenchmarkGroup<'_, WallTime>, pairs: usize) {
    let contender = C::new();
    group.bench_function(C::NAME, |b| {
        b.iter_custom(|iters| {
            let per_sender = iters.div_ceil(pairs as u64).max(DEPTH as u64);
            scaled(
                contenders::handoff(&contender, pairs, Until::Units(per_sender)),
                iters,
            )
        })
    });
}

fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .throughput(Throughput::Elements(1))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
}

/// Workload 1: T threads each send and ack their own records at depth 64.
fn local(c: &mut Criterion) {
    for threads in [1, 2, 4, 8] {
        let mut group = c.benchmark_group(format!("local/{threads}t"));
        configure(&mut group);
        local_one::<Inflight>(&mut group, threads);
        local_one::<InflightInline>(&mut group, threads);
        local_one::<Kafka2015>(&mut group, threads);
        local_one::<DashTracker>(&mut group, threads);
        local_one::<Floor>(&mut group, threads);
        group.finish();
    }
}

/// Workload 1 in batches: each thread sends its 64 records with one
/// `send_batch` and acks them, shuffled, with one `ack_batch` (the mutex
/// port: one lock each). One iteration is one record sent and acked.
fn batched(c: &mut Criterion) {
    for threads in [1, 2, 4, 8] {
        let mut group = c.benchmark_group(format!("batched/{threads}t"));
        configure(&mut group);
        batched_one::<Inflight>(&mut group, threads);
        batched_one::<InflightInline>(&mut group, threads);
        batched_one::<Kafka2015>(&mut group, threads);
        group.finish();
    }
}

/// Workload 2: T senders hand their tokens to T ackers over bounded
/// channels; the ackers ack out of order.
fn handoff(c: &mut Criterion) {
    for pairs in [1, 2, 4] {
        let mut group = c.benchmark_group(format!("handoff/{pairs}x{pairs}"));
        configure(&mut group);
        handoff_one::<Inflight>(&mut group, pairs);
        handoff_one::<InflightInline>(&mut group, pairs);
        handoff_one::<Kafka2015>(&mut group, pairs);
        handoff_one::<DashTracker>(&mut group, pairs);
        handoff_one::<Floor>(&mut group, pairs);
        group.finish();
    }
}

criterion_group!(benches, local, batched, handoff);
fn main() {
    // What `criterion_main!` does, after stating the machine.
    println!("machine: {}", contenders::machine());
    benches();
    Criterion::default().configure_from_args().final_summary();
}
