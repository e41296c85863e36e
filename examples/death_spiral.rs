//! The death spiral of barrier commits, and watermarks that keep committing.
//!
//! ```text
//! cargo run --release --example death_spiral
//! ```
//!
//! A source feeds a producer that is slower than it (issue 7, KAFKA-12226).
//! The producer is a sink thread that acks records at a fixed rate
//! (20,000 records/s, a little jitter in the rate, acks out of order within
//! a window of 32, as a producer with several requests in flight would).
//! The source sends round-robin over 8 partitions at a fixed rate: slower
//! than the producer for the first 1.5 s (16,000 records/s), then faster
//! (30,000 records/s) for 4 s, so the records in flight pile up at
//! 10,000 per second.
//!
//! Two committers work on the same tracker (built with `watermarks()`), so
//! they see the same records and the same acks, every 200 ms:
//!
//! - barrier: `begin_flush`, `wait(150 ms)`; on `Timeout` it aborts, and the
//!   next flush covers the aborted one's records plus everything sent since.
//!   While the producer keeps up, every flush commits. Once the backlog takes
//!   longer than the timeout to drain, every flush times out, each next one
//!   covers more, and the committed offsets stop moving for good: the death
//!   spiral.
//! - watermark: `committable()`, which returns, per partition, the newest
//!   offset whose record and every earlier one were acked. It keeps
//!   committing at the producer's pace, whatever the backlog.
//!
//! The table shows both every half second; the summary gives each
//! committer's rate of commits that moved offsets, and of records
//! committed, per phase. Then the source stops, the producer catches up,
//! `drain` waits for it, and both committers end at the last offsets.
//! Runs in about 6 seconds. The rates are paced by the clock, so the
//! outcome does not depend on the machine's speed, only on it keeping up
//! with 50,000 operations per second.

mod common;
use inflight::{FlushError, Tracker, WatermarkTracker};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const PARTITIONS: u32 = 8;
/// The producer's rate: acks per second.
const SINK_RATE: f64 = 20_000.0;
/// The producer's requests in flight: acks come out of order within it.
const SINK_WINDOW: usize = 32;
/// The source's phases: (rate in records per second, duration).
const PHASES: [(f64, Duration); 2] = [
    (16_000.0, Duration::from_millis(1_500)),
    (30_000.0, Duration::from_millis(4_000)),
];
const PHASE_NAMES: [&str; 2] = ["source slower than producer", "source faster than producer"];
const COMMIT_EVERY: Duration = Duration::from_millis(200);
const FLUSH_TIMEOUT: Duration = Duration::from_millis(150);
const REPORT_EVERY: Duration = Duration::from_millis(500);
/// The pacers' tick.
const TICK: Duration = Duration::from_millis(1);

type Offsets = HashMap<u32, u64>;

/// Records below the stored offsets: each partition's offsets run 0, 1, ...
fn records(offsets: &Offsets) -> u64 {
    offsets.values().map(|o| o + 1).sum()
}

/// A small deterministic PRNG (xorshift64), for the producer's jitter.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1_u64 << 53) as f64
    }
}

/// What the threads publish for the report (all counters only grow).
#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    acked: AtomicU64,
    /// Barrier flushes that committed moved offsets, and those that timed
    /// out; records below the barrier committer's stored offsets.
    barrier_commits: AtomicU64,
    barrier_timeouts: AtomicU64,
    barrier_records: AtomicU64,
    /// When the barrier committer last moved its offsets, in ms since the
    /// start.
    barrier_last_ms: AtomicU64,
    /// Barrier flushes that timed out since the last one that committed.
    barrier_streak: AtomicU64,
    /// `committable()` calls that moved offsets; records below the
    /// watermark committer's stored offsets.
    watermark_commits: AtomicU64,
    watermark_records: AtomicU64,
}

#[derive(Clone, Copy)]
struct Snapshot {
    at: Duration,
    sent: u64,
    acked: u64,
    barrier_commits: u64,
    barrier_timeouts: u64,
    barrier_records: u64,
    watermark_commits: u64,
    watermark_records: u64,
}

impl Counters {
    fn snapshot(&self, at: Duration) -> Snapshot {
        // Relaxed, all: counters read for a report.
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        // `acked` first: it never passes `sent`, so read in this order
        // the difference is never negative.
        let acked = get(&self.acked);
        Snapshot {
            at,
            sent: get(&self.sent),
            acked,
            barrier_commits: get(&self.barrier_commits),
            barrier_timeouts: get(&self.barrier_timeouts),
            barrier_records: get(&self.barrier_records),
            watermark_commits: get(&self.watermark_commits),
            watermark_records: get(&self.watermark_records),
        }
    }
}

/// The source: sends round-robin over the partitions at each phase's rate
/// and hands the tickets to the producer. Returns the next offset of each
/// partition (so the last one is that minus 1).
fn source(
    tracker: &WatermarkTracker<u32, u64>,
    to_producer: mpsc::Sender<inflight::Ticket>,
    counters: &Counters,
    began: Instant,
) -> Vec<u64> {
    let mut next = vec![0_u64; PARTITIONS as usize];
    let mut partition = 0;
    let mut phase_start = Duration::ZERO;
    for (rate, length) in PHASES {
        let phase_end = phase_start + length;
        let mut sent_in_phase = 0_u64;
        loop {
            let now = began.elapsed();
            if now >= phase_end {
                break;
            }
            // Pace by the clock: as many records as the rate allows by now.
            let due = ((now - phase_start).as_secs_f64() * rate) as u64;
            while sent_in_phase < due {
                let offset = next[partition as usize];
                match tracker.send(partition, offset) {
                    Ok(ticket) => to_producer.send(ticket).expect("the producer runs"),
                    Err(e) => panic!("send: {e}"),
                }
                next[partition as usize] += 1;
                partition = (partition + 1) % PARTITIONS;
                sent_in_phase += 1;
                // Relaxed: a counter for the report.
                counters.sent.fetch_add(1, Ordering::Relaxed);
            }
            thread::sleep(TICK);
        }
        phase_start = phase_end;
    }
    next
}

/// The producer: acks at `SINK_RATE` (jittered per tick, never banking
/// unused rate beyond one tick) until `flat_out`, then as fast as it can;
/// ends when the source is gone and everything is acked.
fn producer(
    tracker: &WatermarkTracker<u32, u64>,
    from_source: mpsc::Receiver<inflight::Ticket>,
    counters: &Counters,
    flat_out: &AtomicBool,
) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut window: Vec<inflight::Ticket> = Vec::with_capacity(SINK_WINDOW);
    let mut budget = 0.0_f64;
    let mut last = Instant::now();
    let mut source_gone = false;
    loop {
        let now = Instant::now();
        // Relaxed: a mode switch; nothing is published through it.
        let fast = flat_out.load(Ordering::Relaxed);
        let jitter = 0.5 + rng.unit(); // 0.5x to 1.5x, 1x on average
        let tick_budget = SINK_RATE * TICK.as_secs_f64();
        budget = (budget + (now - last).as_secs_f64() * SINK_RATE * jitter).min(2.0 * tick_budget);
        last = now;
        while fast || budget >= 1.0 {
            while window.len() < SINK_WINDOW && !source_gone {
                match from_source.try_recv() {
                    Ok(ticket) => window.push(ticket),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => source_gone = true,
                }
            }
            if window.is_empty() {
                break;
            }
            let ticket = window.swap_remove(rng.below(window.len()));
            tracker.ack(ticket).expect("a ticket of this tracker");
            // Relaxed: a counter for the report.
            counters.acked.fetch_add(1, Ordering::Relaxed);
            budget -= 1.0;
        }
        if source_gone && window.is_empty() {
            return;
        }
        thread::sleep(TICK);
    }
}

/// Sleeps until the next multiple of `every` since `began`; false once
/// `stop` is set.
fn pace(began: Instant, every: Duration, stop: &AtomicBool) -> bool {
    let now = began.elapsed();
    let next = every * (now.as_nanos() / every.as_nanos() + 1) as u32;
    thread::sleep(next - now);
    // Relaxed: a stop request.
    !stop.load(Ordering::Relaxed)
}

/// The barrier committer: every `COMMIT_EVERY`, flush with a timeout; on a
/// timeout, abort. Returns the offsets it stored.
fn barrier_committer(
    tracker: &WatermarkTracker<u32, u64>,
    counters: &Counters,
    began: Instant,
    stop: &AtomicBool,
) -> Offsets {
    let mut stored = Offsets::new();
    while pace(began, COMMIT_EVERY, stop) {
        let mut flush = tracker.begin_flush().expect("the only flusher");
        match flush.wait(FLUSH_TIMEOUT) {
            Ok(offsets) => {
                flush.commit().expect("after a successful wait");
                let before = records(&stored);
                stored.extend(offsets);
                let after = records(&stored);
                if after > before {
                    // Relaxed, both: counters for the report.
                    counters.barrier_commits.fetch_add(1, Ordering::Relaxed);
                    counters.barrier_records.store(after, Ordering::Relaxed);
                    counters.barrier_streak.store(0, Ordering::Relaxed);
                    counters
                        .barrier_last_ms
                        .store(began.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            }
            Err(FlushError::Timeout { .. }) => {
                flush.abort();
                // Relaxed: a counter for the report.
                counters.barrier_timeouts.fetch_add(1, Ordering::Relaxed);
                counters.barrier_streak.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("flush: {e}"),
        }
    }
    stored
}

/// The watermark committer: every `COMMIT_EVERY`, take the committable
/// offsets. Returns the offsets it stored.
fn watermark_committer(
    tracker: &WatermarkTracker<u32, u64>,
    counters: &Counters,
    began: Instant,
    stop: &AtomicBool,
) -> Offsets {
    let mut stored = Offsets::new();
    while pace(began, COMMIT_EVERY, stop) {
        let advanced = tracker.committable();
        if !advanced.is_empty() {
            stored.extend(advanced);
            // Relaxed, both: counters for the report.
            counters.watermark_commits.fetch_add(1, Ordering::Relaxed);
            counters
                .watermark_records
                .store(records(&stored), Ordering::Relaxed);
        }
    }
    stored
}

fn print_row(s: &Snapshot) {
    println!(
        "| {:>5.1} | {:>7} | {:>7} | {:>9} | {:>13} | {:>17} | {:>10} | {:>19} |",
        s.at.as_secs_f64(),
        s.sent,
        s.acked,
        s.sent - s.acked,
        format!("{} / {}", s.barrier_commits, s.barrier_timeouts),
        s.barrier_records,
        s.watermark_commits,
        s.watermark_records,
    );
}

fn main() {
    common::exit_when_stdout_closes();
    let tracker: inflight::WatermarkTracker<u32, u64> = Tracker::builder().watermarks().build();
    let counters = Counters::default();
    let (stop_committers, flat_out) = (AtomicBool::new(false), AtomicBool::new(false));
    println!("producer: acks {SINK_RATE} records/s (jittered), out of order within {SINK_WINDOW}");
    for ((rate, length), name) in PHASES.iter().zip(PHASE_NAMES) {
        println!(
            "source:   {rate} records/s for {:.1} s ({name}), round-robin over {PARTITIONS} partitions",
            length.as_secs_f64()
        );
    }
    println!(
        "barrier committer:   every {} ms, begin_flush + wait({} ms), abort on timeout",
        COMMIT_EVERY.as_millis(),
        FLUSH_TIMEOUT.as_millis()
    );
    println!(
        "watermark committer: every {} ms, committable()",
        COMMIT_EVERY.as_millis()
    );
    println!();
    println!(
        "| {:>5} | {:>7} | {:>7} | {:>9} | {:>13} | {:>17} | {:>10} | {:>19} |",
        "t (s)",
        "sent",
        "acked",
        "unacked",
        "barrier ok/to",
        "barrier committed",
        "wm commits",
        "watermark committed"
    );
    println!(
        "|{:-<7}|{:-<9}|{:-<9}|{:-<11}|{:-<15}|{:-<19}|{:-<12}|{:-<21}|",
        "", "", "", "", "", "", "", ""
    );
    let began = Instant::now();
    let total: Duration = PHASES.iter().map(|&(_, length)| length).sum();
    let (snapshots, last, barrier, watermark, drained_in) = thread::scope(|s| {
        let (to_producer, from_source) = mpsc::channel();
        let (tracker, counters) = (&tracker, &counters);
        let (stop_committers, flat_out) = (&stop_committers, &flat_out);
        let source = s.spawn(move || source(tracker, to_producer, counters, began));
        let producer = s.spawn(move || producer(tracker, from_source, counters, flat_out));
        let barrier = s.spawn(move || barrier_committer(tracker, counters, began, stop_committers));
        let watermark =
            s.spawn(move || watermark_committer(tracker, counters, began, stop_committers));
        let mut snapshots = vec![counters.snapshot(Duration::ZERO)];
        let mut at = REPORT_EVERY;
        while at <= total {
            thread::sleep(at.saturating_sub(began.elapsed()));
            let snapshot = counters.snapshot(at);
            print_row(&snapshot);
            snapshots.push(snapshot);
            at += REPORT_EVERY;
        }
        let next = source.join().unwrap();
        stop_committers.store(true, Ordering::Relaxed);
        let barrier = barrier.join().unwrap();
        let watermark = watermark.join().unwrap();
        // Shutdown: the producer catches up; wait for everything sent.
        let draining = Instant::now();
        flat_out.store(true, Ordering::Relaxed);
        tracker.close();
        tracker
            .drain(Duration::from_secs(10))
            .expect("the producer acks everything");
        let drained_in = draining.elapsed();
        producer.join().unwrap();
        (snapshots, next, barrier, watermark, drained_in)
    });

    println!();
    println!(
        "commit rates per phase (commits that moved offsets, and records committed, per second):"
    );
    println!();
    println!(
        "| {:<40} | {:>17} | {:>17} | {:>19} | {:>19} |",
        "phase",
        "barrier commits/s",
        "barrier records/s",
        "watermark commits/s",
        "watermark records/s"
    );
    println!(
        "|{:-<42}|{:-<19}|{:-<19}|{:-<21}|{:-<21}|",
        "", "", "", "", ""
    );
    let mut phase_start = Duration::ZERO;
    for ((_, length), name) in PHASES.iter().zip(PHASE_NAMES) {
        let phase_end = phase_start + *length;
        let at = |t: Duration| {
            *snapshots
                .iter()
                .min_by_key(|s| s.at.abs_diff(t))
                .expect("snapshots")
        };
        let (a, b) = (at(phase_start), at(phase_end));
        let secs = (b.at - a.at).as_secs_f64();
        let rate = |x: u64, y: u64| (y - x) as f64 / secs;
        println!(
            "| {:<40} | {:>17.1} | {:>17.0} | {:>19.1} | {:>19.0} |",
            format!(
                "{name} ({:.1}-{:.1} s)",
                a.at.as_secs_f64(),
                b.at.as_secs_f64()
            ),
            rate(a.barrier_commits, b.barrier_commits),
            rate(a.barrier_records, b.barrier_records),
            rate(a.watermark_commits, b.watermark_commits),
            rate(a.watermark_records, b.watermark_records),
        );
        phase_start = phase_end;
    }

    // The spiral, in numbers: the barrier committer's last commit.
    let end = *snapshots.last().expect("snapshots");
    // Relaxed: the committer was joined.
    let last_barrier = counters.barrier_last_ms.load(Ordering::Relaxed) as f64 / 1e3;
    println!();
    println!(
        "barrier:   offsets last moved at {last_barrier:.1} s; then {} flushes in a row timed out \
         while the unacked backlog grew to {} records",
        counters.barrier_streak.load(Ordering::Relaxed),
        end.sent - end.acked
    );
    println!(
        "watermark: {} commits moved offsets; committed {} of {} acked records ({} behind an unacked one or not yet taken)",
        end.watermark_commits,
        end.watermark_records,
        end.acked,
        end.acked - end.watermark_records.min(end.acked)
    );

    // Shutdown: once the producer caught up, both get everything.
    let sent: u64 = last.iter().sum();
    let mut final_flush = tracker.begin_flush().expect("no flush in progress");
    let flushed = final_flush
        .wait(Duration::from_secs(1))
        .expect("everything is acked");
    final_flush.commit().expect("after a successful wait");
    let mut barrier = barrier;
    barrier.extend(flushed);
    let mut watermark = watermark;
    watermark.extend(tracker.committable());
    println!();
    println!(
        "shutdown: source stopped at {sent} records; the producer caught up and drain() returned in {} ms;",
        drained_in.as_millis()
    );
    println!(
        "          final barrier flush committed {} records, watermarks {} (in flight now: {})",
        records(&barrier),
        records(&watermark),
        tracker.in_flight()
    );
    let expected: Offsets = (0..PARTITIONS)
        .filter(|&p| last[p as usize] > 0)
        .map(|p| (p, last[p as usize] - 1))
        .collect();
    assert_eq!(
        barrier, expected,
        "the final flush reaches the last offsets"
    );
    assert_eq!(watermark, expected, "the watermarks reach the last offsets");
}
