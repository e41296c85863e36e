//! Batches: `send_batch` and `ack_all` / `fail_all`.
//!
//! A source polls records in batches and a sink often reports them in
//! batches; the per-record steps that only bookkeeping needs are then done
//! once per batch. A chunk of up to [`CHUNK`] records of one partition
//! takes one count-shard entry (`enter` with `n`), and only its last record
//! is installed in the partition's cell: the others are never the
//! partition's latest in their generation, so nothing holds them. Each
//! record still takes its own slot, tag and publish, so each ticket
//! resolves on its own, in any order. A resolution batch leaves each
//! generation once per run of tickets that entered it through one shard,
//! returns its permits in one step, advances each run of one partition's
//! watermark once, and wakes once.
//!
//! User code (the iterators, `P`'s `Hash` and `Eq` once per chunk, an old
//! offset's `Drop` in `alloc`, wakers) runs either before a chunk takes
//! anything or while a guard can back the chunk out; see [`Chunk`] and
//! [`Resolving`].

use crate::cell::Latest;
use crate::counts::{entered_at, entered_from, Route, Shards, SHARDS};
use crate::generation::{Generation, Installed};
use crate::mode::Mode;
use crate::send::inline_bits;
use crate::slab::{Outcome, Slot, HELD, QUEUE_HOLDS};
use crate::sync::{fence, thread_index, Ordering};
use crate::ticket::{RawTicket, Ticket};
use crate::watermark::{Run, Watermarks};
use crate::{Limit, Refused, ResolveBatchError, ResolveError, SendBatchError, SendError, Tracker};
use std::hash::Hash;
use std::mem::MaybeUninit;

/// The most records of a batch that enter a generation in one step.
pub(crate) const CHUNK: usize = 64;

impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// Sends `offsets`, in order, as records of `partition`, pushing each
    /// record's ticket onto `tickets`; returns how many were sent.
    ///
    /// The same as calling [`send`](Self::send) for each offset, and
    /// cheaper: up to 64 records at a time enter the open generation in one
    /// atomic step, and only the last of them becomes the partition's
    /// latest record there. Each ticket still resolves on its own, in any
    /// order ([`ack_all`](Self::ack_all) resolves many at once). A flush
    /// begun after `send_batch` returns covers every record it sent; one
    /// begun during it covers a prefix of them.
    ///
    /// At the first offset the tracker refuses, the batch stops: the
    /// records before it are sent (their tickets are in `tickets`), and the
    /// error gives back the refused offsets and the iterator's rest, in
    /// order, so nothing is lost ([`SendBatchError::into_offsets`]). `Full`
    /// and `OutOfOrder` refuse one offset; `Closed` may refuse up to 64
    /// that were taken from the iterator together.
    ///
    /// On a [progress](crate::Builder::progress) tracker each record is
    /// checked for order and budget on its own: the batch is a loop of
    /// sends, with `partition` cloned for each.
    ///
    /// Allocates nothing when `tickets` has room (reuse one `Vec`), beyond
    /// what `send` allocates; the error path allocates its `Vec` of offsets.
    ///
    /// ```
    /// use inflight::{Refused, Tracker};
    ///
    /// let tracker = Tracker::with_capacity(3);
    /// let mut tickets = Vec::new();
    /// let err = tracker.send_batch(&"orders-0", 10_u64..15, &mut tickets).unwrap_err();
    /// assert_eq!(tickets.len(), 3); // 10, 11 and 12 are in flight
    /// assert_eq!(err.reason, Refused::Full);
    /// assert_eq!(err.into_offsets().collect::<Vec<_>>(), [13, 14]);
    /// assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(3));
    /// assert_eq!(tracker.in_flight(), 0);
    /// ```
    pub fn send_batch<I>(
        &self,
        partition: &P,
        offsets: I,
        tickets: &mut Vec<Ticket>,
    ) -> Result<usize, SendBatchError<O, I::IntoIter>>
    where
        I: IntoIterator<Item = O>,
    {
        let mut offsets = offsets.into_iter();
        let mut sent = 0;
        if M::PROGRESS {
            for offset in offsets.by_ref() {
                // User code (`Clone`), before anything is taken.
                match self.send(partition.clone(), offset) {
                    Ok(ticket) => {
                        tickets.push(ticket);
                        sent += 1;
                    }
                    Err(e) => {
                        let reason = Refused::of(&e);
                        let (_, offset) = e.into_inner();
                        return Err(SendBatchError::new(reason, vec![offset], offsets));
                    }
                }
            }
            return Ok(sent);
        }
        loop {
            match self.send_chunk(partition, &mut offsets, tickets) {
                Ok(n) => {
                    sent += n;
                    if n < CHUNK {
                        return Ok(sent);
                    }
                }
                Err((reason, unsent)) => {
                    return Err(SendBatchError::new(reason, unsent, offsets));
                }
            }
        }
    }

    /// Sends up to [`CHUNK`] offsets from `offsets` in one entry; returns
    /// how many (fewer than `CHUNK` only when `offsets` ran out), or the
    /// refusal and the offsets refused (after sending those before them).
    pub(crate) fn send_chunk(
        &self,
        partition: &P,
        offsets: &mut impl Iterator<Item = O>,
        tickets: &mut Vec<Ticket>,
    ) -> Result<usize, (Why, Vec<O>)> {
        let Some(first) = offsets.next() else {
            return Ok(0);
        };
        // Relaxed: a fast path only; the re-check after entering decides.
        if self.closed.load(crate::sync::Ordering::Relaxed) {
            return Err(((Refused::Closed, None), vec![first]));
        }
        // User code: `P`'s `Hash` and `Eq` (and `Clone`, for a new
        // partition), while nothing is taken.
        let home = thread_index();
        let hint = self.shards.hint(home);
        let Some((number, lifecycle)) = self.partitions.number_hinted(partition, hint) else {
            return Err(((Refused::Full, Some(Limit::Internal)), vec![first]));
        };
        // Acquire: as in `send`, pairs with a revoke's Release bump.
        let life = lifecycle.life.load(crate::sync::Ordering::Acquire);
        // Every record is queued on a watermark tracker; only the chunk's
        // last is held, below.
        let holds = if M::WATERMARKS { QUEUE_HOLDS } else { 0 };
        let mut chunk = Chunk {
            tracker: self,
            records: [const { MaybeUninit::uninit() }; CHUNK],
            len: 0,
            holds,
            last_held: false,
            entered: None,
        };
        let mut refused = None;
        let mut next = Some(first);
        while let Some(offset) = next.take() {
            // User code: an old offset's `Drop` (alloc puts the slot back).
            let Some((index, slot)) = self.slots.alloc(home) else {
                let key = self.owed_key(&offset); // user code: `chunk` backs out
                refused = Some(((Refused::Full, Some(Limit::Internal)), offset, key));
                break;
            };
            if !self.take_permit(home) {
                self.slots.recycle_slot(index, slot);
                let key = self.owed_key(&offset); // user code: `chunk` backs out
                refused = Some(((Refused::Full, Some(Limit::Capacity)), offset, key));
                break;
            }
            // `number` < MAX_PARTITIONS < 2^32. On a watermark tracker the
            // record is prepared as a send's (the queue links it before it
            // is published); on a barrier tracker it is only filled, and
            // takes its tag when it is published (tag 0 until then).
            let tag = if M::WATERMARKS {
                self.slots.prepare(slot, offset, number as u32, life, holds)
            } else {
                // Release fence: the slot's reuse (its acquire from the free
                // list, after its last record's resolution) before the
                // fields `fill` writes, as `stamp`'s fence does for a send:
                // an `is_current` that reads one of them without holding
                // the slot then sees, after its Acquire fence, that the
                // slot's state moved on from the ticket it checks. Free on
                // x86.
                fence(Ordering::Release);
                self.slots.fill(slot, offset, number as u32, life);
                0
            };
            chunk.push((index, tag, slot));
            if chunk.len == CHUNK {
                break;
            }
            next = offsets.next(); // user code: `chunk` backs out on a panic
        }
        let n = chunk.len;
        if n == 0 {
            let (reason, offset, key) = refused.expect("a chunk stops early only when refused");
            return Err((self.owe_refused(reason, number, key, life), vec![offset]));
        }
        // Room for the tickets before anything is published: a panic in
        // the allocation backs the chunk out.
        tickets.reserve(n);
        // The chunk's last record will be its partition's latest in the
        // generation: its cell holds it, and it needs its tag for that;
        // unless the tracker keeps its offset inline, in the cell itself.
        let (last, tag, last_slot) = chunk.get(n - 1);
        // SAFETY: the slot is ours until it is published.
        let bits = inline_bits::<O, M>(unsafe { last_slot.value() });
        let held = bits.is_none();
        if held && tag == 0 {
            chunk.set_tag(n - 1, self.slots.stamp(last_slot, HELD));
        } else if held {
            self.slots.hold_prepared(last_slot, HELD);
        }
        chunk.last_held = held;

        #[cfg(not(inflight_mutant = "split_batch_enter"))]
        let (generation, wakes) = self.enter(home, n as u64);
        // Mutant `split_batch_enter` (loom suite only): the chunk enters one
        // record at a time, so a flush begun meanwhile covers part of it.
        #[cfg(inflight_mutant = "split_batch_enter")]
        let (generation, wakes) = {
            let mut entered = self.enter(home, 1);
            for _ in 1..n {
                entered = self.enter(home, 1);
            }
            entered
        };
        let entered = entered_at(generation, home % SHARDS, Shards::owns(home));
        chunk.entered = Some((entered, generation));
        if wakes {
            self.wake(true, false); // user code: `chunk` backs out if it panics
        }
        // Acquire: as in `send`; the chunk entered in one step, so a final
        // flush covers all of it or the close is seen here.
        if self.closed.load(crate::sync::Ordering::Acquire) {
            let mut unsent = chunk.take_back();
            unsent.extend(refused.map(|(_, offset, _)| offset));
            return Err(((Refused::Closed, None), unsent));
        }
        for i in 0..n {
            let (index, _, slot) = chunk.get(i);
            self.slots.set_generation(slot, entered);
            if M::WATERMARKS && i + 1 < n {
                // In offset order: the queue takes the chunk as one chain.
                Watermarks::chain(&self.slots, index, chunk.get(i + 1).0);
            }
        }
        if let Some(watermarks) = self.marks() {
            // Before publishing, all at once: a record's resolution must
            // find it linked. A partition that owes an offset takes the
            // chunk only if its first record is the owed one (see "Owed
            // offsets" in `watermark::order`).
            let run = Run {
                first: chunk.get(0).0,
                last,
                n: n as u64,
                tag: chunk.get(n - 1).1,
            };
            let linked = match watermarks.look(number) {
                (queue, Some(tail)) => {
                    watermarks.link(&self.slots, queue, run, tail);
                    Ok(())
                }
                (queue, None) => {
                    // SAFETY: the slot is ours until it is published.
                    let first = unsafe { chunk.get(0).2.value() };
                    let key = (self.progress.key_of)(first); // user code: `chunk` backs out
                    watermarks.link_owing(&self.slots, queue, run, key, life)
                }
            };
            if linked.is_err() {
                let mut unsent = chunk.take_back();
                unsent.extend(refused.map(|(_, offset, _)| offset));
                return Err(((Refused::OutOfOrder, None), unsent));
            }
        }
        // Nothing below can fail or run user code but the wakers at the end.
        let mut chunk = std::mem::ManuallyDrop::new(chunk);
        let latest = bits.map_or(Latest::Slot(last), Latest::Bits);
        match generation.install(number, latest, (life, &lifecycle.life), M::INLINE) {
            Installed::First => {}
            // As in `send`: frees the displaced record's slot if resolved.
            Installed::Displaced(displaced) => self.slots.release(displaced, HELD),
            // As in `send`: the chunk is of an ended life, and releases
            // itself below.
            Installed::Outranked if held => self.slots.unhold_prepared(last_slot, HELD),
            Installed::Outranked => {}
        }
        for i in 0..n {
            let (index, tag, slot) = chunk.get(i);
            let tag = if tag == 0 {
                // Nothing reached it: its tag and `LIVE` in one step.
                let tag = self.slots.publish_filled(slot);
                chunk.set_tag(i, tag);
                tag
            } else if held && i + 1 == n {
                // The cell holds it: a newer record may clear `HELD` now.
                self.slots.publish(slot);
                tag
            } else {
                // Queued, not held: nothing else writes its state yet.
                self.slots.publish_unheld(slot);
                tag
            };
            tickets.push(Ticket::new(self.id, index, tag));
        }
        // The light barrier and life re-check of `install_and_publish`,
        // once for the chunk: a revoke's scan that comes after its heavy
        // barrier sees every publish above, or this load sees its bump.
        // Mutant `unfenced_batch` (loom suite only): the chunk's barrier is
        // left out, so a revoke and the chunk may each miss the other.
        #[cfg(not(inflight_mutant = "unfenced_batch"))]
        crate::sync::light_barrier();
        // Acquire: what a revoke did before its bump.
        // Mutant `stale_life` (loom suite only), as in `install_and_publish`.
        #[cfg(inflight_mutant = "stale_life")]
        let now = life;
        #[cfg(not(inflight_mutant = "stale_life"))]
        let now = lifecycle.life.load(crate::sync::Ordering::Acquire);
        if now != life {
            let (mut wakes, mut room) = (false, false);
            for i in 0..n {
                let (index, tag, _) = chunk.get(i);
                let (w, r) = self.release_late(index, number as u32, tag, lifecycle);
                wakes |= w;
                room |= r;
            }
            self.wake(wakes, room); // user code, last
        }
        match refused {
            None => Ok(n),
            Some((reason, offset, key)) => {
                Err((self.owe_refused(reason, number, key, life), vec![offset]))
            }
        }
    }

    /// On a watermark tracker without progress, the key of `offset` if it
    /// is owed (user code: `O`'s `Hash`); `None` elsewhere (a progress
    /// tracker sends its batches one record at a time).
    fn owed_key(&self, offset: &O) -> Option<u64> {
        M::WATERMARKS.then(|| (self.progress.key_of)(offset))
    }

    /// The reason a batch's first unsent offset, of key `key`, was refused
    /// `reason`: on a watermark tracker it is owed from now on, or refused
    /// for order if another offset is (see "Owed offsets" in
    /// `watermark::order`). Runs no user code.
    fn owe_refused(&self, reason: Why, number: usize, key: Option<u64>, life: u32) -> Why {
        match (self.marks(), key) {
            (Some(watermarks), Some(key))
                if watermarks.owe(&self.slots, number, key, life).is_err() =>
            {
                (Refused::OutOfOrder, None)
            }
            _ => reason,
        }
    }

    pub(crate) fn resolve_all(
        &self,
        raws: impl Iterator<Item = u64>,
        outcome: Outcome,
    ) -> Result<usize, ResolveBatchError> {
        let mut run = Resolving {
            tracker: self,
            leave: None,
            advance: None,
            permits: 0,
            returned: 0,
            wakes: false,
            room: false,
        };
        let mut refused = 0;
        let mut first = None;
        for raw in raws {
            // ^ user code: the iterator; `run` settles what it holds if it
            // panics.
            let ticket = RawTicket::decode(raw);
            let resolved = if ticket.tracker == self.id {
                self.slots.resolve(ticket.index, ticket.tag, outcome)
            } else {
                Err(ResolveError::ForeignTracker)
            };
            let resolved = match resolved {
                Ok(resolved) => resolved,
                Err(e) => {
                    refused += 1;
                    // Typed tickets, as `ack` answers them.
                    first.get_or_insert(crate::resolve::typed(e));
                    continue;
                }
            };
            run.permits += 1;
            run.wakes |= resolved.watched;
            if M::WATERMARKS {
                // The record stays queued until the watermark passes it;
                // the advance counts it out of its generation.
                debug_assert!(!resolved.freed);
                if run.advance != Some(resolved.partition) {
                    run.settle_advance();
                    run.advance = Some(resolved.partition);
                }
            } else {
                let (generation, route) = entered_from(resolved.generation);
                match &mut run.leave {
                    Some((g, r, n)) if std::ptr::eq(*g, generation) && *r == route => *n += 1,
                    _ => {
                        run.settle_leave();
                        run.leave = Some((generation, route, 1));
                    }
                }
                if outcome == Outcome::Fail {
                    // SAFETY: as in `resolve`: read while the record was
                    // LIVE, proved by our CAS, and alive while it counts in
                    // the generation, until `run` leaves it.
                    self.add_failed(
                        unsafe { &*generation },
                        resolved.partition,
                        resolved.life,
                        1,
                    );
                    run.wakes = true; // a covering flush fails at once
                }
                if resolved.freed {
                    // Its generation and shard are copied out; the slot is
                    // ours.
                    self.slots.recycle_slot(ticket.index, resolved.slot);
                }
            }
            if run.permits.is_multiple_of(CHUNK) {
                // What the batch owes is settled every 64 resolutions (not
                // woken: that is once, at the end), so a long batch holds
                // back at most 64 records' counts and permits.
                run.settle_counts();
            }
        }
        let resolved = run.permits;
        run.finish(); // wakers, user code: last
        match first {
            None => Ok(resolved),
            Some(first) => Err(ResolveBatchError {
                resolved,
                refused,
                first,
            }),
        }
    }
}

/// A chunk of a batch being sent: backs out every record it prepared if
/// the send ends before publishing them (the `Closed` re-check, or a panic
/// in user code), as [`Undo`](crate::send) does for one record.
struct Chunk<'t, P, O, M: Mode> {
    tracker: &'t Tracker<P, O, M>,
    /// The records taken so far, the first `len` of these (the rest are
    /// uninitialised, so a chunk costs no zeroing): slot index, tag (0
    /// while only filled) and slot.
    records: [MaybeUninit<(usize, u32, &'t Slot<O>)>; CHUNK],
    len: usize,
    /// The hold bits every record took at `prepare`.
    holds: u64,
    /// Whether the last record also holds `HELD`.
    last_held: bool,
    /// How the chunk entered (`counts::entered_at`), and its generation,
    /// once it has.
    entered: Option<(*const (), &'t Generation)>,
}

impl<'t, P, O, M: Mode> Chunk<'t, P, O, M> {
    /// Adds a record taken (below `CHUNK` of them so far).
    fn push(&mut self, record: (usize, u32, &'t Slot<O>)) {
        self.records[self.len].write(record);
        self.len += 1;
    }

    /// Record `i` (below `len`): slot index, tag and slot.
    fn get(&self, i: usize) -> (usize, u32, &'t Slot<O>) {
        assert!(i < self.len, "record {i} of a chunk of {}", self.len);
        // SAFETY: the first `len` records were written by `push`.
        unsafe { self.records[i].assume_init() }
    }

    /// Sets the tag of record `i` (below `len`).
    fn set_tag(&mut self, i: usize, tag: u32) {
        assert!(i < self.len, "record {i} of a chunk of {}", self.len);
        // SAFETY: as in `get`.
        unsafe { self.records[i].assume_init_mut().1 = tag };
    }

    /// Everything but the slots themselves; runs no user code. Returns
    /// whether the chunk's leave drained its generation and whether a
    /// sender waits for the permits it gave back.
    fn back_out(&mut self) -> (bool, bool) {
        let tracker = self.tracker;
        let drained = self.entered.take().is_some_and(|(entered, generation)| {
            tracker.leave((generation, entered_from(entered).1), self.len as u64)
        });
        for i in 0..self.len {
            let (_, tag, slot) = self.get(i);
            if tag == 0 {
                continue; // only filled: no tag, no hold
            }
            let held = if self.last_held && i + 1 == self.len {
                HELD
            } else {
                0
            };
            tracker.slots.unhold_prepared(slot, self.holds | held);
        }
        let room = tracker.return_permits(self.len);
        (drained, room)
    }

    /// Backs out and hands the offsets back, in order, for `Closed`.
    fn take_back(self) -> Vec<O> {
        let mut this = std::mem::ManuallyDrop::new(self);
        let (drained, room) = this.back_out();
        let mut offsets = Vec::with_capacity(this.len);
        for i in 0..this.len {
            let (index, _, slot) = this.get(i);
            offsets.push(this.tracker.slots.unprepare(index, slot));
        }
        this.tracker.wake(drained, room); // user code, last
        offsets
    }
}

impl<P, O, M: Mode> Drop for Chunk<'_, P, O, M> {
    /// While unwinding (or with nothing gathered): the offsets stay in
    /// their slots for their next users to drop, and a waker's panic is
    /// swallowed.
    fn drop(&mut self) {
        let (drained, room) = self.back_out();
        for i in 0..self.len {
            let (index, _, slot) = self.get(i);
            self.tracker.slots.abandon_prepared(index, slot);
        }
        self.tracker.wake_quietly(drained, room);
    }
}

/// What a resolution batch owes: the leave of the current run of records
/// that entered one generation through one shard, the advance of the
/// current run of one partition (watermark trackers), the permits, and
/// the wake. Settled as runs end, and in `Drop` if the tickets' iterator
/// panics, so no resolved record is left counted.
struct Resolving<'t, P, O, M: Mode> {
    tracker: &'t Tracker<P, O, M>,
    leave: Option<(*const Generation, Route, u64)>,
    advance: Option<u32>,
    /// Records resolved, and how many of their permits were returned.
    permits: usize,
    returned: usize,
    wakes: bool,
    /// A sender waits for room (seen when permits were returned).
    room: bool,
}

impl<P, O, M: Mode> Resolving<'_, P, O, M> {
    fn settle_leave(&mut self) {
        if let Some((generation, route, n)) = self.leave.take() {
            // SAFETY: the run's records still count in the generation until
            // this leave (see `resolve_all`); it may be gone after it.
            let generation = unsafe { &*generation };
            self.wakes |= self.tracker.leave((generation, route), n);
        }
    }

    fn settle_advance(&mut self) {
        if let Some(partition) = self.advance.take() {
            let (wakes, room) = self.tracker.advance_watermark(partition);
            self.wakes |= wakes;
            self.room |= room;
        }
    }

    /// Settles everything and wakes (user code, last).
    fn finish(mut self) {
        let (wakes, room) = self.settle();
        let tracker = self.tracker;
        std::mem::forget(self);
        tracker.wake(wakes, room);
    }

    /// Settles the runs and the permits; returns what to wake.
    fn settle(&mut self) -> (bool, bool) {
        self.settle_counts();
        (
            std::mem::take(&mut self.wakes),
            std::mem::take(&mut self.room),
        )
    }

    /// Settles the runs and the permits, keeping what to wake for later.
    fn settle_counts(&mut self) {
        self.settle_leave();
        self.settle_advance();
        // With watermarks, the advance gives the permits back as it passes
        // the records.
        if !M::WATERMARKS {
            self.room |= self.tracker.return_permits(self.permits - self.returned);
        }
        self.returned = self.permits;
    }
}

impl<P, O, M: Mode> Drop for Resolving<'_, P, O, M> {
    /// Only while unwinding (the tickets' iterator panicked).
    fn drop(&mut self) {
        let (wakes, room) = self.settle();
        self.tracker.wake_quietly(wakes, room);
    }
}

/// Why a chunk stopped: the batch's refusal, and the limit for `Full`.
type Why = (Refused, Option<Limit>);

impl Refused {
    /// The batch's refusal for a send's, and the limit that refused it.
    pub(crate) fn of<P, O>(error: &SendError<P, O>) -> Why {
        let reason = match error {
            SendError::Full(..) => Refused::Full,
            SendError::Closed(..) => Refused::Closed,
            SendError::OutOfOrder(..) => Refused::OutOfOrder,
        };
        (reason, error.limit())
    }
}
