//! Awaiting a flush or a drain: [`Flush::wait_async`] and
//! [`Tracker::drain_async`], for any executor.
//!
//! This module owns one future, [`UntilDrained`], the async twin of
//! `Tracker::block_until_drained`: it resolves when a count of covered
//! records reaches zero or an interrupt arrives. Instead of parking, it
//! registers its task's [`Waker`] in the tracker's [`Waiter`](crate::waiter)
//! registry, beside parked threads; the same `wake` call (the last
//! resolution of a sealed generation, or `interrupt`) wakes both. The crate
//! depends on no executor: only `std::task`.
//!
//! # No lost wake-up
//!
//! A poll checks the interrupt and the count; if neither ends the wait, it
//! registers its waker (or, polled with a different waker, replaces it),
//! which ends with a SeqCst fence, and checks again before returning
//! `Pending`. That is the waiter's half of the Dekker pair of `waiter`: the
//! resolver's count update and the registration are each followed by a
//! SeqCst fence, so either the resolver's read of the list sees this
//! task's waker and wakes it, or this poll's re-check sees the count (or
//! interrupt) and returns `Ready`. A poll with a waker that
//! [`will_wake`](Waker::will_wake) the registered one changes nothing: the
//! entry stays, so every wake from the registration on reaches the task.
//!
//! # Cancellation
//!
//! Dropping the future removes its registration (no waker outlives it in
//! the registry, apart from copies of the list that the epoch collector
//! frees later). Every state change a poll makes is complete when the poll
//! returns: folding a drained generation into the flush's carry, taking an
//! interrupt and recording it in the flush. So a dropped future leaves the
//! `Flush` exactly as a `wait` that timed out would, and an interrupt it
//! did not take stays for the next wait.

use crate::flush::FlushState;
use crate::mode::Mode;
use crate::send::Wait;
use crate::waiter::WakerRegistration;
use crate::{Flush, FlushError, SendError, Ticket, Tracker};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Resolves when `pending()` returns `Ok(0)` (`Ok`) or an error (that
/// error), or an interrupt arrives (`Interrupted`, consuming it). `pending`
/// must count only records of sealed generations, whose last resolution
/// (or a failed one) wakes waiters.
pub(crate) struct UntilDrained<'t, P, O, M: Mode, F> {
    tracker: &'t Tracker<P, O, M>,
    pending: F,
    /// This task's entry in the tracker's waiter registry, once it has one.
    registration: Option<WakerRegistration>,
}

impl<'t, P, O, M: Mode, F> UntilDrained<'t, P, O, M, F> {
    pub(crate) fn new(tracker: &'t Tracker<P, O, M>, pending: F) -> Self {
        Self {
            tracker,
            pending,
            registration: None,
        }
    }

    fn unregister(&mut self) {
        if let Some(registration) = self.registration.take() {
            self.tracker.waiter.unregister_waker(registration);
        }
    }
}

impl<P, O, M: Mode, F> Future for UntilDrained<'_, P, O, M, F>
where
    F: FnMut() -> Result<usize, FlushError> + Unpin,
{
    type Output = Result<(), FlushError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(done) = this.look() {
            return Poll::Ready(done);
        }
        let waiter = &this.tracker.waiter;
        match &mut this.registration {
            // Already registered with a waker for this task: every wake from
            // the registration on reaches it.
            Some(registration) if registration.wakes(cx.waker()) => return Poll::Pending,
            Some(registration) => waiter.replace_waker(registration, cx.waker()),
            None => this.registration = Some(waiter.register_waker(cx.waker())),
        }
        // Registered (or re-registered) just now, behind the SeqCst fence:
        // look again before returning `Pending` (module docs). Mutant
        // `lost_async_wakeup` (loom suite only) skips that look: a last ack
        // between the first look and the registration finds no waker to
        // wake, and the task sleeps for good.
        #[cfg(inflight_mutant = "lost_async_wakeup")]
        return Poll::Pending;
        #[allow(unreachable_code)]
        match this.look() {
            Some(done) => Poll::Ready(done),
            None => Poll::Pending,
        }
    }
}

impl<P, O, M: Mode, F> UntilDrained<'_, P, O, M, F>
where
    F: FnMut() -> Result<usize, FlushError>,
{
    /// Whether the wait is over, and how: an interrupt (taken here) first,
    /// then nothing pending. Unregisters when it is.
    fn look(&mut self) -> Option<Result<(), FlushError>> {
        let done = if self.tracker.take_interrupt() {
            Err(FlushError::Interrupted)
        } else {
            match (self.pending)() {
                Ok(0) => Ok(()),
                Ok(_) => return None,
                Err(e) => Err(e),
            }
        };
        self.unregister();
        Some(done)
    }
}

impl<P, O, M: Mode, F> Drop for UntilDrained<'_, P, O, M, F> {
    fn drop(&mut self) {
        self.unregister();
    }
}

impl<P, O, M: Mode, F> fmt::Debug for UntilDrained<'_, P, O, M, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilDrained")
            .field("registered", &self.registration.is_some())
            .finish_non_exhaustive()
    }
}

impl<'t, P, O, M: Mode> Flush<'t, P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// Waits, without blocking a thread, until every covered record is
    /// resolved: the async [`wait`](Self::wait), for any executor.
    ///
    /// The output is the same as `wait`'s: `Ok(offsets)` once every covered
    /// record was acked, [`FlushError::Failed`] if some failed,
    /// [`FlushError::Interrupted`] after [`Tracker::interrupt`] (delivered to
    /// one waiting call, blocking or async; the flush can then only be
    /// aborted). There is no timeout argument and so no `Timeout` error: wrap
    /// the future in your runtime's timeout.
    ///
    /// Cancel-safe: dropping the future (a timeout firing, a `select!` taking
    /// another branch) stops the wait and unregisters its waker, and leaves
    /// the flush as it was: a later `wait` or `wait_async` carries on. The
    /// task is woken by the last covered resolution, never by polling.
    /// Leaking the future (`mem::forget`) leaves its waker registered, and
    /// woken now and then, until the tracker drops.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use inflight::Tracker;
    ///
    /// #[tokio::main]
    /// async fn main() {
    ///     let tracker = Arc::new(Tracker::new());
    ///     let ticket = tracker.send("p", 5_u64).unwrap();
    ///     let mut flush = tracker.begin_flush().unwrap();
    ///
    ///     // A timeout that fires drops the future; the flush stays usable.
    ///     let early = tokio::time::timeout(Duration::from_millis(1), flush.wait_async()).await;
    ///     assert!(early.is_err());
    ///
    ///     // The delivery callback, on another task.
    ///     let acker = Arc::clone(&tracker);
    ///     tokio::spawn(async move { acker.ack(ticket).unwrap() });
    ///
    ///     let offsets = flush.wait_async().await.unwrap();
    ///     assert_eq!(offsets["p"], 5);
    ///     flush.commit().unwrap();
    /// }
    /// ```
    // Not an `async fn`: the signature promises `Send`, so a change that
    // broke it would fail here rather than in a caller's `tokio::spawn`.
    #[allow(clippy::manual_async_fn)]
    pub fn wait_async<'f>(
        &'f mut self,
    ) -> impl Future<Output = Result<HashMap<P, O>, FlushError>> + Send + use<'f, 't, P, O, M> {
        self.state.wait_async(self.tracker)
    }
}

impl FlushState {
    /// The async wait of a [`Flush`] or an [`OwnedFlush`](crate::OwnedFlush).
    pub(crate) async fn wait_async<P, O, M: Mode>(
        &mut self,
        tracker: &Tracker<P, O, M>,
    ) -> Result<HashMap<P, O>, FlushError>
    where
        P: Hash + Eq + Clone + Send + Sync,
        O: Clone + Send + Sync,
    {
        if self.is_interrupted() {
            return Err(FlushError::Interrupted);
        }
        let drained = UntilDrained::new(tracker, || self.advance(tracker)).await;
        // In the poll that resolved `UntilDrained`: a taken interrupt is
        // recorded before the future can be dropped.
        self.finish(tracker, drained)
    }
}

impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// How many waiting calls (threads and tasks) are registered to be
    /// woken: for the loom models, which check that a dropped future leaves
    /// no registration behind.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn registered_waiters(&self) -> usize {
        self.waiter.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::{AtomicUsize, Ordering};
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            // Relaxed: a counter read after the waking call returned.
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    fn wakes(count: &Count) -> usize {
        count.0.load(Ordering::Relaxed)
    }

    #[test]
    fn same_waker_registers_once_and_drop_unregisters() {
        let tracker = Tracker::new();
        let ticket = tracker.send("p", 1_u64).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let (count, waker) = counter();
        let mut cx = Context::from_waker(&waker);
        {
            let mut future = pin!(flush.wait_async());
            assert!(future.as_mut().poll(&mut cx).is_pending());
            assert_eq!(tracker.waiter.len(), 1);
            // Ours, the waker's, the registration's and the list's.
            assert_eq!(Arc::strong_count(&count), 4);
            for _ in 0..3 {
                assert!(future.as_mut().poll(&mut cx).is_pending());
            }
            // Re-polls never add an entry, whatever `will_wake` says.
            assert_eq!(tracker.waiter.len(), 1);
            // No copy of the list was made: the same entry still serves.
            // That holds where clones of a waker `will_wake` each other,
            // which the language does not promise: Miri may give each use
            // of a vtable its own address, so there a re-poll may replace
            // the entry with an equal waker (harmless; the old list waits
            // for the collector), and only the count above is checked.
            if !cfg!(miri) {
                assert_eq!(Arc::strong_count(&count), 4);
            }
        }
        assert_eq!(tracker.waiter.len(), 0, "the dropped future unregistered");
        tracker.ack(ticket).unwrap();
        assert_eq!(wakes(&count), 0, "a dropped future's waker is not woken");
        let offsets = flush.wait(std::time::Duration::ZERO).unwrap();
        assert_eq!(offsets["p"], 1);
    }

    #[test]
    fn a_new_waker_replaces_the_old_one() {
        let tracker = Tracker::new();
        let ticket = tracker.send("p", 1_u64).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let (first, first_waker) = counter();
        let (second, second_waker) = counter();
        let mut future = pin!(flush.wait_async());
        let poll = future.as_mut().poll(&mut Context::from_waker(&first_waker));
        assert!(poll.is_pending());
        let poll = future
            .as_mut()
            .poll(&mut Context::from_waker(&second_waker));
        assert!(poll.is_pending());
        assert_eq!(tracker.waiter.len(), 1, "replaced, not added");
        tracker.ack(ticket).unwrap();
        assert_eq!((wakes(&first), wakes(&second)), (0, 1));
        let poll = future
            .as_mut()
            .poll(&mut Context::from_waker(&second_waker));
        assert!(matches!(poll, Poll::Ready(Ok(ref offsets)) if offsets["p"] == 1));
        assert_eq!(tracker.waiter.len(), 0, "a finished future unregistered");
    }

    #[test]
    fn one_wake_reaches_a_parked_thread_and_a_task() {
        let tracker = Tracker::new();
        let ticket = tracker.send("p", 1_u64).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let (count, waker) = counter();
        let mut drain = pin!(tracker.drain_async());
        assert!(drain
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        std::thread::scope(|s| {
            let waiting = s.spawn(|| flush.wait(std::time::Duration::from_secs(3600)));
            // Whether or not the thread registered yet, the ack wakes (or
            // forestalls) both waits.
            tracker.ack(ticket).unwrap();
            assert_eq!(waiting.join().unwrap().unwrap()["p"], 1);
        });
        assert_eq!(wakes(&count), 1);
        let poll = drain.as_mut().poll(&mut Context::from_waker(&waker));
        assert_eq!(poll, Poll::Ready(Ok(())));
    }
}

/// A future that resolves when `pending()` returns `Ok(0)` or an error,
/// or an interrupt arrives: [`UntilDrained`], for other modules.
pub(crate) fn until<'t, P, O, M: Mode, F>(
    tracker: &'t Tracker<P, O, M>,
    pending: F,
) -> impl Future<Output = Result<(), FlushError>> + 't
where
    P: 't,
    O: 't,
    F: FnMut() -> Result<usize, FlushError> + Unpin + 't,
{
    UntilDrained::new(tracker, pending)
}

/// The future of [`Tracker::send_async`]: sends its record once there is
/// room. See there.
pub(crate) struct SendWhenRoom<'t, P, O, M: Mode> {
    pub(crate) tracker: &'t Tracker<P, O, M>,
    /// The record, until it is sent or handed back.
    pub(crate) record: Option<(P, O)>,
    /// This task's entry in the tracker's `room` registry, once it has one.
    pub(crate) registration: Option<WakerRegistration>,
    /// Whether it flagged the budget since it last returned `Pending`.
    pub(crate) flagged: bool,
}

// No field is pinned: the record moves in and out of its `Option` by value.
impl<P, O, M: Mode> Unpin for SendWhenRoom<'_, P, O, M> {}

impl<P, O, M: Mode> Future for SendWhenRoom<'_, P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    type Output = Result<Ticket, SendError<P, O>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let tracker = this.tracker;
        loop {
            // As an `async fn`'s future does, panic if polled after `Ready`
            // (the `Future` contract allows it; safe code never does it).
            let Some((partition, offset)) = this.record.take() else {
                panic!("`send_async` future polled after it completed");
            };
            let mut wait = Wait::Never;
            match tracker.send_noting(partition, offset, &mut wait) {
                Err(SendError::Full(partition, offset, _)) if wait != Wait::Never => {
                    this.record = Some((partition, offset));
                }
                done => {
                    this.unregister();
                    return Poll::Ready(done);
                }
            }
            match &mut this.registration {
                Some(registration) if registration.wakes(cx.waker()) => {}
                Some(registration) => tracker.room.replace_waker(registration, cx.waker()),
                None => this.registration = Some(tracker.room.register_waker(cx.waker())),
            }
            // Registered: flag and look again (see `Tracker::must_park`).
            if tracker.must_park(wait, &mut this.flagged) {
                this.flagged = false;
                return Poll::Pending;
            }
        }
    }
}

impl<P, O, M: Mode> SendWhenRoom<'_, P, O, M> {
    fn unregister(&mut self) {
        if let Some(registration) = self.registration.take() {
            self.tracker.room.unregister_waker(registration);
        }
    }
}

impl<P, O, M: Mode> Drop for SendWhenRoom<'_, P, O, M> {
    fn drop(&mut self) {
        self.unregister();
    }
}
