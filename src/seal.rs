//! Sealing: `begin_flush`, `drain` and the captures of count shards that
//! close a generation, and the blocking wait they share.
//!
//! A seal moves `open` to a fresh generation, then `open_id`, then captures
//! every count shard for every generation up to the sealed one (helping a
//! slow sealer, or done by a sender whose shard lags). See "Generations,
//! count shards and the seal" and "Drain" in [`crate::implementation`].

use crate::counts::{Shards, SHARDS};
use crate::generation::Generation;
use crate::mode::Mode;
use crate::sync::epoch::{self, Guard, Owned, Shared};
use crate::sync::{Ordering, SPINS_BEFORE_PARK};
use crate::{BeginFlushError, Flush, FlushError, OwnedFlush, Tracker};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// **Commit at a barrier.** [`begin_flush`](Self::begin_flush) seals what
/// was sent so far; the [`Flush`]'s [`wait`](Flush::wait) gives, once all
/// of it is acked, each partition's **last done** offset among it (to
/// Kafka, commit it + 1), and [`commit`](Flush::commit) ends the flush.
///
/// ```
/// use std::time::Duration;
/// use inflight::Tracker;
/// let tracker = Tracker::new();
/// let ticket = tracker.send("orders-0", 41_u64).unwrap();
/// let mut flush = tracker.begin_flush().unwrap();
/// tracker.ack(ticket).unwrap();
/// assert_eq!(flush.wait(Duration::from_secs(1)).unwrap()["orders-0"], 41);
/// flush.commit().unwrap();
/// ```
impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// Captures every count word for every generation numbered up to
    /// `upto`, oldest first, so that all of them are sealed: none admits a
    /// record any more, and the last resolution of each wakes waiters.
    /// Call once `open_id` is past `upto` (moved by the caller, or seen
    /// moved). Idempotent; concurrent callers share the work. Returns true
    /// if a capture drained a generation: the caller must wake waiters
    /// (user code, so once its own bookkeeping is done).
    #[must_use]
    pub(crate) fn capture_through(&self, upto: u64, guard: &Guard) -> bool {
        // Before reading the owners' words: pairs with each owner's light
        // barrier (see `counts`).
        Shards::barrier();
        let mut wake = false;
        self.walk(guard, Some(upto), |generation| {
            // What this call captured, handed over in one step at the end:
            // until then the words' `UNIT`s stay in `pending`, which only
            // keeps it higher for a moment.
            let (mut words, mut live) = (0, 0);
            for shard in 0..SHARDS {
                for taken in [
                    self.shards.take_remote(shard, generation),
                    self.shards.take_own(shard, generation),
                ]
                .into_iter()
                .flatten()
                {
                    words += 1;
                    live += taken;
                }
                // Unit tests widen the window in which some shards count
                // for the new generation and others still for this one.
                #[cfg(all(test, not(loom)))]
                for _ in 0..4 {
                    std::thread::yield_now();
                }
            }
            wake |= generation.hand_over(words, live);
        });
        wake
    }

    /// What a sender without a shard of its own does when its shard's
    /// `remote` word lags behind `open_id`: captures that word for every
    /// generation up to `upto` (the owners' words are the sealer's to
    /// capture, after its heavy barrier).
    #[cold]
    #[must_use]
    pub(crate) fn catch_up(&self, shard: usize, upto: u64) -> bool {
        let mut wake = false;
        self.walk(&epoch::pin(), Some(upto), |generation| {
            wake |= self.shards.capture_remote(shard, generation);
        });
        wake
    }

    /// Moves `open_id` up to `id` (never down: a slow sealer may come after a
    /// faster, later one).
    fn advance_open_id(&self, id: u64) {
        // Release: a sender that reads the new number (Acquire) sees `open`
        // moved and what this thread did before, such as a `close`.
        self.open_id.fetch_max(id, Ordering::Release);
    }

    /// Seals `current` if it is still open and opens its successor. Returns
    /// true if this call did the seal. Lock-free: a failed attempt means
    /// another thread sealed `current`, and this one helps move `open` on.
    pub(crate) fn seal(&self, current: Shared<'_, Generation>, guard: &Guard) -> bool {
        // SAFETY: `current` came from `open` under `guard`, so it is alive.
        let generation = unsafe { current.deref() };
        let fresh = Owned::new(Generation::new(generation.id + 1, generation));
        // AcqRel: Release publishes the fresh generation's initialisation to
        // whoever follows `next`; Acquire (on failure) sees the winner's.
        let (won, next) = match generation.next.compare_exchange(
            Shared::null(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
            guard,
        ) {
            Ok(next) => (true, next),
            // Lost: help the winner move `open` past `current`.
            Err(lost) => (false, lost.current),
        };
        // AcqRel: Release publishes `next` to whoever loads `open`. It fails
        // only when another thread (winner or helper) already moved it.
        let _ =
            self.open
                .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire, guard);
        // Then `open_id`, before the caller captures any shard: a sender
        // that finds its shard moved must find a newer number.
        self.advance_open_id(generation.id + 1);
        // Unit tests widen the window in which `current` is no longer open
        // but its shards still count for it, so the stress tests reach it.
        #[cfg(all(test, not(loom)))]
        std::thread::yield_now();
        won
    }

    /// Starts a barrier flush: seals the open generation (the linearization
    /// point: every send that returned before this call is covered, every
    /// send that starts after it is not) and returns the [`Flush`] to wait on.
    ///
    /// The flush also covers every earlier sealed generation not yet
    /// committed, such as those of aborted flushes. Only one flush exists at a
    /// time: while one is alive this returns [`BeginFlushError::InProgress`].
    ///
    /// ```
    /// use inflight::{DrainError, BeginFlushError, Tracker};
    /// let tracker = Tracker::<u8, u8>::new();
    /// let flush = tracker.begin_flush().unwrap();
    /// assert_eq!(tracker.begin_flush().err(), Some(BeginFlushError::InProgress));
    /// flush.abort();
    /// assert!(tracker.begin_flush().is_ok());
    /// ```
    pub fn begin_flush(&self) -> Result<Flush<'_, P, O, M>, BeginFlushError> {
        self.start_flush(|upto| Flush::new(self, upto))
    }

    /// [`begin_flush`](Self::begin_flush) for a tracker in an `Arc`: the
    /// flush holds a clone of the `Arc` instead of a borrow, so it is
    /// `Send + 'static` and can live beside the `Arc` in a struct or move
    /// into a spawned task (as tokio's `acquire_owned` does). Same methods,
    /// same rules: one flush at a time, owned or not.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use inflight::{OwnedFlush, Tracker};
    ///
    /// #[tokio::main]
    /// async fn main() {
    ///     let tracker = Arc::new(Tracker::new());
    ///     let ticket = tracker.send("p", 5_u64).unwrap();
    ///     let mut flush: OwnedFlush<&str, u64> = tracker.begin_flush_owned().unwrap();
    ///     let committer = tokio::spawn(async move {
    ///         let offsets = flush.wait_async().await.unwrap();
    ///         flush.commit().unwrap();
    ///         offsets
    ///     });
    ///     tracker.ack(ticket).unwrap();
    ///     assert_eq!(committer.await.unwrap()["p"], 5);
    /// }
    /// ```
    pub fn begin_flush_owned(
        self: &std::sync::Arc<Self>,
    ) -> Result<OwnedFlush<P, O, M>, BeginFlushError> {
        self.start_flush(|upto| OwnedFlush::new(std::sync::Arc::clone(self), upto))
    }

    /// Takes the `flushing` flag, seals, captures, and makes the flush with
    /// `make(upto)` before any user code runs (a waker, last): if that
    /// panics, dropping the flush gives the flag back.
    fn start_flush<F>(&self, make: impl FnOnce(u64) -> F) -> Result<F, BeginFlushError> {
        // Acquire: takes ownership of the carry from the previous flush's
        // Release store of `false`.
        if self
            .flushing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(BeginFlushError::InProgress);
        }
        let guard = epoch::pin();
        let upto = loop {
            // Acquire: see the generation's initialisation.
            let open = self.open.load(Ordering::Acquire, &guard);
            if self.seal(open, &guard) {
                break open;
            }
        };
        // Capture every shard for every covered generation (helping any
        // drain sealing beside us): from here on none of them admits a
        // record, and each one's last resolution wakes the flusher.
        // SAFETY: `upto` is in the chain (only the flush, which we are,
        // removes generations) and the guard keeps it alive.
        let upto = unsafe { upto.deref() }.id;
        let wakes = self.capture_through(upto, &guard);
        // The flush before any user code: if a waker panics, dropping it
        // gives up the `flushing` flag.
        let flush = make(upto);
        if wakes {
            self.waiter.wake();
        }
        Ok(flush)
    }

    /// Seals the open generation (or helps whoever is sealing it) and
    /// returns its number: every record sent before this call is in a sealed
    /// generation numbered up to it, whose last resolution wakes waiters.
    pub(crate) fn seal_open(&self) -> u64 {
        let guard = epoch::pin();
        // Acquire: see the generation's initialisation.
        let open = self.open.load(Ordering::Acquire, &guard);
        // SAFETY: `open` was loaded under `guard`, so it is still allocated.
        let generation = unsafe { open.deref() };
        let upto = if generation.id > 0 && {
            // After the caller's `close`, before reading the owners' words.
            // Not the barrier `capture_through` runs below, and not merged
            // with it: that one must come after `open_id` moved past
            // `upto`, which this thread may learn only through the idle
            // check's CASes on the `remote` words (they synchronize with
            // the captures of the generation before).
            Shards::barrier();
            self.shards.idle(generation)
        } {
            // Nothing in the open generation is unresolved: every record
            // sent before this call that is still in flight is in an older
            // one. Sealing it would only lengthen the chain (a retry loop
            // of drains after `close` would add one per call).
            generation.id - 1
        } else {
            // Won or lost, `open` has moved past it after this.
            self.seal(open, &guard);
            generation.id
        };
        // A lost race leaves the captures to the winner, who may be slow;
        // capture every generation up to ours ourselves (idempotent), as
        // `begin_flush` does, so each one's last resolution wakes us.
        if self.capture_through(upto, &guard) {
            self.waiter.wake(); // user code, last
        }
        upto
    }

    /// Unresolved records in generations numbered up to `upto`.
    pub(crate) fn pending_through(&self, upto: u64) -> usize {
        let guard = epoch::pin();
        let shards = self.shards.snapshot();
        let mut pending = 0;
        self.walk(&guard, Some(upto), |generation| {
            pending += generation.pending(&shards);
        });
        pending
    }
}

impl<P, O, M: Mode> Tracker<P, O, M> {
    /// Blocks until `pending()` returns `Ok(0)` (`Ok`) or an error (that
    /// error), an interrupt arrives (`Interrupted`, consuming it) or
    /// `timeout` passes (`Timeout`). Spins briefly, then parks; the
    /// resolution that takes a sealed generation's `live` to zero, a failed
    /// resolution, or `interrupt` wakes it. `pending` must count only
    /// records of sealed generations, whose last resolution wakes waiters.
    pub(crate) fn block_until_drained(
        &self,
        timeout: Duration,
        mut pending: impl FnMut() -> Result<usize, FlushError>,
    ) -> Result<(), FlushError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut spins = 0_u32;
        let mut registration = None;
        let result = loop {
            if self.take_interrupt() {
                break Err(FlushError::Interrupted);
            }
            let pending = match pending() {
                Ok(0) => break Ok(()),
                Ok(pending) => pending,
                Err(e) => break Err(e),
            };
            let remaining = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(remaining) if !remaining.is_zero() => remaining,
                    _ => break Err(FlushError::Timeout { pending }),
                },
                None => Duration::MAX,
            };
            if spins < SPINS_BEFORE_PARK {
                spins += 1;
                crate::sync::spin_hint();
                continue;
            }
            match &registration {
                // Register, then look again before parking (Dekker pair with
                // the last resolution; see `waiter`).
                None => registration = Some(self.waiter.register()),
                Some(registration) => registration.park_timeout(remaining),
            }
        };
        drop(registration); // unregisters (as it would if `pending` panicked)
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::{AtomicU64, AtomicUsize};
    use crate::Ticket;
    use std::collections::HashMap;
    use std::time::Duration;

    /// Found in review: a drain that loaded `open` just before another
    /// thread sealed it checks the sealed generation for idleness; an owner
    /// whose next send rolled its word past it (capturing a record of it
    /// into `pending`) leaves the word counting for a newer generation, and
    /// every `remote` word still reads empty for it. That is not idle.
    #[test]
    fn a_word_rolled_past_the_generation_is_not_idle() {
        std::thread::spawn(|| {
            let tracker: Tracker<u32, u64> = Tracker::new();
            let me = crate::sync::thread_index();
            assert!(Shards::owns(me), "thread {me} owns no shard");
            // Make generation 1 the open one (an empty drain seals 0).
            tracker.drain(Duration::ZERO).unwrap();
            let guard = epoch::pin();
            // The drainer's load of `open` (`seal_open`'s first step).
            let open = tracker.open.load(Ordering::Acquire, &guard);
            // SAFETY: loaded under `guard`.
            let g1 = unsafe { open.deref() };
            assert_eq!(g1.id, 1);
            // A record sent before the drain enters generation 1.
            let first = tracker.send(0, 1).unwrap();
            // Another thread seals generation 1 and has not captured yet.
            assert!(tracker.seal(open, &guard));
            // The owner sends again: its roll captures its word for
            // generation 1 (the first record goes to `pending`) and writes
            // the word for generation 2.
            let second = tracker.send(0, 2).unwrap();
            // The drainer's idle check of generation 1.
            Shards::barrier();
            assert!(!tracker.shards.idle(g1), "a record of it is in flight");
            tracker.ack(first).unwrap();
            tracker.ack(second).unwrap();
            tracker.drain(Duration::ZERO).unwrap();
        })
        .join()
        .unwrap();
    }

    fn generations(tracker: &Tracker<u32, u64>) -> usize {
        let mut n = 0;
        tracker.walk(&epoch::pin(), None, |_| n += 1);
        n
    }

    /// A drain retried after `close` (nothing sent since) seals no new
    /// generation per call, so the chain every drain walks stays short.
    #[test]
    fn retried_drains_after_close_do_not_grow_the_chain() {
        let tracker = Tracker::new();
        let ticket = tracker.send(0, 1).unwrap();
        tracker.close();
        for _ in 0..if cfg!(miri) { 10 } else { 100 } {
            let pending = tracker.drain(Duration::ZERO);
            assert_eq!(pending, Err(crate::DrainError::Timeout { pending: 1 }));
        }
        assert_eq!(generations(&tracker), 2, "the sealed one and the open one");
        tracker.ack(ticket).unwrap();
        tracker.drain(Duration::ZERO).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(flush.wait(Duration::ZERO).unwrap()[&0], 1);
        flush.commit().unwrap();
    }

    /// A sealer that moved `open` but has not captured the shards yet (here:
    /// never will) leaves them lagging; a send through one captures it for
    /// the old generation itself, then enters the new one.
    #[test]
    fn a_send_through_a_lagging_shard_captures_it_first() {
        let tracker = Tracker::new();
        let old = tracker.send(0, 1).unwrap();
        let guard = epoch::pin();
        assert!(tracker.seal(tracker.open.load(Ordering::Acquire, &guard), &guard));
        let new = tracker.send(0, 2).unwrap();
        let mut live = Vec::new();
        let shards = tracker.shards.snapshot();
        tracker.walk(&guard, None, |g| live.push((g.id, g.live(&shards))));
        assert_eq!(live, vec![(0, 1), (1, 1)], "one record in each generation");
        tracker.ack(old).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(flush.pending(), 1);
        tracker.ack(new).unwrap();
        assert_eq!(flush.wait(Duration::ZERO).unwrap()[&0], 2);
        flush.commit().unwrap();
    }

    /// Offsets sent and not yet (about to be) acked, of one partition. The
    /// tests may lock; the tracker may not.
    type Unacked = std::sync::Mutex<std::collections::BTreeSet<u64>>;

    /// Acks every record of `window` in an order `rng` (xorshift) picks,
    /// taking each out of `unacked` first.
    fn ack_shuffled(
        tracker: &Tracker<u32, u64>,
        window: &mut Vec<(u64, Ticket)>,
        rng: &mut u64,
        unacked: &Unacked,
    ) {
        while !window.is_empty() {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            let (acked, ticket) = window.swap_remove((*rng % window.len() as u64) as usize);
            unacked.lock().unwrap().remove(&acked);
            tracker.ack(ticket).unwrap();
        }
    }

    /// Seals with `drain` in a loop until `senders` senders have added one to
    /// `finished`.
    fn drain_until_finished(tracker: &Tracker<u32, u64>, finished: &AtomicUsize, senders: usize) {
        // Acquire: nothing is published through it; Relaxed would do.
        while finished.load(Ordering::Acquire) < senders {
            let _ = tracker.drain(Duration::ZERO);
        }
    }

    /// Flushes and commits in a loop until `senders` senders have added one
    /// to `finished`, then once more, and returns the last offset flushed of
    /// each partition. Every flush must complete (a stall would surface as
    /// a timeout after a minute), and none may return an offset of partition
    /// `p` while an earlier one is in `unacked[p]`.
    fn flush_checked_until_finished(
        tracker: &Tracker<u32, u64>,
        finished: &AtomicUsize,
        senders: usize,
        unacked: &[Unacked],
    ) -> HashMap<u32, u64> {
        let mut last = HashMap::new();
        loop {
            // Acquire: pairs with the senders' Release, so that the flush
            // after the last one covers every send.
            let done = finished.load(Ordering::Acquire) == senders;
            let mut flush = tracker.begin_flush().unwrap();
            let offsets = flush.wait(Duration::from_secs(60)).unwrap();
            for (&p, &o) in &offsets {
                let oldest = unacked[p as usize].lock().unwrap().first().copied();
                assert!(
                    oldest.is_none_or(|oldest| oldest > o),
                    "partition {p}: offset {o} returned while {oldest:?} is unacked"
                );
            }
            flush.commit().unwrap();
            last.extend(offsets);
            if done {
                return last;
            }
        }
    }

    /// Seals racing sends, out-of-order acks and each other (a drainer
    /// seals beside the flusher, both capturing the same shards) from
    /// several threads: every flush completes, no offset is returned while
    /// an earlier record of its partition is unacked, and the final flush
    /// returns each last offset.
    #[test]
    fn racing_seals_lose_nothing() {
        const SENDS: u64 = if cfg!(miri) { 50 } else { 20_000 };
        const WINDOW: usize = 8;
        const SENDERS: usize = 3;
        let tracker = Tracker::new();
        let finished = AtomicUsize::new(0);
        let unacked: Vec<Unacked> = (0..SENDERS).map(|_| Unacked::default()).collect();
        let last = std::thread::scope(|s| {
            for p in 0..SENDERS as u32 {
                let (tracker, finished, unacked) = (&tracker, &finished, &unacked[p as usize]);
                s.spawn(move || {
                    let mut window = Vec::with_capacity(WINDOW);
                    let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ u64::from(p);
                    for offset in 0..SENDS {
                        unacked.lock().unwrap().insert(offset);
                        window.push((offset, tracker.send(p, offset).unwrap()));
                        if window.len() == WINDOW {
                            ack_shuffled(tracker, &mut window, &mut rng, unacked);
                        }
                    }
                    ack_shuffled(tracker, &mut window, &mut rng, unacked);
                    // Release: the sends above happen before the committer's
                    // last flush.
                    finished.fetch_add(1, Ordering::Release);
                });
            }
            s.spawn(|| drain_until_finished(&tracker, &finished, SENDERS));
            flush_checked_until_finished(&tracker, &finished, SENDERS, &unacked)
        });
        for p in 0..SENDERS as u32 {
            assert_eq!(last[&p], SENDS - 1, "partition {p}");
        }
        assert_eq!(tracker.in_flight(), 0);
    }

    /// Two threads take turns sending the offsets of one partition (each
    /// send happens after the previous one, through a baton), so the
    /// partition's sends form one happens-before chain over two count
    /// shards, while a committer flushes; the seal's captures are spread out
    /// (see `capture`), so senders often meet shards that count for
    /// different generations. (Only one sealer: a drainer's seals would
    /// take the windows in which a flush can see a wrong coverage.) A covered send's
    /// predecessors must be covered too: every offset a flush returns must
    /// have every earlier offset acked.
    #[test]
    fn one_chain_of_sends_over_two_threads_is_covered_as_a_prefix() {
        const SENDS: u64 = if cfg!(miri) { 50 } else { 100_000 };
        let tracker = Tracker::new();
        let turn = AtomicU64::new(0);
        let finished = AtomicUsize::new(0);
        let unacked = [Unacked::default()];
        let last = std::thread::scope(|s| {
            for me in 0..2_u64 {
                let (tracker, turn, finished, unacked) = (&tracker, &turn, &finished, &unacked[0]);
                s.spawn(move || {
                    // Each batch acks at once or late and out of order, at
                    // random, so that a flush can often drain behind a later
                    // send of one thread while an earlier one of the other
                    // still waits.
                    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ me;
                    let mut window_len = 1;
                    let mut window = Vec::with_capacity(32);
                    loop {
                        // Acquire: pairs with the other thread's Release
                        // below, so its send happens before ours.
                        let offset = turn.load(Ordering::Acquire);
                        if offset >= SENDS {
                            break;
                        }
                        if offset % 2 != me {
                            std::thread::yield_now();
                            continue;
                        }
                        unacked.lock().unwrap().insert(offset);
                        window.push((offset, tracker.send(0, offset).unwrap()));
                        // Release: hands the baton on, after our send.
                        turn.store(offset + 1, Ordering::Release);
                        if window.len() >= window_len {
                            ack_shuffled(tracker, &mut window, &mut rng, unacked);
                            window_len = if rng & 1 == 0 { 1 } else { 32 };
                        }
                    }
                    ack_shuffled(tracker, &mut window, &mut rng, unacked);
                    // Release: our sends happen before the last flush.
                    finished.fetch_add(1, Ordering::Release);
                });
            }
            flush_checked_until_finished(&tracker, &finished, 2, &unacked)
        });
        assert_eq!(last[&0], SENDS - 1);
        assert_eq!(tracker.in_flight(), 0);
    }
}
