//! Shutting down: [`Tracker::close`], [`Tracker::interrupt`] and the
//! drains that wait for what was sent ([`Tracker::drain`],
//! [`Tracker::drain_async`]). The seal they rely on lives in `seal`, the
//! future in `future`.

use crate::future::UntilDrained;
use crate::mode::Mode;
use crate::sync::Ordering;
use crate::{DrainError, Tracker};
use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

/// **Shut down.** [`close`](Self::close) stops accepting records, then
/// [`drain`](Self::drain) (or [`drain_async`](Self::drain_async)) waits
/// until everything sent is resolved; [`interrupt`](Self::interrupt) ends a
/// wait early.
///
/// ```
/// use std::time::Duration;
/// use inflight::{SendError, Tracker};
///
/// let tracker = Tracker::new();
/// let ticket = tracker.send("orders-0", 7_u64).unwrap();
/// tracker.close();
/// assert!(matches!(tracker.send("orders-0", 8), Err(SendError::Closed(..))));
/// tracker.ack(ticket).unwrap();               // still resolves
/// tracker.drain(Duration::from_secs(1)).unwrap();
/// ```
impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// Stops accepting records: every `send` that starts after this returns
    /// [`SendError::Closed`](crate::SendError::Closed) with its record. Records already sent still
    /// resolve, and a flush begun after `close` returns covers every record
    /// the tracker ever accepted, so a final flush can drain them.
    ///
    /// ```
    /// use inflight::{SendError, Tracker};
    /// let tracker = Tracker::new();
    /// let ticket = tracker.send("p", 1_u64).unwrap();
    /// tracker.close();
    /// assert!(matches!(tracker.send("p", 2), Err(SendError::Closed("p", 2))));
    /// tracker.ack(ticket).unwrap(); // still resolves
    /// ```
    pub fn close(&self) {
        // Release: see the re-check in `send`.
        self.closed.store(true, Ordering::Release);
        // Senders waiting for room retry, and find the tracker closed.
        self.wake(false, true);
    }

    /// Whether [`close`](Self::close) was called.
    ///
    /// ```
    /// let tracker = inflight::Tracker::<u8, u8>::new();
    /// assert!(!tracker.is_closed());
    /// tracker.close();
    /// assert!(tracker.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        // Acquire: a reader that sees the close also sees what preceded it.
        self.closed.load(Ordering::Acquire)
    }

    /// Asks the call that is waiting, or else the next one to wait, to give
    /// up: a flush's `wait` (or `wait_async`) returns
    /// [`FlushError::Interrupted`](crate::FlushError::Interrupted) promptly,
    /// and the flush can then only be aborted; a `drain` (or `drain_async`,
    /// `drain_partition`) returns
    /// [`DrainError::Interrupted`](crate::DrainError::Interrupted). Each interrupt is delivered to exactly one waiting
    /// call: with a flush and a drain waiting at once, either may take it.
    /// Interrupts are not counted: several before a wait are delivered once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, Tracker};
    /// let tracker = Tracker::new();
    /// let _pending = tracker.send("p", 1_u64).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// tracker.interrupt();
    /// assert_eq!(flush.wait(Duration::from_secs(60)), Err(FlushError::Interrupted));
    /// assert_eq!(flush.commit(), Err(FlushError::NotReady));
    /// ```
    pub fn interrupt(&self) {
        // Release: the flag is published; `wake`'s SeqCst fence then makes
        // this write and the waiter's registration a Dekker pair. A swap
        // rather than a store only for loom, which orders a plain store
        // racing `take_interrupt`'s swaps more weakly than C++ does.
        self.interrupted.swap(true, Ordering::Release);
        self.waiter.wake();
    }

    /// Waits, at most `timeout`, until every record sent before this call is
    /// resolved: the end-of-life wait of a producer that stopped sending
    /// (after [`close`](Self::close), that is everything in flight).
    /// Failed records count as resolved; a barrier flush or the watermarks
    /// report them. Does not commit anything and works beside a flush.
    ///
    /// - `Ok(())`: nothing sent before the call is in flight any more.
    /// - [`DrainError::Timeout`]: some still were at the deadline (`pending`
    ///   of them); call again to keep waiting.
    /// - [`DrainError::Interrupted`]: [`interrupt`](Self::interrupt) was
    ///   called. An interrupt is delivered once, to one waiting call (a
    ///   `drain` or a flush's `wait`).
    ///
    /// Those are the only errors of a drain, which commits nothing:
    /// [`DrainError`] has no `Failed` or `NotReady`. (It converts into a
    /// [`FlushError`](crate::FlushError), so one error path can serve a drain and a flush.)
    ///
    /// Seals the open generation, like a flush does, so records sent from
    /// now on are not waited for. (On a tracker with watermarks, where a
    /// record counts until the watermark passes it, a record sent
    /// concurrently with this call may be waited for too, when it took an
    /// earlier place in its partition's queue.) Each call that finds records
    /// sent since the last seal leaves a sealed generation behind until a
    /// barrier flush folds it (a few hundred bytes and one retained slot per
    /// partition in it), so drain at the end of a tracker's life, or retry
    /// after `close`, rather than in a loop beside live sends on a tracker
    /// that never flushes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{DrainError, Tracker};
    /// let tracker = Tracker::new();
    /// let ticket = tracker.send("p", 1_u64).unwrap();
    /// tracker.close();
    /// assert_eq!(tracker.drain(Duration::ZERO), Err(DrainError::Timeout { pending: 1 }));
    /// std::thread::scope(|s| {
    ///     s.spawn(|| tracker.ack(ticket).unwrap());
    ///     tracker.drain(Duration::from_secs(10)).unwrap();
    /// });
    /// assert_eq!(tracker.in_flight(), 0);
    /// ```
    pub fn drain(&self, timeout: Duration) -> Result<(), DrainError> {
        let upto = self.seal_open();
        self.block_until_drained(timeout, || Ok(self.pending_through(upto)))
            .map_err(DrainError::from_wait)
    }

    /// Waits, without blocking a thread, until every record sent before
    /// this call is resolved: the async [`drain`](Self::drain), for any
    /// executor.
    ///
    /// Seals the open generation when called (not when first polled), so
    /// "before this call" means before `drain_async` returned the future.
    /// `Ok(())` once none of those records is in flight (failed ones count
    /// as resolved), or [`DrainError::Interrupted`] after
    /// [`interrupt`](Self::interrupt), delivered to one waiting call. No
    /// timeout: wrap the future in your runtime's. Cancel-safe: dropping the
    /// future unregisters its waker and changes nothing else.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use inflight::Tracker;
    ///
    /// #[tokio::main]
    /// async fn main() {
    ///     let tracker = Arc::new(Tracker::new());
    ///     let tickets: Vec<_> = (0..3_u64).map(|o| tracker.send("p", o).unwrap()).collect();
    ///     tracker.close();
    ///     for ticket in tickets {
    ///         let tracker = Arc::clone(&tracker);
    ///         tokio::spawn(async move { tracker.ack(ticket).unwrap() });
    ///     }
    ///     tracker.drain_async().await.unwrap();
    ///     assert_eq!(tracker.in_flight(), 0);
    /// }
    /// ```
    pub fn drain_async(&self) -> impl Future<Output = Result<(), DrainError>> + Send + '_ {
        let upto = self.seal_open();
        let drained = UntilDrained::new(self, move || Ok(self.pending_through(upto)));
        async move { drained.await.map_err(DrainError::from_wait) }
    }
}
