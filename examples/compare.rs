//! `inflight` next to the designs people use today, in under a minute:
//!
//! ```text
//! cargo run --release --example compare
//! ```
//!
//! Workload 1 (each of T threads sends and acks its own records at depth 64,
//! acks shuffled, while a flusher runs begin / wait / commit every
//! millisecond) at 1, 2, 4 and 8 threads, and workload 3 (flush latency:
//! last covered ack to `wait` returning). The contenders are those of the
//! criterion benchmarks (`benches/contenders/`):
//!
//! - `kafka_2015`: Kafka Connect's 2015 `WorkerSourceTask` design with the
//!   KAFKA-2867 fix (one mutex over two maps, a condvar);
//! - `dashmap`: a hand-rolled `DashMap` of records plus per-generation
//!   atomic counters;
//! - `floor`: one atomic counter, tracking nothing per record: the limit.
//!
//! Then the watermark table (issue 7): the same workload 1 with a committer
//! calling `committable()` every millisecond instead of the flusher, for
//! `inflight_wm` (this crate built with `watermarks()`) and
//! `submitted_records` (a port of Kafka 3.x `SubmittedRecords`: per-partition
//! deques under one lock, an atomic `acked` flag per record), with the
//! barrier `inflight` beside them for reference, and `inflight_progress`
//! (this crate built with `progress(4096)`: the same watermark queue, plus
//! each send's order and metadata-budget check; its committer calls
//! `progress()` and encodes each changed partition's metadata instead of
//! `committable()`), whose cost against `inflight_wm` is the last column.
//!
//! A bounded table runs workload 1 on a tracker with a capacity (never
//! reached) beside an unbounded one: what the permits cost.
//!
//! Each cell is the median of three 0.4 s runs, the contenders taking turns
//! so that background load hits them alike. For the full picture (hand-off,
//! send-latency percentiles, memory, `committable()` latency) run
//! `cargo bench`.

#[path = "../benches/contenders/mod.rs"]
mod contenders;

mod common;
use contenders::watermarks::{
    self, InflightProgress, InflightWatermarks, SubmittedRecords, Watermark,
};
use contenders::{Contender, DashTracker, Floor, Inflight, InflightInline, Kafka2015, Until};
use std::time::Duration;

const THREADS: [usize; 4] = [1, 2, 4, 8];
const ROUNDS: usize = 3;
const RUN_FOR: Duration = Duration::from_millis(400);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn flush_latency_us<C: Contender>() -> (f64, f64) {
    let c = C::new();
    contenders::flush_latency(&c, 20, 64, Duration::from_micros(200));
    let mut ns = contenders::flush_latency(&c, 300, 64, Duration::from_micros(200));
    ns.sort_unstable();
    (
        contenders::quantile(&ns, 0.5) as f64 / 1e3,
        contenders::quantile(&ns, 0.99) as f64 / 1e3,
    )
}

fn main() {
    common::exit_when_stdout_closes();
    println!("machine: {}", contenders::machine());
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        // Other work on the machine skews every number below.
        let load: Vec<&str> = load.split_whitespace().take(3).collect();
        println!("load average before the run: {}", load.join(" "));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some(one_minute) = load.first().and_then(|l| l.parse::<f64>().ok()) {
            if one_minute > 0.5 * cores as f64 {
                println!(
                    "WARNING: load average {one_minute} on {cores} cores: other work is \
                     running, and the ratios below mean little; rerun on a quiet machine"
                );
            }
        }
    }
    println!(
        "workload 1: T threads, each sends and acks its own records at depth {}, \
         flush every {} ms; send+ack pairs per second (median of {ROUNDS} x {} ms)",
        contenders::DEPTH,
        contenders::FLUSH_EVERY.as_millis(),
        RUN_FOR.as_millis()
    );
    println!();
    println!(
        "| {:>7} | {:>16} | {:>12} | {:>12} | {:>12} | {:>19} | {:>16} | {:>14} | {:>15} | {:>17} |",
        "threads",
        "inflight pairs/s",
        "kafka_2015",
        "dashmap",
        "floor",
        "inflight/kafka_2015",
        "inflight/dashmap",
        "inflight/floor",
        "inline pairs/s",
        "inline/kafka_2015"
    );
    println!(
        "|{:-<9}|{:-<18}|{:-<14}|{:-<14}|{:-<14}|{:-<21}|{:-<18}|{:-<16}|{:-<17}|{:-<19}|",
        "", "", "", "", "", "", "", "", "", ""
    );
    for threads in THREADS {
        let (inflight, kafka, dash, floor, inline) = (
            Inflight::new(),
            Kafka2015::new(),
            DashTracker::new(),
            Floor::new(),
            InflightInline::new(),
        );
        let mut rates = [const { Vec::new() }; 5];
        let until = Until::Elapsed(RUN_FOR);
        for _ in 0..ROUNDS {
            rates[0].push(contenders::local(&inflight, threads, until).pairs_per_sec());
            rates[1].push(contenders::local(&kafka, threads, until).pairs_per_sec());
            rates[2].push(contenders::local(&dash, threads, until).pairs_per_sec());
            rates[3].push(contenders::local(&floor, threads, until).pairs_per_sec());
            rates[4].push(contenders::local(&inline, threads, until).pairs_per_sec());
        }
        assert_eq!(kafka.critical(), 0, "kafka_2015 port lost a record");
        let [i, k, d, f, n] = rates.map(median);
        println!(
            "| {:>7} | {:>16.0} | {:>12.0} | {:>12.0} | {:>12.0} | {:>18.2}x | {:>15.2}x | {:>13.2}x | {:>15.0} | {:>16.2}x |",
            threads,
            i,
            k,
            d,
            f,
            i / k,
            i / d,
            i / f,
            n,
            n / k
        );
    }
    println!();
    bounded_table();
    println!();
    batch_table();
    println!();
    println!(
        "workload 3: flush latency, last covered ack -> wait() returns \
         (300 rounds, 64 records, sink delay 200 us, waiter asleep)"
    );
    println!();
    println!(
        "| {:<10} | {:>11} | {:>8} |",
        "contender", "median (us)", "p99 (us)"
    );
    println!("|{:-<12}|{:-<13}|{:-<10}|", "", "", "");
    for (name, (median, p99)) in [
        (Inflight::NAME, flush_latency_us::<Inflight>()),
        (Kafka2015::NAME, flush_latency_us::<Kafka2015>()),
        (DashTracker::NAME, flush_latency_us::<DashTracker>()),
    ] {
        println!("| {name:<10} | {median:>11.1} | {p99:>8.1} |");
    }
    println!();
    watermark_table();
}

/// Workload 1 on a bounded tracker (a capacity of 2^20, never reached):
/// every send takes a permit and every resolution gives it back, on the
/// thread's own permit shard.
fn bounded_table() {
    println!(
        "bounded: workload 1 on a tracker with a capacity (2^20, never reached); \
         send+ack pairs per second (median of {ROUNDS} x {} ms)",
        RUN_FOR.as_millis()
    );
    println!();
    println!(
        "| {:>7} | {:>16} | {:>18} | {:>17} |",
        "threads", "inflight bounded", "inflight unbounded", "bounded/unbounded"
    );
    println!("|{:-<9}|{:-<18}|{:-<20}|{:-<19}|", "", "", "", "");
    for threads in THREADS {
        let (bounded, unbounded) = (Inflight::with_capacity(1 << 20), Inflight::new());
        let mut rates = [const { Vec::new() }; 2];
        let until = Until::Elapsed(RUN_FOR);
        for _ in 0..ROUNDS {
            rates[0].push(contenders::local(&bounded, threads, until).pairs_per_sec());
            rates[1].push(contenders::local(&unbounded, threads, until).pairs_per_sec());
        }
        let [b, u] = rates.map(median);
        println!(
            "| {:>7} | {:>16.0} | {:>18.0} | {:>16.2}x |",
            threads,
            b,
            u,
            b / u
        );
    }
}

/// Workload 1 in batches: each thread sends its 64 records in one batch
/// (`send_batch`; the mutex port takes its lock once per batch) and acks
/// them, shuffled, in one batch (`ack_all`; the port, one lock).
fn batch_table() {
    println!(
        "batches: workload 1 with each thread's {} records sent in one batch and acked, \
         shuffled, in one batch; records per second (median of {ROUNDS} x {} ms)",
        contenders::DEPTH,
        RUN_FOR.as_millis()
    );
    println!();
    println!(
        "| {:>7} | {:>14} | {:>16} | {:>25} | {:>16} | {:>12} | {:>23} |",
        "threads",
        "inflight batch",
        "kafka_2015 batch",
        "inflight/kafka_2015 batch",
        "batch/one by one",
        "inline batch",
        "inline/kafka_2015 batch"
    );
    println!(
        "|{:-<9}|{:-<16}|{:-<18}|{:-<27}|{:-<18}|{:-<14}|{:-<25}|",
        "", "", "", "", "", "", ""
    );
    for threads in THREADS {
        let (inflight, kafka, inline) = (Inflight::new(), Kafka2015::new(), InflightInline::new());
        let mut rates = [const { Vec::new() }; 4];
        let until = Until::Elapsed(RUN_FOR);
        for _ in 0..ROUNDS {
            rates[0].push(contenders::local_batched(&inflight, threads, until).pairs_per_sec());
            rates[1].push(contenders::local_batched(&kafka, threads, until).pairs_per_sec());
            rates[2].push(contenders::local(&inflight, threads, until).pairs_per_sec());
            rates[3].push(contenders::local_batched(&inline, threads, until).pairs_per_sec());
        }
        assert_eq!(kafka.critical(), 0, "kafka_2015 port lost a record");
        let [b, k, one, n] = rates.map(median);
        println!(
            "| {:>7} | {:>14.0} | {:>16.0} | {:>24.2}x | {:>15.2}x | {:>12.0} | {:>22.2}x |",
            threads,
            b,
            k,
            b / k,
            b / one,
            n,
            n / k
        );
    }
}

/// Workload 1 with a watermark committer: inflight_wm against
/// submitted_records, the barrier inflight (with its flusher) beside them,
/// and inflight_progress (a progress tracker, its committer calling
/// `progress()`) against inflight_wm.
fn watermark_table() {
    println!(
        "watermarks: T threads, each sends and acks its own records at depth {}, \
         committable() every {} ms; send+ack pairs per second (median of {ROUNDS} x {} ms)",
        contenders::DEPTH,
        watermarks::COMMIT_EVERY.as_millis(),
        RUN_FOR.as_millis()
    );
    println!();
    println!(
        "| {:>7} | {:>11} | {:>17} | {:>16} | {:>17} | {:>25} | {:>19} | {:>20} |",
        "threads",
        InflightWatermarks::NAME,
        SubmittedRecords::NAME,
        "inflight barrier",
        InflightProgress::NAME,
        "inflight_wm/submitted_rec",
        "inflight_wm/barrier",
        "progress/inflight_wm"
    );
    println!(
        "|{:-<9}|{:-<13}|{:-<19}|{:-<18}|{:-<19}|{:-<27}|{:-<21}|{:-<22}|",
        "", "", "", "", "", "", "", ""
    );
    for threads in THREADS {
        let (wm, submitted, barrier, progress) = (
            InflightWatermarks::new(),
            SubmittedRecords::new(),
            Inflight::new(),
            InflightProgress::new(),
        );
        let mut rates = [const { Vec::new() }; 4];
        let until = Until::Elapsed(RUN_FOR);
        for _ in 0..ROUNDS {
            rates[0].push(watermarks::local(&wm, threads, until).pairs_per_sec());
            rates[1].push(watermarks::local(&submitted, threads, until).pairs_per_sec());
            rates[2].push(contenders::local(&barrier, threads, until).pairs_per_sec());
            rates[3].push(watermarks::local(&progress, threads, until).pairs_per_sec());
        }
        let [w, s, b, p] = rates.map(median);
        println!(
            "| {:>7} | {:>11.0} | {:>17.0} | {:>16.0} | {:>17.0} | {:>24.2}x | {:>18.2}x | {:>19.2}x |",
            threads,
            w,
            s,
            b,
            p,
            w / s,
            w / b,
            p / w
        );
    }
}
