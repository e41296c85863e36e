//! Watermark contenders (issue 7): who can say, at any moment and without a
//! barrier, which offset of each partition is committable.
//!
//! - [`InflightWatermarks`]: this crate, a `WatermarkTracker<u32, u64>` built with
//!   `watermarks()`; the committer calls `committable()`.
//! - [`InflightProgress`]: this crate built with `progress(4096)`; the
//!   committer calls `progress()` and encodes each changed partition.
//! - [`SubmittedRecords`]: a port of Kafka Connect's `SubmittedRecords`
//!   (Kafka 3.x, KAFKA-12226), the design Kafka replaced its barrier flush
//!   with.
//!
//! The workload, [`local`], is workload 1 of the barrier benchmarks with the
//! flusher replaced by a committer taking the committable offsets every
//! millisecond. The barrier contender ([`super::Inflight`] under
//! [`super::local`]) is the reference the benches and `compare` print beside
//! it.

use super::{permutations, timed_batches, FxBuild, Until, DEPTH};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// The committer's pause between two `committable()` calls.
pub const COMMIT_EVERY: Duration = Duration::from_millis(1);

/// What one `committable_with_stats()` returns, for either contender: the
/// fields of Kafka's `CommittableOffsets`.
#[derive(Debug)]
pub struct Taken<M> {
    /// Partition to newest committable offset, for partitions that advanced.
    pub offsets: M,
    /// Acked records newly behind the watermarks.
    pub committable: u64,
    /// Records in flight, or acked behind one that is.
    pub uncommittable: u64,
    /// Partitions with uncommittable records (Kafka's `numDeques`).
    pub partitions: usize,
    /// The partition with the most uncommittable records, and how many.
    pub largest: Option<(u32, u64)>,
}

/// What every watermark contender offers the workloads.
pub trait Watermark: Sync + Sized {
    /// Name in tables and benchmark ids.
    const NAME: &'static str;
    /// The receipt of a send, resolved by `ack` (the producer callback).
    type Token: Send;
    /// What `committable` returns.
    type Offsets: IntoIterator<Item = (u32, u64)>;
    fn new() -> Self;
    fn send(&self, partition: u32, offset: u64) -> Self::Token;
    fn ack(&self, token: Self::Token);
    /// Takes the offsets that became committable since the previous call.
    fn committable(&self) -> Self::Offsets;
    /// The same, with Kafka's statistics.
    fn committable_with_stats(&self) -> Taken<Self::Offsets>;
    /// The first offset of each partition in the next run of [`local`]: 0,
    /// unless the contender needs a partition's offsets to keep increasing
    /// from one run on the same contender to the next.
    fn first_offset(&self) -> u64 {
        0
    }
}

// ---------------------------------------------------------------------------
// inflight, with watermarks

/// This crate: `Tracker::builder().watermarks().build()`.
pub struct InflightWatermarks(pub inflight::WatermarkTracker<u32, u64>);

impl Watermark for InflightWatermarks {
    const NAME: &'static str = "inflight_wm";
    type Token = inflight::Ticket;
    type Offsets = HashMap<u32, u64>;

    fn new() -> Self {
        Self(inflight::Tracker::builder().watermarks().build())
    }

    #[inline]
    fn send(&self, partition: u32, offset: u64) -> inflight::Ticket {
        match self.0.send(partition, offset) {
            Ok(ticket) => ticket,
            Err(e) => panic!("inflight send: {e}"),
        }
    }

    #[inline]
    fn ack(&self, token: inflight::Ticket) {
        if let Err(e) = self.0.ack(token) {
            panic!("inflight ack: {e}");
        }
    }

    fn committable(&self) -> HashMap<u32, u64> {
        self.0.committable()
    }

    fn committable_with_stats(&self) -> Taken<HashMap<u32, u64>> {
        let c = self.0.committable_with_stats();
        Taken {
            offsets: c.offsets,
            committable: c.committable_records,
            uncommittable: c.uncommittable_records,
            partitions: c.partitions_in_flight,
            largest: c.largest_backlog,
        }
    }
}

// ---------------------------------------------------------------------------
// inflight, with progress

/// The metadata budget of [`InflightProgress`]: Kafka's default
/// `offset.metadata.max.bytes`.
pub const PROGRESS_METADATA_BYTES: usize = 4096;

/// This crate with progress: `Tracker::builder().progress(4096).build()`.
/// The workload's offsets increase per partition, as a progress tracker
/// requires. The committer calls `progress()` and encodes each changed
/// partition's metadata (what a real committer hands to Kafka beside the
/// offset); as the committable offset it keeps the last offset below
/// `next`, so the workload's end check reads it as for the others.
pub struct InflightProgress(pub inflight::ProgressTracker<u32, u64>, AtomicU64);

impl Watermark for InflightProgress {
    const NAME: &'static str = "inflight_progress";
    type Token = inflight::Ticket;
    type Offsets = Vec<(u32, u64)>;

    fn new() -> Self {
        Self(
            inflight::Tracker::builder()
                .progress(PROGRESS_METADATA_BYTES)
                .build(),
            AtomicU64::new(0),
        )
    }

    #[inline]
    fn send(&self, partition: u32, offset: u64) -> inflight::Ticket {
        match self.0.send(partition, offset) {
            Ok(ticket) => ticket,
            Err(e) => panic!("inflight send: {e}"),
        }
    }

    #[inline]
    fn ack(&self, token: inflight::Ticket) {
        if let Err(e) = self.0.ack(token) {
            panic!("inflight ack: {e}");
        }
    }

    fn committable(&self) -> Vec<(u32, u64)> {
        self.0
            .progress()
            .into_iter()
            .filter_map(|(partition, progress)| {
                std::hint::black_box(progress.encode());
                // `next` is the first offset not done: the last committable
                // one is below it (none while `next` is 0).
                progress.next().checked_sub(1).map(|last| (partition, last))
            })
            .collect()
    }

    fn committable_with_stats(&self) -> Taken<Vec<(u32, u64)>> {
        let c = self.0.committable_with_stats();
        Taken {
            offsets: c.offsets.into_iter().collect(),
            committable: c.committable_records,
            uncommittable: c.uncommittable_records,
            partitions: c.partitions_in_flight,
            largest: c.largest_backlog,
        }
    }

    /// A progress tracker refuses an offset not above the partition's
    /// earlier ones: each run starts 2^40 past the previous run's start
    /// (the offsets skipped between count as done, and cost the encoding
    /// one varint).
    fn first_offset(&self) -> u64 {
        // Relaxed: a counter; runs are started one at a time.
        (self.1.fetch_add(1, Ordering::Relaxed) + 1) << 40
    }
}

// ---------------------------------------------------------------------------
// Kafka 3.x SubmittedRecords

type FxMap<K, V> = HashMap<K, V, FxBuild>;

/// Kafka Connect's `SubmittedRecords` (3.x, KAFKA-12226), ported.
///
/// Java (`SubmittedRecords`, `WorkerSourceTask`)         | here
/// ------------------------------------------------------|---------------------------
/// `Map<partition, Deque<SubmittedRecord>> records`      | `records` (`FxMap` of `VecDeque`)
/// only the task thread calls `submit`/`committableOffsets` | one `Mutex` over `records`
/// `SubmittedRecord` (partition, offset, `acked`)        | `Arc<SubmittedRecord>`
/// `ack()`: sets the `volatile`/atomic `acked` flag      | `acked.store(true)`, no lock
/// `committableOffsets()`: pop the acked head of each deque, keep the last offset, count, `removeIf(Deque::isEmpty)` | `committable_with_stats`
///
/// Choices, each in the port's favour (the comparison is against the
/// strongest faithful version of the design):
///
/// - Kafka's `SubmittedRecords` is not thread-safe: one task thread submits
///   and takes the offsets. With T sending threads the deques need a lock;
///   one `std::sync::Mutex` (a futex: one uncontended CAS each way) stands
///   for that thread. A lock per partition would be another design, not
///   Kafka's.
/// - Each record is a heap object shared by the deque and the callback, as
///   in Java: one `Arc` (one allocation, made before taking the lock). The
///   ack stores `true` into its `AtomicBool` without any lock and drops the
///   callback's reference. Kafka from 3.2 also takes the monitor in every
///   ack (`messageAcked`, the count behind `awaitAllMessages`); the port
///   leaves that out, which only makes it cheaper.
/// - `VecDeque` instead of `LinkedList` (no allocation per node), and a
///   fast hasher ([`FxBuild`]) for the partition map.
/// - Popped records are freed after the lock is released (Java's garbage
///   collector frees them later too), so senders do not wait on `free`.
/// - Empty deques are removed at the end of each call, as Kafka does (it
///   keeps memory bounded by what is in flight); a partition that goes idle
///   and comes back gets a new deque.
pub struct SubmittedRecords {
    records: Mutex<FxMap<u32, VecDeque<Arc<SubmittedRecord>>>>,
}

/// One submitted record: its offset and whether the producer acked it.
pub struct SubmittedRecord {
    offset: u64,
    acked: AtomicBool,
}

impl Watermark for SubmittedRecords {
    const NAME: &'static str = "submitted_records";
    type Token = Arc<SubmittedRecord>;
    type Offsets = FxMap<u32, u64>;

    fn new() -> Self {
        Self {
            records: Mutex::new(FxMap::default()),
        }
    }

    /// `submit`: a new record at the tail of its partition's deque.
    #[inline]
    fn send(&self, partition: u32, offset: u64) -> Arc<SubmittedRecord> {
        let record = Arc::new(SubmittedRecord {
            offset,
            acked: AtomicBool::new(false),
        });
        self.records
            .lock()
            .unwrap()
            .entry(partition)
            .or_default()
            .push_back(Arc::clone(&record));
        record
    }

    /// `SubmittedRecord.ack()`: set the flag; no lock.
    #[inline]
    fn ack(&self, record: Arc<SubmittedRecord>) {
        // Release: pairs with the Acquire load in `committable_with_stats`
        // (Java's volatile write). The offset was published by the lock, so
        // Relaxed would do; on x86 both are a plain store.
        record.acked.store(true, Ordering::Release);
    }

    fn committable(&self) -> FxMap<u32, u64> {
        // Kafka has only the one method; the statistics come with it.
        self.committable_with_stats().offsets
    }

    /// `committableOffsets()`: under the lock, pop each deque's acked prefix,
    /// keep the last popped offset, count, drop empty deques.
    fn committable_with_stats(&self) -> Taken<FxMap<u32, u64>> {
        let mut offsets = FxMap::default();
        let (mut committable, mut uncommittable) = (0_u64, 0_u64);
        let mut largest: Option<(u32, u64)> = None;
        let mut popped: Vec<Arc<SubmittedRecord>> = Vec::new();
        let partitions = {
            let mut records = self.records.lock().unwrap();
            for (&partition, deque) in records.iter_mut() {
                let initial = deque.len();
                let mut latest = None;
                // Acquire: pairs with the ack's Release store.
                while deque
                    .front()
                    .is_some_and(|head| head.acked.load(Ordering::Acquire))
                {
                    let head = deque.pop_front().unwrap();
                    latest = Some(head.offset);
                    popped.push(head);
                }
                if let Some(offset) = latest {
                    offsets.insert(partition, offset);
                }
                let left = deque.len() as u64;
                committable += (initial - deque.len()) as u64;
                uncommittable += left;
                if left > largest.map_or(0, |(_, most)| most) {
                    largest = Some((partition, left));
                }
            }
            records.retain(|_, deque| !deque.is_empty());
            records.len()
        };
        drop(popped);
        Taken {
            offsets,
            committable,
            uncommittable,
            partitions,
            largest,
        }
    }
}

// ---------------------------------------------------------------------------
// The workload

/// What a watermark throughput run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct WatermarkRun {
    /// send+ack pairs completed.
    pub pairs: u64,
    /// From the start barrier to the last worker's exit.
    pub elapsed: Duration,
    /// `committable()` calls that returned at least one offset, and those
    /// that returned none.
    pub commits: u64,
    pub empty: u64,
}

impl WatermarkRun {
    pub fn pairs_per_sec(&self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64()
    }
}

/// The committer: take the committable offsets, merge them into the
/// offsets it "stores" (later calls winning, as Kafka's `updatedWith`),
/// pause, until `stop`. Returns the merged offsets and its counts.
fn committer<W: Watermark>(w: &W, stop: &AtomicBool) -> (HashMap<u32, u64>, u64, u64) {
    let mut stored = HashMap::new();
    let (mut commits, mut empty) = (0, 0);
    // Relaxed: a stop request; nothing is published through it.
    while !stop.load(Ordering::Relaxed) {
        let mut moved = false;
        for (partition, offset) in w.committable() {
            stored.insert(partition, offset);
            moved = true;
        }
        if moved {
            commits += 1;
        } else {
            empty += 1;
        }
        std::thread::sleep(COMMIT_EVERY);
    }
    (stored, commits, empty)
}

/// [`local`] for criterion's `iter_custom`: about `iters` pairs in batches
/// of `DEPTH` per thread, the elapsed time scaled to exactly `iters`.
pub fn timed_pairs<W: Watermark>(w: &W, threads: usize, iters: u64) -> Duration {
    let per_thread = iters.div_ceil((threads * DEPTH) as u64).max(1);
    let run = local(w, threads, Until::Units(per_thread));
    run.elapsed.mul_f64(iters as f64 / run.pairs.max(1) as f64)
}

/// Workload 1 with watermarks: `threads` workers each send `DEPTH` records
/// of their own partition, then ack them in a shuffled order, repeatedly,
/// while a committer takes the committable offsets every millisecond.
/// Offsets start at [`Watermark::first_offset`] (0 but for a progress
/// tracker) and increase by one per record.
/// Threads are spawned before the clock starts; the clock covers the
/// workers only. At the end, checks that each partition's stored offset is
/// its last one (once everything is acked, everything is committable).
pub fn local<W: Watermark>(w: &W, threads: usize, until: Until) -> WatermarkRun {
    let first = w.first_offset();
    let start = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let committer = s.spawn(|| committer(w, &stop));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    let perms = permutations(t as u64 + 1, 16);
                    let mut tokens: Vec<Option<W::Token>> = (0..DEPTH).map(|_| None).collect();
                    let partition = t as u32;
                    timed_batches(start, until, |batch| {
                        let base = first + batch * DEPTH as u64;
                        for (i, token) in tokens.iter_mut().enumerate() {
                            *token = Some(w.send(partition, base + i as u64));
                        }
                        for &i in &perms[batch as usize % perms.len()] {
                            w.ack(tokens[i as usize].take().unwrap());
                        }
                    })
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        let joined: Vec<_> = workers.into_iter().map(|h| h.join()).collect();
        let elapsed = began.elapsed();
        // Stop the committer before a worker's panic is passed on, or the
        // scope would wait for it forever.
        stop.store(true, Ordering::Relaxed);
        let sent: Vec<u64> = joined.into_iter().map(|r| r.unwrap()).collect();
        let (mut stored, commits, empty) = committer.join().unwrap();
        stored.extend(w.committable());
        for (t, &records) in sent.iter().enumerate() {
            if records > 0 {
                assert_eq!(
                    stored.get(&(t as u32)),
                    Some(&(first + records - 1)),
                    "{}: partition {t} did not reach its last offset",
                    W::NAME
                );
            }
        }
        WatermarkRun {
            pairs: sent.iter().sum(),
            elapsed,
            commits,
            empty,
        }
    })
}

/// Partitions in the `committable()` latency scenario.
pub const LATENCY_PARTITIONS: usize = 10_000;
/// Records each of them keeps in flight between two calls.
pub const LATENCY_IN_FLIGHT: usize = 8;
/// Records each of them has newly acked (at the head) before each call.
pub const LATENCY_ACKED: usize = 4;

/// The state the `committable()` latency is measured in: `LATENCY_PARTITIONS`
/// partitions, each with `LATENCY_IN_FLIGHT` records unacked and, after
/// [`Backlog::advance`], `LATENCY_ACKED` more newly acked at the head of its
/// queue, so one call returns every partition.
pub struct Backlog<W: Watermark> {
    pub contender: W,
    queues: Vec<VecDeque<W::Token>>,
    next: u64,
}

impl<W: Watermark> Backlog<W> {
    pub fn new() -> Self {
        let contender = W::new();
        let mut backlog = Self {
            contender,
            queues: (0..LATENCY_PARTITIONS).map(|_| VecDeque::new()).collect(),
            next: 0,
        };
        backlog.send(LATENCY_IN_FLIGHT);
        backlog
    }

    fn send(&mut self, per_partition: usize) {
        for _ in 0..per_partition {
            for (p, queue) in self.queues.iter_mut().enumerate() {
                queue.push_back(self.contender.send(p as u32, self.next));
            }
            self.next += 1;
        }
    }

    /// Sends `LATENCY_ACKED` more records per partition and acks its
    /// `LATENCY_ACKED` oldest (newest first, so the head is acked last).
    pub fn advance(&mut self) {
        self.send(LATENCY_ACKED);
        for queue in &mut self.queues {
            let oldest: Vec<W::Token> = queue.drain(..LATENCY_ACKED).collect();
            for token in oldest.into_iter().rev() {
                self.contender.ack(token);
            }
        }
    }

    /// Acks everything still in flight (so the contender drops clean).
    pub fn finish(mut self) {
        for queue in &mut self.queues {
            for token in queue.drain(..) {
                self.contender.ack(token);
            }
        }
    }
}

impl<W: Watermark> Default for Backlog<W> {
    fn default() -> Self {
        Self::new()
    }
}
