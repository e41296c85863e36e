//! Progress trackers (issue 16), criterion: what `Tracker::progress()`
//! costs on a large backlog, what a send+ack pair costs on a progress
//! tracker against a plain watermark tracker, and how large the encoded
//! metadata is for the patterns parallel-consumer publishes.
//!
//! ```text
//! cargo bench --bench progress                 # everything (about two minutes)
//! cargo bench --bench progress -- progress/    # the progress() call only
//! cargo bench --bench progress -- pairs/       # send+ack pairs only
//! cargo bench --bench progress -- encode/      # the encoding table and encode()
//! ```
//!
//! - `progress/{P}x{R}`: one `progress()` call on a `ProgressTracker<u32, u64>`
//!   built with `progress(4096)` that holds P partitions of R records each,
//!   offsets `0..R`, sent once before measuring (10 million records for
//!   1,000 x 10,000; the setup time is printed). In each partition offset 0
//!   is never acked and each later offset was acked with probability 1/2,
//!   so every partition reports `next` = 0 and about R/2 done offsets
//!   scattered past it (a bitset of R bits). Nothing is resolved past the
//!   first record, so no watermark moves and every call walks all P x R
//!   queued records. Throughput is in records walked ("elem/s").
//!   - `changed`: one iteration acks one more random pending record in
//!     every partition (not timed), then times one `progress()` call, which
//!     reports all P partitions (checked, not timed); the returned map is
//!     dropped outside the timing. This is the call a committer makes when
//!     every partition moved. After R/50 iterations the backlog is built
//!     afresh, not timed (the 1,000 x 10,000 one never is in a default
//!     run), so each partition's pending share stays within 48-50%.
//!   - `unchanged`: one iteration times a `progress()` call after a call
//!     that already reported everything, with nothing resolved between:
//!     it walks and fingerprints every partition as before and returns an
//!     empty map (checked). This is an idle poll.
//! - `pairs/{T}t`: workload 1 with a committer every millisecond (as in
//!   `benches/watermark.rs`), T threads each sending and acking their own
//!   partition's records at depth 64, acks shuffled: `inflight_wm`
//!   (`watermarks()`, the committer calls `committable()`) against
//!   `inflight_progress` (`progress(4096)`, the committer calls
//!   `progress()` and encodes each changed partition); send+ack pairs per
//!   second.
//! - `encode/{pattern}`: before it, a table of the encoded length of the
//!   patterns parallel-consumer publishes (offsets `0..end` of one
//!   partition, offset 0 pending): `chars` is what `Progress::encode()`
//!   returns, `bytes` its form's bytes before base64, `R chars` and
//!   `B chars` both forms' lengths (the shorter is written). Each pattern
//!   is built with `Progress::from_pending` and again through a real
//!   progress tracker (offsets sent in order, the done ones acked right
//!   away, the pending ones left in flight), and the two are checked equal
//!   (`tracker`: `same`). Then one `encode()` call per pattern, timed.

#[path = "contenders/mod.rs"]
mod contenders;

use contenders::watermarks::{self, InflightProgress, InflightWatermarks, Watermark};
use criterion::measurement::WallTime;
use criterion::{criterion_group, BenchmarkGroup, Criterion, SamplingMode, Throughput};
use inflight::{Progress, Ticket, Tracker};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Kafka's default `offset.metadata.max.bytes`.
const METADATA_BYTES: usize = 4096;

/// SplitMix64: a seeded, reproducible pattern.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability 1/`n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

// ---------------------------------------------------------------------------
// progress() on a large backlog

/// A progress tracker with `partitions` x `records` records queued: offset
/// 0 of each partition never acked, each later one acked with probability
/// 1/2.
struct Backlog {
    tracker: inflight::ProgressTracker<u32, u64>,
    /// Per partition, the tickets of its pending records past offset 0.
    pending: Vec<Vec<Ticket>>,
    /// `change` calls so far.
    changes: usize,
    records: usize,
    rng: Rng,
}

impl Backlog {
    /// The backlog, built the same way each time; `report` prints what it
    /// looks like.
    fn new(partitions: usize, records: usize, report: bool) -> Self {
        let began = Instant::now();
        let tracker = Tracker::builder().progress(METADATA_BYTES).build();
        let mut rng = Rng(0x16);
        let mut pending = Vec::with_capacity(partitions);
        let mut tickets = Vec::with_capacity(records);
        for p in 0..partitions as u32 {
            tickets.extend((0..records as u64).map(|o| tracker.send(p, o).expect("send")));
            let mut left = Vec::new();
            // Offset 0 stays in flight for good: its ticket is dropped
            // (a ticket is a number; the record stays unresolved).
            for ticket in tickets.drain(..).skip(1) {
                if rng.one_in(2) {
                    tracker.ack(ticket).expect("ack");
                } else {
                    left.push(ticket);
                }
            }
            pending.push(left);
        }
        let sent = began.elapsed();
        let backlog = Self {
            tracker,
            pending,
            changes: 0,
            records,
            rng,
        };
        // The first call reports every partition: what one looks like.
        let first = backlog.tracker.progress();
        assert_eq!(first.len(), partitions);
        if !report {
            return backlog;
        }
        let pending: usize = backlog.pending.iter().map(Vec::len).sum();
        let sample = &first[&0];
        let encoded = sample.encode();
        println!(
            "setup {partitions} x {records}: {} records sent, {} acked, in {:.2} s; \
             partition 0: next {}, metadata {} chars ('{}' form)",
            partitions * records,
            partitions * records - partitions - pending,
            sent.as_secs_f64(),
            sample.next(),
            encoded.len(),
            &encoded[..1]
        );
        backlog
    }

    /// Acks one more pending record of every partition (a random one past
    /// offset 0), so that every partition's progress changes.
    fn change(&mut self) {
        self.changes += 1;
        for left in &mut self.pending {
            let i = self.rng.below(left.len());
            self.tracker.ack(left.swap_remove(i)).expect("ack");
        }
    }

    /// Whether `change` acked so many records that the backlog should be
    /// built afresh: after R/50 changes, so that the pending share of each
    /// partition stays between 48% and 50%.
    fn worn(&self) -> bool {
        self.changes >= self.records / 50
    }
}

fn progress_group(c: &mut Criterion, partitions: usize, records: usize) {
    let mut group = c.benchmark_group(format!("progress/{partitions}x{records}"));
    group.throughput(Throughput::Elements((partitions * records) as u64));
    if partitions * records >= 1_000_000 {
        // About 0.1 s a call, and the iteration also acks P records and
        // frees the map: few iterations, flat sampling.
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4));
    } else {
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
    }
    // Built on first use, so a filter that skips the group builds nothing.
    let mut backlog: Option<Backlog> = None;
    let mut rebuilt = 0;
    group.bench_function("changed", |b| {
        // Built here, not in `iter_custom`: criterion sizes its samples by
        // the wall time of `iter_custom` calls, and the 10M-record build
        // takes seconds.
        if backlog.is_none() {
            backlog = Some(Backlog::new(partitions, records, true));
        }
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                if backlog.as_ref().is_some_and(Backlog::worn) {
                    // The old one first: the large one is 10M records.
                    backlog = None;
                    rebuilt += 1;
                }
                let backlog =
                    backlog.get_or_insert_with(|| Backlog::new(partitions, records, false));
                backlog.change();
                let began = Instant::now();
                let reported = black_box(backlog.tracker.progress());
                total += began.elapsed();
                assert_eq!(reported.len(), partitions);
                drop(reported);
            }
            total
        })
    });
    group.bench_function("unchanged", |b| {
        let backlog = backlog.get_or_insert_with(|| Backlog::new(partitions, records, true));
        // Whatever changed before is reported here, not timed.
        drop(backlog.tracker.progress());
        b.iter_custom(|iters| {
            let began = Instant::now();
            for _ in 0..iters {
                let reported = black_box(backlog.tracker.progress());
                assert!(reported.is_empty());
            }
            began.elapsed()
        })
    });
    group.finish();
    if rebuilt > 0 {
        println!("(backlog {partitions} x {records} rebuilt {rebuilt} times, not timed)");
    }
}

fn progress(c: &mut Criterion) {
    progress_group(c, 100, 1_000);
    progress_group(c, 1_000, 10_000);
}

// ---------------------------------------------------------------------------
// send+ack pairs: progress against watermarks

fn pairs_one<W: Watermark>(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let contender = W::new();
    group.bench_function(W::NAME, |b| {
        b.iter_custom(|iters| watermarks::timed_pairs(&contender, threads, iters))
    });
}

fn pairs(c: &mut Criterion) {
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("pairs/{threads}t"));
        group
            .throughput(Throughput::Elements(1))
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(2));
        pairs_one::<InflightWatermarks>(&mut group, threads);
        pairs_one::<InflightProgress>(&mut group, threads);
        group.finish();
    }
}

// ---------------------------------------------------------------------------
// Encoded sizes

/// One pattern: the offsets `0..end` of a partition, which are pending.
struct Pattern {
    /// The benchmark id.
    id: &'static str,
    name: &'static str,
    end: u64,
    pending: Vec<u64>,
}

fn patterns() -> Vec<Pattern> {
    let mut rng = Rng(0x9c);
    // Offset 0 is never done (it is `next`); each later one as said.
    let scattered = |end: u64, one_in: u64, rng: &mut Rng| -> Vec<u64> {
        std::iter::once(0)
            .chain((1..end).filter(|_| rng.one_in(one_in)))
            .collect()
    };
    vec![
        Pattern {
            id: "random_2000",
            name: "2,000 offsets, each done w.p. 1/2",
            end: 2_000,
            pending: scattered(2_000, 2, &mut rng),
        },
        Pattern {
            id: "stuck_50000",
            name: "1 stuck, then 50,000 done",
            end: 50_001,
            pending: vec![0],
        },
        Pattern {
            id: "pending1pct_30000",
            name: "30,000 offsets, 1% pending",
            end: 30_000,
            pending: scattered(30_000, 100, &mut rng),
        },
        Pattern {
            id: "random_10000",
            name: "10,000 offsets, each done w.p. 1/2",
            end: 10_000,
            pending: scattered(10_000, 2, &mut rng),
        },
    ]
}

fn varint_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// The byte counts of both forms (before base64), from the progress's done
/// ranges, as the module docs of `inflight::Progress` describe them; the
/// bitset is `None` past its 2^20-offset limit.
fn form_bytes(progress: &Progress) -> (usize, Option<usize>) {
    let (mut runs, mut at) = (0, progress.next());
    for done in progress.done_ranges() {
        runs += varint_len(done.start - at) + varint_len(done.end - done.start);
        at = done.end;
    }
    let span = at - progress.next();
    let bitset = (span <= 1 << 20).then(|| varint_len(span) + (span as usize).div_ceil(8));
    (runs, bitset)
}

/// Characters of a tagged base64url form of `bytes` bytes.
fn chars(bytes: usize) -> usize {
    1 + (bytes * 8).div_ceil(6)
}

/// The same pattern through a real progress tracker: each offset sent in
/// order and, if done, acked right away (so the in-flight span stays within
/// the budget whatever the pattern).
fn through_tracker(pattern: &Pattern) -> Progress {
    let tracker: inflight::ProgressTracker<u32, u64> =
        Tracker::builder().progress(METADATA_BYTES).build();
    let mut pending = pattern.pending.iter().peekable();
    for offset in 0..pattern.end {
        let ticket = tracker.send(0, offset).expect("send");
        if pending.next_if_eq(&&offset).is_none() {
            tracker.ack(ticket).expect("ack");
        }
    }
    tracker.progress().remove(&0).expect("a progress")
}

fn encode(c: &mut Criterion) {
    println!();
    println!("encoded progress, max {METADATA_BYTES} chars; bytes = before base64");
    println!();
    println!(
        "| {:<36} | {:>7} | {:>5} | {:>5} | {:>4} | {:>9} | {:>9} | {:>7} |",
        "pattern", "pending", "chars", "bytes", "form", "R chars", "B chars", "tracker"
    );
    println!(
        "|{:-<38}|{:-<9}|{:-<7}|{:-<7}|{:-<6}|{:-<11}|{:-<11}|{:-<9}|",
        "", "", "", "", "", "", "", ""
    );
    let mut timed = Vec::new();
    for pattern in patterns() {
        let progress = Progress::from_pending(0, pattern.end, pattern.pending.iter().copied())
            .expect("a valid pattern");
        let encoded = progress.encode();
        let (runs, bitset) = form_bytes(&progress);
        let form = &encoded[..1];
        let bytes = if form == "B" {
            bitset.expect("a bitset")
        } else {
            runs
        };
        // What this bench computes is what the crate wrote.
        assert_eq!(encoded.len(), chars(bytes));
        assert_eq!(
            encoded.len(),
            chars(runs).min(bitset.map_or(usize::MAX, chars))
        );
        assert_eq!(Progress::decode(0, &encoded).as_ref(), Ok(&progress));
        let tracked = through_tracker(&pattern);
        assert_eq!(tracked, progress, "{}", pattern.name);
        assert_eq!(tracked.encode(), encoded);
        println!(
            "| {:<36} | {:>7} | {:>5} | {:>5} | {:>4} | {:>9} | {:>9} | {:>7} |",
            pattern.name,
            pattern.pending.len(),
            encoded.len(),
            bytes,
            form,
            chars(runs),
            bitset.map_or("-".into(), |b| chars(b).to_string()),
            "same"
        );
        timed.push((pattern.id, progress));
    }
    println!();
    let mut group = c.benchmark_group("encode");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (id, progress) in &timed {
        group.bench_function(*id, |b| b.iter(|| black_box(progress).encode()));
    }
    group.finish();
}

criterion_group!(benches, encode, progress, pairs);
fn main() {
    // What `criterion_main!` does, after stating the machine.
    println!("machine: {}", contenders::machine());
    benches();
    Criterion::default().configure_from_args().final_summary();
}
