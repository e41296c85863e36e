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
//! or an interrupt is pending (consuming it); `Timeout { pending }`;
//! `Failed { failed }` with the number of failed covered records (no commit
//! ever moves past a failure, so failures are never cleared); otherwise the
//! latest covered offset of each partition, and the flush becomes ready.
//! `commit` of a flush that is not ready is `NotReady`. `send` returns
//! `Closed` after `close`, else `Full` at capacity.
//!
//! A raw ticket resolves a record iff it equals that record's ticket and the
//! record is live; the ticket of a resolved record gives `AlreadyResolved`,
//! a value with another tracker's id byte `ForeignTracker`, a tag of 0
//! `Unknown`, any other value some error. Nothing changes on an error.

use arbitrary::{Arbitrary, Unstructured};
use inflight::{BeginFlushError, Flush, FlushError, ResolveError, SendError, Ticket, Tracker};
use std::collections::{BTreeSet, HashMap};
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
    live: usize,
    capacity: Option<usize>,
    closed: bool,
    interrupt: bool,
    committed: usize,
    flush: Option<ModelFlush>,
}

impl Model {
    fn send(&self, partition: u8, offset: u64) -> Result<(), SendError<u8, u64>> {
        if self.closed {
            Err(SendError::Closed(partition, offset))
        } else if self.capacity.is_some_and(|c| self.live >= c) {
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
        });
        self.live += 1;
        self.records.len() - 1
    }

    fn resolve(&mut self, id: usize, fail: bool) {
        let record = &mut self.records[id];
        assert_eq!(record.state, State::Live, "model: resolving {record:?}");
        record.state = if fail { State::Failed } else { State::Acked };
        self.live -= 1;
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
            .filter(|r| r.state == State::Live)
            .count()
    }

    fn wait(&mut self) -> Result<Offsets, FlushError> {
        let pending = self.pending();
        let failed = self
            .covered()
            .iter()
            .filter(|r| r.state == State::Failed)
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
        if pending > 0 {
            return Err(FlushError::Timeout { pending });
        }
        if failed > 0 {
            return Err(FlushError::Failed { failed });
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
    fn new(
        tracker: &'t Tracker<u8, u64>,
        foreign: &'t Tracker<u8, u64>,
        capacity: Option<usize>,
    ) -> Self {
        assert_eq!(tracker.capacity(), capacity);
        Self {
            tracker,
            foreign,
            foreign_sent: 0,
            flush: None,
            tickets: Vec::new(),
            raws: Vec::new(),
            model: Model {
                capacity,
                ..Model::default()
            },
        }
    }

    fn check(&self, op: &Op) {
        assert_eq!(
            self.tracker.in_flight(),
            self.model.live,
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
        let failed = (self.model.records.iter())
            .filter(|r| r.state == State::Failed)
            .count();
        if failed == 0 {
            assert_eq!(self.model.committed, self.model.records.len());
        }
    }
}

fn pick_capacity(u: &mut Unstructured<'_>) -> Option<usize> {
    match u8::arbitrary(u).unwrap_or(0) {
        c @ 0..=63 => Some(usize::from(c % 16)),
        _ => None,
    }
}

/// The `ops` target: an arbitrary operation sequence, real against model.
pub fn run_ops(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let capacity = pick_capacity(&mut u);
    let ops: Vec<Op> = u
        .arbitrary_iter::<Op>()
        .map(|iter| iter.take(MAX_OPS).map_while(Result::ok).collect())
        .unwrap_or_default();
    run_op_list(capacity, &ops);
}

/// Runs `ops` on a tracker of `capacity` (and the model), then
/// [`finish`](Sim::finish)es. Panics on any disagreement.
pub fn run_op_list(capacity: Option<usize>, ops: &[Op]) {
    let tracker = match capacity {
        Some(c) => Tracker::with_capacity(c),
        None => Tracker::new(),
    };
    let foreign = Tracker::new();
    let mut sim = Sim::new(&tracker, &foreign, capacity);
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
    let mut sim = Sim::new(&tracker, &foreign, None);
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
    /// `in_flight` (a snapshot; only exercised).
    InFlight,
}

/// Offsets in `run_threaded` name their sender: `thread << 32 | seq`.
fn encode(thread: usize, seq: u64) -> u64 {
    (thread as u64) << 32 | seq
}

struct Shared<'a> {
    tracker: &'a Tracker<u8, u64>,
    capacity: Option<usize>,
    /// Per thread: `(partition, seq)` of records sent (about to be) and not
    /// acked. Inserted before `send`, removed before `ack`; failed records
    /// stay. A flush that returns offset `seq` for a partition must find no
    /// entry of its sender at or below it.
    unacked: Vec<Mutex<BTreeSet<(u8, u64)>>>,
    /// Offsets of committed flushes, in commit order (the lock is held
    /// across `commit`).
    committed: Mutex<Vec<Offsets>>,
    /// Set by the holder of a flush while it is alive.
    holder: AtomicBool,
    /// `fail`s begun so far.
    fails: AtomicUsize,
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
    tickets: Vec<Ticket>,
    raws: Vec<u64>,
    sent: usize,
    resolved: usize,
    failed: usize,
    /// Last successful send per partition: its seq.
    last: HashMap<u8, u64>,
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
            let (thread, seq) = ((offset >> 32) as usize, offset & 0xffff_ffff);
            assert!(
                thread < self.unacked.len(),
                "offset {offset:#x} from nowhere"
            );
            assert!(
                partition == SHARED || usize::from(partition / 2) == thread,
                "partition {partition} got thread {thread}'s offset"
            );
            let unacked = self.unacked[thread].lock().unwrap();
            let early = unacked.range((partition, 0)..=(partition, seq)).next();
            assert!(
                early.is_none(),
                "flush returned {partition}:{seq} of thread {thread} while {early:?} is not acked"
            );
            drop(unacked);
            // A send that began after `begin_flush` returned is not covered.
            let started = self.started[thread].lock().unwrap()[&(partition, seq)];
            assert!(
                started < sealed.clock_after,
                "flush returned {partition}:{seq} of thread {thread}, sent after it was sealed"
            );
        }
    }

    fn run(&self, thread: usize, ops: &[ThreadOp]) -> Outcome {
        let tracker = self.tracker;
        let mut flush: Option<Flush<'_, u8, u64>> = None;
        let mut sealed = Sealed {
            done_before: Vec::new(),
            clock_after: 0,
        };
        let mut ready: Option<Offsets> = None;
        let mut tickets: Vec<(Ticket, u8, u64)> = Vec::new();
        let mut raws: Vec<(u64, u8, u64)> = Vec::new();
        let mut stale: Vec<u64> = Vec::new();
        let mut out = Outcome {
            tickets: Vec::new(),
            raws: Vec::new(),
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
                            tickets.push((ticket, partition, seq));
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
                    if tickets.is_empty() {
                        continue;
                    }
                    let (ticket, partition, seq) = tickets.swap_remove(i as usize % tickets.len());
                    stale.push(peek_raw(&ticket));
                    let result = if matches!(op, ThreadOp::Fail(_)) {
                        self.fails.fetch_add(1, Ordering::SeqCst);
                        out.failed += 1;
                        tracker.fail(ticket)
                    } else {
                        unacked.lock().unwrap().remove(&(partition, seq));
                        tracker.ack(ticket)
                    };
                    assert_eq!(result, Ok(()));
                    out.resolved += 1;
                }
                ThreadOp::IntoRaw(i) => {
                    if !tickets.is_empty() {
                        let (ticket, p, s) = tickets.swap_remove(i as usize % tickets.len());
                        raws.push((ticket.into_raw(), p, s));
                    }
                }
                ThreadOp::AckRaw(i, fail) => {
                    if raws.is_empty() {
                        continue;
                    }
                    let (raw, partition, seq) = raws.swap_remove(i as usize % raws.len());
                    let result = if fail {
                        self.fails.fetch_add(1, Ordering::SeqCst);
                        out.failed += 1;
                        tracker.fail_raw(raw)
                    } else {
                        unacked.lock().unwrap().remove(&(partition, seq));
                        tracker.ack_raw(raw)
                    };
                    assert_eq!(result, Ok(()));
                    out.resolved += 1;
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
                    let timeout = if park {
                        Duration::from_micros(200)
                    } else {
                        Duration::ZERO
                    };
                    match flush.wait(timeout) {
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
                    let _ = tracker.in_flight();
                }
            }
        }
        if let Some(flush) = flush.take() {
            self.holder.store(false, Ordering::SeqCst);
            drop(flush);
        }
        out.tickets = tickets.into_iter().map(|(t, ..)| t).collect();
        out.raws = raws.into_iter().map(|(r, ..)| r).collect();
        out
    }
}

/// The `threaded` target: the operation list split across 2 or 3 threads
/// started together, then end-state invariants.
pub fn run_threaded(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let threads = 2 + usize::from(u8::arbitrary(&mut u).unwrap_or(0) % 2);
    let capacity = match u8::arbitrary(&mut u).unwrap_or(0) {
        c @ 0..=63 => Some(usize::from(c % 32)),
        _ => None,
    };
    let mut per_thread: Vec<Vec<ThreadOp>> = vec![Vec::new(); threads];
    if let Ok(iter) = u.arbitrary_iter::<(u8, ThreadOp)>() {
        for (thread, op) in iter.take(1024).map_while(Result::ok) {
            per_thread[usize::from(thread) % threads].push(op);
        }
    }
    run_threaded_ops(capacity, &per_thread);
}

/// Runs each list of `per_thread` on its own thread (all released by one
/// barrier), then checks the end state. Panics on a violation.
pub fn run_threaded_ops(capacity: Option<usize>, per_thread: &[Vec<ThreadOp>]) {
    let tracker = match capacity {
        Some(c) => Tracker::with_capacity(c),
        None => Tracker::new(),
    };
    let shared = Shared {
        tracker: &tracker,
        capacity,
        unacked: per_thread.iter().map(|_| Mutex::default()).collect(),
        committed: Mutex::default(),
        holder: AtomicBool::new(false),
        fails: AtomicUsize::new(0),
        closing: AtomicBool::new(false),
        clock: AtomicU64::new(0),
        started: per_thread.iter().map(|_| Mutex::default()).collect(),
        done: per_thread
            .iter()
            .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
            .collect(),
    };
    let barrier = Barrier::new(per_thread.len());
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
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

    // Nothing lost: at quiescence, in_flight = sends - resolutions.
    let sent: usize = outcomes.iter().map(|o| o.sent).sum();
    let resolved: usize = outcomes.iter().map(|o| o.resolved).sum();
    let failed: usize = outcomes.iter().map(|o| o.failed).sum();
    assert_eq!(
        tracker.in_flight(),
        sent - resolved,
        "in_flight at quiescence"
    );
    if let Some(capacity) = capacity {
        assert!(sent - resolved <= capacity);
    }
    let mut last: Vec<HashMap<u8, u64>> = Vec::new();
    for outcome in outcomes {
        for ticket in outcome.tickets {
            assert_eq!(tracker.ack(ticket), Ok(()));
        }
        for raw in outcome.raws {
            assert_eq!(tracker.ack_raw(raw), Ok(()));
        }
        last.push(outcome.last);
    }
    assert_eq!(tracker.in_flight(), 0);

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
