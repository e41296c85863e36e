//! Resolution: `ack`, `fail` and their raw twins.
//!
//! A ticket resolves with one compare-and-swap on its slot's state word
//! (from `LIVE(tag)`); the record then leaves its generation's count (on a
//! watermark tracker, the advance does that), and the slot goes back on a
//! free list with its offset, to be dropped at its reuse. Waiters are woken
//! last. See "Slots and tickets" in [`crate::implementation`].

use crate::counts::entered_from;
use crate::mode::Mode;
use crate::slab::Outcome;
use crate::ticket::{RawTicket, Ticket};
use crate::tracker::{WAKE_ROOM, WAKE_WAITERS};
use crate::{ResolveBatchError, ResolveError, Tracker};
use std::cell::Cell;
use std::hash::Hash;

/// **Resolve.** When the sink reports, [`ack`](Self::ack) the ticket
/// (delivered) or [`fail`](Self::fail) it (lost for good), from any thread
/// and in any order; [`ack_raw`](Self::ack_raw) takes a ticket that went
/// through C as a `u64`, [`ack_all`](Self::ack_all) a batch.
///
/// ```
/// use inflight::{ResolveError, Tracker};
/// let tracker = Tracker::new();
/// let a = tracker.send("orders-0", 1_u64).unwrap();
/// let raw = tracker.send("orders-0", 2_u64).unwrap().into_raw();
/// tracker.ack_raw(raw).unwrap();
/// tracker.fail(a).unwrap();
/// assert_eq!(tracker.ack_raw(raw), Err(ResolveError::AlreadyResolved));
/// ```
impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// Marks the ticket's record delivered.
    ///
    /// Fails, changing nothing, if the ticket belongs to another tracker
    /// ([`ResolveError::ForeignTracker`]); with a `Ticket` the type system
    /// already rules out resolving twice.
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let ticket = tracker.send(1_u16, "a".to_string()).unwrap();
    /// tracker.ack(ticket).unwrap();
    /// assert_eq!(tracker.in_flight(), 0);
    /// ```
    pub fn ack(&self, ticket: Ticket) -> Result<(), ResolveError> {
        self.resolve(ticket.into_raw(), Outcome::Ack).map_err(typed)
    }

    /// Marks the ticket's record as failed for good. Every barrier flush that
    /// covers it then returns [`FlushError::Failed`](crate::FlushError::Failed):
    /// offsets never move past a record that was not delivered.
    /// [`failed_records`](Self::failed_records) then names it: its offset is
    /// cloned here, after the failure is recorded (if that `Clone` panics,
    /// the record is failed all the same, and goes unnamed).
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, Tracker};
    /// let tracker = Tracker::new();
    /// let ticket = tracker.send("p", 1_u64).unwrap();
    /// tracker.fail(ticket).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Failed { failed: 1 }));
    /// ```
    pub fn fail(&self, ticket: Ticket) -> Result<(), ResolveError> {
        self.fail_named(ticket.into_raw()).map_err(typed)
    }

    /// [`ack`](Self::ack) for a ticket turned into an integer by
    /// [`Ticket::into_raw`]. Any `u64` is safe: a forged, stale, foreign or
    /// already resolved value returns an error and changes nothing.
    ///
    /// ```
    /// use inflight::{ResolveError, Tracker};
    /// let tracker = Tracker::<&str, u64>::new();
    /// assert!(tracker.ack_raw(0).is_err());
    /// assert!(tracker.ack_raw(u64::MAX).is_err());
    /// let raw = tracker.send("p", 1).unwrap().into_raw();
    /// tracker.ack_raw(raw).unwrap();
    /// assert_eq!(tracker.ack_raw(raw), Err(ResolveError::AlreadyResolved));
    /// ```
    pub fn ack_raw(&self, raw: u64) -> Result<(), ResolveError> {
        self.resolve(raw, Outcome::Ack)
    }

    /// [`fail`](Self::fail) for a raw ticket; any `u64` is safe, as with
    /// [`ack_raw`](Self::ack_raw).
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let raw = tracker.send("p", 1_u64).unwrap().into_raw();
    /// tracker.fail_raw(raw).unwrap();
    /// assert!(tracker.ack_raw(raw).is_err());
    /// ```
    pub fn fail_raw(&self, raw: u64) -> Result<(), ResolveError> {
        self.fail_named(raw)
    }

    /// Fails `raw`'s record and names it for
    /// [`failed_records`](Self::failed_records): held before, named after
    /// (see `failed`).
    fn fail_named(&self, raw: u64) -> Result<(), ResolveError> {
        let mut naming = self.naming();
        naming.hold(raw, self.id);
        let result = self.resolve(raw, Outcome::Fail);
        self.name_failed(naming); // user code, last
        result
    }

    /// Acks every ticket of `tickets`, as [`ack`](Self::ack) each, and
    /// cheaper: the records leave their generations, give their permits
    /// back and advance their watermarks once per run rather than once
    /// each, and waiters are woken once. Returns how many were acked.
    ///
    /// Give it the tickets at hand (a `Vec`, a sink's report), not a
    /// stream that blocks: the counts and permits are settled every 64
    /// tickets, but waiters (a flush, a drain, a sender waiting for room)
    /// are woken only when it returns. For tickets that trickle in, use
    /// [`ack`](Self::ack).
    ///
    /// Every ticket is tried: one that cannot be resolved (another
    /// tracker's, or a revoked partition's) changes nothing and is counted
    /// in the error, with the first reason, while the others resolve.
    ///
    /// ```
    /// use inflight::{ResolveError, Tracker};
    ///
    /// let tracker = Tracker::builder().watermarks().build();
    /// let mut tickets = Vec::new();
    /// tracker.send_batch(&"p", 1_u64..=64, &mut tickets).unwrap();
    /// tickets.reverse(); // any order
    /// assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(64));
    /// assert_eq!(tracker.committable().get("p"), Some(&64));
    ///
    /// let other = Tracker::<&str, u64>::new();
    /// let mine = tracker.send("p", 65).unwrap();
    /// let theirs = other.send("p", 1).unwrap();
    /// let err = tracker.ack_all([mine, theirs]).unwrap_err();
    /// assert_eq!((err.resolved, err.refused), (1, 1));
    /// assert_eq!(err.first, ResolveError::ForeignTracker);
    /// ```
    pub fn ack_all<I>(&self, tickets: I) -> Result<usize, ResolveBatchError>
    where
        I: IntoIterator<Item = Ticket>,
    {
        self.resolve_all(tickets.into_iter().map(Ticket::into_raw), Outcome::Ack)
    }

    /// Fails every ticket of `tickets`, as [`fail`](Self::fail) each, with
    /// the savings (but each failure is recorded on its own), the error and
    /// the advice of [`ack_all`](Self::ack_all): a sink that lost a whole
    /// batch.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, Tracker};
    ///
    /// let tracker = Tracker::new();
    /// let mut tickets = Vec::new();
    /// tracker.send_batch(&"p", [1_u64, 2, 3], &mut tickets).unwrap();
    /// assert_eq!(tracker.fail_all(tickets), Ok(3));
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Failed { failed: 3 }));
    /// ```
    pub fn fail_all<I>(&self, tickets: I) -> Result<usize, ResolveBatchError>
    where
        I: IntoIterator<Item = Ticket>,
    {
        let mut naming = self.naming();
        let raws = tickets.into_iter().map(|ticket| {
            let raw = ticket.into_raw();
            naming.hold(raw, self.id);
            raw
        });
        let result = self.resolve_all(raws, Outcome::Fail);
        self.name_failed(naming); // user code, last
        result
    }

    /// Resolves the record of `raw`: inlined into `ack` and `ack_raw`, the
    /// pair's hot path (issue 41).
    #[inline(always)]
    fn resolve(&self, raw: u64, outcome: Outcome) -> Result<(), ResolveError> {
        let ticket = RawTicket::decode(raw);
        if ticket.tracker != self.id {
            return Err(ResolveError::ForeignTracker);
        }
        let resolved = self.slots.resolve(ticket.index, ticket.tag, outcome)?;
        if M::WATERMARKS {
            // The record stays queued (so not freed), live in its generation
            // and holding its permit until the watermark passes it; the
            // advance (ours or the thread's already advancing) counts it out
            // of all three.
            debug_assert!(!resolved.freed);
            // Mutant `permit_at_ack` (loom suite only): the permit comes
            // back at the resolution, so acked records held behind an
            // unacked one no longer count against the capacity.
            let early = cfg!(inflight_mutant = "permit_at_ack") && self.return_permit();
            let (drained, room) = self.advance_watermark(resolved.partition);
            // One word of flags, as below.
            let mut wake = WAKE_WAITERS * u8::from(drained | resolved.watched);
            wake |= WAKE_ROOM * u8::from(room | early);
            // Wakers are user code: last.
            self.wake_flags(wake);
            return Ok(());
        }
        let freed = resolved.freed;
        let (generation, route) = entered_from(resolved.generation);
        // SAFETY: `resolve` read the pointer while the record was LIVE and
        // its CAS proved it is this record's generation. The generation is
        // alive: this record still counts in it until our `leave` below, and
        // a generation is freed only after it drained.
        let generation = unsafe { &*generation };
        if outcome == Outcome::Fail {
            self.add_failed(generation, resolved.partition, resolved.life, 1);
        }
        // A failure wakes waiters too: a flush that covers it fails at once
        // (guarantee 15).
        let failed = outcome == Outcome::Fail;
        // Mutant `silent_fail` (loom suite only): a failure wakes nobody, so
        // a flush waits for the rest instead of failing at once.
        #[cfg(inflight_mutant = "silent_fail")]
        let failed = {
            let _ = failed;
            false
        };
        // What to wake, gathered in one word of flags and tested once.
        let mut wake = WAKE_WAITERS * u8::from(failed | resolved.watched);
        wake |= WAKE_WAITERS * u8::from(self.leave((generation, route), 1));
        // After the leave: a send that takes this permit then counts into a
        // generation the record has left, so `in_flight` never reads more
        // than the capacity.
        wake |= WAKE_ROOM * u8::from(self.return_permit());
        // The generation may be gone from here on; the slot is still ours.
        // Its offset stays in it until its reuse: no user code here.
        if freed {
            self.slots.recycle_slot(ticket.index, resolved.slot);
        }
        // Wakers are user code: last.
        self.wake_flags(wake);
        Ok(())
    }
}

/// What a typed [`Ticket`]'s resolution answers for what its raw form's
/// would: a `Ticket` is move-only and has no `from_raw`, so one held by the
/// caller was never resolved, and a slot that moved past its tag (the
/// slot issued it: `AlreadyResolved`) was released by a revoke of its
/// partition and reused since. It answers `Revoked` for as long as it
/// lives, however often the slot was reused (a raw ticket may answer
/// `AlreadyResolved` once its slot is reused).
pub(crate) fn typed(error: ResolveError) -> ResolveError {
    match error {
        // Mutant `revoked_reuse` (loom suite only): a revoked typed ticket
        // answers `AlreadyResolved` once its slot was reused.
        #[cfg(not(inflight_mutant = "revoked_reuse"))]
        ResolveError::AlreadyResolved => ResolveError::Revoked,
        other => other,
    }
}

impl<P, O, M: Mode> Tracker<P, O, M> {
    /// Advances the watermark of partition `partition` (a watermark
    /// tracker's), or leaves that to the thread already advancing it, and
    /// returns whether waiters must be woken and whether a sender waits for
    /// room (for a permit the advance gave back, or for the partition's
    /// metadata budget, see [`budget_freed`](Self::budget_freed)). The
    /// caller wakes them, last.
    ///
    /// A record passed gives its permit back here, not at its resolution:
    /// on a bounded tracker an acked record held behind an unresolved one
    /// of its partition still counts against the capacity (see `permits`).
    pub(crate) fn advance_watermark(&self, partition: u32) -> (bool, bool) {
        let Some(watermarks) = self.marks() else {
            return (false, false);
        };
        let room = Cell::new(false);
        let wakes = watermarks.advance::<O, M>(
            &self.slots,
            partition as usize,
            // Out of line: the advance's loop calls it once per group of
            // records passed, and stays the same whatever it costs.
            #[inline(never)]
            |entered, n, failed, life| {
                let (generation, route) = entered_from(entered);
                // SAFETY: the advance passes records it has not yet counted
                // out of their generation, which therefore cannot have been
                // folded.
                let generation = unsafe { &*generation };
                // Tested here, not in the call: the advance passes acked
                // records far more often than failed ones.
                if failed != 0 {
                    std::hint::cold_path();
                    self.add_failed(generation, partition, life, failed);
                }
                // A failure wakes waiters too: a flush that covers it fails
                // at once (guarantee 15).
                let wakes = self.leave((generation, route), n) || failed != 0;
                // After the leave, as in `resolve`.
                if !cfg!(inflight_mutant = "permit_at_ack") {
                    room.set(self.return_permits(n as usize) | room.get());
                }
                wakes
            },
        );
        (wakes, room.get() | self.budget_freed(partition))
    }

    /// Inside [`advance_watermark`](Self::advance_watermark) of
    /// `partition`, after the advance (whose add to the partition's `work`
    /// orders this): on a progress tracker, whether a sender waits for the partition's
    /// metadata budget, which the resolution (or revoke) may have freed.
    /// The caller then wakes the room's waiters, last.
    #[inline]
    fn budget_freed(&self, partition: u32) -> bool {
        match (self.marks(), self.progress_config()) {
            (Some(watermarks), Some(_)) => watermarks.budget_freed(partition as usize),
            _ => false,
        }
    }

    /// Fails the record `index` with `tag` on a watermark tracker, for a
    /// caller that is unwinding: no waker's panic escapes.
    pub(crate) fn fail_quietly(&self, index: usize, tag: u32) {
        if let Ok(resolved) = self.slots.resolve(index, tag, Outcome::Fail) {
            self.name_unwound(resolved.partition, resolved.life);
            let (drained, room) = self.advance_watermark(resolved.partition);
            self.wake_quietly(drained || resolved.watched, room);
        }
    }
}
