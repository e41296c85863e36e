//! A partition's lifecycle: [`Tracker::revoke`] (a rebalance takes the
//! partition away, or it restarts after a failure) and
//! [`Tracker::drain_partition`] (a clean hand-off).
//!
//! # Lives
//!
//! Each partition has a *life*, a number that `revoke` moves on (in the
//! partition index's entry, beside the key). A send reads it and stamps its
//! record with it. `revoke` moves the life on first, then releases every
//! unresolved record of an older life: one compare-and-swap from `LIVE` on
//! each, which a racing `ack` either wins (the record was delivered first)
//! or loses (`ResolveError::Revoked`). A released record is counted out of
//! its generation and gives its permit back, as a resolution does, so no
//! flush or `drain` waits for it.
//!
//! A send racing the revoke is released too, or belongs to the new life,
//! never both, never neither. The revoke bumps the life, runs the heavy
//! side of an asymmetric barrier (`sync::heavy_barrier`: the
//! `membarrier` system call on Linux, which makes every thread of the
//! process execute a full fence), then scans: it loads the slot counter
//! (`used`) and each slot's state word. The send claims its slot,
//! publishes it, runs the light side (`sync::light_barrier`: a compiler
//! fence when the call is in use, a full fence otherwise), then re-loads
//! the life. The pair orders like two `SeqCst` fences: if the send's light
//! barrier came first, the scan sees the claim and the publish and
//! releases the record; if the revoke's heavy barrier came first, the
//! send's re-load sees the bump and it releases its own record (counting
//! it in the partition's `released_late`, which the revoke adds to its
//! `released` after the scan, or the next revoke does if the send was
//! slower). Loom checks it with both sides as `SeqCst` fences (models 25,
//! 25b, B3; mutants `stale_life`, `no_light_fence`, `unfenced_batch`,
//! `revoke_without_barrier`); `tests/stress_fences.rs` runs it on real
//! threads with the system call and without. The send path pays no locked
//! instruction for it where the call is available.
//!
//! # A send of an ended life
//!
//! A send that read the life before a revoke bumped it may still be on its
//! way when a send of the new life comes: it acts on the partition's
//! shared state only where the new life's records cannot be hurt, and
//! otherwise steps aside before anyone can see it:
//!
//! - **The generation's cell.** The cell word carries the life with the
//!   slot, and an install is a CAS that never replaces a record of a newer
//!   life: the stale record stays out (and drops its `HELD` hold). A flush
//!   folding generations keeps the carry's record when the cell's is of an
//!   older life (the stale record entered a later generation than the new
//!   life's, a seal falling between the two sends).
//! - **The progress queue.** The checked link refuses to queue behind a
//!   record of a newer life: the send backs out (nothing was published) and
//!   starts again, reading the new life, so its order and budget are
//!   decided against that life's records, and the next send of the new life
//!   never takes a stale record for its predecessor. Lives along a progress
//!   queue never go back.
//! - **The plain watermark queue** links with a swap, which cannot refuse;
//!   a stale record there is passed by the advance without being marked
//!   (it is older than the newest life passed), so it reports nothing.
//!
//! Either the stale send was first at the shared word (and a newer record
//! displaces or follows it as usual), or the newer one was first, and the
//! stale send, having read the newer record's word with Acquire, sees the
//! bumped life in its re-check and releases itself. Loom models
//! `stale_send_vs_revoke_and_new_send*` check both cells and the queue
//! (mutants `stale_displaces_new`, `stale_links_behind_new`).
//!
//! Nothing of an ended life is reported afterwards: a flush skips offsets
//! and failures of older lives (the carry and each generation keep the
//! life of every retained offset and failure), and a watermark passes
//! records of older lives without marking them. The last untaken
//! watermark of the ended life goes to `Revoked::committable`, unless a
//! `committable()` call took it first; a mark of the ended life that an
//! advance running on another thread publishes after the revoke took the
//! marks is dropped (that advance's records are then redone after the
//! hand-off, never lost; `drain_partition` first rules it out).
//!
//! A revoke costs a scan of every slot the tracker has allocated (work in
//! proportion to the most records it ever held), one load each, after one
//! `membarrier` call: records are not listed per partition, which would
//! cost every send and ack; a revoke is rare.

use crate::counts::entered_from;
use crate::mode::Mode;
use crate::partition::Lifecycle;
use crate::slab::{status_of_state, tag, LIVE};
use crate::sync::Ordering;
use crate::ticket::RawTicket;
use crate::watermark::{newer, Watermarks};
use crate::{DrainError, Ticket, Tracker};
use std::borrow::Borrow;
use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

impl<O> Default for Revoked<O> {
    /// Nothing released, nothing committable.
    fn default() -> Self {
        Self {
            released: 0,
            committable: None,
        }
    }
}

/// What [`Tracker::revoke`] did.
///
/// ```
/// use inflight::Tracker;
/// let tracker = Tracker::builder().watermarks().build();
/// let a = tracker.send("p", 1_u64).unwrap();
/// let b = tracker.send("p", 2_u64).unwrap();
/// tracker.ack(a).unwrap();
/// let revoked = tracker.revoke("p");
/// assert_eq!(revoked.released, 1);            // b
/// assert_eq!(revoked.committable, Some(1));   // a's advance, not yet taken
/// assert_eq!(tracker.ack(b), Err(inflight::ResolveError::Revoked));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "the partition's last committable offset is handed out here, once"]
pub struct Revoked<O> {
    /// Unresolved records of the partition that the revoke released.
    pub released: usize,
    /// The **last done** offset of the ended life (Connect's convention;
    /// for Kafka, commit it **+ 1**): on a watermark tracker, the
    /// partition's last watermark that no
    /// [`committable`](Tracker::committable) call had taken: commit it to
    /// hand the partition over. `None` when there is none (or without
    /// watermarks).
    pub committable: Option<O>,
}

/// **Partitions' lives.** When a rebalance takes a partition away, wait for
/// its records with [`drain_partition`](Self::drain_partition) (bounded),
/// commit, then [`revoke`](Self::revoke) it: what is still in flight is
/// released and the next send starts the partition afresh.
///
/// ```
/// use std::time::Duration;
/// use inflight::Tracker;
/// let tracker = Tracker::builder().watermarks().build();
/// let stuck = tracker.send("orders-0", 41_u64).unwrap();
/// let _ = tracker.drain_partition("orders-0", Duration::from_millis(1)); // gives up
/// assert_eq!(tracker.revoke("orders-0").released, 1);
/// assert!(tracker.ack(stuck).is_err()); // a late callback changes nothing
/// ```
impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// Ends `partition`'s current life: what a consumer does when a
    /// rebalance takes the partition away, and what restarts a partition
    /// after a failure. Lock-free, and linearizable with every other call.
    /// When it returns:
    ///
    /// - every record of `partition` sent before it and still unresolved is
    ///   **released**: no longer counted in [`in_flight`](Self::in_flight),
    ///   waited for by no flush or `drain`, its capacity given back; its
    ///   ticket answers [`ResolveError::Revoked`](crate::ResolveError::Revoked)
    ///   and changes nothing (a record whose `ack` won the race was
    ///   delivered, and counts as such);
    /// - nothing of the partition's ended life is reported afterwards: no
    ///   flush returns its offsets or fails for its failures, and its
    ///   watermark is final (a failure no longer stops the partition);
    /// - a later `send` to `partition` starts its new life, as a restart
    ///   from its committed offset does: its own watermark, its own flushes;
    /// - on a watermark tracker, [`Revoked::committable`] carries the ended
    ///   life's last watermark that no `committable()` call took (each
    ///   advance still goes to exactly one caller).
    ///
    /// For a clean hand-off, [`drain_partition`](Self::drain_partition)
    /// (bounded) first, then `revoke`, then commit `Revoked::committable`.
    /// On a barrier tracker, flush and commit before revoking instead.
    ///
    /// A partition never seen is left alone (`released` is 0). Costs a
    /// scan of every slot the tracker has allocated (see the module docs of
    /// `revoke`); `send` and `ack` pay nothing for it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, ResolveError, Tracker};
    /// let tracker = Tracker::new();
    /// let failed = tracker.send("p", 1_u64).unwrap();
    /// tracker.fail(failed).unwrap();                 // p's watermark and flushes fail...
    /// let stuck = tracker.send("p", 2_u64).unwrap();
    /// assert_eq!(tracker.revoke("p").released, 1);   // ...until p restarts
    /// assert_eq!(tracker.ack(stuck), Err(ResolveError::Revoked));
    /// let again = tracker.send("p", 1_u64).unwrap(); // the new life, from the committed offset
    /// tracker.ack(again).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.wait(Duration::ZERO).unwrap()["p"], 1);
    /// flush.commit().unwrap();
    /// ```
    pub fn revoke<Q>(&self, partition: &Q) -> Revoked<O>
    where
        P: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(number) = self.partitions.find(partition) else {
            return Revoked::default();
        };
        let Some(lifecycle) = self.partitions.lifecycle(number) else {
            return Revoked::default();
        };
        // AcqRel: Release, so that what this revoke did before is seen by
        // a send that reads the bump (and by `is_current` readers);
        // Acquire: what an earlier revoke did.
        let ended = lifecycle.life.fetch_add(1, Ordering::AcqRel);
        let life = ended.wrapping_add(1);
        // The heavy side of the barrier pair (see the module docs): a send
        // whose light barrier did not come before this sees the bump; one
        // whose did has its slot claim and publish seen by the scan below.
        // Mutant `revoke_without_barrier` (loom suite only): the scan may
        // miss a send that misses the bump.
        #[cfg(not(inflight_mutant = "revoke_without_barrier"))]
        crate::sync::heavy_barrier();
        let (mut released, mut wakes, mut room) = (0, false, false);
        let number = number as u32;
        for index in 0..self.slots.used() {
            // A page missing below `used` (its claimer has not allocated
            // it yet) holds no record this scan must release: whoever
            // sends into it publishes after finding it, so if this load,
            // after our heavy barrier, finds no page, that send's light
            // barrier comes after our barrier and its re-check sees the
            // bump. Pages above it may exist: go on, do not stop.
            let Some((slot, state)) = self.slots.scan(index) else {
                continue;
            };
            // The partition and life are this record's: the scan's load
            // acquired its publish, and the CAS below fails if the slot
            // moved on.
            if status_of_state(state) != LIVE
                || slot.partition() != number
                || !newer(life, slot.life())
            {
                continue;
            }
            if let Some((w, r)) = self.release(index, tag(state)) {
                released += 1;
                wakes |= w;
                room |= r;
            }
        }
        // Offsets inline keep 16 bits of their life: every 2^14 lives, clear
        // this partition's offsets of lives older than `life` from every
        // generation not yet folded, so none is left to alias a later life
        // (see `cell`; `tests/inline.rs` checks it across 2^16 revokes).
        // Older only: a revoke beside this one may have begun a newer life
        // since our bump, whose sends are current (review 4).
        if M::INLINE && life % crate::cell::CLEAR_EVERY == 0 {
            let guard = crate::sync::epoch::pin();
            self.walk(&guard, None, |generation| {
                generation.forget_ended(number as usize, life);
            });
        }
        // On a watermark tracker the released records are passed now (or by
        // the thread advancing), which makes the ended life's watermark
        // final and gives their permits back (and those of the acked records
        // held behind them); on a progress tracker that advance also lets go
        // of what a failure of the ended life kept for `progress()`. A sender
        // waiting for the ended life's budget sends again, in the new life.
        if let Some(watermarks) = self.marks() {
            watermarks.end_life(number as usize, life);
        }
        let (w, r) = self.advance_watermark(number);
        (wakes, room) = (wakes | w, room | r);
        // Records whose own sends released them, having raced this revoke
        // (or an earlier one): counted here, once. AcqRel: as there.
        released += lifecycle.released_late.swap(0, Ordering::AcqRel) as usize;
        // The wakes we owe, before any user code: every waiter is woken
        // even if a waker panics, and then the ended life's mark is still
        // where `committable()` (or the next revoke) finds it, since the
        // partition is not settled yet. Then the mark's `Clone` (user
        // code), last, behind `PutBack`.
        self.wake(wakes, room);
        let committable = self.take_ended(number as usize, life);
        Revoked {
            released,
            committable,
        }
    }

    /// The last untaken mark of an older life (the one this revoke ended,
    /// or one an earlier revoke put back), cloned, and the partition
    /// settled (late marks of ended lives dropped from now on).
    fn take_ended(&self, number: usize, life: u32) -> Option<O> {
        let watermarks = self.marks()?;
        let mark = watermarks.take_ended(number, life, &self.slots);
        let offset = mark.map(|mark| {
            // If the `Clone` (user code) panics, the mark goes back, and the
            // partition stays unsettled: the advance is not lost.
            let unwinding = PutBack {
                tracker: self,
                number,
                mark,
            };
            // SAFETY: we own the mark's `MARKED` hold, so the slot keeps its
            // acked offset until we release it.
            let index = Watermarks::mark_slot(mark);
            let offset = unsafe { self.slots.slot_of(index).value() }.clone();
            std::mem::forget(unwinding);
            watermarks.hand_over(number, mark, &self.slots);
            offset
        });
        watermarks.settle(number, life);
        offset
    }

    /// Releases the unresolved record `index` with `tag` (a revoke's), if
    /// it still is: returns whether waiters must be woken and whether a
    /// sender waits for room, or `None` if the record was resolved first.
    fn release(&self, index: usize, tag: u32) -> Option<(bool, bool)> {
        // Mutant `ack_after_revoke` (loom suite only): the release does not
        // take the record's state from LIVE, so its ticket still resolves.
        #[cfg(inflight_mutant = "ack_after_revoke")]
        let resolved = self.slots.resolve_peek(index, tag)?;
        #[cfg(not(inflight_mutant = "ack_after_revoke"))]
        let resolved = self
            .slots
            .resolve(index, tag, crate::slab::Outcome::Revoke)
            .ok()?;
        #[cfg_attr(inflight_mutant = "revoke_keeps_pending", allow(unused_mut))]
        let mut wakes = resolved.watched;
        let mut room = false;
        if !M::WATERMARKS {
            let (generation, route) = entered_from(resolved.generation);
            // SAFETY: as in `resolve`: read while the record was LIVE, proved
            // by our CAS, and alive until our leave.
            let generation = unsafe { &*generation };
            // Mutant `revoke_keeps_pending` (loom suite only): a released
            // record still counts in its generation, so flushes and drains
            // wait for it for ever.
            #[cfg(not(inflight_mutant = "revoke_keeps_pending"))]
            {
                wakes |= self.leave((generation, route), 1);
            }
            #[cfg(inflight_mutant = "revoke_keeps_pending")]
            let _ = (route, generation);
            // After the leave, as in `resolve`.
            room = self.return_permit();
            if resolved.freed {
                self.slots.quarantine_slot(index, resolved.slot);
            }
        }
        // On a watermark tracker the record stays queued, counted and
        // holding its permit until the watermark passes it (the caller
        // advances).
        Some((wakes, room))
    }

    /// A send that found its partition's life moved on after it published:
    /// it releases its own record (unless the revoke's scan did).
    /// It counts in its partition's `released_late`, which the revoke (or
    /// the next one) adds to what it reports.
    #[cold]
    pub(crate) fn release_revoked_send(
        &self,
        index: usize,
        partition: u32,
        tag: u32,
        lifecycle: &Lifecycle,
    ) {
        let (wakes, room) = self.release_late(index, partition, tag, lifecycle);
        self.wake(wakes, room);
    }

    /// [`release_revoked_send`](Self::release_revoked_send) without the
    /// wake: returns whether waiters must be woken and whether a sender
    /// waits for room (a batch wakes once, for all its records).
    pub(crate) fn release_late(
        &self,
        index: usize,
        partition: u32,
        tag: u32,
        lifecycle: &Lifecycle,
    ) -> (bool, bool) {
        let Some((wakes, room)) = self.release(index, tag) else {
            return (false, false);
        };
        // AcqRel: a revoke's swap takes the count.
        lifecycle.released_late.fetch_add(1, Ordering::AcqRel);
        let (w, r) = self.advance_watermark(partition);
        (wakes | w, room | r)
    }

    /// Waits, at most `timeout`, until every record of `partition` sent
    /// before this call is resolved (on a watermark tracker, until its
    /// watermark has passed them, so that `committable()` or a `revoke`
    /// then has them all), ignoring every other partition. Timeout and
    /// [`interrupt`](Self::interrupt) as for [`drain`](Self::drain). A
    /// partition never seen has nothing to wait for.
    ///
    /// The clean hand-off of a partition: `drain_partition` (bounded), then
    /// [`revoke`](Self::revoke), then commit `Revoked::committable`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::Tracker;
    /// let tracker = Tracker::builder().watermarks().build();
    /// let p = tracker.send("p", 1_u64).unwrap();
    /// let _q = tracker.send("q", 9_u64).unwrap(); // another partition: ignored
    /// std::thread::scope(|s| {
    ///     s.spawn(|| tracker.ack(p).unwrap());
    ///     tracker.drain_partition("p", Duration::from_secs(10)).unwrap();
    /// });
    /// assert_eq!(tracker.revoke("p").committable, Some(1));
    /// ```
    pub fn drain_partition<Q>(&self, partition: &Q, timeout: Duration) -> Result<(), DrainError>
    where
        P: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(watch) = self.watch_partition(partition) else {
            return Ok(());
        };
        self.block_until_drained(timeout, || Ok(watch.pending(self)))
            .map_err(DrainError::from_wait)
    }

    /// Whether `ticket`'s record is still of its partition's current life:
    /// no [`revoke`](Self::revoke) of its partition has begun since it was
    /// sent, so producing it now is not producing a record that the
    /// partition's next owner will read again. A worker asks before it
    /// produces. `false` is final: the record was released, or its life
    /// ended and a revoke is releasing it; its ticket answers
    /// [`Revoked`](crate::ResolveError::Revoked) (or, if an ack wins the
    /// race with the revoke's release, counts in the ended life). Give
    /// such a ticket up with [`fail`](Self::fail), not
    /// [`ack`](Self::ack): a failure of an ended life is forgotten, while
    /// an ack could count a record that was never produced as done.
    ///
    /// `true` is a snapshot: a revoke that begins after it can still
    /// release the record while it is being produced. A hand-off that
    /// drains a partition before revoking it (see `drain_partition`, and
    /// the rdkafka glue's hand-off) leaves records in flight that long to
    /// finish; the check catches the ones it gave up on.
    ///
    /// Cheap: a few loads, no read-modify-write, no user code.
    ///
    /// ```
    /// use inflight::{ResolveError, Tracker};
    /// let tracker = Tracker::new();
    /// let ticket = tracker.send("p", 1_u64).unwrap();
    /// assert!(tracker.is_current(&ticket));
    /// // A rebalance took the partition away: the record is released.
    /// assert_eq!(tracker.revoke("p").released, 1);
    /// assert!(!tracker.is_current(&ticket));
    /// // Do not produce it; give the ticket up.
    /// assert_eq!(tracker.fail(ticket), Err(ResolveError::Revoked));
    /// let next = tracker.send("p", 1).unwrap(); // the partition's new life
    /// assert!(tracker.is_current(&next));
    /// # tracker.ack(next).unwrap();
    /// ```
    pub fn is_current(&self, ticket: &Ticket) -> bool {
        self.is_current_raw(ticket.raw())
    }

    /// [`is_current`](Self::is_current) for a ticket turned into an
    /// integer by [`Ticket::into_raw`]. Any `u64` is safe: a forged,
    /// foreign or already resolved value answers `false`.
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let raw = tracker.send("p", 1_u64).unwrap().into_raw();
    /// assert!(tracker.is_current_raw(raw));
    /// tracker.ack_raw(raw).unwrap();
    /// assert!(!tracker.is_current_raw(raw), "resolved");
    /// assert!(!tracker.is_current_raw(u64::MAX));
    /// ```
    pub fn is_current_raw(&self, raw: u64) -> bool {
        let ticket = RawTicket::decode(raw);
        if ticket.tracker != self.id {
            return false;
        }
        let Some((partition, life)) = self.slots.live_record(ticket.index, ticket.tag) else {
            return false;
        };
        self.is_current_life(partition, life)
    }

    /// Whether every record of `partition` sent so far is resolved (on a
    /// watermark tracker: passed by its watermark), as
    /// [`drain_partition`](Self::drain_partition) would find it, without
    /// waiting: for a loop that looks now and then (a consumer's poll loop
    /// handing a revoked partition off) rather than blocks. Unlike a wait,
    /// it never takes an [`interrupt`](Self::interrupt), which stays for
    /// the wait it was meant for. A partition never seen is drained. On a
    /// barrier tracker it reads every live slot; with watermarks, a few
    /// counters.
    ///
    /// ```
    /// let tracker = inflight::Tracker::builder().watermarks().build();
    /// let p = tracker.send("p", 1_u64).unwrap();
    /// assert!(!tracker.is_partition_drained("p"));
    /// assert!(tracker.is_partition_drained("q")); // never seen
    /// tracker.ack(p).unwrap();
    /// assert!(tracker.is_partition_drained("p"));
    /// ```
    pub fn is_partition_drained<Q>(&self, partition: &Q) -> bool
    where
        P: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.watch_partition(partition)
            .is_none_or(|watch| watch.pending(self) == 0)
    }

    /// The async [`drain_partition`](Self::drain_partition), for any
    /// executor: what it waits for is fixed when it is called (records
    /// sent before), not when first polled. Cancel-safe; use your runtime's
    /// timeout.
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// let tracker = inflight::Tracker::new();
    /// let p = tracker.send("p", 1_u64).unwrap();
    /// let draining = tracker.drain_partition_async("p");
    /// tracker.ack(p).unwrap();
    /// draining.await.unwrap();
    /// # }
    /// ```
    // Not an `async fn`: the signature promises `Send`, and the watch must
    // start at the call.
    #[allow(clippy::manual_async_fn)]
    pub fn drain_partition_async<Q>(
        &self,
        partition: &Q,
    ) -> impl Future<Output = Result<(), DrainError>> + Send + '_
    where
        P: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let watch = self.watch_partition(partition);
        async move {
            match watch {
                None => Ok(()),
                Some(watch) => crate::future::until(self, || Ok(watch.pending(self)))
                    .await
                    .map_err(DrainError::from_wait),
            }
        }
    }

    /// Starts watching the records of `partition` sent so far.
    fn watch_partition<Q>(&self, partition: &Q) -> Option<Watch<'_, P, O, M>>
    where
        P: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let number = self.partitions.find(partition)?;
        let mut watch = Watch {
            tracker: self,
            number,
            records: Vec::new(),
            target: None,
            counted: false,
            tail: 0,
        };
        match self.marks() {
            Some(watermarks) => {
                // No queue yet: no record of the partition was sent before
                // the call (a send queues its record before it returns), so
                // there is nothing to wait for, and nothing was counted.
                watch.counted = watermarks.watch(number);
                watch.target = Some(if watch.counted {
                    watermarks.sent(number)
                } else {
                    0
                });
                if watch.counted {
                    watch.tail = watermarks.last_queued(number);
                }
            }
            None => {
                self.slots
                    .for_each_live(|index, state, record_partition, _| {
                        if record_partition as usize == number && self.slots.watch(index, state) {
                            watch.records.push((index, state));
                        }
                    });
            }
        }
        Some(watch)
    }
}

/// What a `drain_partition` waits for: on a barrier tracker, the records
/// it flagged `WATCHED` (whose resolution wakes waiters); on a watermark
/// tracker, the watermark passing the records queued before the call (the
/// advancer wakes waiters while the queue has watchers).
struct Watch<'t, P, O, M: Mode> {
    tracker: &'t Tracker<P, O, M>,
    number: usize,
    records: Vec<(usize, u64)>,
    target: Option<u64>,
    /// On a progress tracker, the record last queued at the call (see
    /// `Watermarks::last_queued`): the watermark must pass it too.
    tail: u64,
    /// Whether the watch counts in its queue's `watchers`: the drop
    /// uncounts it on exactly that condition, not on the queue existing
    /// then.
    counted: bool,
}

impl<P, O, M: Mode> Watch<'_, P, O, M> {
    /// How many of the watched records are still pending.
    fn pending(&self, tracker: &Tracker<P, O, M>) -> usize {
        match (self.target, tracker.marks()) {
            (Some(target), Some(watermarks)) => {
                match watermarks.short_of(self.number, target) as usize {
                    // Every counted record passed; one sent before the call
                    // may not have counted itself yet (see `last_queued`).
                    0 => {
                        usize::from(!watermarks.has_passed(&tracker.slots, self.number, self.tail))
                    }
                    short => short,
                }
            }
            _ => self
                .records
                .iter()
                .filter(|&&(index, state)| tracker.slots.still_live(index, state))
                .count(),
        }
    }
}

impl<P, O, M: Mode> Drop for Watch<'_, P, O, M> {
    fn drop(&mut self) {
        if let (true, Some(watermarks)) = (self.counted, self.tracker.marks()) {
            watermarks.unwatch(self.number);
        }
    }
}

/// Puts a mark `Tracker::take_ended` took back if cloning its offset panics.
struct PutBack<'t, P, O, M: Mode> {
    tracker: &'t Tracker<P, O, M>,
    number: usize,
    mark: u64,
}

impl<P, O, M: Mode> Drop for PutBack<'_, P, O, M> {
    fn drop(&mut self) {
        if let Some(watermarks) = self.tracker.marks() {
            watermarks.put_back(self.number, self.mark, &self.tracker.slots);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{ResolveError, Tracker};

    /// A claimer moves the slot counter, then allocates the chunk's page:
    /// a scan may find pages missing below `used` and later pages present.
    /// The revoke's scan and `drain_partition`'s go past them (they used
    /// to stop at the first missing page, and missed the record here).
    #[test]
    fn the_scans_go_past_pages_their_claimers_have_not_allocated_yet() {
        let tracker = Tracker::<u32, u64>::new();
        // Slots 0 to 479 claimed, pages 0 to 3 not allocated: the send
        // takes slot 480, on page 4.
        tracker.slots.claim_without_pages(480);
        let ticket = tracker.send(7, 1).unwrap();
        assert!(!tracker.is_partition_drained(&7), "the record is in flight");
        let revoked = tracker.revoke(&7);
        assert_eq!(revoked.released, 1);
        assert_eq!(tracker.ack(ticket), Err(ResolveError::Revoked));
        assert!(tracker.is_partition_drained(&7));
        assert_eq!(tracker.in_flight(), 0);
    }
}
