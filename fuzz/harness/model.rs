//! The sequential reference model of the tracker contract, [`Model`]: what
//! every call should return, and what it changes. The `ops` simulator
//! (`ops.rs`) drives it in lockstep with a real tracker.
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
//! that `close` did not refuse (a `Full` send numbers its partition too)
//! and whose partition lookup finished: a send that panicked in its
//! partition's `Hash`, `Eq` or `Clone` (the lookup, and the clone a new
//! partition's index entry takes) numbers nothing; one that panicked later,
//! in the `Drop` of an old offset (its slot's reuse) or of its partition
//! argument, has numbered it.
//! Without watermarks `committable` is empty and every statistic is zero.
//!
//! `drain(ZERO)` returns `Interrupted` if an interrupt is pending
//! (consuming it), else `Timeout { pending }` with the records in flight,
//! else `Ok`. It seals the open generation, which changes no flush's
//! covered records: a flush still covers everything not committed up to its
//! own seal.
//!
//! # Panics in user code
//!
//! The model itself knows no user code. When a planned panic escapes a
//! call, the simulator (see `ops.rs`) decides whether that call may run
//! that user code at all, then applies the call's effect up to the panic
//! with [`Model::number`] (a `send` whose lookup finished) or nothing at
//! all; [`Model::send_outcome`], [`Model::peek_committable`] and
//! [`Model::wait`] with a phase put back let it look without changing
//! anything.

use super::user::{Off, Part};
use super::{raw_id, Offsets, State};
use inflight::{BeginFlushError, Committable, FlushError, ResolveError};
use std::collections::BTreeMap;

/// One record sent.
#[derive(Debug)]
pub(super) struct Record {
    pub(super) partition: u8,
    pub(super) offset: u64,
    pub(super) raw: u64,
    pub(super) state: State,
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
pub(super) struct ModelCommittable {
    pub(super) offsets: Offsets,
    pub(super) committable_records: u64,
    pub(super) uncommittable_records: u64,
    pub(super) partitions_in_flight: usize,
    pub(super) largest_backlog: Option<(u8, u64)>,
    pub(super) stopped: Vec<u8>,
}

impl From<Committable<Part, Off>> for ModelCommittable {
    fn from(real: Committable<Part, Off>) -> Self {
        Self {
            offsets: plain(&real.offsets),
            committable_records: real.committable_records,
            uncommittable_records: real.uncommittable_records,
            partitions_in_flight: real.partitions_in_flight,
            largest_backlog: (real.largest_backlog.as_ref()).map(|(p, n)| (p.get(), *n)),
            stopped: real.stopped.iter().map(Part::get).collect(),
        }
    }
}

/// An offset map as plain values (reading it runs no user code).
pub(super) fn plain(offsets: &std::collections::HashMap<Part, Off>) -> Offsets {
    offsets.iter().map(|(p, o)| (p.get(), o.get())).collect()
}

/// Why `send` refused a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// `SendError::Closed`.
    Closed,
    /// `SendError::Full`.
    Full,
}

/// A flush's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Pending,
    Ready,
    Interrupted,
}

/// The flush alive, if any.
#[derive(Debug)]
pub(super) struct ModelFlush {
    /// Records before this index are covered (if not committed).
    seal: usize,
    pub(super) phase: Phase,
}

/// What a raw ticket should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
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
    pub(super) records: Vec<Record>,
    /// Records not resolved.
    live: usize,
    capacity: Option<usize>,
    watermarks: bool,
    /// Partitions in the tracker's numbering.
    pub(super) numbers: Vec<u8>,
    queues: BTreeMap<u8, ModelQueue>,
    /// Records not passed.
    unpassed: usize,
    pub(super) closed: bool,
    pub(super) interrupt: bool,
    pub(super) committed: usize,
    pub(super) flush: Option<ModelFlush>,
}

impl Model {
    /// A model of a fresh tracker.
    pub(super) fn new(capacity: Option<usize>, watermarks: bool) -> Self {
        Self {
            capacity,
            watermarks,
            ..Self::default()
        }
    }

    /// What `send` returns, without the side effect of numbering its
    /// partition (see [`send`](Self::send)).
    pub(super) fn send_outcome(&self) -> Result<(), Refused> {
        if self.closed {
            Err(Refused::Closed)
        } else if self.capacity.is_some_and(|c| self.live >= c) {
            Err(Refused::Full)
        } else {
            Ok(())
        }
    }

    /// Numbers `partition` if it is new: a send that the fast `Closed`
    /// check let through has looked it up.
    pub(super) fn number(&mut self, partition: u8) {
        if !self.numbers.contains(&partition) {
            self.numbers.push(partition);
        }
    }

    /// `send` up to its ticket: its outcome, and its partition numbered
    /// unless the tracker was closed (a `Full` send numbers it too). An
    /// accepted record is then entered with [`sent`](Self::sent).
    pub(super) fn send(&mut self, partition: u8) -> Result<(), Refused> {
        let outcome = self.send_outcome();
        if outcome != Err(Refused::Closed) {
            self.number(partition);
        }
        outcome
    }

    /// Enters an accepted record with its ticket; returns its number.
    pub(super) fn sent(&mut self, partition: u8, offset: u64, raw: u64) -> usize {
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

    /// Resolves record `id`.
    pub(super) fn resolve(&mut self, id: usize, fail: bool) {
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
    pub(super) fn in_flight(&self) -> usize {
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

    /// What `committable_with_stats` returns, without taking it (see
    /// [`take_committable`](Self::take_committable)).
    pub(super) fn peek_committable(&self) -> ModelCommittable {
        let mut result = ModelCommittable::default();
        if !self.watermarks {
            return result;
        }
        for (&partition, queue) in &self.queues {
            if queue.acked > queue.reported {
                let last = queue.records[queue.acked - 1];
                result.offsets.insert(partition, self.records[last].offset);
                result.committable_records += (queue.acked - queue.reported) as u64;
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

    /// A `committable` call that returned: its advances are taken.
    pub(super) fn take_committable(&mut self) {
        for queue in self.queues.values_mut() {
            queue.reported = queue.acked;
        }
    }

    pub(super) fn drain(&mut self) -> Result<(), FlushError> {
        if std::mem::take(&mut self.interrupt) {
            return Err(FlushError::Interrupted);
        }
        match self.in_flight() {
            0 => Ok(()),
            pending => Err(FlushError::Timeout { pending }),
        }
    }

    /// This tracker's id, once it issued a ticket.
    pub(super) fn id(&self) -> Option<u8> {
        self.records.first().map(|r| raw_id(r.raw))
    }

    pub(super) fn expect_raw(&self, raw: u64) -> Expect {
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

    pub(super) fn begin_flush(&mut self) -> Result<(), BeginFlushError> {
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

    pub(super) fn pending(&self) -> usize {
        self.covered()
            .iter()
            .filter(|r| self.in_flight_record(r))
            .count()
    }

    /// `wait(ZERO)`. Mutates only the pending interrupt (taken) and the
    /// flush's phase.
    pub(super) fn wait(&mut self) -> Result<Offsets, FlushError> {
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

    pub(super) fn commit(&mut self) -> Result<(), FlushError> {
        let flush = self.flush.take().expect("model: commit without a flush");
        if flush.phase != Phase::Ready {
            return Err(FlushError::NotReady);
        }
        self.committed = flush.seal;
        Ok(())
    }
}
