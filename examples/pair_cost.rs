//! What one send+ack pair costs on one thread, for each kind of tracker:
//!
//! ```text
//! cargo run --release --example pair_cost
//! ```
//!
//! One thread sends 64 records of one partition and acks them, over and
//! over (1.28 million pairs a run), taking the watermark (or a barrier
//! flush, or the progress) every 100 batches. Each figure is the median of
//! nine runs. No other thread runs: this is the hot path alone, the number
//! to compare before and after a change (run it on a quiet machine, and
//! twice). `compare` measures the tracker against other designs.
//!
//! `batches` is the barrier tracker fed through `send_batch` and `ack_all`,
//! 64 records a call (`watermark_batches` and `progress_batches` the same
//! on those trackers); `bounded`, the barrier tracker with a capacity of 64
//! (each send takes a permit, each ack gives it back); `inline`,
//! `inline_batches` and `inline_watermarks`, the barrier and watermark
//! trackers with offsets inline (`Builder::inline_offsets`); `kafka_2015`,
//! not the crate: the mutex port of Kafka Connect's 2015 bookkeeping that
//! `compare` measures (`benches/contenders`), through the same driver, so
//! that `.ci/cost` prints the figure the barrier tracker is held against
//! at one thread (issue 41). Instructions per
//! pair, under callgrind: run one kind for 500 and for 1,500 batches and
//! divide the difference by 64,000 (`.ci/cost` does that for every kind,
//! with the locked operations, and holds them to `benches/budget.toml`):
//!
//! ```text
//! valgrind --tool=callgrind --collect-bus=yes target/release/examples/pair_cost barrier 500
//! valgrind --tool=callgrind --collect-bus=yes target/release/examples/pair_cost barrier 1500
//! ```

mod common;

#[path = "../benches/contenders/mod.rs"]
mod contenders;

use contenders::{Contender, FlushCycle, Kafka2015};
use inflight::mode::{Inline, Mode, Watermarks};
use inflight::{ProgressTracker, Tracker, WatermarkTracker};
use std::time::{Duration, Instant};

const BATCH: u64 = 64;
const BATCHES: u64 = 20_000;
const RUNS: usize = 9;

#[derive(Clone, Copy)]
enum Kind {
    Barrier,
    Bounded,
    Watermarks,
    Progress,
    /// The barrier tracker with its offsets inline (`inline_offsets`).
    Inline,
    /// The watermark tracker with its offsets inline.
    InlineWatermarks,
    /// Kafka Connect's 2015 bookkeeping under a mutex (not the crate).
    Kafka2015,
}

/// Each kind's name, tracker, and whether it sends and acks in batches.
const KINDS: [(&str, Kind, bool); 11] = [
    ("barrier", Kind::Barrier, false),
    ("batches", Kind::Barrier, true),
    ("bounded", Kind::Bounded, false),
    ("watermarks", Kind::Watermarks, false),
    ("watermark_batches", Kind::Watermarks, true),
    ("progress", Kind::Progress, false),
    ("progress_batches", Kind::Progress, true),
    ("inline", Kind::Inline, false),
    ("inline_batches", Kind::Inline, true),
    ("inline_watermarks", Kind::InlineWatermarks, false),
    ("kafka_2015", Kind::Kafka2015, false),
];

/// Nanoseconds per pair in one run of `batches` batches.
fn run(kind: Kind, batched: bool, batches: u64) -> f64 {
    match kind {
        Kind::Barrier => pairs(Tracker::new(), batched, batches, barrier),
        Kind::Bounded => pairs(
            Tracker::with_capacity(BATCH as usize),
            batched,
            batches,
            barrier,
        ),
        Kind::Watermarks => {
            let tracker: WatermarkTracker<u32, u64> = Tracker::builder().watermarks().build();
            pairs(tracker, batched, batches, |t| drop(t.committable()))
        }
        Kind::Progress => {
            let tracker: ProgressTracker<u32, u64> = Tracker::builder().progress(4096).build();
            pairs(tracker, batched, batches, |t| drop(t.progress()))
        }
        Kind::Inline => {
            let tracker: Tracker<u32, u64, Inline> = Tracker::builder().inline_offsets().build();
            pairs(tracker, batched, batches, barrier)
        }
        Kind::InlineWatermarks => {
            let tracker: Tracker<u32, u64, Inline<Watermarks>> =
                Tracker::builder().inline_offsets().watermarks().build();
            pairs(tracker, batched, batches, |t| drop(t.committable()))
        }
        Kind::Kafka2015 => port_pairs(&Kafka2015::new(), batches),
    }
}

/// [`pairs`] for a contender of `compare` (one record at a time).
fn port_pairs<C: Contender>(port: &C, batches: u64) -> f64 {
    let mut tokens = Vec::with_capacity(BATCH as usize);
    let mut offset = 0_u64;
    let start = Instant::now();
    for batch in 0..batches {
        for _ in 0..BATCH {
            tokens.push(port.send(0, offset));
            offset += 1;
        }
        for token in tokens.drain(..) {
            port.ack(token);
        }
        if batch % 100 == 99 {
            let mut flush = port.begin_flush();
            flush.wait(Duration::ZERO).expect("all acked");
            flush.commit();
        }
    }
    start.elapsed().as_nanos() as f64 / (batches * BATCH) as f64
}

/// A barrier flush, committed.
fn barrier<M: Mode>(tracker: &Tracker<u32, u64, M>) {
    let mut flush = tracker.begin_flush().expect("no other flush");
    flush.wait(Duration::ZERO).expect("all acked");
    flush.commit().expect("waited");
}

/// [`run`] on `tracker`, committing with `commit` every 100 batches.
/// Never inlined into `run`: each kind's loop is then compiled alone, so
/// its figure does not move with how much of the other kinds' code the
/// compiler chose to put in the same function.
#[inline(never)]
fn pairs<M: Mode>(
    tracker: Tracker<u32, u64, M>,
    batched: bool,
    batches: u64,
    commit: impl Fn(&Tracker<u32, u64, M>),
) -> f64 {
    let mut tickets = Vec::with_capacity(BATCH as usize);
    let mut offset = 0_u64;
    let start = Instant::now();
    for batch in 0..batches {
        if batched {
            tracker
                .send_batch(&0, offset..offset + BATCH, &mut tickets)
                .expect("room");
            offset += BATCH;
            tracker.ack_all(tickets.drain(..)).expect("live tickets");
        } else {
            for _ in 0..BATCH {
                tickets.push(tracker.send(0, offset).expect("room"));
                offset += 1;
            }
            for ticket in tickets.drain(..) {
                tracker.ack(ticket).expect("a live ticket");
            }
        }
        if batch % 100 == 99 {
            commit(&tracker);
        }
    }
    start.elapsed().as_nanos() as f64 / (batches * BATCH) as f64
}

fn median(kind: Kind, batched: bool) -> f64 {
    let mut runs: Vec<f64> = (0..RUNS).map(|_| run(kind, batched, BATCHES)).collect();
    runs.sort_by(f64::total_cmp);
    runs[RUNS / 2]
}

fn main() {
    common::exit_when_stdout_closes();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [name, batches] = &args[..] {
        // One run of one kind, for callgrind.
        let kind = KINDS.iter().find(|(n, ..)| n == name);
        let (Some(&(_, kind, batched)), Ok(batches)) = (kind, batches.parse()) else {
            let names: Vec<&str> = KINDS.iter().map(|(name, ..)| *name).collect();
            eprintln!("usage: pair_cost [{} BATCHES]", names.join("|"));
            std::process::exit(2);
        };
        println!("{name}: {:.1} ns per pair", run(kind, batched, batches));
        return;
    }
    println!("ns per send+ack pair, one thread (median of {RUNS} runs):");
    for (name, kind, batched) in KINDS {
        println!("  {name:<17} {:6.1}", median(kind, batched));
    }
}
