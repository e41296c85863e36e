//! The fuzz harness, shared by the cargo-fuzz targets (`fuzz/fuzz_targets/`,
//! where it is the `inflight_fuzz` library) and by the stable corpus replay
//! test (`tests/fuzz_replay.rs`, which includes this file with `#[path]`).
//! It depends only on `inflight`, `arbitrary` and `std`.
//!
//! - [`run_ops`]: an arbitrary sequence of [`Op`]s applied to a real
//!   [`Tracker`] and to [`Model`], a sequential reference model of
//!   DESIGN.md's contract; every return value, `in_flight()`, `pending()` and
//!   every offset map must agree after every step.
//! - [`run_raw_tickets`]: live records, resolved (stale) records and a
//!   pending flush, then a flood of hostile raw tickets: only genuine ones
//!   may change anything.
//! - [`run_threaded`]: operations split across 2-3 threads, then end-state
//!   invariants that hold under every interleaving.
//!
//! # The model
//!
//! Records are kept in send order. `committed` is the length of the prefix
//! that committed flushes covered; a flush sealed at `seal` covers
//! `records[committed..seal]` (so it includes the records of aborted
//! flushes). Its `pending` is the number of live records there; `wait`
//! returns, in this order: `Interrupted` if the flush was interrupted before
//! or an interrupt is pending (consuming it); `Failed { failed }` with the
//! number of failed covered records no longer in flight (see below), as
//! soon as there is one, even while others are pending (no commit ever
//! moves past a failure, so failures are never cleared); `Timeout {
//! pending }`; otherwise the latest covered offset of each partition, and
//! the flush becomes ready.
//! `commit` of a flush that is not ready is `NotReady`. `send` returns
//! `Closed` after `close`, else `Full` at capacity.
//!
//! A raw ticket resolves a record iff it equals that record's ticket and the
//! record is live; the ticket of a resolved record gives `AlreadyResolved`,
//! a value with another tracker's id byte `ForeignTracker`, a tag of 0
//! `Unknown`, any other value some error. Nothing changes on an error.
//!
//! # Watermarks
//!
//! Each partition's records form a queue in send order. Its *passed* prefix
//! is the longest prefix of resolved (acked or failed) records; its *acked*
//! prefix the longest prefix of acked ones, so a failure ends it for good.
//! On a tracker with watermarks a record counts as in flight (`in_flight()`,
//! a flush's `pending`, `drain`'s `pending`) until it is passed; on one
//! without, until it is resolved. The capacity counts unresolved records
//! either way.
//!
//! `committable` returns, for each partition whose acked prefix grew since
//! the previous call (either variant), the offset of its last record, and
//! remembers the new length; `committable_records` is the sum of that
//! growth. `uncommittable_records` counts the records not passed,
//! `partitions_in_flight` the partitions with any, `largest_backlog` the
//! first partition (in the tracker's numbering) with the most of them, and
//! `stopped` the partitions (in that numbering) whose passed prefix holds a
//! failure. The tracker numbers partitions in the order of their first send
//! that `close` did not refuse (a `Full` send numbers its partition too).
//! Without watermarks `committable` is empty and every statistic is zero.
//!
//! `drain(ZERO)` returns `Interrupted` if an interrupt is pending
//! (consuming it), else `Timeout { pending }` with the records in flight,
//! else `Ok`. It seals the open generation, which changes no flush's
//! covered records: a flush still covers everything not committed up to its
//! own seal.

use arbitrary::{Arbitrary, Unstructured};
use inflight::{
    BeginFlushError, Committable, Flush, FlushError, ResolveError, SendError, Ticket, Tracker,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

/// The offsets a flush returns.
pub type Offsets = HashMap<u8, u64>;

/// Partitions used by `run_ops`: few, so that offsets collide.
const PARTITIONS: u8 = 4;
/// Longest operation sequence taken from one input.
const MAX_OPS: usize = 4096;

/// Which ticket a resolution uses.
#[derive(Arbitrary, Debug, Clone)]
pub enum Which {
    /// The i-th live `Ticket` (modulo their number), by `ack` / `fail`.
    Ticket(u8),
    /// The i-th live raw ticket (from `Ticket::into_raw`).
    Raw(u8),
    /// The raw ticket of the i-th resolved record: stale.
    Stale(u8),
    /// Any `u64`.
    Any(u64),
    /// The raw ticket of the i-th record ever sent, its slot index xored
    /// and its tag moved: a near miss (or a hit).
    Near {
        /// Which record (modulo the number sent).
        base: u8,
        /// Xored into the slot index.
        index_xor: u8,
        /// Added to the tag.
        tag_delta: i8,
    },
    /// This tracker's id with a chosen slot and tag.
    Forged {
        /// The slot index.
        index: u16,
        /// The tag.
        tag: u32,
    },
    /// A live ticket of another tracker, by `ack` / `fail`.
    Foreign,
}

/// One step of `run_ops`.
#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    /// `send(partition % 4, offset)`.
    Send {
        /// Partition, modulo 4.
        partition: u8,
        /// Offset.
        offset: u8,
    },
    /// `ack` (or `fail`) of a ticket, or `ack_raw` (or `fail_raw`) of a raw one.
    Resolve {
        /// Which ticket.
        which: Which,
        /// `fail` rather than `ack`.
        fail: bool,
    },
    /// Turn the i-th live `Ticket` into a raw ticket.
    IntoRaw(u8),
    /// Drop the i-th live `Ticket`: its record stays in flight for good
    /// (only its raw value, through `Near` or `Any`, can still resolve it).
    Forget(u8),
    /// `begin_flush`.
    BeginFlush,
    /// `wait(Duration::ZERO)` on the flush, if any.
    Wait,
    /// `commit` the flush, if any.
    Commit,
    /// `abort` the flush, if any.
    Abort,
    /// `interrupt`.
    Interrupt,
    /// `close`.
    Close,
    /// `committable_with_stats` (or `committable`, comparing only offsets).
    Committable {
        /// Call `committable_with_stats`.
        stats: bool,
    },
    /// `drain(Duration::ZERO)`.
    Drain,
}

/// Builds the tracker the harness runs: with or without a capacity and
/// watermarks.
pub fn build_tracker(capacity: Option<usize>, watermarks: bool) -> Tracker<u8, u64> {
    if !watermarks {
        // The plain constructors, as before the builder existed.
        return match capacity {
            Some(c) => Tracker::with_capacity(c),
            None => Tracker::new(),
        };
    }
    let builder = Tracker::builder().watermarks();
    let tracker = match capacity {
        Some(c) => builder.capacity(c).build(),
        None => builder.build(),
    };
    assert!(tracker.has_watermarks());
    tracker
}

/// The raw value a `Ticket` will have. `Ticket` has no accessor short of
/// `into_raw`, but its derived `Debug` shows the field.
pub fn peek_raw(ticket: &Ticket) -> u64 {
    let text = format!("{ticket:?}");
    text.strip_prefix("Ticket { raw: ")
        .and_then(|rest| rest.strip_suffix(" }"))
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("unexpected Debug format of Ticket: {text}"))
}

fn raw_id(raw: u64) -> u8 {
    (raw >> 56) as u8
}

// ---------------------------------------------------------------------------
// The sequential reference model
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Live,
    Acked,
    Failed,
}

#[derive(Debug)]
struct Record {
    partition: u8,
    offset: u64,
    raw: u64,
    state: State,
    /// In its partition's passed prefix (see the module docs).
    passed: bool,
}

/// One partition's queue of records (see the module docs).
#[derive(Debug, Default)]
struct ModelQueue {
    /// Its records, in send order.
    records: Vec<usize>,
    /// Length of the passed prefix.
    passed: usize,
    /// Length of the acked prefix.
    acked: usize,
    /// Length of the acked prefix when `committable` last returned it.
    reported: usize,
}

/// What `committable_with_stats` should return.
#[derive(Debug, Default, PartialEq, Eq)]
struct ModelCommittable {
    offsets: Offsets,
    committable_records: u64,
    uncommittable_records: u64,
    partitions_in_flight: usize,
    largest_backlog: Option<(u8, u64)>,
    stopped: Vec<u8>,
}

impl From<Committable<u8, u64>> for ModelCommittable {
    fn from(real: Committable<u8, u64>) -> Self {
        Self {
            offsets: real.offsets,
            committable_records: real.committable_records,
            uncommittable_records: real.uncommittable_records,
            partitions_in_flight: real.partitions_in_flight,
            largest_backlog: real.largest_backlog,
            stopped: real.stopped,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Pending,
    Ready,
    Interrupted,
}

#[derive(Debug)]
struct ModelFlush {
    seal: usize,
    phase: Phase,
}

/// What a raw ticket should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Resolve record `.0`.
    Resolves(usize),
    /// Fail with exactly this error.
    Error(ResolveError),
    /// Fail, with an error we do not predict.
    AnyError,
}

/// A sequential reference model of the tracker contract (see the module
/// docs).
#[derive(Debug, Default)]
pub struct Model {
    records: Vec<Record>,
    /// Records not resolved.
    live: usize,
    capacity: Option<usize>,
    watermarks: bool,
    /// Partitions in the tracker's numbering.
    numbers: Vec<u8>,
    queues: BTreeMap<u8, ModelQueue>,
    /// Records not passed.
    unpassed: usize,
    closed: bool,
    interrupt: bool,
    committed: usize,
    flush: Option<ModelFlush>,
}

impl Model {
    fn send(&mut self, partition: u8, offset: u64) -> Result<(), SendError<u8, u64>> {
        if self.closed {
            return Err(SendError::Closed(partition, offset));
        }
        if !self.numbers.contains(&partition) {
            self.numbers.push(partition);
        }
        if self.capacity.is_some_and(|c| self.live >= c) {
            Err(SendError::Full(partition, offset))
        } else {
            Ok(())
        }
    }

    fn sent(&mut self, partition: u8, offset: u64, raw: u64) -> usize {
        self.records.push(Record {
            partition,
            offset,
            raw,
            state: State::Live,
            passed: false,
        });
        self.live += 1;
        self.unpassed += 1;
        let id = self.records.len() - 1;
        self.queues.entry(partition).or_default().records.push(id);
        id
    }

    fn resolve(&mut self, id: usize, fail: bool) {
        let record = &mut self.records[id];
        assert_eq!(record.state, State::Live, "model: resolving {record:?}");
        record.state = if fail { State::Failed } else { State::Acked };
        self.live -= 1;
        let queue = self.queues.get_mut(&record.partition).expect("queued");
        while let Some(&next) = queue.records.get(queue.passed) {
            let next = &mut self.records[next];
            if next.state == State::Live {
                break;
            }
            next.passed = true;
            queue.passed += 1;
            self.unpassed -= 1;
        }
        while queue.acked < queue.passed
            && self.records[queue.records[queue.acked]].state == State::Acked
        {
            queue.acked += 1;
        }
    }

    /// What `in_flight()` counts (see the module docs).
    fn in_flight(&self) -> usize {
        if self.watermarks {
            self.unpassed
        } else {
            self.live
        }
    }

    fn in_flight_record(&self, record: &Record) -> bool {
        if self.watermarks {
            !record.passed
        } else {
            record.state == State::Live
        }
    }

    fn committable(&mut self) -> ModelCommittable {
        let mut result = ModelCommittable::default();
        if !self.watermarks {
            return result;
        }
        for (&partition, queue) in &mut self.queues {
            if queue.acked > queue.reported {
                let last = queue.records[queue.acked - 1];
                result.offsets.insert(partition, self.records[last].offset);
                result.committable_records += (queue.acked - queue.reported) as u64;
                queue.reported = queue.acked;
            }
        }
        for &partition in &self.numbers {
            let Some(queue) = self.queues.get(&partition) else {
                continue;
            };
            if queue.acked < queue.passed {
                result.stopped.push(partition);
            }
            let backlog = (queue.records.len() - queue.passed) as u64;
            if backlog == 0 {
                continue;
            }
            result.uncommittable_records += backlog;
            result.partitions_in_flight += 1;
            if result
                .largest_backlog
                .is_none_or(|(_, most)| backlog > most)
            {
                result.largest_backlog = Some((partition, backlog));
            }
        }
        result
    }

    fn drain(&mut self) -> Result<(), FlushError> {
        if std::mem::take(&mut self.interrupt) {
            return Err(FlushError::Interrupted);
        }
        match self.in_flight() {
            0 => Ok(()),
            pending => Err(FlushError::Timeout { pending }),
        }
    }

    /// This tracker's id, once it issued a ticket.
    fn id(&self) -> Option<u8> {
        self.records.first().map(|r| raw_id(r.raw))
    }

    fn expect_raw(&self, raw: u64) -> Expect {
        if let Some(id) = self.records.iter().position(|r| r.raw == raw) {
            return match self.records[id].state {
                State::Live => Expect::Resolves(id),
                State::Acked | State::Failed => Expect::Error(ResolveError::AlreadyResolved),
            };
        }
        match self.id() {
            Some(id) if raw_id(raw) != id => Expect::Error(ResolveError::ForeignTracker),
            Some(_) if raw as u32 == 0 => Expect::Error(ResolveError::Unknown),
            _ => Expect::AnyError,
        }
    }

    fn begin_flush(&mut self) -> Result<(), BeginFlushError> {
        if self.flush.is_some() {
            return Err(BeginFlushError::InProgress);
        }
        self.flush = Some(ModelFlush {
            seal: self.records.len(),
            phase: Phase::Pending,
        });
        Ok(())
    }

    fn covered(&self) -> &[Record] {
        let seal = self.flush.as_ref().map_or(self.committed, |f| f.seal);
        &self.records[self.committed..seal]
    }

    fn pending(&self) -> usize {
        self.covered()
            .iter()
            .filter(|r| self.in_flight_record(r))
            .count()
    }

    fn wait(&mut self) -> Result<Offsets, FlushError> {
        let pending = self.pending();
        // On a watermark tracker a failure counts once the watermark has
        // passed it (until then the record is in flight).
        let failed = self
            .covered()
            .iter()
            .filter(|r| r.state == State::Failed && !self.in_flight_record(r))
            .count();
        let mut offsets = Offsets::new();
        for record in self.covered() {
            offsets.insert(record.partition, record.offset);
        }
        let flush = self.flush.as_mut().expect("model: wait without a flush");
        if flush.phase == Phase::Interrupted {
            return Err(FlushError::Interrupted);
        }
        if std::mem::take(&mut self.interrupt) {
            flush.phase = Phase::Interrupted;
            return Err(FlushError::Interrupted);
        }
        if failed > 0 {
            return Err(FlushError::Failed { failed });
        }
        if pending > 0 {
            return Err(FlushError::Timeout { pending });
        }
        flush.phase = Phase::Ready;
        Ok(offsets)
    }

    fn commit(&mut self) -> Result<(), FlushError> {
        let flush = self.flush.take().expect("model: commit without a flush");
        if flush.phase != Phase::Ready {
            return Err(FlushError::NotReady);
        }
        self.committed = flush.seal;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Real tracker and model side by side
// ---------------------------------------------------------------------------

/// A tracker and the model, driven in lockstep.
struct Sim<'t> {
    tracker: &'t Tracker<u8, u64>,
    /// Another tracker, whose tickets `tracker` must refuse.
    foreign: &'t Tracker<u8, u64>,
    foreign_sent: usize,
    flush: Option<Flush<'t, u8, u64>>,
    /// Live tickets held as `Ticket`, with their record number.
    tickets: Vec<(Ticket, usize)>,
    /// Records whose live ticket is held as a raw value.
    raws: Vec<usize>,
    model: Model,
}

impl<'t> Sim<'t> {
    fn new(tracker: &'t Tracker<u8, u64>, foreign: &'t Tracker<u8, u64>) -> Self {
        let (capacity, watermarks) = (tracker.capacity(), tracker.has_watermarks());
        Self {
            tracker,
            foreign,
            foreign_sent: 0,
            flush: None,
            tickets: Vec::new(),
            raws: Vec::new(),
            model: Model {
                capacity,
                watermarks,
                ..Model::default()
            },
        }
    }

    fn check(&self, op: &Op) {
        assert_eq!(
            self.tracker.in_flight(),
            self.model.in_flight(),
            "in_flight after {op:?}"
        );
        assert_eq!(self.flush.is_some(), self.model.flush.is_some());
        if let Some(flush) = &self.flush {
            assert_eq!(
                flush.pending(),
                self.model.pending(),
                "pending after {op:?}"
            );
        }
        assert_eq!(self.tracker.is_closed(), self.model.closed);
        assert_eq!(self.foreign.in_flight(), self.foreign_sent);
    }

    /// Bookkeeping once record `id` was resolved in both.
    fn resolved(&mut self, id: usize, fail: bool) {
        self.model.resolve(id, fail);
        self.tickets.retain(|(_, r)| *r != id);
        self.raws.retain(|r| *r != id);
    }

    fn resolve_raw(&mut self, raw: u64, fail: bool) {
        let expect = self.model.expect_raw(raw);
        let result = if fail {
            self.tracker.fail_raw(raw)
        } else {
            self.tracker.ack_raw(raw)
        };
        self.judge(raw, expect, result, fail);
    }

    fn judge(&mut self, raw: u64, expect: Expect, result: Result<(), ResolveError>, fail: bool) {
        match expect {
            Expect::Resolves(id) => {
                assert_eq!(result, Ok(()), "raw {raw:#x} of live record {id}");
                self.resolved(id, fail);
            }
            Expect::Error(error) => assert_eq!(result, Err(error), "raw {raw:#x}"),
            Expect::AnyError => assert!(result.is_err(), "forged raw {raw:#x} resolved"),
        }
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Send { partition, offset } => {
                let (partition, offset) = (partition % PARTITIONS, u64::from(*offset));
                let expected = self.model.send(partition, offset);
                match (self.tracker.send(partition, offset), expected) {
                    (Ok(ticket), Ok(())) => {
                        let raw = peek_raw(&ticket);
                        assert_ne!(raw as u32, 0, "a ticket with tag 0");
                        if let Some(id) = self.model.id() {
                            assert_eq!(raw_id(raw), id, "tickets of one tracker, two ids");
                        }
                        assert!(
                            self.model.records.iter().all(|r| r.raw != raw),
                            "ticket {raw:#x} issued twice"
                        );
                        let id = self.model.sent(partition, offset, raw);
                        self.tickets.push((ticket, id));
                    }
                    (Err(error), Err(expected)) => assert_eq!(error, expected),
                    (real, model) => panic!("send: tracker {real:?}, model {model:?}"),
                }
            }
            Op::Resolve { which, fail } => self.resolve(which, *fail),
            Op::IntoRaw(i) => {
                if !self.tickets.is_empty() {
                    let (ticket, id) = self.tickets.swap_remove(*i as usize % self.tickets.len());
                    assert_eq!(ticket.into_raw(), self.model.records[id].raw);
                    self.raws.push(id);
                }
            }
            Op::Forget(i) => {
                if !self.tickets.is_empty() {
                    drop(self.tickets.swap_remove(*i as usize % self.tickets.len()));
                }
            }
            Op::BeginFlush => {
                let expected = self.model.begin_flush();
                match (self.tracker.begin_flush(), expected) {
                    (Ok(flush), Ok(())) => {
                        assert!(self.flush.is_none(), "two flushes alive");
                        self.flush = Some(flush);
                    }
                    (Err(error), Err(expected)) => assert_eq!(error, expected),
                    (real, model) => panic!("begin_flush: tracker {real:?}, model {model:?}"),
                }
            }
            Op::Wait => {
                if let Some(flush) = &mut self.flush {
                    let real = flush.wait(Duration::ZERO);
                    assert_eq!(real, self.model.wait(), "wait");
                }
            }
            Op::Commit => {
                if let Some(flush) = self.flush.take() {
                    assert_eq!(flush.commit(), self.model.commit(), "commit");
                }
            }
            Op::Abort => {
                if let Some(flush) = self.flush.take() {
                    flush.abort();
                    self.model.flush = None;
                }
            }
            Op::Interrupt => {
                self.tracker.interrupt();
                self.model.interrupt = true;
            }
            Op::Close => {
                self.tracker.close();
                self.model.closed = true;
            }
            Op::Committable { stats: true } => {
                let real = ModelCommittable::from(self.tracker.committable_with_stats());
                assert_eq!(real, self.model.committable(), "committable_with_stats");
            }
            Op::Committable { stats: false } => {
                let real = self.tracker.committable();
                assert_eq!(real, self.model.committable().offsets, "committable");
            }
            Op::Drain => {
                let real = self.tracker.drain(Duration::ZERO);
                assert_eq!(real, self.model.drain(), "drain");
            }
        }
        self.check(op);
    }

    fn resolve(&mut self, which: &Which, fail: bool) {
        match which {
            Which::Ticket(i) => {
                if self.tickets.is_empty() {
                    return;
                }
                let (ticket, id) = self.tickets.swap_remove(*i as usize % self.tickets.len());
                let result = if fail {
                    self.tracker.fail(ticket)
                } else {
                    self.tracker.ack(ticket)
                };
                assert_eq!(result, Ok(()), "live ticket of record {id}");
                self.resolved(id, fail);
            }
            Which::Raw(i) => {
                if let Some(&id) = self.raws.get(*i as usize % self.raws.len().max(1)) {
                    self.resolve_raw(self.model.records[id].raw, fail);
                }
            }
            Which::Stale(i) => {
                let stale: Vec<u64> = self
                    .model
                    .records
                    .iter()
                    .filter(|r| r.state != State::Live)
                    .map(|r| r.raw)
                    .collect();
                if let Some(&raw) = stale.get(*i as usize % stale.len().max(1)) {
                    assert_eq!(
                        self.model.expect_raw(raw),
                        Expect::Error(ResolveError::AlreadyResolved)
                    );
                    self.resolve_raw(raw, fail);
                }
            }
            Which::Any(raw) => self.resolve_raw(*raw, fail),
            Which::Near {
                base,
                index_xor,
                tag_delta,
            } => {
                let records = &self.model.records;
                if let Some(record) = records.get(*base as usize % records.len().max(1)) {
                    let raw = record.raw ^ (u64::from(*index_xor) << 32);
                    let tag = (raw as u32).wrapping_add(*tag_delta as i32 as u32);
                    self.resolve_raw((raw & !0xffff_ffff) | u64::from(tag), fail);
                }
            }
            Which::Forged { index, tag } => {
                let id = u64::from(self.model.id().unwrap_or(0));
                self.resolve_raw(id << 56 | u64::from(*index) << 32 | u64::from(*tag), fail);
            }
            Which::Foreign => {
                let offset = self.foreign_sent as u64;
                let ticket = self.foreign.send(0, offset).expect("foreign send");
                self.foreign_sent += 1;
                let raw = peek_raw(&ticket);
                let expect = self.model.expect_raw(raw);
                let result = if fail {
                    self.tracker.fail(ticket)
                } else {
                    self.tracker.ack(ticket)
                };
                self.judge(raw, expect, result, fail);
            }
        }
    }

    /// Resolves everything still in flight (acks), then a final flush must
    /// drain it and, unless a record failed, commit; a last flush is empty.
    fn finish(&mut self) {
        let mut ops = vec![Op::Abort];
        for _ in 0..self.tickets.len() {
            ops.push(Op::Resolve {
                which: Which::Ticket(0),
                fail: false,
            });
        }
        for op in &ops {
            self.step(op);
        }
        let orphans: Vec<u64> = (self.model.records.iter())
            .filter(|r| r.state == State::Live)
            .map(|r| r.raw)
            .collect();
        for raw in orphans {
            self.step(&Op::Resolve {
                which: Which::Any(raw),
                fail: false,
            });
        }
        assert_eq!(self.tracker.in_flight(), 0);
        // Everything resolved: the watermarks have passed every record.
        self.step(&Op::Committable { stats: true });
        for _ in 0..2 {
            self.step(&Op::BeginFlush);
            self.step(&Op::Wait);
            if self.model.flush.as_ref().unwrap().phase == Phase::Interrupted {
                // A leftover interrupt took that wait; the next one is clean.
                self.step(&Op::Abort);
                self.step(&Op::BeginFlush);
                self.step(&Op::Wait);
            }
            self.step(&Op::Commit);
        }
        self.step(&Op::Drain);
        self.step(&Op::Committable { stats: true });
        let failed = (self.model.records.iter())
            .filter(|r| r.state == State::Failed)
            .count();
        if failed == 0 {
            assert_eq!(self.model.committed, self.model.records.len());
        }
    }
}

/// The tracker's setup from one byte: watermarks if the top bit is set; a
/// capacity below `modulo` from the other bits a quarter of the time.
fn pick_setup(u: &mut Unstructured<'_>, modulo: u8) -> (Option<usize>, bool) {
    let byte = u8::arbitrary(u).unwrap_or(0);
    let capacity = match byte & 0x7f {
        c @ 0..=31 => Some(usize::from(c % modulo)),
        _ => None,
    };
    (capacity, byte & 0x80 != 0)
}

/// The `ops` target: an arbitrary operation sequence, real against model.
pub fn run_ops(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let (capacity, watermarks) = pick_setup(&mut u, 16);
    let ops: Vec<Op> = u
        .arbitrary_iter::<Op>()
        .map(|iter| iter.take(MAX_OPS).map_while(Result::ok).collect())
        .unwrap_or_default();
    run_op_list(capacity, watermarks, &ops);
}

/// Runs `ops` on a tracker of `capacity`, with or without `watermarks` (and
/// on the model), then [`finish`](Sim::finish)es. Panics on any
/// disagreement.
pub fn run_op_list(capacity: Option<usize>, watermarks: bool, ops: &[Op]) {
    let tracker = build_tracker(capacity, watermarks);
    assert_eq!(tracker.capacity(), capacity);
    assert_eq!(tracker.has_watermarks(), watermarks);
    let foreign = Tracker::new();
    let mut sim = Sim::new(&tracker, &foreign);
    for op in ops {
        sim.step(op);
    }
    sim.finish();
}

// ---------------------------------------------------------------------------
// raw_tickets
// ---------------------------------------------------------------------------

/// A hostile (or, for `Live`, genuine) raw ticket for `run_raw_tickets`.
#[derive(Arbitrary, Debug, Clone)]
pub enum Probe {
    /// Any `u64`.
    Any(u64),
    /// A near miss of a known ticket.
    Near {
        /// Which record.
        base: u8,
        /// Xored into the slot index.
        index_xor: u8,
        /// Added to the tag.
        tag_delta: i8,
    },
    /// This tracker's id, any slot and tag.
    Forged {
        /// The slot index.
        index: u16,
        /// The tag.
        tag: u32,
    },
    /// A resolved record's ticket.
    Stale(u8),
    /// Another tracker's live ticket.
    Foreign,
    /// A genuine live raw ticket.
    Live(u8),
}

/// What `run_raw_tickets` sets up before the flood.
#[derive(Arbitrary, Debug)]
struct RawSetup {
    /// Records sent before the flush: partition, offset, and what becomes of
    /// the ticket (0: kept as `Ticket`, 1: raw, 2: acked, 3: failed).
    covered: Vec<(u8, u8, u8)>,
    /// Records sent after `begin_flush` (kept raw).
    uncovered: Vec<(u8, u8)>,
    /// The flood.
    probes: Vec<(Probe, bool)>,
}

/// The `raw_tickets` target.
pub fn run_raw_tickets(data: &[u8]) {
    let Ok(setup) = RawSetup::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let tracker = Tracker::new();
    let foreign = Tracker::new();
    let mut sim = Sim::new(&tracker, &foreign);
    for &(partition, offset, fate) in setup.covered.iter().take(256) {
        sim.step(&Op::Send { partition, offset });
        let last = (sim.tickets.len() - 1) as u8;
        let which = match fate % 4 {
            0 => continue,
            1 => {
                sim.step(&Op::IntoRaw(last));
                continue;
            }
            _ => Which::Ticket(last),
        };
        sim.step(&Op::Resolve {
            which,
            fail: fate % 4 == 3,
        });
    }
    sim.step(&Op::BeginFlush);
    for &(partition, offset) in setup.uncovered.iter().take(64) {
        sim.step(&Op::Send { partition, offset });
        let last = (sim.tickets.len() - 1) as u8;
        sim.step(&Op::IntoRaw(last));
    }
    // The flood must not change pending offsets: look before and after.
    sim.step(&Op::Wait);
    for (probe, fail) in setup.probes.iter().take(MAX_OPS) {
        let which = match probe.clone() {
            Probe::Any(raw) => Which::Any(raw),
            Probe::Near {
                base,
                index_xor,
                tag_delta,
            } => Which::Near {
                base,
                index_xor,
                tag_delta,
            },
            Probe::Forged { index, tag } => Which::Forged { index, tag },
            Probe::Stale(i) => Which::Stale(i),
            Probe::Foreign => Which::Foreign,
            Probe::Live(i) => Which::Raw(i),
        };
        sim.step(&Op::Resolve { which, fail: *fail });
    }
    sim.step(&Op::Wait);
    sim.finish();
}

// ---------------------------------------------------------------------------
// threaded
// ---------------------------------------------------------------------------

/// The partition all threads share; thread `t` owns partitions `2t, 2t+1`.
const SHARED: u8 = 100;

/// One step of one thread in `run_threaded`.
#[derive(Arbitrary, Debug, Clone)]
pub enum ThreadOp {
    /// Send on the thread's own partition (`second` picks which), or on the
    /// shared one.
    Send {
        /// Send on the shared partition.
        shared: bool,
        /// The thread's second partition.
        second: bool,
    },
    /// `ack` the i-th live `Ticket`.
    Ack(u8),
    /// `fail` the i-th live `Ticket`.
    Fail(u8),
    /// Turn the i-th live `Ticket` into a raw ticket.
    IntoRaw(u8),
    /// `ack_raw` (or `fail_raw`) of the i-th live raw ticket.
    AckRaw(u8, bool),
    /// `ack_raw` (or `fail_raw`) of one of this thread's resolved tickets.
    Stale(u8, bool),
    /// `begin_flush`.
    Begin,
    /// `wait` on this thread's flush, zero timeout or a short park.
    Wait(bool),
    /// `commit` this thread's flush.
    Commit,
    /// `abort` this thread's flush.
    Abort,
    /// `interrupt`.
    Interrupt,
    /// `close`.
    Close,
    /// `in_flight`: at least this thread's unresolved records.
    InFlight,
    /// `committable_with_stats` (`true`) or `committable`.
    Committable(bool),
    /// `drain`, zero timeout or a short park.
    Drain(bool),
}

/// Offsets in `run_threaded` name their sender: `thread << 32 | seq`.
fn encode(thread: usize, seq: u64) -> u64 {
    (thread as u64) << 32 | seq
}

/// The sender and seq an offset of `run_threaded` names.
fn decode(offset: u64) -> (usize, u64) {
    ((offset >> 32) as usize, offset & 0xffff_ffff)
}

struct Shared<'a> {
    tracker: &'a Tracker<u8, u64>,
    capacity: Option<usize>,
    watermarks: bool,
    /// Per thread: `(partition, seq)` of records sent (about to be) and not
    /// acked. Inserted before `send`, removed before `ack`; failed records
    /// stay. A flush or a watermark that returns offset `seq` for a
    /// partition must find no entry of its sender at or below it.
    unacked: Vec<Mutex<BTreeSet<(u8, u64)>>>,
    /// Offsets of committed flushes, in commit order (the lock is held
    /// across `commit`).
    committed: Mutex<Vec<Offsets>>,
    /// Set by the holder of a flush while it is alive.
    holder: AtomicBool,
    /// `fail`s begun so far.
    fails: AtomicUsize,
    /// Partitions on which a `fail` began.
    failing: Mutex<BTreeSet<u8>>,
    /// Set before any `close()`.
    closing: AtomicBool,
    /// Ticks once before every send; read after every `begin_flush`.
    clock: AtomicU64,
    /// Per thread: the `clock` value taken before the send of `(partition,
    /// seq)`.
    started: Vec<Mutex<HashMap<(u8, u64), u64>>>,
    /// Per thread and own partition: the seq of its last send that returned
    /// `Ok` (0: none yet). Stored after `send` returns.
    done: Vec<[AtomicU64; 2]>,
    /// Every watermark any `committable` call returned.
    marks: Mutex<Vec<(u8, u64)>>,
    /// Calls of the plain `committable`, whose record counts nobody sees.
    plain_calls: AtomicUsize,
    /// `committable_records`, summed over all calls.
    committable_records: AtomicU64,
}

/// What a flush's holder noted around `begin_flush`, to check its offsets.
struct Sealed {
    /// `done` of every own partition, read before `begin_flush` began.
    done_before: Vec<(u8, u64)>,
    /// `clock` read after `begin_flush` returned.
    clock_after: u64,
}

/// What a thread leaves behind.
struct Outcome {
    /// Live tickets, with their index in `records`.
    tickets: Vec<(Ticket, usize)>,
    /// Live raw tickets, with their index in `records`.
    raws: Vec<(u64, usize)>,
    /// Its records (sends that returned `Ok`), in send order: partition,
    /// seq, state.
    records: Vec<(u8, u64, State)>,
    sent: usize,
    resolved: usize,
    failed: usize,
    /// Last successful send per partition: its seq.
    last: HashMap<u8, u64>,
}

impl Outcome {
    /// This thread's records of `partition`, in send order: seq and state.
    fn of(&self, partition: u8) -> impl Iterator<Item = (u64, State)> + '_ {
        (self.records.iter())
            .filter(move |r| r.0 == partition)
            .map(|&(_, seq, state)| (seq, state))
    }
}

/// Of records in send order: how many follow the first unresolved one (and
/// it), and the acked prefix (its length and last seq).
fn queue_numbers(records: impl Iterator<Item = (u64, State)>) -> (usize, usize, Option<u64>) {
    let (mut unpassed, mut acked, mut last) = (0, 0, None);
    let mut stopped = false;
    for (seq, state) in records {
        if unpassed > 0 || state == State::Live {
            unpassed += 1;
        }
        stopped |= state != State::Acked;
        if !stopped {
            acked += 1;
            last = Some(seq);
        }
    }
    (unpassed, acked, last)
}

impl Shared<'_> {
    /// Checks the offsets of an `Ok` wait of the flush noted in `sealed`.
    fn check_ok(&self, offsets: &Offsets, sealed: &Sealed) {
        // A send that completed before `begin_flush` began is covered by this
        // flush or by a committed one: the offset of its partition, here or
        // in a commit, is at least its own. (The commit lock orders this
        // read after the previous flush's push: that push precedes the end of
        // the previous flush, which precedes our `begin_flush`.)
        let committed = self.committed.lock().unwrap();
        for &(partition, seq) in &sealed.done_before {
            let thread = usize::from(partition / 2);
            let seq_of = |o: Option<&u64>| o.map_or(0, |&o| o & 0xffff_ffff);
            let here = seq_of(offsets.get(&partition));
            let before = committed
                .iter()
                .map(|c| seq_of(c.get(&partition)))
                .max()
                .unwrap_or(0);
            assert!(
                here >= seq || before >= seq,
                "partition {partition} (thread {thread}): send {seq} completed before \
                 begin_flush, but the flush returned {here} and commits reached {before}"
            );
        }
        drop(committed);
        for (&partition, &offset) in offsets {
            let (thread, seq) = self.check_acked("flush", partition, offset);
            // A send that began after `begin_flush` returned is not covered.
            let started = self.started[thread].lock().unwrap()[&(partition, seq)];
            assert!(
                started < sealed.clock_after,
                "flush returned {partition}:{seq} of thread {thread}, sent after it was sealed"
            );
        }
    }

    /// Checks that `offset`, returned for `partition` by `what`, names a
    /// record of a thread that may send there, and that neither it nor an
    /// earlier record of its sender on that partition is unacked. Returns
    /// the sender and seq.
    fn check_acked(&self, what: &str, partition: u8, offset: u64) -> (usize, u64) {
        let (thread, seq) = decode(offset);
        assert!(
            thread < self.unacked.len(),
            "{what}: offset {offset:#x} from nowhere"
        );
        assert!(
            partition == SHARED || usize::from(partition / 2) == thread,
            "{what}: partition {partition} got thread {thread}'s offset"
        );
        let unacked = self.unacked[thread].lock().unwrap();
        let early = unacked.range((partition, 0)..=(partition, seq)).next();
        assert!(
            early.is_none(),
            "{what} returned {partition}:{seq} of thread {thread} while {early:?} is not acked"
        );
        (thread, seq)
    }

    /// Checks what one `committable` call returned. `last` is the caller's
    /// newest watermark per partition and sender: they only move forward.
    fn check_marks(&self, offsets: &Offsets, last: &mut HashMap<(u8, usize), u64>) {
        if !self.watermarks {
            assert!(offsets.is_empty(), "committable without watermarks");
            return;
        }
        for (&partition, &offset) in offsets {
            let (thread, seq) = self.check_acked("committable", partition, offset);
            if let Some(before) = last.insert((partition, thread), seq) {
                assert!(
                    before < seq,
                    "partition {partition}: watermark {seq} of thread {thread} after {before}"
                );
            }
        }
        self.marks
            .lock()
            .unwrap()
            .extend(offsets.iter().map(|(&p, &o)| (p, o)));
    }

    /// Checks the statistics of a `committable_with_stats` call, then
    /// counts its records.
    fn check_stats(&self, now: &Committable<u8, u64>) {
        if !self.watermarks {
            assert!(now.offsets.is_empty() && now.stopped.is_empty());
            assert_eq!((now.committable_records, now.uncommittable_records), (0, 0));
            assert_eq!((now.partitions_in_flight, now.largest_backlog), (0, None));
            return;
        }
        assert!(
            now.committable_records >= now.offsets.len() as u64,
            "{now:?}: an advance covers an acked record"
        );
        let busy = now.uncommittable_records > 0;
        assert_eq!(now.partitions_in_flight > 0, busy, "{now:?}");
        assert!(now.partitions_in_flight <= 2 * self.unacked.len() + 1);
        match now.largest_backlog {
            None => assert!(!busy, "{now:?}: no largest backlog"),
            Some((_, most)) => assert!(
                most > 0
                    && most <= now.uncommittable_records
                    && most * now.partitions_in_flight as u64 >= now.uncommittable_records,
                "{now:?}: largest backlog"
            ),
        }
        let failing = self.failing.lock().unwrap();
        let stopped: BTreeSet<u8> = now.stopped.iter().copied().collect();
        assert_eq!(stopped.len(), now.stopped.len(), "{now:?}: stopped twice");
        assert!(
            stopped.is_subset(&failing),
            "{now:?}: stopped, but no fail began on {failing:?}"
        );
        drop(failing);
        (self.committable_records).fetch_add(now.committable_records, Ordering::SeqCst);
    }

    fn run(&self, thread: usize, ops: &[ThreadOp]) -> Outcome {
        let tracker = self.tracker;
        let mut flush: Option<Flush<'_, u8, u64>> = None;
        let mut sealed = Sealed {
            done_before: Vec::new(),
            clock_after: 0,
        };
        let mut ready: Option<Offsets> = None;
        let mut stale: Vec<u64> = Vec::new();
        let mut last_mark = HashMap::new();
        let mut out = Outcome {
            tickets: Vec::new(),
            raws: Vec::new(),
            records: Vec::new(),
            sent: 0,
            resolved: 0,
            failed: 0,
            last: HashMap::new(),
        };
        let mut seq = 0_u64;
        let unacked = &self.unacked[thread];
        for op in ops {
            match *op {
                ThreadOp::Send { shared, second } => {
                    let partition = if shared {
                        SHARED
                    } else {
                        (2 * thread + usize::from(second)) as u8
                    };
                    seq += 1;
                    unacked.lock().unwrap().insert((partition, seq));
                    let start = self.clock.fetch_add(1, Ordering::SeqCst);
                    self.started[thread]
                        .lock()
                        .unwrap()
                        .insert((partition, seq), start);
                    match tracker.send(partition, encode(thread, seq)) {
                        Ok(ticket) => {
                            if !shared {
                                self.done[thread][usize::from(second)].store(seq, Ordering::SeqCst);
                            }
                            out.tickets.push((ticket, out.records.len()));
                            out.records.push((partition, seq, State::Live));
                            out.sent += 1;
                            out.last.insert(partition, seq);
                        }
                        Err(error) => {
                            let full = matches!(error, SendError::Full(..));
                            assert_eq!(error.into_inner(), (partition, encode(thread, seq)));
                            if full {
                                assert!(self.capacity.is_some(), "Full without a capacity");
                            } else {
                                assert!(self.closing.load(Ordering::SeqCst), "Closed, not closed");
                            }
                            unacked.lock().unwrap().remove(&(partition, seq));
                        }
                    }
                }
                ThreadOp::Ack(i) | ThreadOp::Fail(i) => {
                    if out.tickets.is_empty() {
                        continue;
                    }
                    let (ticket, id) = out.tickets.swap_remove(i as usize % out.tickets.len());
                    let (partition, seq, _) = out.records[id];
                    stale.push(peek_raw(&ticket));
                    let fail = matches!(op, ThreadOp::Fail(_));
                    self.resolving(unacked, &mut out, id, fail);
                    let result = if fail {
                        tracker.fail(ticket)
                    } else {
                        tracker.ack(ticket)
                    };
                    assert_eq!(result, Ok(()), "{partition}:{seq}");
                }
                ThreadOp::IntoRaw(i) => {
                    if !out.tickets.is_empty() {
                        let (ticket, id) = out.tickets.swap_remove(i as usize % out.tickets.len());
                        out.raws.push((ticket.into_raw(), id));
                    }
                }
                ThreadOp::AckRaw(i, fail) => {
                    if out.raws.is_empty() {
                        continue;
                    }
                    let (raw, id) = out.raws.swap_remove(i as usize % out.raws.len());
                    self.resolving(unacked, &mut out, id, fail);
                    let result = if fail {
                        tracker.fail_raw(raw)
                    } else {
                        tracker.ack_raw(raw)
                    };
                    assert_eq!(result, Ok(()));
                    stale.push(raw);
                }
                ThreadOp::Stale(i, fail) => {
                    if let Some(&raw) = stale.get(i as usize % stale.len().max(1)) {
                        let result = if fail {
                            tracker.fail_raw(raw)
                        } else {
                            tracker.ack_raw(raw)
                        };
                        assert_eq!(result, Err(ResolveError::AlreadyResolved));
                    }
                }
                ThreadOp::Begin => {
                    let done_before = (self.done.iter().enumerate())
                        .flat_map(|(t, done)| {
                            (0..2).map(move |i| ((2 * t + i) as u8, done[i].load(Ordering::SeqCst)))
                        })
                        .filter(|&(_, seq)| seq > 0)
                        .collect();
                    match tracker.begin_flush() {
                        Ok(new) => {
                            sealed = Sealed {
                                done_before,
                                clock_after: self.clock.load(Ordering::SeqCst),
                            };
                            assert!(flush.is_none(), "begin_flush while this thread holds one");
                            assert!(!self.holder.swap(true, Ordering::SeqCst), "two flushes");
                            flush = Some(new);
                            ready = None;
                        }
                        Err(BeginFlushError::InProgress) => {}
                    }
                }
                ThreadOp::Wait(park) => {
                    let Some(flush) = &mut flush else { continue };
                    match flush.wait(short(park)) {
                        Ok(offsets) => {
                            self.check_ok(&offsets, &sealed);
                            if let Some(before) = &ready {
                                assert_eq!(before, &offsets, "a second Ok wait differs");
                            }
                            ready = Some(offsets);
                        }
                        Err(FlushError::Failed { failed }) => {
                            assert!(failed > 0 && failed <= self.fails.load(Ordering::SeqCst));
                            assert!(ready.is_none(), "Failed after Ok");
                        }
                        Err(FlushError::Timeout { pending }) => {
                            assert!(pending > 0);
                            assert!(ready.is_none(), "Timeout after Ok");
                        }
                        Err(FlushError::Interrupted) => ready = None,
                        Err(FlushError::NotReady) => panic!("wait returned NotReady"),
                    }
                }
                ThreadOp::Commit => {
                    if let Some(flush) = flush.take() {
                        let mut committed = self.committed.lock().unwrap();
                        self.holder.store(false, Ordering::SeqCst);
                        let result = flush.commit();
                        match ready.take() {
                            Some(offsets) => {
                                assert_eq!(result, Ok(()));
                                committed.push(offsets);
                            }
                            None => assert_eq!(result, Err(FlushError::NotReady)),
                        }
                    }
                }
                ThreadOp::Abort => {
                    if let Some(flush) = flush.take() {
                        self.holder.store(false, Ordering::SeqCst);
                        flush.abort();
                    }
                }
                ThreadOp::Interrupt => tracker.interrupt(),
                ThreadOp::Close => {
                    self.closing.store(true, Ordering::SeqCst);
                    tracker.close();
                }
                ThreadOp::InFlight => {
                    // This thread's unresolved records are in flight
                    // throughout the call.
                    let mine = out.tickets.len() + out.raws.len();
                    let in_flight = tracker.in_flight();
                    assert!(in_flight >= mine, "in_flight {in_flight}, {mine} of mine");
                }
                ThreadOp::Committable(stats) => {
                    let offsets = if stats {
                        let now = tracker.committable_with_stats();
                        self.check_stats(&now);
                        now.offsets
                    } else {
                        self.plain_calls.fetch_add(1, Ordering::SeqCst);
                        tracker.committable()
                    };
                    self.check_marks(&offsets, &mut last_mark);
                }
                ThreadOp::Drain(park) => {
                    // This thread's unresolved records were sent before the
                    // call and stay unresolved throughout it.
                    let mine = out.tickets.len() + out.raws.len();
                    match tracker.drain(short(park)) {
                        Ok(()) => assert_eq!(mine, 0, "drain Ok, {mine} of mine unresolved"),
                        Err(FlushError::Timeout { pending }) => {
                            assert!(
                                pending > 0 && pending >= mine,
                                "pending {pending}, mine {mine}"
                            );
                        }
                        Err(FlushError::Interrupted) => {}
                        Err(error) => panic!("drain returned {error:?}"),
                    }
                }
            }
        }
        if let Some(flush) = flush.take() {
            self.holder.store(false, Ordering::SeqCst);
            drop(flush);
        }
        out
    }

    /// Bookkeeping before record `id` of `out` is acked or failed.
    fn resolving(
        &self,
        unacked: &Mutex<BTreeSet<(u8, u64)>>,
        out: &mut Outcome,
        id: usize,
        fail: bool,
    ) {
        let (partition, seq, state) = &mut out.records[id];
        if fail {
            self.fails.fetch_add(1, Ordering::SeqCst);
            self.failing.lock().unwrap().insert(*partition);
            out.failed += 1;
            *state = State::Failed;
        } else {
            unacked.lock().unwrap().remove(&(*partition, *seq));
            *state = State::Acked;
        }
        out.resolved += 1;
    }
}

/// A zero timeout, or a short park.
fn short(park: bool) -> Duration {
    if park {
        Duration::from_micros(200)
    } else {
        Duration::ZERO
    }
}

/// The `threaded` target: the operation list split across 2 or 3 threads
/// started together, then end-state invariants.
pub fn run_threaded(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let threads = 2 + usize::from(u8::arbitrary(&mut u).unwrap_or(0) % 2);
    let (capacity, watermarks) = pick_setup(&mut u, 32);
    let mut per_thread: Vec<Vec<ThreadOp>> = vec![Vec::new(); threads];
    if let Ok(iter) = u.arbitrary_iter::<(u8, ThreadOp)>() {
        for (thread, op) in iter.take(1024).map_while(Result::ok) {
            per_thread[usize::from(thread) % threads].push(op);
        }
    }
    run_threaded_ops(capacity, watermarks, &per_thread);
}

/// Runs each list of `per_thread` on its own thread (all released by one
/// barrier) on a tracker of `capacity`, with or without `watermarks`, then
/// checks the end state. Panics on a violation.
pub fn run_threaded_ops(capacity: Option<usize>, watermarks: bool, per_thread: &[Vec<ThreadOp>]) {
    let tracker = build_tracker(capacity, watermarks);
    let shared = Shared {
        tracker: &tracker,
        capacity,
        watermarks,
        unacked: per_thread.iter().map(|_| Mutex::default()).collect(),
        committed: Mutex::default(),
        holder: AtomicBool::new(false),
        fails: AtomicUsize::new(0),
        failing: Mutex::default(),
        closing: AtomicBool::new(false),
        clock: AtomicU64::new(0),
        started: per_thread.iter().map(|_| Mutex::default()).collect(),
        done: per_thread
            .iter()
            .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
            .collect(),
        marks: Mutex::default(),
        plain_calls: AtomicUsize::new(0),
        committable_records: AtomicU64::new(0),
    };
    let barrier = Barrier::new(per_thread.len());
    let mut outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (per_thread.iter().enumerate())
            .map(|(thread, ops)| {
                let (shared, barrier) = (&shared, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    shared.run(thread, ops)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });

    // Nothing lost: at quiescence, in_flight = sends - resolutions, and on
    // a watermark tracker also the resolved records behind an unresolved
    // one of their partition: exactly known for the threads' own
    // partitions; on the shared one, at least those behind an unresolved
    // record of their own sender, at most all resolved ones too.
    let sent: usize = outcomes.iter().map(|o| o.sent).sum();
    let resolved: usize = outcomes.iter().map(|o| o.resolved).sum();
    let failed: usize = outcomes.iter().map(|o| o.failed).sum();
    let in_flight = tracker.in_flight();
    if watermarks {
        let (mut at_least, mut at_most) = (0, 0);
        for (thread, outcome) in outcomes.iter().enumerate() {
            for partition in [2 * thread as u8, 2 * thread as u8 + 1] {
                let unpassed = queue_numbers(outcome.of(partition)).0;
                at_least += unpassed;
                at_most += unpassed;
            }
            at_least += queue_numbers(outcome.of(SHARED)).0;
            at_most += outcome.of(SHARED).count();
        }
        assert!(
            (at_least..=at_most).contains(&in_flight),
            "in_flight {in_flight} at quiescence, not in {at_least}..={at_most}"
        );
    } else {
        assert_eq!(in_flight, sent - resolved, "in_flight at quiescence");
    }
    if let Some(capacity) = capacity {
        assert!(sent - resolved <= capacity);
    }
    for (thread, outcome) in outcomes.iter_mut().enumerate() {
        let unacked = &shared.unacked[thread];
        for (ticket, id) in std::mem::take(&mut outcome.tickets) {
            shared.resolving(unacked, outcome, id, false);
            assert_eq!(tracker.ack(ticket), Ok(()));
        }
        for (raw, id) in std::mem::take(&mut outcome.raws) {
            shared.resolving(unacked, outcome, id, false);
            assert_eq!(tracker.ack_raw(raw), Ok(()));
        }
    }
    assert_eq!(tracker.in_flight(), 0);
    check_watermarks_at_rest(&shared, &outcomes);

    // Nothing in flight: a drain returns at once.
    let mut drained = tracker.drain(Duration::ZERO);
    if drained == Err(FlushError::Interrupted) {
        // A leftover interrupt; it is delivered once.
        drained = tracker.drain(Duration::ZERO);
    }
    assert_eq!(drained, Ok(()), "drain at rest");

    let last: Vec<HashMap<u8, u64>> = outcomes.into_iter().map(|o| o.last).collect();

    // The final flush covers everything not committed.
    let mut flush = tracker.begin_flush().expect("no flush is alive any more");
    let mut result = flush.wait(Duration::ZERO);
    if result == Err(FlushError::Interrupted) {
        // A leftover interrupt; it is delivered once.
        flush.abort();
        flush = tracker.begin_flush().expect("no flush is alive any more");
        result = flush.wait(Duration::ZERO);
    }
    let committed = shared.committed.into_inner().unwrap();
    if failed > 0 {
        assert_eq!(result, Err(FlushError::Failed { failed }));
        return;
    }
    let offsets = result.expect("every record acked");
    assert_eq!(flush.commit(), Ok(()));

    // Commits of one sender's records on one partition move forward.
    let mut seen: HashMap<(u8, u64), u64> = HashMap::new();
    for offsets in &committed {
        for (&partition, &offset) in offsets {
            let (thread, seq) = (offset >> 32, offset & 0xffff_ffff);
            if let Some(before) = seen.insert((partition, thread), seq) {
                assert!(
                    before < seq,
                    "partition {partition}: committed {seq} after {before}"
                );
            }
        }
    }
    // Each partition's last record is returned by exactly one flush: the
    // final one, or a committed one.
    for (thread, last) in last.iter().enumerate() {
        for partition in [2 * thread as u8, 2 * thread as u8 + 1] {
            let Some(&seq) = last.get(&partition) else {
                assert!(!offsets.contains_key(&partition));
                assert!(committed.iter().all(|c| !c.contains_key(&partition)));
                continue;
            };
            let want = encode(thread, seq);
            if let Some(&got) = offsets.get(&partition) {
                assert_eq!(got, want, "partition {partition}: final flush");
            }
            let in_final = offsets.get(&partition) == Some(&want);
            let in_committed = committed.iter().any(|c| c.get(&partition) == Some(&want));
            assert!(
                in_final != in_committed,
                "partition {partition}: last offset {seq} in final {in_final}, committed {in_committed}"
            );
        }
    }
    if let Some(&offset) = offsets.get(&SHARED) {
        let thread = (offset >> 32) as usize;
        assert_eq!(
            last[thread].get(&SHARED).map(|&seq| encode(thread, seq)),
            Some(offset),
            "shared partition: final offset is not its sender's last"
        );
    }
    let mut flush = tracker.begin_flush().expect("no flush is alive");
    assert_eq!(flush.wait(Duration::ZERO), Ok(Offsets::new()));
    assert_eq!(flush.commit(), Ok(()));
}

/// With every record resolved and every thread joined: the watermarks have
/// passed everything, and all `committable` calls together returned each
/// partition's acked prefix.
fn check_watermarks_at_rest(shared: &Shared<'_>, outcomes: &[Outcome]) {
    let tracker = shared.tracker;
    let now = tracker.committable_with_stats();
    shared.check_stats(&now);
    shared.check_marks(&now.offsets, &mut HashMap::new());
    if !shared.watermarks {
        return;
    }
    assert_eq!(now.uncommittable_records, 0, "{now:?}");
    assert_eq!(now.largest_backlog, None);
    let mut failed_on: BTreeSet<u8> = BTreeSet::new();
    for outcome in outcomes {
        for &(partition, _, state) in &outcome.records {
            assert_ne!(state, State::Live);
            if state == State::Failed {
                failed_on.insert(partition);
            }
        }
    }
    let stopped: BTreeSet<u8> = now.stopped.iter().copied().collect();
    assert_eq!(stopped, failed_on, "stopped partitions at rest");

    let marks = shared.marks.lock().unwrap();
    let distinct: BTreeSet<(u8, u64)> = marks.iter().copied().collect();
    assert_eq!(distinct.len(), marks.len(), "an advance returned twice");
    // Per partition and sender: the newest seq any call returned.
    let mut newest: HashMap<(u8, usize), u64> = HashMap::new();
    for &(partition, offset) in marks.iter() {
        let (thread, seq) = decode(offset);
        let entry = newest.entry((partition, thread)).or_default();
        *entry = seq.max(*entry);
    }
    // Own partitions: the newest watermark is the acked prefix's last
    // record, and the records returned are the acked prefix's.
    let mut acked_prefixes = 0;
    for (thread, outcome) in outcomes.iter().enumerate() {
        for partition in [2 * thread as u8, 2 * thread as u8 + 1] {
            let (_, acked, last) = queue_numbers(outcome.of(partition));
            assert_eq!(
                newest.get(&(partition, thread)).copied(),
                last,
                "partition {partition}: newest watermark"
            );
            acked_prefixes += acked as u64;
        }
    }
    // The shared partition, whose send order across threads is unknown:
    // without failures, its newest watermark is the last record sent there,
    // the last of its sender's.
    let shared_sent: u64 = outcomes.iter().map(|o| o.of(SHARED).count() as u64).sum();
    let shared_acked: u64 = (outcomes.iter())
        .map(|o| o.of(SHARED).filter(|r| r.1 == State::Acked).count() as u64)
        .sum();
    if !failed_on.contains(&SHARED) && shared_sent > 0 {
        assert!(
            (outcomes.iter().enumerate()).any(|(thread, outcome)| {
                let last = outcome.of(SHARED).last().map(|r| r.0);
                last.is_some() && newest.get(&(SHARED, thread)).copied() == last
            }),
            "shared partition: no sender's last record is a watermark"
        );
    }
    if shared.plain_calls.load(Ordering::SeqCst) == 0 {
        let records = shared.committable_records.load(Ordering::SeqCst);
        if failed_on.contains(&SHARED) {
            assert!(
                (acked_prefixes..=acked_prefixes + shared_acked).contains(&records),
                "committable_records {records}, own prefixes {acked_prefixes}, \
                 shared acked {shared_acked}"
            );
        } else {
            assert_eq!(records, acked_prefixes + shared_sent, "committable_records");
        }
    }
    drop(marks);
    let after = tracker.committable_with_stats();
    assert!(after.offsets.is_empty() && after.committable_records == 0);
}
