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
//! without, until it is resolved. The capacity counts what `in_flight()`
//! counts: on a tracker with watermarks, acked (or failed) records held
//! behind an unresolved one of their partition count against it until
//! their partition's passed prefix reaches them.
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
//! # Revoke and drain_partition
//!
//! Each partition has a *life*, counted by the revokes of it once numbered;
//! a record belongs to its partition's life at its send. `revoke(p)` of a
//! partition never numbered returns `released == 0`, `committable == None`
//! and changes nothing. Otherwise it:
//!
//! - releases every unresolved record of `p` (state `Released`): no longer
//!   live or in flight, pending for no flush or drain, its capacity given
//!   back; `released` is their count. On a watermark tracker the revoke's
//!   own advance passes them (every earlier record of `p` is resolved by
//!   then), and with them every record of `p` still queued. Resolving a
//!   released record's ticket, typed or raw, answers `Revoked`, or
//!   `AlreadyResolved` once its slot was reused (either is accepted), and
//!   changes nothing;
//! - on a watermark tracker, returns as `committable` the last offset of
//!   `p`'s acked prefix if it grew since a `committable` call last took
//!   `p` (the advance no call took), and takes that advance, its records
//!   included (`committable_records` never counts them later); without
//!   watermarks `committable` is `None`;
//! - ends the life: `p`'s queue starts afresh (a new acked prefix, not
//!   stopped), a flush reports only records of their partition's current
//!   life (its offsets are the latest covered offset per partition among
//!   those, and `Failed { failed }` counts only their failures, so that a
//!   flush whose only failures are of ended lives returns offsets).
//!
//! A revoke whose `Clone` of the ended life's last offset panics has
//! released the records and ended the life, but puts the advance back
//! (`ended`): the next `committable` call returns that offset (a newer
//! life's advance, if one came meanwhile, takes its place in the map, its
//! count adding the ended one's), or a later revoke of `p` returns it if
//! no newer life's advance came meanwhile (else it returns that one and
//! drops the put-back one).
//!
//! `drain_partition(p, ZERO)` of a partition never numbered is `Ok` (a
//! pending interrupt stays pending); else `Interrupted` if an interrupt is
//! pending (consuming it), else `Timeout { pending }` with the records of
//! `p` not resolved (on a watermark tracker: not passed), else `Ok`.
//!
//! Known deviation ([`REVOKED_COUNTS_REPORTED_AGAIN`]): the tracker reports
//! the records of an advance a revoke took (or dropped) again, in the
//! `committable_records` of the next call that returns an offset of `p`.
//!
//! # Progress trackers
//!
//! On a progress tracker (which keeps watermarks) a record's offset is its
//! position. `send` returns, in this order: `Closed` after `close`;
//! `OutOfOrder` for the offset `u64::MAX` (no position: refused before the
//! partition is looked up, so it numbers nothing); `OutOfOrder` if the
//! partition owes another offset in its current life (one refused `Full`
//! before: a refused offset is owed until it is sent or the partition is
//! revoked); `OutOfOrder` if the partition's current life has a record
//! (whatever became of it) at or above the offset; `Full` at capacity, and
//! the partition then owes the offset; else the record is sent, and if it
//! was the owed one the debt is paid. The
//! metadata budget is large enough ([`BUDGET`](super::BUDGET)) that it
//! never refuses a send here. What `progress()` reports is in
//! `progress.rs`.
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
use inflight::{BeginFlushError, Committable, DrainError, FlushError, ResolveError, NO_POSITION};
use std::collections::BTreeMap;

/// The raw ticket of a record whose ticket no one got: a progress
/// tracker's send that published its record, then panicked in its
/// partition's `Drop`, failed the record. No ticket has tag 0, so it names
/// no record.
pub(super) const NO_TICKET: u64 = 0;

/// Whether the model expects the tracker's known deviation from the
/// contract (see the module docs): `Tracker::revoke` takes the ended life's
/// last mark without reporting its count (`Queue::report`), so the next
/// `committable_with_stats` returning an offset of the partition counts
/// those records again in `committable_records`. `true` while `src/` has
/// it, so that fuzzing goes past it; `model_revoked_committable_taken_once`
/// in `fuzz-replay/tests/fuzz_replay.rs` shows it with `false`.
pub const REVOKED_COUNTS_REPORTED_AGAIN: bool = false;

/// One record sent.
#[derive(Debug)]
pub(super) struct Record {
    pub(super) partition: u8,
    pub(super) offset: u64,
    pub(super) raw: u64,
    pub(super) state: State,
    /// In its partition's passed prefix (see the module docs).
    passed: bool,
    /// Its partition's life at its send.
    life: u32,
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
    /// `SendError::OutOfOrder` (a progress tracker's).
    OutOfOrder,
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
    /// A released record's: `Revoked`, or `AlreadyResolved` once its slot
    /// was reused.
    Released,
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
    /// A progress tracker: sends must rise per partition and life.
    pub(super) progress: bool,
    /// Partitions in the tracker's numbering.
    pub(super) numbers: Vec<u8>,
    queues: BTreeMap<u8, ModelQueue>,
    /// Records not passed.
    unpassed: usize,
    /// Each numbered partition's life: the revokes it saw.
    lives: BTreeMap<u8, u32>,
    /// An ended life's advance that a panicked revoke put back: its offset
    /// and count (see the module docs).
    ended: BTreeMap<u8, (u64, u64)>,
    /// Counts of advances revokes took, which the tracker reports again
    /// (see [`REVOKED_COUNTS_REPORTED_AGAIN`]).
    debt: BTreeMap<u8, u64>,
    /// On a tracker with watermarks, the offset each partition owes and the
    /// life it owes it in: refused for any reason but order, so no other offset
    /// of that life is accepted until it is sent (see the module docs).
    owed: BTreeMap<u8, (u32, u64)>,
    /// Expect the tracker's known deviation.
    deviation: bool,
    pub(super) closed: bool,
    pub(super) interrupt: bool,
    pub(super) committed: usize,
    pub(super) flush: Option<ModelFlush>,
}

impl Model {
    /// A model of a fresh tracker (a progress tracker keeps watermarks).
    pub(super) fn new(capacity: Option<usize>, watermarks: bool, progress: bool) -> Self {
        assert!(
            watermarks || !progress,
            "model: progress without watermarks"
        );
        Self {
            capacity,
            watermarks,
            progress,
            deviation: REVOKED_COUNTS_REPORTED_AGAIN,
            ..Self::default()
        }
    }

    /// Expect the contract exactly, or the tracker's known deviation from it
    /// (see [`REVOKED_COUNTS_REPORTED_AGAIN`]).
    pub(super) fn expect_deviation(&mut self, deviation: bool) {
        self.deviation = deviation;
    }

    /// `partition`'s current life.
    pub(super) fn life(&self, partition: u8) -> u32 {
        self.lives.get(&partition).copied().unwrap_or(0)
    }

    /// Whether `record` belongs to its partition's current life.
    pub(super) fn current(&self, record: &Record) -> bool {
        record.life == self.life(record.partition)
    }

    /// What `send(partition, offset)` returns, without the side effect of
    /// numbering its partition (see [`send`](Self::send)).
    pub(super) fn send_outcome(&self, partition: u8, offset: u64) -> Result<(), Refused> {
        if self.closed {
            Err(Refused::Closed)
        } else if !self.looks_up(offset)
            || (self.watermarks && self.owes_other(partition, offset))
            || (self.progress && self.last_in_life(partition).is_some_and(|l| offset <= l))
        {
            // No position; another offset owed; not above the life's last.
            Err(Refused::OutOfOrder)
        } else if self.capacity.is_some_and(|c| self.in_flight() >= c) {
            Err(Refused::Full)
        } else {
            Ok(())
        }
    }

    /// The offset `partition` owes in its current life, if any.
    pub(super) fn owed_now(&self, partition: u8) -> Option<u64> {
        self.owed
            .get(&partition)
            .filter(|&&(life, _)| life == self.life(partition))
            .map(|&(_, owed)| owed)
    }

    /// Whether `partition` owes an offset other than `offset` in its
    /// current life.
    fn owes_other(&self, partition: u8, offset: u64) -> bool {
        self.owed
            .get(&partition)
            .is_some_and(|&(life, owed)| life == self.life(partition) && owed != offset)
    }

    /// Whether a send of `offset` that `close` let through looks its
    /// partition up: on a progress tracker, not one of no position.
    pub(super) fn looks_up(&self, offset: u64) -> bool {
        !(self.progress && offset == NO_POSITION)
    }

    /// The offset of `partition`'s last record in its current life (what
    /// a progress tracker's next send there must exceed).
    pub(super) fn last_in_life(&self, partition: u8) -> Option<u64> {
        let life = self.life(partition);
        (self.records.iter().rev())
            .find(|r| r.partition == partition && r.life == life)
            .map(|r| r.offset)
    }

    /// Numbers `partition` if it is new: a send that the fast `Closed`
    /// check let through has looked it up.
    pub(super) fn number(&mut self, partition: u8) {
        if !self.numbers.contains(&partition) {
            self.numbers.push(partition);
        }
    }

    /// `send` up to its ticket: its outcome, and its partition numbered
    /// unless the tracker was closed or (on a progress tracker) the offset
    /// is no position (a `Full` or `OutOfOrder` send numbers it too). An
    /// accepted record is then entered with [`sent`](Self::sent).
    pub(super) fn send(&mut self, partition: u8, offset: u64) -> Result<(), Refused> {
        let outcome = self.send_outcome(partition, offset);
        if !self.closed && self.looks_up(offset) {
            self.number(partition);
            if self.watermarks && outcome == Err(Refused::Full) {
                // Refused for want of room, not for order: owed.
                let life = self.life(partition);
                self.owed.insert(partition, (life, offset));
            }
        }
        outcome
    }

    /// Enters an accepted record with its ticket ([`NO_TICKET`] for none);
    /// returns its number.
    pub(super) fn sent(&mut self, partition: u8, offset: u64, raw: u64) -> usize {
        let life = self.life(partition);
        if self.progress {
            assert!(
                self.last_in_life(partition).is_none_or(|l| l < offset),
                "model: a progress tracker's record out of order"
            );
        }
        // Sending the owed offset pays the debt.
        if self.watermarks && self.owed.get(&partition) == Some(&(life, offset)) {
            self.owed.remove(&partition);
        }
        self.records.push(Record {
            partition,
            offset,
            raw,
            state: State::Live,
            passed: false,
            life,
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
        let partition = record.partition;
        self.advance(partition);
    }

    /// Moves `partition`'s passed and acked prefixes over what is resolved.
    fn advance(&mut self, partition: u8) {
        let queue = self.queues.get_mut(&partition).expect("queued");
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

    /// What `revoke(partition)` returns: `released` and `committable`,
    /// without changing anything (see [`revoke`](Self::revoke)).
    pub(super) fn peek_revoke(&self, partition: u8) -> (usize, Option<u64>) {
        if !self.numbers.contains(&partition) {
            return (0, None);
        }
        let released = (self.records.iter())
            .filter(|r| r.partition == partition && r.state == State::Live)
            .count();
        (released, self.revoke_advance(partition).0)
    }

    /// The ended life's advance a revoke of `partition` (numbered) takes:
    /// the offset it returns, and the count it takes with it (see the
    /// module docs). Releasing its records does not change it: the acked
    /// prefix stops at the first of them.
    fn revoke_advance(&self, partition: u8) -> (Option<u64>, u64) {
        let ended = self.ended.get(&partition).map_or(0, |&(_, count)| count);
        let Some(queue) = self.queues.get(&partition).filter(|_| self.watermarks) else {
            return (None, ended);
        };
        let grew = queue.acked > queue.reported;
        let offset = grew.then(|| self.records[queue.records[queue.acked - 1]].offset);
        // An advance a panicked revoke put back, no newer one since: this
        // revoke hands it out.
        let offset = offset.or(self.ended.get(&partition).map(|&(offset, _)| offset));
        (offset, (queue.acked - queue.reported) as u64 + ended)
    }

    /// `revoke(partition)`: returns `released` and `committable` (see the
    /// module docs). With `clone_panicked`, the `Clone` of the offset it
    /// was about to return panicked: the records are released and the life
    /// ended, but the advance is put back for the next `committable` call.
    pub(super) fn revoke(&mut self, partition: u8, clone_panicked: bool) -> (usize, Option<u64>) {
        if !self.numbers.contains(&partition) {
            assert!(!clone_panicked, "model: a revoke of nothing cloned");
            return (0, None);
        }
        let mut released = 0;
        for record in &mut self.records {
            if record.partition == partition && record.state == State::Live {
                record.state = State::Released;
                released += 1;
            }
        }
        self.live -= released;
        let (offset, count) = self.revoke_advance(partition);
        self.ended.remove(&partition);
        if self.queues.contains_key(&partition) {
            self.advance(partition);
            let queue = &self.queues[&partition];
            assert_eq!(
                queue.passed,
                queue.records.len(),
                "model: a revoke passes all"
            );
        }
        match (offset, clone_panicked) {
            (Some(offset), true) => {
                self.ended.insert(partition, (offset, count));
            }
            (None, true) => panic!("model: a revoke cloned no offset"),
            (_, false) if self.deviation && count > 0 => {
                *self.debt.entry(partition).or_default() += count;
            }
            (_, false) => {}
        }
        // The next life: a fresh queue.
        self.queues.insert(partition, ModelQueue::default());
        *self.lives.entry(partition).or_default() += 1;
        (released, offset)
    }

    /// `drain_partition(partition, ZERO)` (see the module docs).
    pub(super) fn drain_partition(&mut self, partition: u8) -> Result<(), DrainError> {
        if !self.numbers.contains(&partition) {
            return Ok(());
        }
        if std::mem::take(&mut self.interrupt) {
            return Err(DrainError::Interrupted);
        }
        let pending = (self.records.iter())
            .filter(|r| r.partition == partition && self.in_flight_record(r))
            .count();
        match pending {
            0 => Ok(()),
            pending => Err(DrainError::Timeout { pending }),
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
            let mut offset = None;
            if queue.acked > queue.reported {
                let last = queue.records[queue.acked - 1];
                offset = Some(self.records[last].offset);
                result.committable_records += (queue.acked - queue.reported) as u64;
            }
            // An ended life's advance a panicked revoke put back: a newer
            // life's advance takes its place in the map.
            if let Some(&(ended, count)) = self.ended.get(&partition) {
                offset = offset.or(Some(ended));
                result.committable_records += count;
            }
            if let Some(offset) = offset {
                result.offsets.insert(partition, offset);
                result.committable_records += self.debt.get(&partition).copied().unwrap_or(0);
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
        let returned = self.peek_committable().offsets;
        for partition in returned.keys() {
            self.debt.remove(partition);
        }
        self.ended.clear();
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
        (self.records.iter())
            .find(|r| r.raw != NO_TICKET)
            .map(|r| raw_id(r.raw))
    }

    /// The record whose ticket is `raw`, if any.
    pub(super) fn record_of(&self, raw: u64) -> Option<usize> {
        if raw == NO_TICKET {
            return None;
        }
        self.records.iter().position(|r| r.raw == raw)
    }

    pub(super) fn expect_raw(&self, raw: u64) -> Expect {
        if let Some(id) = self.record_of(raw) {
            return match self.records[id].state {
                State::Live => Expect::Resolves(id),
                State::Acked | State::Failed => Expect::Error(ResolveError::AlreadyResolved),
                State::Released => Expect::Released,
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
        // Only the current lives count: a revoke forgives its partition's
        // failures and ends the reporting of its records.
        let failed = self
            .covered()
            .iter()
            .filter(|r| r.state == State::Failed && !self.in_flight_record(r) && self.current(r))
            .count();
        let mut offsets = Offsets::new();
        for record in self.covered().iter().filter(|r| self.current(r)) {
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
