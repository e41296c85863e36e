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

mod dash;
mod floor;
mod kafka_2015;
pub mod watermarks;
mod workloads;

// Each bench (and `compare`) uses some of these.
#[allow(unused_imports)]
pub use dash::DashTracker;
#[allow(unused_imports)]
pub use floor::Floor;
#[allow(unused_imports)]
pub use kafka_2015::Kafka2015;
#[allow(unused_imports)]
pub use workloads::*;

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

/// This crate, a barrier tracker of mode `M`: [`Inflight`] (the plain
/// one) or [`InflightInline`] (offsets inline, `Builder::inline_offsets`).
pub struct InflightOf<M: Made>(inflight::Tracker<u32, u64, M>);

/// This crate's barrier tracker.
pub type Inflight = InflightOf<inflight::mode::Barrier>;

/// This crate's barrier tracker with its offsets inline.
#[allow(dead_code)] // used by `compare` and some benches
pub type InflightInline = InflightOf<inflight::mode::Inline>;

/// The barrier modes the contenders are built in.
pub trait Made: inflight::mode::Mode + Sized {
    /// The contender's name.
    const NAME: &'static str;
    /// A tracker of this mode, bounded by `capacity` if given.
    fn make(capacity: Option<usize>) -> inflight::Tracker<u32, u64, Self>;
}

impl Made for inflight::mode::Barrier {
    const NAME: &'static str = "inflight";
    fn make(capacity: Option<usize>) -> inflight::Tracker<u32, u64, Self> {
        match capacity {
            Some(capacity) => inflight::Tracker::with_capacity(capacity),
            None => inflight::Tracker::new(),
        }
    }
}

impl Made for inflight::mode::Inline {
    const NAME: &'static str = "inflight_inline";
    fn make(capacity: Option<usize>) -> inflight::Tracker<u32, u64, Self> {
        let builder = inflight::Tracker::builder();
        match capacity {
            Some(capacity) => builder.capacity(capacity).inline_offsets().build(),
            None => builder.inline_offsets().build(),
        }
    }
}

impl<M: Made> InflightOf<M> {
    /// A bounded tracker: every send takes a permit and every resolution
    /// gives it back (`compare`'s bounded table; a capacity the workload
    /// never reaches measures what the permits cost).
    #[allow(dead_code)] // used by `compare`, not by every bench
    pub fn with_capacity(capacity: usize) -> Self {
        Self(M::make(Some(capacity)))
    }
}

impl<M: Made> Contender for InflightOf<M> {
    const NAME: &'static str = M::NAME;
    type Token = inflight::Ticket;
    type Flush<'a> = inflight::Flush<'a, u32, u64, M>;

    fn new() -> Self {
        Self(M::make(None))
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

impl<M: inflight::mode::Mode> FlushCycle for inflight::Flush<'_, u32, u64, M> {
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
