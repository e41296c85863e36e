//! The contenders every benchmark compares, behind one small trait, and the
//! workloads they share (used by `benches/*.rs` and `examples/compare.rs`).
//!
//! - [`Inflight`]: this crate, `Tracker<u32, u64>`.
//! - [`Kafka2015`]: a port of Kafka Connect's `WorkerSourceTask` offset
//!   tracking (the 0.9 design, with the KAFKA-2867 fix): one mutex over the
//!   outstanding and backlog maps, the `flushing` flag and the offset
//!   snapshot, plus a condition variable.
//! - [`DashTracker`]: what a Rust user would hand-roll: a `DashMap` of
//!   records in flight plus an atomic counter per generation.
//! - [`Floor`]: one cache-padded atomic counter; tracks nothing per record.
//!   The cost limit, not a usable tracker.
//!
//! The baselines get a fast multiplicative hasher ([`FxBuild`]) rather than
//! std's SipHash, as a careful user would give them: the comparison is
//! against the strongest version of each design, not a strawman.
//!
//! Workloads (see issue 4): [`local`] (1: each thread sends and acks its own
//! records at depth 64), [`handoff`] (2: senders hand tokens to ackers over
//! bounded channels), [`flush_latency`] (3: last covered ack to `wait`
//! returning). Workload 4 (send latency) lives in `benches/latency.rs` and
//! 5 (memory) in `benches/memory.rs`. Each workload runs a flusher thread
//! doing begin / wait (1 ms) / commit-or-abort every millisecond, paced by
//! `thread::sleep`; no sleep is used to synchronise threads.
//!
//! The watermark contenders and their workload (issue 7) are in
//! [`watermarks`].

#![allow(dead_code)]

use crossbeam_utils::CachePadded;
use dashmap::DashMap;
use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

pub mod watermarks;

/// Records each thread keeps in flight in the local workload.
pub const DEPTH: usize = 64;
/// How long the flusher's `wait` may take before it aborts the flush.
pub const FLUSH_TIMEOUT: Duration = Duration::from_millis(1);
/// The flusher's pause between two flush cycles.
pub const FLUSH_EVERY: Duration = Duration::from_millis(1);

/// What every contender offers the workloads.
pub trait Contender: Sync + Sized {
    /// Name in tables and benchmark ids.
    const NAME: &'static str;
    /// The receipt of a send, resolved by `ack`.
    type Token: Send;
    /// A flush in progress.
    type Flush<'a>: FlushCycle
    where
        Self: 'a;
    fn new() -> Self;
    fn send(&self, partition: u32, offset: u64) -> Self::Token;
    fn ack(&self, token: Self::Token);
    /// Starts a flush covering every record sent so far. The benchmarks run
    /// at most one flusher, so this never finds another flush in progress.
    fn begin_flush(&self) -> Self::Flush<'_>;
    /// Sends `offsets` of `partition` as one batch (a source's poll),
    /// pushing their tokens in order. The default sends one at a time.
    fn send_batch(&self, partition: u32, offsets: Range<u64>, tokens: &mut Vec<Self::Token>) {
        tokens.extend(offsets.map(|o| self.send(partition, o)));
    }
    /// Acks every token of `tokens` as one batch (a sink's report),
    /// leaving it empty. The default acks one at a time.
    fn ack_batch(&self, tokens: &mut Vec<Self::Token>) {
        for token in tokens.drain(..) {
            self.ack(token);
        }
    }
}

/// The flusher's half: wait with a deadline, then commit or abort.
pub trait FlushCycle {
    /// Waits until every covered record is acked (then returns the offsets
    /// to commit) or `timeout` passes (`None`).
    fn wait(&mut self, timeout: Duration) -> Option<HashMap<u32, u64>>;
    /// Commits; only after `wait` returned offsets.
    fn commit(self);
    /// Gives up; the next flush covers this one's records again.
    fn abort(self);
}

/// One flusher cycle: begin, wait up to `timeout`, commit or abort. True if
/// it committed.
pub fn flush_once<C: Contender>(c: &C, timeout: Duration) -> bool {
    let mut flush = c.begin_flush();
    match flush.wait(timeout) {
        Some(offsets) => {
            std::hint::black_box(offsets);
            flush.commit();
            true
        }
        None => {
            flush.abort();
            false
        }
    }
}

// ---------------------------------------------------------------------------
// inflight

/// This crate.
pub struct Inflight(inflight::Tracker<u32, u64>);

impl Inflight {
    /// A bounded tracker: every send takes a permit and every resolution
    /// gives it back (`compare`'s bounded table; a capacity the workload
    /// never reaches measures what the permits cost).
    #[allow(dead_code)] // used by `compare`, not by every bench
    pub fn with_capacity(capacity: usize) -> Self {
        Self(inflight::Tracker::with_capacity(capacity))
    }
}

impl Contender for Inflight {
    const NAME: &'static str = "inflight";
    type Token = inflight::Ticket;
    type Flush<'a> = inflight::Flush<'a, u32, u64>;

    fn new() -> Self {
        Self(inflight::Tracker::new())
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

    fn begin_flush(&self) -> Self::Flush<'_> {
        self.0.begin_flush().expect("one flusher at a time")
    }

    #[inline]
    fn send_batch(&self, partition: u32, offsets: Range<u64>, tokens: &mut Vec<inflight::Ticket>) {
        if let Err(e) = self.0.send_batch(&partition, offsets, tokens) {
            panic!("inflight send_batch: {e}");
        }
    }

    #[inline]
    fn ack_batch(&self, tokens: &mut Vec<inflight::Ticket>) {
        if let Err(e) = self.0.ack_all(tokens.drain(..)) {
            panic!("inflight ack_all: {e}");
        }
    }
}

impl FlushCycle for inflight::Flush<'_, u32, u64> {
    fn wait(&mut self, timeout: Duration) -> Option<HashMap<u32, u64>> {
        inflight::Flush::wait(self, timeout).ok()
    }

    fn commit(self) {
        inflight::Flush::commit(self).expect("commit after a successful wait");
    }

    fn abort(self) {
        inflight::Flush::abort(self);
    }
}

// ---------------------------------------------------------------------------
// A fast hasher for the baselines' integer keys.

/// FxHash-style hasher (rotate, xor, multiply), the usual choice for integer
/// keys in Rust. Java's `IdentityHashMap` hashes by identity, which is
/// similarly cheap.
#[derive(Clone, Copy, Default, Debug)]
pub struct FxBuild;

pub struct Fx(u64);

impl BuildHasher for FxBuild {
    type Hasher = Fx;
    #[inline]
    fn build_hasher(&self) -> Fx {
        Fx(0)
    }
}

impl Fx {
    #[inline]
    fn add(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for Fx {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, FxBuild>;

// ---------------------------------------------------------------------------
// kafka_2015

/// Kafka Connect's `WorkerSourceTask` offset tracking, 0.9 era, with the
/// KAFKA-2867 fix (both `finish*Flush` run under the lock).
///
/// Java (`WorkerSourceTask`, `OffsetStorageWriter`)     | here
/// -----------------------------------------------------|-------------------------
/// `synchronized (this)` monitor                        | `state: Mutex<State>`
/// `this.wait(ms)` / `this.notifyAll()`                 | `drained: Condvar`
/// `outstandingMessages` (`IdentityHashMap`)            | `outstanding`
/// `outstandingMessagesBacklog`                         | `backlog`
/// `flushing`                                           | `flushing`
/// `offsetWriter.offset(p, o)` → writer's `data` map    | `data`
/// `offsetWriter.beginFlush()` → `toFlush = data`       | `to_flush`
/// `offsetWriter.cancelFlush()`: `toFlush.putAll(data)` | in `abort`
///
/// The record's identity (an `IdentityHashMap` key) becomes a `u64` id drawn
/// under the lock. Kafka's `OffsetStorageWriter` has a monitor of its own,
/// taken inside the task's; here both are the one mutex, which only makes
/// the port cheaper than the original. A callback for a record found in
/// neither map (Kafka logs "CRITICAL Saw callback for record that was not
/// present") is counted in `critical`; with the fix it stays zero.
pub struct Kafka2015 {
    state: Mutex<KafkaState>,
    drained: Condvar,
}

struct KafkaState {
    next_id: u64,
    outstanding: FxMap<u64, (u32, u64)>,
    backlog: FxMap<u64, (u32, u64)>,
    flushing: bool,
    data: FxMap<u32, u64>,
    to_flush: Option<FxMap<u32, u64>>,
    critical: u64,
}

impl Kafka2015 {
    /// Callbacks for records in neither map (zero unless the port is wrong).
    pub fn critical(&self) -> u64 {
        self.state.lock().unwrap().critical
    }
}

/// A Kafka flush in progress (the body of `commitOffsets`).
pub struct KafkaFlush<'a> {
    task: &'a Kafka2015,
}

impl Contender for Kafka2015 {
    const NAME: &'static str = "kafka_2015";
    type Token = u64;
    type Flush<'a> = KafkaFlush<'a>;

    fn new() -> Self {
        Self {
            state: Mutex::new(KafkaState {
                next_id: 0,
                outstanding: FxMap::default(),
                backlog: FxMap::default(),
                flushing: false,
                data: FxMap::default(),
                to_flush: None,
                critical: 0,
            }),
            drained: Condvar::new(),
        }
    }

    /// `sendRecords`: under the monitor, put the record into `outstanding`,
    /// or into the backlog while a flush runs, and record its offset.
    #[inline]
    fn send(&self, partition: u32, offset: u64) -> u64 {
        let mut s = self.state.lock().unwrap();
        let id = s.next_id;
        s.next_id += 1;
        if !s.flushing {
            s.outstanding.insert(id, (partition, offset));
        } else {
            s.backlog.insert(id, (partition, offset));
        }
        s.data.insert(partition, offset);
        id
    }

    /// `recordSent` (synchronized): remove from `outstanding`, or from the
    /// backlog while flushing; wake the flusher when `outstanding` empties.
    #[inline]
    fn ack(&self, id: u64) {
        let mut s = self.state.lock().unwrap();
        let mut removed = s.outstanding.remove(&id);
        if removed.is_none() && s.flushing {
            removed = s.backlog.remove(&id);
        }
        if removed.is_none() {
            s.critical += 1;
        } else if s.flushing && s.outstanding.is_empty() {
            // Java calls notifyAll holding the monitor; so does the port.
            self.drained.notify_all();
        }
    }

    /// `sendRecords` for a whole poll: the loop of `send` above under one
    /// lock (Kafka's takes the monitor per record; one lock per batch is
    /// the port at its best).
    #[inline]
    fn send_batch(&self, partition: u32, offsets: Range<u64>, tokens: &mut Vec<u64>) {
        let mut s = self.state.lock().unwrap();
        let mut last = None;
        for offset in offsets {
            let id = s.next_id;
            s.next_id += 1;
            if !s.flushing {
                s.outstanding.insert(id, (partition, offset));
            } else {
                s.backlog.insert(id, (partition, offset));
            }
            last = Some(offset);
            tokens.push(id);
        }
        if let Some(offset) = last {
            s.data.insert(partition, offset);
        }
    }

    /// `recordSent` for a batch of callbacks, under one lock.
    #[inline]
    fn ack_batch(&self, tokens: &mut Vec<u64>) {
        let mut s = self.state.lock().unwrap();
        let mut drained = false;
        for id in tokens.drain(..) {
            let mut removed = s.outstanding.remove(&id);
            if removed.is_none() && s.flushing {
                removed = s.backlog.remove(&id);
            }
            if removed.is_none() {
                s.critical += 1;
            } else if s.flushing && s.outstanding.is_empty() {
                drained = true;
            }
        }
        if drained {
            self.drained.notify_all();
        }
    }

    /// `commitOffsets`, first synchronized part: set `flushing` and snapshot
    /// the offsets (`offsetWriter.beginFlush()`).
    fn begin_flush(&self) -> KafkaFlush<'_> {
        let mut s = self.state.lock().unwrap();
        s.flushing = true;
        if !s.data.is_empty() {
            let data = std::mem::take(&mut s.data);
            s.to_flush = Some(data);
        }
        KafkaFlush { task: self }
    }
}

impl FlushCycle for KafkaFlush<'_> {
    /// `commitOffsets`' loop: `while (!outstandingMessages.isEmpty())
    /// this.wait(timeoutMs)`, failing at the deadline. The offsets are the
    /// snapshot (`doFlush` serialises `toFlush`; here it is cloned).
    fn wait(&mut self, timeout: Duration) -> Option<HashMap<u32, u64>> {
        let deadline = Instant::now() + timeout;
        let mut s = self.task.state.lock().unwrap();
        while !s.outstanding.is_empty() {
            let remaining = deadline.checked_duration_since(Instant::now())?;
            if remaining.is_zero() {
                return None;
            }
            s = self.task.drained.wait_timeout(s, remaining).unwrap().0;
        }
        Some(
            s.to_flush
                .as_ref()
                .map(|m| m.iter().map(|(&p, &o)| (p, o)).collect())
                .unwrap_or_default(),
        )
    }

    /// `finishSuccessfulFlush` (synchronized: the KAFKA-2867 fix): swap the
    /// maps; the writer's flush completes (`toFlush = null`).
    fn commit(self) {
        let mut s = self.task.state.lock().unwrap();
        let s = &mut *s;
        std::mem::swap(&mut s.outstanding, &mut s.backlog);
        s.flushing = false;
        s.to_flush = None;
    }

    /// `finishFailedFlush` (synchronized): `offsetWriter.cancelFlush()`
    /// merges newer offsets into the snapshot and makes it current again;
    /// the backlog goes back into `outstanding`.
    fn abort(self) {
        let mut s = self.task.state.lock().unwrap();
        let s = &mut *s;
        if let Some(mut to_flush) = s.to_flush.take() {
            to_flush.extend(s.data.drain());
            s.data = to_flush;
        }
        let backlog = std::mem::take(&mut s.backlog);
        s.outstanding.extend(backlog);
        s.flushing = false;
    }
}

// ---------------------------------------------------------------------------
// dashmap

/// Generations a [`DashTracker`] can have uncommitted at once (ring size).
const RING: usize = 64;

/// The tracker a Rust user would hand-roll: a `DashMap` from record id to
/// `(partition, offset, generation)`, an epoch number bumped by
/// `begin_flush`, and a ring of per-generation counters and offset maps.
///
/// - send: enter the open generation (read the epoch, bump its counter,
///   re-read the epoch and back out if it moved), insert the record and its
///   offset into the generation's offset map.
/// - ack: remove the record, decrement its generation's counter; if that
///   reaches zero in a sealed generation, notify the flusher (mutex +
///   condvar, taken only then).
/// - flush: bump the epoch (the seal), wait until every uncommitted sealed
///   generation's counter is zero, merge their offset maps.
///
/// Where it is weaker than `inflight` (deliberately, as a hand-roll):
/// - "latest offset" of a partition is the last *insert* into the
///   generation's map, not the last send in linearization order: two sends
///   of one partition racing in one generation may leave the older offset.
/// - at most `RING - 1` uncommitted generations: when that many flushes
///   in a row were aborted, `begin_flush` seals nothing new, so records sent
///   just before it are not covered (they wait for a later flush).
/// - ids are never recycled and carry no tag: an ack of an unknown id is
///   silently ignored; there is no capacity bound, no close, no interrupt.
/// - entering a generation is two SeqCst loads and one RMW on a shared
///   counter plus two `DashMap` inserts (each a shard lock).
pub struct DashTracker {
    records: DashMap<u64, (u32, u64, u64), FxBuild>,
    /// The open generation's number.
    epoch: CachePadded<AtomicU64>,
    /// The oldest uncommitted generation. Written by the flusher only.
    committed: AtomicU64,
    counts: Box<[CachePadded<AtomicI64>]>,
    offsets: Box<[DashMap<u32, u64, FxBuild>]>,
    lock: Mutex<()>,
    drained: Condvar,
}

static THREAD_IDS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Record ids: a per-thread prefix and a per-thread sequence, so ids are
    /// unique without a shared counter on the hot path.
    static NEXT_ID: Cell<u64> = Cell::new(THREAD_IDS.fetch_add(1, Ordering::Relaxed) << 40);
}

impl DashTracker {
    #[inline]
    fn leave(&self, generation: u64) {
        let slot = &self.counts[(generation % RING as u64) as usize];
        // SeqCst: the flusher bumps the epoch, then reads the counters; an
        // acker decrements, then reads the epoch. One of them sees the other.
        if slot.fetch_sub(1, Ordering::SeqCst) == 1
            && generation < self.epoch.load(Ordering::SeqCst)
        {
            // Take the lock so the notify cannot fall between the flusher's
            // check and its wait.
            let _guard = self.lock.lock().unwrap();
            self.drained.notify_all();
        }
    }

    fn drained(&self, from: u64, upto: u64) -> bool {
        (from..=upto).all(|g| self.counts[(g % RING as u64) as usize].load(Ordering::SeqCst) == 0)
    }
}

/// A dashmap flush covering generations `from..=upto` (empty if `upto <
/// from`).
pub struct DashFlush<'a> {
    t: &'a DashTracker,
    from: u64,
    upto: u64,
}

impl Contender for DashTracker {
    const NAME: &'static str = "dashmap";
    type Token = u64;
    type Flush<'a> = DashFlush<'a>;

    fn new() -> Self {
        Self {
            records: DashMap::with_hasher(FxBuild),
            epoch: CachePadded::new(AtomicU64::new(0)),
            committed: AtomicU64::new(0),
            counts: (0..RING)
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
            offsets: (0..RING).map(|_| DashMap::with_hasher(FxBuild)).collect(),
            lock: Mutex::new(()),
            drained: Condvar::new(),
        }
    }

    #[inline]
    fn send(&self, partition: u32, offset: u64) -> u64 {
        let generation = loop {
            let g = self.epoch.load(Ordering::SeqCst);
            self.counts[(g % RING as u64) as usize].fetch_add(1, Ordering::SeqCst);
            if self.epoch.load(Ordering::SeqCst) == g {
                break g;
            }
            // Sealed between the two loads: back out, try the new one.
            self.leave(g);
        };
        let id = NEXT_ID.with(|n| {
            let id = n.get();
            n.set(id + 1);
            id
        });
        self.records.insert(id, (partition, offset, generation));
        self.offsets[(generation % RING as u64) as usize].insert(partition, offset);
        id
    }

    #[inline]
    fn ack(&self, id: u64) {
        if let Some((_, (_, _, generation))) = self.records.remove(&id) {
            self.leave(generation);
        }
    }

    fn begin_flush(&self) -> DashFlush<'_> {
        let from = self.committed.load(Ordering::Acquire);
        let open = self.epoch.load(Ordering::SeqCst);
        let upto = if open - from < RING as u64 - 1 {
            // The seal: sends that read `open` after this back out.
            self.epoch.fetch_add(1, Ordering::SeqCst)
        } else {
            // Ring full: cover only what is already sealed.
            open - 1
        };
        DashFlush {
            t: self,
            from,
            upto,
        }
    }
}

impl FlushCycle for DashFlush<'_> {
    fn wait(&mut self, timeout: Duration) -> Option<HashMap<u32, u64>> {
        let (t, from, upto) = (self.t, self.from, self.upto);
        let deadline = Instant::now() + timeout;
        let mut spins = 0;
        while !t.drained(from, upto) {
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let mut guard = t.lock.lock().unwrap();
            while !t.drained(from, upto) {
                let remaining = deadline.checked_duration_since(Instant::now())?;
                if remaining.is_zero() {
                    return None;
                }
                guard = t.drained.wait_timeout(guard, remaining).unwrap().0;
            }
        }
        let mut offsets = HashMap::new();
        for g in from..=upto {
            for cell in t.offsets[(g % RING as u64) as usize].iter() {
                offsets.insert(*cell.key(), *cell.value());
            }
        }
        Some(offsets)
    }

    fn commit(self) {
        for g in self.from..=self.upto {
            self.t.offsets[(g % RING as u64) as usize].clear();
        }
        self.t.committed.store(self.upto + 1, Ordering::Release);
    }

    fn abort(self) {}
}

// ---------------------------------------------------------------------------
// floor

/// One cache-padded counter: +1 on send, −1 on ack. Tracks nothing per
/// record, returns no offsets; its flush only waits for the counter to read
/// zero at some instant. The cost limit of any tracker.
pub struct Floor(CachePadded<AtomicU64>);

pub struct FloorFlush<'a>(&'a Floor);

impl Contender for Floor {
    const NAME: &'static str = "floor";
    type Token = ();
    type Flush<'a> = FloorFlush<'a>;

    fn new() -> Self {
        Self(CachePadded::new(AtomicU64::new(0)))
    }

    #[inline]
    fn send(&self, _partition: u32, _offset: u64) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    #[inline]
    fn ack(&self, _token: ()) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }

    fn begin_flush(&self) -> FloorFlush<'_> {
        FloorFlush(self)
    }
}

impl FlushCycle for FloorFlush<'_> {
    /// Polls: a short spin, then every 20 µs (a polling interval, not a
    /// synchronisation: the floor has no way to be woken, and polling keeps
    /// its flusher from eating the workers' cores).
    fn wait(&mut self, timeout: Duration) -> Option<HashMap<u32, u64>> {
        let deadline = Instant::now() + timeout;
        let mut spins = 0;
        loop {
            if self.0 .0.load(Ordering::Acquire) == 0 {
                return Some(HashMap::new());
            }
            if Instant::now() >= deadline {
                return None;
            }
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    fn commit(self) {}

    fn abort(self) {}
}

// ---------------------------------------------------------------------------
// Workloads

/// How long a workload runs.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// Each worker does this many units (batches of `DEPTH` for `local`,
    /// records for `handoff`).
    Units(u64),
    /// Each worker runs until this much time has passed.
    Elapsed(Duration),
}

/// What a throughput run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Run {
    /// send+ack pairs completed.
    pub pairs: u64,
    /// From the start barrier to the last worker's exit.
    pub elapsed: Duration,
    /// Flushes committed and aborted (timed out) meanwhile.
    pub flushes: u64,
    pub timeouts: u64,
}

impl Run {
    /// Releases the workers (they wait on `start` too), times them until the
    /// last one exits, then stops the flusher and collects its counts.
    fn collect(
        start: &Barrier,
        workers: Vec<std::thread::ScopedJoinHandle<'_, u64>>,
        stop: &AtomicBool,
        flusher: std::thread::ScopedJoinHandle<'_, (u64, u64)>,
    ) -> Run {
        start.wait();
        let began = Instant::now();
        let pairs = workers.into_iter().map(|w| w.join().unwrap()).sum();
        let elapsed = began.elapsed();
        stop.store(true, Ordering::Release);
        let (flushes, timeouts) = flusher.join().unwrap();
        Run {
            pairs,
            elapsed,
            flushes,
            timeouts,
        }
    }
}

impl Run {
    pub fn pairs_per_sec(&self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64()
    }
}

/// A small deterministic PRNG (xorshift64).
#[derive(Clone, Copy)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Shuffled permutations of `0..DEPTH`, so acks come out of send order.
fn permutations(seed: u64, count: usize) -> Vec<[u8; DEPTH]> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let mut p = [0u8; DEPTH];
            for (i, v) in p.iter_mut().enumerate() {
                *v = i as u8;
            }
            for i in (1..DEPTH).rev() {
                p.swap(i, rng.below(i + 1));
            }
            p
        })
        .collect()
}

/// The flusher thread's loop: a cycle, then a pause, until `stop`.
fn flusher<C: Contender>(c: &C, stop: &AtomicBool) -> (u64, u64) {
    let (mut flushes, mut timeouts) = (0, 0);
    // Acquire: nothing is published through `stop`; Relaxed would do.
    while !stop.load(Ordering::Acquire) {
        if flush_once(c, FLUSH_TIMEOUT) {
            flushes += 1;
        } else {
            timeouts += 1;
        }
        std::thread::sleep(FLUSH_EVERY);
    }
    (flushes, timeouts)
}

/// A worker's timed loop: waits at `start`, then runs `batch(n)` for
/// n = 0, 1, … until `until` is reached; returns the pairs done (`DEPTH`
/// per batch).
pub fn timed_batches(start: &Barrier, until: Until, mut batch: impl FnMut(u64)) -> u64 {
    start.wait();
    let deadline = match until {
        Until::Elapsed(d) => Some(Instant::now() + d),
        Until::Units(_) => None,
    };
    let mut batches = 0_u64;
    loop {
        match (until, deadline) {
            (Until::Units(n), _) if batches >= n => break,
            (_, Some(d)) if Instant::now() >= d => break,
            _ => {}
        }
        batch(batches);
        batches += 1;
    }
    batches * DEPTH as u64
}

/// Workload 1, local: `threads` workers each send `DEPTH` records of their
/// own partition, then ack them in a shuffled order, repeatedly, while a
/// flusher runs a flush cycle every millisecond. Threads are spawned before
/// the clock starts; the clock covers the workers only.
pub fn local<C: Contender>(c: &C, threads: usize, until: Until) -> Run {
    workload1(c, threads, until, false)
}

/// Workload 1 in batches: as [`local`], but each thread sends its `DEPTH`
/// records with one `send_batch` and acks them, shuffled, with one
/// `ack_batch` (a source that polls batches, a sink that reports them).
pub fn local_batched<C: Contender>(c: &C, threads: usize, until: Until) -> Run {
    workload1(c, threads, until, true)
}

fn workload1<C: Contender>(c: &C, threads: usize, until: Until, batched: bool) -> Run {
    let start = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let flusher = s.spawn(|| flusher(c, &stop));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    let perms = permutations(t as u64 + 1, 16);
                    let mut tokens: Vec<Option<C::Token>> = (0..DEPTH).map(|_| None).collect();
                    let mut sent: Vec<C::Token> = Vec::with_capacity(DEPTH);
                    let mut shuffled: Vec<C::Token> = Vec::with_capacity(DEPTH);
                    let partition = t as u32;
                    let mut offset = 0_u64;
                    timed_batches(start, until, |batch| {
                        let perm = &perms[batch as usize % perms.len()];
                        if batched {
                            c.send_batch(partition, offset..offset + DEPTH as u64, &mut sent);
                            offset += DEPTH as u64;
                            for (token, sent) in tokens.iter_mut().zip(sent.drain(..)) {
                                *token = Some(sent);
                            }
                            shuffled
                                .extend(perm.iter().map(|&i| tokens[i as usize].take().unwrap()));
                            c.ack_batch(&mut shuffled);
                        } else {
                            for token in tokens.iter_mut() {
                                *token = Some(c.send(partition, offset));
                                offset += 1;
                            }
                            for &i in perm {
                                c.ack(tokens[i as usize].take().unwrap());
                            }
                        }
                    })
                })
            })
            .collect();
        Run::collect(&start, workers, &stop, flusher)
    })
}

/// Channel bound between a sender and its acker in the hand-off workload.
pub const HANDOFF_BOUND: usize = 1024;
/// The acker's shuffle buffer: acks come out of order within this window.
pub const HANDOFF_WINDOW: usize = 16;

/// Workload 2, hand-off (the producer-callback pattern): `pairs` sender
/// threads each send records of their own partition and pass the tokens
/// over a bounded `std::sync::mpsc::sync_channel` to their own acker
/// thread, which acks them out of order (a random pick from a window of
/// `HANDOFF_WINDOW`). A flusher runs meanwhile. `Until::Units(n)`: records
/// per sender.
pub fn handoff<C: Contender>(c: &C, pairs: usize, until: Until) -> Run
where
    C::Token: Send,
{
    let start = Barrier::new(2 * pairs + 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let flusher = s.spawn(|| flusher(c, &stop));
        let mut workers = Vec::new();
        for t in 0..pairs {
            let (tx, rx) = mpsc::sync_channel::<C::Token>(HANDOFF_BOUND);
            let start = &start;
            workers.push(s.spawn(move || {
                let partition = t as u32;
                start.wait();
                let deadline = match until {
                    Until::Elapsed(d) => Some(Instant::now() + d),
                    Until::Units(_) => None,
                };
                let mut offset = 0_u64;
                loop {
                    match (until, deadline) {
                        (Until::Units(n), _) if offset >= n => break,
                        (_, Some(d)) if offset.is_multiple_of(64) && Instant::now() >= d => break,
                        _ => {}
                    }
                    tx.send(c.send(partition, offset)).unwrap();
                    offset += 1;
                }
                0
            }));
            workers.push(s.spawn(move || {
                let mut rng = Rng::new(t as u64 + 7);
                let mut window: Vec<C::Token> = Vec::with_capacity(HANDOFF_WINDOW);
                let mut acked = 0_u64;
                start.wait();
                for token in rx {
                    if window.len() == HANDOFF_WINDOW {
                        let i = rng.below(HANDOFF_WINDOW);
                        c.ack(window.swap_remove(i));
                        acked += 1;
                    }
                    window.push(token);
                }
                while !window.is_empty() {
                    let i = rng.below(window.len());
                    c.ack(window.swap_remove(i));
                    acked += 1;
                }
                acked
            }));
        }
        Run::collect(&start, workers, &stop, flusher)
    })
}

/// Workload 3, flush latency: per round, an acker thread sends `records`
/// records; the waiter begins a flush covering them; the acker acks all but
/// one in a shuffled order, busy-waits `delay` (the sink's latency; long
/// enough for the waiter to have gone to sleep), takes `Instant::now()` and
/// acks the last one; the waiter takes `Instant::now()` when `wait`
/// returns. Returns, per round, nanoseconds from the last ack to the
/// return.
pub fn flush_latency<C: Contender>(
    c: &C,
    rounds: usize,
    records: usize,
    delay: Duration,
) -> Vec<u64> {
    let sent = Barrier::new(2);
    let begun = Barrier::new(2);
    let done = Barrier::new(2);
    let last_ack: Mutex<Option<Instant>> = Mutex::new(None);
    let mut latencies = Vec::with_capacity(rounds);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = Rng::new(42);
            let mut tokens: Vec<C::Token> = Vec::with_capacity(records);
            let mut offset = 0;
            for _ in 0..rounds {
                for _ in 0..records {
                    tokens.push(c.send(0, offset));
                    offset += 1;
                }
                sent.wait();
                begun.wait();
                while tokens.len() > 1 {
                    let i = rng.below(tokens.len());
                    c.ack(tokens.swap_remove(i));
                }
                let spin_from = Instant::now();
                while spin_from.elapsed() < delay {
                    std::hint::spin_loop();
                }
                let last = tokens.pop().unwrap();
                let at = Instant::now();
                c.ack(last);
                *last_ack.lock().unwrap() = Some(at);
                done.wait();
            }
        });
        for _ in 0..rounds {
            sent.wait();
            let mut flush = c.begin_flush();
            begun.wait();
            let offsets = flush.wait(Duration::from_secs(10));
            let returned = Instant::now();
            assert!(offsets.is_some(), "{}: flush timed out", C::NAME);
            flush.commit();
            done.wait();
            let at = last_ack.lock().unwrap().take().unwrap();
            latencies.push(returned.saturating_duration_since(at).as_nanos() as u64);
        }
    });
    latencies
}

/// The `q` quantile (0..=1) of sorted values.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> T {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// "N cores, model" for the tables' header.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "?".into());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{cores} cores, {model}")
}
