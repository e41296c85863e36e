//! The `ops` target: [`Op`] sequences run on a real tracker and on the
//! [`Model`] in lockstep ([`Sim`]), every result compared; [`run_ops`]
//! decodes an input, [`run_op_list`] runs an explicit list. `raw_tickets`
//! drives the same simulator.
//!
//! The tracker is a `Tracker<Part, Off>` (see `user.rs`), and
//! [`Op::Arm`] arms a planned panic in their user code. Every call into
//! the tracker runs under [`user::call`]; a panic that escapes must be the
//! armed one, must come from a call that may run that user code, and leaves
//! the model as follows (guarantee 14):
//!
//! - `send` (unless the tracker is closed: its first check runs nothing)
//!   may run, on a progress tracker, the `Clone` of its offset and
//!   `SeqOffset::seq` of that clone, first (a panic there sends, numbers
//!   and takes nothing; an offset of no position is refused then, before
//!   anything else runs); then the `Hash` and `Eq` of partitions (its own, and a known one
//!   it is compared with), the `Clone` of its partition if that is new (the
//!   index keeps a clone), the `Drop` of any offset an earlier record left
//!   in the slot it reuses (offsets of resolved records are dropped only
//!   then, so any send may drop any offset the tracker kept), and the
//!   `Drop` of its partition argument if it is accepted. A panicked send
//!   sends, counts and takes nothing; a new partition is numbered if the
//!   panic came from a `Drop` (the lookup had finished), not if it came
//!   from `Hash`, `Eq` or `Clone`. Except on a progress tracker, whose
//!   send drops its partition argument after publishing the record: a
//!   panic there fails the record (no ticket comes back), which the model
//!   enters as sent and failed.
//! - `progress` may run the `Clone`, `Hash` and `Eq` of the partitions it
//!   reports (see `progress.rs`).
//! - `send_batch` may run what the sends it stands for may run, and a
//!   panic backs out a chunk of up to 64 records (see `batch.rs`);
//!   `ack_all` runs no user code.
//! - `fail`, `fail_raw` and `fail_all` name the records they fail
//!   (`failed_records`): they run the `Clone` of those offsets once the
//!   records are failed (and drop the clone a reused log entry held). A
//!   planned panic there comes out of the call with the failure recorded
//!   (`user::resolving`).
//! - `committable` and `committable_with_stats` may run the `Clone`, `Hash`
//!   and `Eq` of the partitions they return, the `Clone` of the offsets
//!   they return, and (with statistics) the `Clone` of the stopped and
//!   largest-backlog partitions. A panicked call takes nothing: the model
//!   is unchanged, and the next call returns it all.
//! - `Flush::wait` may run the same for the offsets it returns, and only
//!   when it returns offsets. A panicked wait changes nothing: a flush that
//!   was not ready stays so (`commit` gives `NotReady`), and the next wait
//!   returns the offsets.
//! - `revoke` may run the `Hash` and `Eq` of its key (and `Eq` of a known
//!   partition it is compared with) before it changes anything: a panic
//!   there changes nothing. It may then run the `Clone` of the offset it
//!   returns as `Revoked::committable`: a panic there leaves the records
//!   released and the life ended, the advance put back for the next
//!   `committable` call ([`Model::revoke`] with `clone_panicked`).
//!   `drain_partition` may run the `Hash` and `Eq` of its key, before it
//!   does anything. The key is an original the harness defuses after the
//!   call, so its `Drop` never panics.
//! - Every other call (`ack`, `ack_raw`, `begin_flush`,
//!   `commit`, `abort`, `drain`, `in_flight`, `close`, `interrupt`,
//!   `pending`, `is_closed`) runs no user code of either type at all, and
//!   neither does a `wait` that returns an error.
//!
//! The run ends by disarming, resolving everything and flushing
//! ([`Sim::finish`]), then drops the tracker: every partition and offset
//! made must have been dropped exactly once.

use super::batch::{ResolveAll, SendBatch};
use super::model::{plain, Model, ModelCommittable, Phase, Refused, NO_TICKET};
use super::progress::Reports;
use super::resolve::Which;
use super::user::{self, Act, Off, Part};
use super::{build_setup, peek_raw, pick_ops_setup, raw_id, Setup, State, MAX_OPS, PARTITIONS};
use super::{AnyFlush, AnyTracker};
use arbitrary::{Arbitrary, Unstructured};
use inflight::{SendError, Ticket, Tracker};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// One step of `run_ops`.
#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    /// `send(partition % 4, offset)`; on a progress tracker the offset is
    /// [`offset_of`](super::offset_of)`(offset, ..)`: mostly above the
    /// partition's last, sometimes not, or where a restart resumes.
    Send {
        /// Partition, modulo 4.
        partition: u8,
        /// Offset (on a progress tracker, the code of one).
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
    /// `revoke(partition % 4)`.
    Revoke(u8),
    /// `drain_partition(partition % 4, Duration::ZERO)`.
    DrainPartition(u8),
    /// Arms a planned panic (replacing the one armed): the next `act` on
    /// `value` (modulo 4 for a partition) panics, once. Only when `chance`
    /// is below 64 (a quarter of the time), so that most inputs still do
    /// mostly ordinary work.
    Arm {
        /// What panics.
        act: Act,
        /// On which value.
        value: u8,
        /// Arms only below 64.
        chance: u8,
    },
    /// `progress()`, checked against the model (see `progress.rs`).
    Progress,
    /// `send_batch`, checked as a loop of sends (see `batch.rs`).
    SendBatch(SendBatch),
    /// `ack_all` / `fail_all` of several tickets (see `batch.rs`).
    ResolveAll(ResolveAll),
}

/// A planned panic that escaped a call of `run_op_list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    /// The step it escaped: the index of the op in the list (counting on
    /// past its end into the final steps).
    pub step: usize,
    /// The call: `send`, `send_batch`, `committable`,
    /// `committable_with_stats`, `wait`, `revoke`, `drain_partition` or
    /// `progress`.
    pub call: &'static str,
    /// What panicked.
    pub act: Act,
    /// On which value.
    pub value: u64,
}

/// A tracker and the model, driven in lockstep.
pub(super) struct Sim<'t> {
    pub(super) tracker: &'t AnyTracker<Part, Off>,
    /// Another tracker, whose tickets `tracker` must refuse.
    pub(super) foreign: &'t Tracker<u8, u64>,
    pub(super) foreign_sent: usize,
    flush: Option<AnyFlush<'t, Part, Off>>,
    /// Tickets held as `Ticket`, with their record number: live, or of a
    /// record a revoke released.
    pub(super) tickets: Vec<(Ticket, usize)>,
    /// Records whose ticket is held as a raw value: live, or released.
    pub(super) raws: Vec<usize>,
    /// Offset values the tracker kept (it may drop them in any later send).
    pub(super) kept: HashSet<u64>,
    /// The planned panics that escaped, in order.
    fired: Vec<Fired>,
    /// Steps begun.
    steps: usize,
    /// What the calls returned, by step, when tracing ([`run_op_list_traced`]).
    pub(super) trace: Option<Vec<(usize, String)>>,
    pub(super) model: Model,
    /// What `progress()` reported (see `progress.rs`).
    pub(super) reports: Reports,
}

impl<'t> Sim<'t> {
    pub(super) fn new(
        tracker: &'t AnyTracker<Part, Off>,
        foreign: &'t Tracker<u8, u64>,
        progress: bool,
    ) -> Self {
        let (capacity, watermarks) = (tracker.capacity(), tracker.has_watermarks());
        Self {
            tracker,
            foreign,
            foreign_sent: 0,
            flush: None,
            tickets: Vec::new(),
            raws: Vec::new(),
            kept: HashSet::new(),
            fired: Vec::new(),
            steps: 0,
            trace: None,
            model: Model::new(capacity, watermarks, progress),
            reports: Reports::default(),
        }
    }

    fn check(&self, op: &Op) {
        let in_flight = user::no_user_code("in_flight", || self.tracker.in_flight());
        assert_eq!(in_flight, self.model.in_flight(), "in_flight after {op:?}");
        assert_eq!(self.flush.is_some(), self.model.flush.is_some());
        if let Some(flush) = &self.flush {
            let pending = user::no_user_code("pending", || flush.pending());
            assert_eq!(pending, self.model.pending(), "pending after {op:?}");
        }
        let closed = user::no_user_code("is_closed", || self.tracker.is_closed());
        assert_eq!(closed, self.model.closed);
        assert_eq!(self.foreign.in_flight(), self.foreign_sent);
    }

    /// Notes what a call returned, when tracing.
    pub(super) fn note(&mut self, what: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            trace.push((self.steps - 1, what()));
        }
    }

    /// Notes a planned panic that escaped `call`.
    pub(super) fn fired(&mut self, call: &'static str, (act, value): (Act, u64)) {
        let step = self.steps - 1;
        self.fired.push(Fired {
            step,
            call,
            act,
            value,
        });
    }

    pub(super) fn step(&mut self, op: &Op) {
        self.steps += 1;
        match op {
            Op::Send { partition, offset } => {
                let partition = partition % PARTITIONS;
                let offset = if self.model.progress {
                    self.progress_offset(partition, *offset)
                } else {
                    self.plain_offset(partition, *offset)
                };
                self.send(partition, offset);
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
                let real = user::no_user_code("begin_flush", || self.tracker.begin_flush());
                match (real, expected) {
                    (Ok(flush), Ok(())) => {
                        assert!(self.flush.is_none(), "two flushes alive");
                        self.flush = Some(flush);
                    }
                    (Err(error), Err(expected)) => assert_eq!(error, expected),
                    (real, model) => panic!("begin_flush: tracker {real:?}, model {model:?}"),
                }
            }
            Op::Wait => self.wait(),
            Op::Commit => {
                if let Some(flush) = self.flush.take() {
                    let real = user::no_user_code("commit", || flush.commit());
                    assert_eq!(real, self.model.commit(), "commit");
                }
            }
            Op::Abort => {
                if let Some(flush) = self.flush.take() {
                    user::no_user_code("abort", || flush.abort());
                    self.model.flush = None;
                }
            }
            Op::Interrupt => {
                user::no_user_code("interrupt", || self.tracker.interrupt());
                self.model.interrupt = true;
            }
            Op::Close => {
                user::no_user_code("close", || self.tracker.close());
                self.model.closed = true;
            }
            Op::Committable { stats } => self.committable(*stats),
            Op::Drain => {
                let real = user::no_user_code("drain", || self.tracker.drain(Duration::ZERO));
                // The model speaks `FlushError`, which a `DrainError` converts to.
                let real = real.map_err(inflight::FlushError::from);
                assert_eq!(real, self.model.drain(), "drain");
                self.note(|| format!("drain = {real:?}"));
            }
            Op::Revoke(partition) => self.revoke(partition % PARTITIONS),
            Op::DrainPartition(partition) => self.drain_partition(partition % PARTITIONS),
            Op::Arm { act, value, chance } => {
                if *chance < 64 {
                    let value = if act.on_partition() {
                        value % PARTITIONS
                    } else {
                        *value
                    };
                    user::arm(*act, value.into());
                }
            }
            Op::Progress => self.progress(),
            Op::SendBatch(batch) => self.send_batch(batch),
            Op::ResolveAll(op) => self.resolve_all(op),
        }
        self.check(op);
    }

    fn send(&mut self, partition: u8, offset: u64) {
        let outcome = self.model.send_outcome(partition, offset);
        let real = user::call(|| self.tracker.send(Part::new(partition), Off::new(offset)));
        let ticket = match real {
            Err(fired) => {
                assert!(
                    self.send_may_run(partition, offset, outcome, fired),
                    "send({partition}, {offset}) ran the planned {fired:?} panic \
                     (outcome {outcome:?}, partitions {:?})",
                    self.model.numbers
                );
                self.fired("send", fired);
                if matches!(fired.0, Act::PartitionDrop | Act::OffsetDrop) {
                    // The lookup had finished.
                    self.model.number(partition);
                }
                if fired.0 == Act::PartitionDrop {
                    // Backed out after installing the offset (or, on a
                    // progress tracker, failed after publishing it): it
                    // stays in the slot until the slot's reuse.
                    self.kept.insert(offset);
                }
                if fired.0 == Act::PartitionDrop && self.model.progress {
                    // Published, then failed: sent, with no ticket.
                    let id = self.model.sent(partition, offset, NO_TICKET);
                    self.model.resolve(id, true);
                    self.note(|| format!("send #{id}, failed by its partition's Drop"));
                }
                return;
            }
            Ok(real) => real,
        };
        let expected = self.model.send(partition, offset);
        match (ticket, expected) {
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
                self.note(|| format!("send #{id}"));
                self.tickets.push((ticket, id));
                self.kept.insert(offset);
            }
            (Err(error), Err(expected)) => {
                let refused = match error {
                    SendError::Full(..) => Refused::Full,
                    SendError::Closed(..) => Refused::Closed,
                    SendError::OutOfOrder(..) => Refused::OutOfOrder,
                    other => panic!("send: unexpected {other:?}"),
                };
                assert_eq!(refused, expected, "send");
                self.note(|| format!("send = {refused:?}"));

                // The record comes back: the harness drops it.
                let (p, o) = error.into_inner();
                assert_eq!(
                    (p.get(), o.get()),
                    (partition, offset),
                    "{refused:?} record"
                );
                p.defuse();
                o.defuse();
            }
            (real, model) => panic!("send: tracker {real:?}, model {model:?}"),
        }
    }

    /// Whether `send(partition, offset)` with this `outcome` may run the
    /// user code that panicked (see the module docs).
    pub(super) fn send_may_run(
        &self,
        partition: u8,
        offset: u64,
        outcome: Result<(), Refused>,
        fired: (Act, u64),
    ) -> bool {
        let (act, value) = fired;
        let numbered = (self.model.numbers.iter()).any(|&p| u64::from(p) == value);
        let own = value == u64::from(partition);
        // On a progress tracker: the offset's position first, and nothing
        // else for an offset of no position.
        let position = self.model.progress && value == offset;
        let looks_up = self.model.looks_up(offset);
        !self.model.closed
            && match act {
                Act::OffsetClone | Act::OffsetSeq => position,
                Act::PartitionHash => looks_up && own,
                Act::PartitionEq => looks_up && (own || numbered),
                Act::PartitionClone => looks_up && own && !numbered,
                Act::PartitionDrop => own && outcome.is_ok(),
                Act::OffsetDrop => looks_up && self.kept.contains(&value),
            }
    }

    /// Whether a call looking up `partition` as a key (`revoke`,
    /// `drain_partition`) may run the partition code that panicked: its
    /// `Hash` and `Eq`, and the `Eq` of a known partition.
    fn lookup_may_run(&self, partition: u8, (act, value): (Act, u64)) -> bool {
        let numbered = (self.model.numbers.iter()).any(|&p| u64::from(p) == value);
        let own = value == u64::from(partition);
        match act {
            Act::PartitionHash => own,
            Act::PartitionEq => own || numbered,
            _ => false,
        }
    }

    fn revoke(&mut self, partition: u8) {
        let expected = self.model.peek_revoke(partition);
        let (tracker, key) = (self.tracker, Part::new(partition));
        let real = user::call(|| {
            let revoked = tracker.revoke(&key);
            (revoked.released, revoked.committable.map(|o| o.get()))
        });
        key.defuse();
        match real {
            Ok(real) => {
                assert_eq!(
                    real, expected,
                    "revoke({partition}): (released, committable)"
                );
                assert_eq!(self.model.revoke(partition, false), expected);
                self.note(|| format!("revoke({partition}) = {real:?}"));
            }
            Err(fired) => {
                let clone = fired.0 == Act::OffsetClone && expected.1 == Some(fired.1);
                assert!(
                    clone || self.lookup_may_run(partition, fired),
                    "revoke({partition}) ran the planned {fired:?} panic, expected {expected:?}"
                );
                if clone {
                    // Released and ended; the advance put back.
                    self.model.revoke(partition, true);
                }
                self.fired("revoke", fired);
            }
        }
    }

    fn drain_partition(&mut self, partition: u8) {
        let (tracker, key) = (self.tracker, Part::new(partition));
        let real = user::call(|| tracker.drain_partition(&key, Duration::ZERO));
        key.defuse();
        match real {
            Ok(real) => {
                assert_eq!(
                    real,
                    self.model.drain_partition(partition),
                    "drain_partition"
                );
                self.note(|| format!("drain_partition({partition}) = {real:?}"));
            }
            Err(fired) => {
                assert!(
                    self.lookup_may_run(partition, fired),
                    "drain_partition({partition}) ran the planned {fired:?} panic"
                );
                // Nothing changed: it looks the key up first.
                self.fired("drain_partition", fired);
            }
        }
    }

    fn committable(&mut self, stats: bool) {
        let expected = self.model.peek_committable();
        let tracker = self.tracker;
        let real = user::call(|| {
            if stats {
                ModelCommittable::from(tracker.committable_with_stats())
            } else {
                ModelCommittable {
                    offsets: plain(&tracker.committable()),
                    ..ModelCommittable::default()
                }
            }
        });
        let call = if stats {
            "committable_with_stats"
        } else {
            "committable"
        };
        match real {
            Err(fired) => {
                let (act, value) = fired;
                let stat = stats
                    && (expected.stopped.iter().any(|&p| u64::from(p) == value)
                        || (expected.largest_backlog).is_some_and(|(p, _)| u64::from(p) == value));
                let legal = offsets_may_run(&expected.offsets, fired)
                    || (act == Act::PartitionClone && stat);
                assert!(
                    legal,
                    "{call} ran the planned {fired:?} panic, expected {expected:?}"
                );
                // Nothing taken: the model is unchanged.
                self.fired(call, fired);
            }
            Ok(real) if stats => {
                assert_eq!(real, expected, "committable_with_stats");
                self.model.take_committable();
                self.note(|| {
                    let offsets: BTreeMap<_, _> = real.offsets.iter().collect();
                    format!(
                        "committable = {offsets:?}, {} records, stopped {:?}",
                        real.committable_records, real.stopped
                    )
                });
            }
            Ok(real) => {
                assert_eq!(real.offsets, expected.offsets, "committable");
                self.model.take_committable();
                self.note(|| {
                    let offsets: BTreeMap<_, _> = real.offsets.iter().collect();
                    format!("committable = {offsets:?}")
                });
            }
        }
    }

    fn wait(&mut self) {
        let Some(flush) = &mut self.flush else {
            return;
        };
        let phase = self.model.flush.as_ref().expect("model flush").phase;
        let expected = self.model.wait();
        let before = user::calls();
        match user::call(|| flush.wait(Duration::ZERO)) {
            Ok(real) => {
                if real.is_err() {
                    assert_eq!(user::calls(), before, "a wait that failed ran user code");
                }
                let real = real.map(|offsets| plain(&offsets));
                assert_eq!(real, expected, "wait");
                self.note(|| format!("wait = {:?}", real.map(BTreeMap::from_iter)));
            }
            Err(fired) => {
                let legal = matches!(&expected, Ok(offsets) if offsets_may_run(offsets, fired));
                assert!(
                    legal,
                    "wait ran the planned {fired:?} panic, expected {expected:?}"
                );
                // Nothing changed: the flush is as ready as it was.
                self.model.flush.as_mut().expect("model flush").phase = phase;
                self.fired("wait", fired);
            }
        }
    }

    /// Disarms, resolves everything still in flight (acks; a released
    /// record's ticket answers `Revoked`), then a final flush must drain it
    /// and, unless a record of a current life failed, commit; a last flush
    /// is empty. Then every partition drains at once, and revoking each
    /// releases nothing and hands over nothing (`committable` took it all).
    /// `progress()` is checked once everything is resolved, and after the
    /// revokes (which leave no record in any current life: it reports
    /// nothing).
    pub(super) fn finish(&mut self) {
        user::disarm();
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
        self.step(&Op::Progress);
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
            .filter(|r| r.state == State::Failed && self.model.current(r))
            .count();
        if failed == 0 {
            assert_eq!(self.model.committed, self.model.records.len());
        }
        for partition in 0..PARTITIONS {
            self.step(&Op::DrainPartition(partition));
            assert_eq!(self.model.peek_revoke(partition), (0, None));
            self.step(&Op::Revoke(partition));
        }
        self.step(&Op::Committable { stats: true });
        self.step(&Op::Progress);
    }
}

/// Whether building `offsets` (as a map of clones) may run the user code
/// that panicked: the `Clone`, `Hash` or `Eq` of a partition in it, the
/// `Clone` of an offset in it.
fn offsets_may_run(offsets: &super::Offsets, (act, value): (Act, u64)) -> bool {
    let partition = offsets.keys().any(|&p| u64::from(p) == value);
    let offset = offsets.values().any(|&o| o == value);
    match act {
        Act::PartitionHash | Act::PartitionEq | Act::PartitionClone => partition,
        Act::OffsetClone => offset,
        Act::PartitionDrop | Act::OffsetDrop | Act::OffsetSeq => false,
    }
}

/// The `ops` target: an arbitrary operation sequence, real against model.
#[allow(dead_code)] // `fuzz-replay/tests/fuzz_replay.rs` calls `run_ops_traced`
pub fn run_ops(data: &[u8]) {
    let (setup, ops) = decode_ops(data);
    with_sim(setup, |sim| {
        for op in &ops {
            sim.step(op);
        }
    });
}

/// [`run_ops`], tracing what each call returned (see [`Traced`]).
pub fn run_ops_traced(data: &[u8]) -> Traced {
    let (setup, ops) = decode_ops(data);
    run_setup_ops(setup, false, &ops)
}

/// The setup and ops of an `ops` input.
fn decode_ops(data: &[u8]) -> (Setup, Vec<Op>) {
    let mut u = Unstructured::new(data);
    let setup = pick_ops_setup(&mut u, 16);
    let ops: Vec<Op> = u
        .arbitrary_iter::<Op>()
        .map(|iter| iter.take(MAX_OPS).map_while(Result::ok).collect())
        .unwrap_or_default();
    (setup, ops)
}

/// Runs `ops` on a tracker of `capacity`, with or without `watermarks` (and
/// on the model), then [`finish`](Sim::finish)es and drops the tracker.
/// Panics on any disagreement, and unless every partition and offset made
/// was dropped exactly once. Returns the planned panics that escaped.
pub fn run_op_list(capacity: Option<usize>, watermarks: bool, ops: &[Op]) -> Vec<Fired> {
    with_sim(Setup::new(capacity, watermarks), |sim| {
        for op in ops {
            sim.step(op);
        }
    })
}

/// What [`run_op_list_traced`] saw.
#[derive(Debug)]
pub struct Traced {
    /// The planned panics that escaped.
    pub fired: Vec<Fired>,
    /// What the calls returned (tracker and model agreeing), by step: `send
    /// #id`, `ack #id = Ok(())`, `revoke(0) = (1, Some(2))`, `committable =
    /// {..}, n records, stopped [..]`, `wait = ..`, `drain = ..`,
    /// `drain_partition(0) = ..`, `send = OutOfOrder`, `progress = {0:
    /// Progress { .. }}`.
    pub trace: Vec<(usize, String)>,
}

impl Traced {
    /// What step `step` returned (its last entry).
    pub fn at(&self, step: usize) -> &str {
        (self.trace.iter().rev())
            .find(|(s, _)| *s == step)
            .map(|(_, what)| what.as_str())
            .unwrap_or_else(|| panic!("step {step} returned nothing: {:#?}", self.trace))
    }
}

/// [`run_op_list`], tracing what each call of `ops` returned. With
/// `exact`, the model expects the contract exactly, not the tracker's
/// known deviation
/// ([`REVOKED_COUNTS_REPORTED_AGAIN`](super::model::REVOKED_COUNTS_REPORTED_AGAIN)).
pub fn run_op_list_traced(
    capacity: Option<usize>,
    watermarks: bool,
    exact: bool,
    ops: &[Op],
) -> Traced {
    run_setup_ops(Setup::new(capacity, watermarks), exact, ops)
}

/// [`run_op_list_traced`] on a tracker of any [`Setup`] (a progress
/// tracker, say). With `exact`, the model expects neither of the tracker's
/// known deviations
/// ([`PROGRESS_PANIC_LOSES_REPORTS`](super::PROGRESS_PANIC_LOSES_REPORTS)
/// is the other).
pub fn run_setup_ops(setup: Setup, exact: bool, ops: &[Op]) -> Traced {
    let mut trace = Vec::new();
    let fired = with_sim(setup, |sim| {
        sim.trace = Some(Vec::new());
        if exact {
            sim.model.expect_deviation(false);
            sim.reports.expect_deviation(false);
        }
        for op in ops {
            sim.step(op);
        }
        trace = sim.trace.take().unwrap_or_default();
    });
    Traced { fired, trace }
}

/// Runs `f` on a simulator of a fresh tracker, then finishes it, drops the
/// tracker and checks that every value made was dropped exactly once.
/// Returns the planned panics that escaped.
pub(super) fn with_sim(setup: Setup, f: impl FnOnce(&mut Sim<'_>)) -> Vec<Fired> {
    user::reset();
    let tracker = build_setup::<Part, Off>(setup);
    assert_eq!(tracker.capacity(), setup.capacity);
    assert_eq!(tracker.has_watermarks(), setup.watermarks);
    let foreign = Tracker::new();
    let mut sim = Sim::new(&tracker, &foreign, setup.progress);
    f(&mut sim);
    sim.finish();
    let fired = std::mem::take(&mut sim.fired);
    drop(sim);
    drop(tracker);
    assert_eq!(
        user::live(),
        0,
        "partitions and offsets leaked (> 0) or dropped twice (< 0)"
    );
    fired
}
