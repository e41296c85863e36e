//! The send path: a record takes a slot and a permit, enters the open
//! generation through its thread's count shard, and is published.
//!
//! This module owns `Tracker::send` and [`Undo`], which backs a send out
//! if it ends before publishing (the `Closed` re-check, or a panic in user
//! code). See "Generations, count shards and the seal" and "User code and
//! panics" in [`crate::implementation`].

use crate::cell::{Latest, INLINE_MAX};
use crate::counts::{entered_at, entered_from, Chain, Entry, Route, Shards, SHARDS};
use crate::future::SendWhenRoom;
use crate::generation::{Generation, Installed};
use crate::mode::Mode;
use crate::partition::Lifecycle;
use crate::progress::NO_POSITION;
use crate::slab::{Slot, HELD, QUEUE_HOLDS};
use crate::sync::epoch;
use crate::sync::{light_barrier_as, thread_index, AtomicU64, Ordering};
use crate::ticket::Ticket;
use crate::watermark::{Queue, Refusal, Run};
use crate::{Limit, SendError, Tracker};
use std::future::Future;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// **Send.** Hand each record to the sink with a [`send`](Self::send) and
/// keep its [`Ticket`] for the delivery callback;
/// [`send_timeout`](Self::send_timeout) and
/// [`send_async`](Self::send_async) wait for room instead of refusing,
/// [`send_batch`](Self::send_batch) sends a partition's run in one step.
///
/// ```
/// use inflight::Tracker;
/// let tracker = Tracker::new();
/// let ticket = tracker.send("orders-0", 41_u64).unwrap(); // travels with the record
/// let mut tickets = Vec::new();
/// tracker.send_batch(&"orders-0", 42..50_u64, &mut tickets).unwrap();
/// # tracker.ack(ticket).unwrap(); tracker.ack_all(tickets).unwrap();
/// ```
impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// Records that `offset` of `partition` was handed to the sink, and
    /// returns the ticket to resolve when the sink reports back.
    ///
    /// The record enters the open generation: every flush begun after this
    /// call returns covers it. On error the record comes back:
    /// [`SendError::Full`] at capacity, [`SendError::Closed`] after
    /// [`close`](Self::close).
    ///
    /// Lock-free; allocates nothing in the steady state (a partition seen for
    /// the first time, and the first record of a partition in a generation,
    /// allocate once).
    ///
    /// The tracker keeps `offset` until the record is resolved and no flush
    /// or watermark needs it any more, and then until a later `send` reuses
    /// its slot (or the tracker drops): that send drops it, before it takes
    /// anything. So `ack`, `commit` and `committable` never run the `Drop`
    /// of an offset you sent, nor does `fail` (it clones the failed
    /// record's offset to name it, see
    /// [`failed_records`](Self::failed_records), and may drop a clone it
    /// took earlier, last), and a `Drop` that panics surfaces here, with
    /// nothing sent. A panic in `P`'s `Hash`, `Eq`, `Clone` or `Drop` likewise sends
    /// nothing (guarantee 14).
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let ticket = tracker.send(("orders", 3), 1_000_u64).unwrap();
    /// assert_eq!(tracker.in_flight(), 1);
    /// # tracker.ack(ticket).unwrap();
    /// ```
    #[inline]
    pub fn send(&self, partition: P, offset: O) -> Result<Ticket, SendError<P, O>> {
        self.send_noting(partition, offset, &mut Wait::Never)
    }

    /// [`send`](Self::send), setting `wait` to what a refusal with `Full`
    /// may wait for: a permit (the capacity is reached) or the metadata
    /// budget of a partition (not the slots or partitions: those are for
    /// good).
    #[inline(always)]
    pub(crate) fn send_noting(
        &self,
        partition: P,
        offset: O,
        wait: &mut Wait,
    ) -> Result<Ticket, SendError<P, O>> {
        // Relaxed: a fast path only; the re-check after entering decides.
        if self.closed.load(Ordering::Relaxed) {
            return Err(SendError::Closed(partition, offset));
        }
        // On a progress tracker, the offset's position: user code (its
        // `Clone` and `SeqOffset::seq`), run while nothing is taken.
        let seq = match self.progress_config() {
            Some(config) => match (config.seq_of)(&offset) {
                NO_POSITION => return Err(SendError::OutOfOrder(partition, offset)),
                seq => Some(seq),
            },
            None => None,
        };
        // User code runs at three points, each before the record can be
        // resolved: `Hash`, `Eq` and `Clone` of `P` here, while nothing is
        // taken; the `Drop` of an old offset in `alloc`, which puts its slot
        // back if that panics; and the `Drop` of `partition` below, where
        // `Undo` backs the send out. Nothing after `publish` runs user code
        // (a panic there would lose the ticket of a counted record), except
        // the wakers woken when a revoke raced the send and the record
        // released itself: it no longer counts, so a panic strands nothing.
        let home = thread_index();
        let hint = self.shards.hint(home);
        let Some((number, lifecycle)) = self.partitions.number_hinted(&partition, hint) else {
            // No partition number, so no queue to owe the offset in: every
            // later send of the partition is refused the same way until a
            // number frees (see `Builder::progress`).
            return Err(SendError::Full(partition, offset, Limit::Internal));
        };
        // Acquire: pairs with a revoke's Release bump (see the re-check
        // after `publish`).
        let life = lifecycle.life.load(Ordering::Acquire);
        let Some((index, slot)) = self.slots.alloc(home) else {
            let limit = Limit::Internal;
            return Err(self.refuse_full((partition, offset, limit), number, seq, life));
        };
        if !self.take_permit(home) {
            self.slots.recycle_slot(index, slot);
            let limit = Limit::Capacity;
            let refused = self.refuse_full((partition, offset, limit), number, seq, life);
            // A capacity of 0 refuses every record for good: nothing will
            // make room, so `send_timeout` and `send_async` answer at once,
            // as for any permanent refusal (review 4).
            if matches!(refused, SendError::Full(..)) && self.capacity() != Some(0) {
                *wait = Wait::Permit;
            }
            return Err(refused);
        }
        // Held in advance: once the partition cell points at the slot, a
        // newer record may release the hold at any moment; and queued, on a
        // watermark tracker, until the watermark passes it. An inline
        // tracker keeps an offset that fits in the cell itself: no hold.
        let bits = inline_bits::<O, M>(&offset);
        let holds =
            if M::WATERMARKS { QUEUE_HOLDS } else { 0 } | if bits.is_some() { 0 } else { HELD };
        // What the partition's cell will name: the offset, or the slot.
        let latest = bits.map_or(Latest::Slot(index), Latest::Bits);
        // `number` < MAX_PARTITIONS < 2^32.
        let tag = self.slots.prepare(slot, offset, number as u32, life, holds);
        // No user code runs from `prepare` to the end of `enter` (a
        // capture for a lagging shard included), so nothing has to be
        // ready to back out there. After it an `Undo` is made only where
        // one is needed, around user code and to take the record back, so
        // the hot path keeps none on the stack.
        let (generation, wakes) = self.enter(home, 1);
        let entered = entered_at(generation, home % SHARDS, Shards::owns(home));
        let undo = || Undo {
            tracker: self,
            index,
            slot,
            holds,
            entered: (entered, generation),
        };
        if wakes {
            // A capture this send made for a sealer drained a generation.
            let unwinding = undo();
            self.wake(true, false); // user code: `unwinding` backs out if it panics
            std::mem::forget(unwinding);
        }

        // Acquire: pairs with `close`'s Release store. Either this record's
        // entry was counted by the capture of its word by a flush begun
        // after `close()` (so that flush covers it), or this send acquired
        // what the sealer did before capturing, the close included: through
        // the capture's CAS, if it read the moved `remote` word and retried,
        // or through the Release `fetch_max` of the newer `open_id` it read
        // (an owner's write the capture missed sees `open_id` moved, see
        // `counts`). Then this load sees the close. So a final flush covers
        // every accepted record. A `drain` that found every word idle and
        // did not seal ran the heavy barrier after the close, and an owner's
        // write it missed is followed by the light barrier before this load.
        if self.closed.load(Ordering::Acquire) {
            let offset = undo().take_back();
            return Err(SendError::Closed(partition, offset));
        }
        if let Some(seq) = seq {
            let undo = undo();
            return self.send_in_order(partition, number, lifecycle, undo, (tag, seq, life), wait);
        }
        // On a watermark tracker (without progress: see above), the
        // partition's queue and its tail, looked at while the partition key
        // is still ours: a partition that owes an offset decides the record
        // against its debt first, and may hand it back (see "Owed offsets"
        // in `watermark::order`).
        let look = match self.marks().map(|watermarks| watermarks.look(number)) {
            Some((queue, Some(tail))) => Some((queue, tail)),
            Some((queue, None)) => {
                let record = (queue, tag, life, latest);
                return self.send_owing(partition, number, lifecycle, undo(), record);
            }
            None => None,
        };
        let unwinding = undo();
        drop(partition); // user code: `unwinding` backs out if it panics
        std::mem::forget(unwinding);

        self.slots.set_generation(slot, entered);
        if let (Some(watermarks), Some((queue, tail))) = (self.marks(), look) {
            // Before publishing: the record's resolution must find it linked.
            watermarks.link(&self.slots, queue, Run::one(index, tag), tail);
        }
        let record = (tag, life, latest);
        let slot = (index, slot);
        Ok(self.install_and_publish(home, generation, number, slot, record, lifecycle))
    }

    /// The error for a send refused for want of a slot or permit. On a
    /// tracker with watermarks the partition owes the offset from now on
    /// (see "Owed offsets" in `watermark::order`), unless it is out of
    /// order (progress trackers), or another offset is owed: then the
    /// refusal is `OutOfOrder`. Runs user code only on a watermark tracker
    /// without progress (`O`'s `Hash`, for the debt's key), while nothing
    /// is taken.
    #[cold]
    pub(crate) fn refuse_full(
        &self,
        (partition, offset, limit): (P, O, Limit),
        number: usize,
        seq: Option<u64>,
        life: u32,
    ) -> SendError<P, O> {
        if let Some(watermarks) = self.marks() {
            // A progress tracker owes the position; another, the key.
            let key = seq.unwrap_or_else(|| (self.progress.key_of)(&offset));
            if watermarks.owe(&self.slots, number, key, life).is_err() {
                return SendError::OutOfOrder(partition, offset);
            }
        }
        SendError::Full(partition, offset, limit)
    }

    /// The end of a send on a watermark tracker without progress whose
    /// partition owed an offset when the send looked (see "Owed offsets" in
    /// `watermark::order`): the record is linked if it is the owed offset,
    /// or of another life than the debt's, and handed back `OutOfOrder`
    /// otherwise. The partition key's `Drop` (user code) runs last, once
    /// the record is published, as in `send_in_order`.
    #[cold]
    fn send_owing(
        &self,
        partition: P,
        number: usize,
        lifecycle: &Lifecycle,
        undo: Undo<'_, P, O, M>,
        (queue, tag, life, latest): (&Queue, u32, u32, Latest),
    ) -> Result<Ticket, SendError<P, O>> {
        let (index, slot) = (undo.index, undo.slot);
        let (entered, _) = undo.entered;
        let Some(watermarks) = self.marks() else {
            unreachable!("a queue is a watermark tracker's");
        };
        // User code (`O`'s `Hash`): `undo` backs the send out if it panics.
        // SAFETY: as `value`'s contract: the slot is ours, prepared.
        let key = (self.progress.key_of)(unsafe { slot.value() });
        // Before linking: the advance reads it once the record is resolved.
        self.slots.set_generation(slot, entered);
        let run = Run::one(index, tag);
        if watermarks
            .link_owing(&self.slots, queue, run, key, life)
            .is_err()
        {
            let offset = undo.take_back();
            return Err(SendError::OutOfOrder(partition, offset));
        }
        let record = (tag, life, latest);
        Ok(self.publish_then_drop_key(undo, partition, number, lifecycle, record))
    }

    /// The end of a send that kept its partition key to hand a refusal
    /// back (`send_in_order`, `send_owing`): the record `undo` holds is
    /// installed and published, then the key is dropped (user code, last):
    /// if its `Drop` panics the record is failed, so that nothing waits for
    /// a ticket no one holds, and its offset is redone.
    fn publish_then_drop_key(
        &self,
        undo: Undo<'_, P, O, M>,
        partition: P,
        number: usize,
        lifecycle: &Lifecycle,
        (tag, life, latest): (u32, u32, Latest),
    ) -> Ticket {
        let (index, slot) = (undo.index, undo.slot);
        let (_, generation) = undo.entered;
        std::mem::forget(undo);
        let record = (tag, life, latest);
        let slot = (index, slot);
        let ticket =
            self.install_and_publish(thread_index(), generation, number, slot, record, lifecycle);
        let unwinding = FailOnUnwind {
            tracker: self,
            index,
            tag,
        };
        drop(partition); // user code
        std::mem::forget(unwinding);
        ticket
    }

    /// The last steps of every send, once nothing can refuse the record:
    /// it becomes its partition's latest in its generation (the cell), is
    /// published, and is checked against a revoke that raced it. Runs no
    /// user code (but the wakers of a self-release, see `send_noting`).
    #[inline(always)]
    fn install_and_publish(
        &self,
        home: usize,
        generation: &Generation,
        number: usize,
        (index, slot): (usize, &Slot<O>),
        (tag, life, latest): (u32, u32, Latest),
        lifecycle: &Lifecycle,
    ) -> Ticket {
        let held = matches!(latest, Latest::Slot(_));
        let cell = self.cell_of(home, generation, number);
        match generation.install_in(cell, latest, (life, &lifecycle.life), M::INLINE) {
            Installed::First => {}
            // Frees the displaced record's slot if it was resolved; its
            // offset is dropped at the slot's reuse, not here.
            Installed::Displaced(displaced) => self.slots.release(displaced, HELD),
            // A record of the partition's new life holds the cell: ours is
            // of the ended life, and releases itself below (the install
            // acquired the bump). Not published yet: the hold is ours alone.
            Installed::Outranked if held => self.slots.unhold_prepared(slot, HELD),
            Installed::Outranked => {}
        }
        if held {
            self.slots.publish(slot);
        } else {
            // Nothing holds the slot: nothing else writes its state now.
            self.slots.publish_unheld(slot);
        }
        // A revoke of the partition that began after we read its life: it
        // bumps the life, runs the heavy barrier, then scans. Our light
        // barrier pairs with its heavy one: either our publish is seen by
        // its scan, which releases the record, or our re-load below sees
        // its bump. Either way the record does not outlive its life. A
        // record we release is still sent (its ticket answers `Revoked`),
        // as it is when the scan does it.
        // Mutant `no_light_fence` (loom suite only): no barrier, so both
        // sides may miss the other (the store-buffering pattern).
        #[cfg(not(inflight_mutant = "no_light_fence"))]
        light_barrier_as(self.expedited);
        // Acquire: what a revoke did before its bump.
        // Mutant `stale_life` (loom suite only): the send trusts the life it
        // read first, so a record sent across a revoke outlives its life.
        #[cfg(inflight_mutant = "stale_life")]
        let now = life;
        #[cfg(not(inflight_mutant = "stale_life"))]
        let now = lifecycle.life.load(Ordering::Acquire);
        if now != life {
            self.release_revoked_send(index, number as u32, tag, lifecycle);
        }
        Ticket::new(self.id, index, tag)
    }

    /// Partition `number`'s cell in `generation`, which the thread
    /// numbered `home` entered: from its context block's cell hint when
    /// that names the same generation and partition (see
    /// `counts::CellHint`), else looked up, and the hint set to it.
    #[inline(always)]
    fn cell_of<'g>(&self, home: usize, generation: &'g Generation, number: usize) -> &'g AtomicU64 {
        let Some(hint) = self.shards.cell_hint(home) else {
            return generation.cell(number);
        };
        // Relaxed, all: the owner's own words (see `counts::CellHint`).
        // Mutant `cell_hint_across_generations` (loom suite only): the
        // hint's generation is not compared, so a send after a seal
        // installs in the sealed generation's cell.
        #[cfg(inflight_mutant = "cell_hint_across_generations")]
        let same_generation = true;
        #[cfg(not(inflight_mutant = "cell_hint_across_generations"))]
        let same_generation = hint.generation.load(Ordering::Relaxed) == generation.id;
        if same_generation && hint.partition.load(Ordering::Relaxed) == number {
            let cell = hint.cell.load(Ordering::Relaxed);
            // SAFETY: the hint's cell is partition `number`'s cell in the
            // generation numbered as `generation` (set below), and numbers
            // are never reused: so it is `generation`'s own cell, which
            // lives as long as `generation` does.
            return unsafe { &*cell };
        }
        let cell = generation.cell(number);
        hint.generation.store(generation.id, Ordering::Relaxed);
        hint.partition.store(number, Ordering::Relaxed);
        hint.cell
            .store((cell as *const AtomicU64).cast_mut(), Ordering::Relaxed);
        cell
    }

    /// The end of a send on a progress tracker: the record is linked with
    /// its partition's order and budget checked (see `watermark::order`),
    /// which may still refuse it; only then is it installed and published.
    /// The partition key's `Drop` (user code) runs last, once the record is
    /// published: if it panics, the record is failed (so nothing waits for
    /// a ticket no one holds, and its offset is redone).
    #[cold]
    fn send_in_order(
        &self,
        partition: P,
        number: usize,
        lifecycle: &Lifecycle,
        undo: Undo<'_, P, O, M>,
        (tag, seq, life): (u32, u64, u32),
        wait: &mut Wait,
    ) -> Result<Ticket, SendError<P, O>> {
        let (index, slot) = (undo.index, undo.slot);
        let (entered, _) = undo.entered;
        let (Some(watermarks), Some(config)) = (self.marks(), self.progress_config()) else {
            unreachable!("a progress tracker keeps watermarks");
        };
        watermarks.set_seq(index, seq);
        // Before linking: the advance reads it once the record is resolved.
        self.slots.set_generation(slot, entered);
        // `number` < MAX_PARTITIONS < 2^32.
        let linked = watermarks.link_checked(
            &self.slots,
            number,
            index,
            (tag, seq, life),
            config.max_metadata_bytes,
        );
        if let Err(refusal) = linked {
            let offset = undo.take_back();
            return match refusal {
                Refusal::OutOfOrder => Err(SendError::OutOfOrder(partition, offset)),
                // Owed now (see `watermark::order`): a later send of the
                // partition waits for this offset.
                Refusal::OverBudget => {
                    *wait = Wait::Budget(number);
                    Err(SendError::Full(partition, offset, Limit::MetadataBudget))
                }
                // The partition was revoked since we read its life, and the
                // new life has queued records: nothing of ours was seen, so
                // the send starts again, in the new life, where its order
                // and budget are decided against that life's records. Each
                // retry follows a revoke that another thread completed.
                Refusal::Stale => self.send_noting(partition, offset, wait),
            };
        }
        // What `send` put in `latest`, read back from the prepared slot
        // (ours until its publish): the offset if it took no hold.
        let latest = if undo.holds & HELD != 0 {
            Latest::Slot(index)
        } else {
            // SAFETY: as `value`'s contract: the slot is ours, prepared.
            inline_bits::<O, M>(unsafe { slot.value() }).map_or(Latest::Slot(index), Latest::Bits)
        };
        let record = (tag, life, latest);
        Ok(self.publish_then_drop_key(undo, partition, number, lifecycle, record))
    }

    /// [`send`](Self::send), waiting at most `timeout` for room on a
    /// bounded tracker: where `send` would return [`SendError::Full`]
    /// because [`capacity`](Self::capacity) records are in flight, this
    /// waits until one is resolved (woken by it, not by polling) and sends
    /// then. On a [progress](crate::Builder::progress) tracker it waits
    /// likewise for the partition's metadata budget, woken by a resolution
    /// (or revoke) of the partition's records; the offset it waits with is
    /// owed by then (see [`SendError::Full`]), and stays owed if it gives
    /// up. On timeout the record comes back in `SendError::Full`, as it
    /// does at once when the tracker's 2^24 − 1 slots or partitions are
    /// all taken (a tracker without a capacity or progress is refused for
    /// nothing else); after
    /// [`close`](Self::close), in `SendError::Closed`, which also ends a
    /// wait. A zero timeout is [`send`](Self::send).
    ///
    /// Nothing on the `send`/`ack` path slows down for this: a resolution
    /// returns its permit with the same one atomic step as always, which
    /// tells it whether anyone waits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{SendError, Tracker};
    ///
    /// let tracker = Tracker::with_capacity(1);
    /// let first = tracker.send("p", 1_u64).unwrap();
    /// let full = tracker.send_timeout("p", 2, Duration::from_millis(1));
    /// assert!(matches!(full, Err(SendError::Full("p", 2, _))));
    /// std::thread::scope(|s| {
    ///     s.spawn(|| tracker.ack(first).unwrap());
    ///     let second = tracker.send_timeout("p", 2, Duration::from_secs(60)).unwrap();
    ///     tracker.ack(second).unwrap();
    /// });
    /// ```
    pub fn send_timeout(
        &self,
        partition: P,
        offset: O,
        timeout: Duration,
    ) -> Result<Ticket, SendError<P, O>> {
        let deadline = Instant::now().checked_add(timeout);
        let mut record = (partition, offset, Limit::Capacity);
        let mut registration = None;
        // Whether we flagged the budget since we last parked.
        let mut flagged = false;
        let result = loop {
            let mut wait = Wait::Never;
            record = match self.send_noting(record.0, record.1, &mut wait) {
                Ok(ticket) => break Ok(ticket),
                // Out of slots or partitions: for good.
                Err(refused @ SendError::Full(..)) if wait == Wait::Never => break Err(refused),
                Err(SendError::Full(partition, offset, limit)) => (partition, offset, limit),
                Err(refused) => break Err(refused),
            };
            let remaining = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            if remaining.is_zero() {
                break Err(SendError::Full(record.0, record.1, record.2));
            }
            let Some(registered) = &registration else {
                // Register, then flag and look again (see `want_room`).
                registration = Some(self.room.register());
                continue;
            };
            // Room now: send again. Else the next resolution wakes us.
            if self.must_park(wait, &mut flagged) {
                registered.park_timeout(remaining);
                flagged = false;
            }
        };
        // Unregisters; so does the unwind if user code panics in a retry.
        drop(registration);
        result
    }

    /// [`send`](Self::send), awaiting room on a bounded tracker: the async
    /// [`send_timeout`](Self::send_timeout), for any executor. Where `send`
    /// would return [`SendError::Full`] because the capacity is reached, the
    /// future waits until a record is resolved (woken by that resolution)
    /// and sends then; on a [progress](crate::Builder::progress) tracker
    /// it waits likewise for the partition's metadata budget (see
    /// [`send_timeout`](Self::send_timeout)). It resolves to
    /// `SendError::Closed` with the record
    /// after [`close`](Self::close) (which wakes it), and to
    /// `SendError::Full` at once when the tracker's 2^24 − 1 slots or
    /// partitions are all taken (nothing else refuses a tracker without a
    /// capacity or progress).
    ///
    /// Cancel-safe: dropping the future before it is ready sends nothing
    /// (the record is dropped with it) and unregisters its waker. Use your
    /// runtime's timeout, or [`send_timeout`](Self::send_timeout).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use inflight::Tracker;
    ///
    /// #[tokio::main]
    /// async fn main() {
    ///     let tracker = Arc::new(Tracker::with_capacity(1));
    ///     let first = tracker.send("p", 1_u64).unwrap();
    ///     let acker = Arc::clone(&tracker);
    ///     tokio::spawn(async move { acker.ack(first).unwrap() });
    ///     let second = tracker.send_async("p", 2).await.unwrap(); // waits for the ack
    ///     tracker.ack(second).unwrap();
    /// }
    /// ```
    // Not an `async fn`: the signature promises `Send`.
    #[allow(clippy::manual_async_fn)]
    pub fn send_async(
        &self,
        partition: P,
        offset: O,
    ) -> impl Future<Output = Result<Ticket, SendError<P, O>>> + Send + '_ {
        SendWhenRoom {
            tracker: self,
            record: Some((partition, offset)),
            registration: None,
            flagged: false,
        }
    }

    /// For a sender registered in `room` whose send was refused with `Full`
    /// for `wait`: flags what it waits for, and says whether to park (true)
    /// or send again (false). For a permit, see `want_room`. For the
    /// budget, the first refusal flags the partition and sends again (the
    /// look after the flag), the second parks: a resolution of the
    /// partition after the flag wakes the room (see "Waiting for the
    /// budget" in `watermark::order`). `flagged` says the flag was set
    /// since the sender last parked.
    pub(crate) fn must_park(&self, wait: Wait, flagged: &mut bool) -> bool {
        match (wait, self.marks()) {
            (Wait::Budget(number), Some(watermarks)) if !*flagged => {
                watermarks.want_budget(number);
                *flagged = true;
                false
            }
            (Wait::Budget(_), _) => true,
            _ => !self.want_room(),
        }
    }

    /// Counts `n` records (a send, or a chunk of a batch) into the open
    /// generation through the shard of the thread numbered `home`, all in
    /// one step, retrying past generations sealed under us, and returns
    /// that generation, and whether a capture made on the way drained one
    /// (the caller then wakes waiters, once it can afford user code). The
    /// reference is good while the record counts in the generation: until
    /// its resolution leaves it.
    #[inline]
    pub(crate) fn enter(&self, home: usize, n: u64) -> (&Generation, bool) {
        let mut wakes = false;
        loop {
            // Acquire: pairs with the sealers' Release `fetch_max`, so the
            // generation is in `open` (or older than it) and everything a
            // sealer did before moving this number on is visible.
            let id = self.open_id.load(Ordering::Acquire);
            // Unit tests widen the window between reading the open number
            // and entering (a send that may find its generation sealed).
            #[cfg(all(test, not(loom)))]
            std::thread::yield_now();
            match self.shards.enter(home, id, n, self, &mut wakes) {
                Entry::Entered => return (self.shards.entered(home, id, self), wakes),
                // Sealed under us: the sealer moved `open_id` on before
                // capturing, so the next load sees a newer one.
                Entry::Moved => {}
                // A sealer moved `open` to this generation and has not yet
                // captured our `remote` word for the one before: do it for
                // them.
                Entry::Lagging => wakes |= self.catch_up(home % SHARDS, id - 1),
            }
        }
    }
}

impl<P, O, M: Mode> Tracker<P, O, M> {
    /// Counts `n` records of `generation`, which entered by `route`, out
    /// of it: a resolution, or a send backing out. Returns true when that left the generation with nothing
    /// pending: the caller must wake waiters, and must not touch the
    /// generation again.
    #[inline(always)]
    #[must_use]
    pub(crate) fn leave(&self, entered: (&Generation, Route), n: u64) -> bool {
        self.shards.leave(thread_index(), entered, n, self)
    }
}

impl<P, O, M: Mode> Chain for Tracker<P, O, M> {
    #[inline]
    fn open_id(&self) -> &crate::sync::AtomicU64 {
        &self.open_id
    }

    /// The generation numbered `id`, which the caller keeps from being
    /// folded: a record of its counts in it, or a count word of its shard
    /// was not captured for it yet.
    #[inline(always)]
    fn expedited(&self) -> bool {
        self.expedited
    }

    #[inline]
    fn numbered(&self, id: u64) -> &Generation {
        // SAFETY: the guard protects nothing; what keeps the generations
        // alive is what the caller holds in generation `id`, see below.
        let guard = unsafe { epoch::unprotected() };
        // Acquire: pairs with the Release CAS that published the generation.
        let open = self.open.load(Ordering::Acquire, guard);
        // SAFETY: `open` is never null, and it is generation `id` or a newer
        // one (`open_id` moves only after `open` does). Generations are
        // folded, and then freed, oldest first, and generation `id` cannot
        // be folded while the caller's record counts in it (or a word's
        // `UNIT` is still in its pending count); so it and every newer one,
        // through the `prev` links between them, stay allocated for as long
        // as the caller uses them.
        let mut generation = unsafe { open.deref() };
        while generation.id != id {
            debug_assert!(generation.id > id);
            // SAFETY: as above.
            generation = unsafe { &*generation.prev };
        }
        generation
    }
}

/// What a send refused with `SendError::Full` may wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Nothing: the tracker's slots or partitions are all taken (or the
    /// send was not refused with `Full`).
    Never,
    /// A permit: the capacity is reached.
    Permit,
    /// The metadata budget of the partition numbered so.
    Budget(usize),
}

/// Backs a send out if it ends before publishing its record: the
/// `Closed` re-check, or a panic in user code (a waker, the `Drop` of the
/// partition key). It counts the record out of the generation it entered
/// and returns the permit and the slot: no record is counted without a
/// ticket. `send` makes one only where it needs one (around user code,
/// and to take a record back) and forgets it once nothing can stop the
/// record; before the record enters, no user code runs.
struct Undo<'t, P, O, M: Mode> {
    tracker: &'t Tracker<P, O, M>,
    index: usize,
    slot: &'t Slot<O>,
    /// The hold bits the slot took at `prepare`.
    holds: u64,
    /// How the record entered (`counts::entered_at`), and its generation.
    entered: (*const (), &'t Generation),
}

impl<P, O, M: Mode> Undo<'_, P, O, M> {
    /// Everything but the slot itself; runs no user code. Returns whether
    /// the record's leave drained its generation (waiters must be woken)
    /// and whether a sender waits for the permit it gave back.
    fn back_out(&self) -> (bool, bool) {
        let (entered, generation) = self.entered;
        let drained = self.tracker.leave((generation, entered_from(entered).1), 1);
        self.tracker.slots.unhold_prepared(self.slot, self.holds);
        let room = self.tracker.return_permit();
        (drained, room)
    }

    /// Backs out and hands the offset back, for `SendError::Closed`.
    fn take_back(self) -> O {
        let this = std::mem::ManuallyDrop::new(self);
        let (drained, room) = this.back_out();
        let offset = this.tracker.slots.unprepare(this.index, this.slot);
        this.tracker.wake(drained, room); // user code, last
        offset
    }
}

/// Fails a published record of a tracker with watermarks if the partition key's
/// `Drop` panics before its ticket is returned (see `send_in_order`).
struct FailOnUnwind<'t, P, O, M: Mode> {
    tracker: &'t Tracker<P, O, M>,
    index: usize,
    tag: u32,
}

impl<P, O, M: Mode> Drop for FailOnUnwind<'_, P, O, M> {
    fn drop(&mut self) {
        self.tracker.fail_quietly(self.index, self.tag);
    }
}

impl<P, O, M: Mode> Drop for Undo<'_, P, O, M> {
    /// Only while unwinding: the offset stays in the slot for its next user
    /// to drop, and a waker's panic is swallowed (one panic is on its way).
    fn drop(&mut self) {
        let (drained, room) = self.back_out();
        self.tracker.slots.abandon_prepared(self.index, self.slot);
        self.tracker.wake_quietly(drained, room);
    }
}

/// The bits of `offset` if a tracker of mode `M` keeps it in its
/// partition's cell: an inline mode, and bits that fit (see `cell`); a
/// larger offset takes the held path. A constant `None` for the plain
/// modes.
#[inline(always)]
pub(crate) fn inline_bits<O, M: Mode>(offset: &O) -> Option<u64> {
    if !M::INLINE {
        return None;
    }
    // SAFETY: an inline mode's `O` is an `InlineOffset` (only
    // `Builder::inline_offsets` makes one).
    let bits = unsafe { crate::inline::bits_of(offset) };
    (bits <= INLINE_MAX).then_some(bits)
}
