//! A barrier flush: wait until every covered record is resolved, then
//! commit the latest covered offset of each partition, or abort.
//!
//! This module owns the flush carry and the folding of drained generations
//! into it. Only the live [`Flush`] (the holder of the tracker's `flushing`
//! flag) touches the carry, so it needs no atomics of its own.
//!
//! # Folding
//!
//! A flush covers the carry plus every generation from the tracker's
//! `oldest` through the one its `begin_flush` sealed (`upto`). Whenever the
//! oldest covered generation has no live records left, `wait` folds it: each
//! of its partition cells moves into the carry (the carry's older slot for
//! that partition is released: the newer generation wins, unless its record
//! is of an older life of the partition than the carry's, see `fold`), its failure count
//! is added, `oldest` moves to the next generation, and the generation is
//! handed to the epoch collector. The chain therefore only ever holds
//! generations that still have records in flight (plus the open one), and
//! the carry holds at most one retained slot per partition.
//!
//! `commit` releases the carry's slots; `abort` leaves carry and chain as
//! they are, so the next flush covers them again (its newer cells win).
//! Failures are never cleared: offsets never move past a failed record.

use crate::cell::Latest;
use crate::generation::Generation;
use crate::mode::{Barrier, Mode};
use crate::slab::HELD;
use crate::sync::epoch;
use crate::sync::Ordering;
use crate::{FlushError, Tracker};
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

/// What folded generations left behind.
#[derive(Default)]
pub(crate) struct Carry {
    /// Per partition number: its latest folded record. The carry holds
    /// each such slot (`HELD`).
    kept: Vec<Kept>,
    /// Failed records among the folded generations: `(partition, life,
    /// count)`. A revoke of the partition forgives those of its older
    /// lives (they stop counting, and folds drop them).
    failures: Vec<(u32, u32, u64)>,
}

/// A partition's latest folded record, in the carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Kept {
    /// None folded (or committed since).
    #[default]
    Nothing,
    /// A held slot, whose offset and life are read from it.
    Slot(usize),
    /// An inline offset's bits, and its life (widened, see `cell::widen`).
    Bits(u64, u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for covered records.
    Pending,
    /// `wait` returned `Ok`: `commit` may proceed.
    Ready,
    /// `wait` returned `Interrupted`: only abort remains.
    Interrupted,
}

/// A barrier flush in progress, from [`Tracker::begin_flush`].
///
/// [`wait`](Flush::wait) until every covered record is acked and take the
/// offsets, store them where your restart will read them, then
/// [`commit`](Flush::commit). If storing fails, [`abort`](Flush::abort) (or
/// drop the flush): the next flush covers the same records again, and newer
/// ones. Only one flush exists at a time; a `Flush` leaked with
/// `mem::forget` keeps that place, and `begin_flush` then returns
/// `InProgress` for good (nothing unsafe happens).
///
/// ```
/// use std::time::Duration;
/// use inflight::{FlushError, Tracker};
///
/// let tracker = Tracker::new();
/// let ticket = tracker.send("p", 7_u64).unwrap();
/// let mut flush = tracker.begin_flush().unwrap();
/// assert_eq!(flush.pending(), 1);
/// assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Timeout { pending: 1 }));
/// tracker.ack(ticket).unwrap();
/// let offsets = flush.wait(Duration::from_secs(1)).unwrap();
/// assert_eq!(offsets.get("p"), Some(&7));
/// flush.commit().unwrap();
/// ```
#[must_use = "dropping a Flush aborts it"]
pub struct Flush<'t, P, O, M: Mode = Barrier> {
    pub(crate) tracker: &'t Tracker<P, O, M>,
    pub(crate) state: FlushState,
}

/// A flush's own state, whoever holds the tracker: a [`Flush`] (by
/// reference) or an [`OwnedFlush`] (by `Arc`).
#[derive(Debug)]
pub(crate) struct FlushState {
    /// The number of the generation `begin_flush` sealed.
    upto: u64,
    /// Every covered generation has been folded into the carry.
    folded: bool,
    phase: Phase,
}

impl<'t, P, O, M: Mode> Flush<'t, P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    pub(crate) fn new(tracker: &'t Tracker<P, O, M>, upto: u64) -> Self {
        Self {
            tracker,
            state: FlushState::new(upto),
        }
    }

    /// The **last done** offset of each covered partition (Connect's
    /// convention; for Kafka, commit it **+ 1**), once every covered record
    /// is acked: waits until every covered record is resolved, at most
    /// `timeout`.
    ///
    /// - `Ok(offsets)`: every covered record was acked; for each partition
    ///   with a covered record, the offset of its latest covered record (in
    ///   send order). Safe to store; then [`commit`](Self::commit).
    /// - [`FlushError::Failed`]: a covered record failed. Returned as soon
    ///   as one has (a waiting call wakes up for it), without waiting for
    ///   the others: no offsets, since offsets never move past a failed
    ///   record. `failed` counts the covered failures seen so far. On a
    ///   watermark tracker a failure is seen once its partition's watermark
    ///   reaches it.
    /// - [`FlushError::Timeout`]: still pending at the deadline; the flush
    ///   is still usable: wait again or abort.
    /// - [`FlushError::Interrupted`]: [`Tracker::interrupt`] was called; the
    ///   flush can only be aborted now.
    ///
    /// Parks the thread (after a short spin) and wakes as soon as the last
    /// covered record is resolved, not at the timeout. A zero timeout polls.
    ///
    /// ```
    /// use std::time::Duration;
    /// let tracker = inflight::Tracker::new();
    /// let ticket = tracker.send(0_u32, 5_u64).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// std::thread::scope(|s| {
    ///     s.spawn(|| tracker.ack(ticket).unwrap());
    ///     let offsets = flush.wait(Duration::from_secs(10)).unwrap();
    ///     assert_eq!(offsets[&0], 5);
    /// });
    /// ```
    pub fn wait(&mut self, timeout: Duration) -> Result<HashMap<P, O>, FlushError> {
        self.state.wait(self.tracker, timeout)
    }

    /// Releases the carried offsets: the records up to this flush's seal are
    /// committed. Call after [`wait`](Self::wait) returned `Ok` and you
    /// stored its offsets. Otherwise returns [`FlushError::NotReady`] and
    /// aborts.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, Tracker};
    /// let tracker = Tracker::<u8, u8>::new();
    /// let flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.commit(), Err(FlushError::NotReady));
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert!(flush.wait(Duration::ZERO).unwrap().is_empty());
    /// flush.commit().unwrap();
    /// ```
    pub fn commit(mut self) -> Result<(), FlushError> {
        self.state.commit(self.tracker)
    }

    /// Gives up on this flush. The next flush covers this one's records as
    /// well as newer ones; offsets merge, later sends winning. Dropping a
    /// `Flush` does the same.
    ///
    /// ```
    /// use std::time::Duration;
    /// let tracker = inflight::Tracker::new();
    /// let old = tracker.send("p", 1_u64).unwrap();
    /// tracker.begin_flush().unwrap().abort();
    /// let new = tracker.send("p", 2_u64).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.pending(), 2); // both generations are covered
    /// tracker.ack(old).unwrap();
    /// tracker.ack(new).unwrap();
    /// assert_eq!(flush.wait(Duration::ZERO).unwrap()["p"], 2);
    /// ```
    pub fn abort(self) {}

    /// Covered records not yet resolved.
    pub fn pending(&self) -> usize {
        self.state.pending(self.tracker)
    }
}

impl FlushState {
    pub(crate) fn new(upto: u64) -> Self {
        Self {
            upto,
            folded: false,
            phase: Phase::Pending,
        }
    }

    fn wait<P, O, M: Mode>(
        &mut self,
        tracker: &Tracker<P, O, M>,
        timeout: Duration,
    ) -> Result<HashMap<P, O>, FlushError>
    where
        P: Hash + Eq + Clone + Send + Sync,
        O: Clone + Send + Sync,
    {
        if self.is_interrupted() {
            return Err(FlushError::Interrupted);
        }
        let drained = tracker.block_until_drained(timeout, || self.advance(tracker));
        self.finish(tracker, drained)
    }

    /// Whether a wait of this flush received an interrupt: every later wait
    /// returns `Interrupted` at once.
    pub(crate) fn is_interrupted(&self) -> bool {
        self.phase == Phase::Interrupted
    }

    /// The result of a wait (blocking or async) that ended with `drained`.
    pub(crate) fn finish<P, O, M: Mode>(
        &mut self,
        tracker: &Tracker<P, O, M>,
        drained: Result<(), FlushError>,
    ) -> Result<HashMap<P, O>, FlushError>
    where
        P: Hash + Eq + Clone + Send + Sync,
        O: Clone + Send + Sync,
    {
        match drained {
            Ok(()) => self.outcome(tracker),
            Err(FlushError::Interrupted) => {
                self.phase = Phase::Interrupted;
                Err(FlushError::Interrupted)
            }
            Err(e) => Err(e),
        }
    }

    /// The result once nothing covered is pending.
    fn outcome<P, O, M: Mode>(
        &mut self,
        tracker: &Tracker<P, O, M>,
    ) -> Result<HashMap<P, O>, FlushError>
    where
        P: Hash + Eq + Clone + Send + Sync,
        O: Clone + Send + Sync,
    {
        // SAFETY: this flush holds the tracker's `flushing` flag, which makes
        // it the only user of the carry.
        let carry = tracker.carry.with(|c| unsafe { &*c });
        let failed = carry.current_failures(tracker);
        if failed > 0 {
            return Err(FlushError::Failed { failed });
        }
        let slots = &tracker.slots;
        let partitions = &tracker.partitions;
        let kept = carry.kept.iter().filter(|&&k| k != Kept::Nothing);
        let mut offsets = HashMap::with_capacity(kept.count());
        for (number, &kept) in carry.kept.iter().enumerate() {
            // A record of an older life of its partition (revoked since)
            // is not reported: its life ended without its records.
            let current = |life| tracker.is_current_life(number as u32, life);
            let offset = match kept {
                Kept::Nothing => continue,
                Kept::Slot(index) => {
                    let slot = slots.slot_of(index);
                    if !current(slot.life()) {
                        continue;
                    }
                    // SAFETY: the carry holds this slot, so it keeps its
                    // value until the carry releases it, which only this
                    // flush does.
                    unsafe { slot.value() }.clone()
                }
                Kept::Bits(_, life) if !current(life) => continue,
                // SAFETY: only an inline mode's cells keep bits, and its
                // `O` is an `InlineOffset` (see `crate::inline`). No user
                // code: a primitive integer.
                Kept::Bits(bits, _) => unsafe { crate::inline::from_bits::<O>(bits) },
            };
            if let Some(partition) = partitions.key(number) {
                offsets.insert(partition.clone(), offset);
            }
        }
        // Only once the offsets are in hand: a panicking `Clone` must not
        // leave a flush that commits offsets it never returned.
        self.phase = Phase::Ready;
        Ok(offsets)
    }

    /// Folds drained covered generations into the carry and returns how many
    /// covered records are still pending, or [`FlushError::Failed`] as soon
    /// as a covered record failed (guarantee 15): the flush can then never
    /// succeed, so nobody should wait for the rest.
    pub(crate) fn advance<P, O, M: Mode>(
        &mut self,
        tracker: &Tracker<P, O, M>,
    ) -> Result<usize, FlushError> {
        if self.folded {
            return Ok(0);
        }
        let guard = epoch::pin();
        // SAFETY: this flush holds the `flushing` flag (see `outcome`).
        let carry = tracker.carry.with_mut(|c| unsafe { &mut *c });
        let shards = tracker.shards.snapshot();
        // Acquire: see the generation's initialisation.
        let mut current = tracker.oldest.load(Ordering::Acquire, &guard);
        let mut pending = 0;
        let mut folding = true;
        // Failures of generations not yet folded: counted before their
        // resolution's leave, which then wakes us (see `Tracker::resolve`).
        let mut failed = 0;
        loop {
            // SAFETY: every generation from `oldest` through `upto` is in the
            // chain (this flush is the only one that removes generations), and
            // the guard keeps any we remove alive until we are done.
            let generation = unsafe { current.deref() };
            let is_upto = generation.id == self.upto;
            let live = generation.pending(&shards);
            // Acquire: a sealed generation's successor is set.
            let next = generation.next.load(Ordering::Acquire, &guard);
            if folding && live == 0 {
                // Drained (so captured, and sealed): its cells are final.
                // Move them into the carry and drop it.
                debug_assert!(!next.is_null());
                fold(carry, generation, tracker);
                // Release: publishes the new chain head to `in_flight`.
                tracker.oldest.store(next, Ordering::Release);
                // SAFETY: unlinked just above; other threads reach it only
                // under guards, which the collector waits for.
                unsafe { guard.defer_destroy(current) };
                if is_upto {
                    self.folded = true;
                    return Ok(0);
                }
            } else {
                folding = false;
                pending += live;
                generation.for_each_failure(|partition, life, count| {
                    if tracker.is_current_life(partition, life) {
                        failed += count as usize;
                    }
                });
                if is_upto {
                    break;
                }
            }
            current = next;
        }
        let failed = failed + carry.current_failures(tracker);
        if failed != 0 {
            return Err(FlushError::Failed { failed });
        }
        Ok(pending)
    }

    fn commit<P, O, M: Mode>(&mut self, tracker: &Tracker<P, O, M>) -> Result<(), FlushError> {
        if self.phase != Phase::Ready {
            return Err(FlushError::NotReady);
        }
        // SAFETY: this flush holds the `flushing` flag (see `outcome`).
        let carry = tracker.carry.with_mut(|c| unsafe { &mut *c });
        for kept in carry.kept.iter_mut() {
            if let Kept::Slot(index) = std::mem::take(kept) {
                // No user code: the offset is dropped at the slot's reuse.
                tracker.slots.release(index, HELD);
            }
        }
        Ok(())
    }

    fn pending<P, O, M: Mode>(&self, tracker: &Tracker<P, O, M>) -> usize
    where
        P: Hash + Eq + Clone + Send + Sync,
        O: Clone + Send + Sync,
    {
        if self.folded {
            return 0;
        }
        tracker.pending_through(self.upto)
    }
}

/// A barrier flush that holds its tracker by `Arc`, from
/// [`Tracker::begin_flush_owned`]. It is a [`Flush`] in every other way
/// (the same methods and rules; see there), but `Send + 'static`: it can
/// be kept in a struct next to the `Arc<Tracker>` or moved into a spawned
/// task.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use inflight::{OwnedFlush, Tracker};
///
/// struct Committer {
///     tracker: Arc<Tracker<&'static str, u64>>,
///     flush: Option<OwnedFlush<&'static str, u64>>,
/// }
///
/// let tracker = Arc::new(Tracker::new());
/// let ticket = tracker.send("p", 1_u64).unwrap();
/// let mut committer = Committer { flush: tracker.begin_flush_owned().ok(), tracker };
/// committer.tracker.ack(ticket).unwrap();
/// let mut flush = committer.flush.take().unwrap();
/// assert_eq!(flush.wait(Duration::from_secs(1)).unwrap()["p"], 1);
/// flush.commit().unwrap();
/// ```
#[must_use = "dropping an OwnedFlush aborts it"]
pub struct OwnedFlush<P, O, M: Mode = Barrier> {
    // The user's `Arc` (the public API's), not shared memory of the crate's
    // own, so it is std's even under loom.
    tracker: std::sync::Arc<Tracker<P, O, M>>,
    state: FlushState,
}

impl<P, O, M: Mode> OwnedFlush<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    pub(crate) fn new(tracker: std::sync::Arc<Tracker<P, O, M>>, upto: u64) -> Self {
        Self {
            tracker,
            state: FlushState::new(upto),
        }
    }

    /// [`Flush::wait`]: the **last done** offset of each covered partition,
    /// once every covered record is resolved (at most `timeout`).
    pub fn wait(&mut self, timeout: Duration) -> Result<HashMap<P, O>, FlushError> {
        self.state.wait(&self.tracker, timeout)
    }

    /// [`Flush::wait_async`]: waits without blocking a thread. Cancel-safe.
    // Not an `async fn`: the signature promises `Send` (see `Flush`).
    #[allow(clippy::manual_async_fn)]
    pub fn wait_async(
        &mut self,
    ) -> impl std::future::Future<Output = Result<HashMap<P, O>, FlushError>> + Send + '_ {
        self.state.wait_async(&self.tracker)
    }

    /// [`Flush::commit`]: releases the carried offsets, after `wait`
    /// returned `Ok`; otherwise [`FlushError::NotReady`], and aborts.
    pub fn commit(mut self) -> Result<(), FlushError> {
        self.state.commit(&self.tracker)
    }

    /// [`Flush::abort`]: gives up on this flush; dropping it does the same.
    pub fn abort(self) {}

    /// [`Flush::pending`]: covered records not yet resolved.
    pub fn pending(&self) -> usize {
        self.state.pending(&self.tracker)
    }

    /// The tracker this flush belongs to.
    pub fn tracker(&self) -> &std::sync::Arc<Tracker<P, O, M>> {
        &self.tracker
    }
}

impl<P, O, M: Mode> Drop for OwnedFlush<P, O, M> {
    fn drop(&mut self) {
        self.tracker.end_flush();
    }
}

impl<P, O, M: Mode> fmt::Debug for OwnedFlush<P, O, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedFlush")
            .field("phase", &self.state.phase)
            .field("folded", &self.state.folded)
            .finish_non_exhaustive()
    }
}

fn fold<P, O, M: Mode>(carry: &mut Carry, generation: &Generation, tracker: &Tracker<P, O, M>) {
    let slots = &tracker.slots;
    generation.for_each_cell(M::INLINE, |partition, latest, life| {
        if carry.kept.len() <= partition {
            carry.kept.resize(partition + 1, Kept::Nothing);
        }
        let (new, life) = match latest {
            // A held slot's life is its own (whole, in either format).
            Latest::Slot(slot) => (Kept::Slot(slot), slots.slot_of(slot).life()),
            Latest::Bits(bits) => {
                // The cell kept the life's low 16 bits, of a life less than
                // 2^15 behind the partition's (revokes clear older ones:
                // see `cell::CLEAR_EVERY`): widened against its life now.
                let now = tracker.partitions.life(partition).map_or(0, |l| {
                    // Acquire: as in `is_current`.
                    l.load(Ordering::Acquire)
                });
                let life = crate::cell::widen(life, now);
                (Kept::Bits(bits, life), life)
            }
        };
        // The newer generation's record wins, unless it is of an older life
        // of its partition than the carry's: a send that raced a revoke
        // entered this generation after a send of the new life entered an
        // older one. Its life ended without it, so it is dropped and the
        // new life's record stays. A held slot (the carry's or the drained
        // cell's) keeps its life.
        // Mutant `stale_displaces_new` (loom suite only) skips this check
        // too.
        let kept = carry.kept[partition];
        #[cfg(not(inflight_mutant = "stale_displaces_new"))]
        {
            let kept_life = match kept {
                Kept::Nothing => None,
                Kept::Slot(slot) => Some(slots.slot_of(slot).life()),
                Kept::Bits(_, life) => Some(life),
            };
            if kept_life.is_some_and(|kept| crate::watermark::newer(kept, life)) {
                if let Kept::Slot(slot) = new {
                    // No user code: the offset is dropped at the slot's reuse.
                    slots.release(slot, HELD);
                }
                return;
            }
        }
        #[cfg(inflight_mutant = "stale_displaces_new")]
        let _ = life;
        carry.kept[partition] = new;
        if let Kept::Slot(older) = kept {
            // No user code: the offset is dropped at the slot's reuse.
            slots.release(older, HELD);
        }
    });
    generation.for_each_failure(|partition, life, count| {
        carry.failures.push((partition, life, count));
    });
    // Failures of lives a revoke ended never count again.
    carry
        .failures
        .retain(|&(partition, life, _)| tracker.is_current_life(partition, life));
}

impl Carry {
    /// Failed records whose partition's life has not ended since.
    fn current_failures<P, O, M: Mode>(&self, tracker: &Tracker<P, O, M>) -> usize {
        self.failures
            .iter()
            .filter(|&&(partition, life, _)| tracker.is_current_life(partition, life))
            .map(|&(_, _, count)| count as usize)
            .sum()
    }
}

impl<P, O, M: Mode> Drop for Flush<'_, P, O, M> {
    fn drop(&mut self) {
        self.tracker.end_flush();
    }
}

impl<P, O, M: Mode> fmt::Debug for Flush<'_, P, O, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flush")
            .field("phase", &self.state.phase)
            .field("folded", &self.state.folded)
            .finish_non_exhaustive()
    }
}
