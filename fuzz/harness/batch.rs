//! Batches in the `ops` target: [`SendBatch`] (`Tracker::send_batch`) and
//! [`ResolveAll`] (`Tracker::ack_all` / `fail_all`), checked against the
//! model as the sequence of single calls they stand for.
//!
//! # `send_batch`
//!
//! The offsets are built as `Op::Send` builds one: the first from
//! `first` (the offset itself, or on a progress tracker the code
//! [`offset_of`](super::offset_of) reads), each next one above the one
//! before it by one, except the one at index `repeat`, which repeats it
//! (out of order on a progress tracker). `count % 132` offsets, so that a
//! batch crosses the tracker's 64-record chunks now and then; fewer once
//! the run has sent [`MAX_RECORDS`] records (the model's checks scan its
//! records, and a run must stay fast).
//!
//! The model walks the batch as a loop of `send`s that stops at the first
//! refusal: the tracker must have sent exactly the records before it,
//! each with a new ticket of a new live record, and refused with the same
//! reason (`Full`, `Closed` or `OutOfOrder`); `unsent` (one offset for
//! `Full` and `OutOfOrder`, up to 64 for `Closed`) and then `rest` must
//! give back exactly the offsets not sent, in order. The partition is
//! numbered as the sends would number it.
//!
//! # Panics in user code
//!
//! Batches run while a panic is armed, and the model follows them; the
//! tickets the batch pushed before the panic say how far it got (`n`):
//!
//! - on a progress tracker the batch is a loop of `send(partition.clone(),
//!   offset)`: the records before `n` were sent, and the panic must be the
//!   `Clone` of the batch's partition (before record `n`'s send, closed or
//!   not) or user code that record `n`'s `send` may run (see `ops.rs`),
//!   but for the partition argument's `Drop` (a clone's never panics);
//! - on the other trackers a chunk of up to 64 records looks its partition
//!   up once (`Hash`, `Eq`, the `Clone` of a new one), then takes a slot
//!   for each record (the `Drop` of an old offset); a panic backs the
//!   whole chunk out, so `n` is a multiple of 64, the records of the whole
//!   chunks before it were sent, and the panic must be user code that the
//!   `send` of record `n` may run (the lookup, or the `Drop` of an offset
//!   the tracker kept). The backed-out chunk's offsets stay in their slots,
//!   for later sends to drop.
//!
//! Either way, as for `send`, a panic in an old offset's `Drop` comes after
//! the lookup: the partition is numbered. The batch's partition is passed
//! by reference, an original the harness defuses after the call.
//!
//! # `ack_all` / `fail_all`
//!
//! A contiguous run of the live `Ticket`s held (of live or released
//! records), in held order or reversed, with a foreign tracker's ticket
//! put among them a quarter of the time. Every ticket is tried: each of a
//! live record resolves it; a foreign one is refused as `ForeignTracker`,
//! one of a released record as `Revoked` or `AlreadyResolved`; the error
//! counts both and names the first refusal's reason. `ack_all` runs no
//! user code; `fail_all` runs the `Clone` of the offsets it names (see
//! `user::resolving`).

use super::model::{Expect, Refused};
use super::ops::Sim;
use super::user::{self, Act, Off, Part};
use super::{peek_raw, raw_id, PARTITIONS};
use arbitrary::Arbitrary;
use inflight::{ResolveBatchError, ResolveError, Ticket};
use std::collections::HashSet;

/// The records a run may have sent before batches get shorter (see the
/// module docs).
pub const MAX_RECORDS: usize = 4096;

/// The tracker's chunk: the most records of a batch that enter at once,
/// and what a panic backs out.
const CHUNK: usize = 64;

/// `Op::SendBatch`: `send_batch(partition % 4, offsets)` (see the module
/// docs).
#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct SendBatch {
    /// Partition, modulo 4.
    pub partition: u8,
    /// The first offset, as `Op::Send`'s.
    pub first: u8,
    /// How many offsets, modulo 132.
    pub count: u8,
    /// The index of an offset equal to the one before it (none if past
    /// the end, or 0).
    pub repeat: u8,
}

/// `Op::ResolveAll`: `ack_all` (or `fail_all`) of several `Ticket`s (see
/// the module docs).
#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct ResolveAll {
    /// Where the run of tickets starts, modulo their number.
    pub from: u8,
    /// How many (as many as there are from `from`, at most).
    pub count: u8,
    /// `fail_all` rather than `ack_all`.
    pub fail: bool,
    /// Reversed.
    pub reverse: bool,
    /// Below 64: a foreign ticket goes in at this index (modulo the run's
    /// length plus one).
    pub foreign: u8,
}

/// What a batch did, as plain values.
enum Sent {
    /// Every offset was sent.
    All(usize),
    /// Refused: the reason, and the offsets given back (`unsent`, then
    /// `rest`), whose count of `unsent` is the second.
    Refused(Refused, usize, Vec<u64>),
    /// A planned panic escaped.
    Panicked((Act, u64)),
}

impl Sim<'_> {
    /// The offsets of `batch` (see the module docs).
    fn batch_offsets(&self, batch: &SendBatch, partition: u8) -> Vec<u64> {
        let room = MAX_RECORDS.saturating_sub(self.model.records.len());
        let count = (usize::from(batch.count) % 132).min(room);
        let mut offsets = Vec::with_capacity(count);
        let mut offset = if self.model.progress {
            self.progress_offset(partition, batch.first)
        } else {
            self.plain_offset(partition, batch.first)
        };
        for i in 0..count {
            if i > 0 && i != usize::from(batch.repeat) {
                offset = offset.wrapping_add(1);
            }
            offsets.push(offset);
        }
        offsets
    }

    /// `send_batch`, checked against the model's loop of sends.
    pub(super) fn send_batch(&mut self, batch: &SendBatch) {
        let partition = batch.partition % PARTITIONS;
        let offsets = self.batch_offsets(batch, partition);
        let (tracker, key) = (self.tracker, Part::new(partition));
        let mut tickets: Vec<Ticket> = Vec::new();
        let real = user::call(|| {
            let values = offsets.iter().map(|&o| Off::new(o));
            tracker.send_batch(&key, values, &mut tickets)
        });
        key.defuse();
        let sent = match real {
            Err(fired) => Sent::Panicked(fired),
            Ok(Ok(n)) => Sent::All(n),
            Ok(Err(error)) => {
                let reason = match error.reason {
                    inflight::Refused::Full => Refused::Full,
                    inflight::Refused::Closed => Refused::Closed,
                    inflight::Refused::OutOfOrder => Refused::OutOfOrder,
                    other => panic!("send_batch: unexpected {other:?}"),
                };
                let unsent = error.unsent.len();
                // Every offset not sent comes back: the harness drops them.
                let back = (error.into_offsets())
                    .map(|o| {
                        let value = o.get();
                        o.defuse();
                        value
                    })
                    .collect();
                Sent::Refused(reason, unsent, back)
            }
        };
        self.judge_batch(partition, &offsets, tickets, sent);
    }

    /// Walks the model through the batch's sends, checking what the
    /// tracker did (see the module docs).
    fn judge_batch(&mut self, partition: u8, offsets: &[u64], tickets: Vec<Ticket>, sent: Sent) {
        let n = tickets.len();
        if let Sent::All(count) = sent {
            assert_eq!(count, n, "send_batch: Ok(count), tickets pushed");
            assert_eq!(
                count,
                offsets.len(),
                "send_batch: Ok, not every offset sent"
            );
        }
        let mut raws: HashSet<u64> = (self.model.records.iter()).map(|r| r.raw).collect();
        let first_id = self.model.records.len();
        for (ticket, &offset) in tickets.into_iter().zip(offsets) {
            let expected = self.model.send(partition, offset);
            assert_eq!(
                expected,
                Ok(()),
                "send_batch({partition}, {offsets:?}) sent offset {offset} (record {} of it)",
                self.model.records.len() - first_id
            );
            let raw = peek_raw(&ticket);
            assert_ne!(raw as u32, 0, "a ticket with tag 0");
            if let Some(id) = self.model.id() {
                assert_eq!(raw_id(raw), id, "tickets of one tracker, two ids");
            }
            assert!(raws.insert(raw), "ticket {raw:#x} issued twice");
            let id = self.model.sent(partition, offset, raw);
            self.tickets.push((ticket, id));
            self.kept.insert(offset);
        }
        match sent {
            Sent::All(count) => self.note(|| format!("send_batch = Ok({count})")),
            Sent::Refused(reason, unsent, back) => {
                assert!(n < offsets.len(), "send_batch: refused after sending all");
                let expected = self.model.send(partition, offsets[n]);
                assert_eq!(
                    expected,
                    Err(reason),
                    "send_batch({partition}, {offsets:?}): refused offset {} \
                     (record {n} of it)",
                    offsets[n]
                );
                assert_eq!(back, offsets[n..], "send_batch: the offsets given back");
                let most = if reason == Refused::Closed { CHUNK } else { 1 };
                assert!(
                    (1..=most).contains(&unsent),
                    "send_batch: {reason:?} with {unsent} unsent"
                );
                self.note(|| format!("send_batch = {reason:?} after {n}"));
            }
            Sent::Panicked(fired) => self.batch_panicked(partition, offsets, n, fired),
        }
    }

    /// A planned panic escaped `send_batch` after it sent `n` records.
    fn batch_panicked(&mut self, partition: u8, offsets: &[u64], n: usize, fired: (Act, u64)) {
        assert!(
            n < offsets.len(),
            "send_batch({partition}, {offsets:?}) ran the planned {fired:?} panic after sending all"
        );
        let offset = offsets[n];
        let outcome = self.model.send_outcome(partition, offset);
        let (act, value) = fired;
        let own = value == u64::from(partition);
        let legal = if self.model.progress {
            (act == Act::PartitionClone && own)
                || (act != Act::PartitionDrop
                    && self.send_may_run(partition, offset, outcome, fired))
        } else {
            n.is_multiple_of(CHUNK)
                && act != Act::PartitionDrop
                && self.send_may_run(partition, offset, outcome, fired)
        };
        assert!(
            legal,
            "send_batch({partition}, {offsets:?}) ran the planned {fired:?} panic after \
             sending {n} (outcome of the next {outcome:?}, partitions {:?})",
            self.model.numbers
        );
        self.fired("send_batch", fired);
        if act == Act::OffsetDrop {
            // The lookup had finished.
            self.model.number(partition);
        }
        if !self.model.progress {
            // The backed-out chunk's offsets stay in their slots.
            let end = offsets.len().min(n + CHUNK);
            self.kept.extend(&offsets[n..end]);
        }
        self.note(|| format!("send_batch panicked after {n}"));
    }

    /// `ack_all` / `fail_all`, checked against the model.
    pub(super) fn resolve_all(&mut self, op: &ResolveAll) {
        let held = self.tickets.len();
        let from = usize::from(op.from) % held.max(1);
        let count = usize::from(op.count).min(held - from);
        let mut batch: Vec<(Ticket, Option<usize>)> = (self.tickets.drain(from..from + count))
            .map(|(ticket, id)| (ticket, Some(id)))
            .collect();
        if op.reverse {
            batch.reverse();
        }
        if op.foreign < 64 {
            let offset = self.foreign_sent as u64;
            let ticket = self.foreign.send(0, offset).expect("foreign send");
            self.foreign_sent += 1;
            batch.insert(usize::from(op.foreign) % (count + 1), (ticket, None));
        }
        // What each ticket should do, in order.
        let (mut resolves, mut refused, mut first) = (Vec::new(), 0, None);
        for (ticket, id) in &batch {
            let expect = match id {
                Some(id) => self.model.expect_raw(self.model.records[*id].raw),
                None => Expect::Error(ResolveError::ForeignTracker),
            };
            match expect {
                Expect::Resolves(id) => resolves.push(id),
                Expect::Error(ResolveError::ForeignTracker) if id.is_none() => {
                    refused += 1;
                    first.get_or_insert(expect);
                }
                Expect::Released => {
                    refused += 1;
                    first.get_or_insert(expect);
                }
                other => panic!("model: ticket {ticket:?} of record {id:?} expects {other:?}"),
            }
        }
        let tickets = batch.into_iter().map(|(ticket, _)| ticket);
        let real = user::resolving("ack_all / fail_all", op.fail, || {
            if op.fail {
                self.tracker.fail_all(tickets)
            } else {
                self.tracker.ack_all(tickets)
            }
        });
        let verb = if op.fail { "fail_all" } else { "ack_all" };
        let Some(real) = real else {
            // A naming `Clone` panicked after the batch was resolved.
            for id in resolves {
                self.model.resolve(id, op.fail);
            }
            self.note(|| format!("{verb} = panicked naming a failure"));
            return;
        };
        match (&real, first) {
            (Ok(resolved), None) => assert_eq!(*resolved, resolves.len(), "{verb}"),
            (Err(error), Some(first)) => {
                let ResolveBatchError {
                    resolved,
                    refused: real_refused,
                    first: reason,
                } = *error;
                assert_eq!(
                    (resolved, real_refused),
                    (resolves.len(), refused),
                    "{verb}: (resolved, refused)"
                );
                let reasons: &[ResolveError] = match first {
                    Expect::Released => &[ResolveError::Revoked, ResolveError::AlreadyResolved],
                    _ => &[ResolveError::ForeignTracker],
                };
                assert!(
                    reasons.contains(&reason),
                    "{verb}: first refusal {reason:?}"
                );
            }
            (real, _) => panic!(
                "{verb}: {real:?}, expected {} resolved, {refused} refused",
                resolves.len()
            ),
        }
        for id in resolves {
            self.model.resolve(id, op.fail);
        }
        self.note(|| format!("{verb} = {real:?}"));
    }
}
