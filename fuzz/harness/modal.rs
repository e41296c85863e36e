//! A tracker of any of the three modes, as one type: the harness picks the
//! mode from its input, at run time, and drives every mode with the same
//! code. Each call dispatches to the typed tracker; `committable` and
//! `progress` answer empty where the mode has no such call (the model
//! expects exactly that), so the harness compares all modes alike.

use inflight::mode::{Barrier, Progress as ProgressMode, Watermarks};
use inflight::{
    BeginFlushError, Committable, DrainError, Flush, FlushError, Progress, ProgressTracker,
    ResolveBatchError, ResolveError, Revoked, SendBatchError, SendError, Stats, Ticket, Tracker,
    WatermarkTracker,
};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// A tracker of one of the three modes.
pub enum AnyTracker<P, O> {
    /// `Tracker::new()`, `with_capacity`, `builder().build()`.
    Barrier(Tracker<P, O, Barrier>),
    /// `builder().watermarks().build()`.
    Watermarks(WatermarkTracker<P, O>),
    /// `builder().progress(bytes).build()`.
    Progress(ProgressTracker<P, O>),
}

/// A flush of an [`AnyTracker`].
#[derive(Debug)]
pub enum AnyFlush<'t, P, O> {
    /// Of a barrier tracker.
    Barrier(Flush<'t, P, O, Barrier>),
    /// Of a watermark tracker.
    Watermarks(Flush<'t, P, O, Watermarks>),
    /// Of a progress tracker.
    Progress(Flush<'t, P, O, ProgressMode>),
}

/// `$body` with `$t` bound to the typed tracker (or flush) inside `$e`.
macro_rules! on {
    ($kind:ident, $e:expr, $t:ident => $body:expr) => {
        match $e {
            $kind::Barrier($t) => $body,
            $kind::Watermarks($t) => $body,
            $kind::Progress($t) => $body,
        }
    };
}

impl<P, O> From<Tracker<P, O, Barrier>> for AnyTracker<P, O> {
    fn from(tracker: Tracker<P, O, Barrier>) -> Self {
        Self::Barrier(tracker)
    }
}

impl<P, O> From<WatermarkTracker<P, O>> for AnyTracker<P, O> {
    fn from(tracker: WatermarkTracker<P, O>) -> Self {
        Self::Watermarks(tracker)
    }
}

impl<P, O> From<ProgressTracker<P, O>> for AnyTracker<P, O> {
    fn from(tracker: ProgressTracker<P, O>) -> Self {
        Self::Progress(tracker)
    }
}

#[allow(dead_code)] // each harness user calls some of these
impl<P, O> AnyTracker<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    pub fn send(&self, partition: P, offset: O) -> Result<Ticket, SendError<P, O>> {
        on!(AnyTracker, self, t => t.send(partition, offset))
    }

    pub fn send_batch<I>(
        &self,
        partition: &P,
        offsets: I,
        tickets: &mut Vec<Ticket>,
    ) -> Result<usize, SendBatchError<O, I::IntoIter>>
    where
        I: IntoIterator<Item = O>,
    {
        on!(AnyTracker, self, t => t.send_batch(partition, offsets, tickets))
    }

    pub fn ack(&self, ticket: Ticket) -> Result<(), ResolveError> {
        on!(AnyTracker, self, t => t.ack(ticket))
    }

    pub fn fail(&self, ticket: Ticket) -> Result<(), ResolveError> {
        on!(AnyTracker, self, t => t.fail(ticket))
    }

    pub fn ack_raw(&self, raw: u64) -> Result<(), ResolveError> {
        on!(AnyTracker, self, t => t.ack_raw(raw))
    }

    pub fn fail_raw(&self, raw: u64) -> Result<(), ResolveError> {
        on!(AnyTracker, self, t => t.fail_raw(raw))
    }

    pub fn ack_all<I>(&self, tickets: I) -> Result<usize, ResolveBatchError>
    where
        I: IntoIterator<Item = Ticket>,
    {
        on!(AnyTracker, self, t => t.ack_all(tickets))
    }

    pub fn fail_all<I>(&self, tickets: I) -> Result<usize, ResolveBatchError>
    where
        I: IntoIterator<Item = Ticket>,
    {
        on!(AnyTracker, self, t => t.fail_all(tickets))
    }

    pub fn begin_flush(&self) -> Result<AnyFlush<'_, P, O>, BeginFlushError> {
        Ok(match self {
            AnyTracker::Barrier(t) => AnyFlush::Barrier(t.begin_flush()?),
            AnyTracker::Watermarks(t) => AnyFlush::Watermarks(t.begin_flush()?),
            AnyTracker::Progress(t) => AnyFlush::Progress(t.begin_flush()?),
        })
    }

    pub fn drain(&self, timeout: Duration) -> Result<(), DrainError> {
        on!(AnyTracker, self, t => t.drain(timeout))
    }

    pub fn drain_partition<Q>(&self, partition: &Q, timeout: Duration) -> Result<(), DrainError>
    where
        P: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        on!(AnyTracker, self, t => t.drain_partition(partition, timeout))
    }

    pub fn revoke<Q>(&self, partition: &Q) -> Revoked<O>
    where
        P: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        on!(AnyTracker, self, t => t.revoke(partition))
    }

    /// `committable()`; empty on a barrier tracker, which has no such call.
    pub fn committable(&self) -> HashMap<P, O> {
        match self {
            AnyTracker::Barrier(_) => HashMap::new(),
            AnyTracker::Watermarks(t) => t.committable(),
            AnyTracker::Progress(t) => t.committable(),
        }
    }

    /// `committable_with_stats()`; empty on a barrier tracker.
    pub fn committable_with_stats(&self) -> Committable<P, O> {
        match self {
            AnyTracker::Barrier(_) => Committable::default(),
            AnyTracker::Watermarks(t) => t.committable_with_stats(),
            AnyTracker::Progress(t) => t.committable_with_stats(),
        }
    }

    /// `progress()`; empty but on a progress tracker.
    pub fn progress(&self) -> HashMap<P, Progress> {
        match self {
            AnyTracker::Progress(t) => t.progress(),
            _ => HashMap::new(),
        }
    }

    pub fn stats(&self) -> Stats<P> {
        on!(AnyTracker, self, t => t.stats())
    }

    pub fn in_flight(&self) -> usize {
        on!(AnyTracker, self, t => t.in_flight())
    }

    pub fn capacity(&self) -> Option<usize> {
        on!(AnyTracker, self, t => t.capacity())
    }

    pub fn has_watermarks(&self) -> bool {
        !matches!(self, AnyTracker::Barrier(_))
    }

    pub fn interrupt(&self) {
        on!(AnyTracker, self, t => t.interrupt())
    }

    pub fn close(&self) {
        on!(AnyTracker, self, t => t.close())
    }

    pub fn is_closed(&self) -> bool {
        on!(AnyTracker, self, t => t.is_closed())
    }
}

#[allow(dead_code)] // each harness user calls some of these
impl<P, O> AnyFlush<'_, P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    pub fn wait(&mut self, timeout: Duration) -> Result<HashMap<P, O>, FlushError> {
        on!(AnyFlush, self, f => f.wait(timeout))
    }

    pub fn commit(self) -> Result<(), FlushError> {
        on!(AnyFlush, self, f => f.commit())
    }

    pub fn abort(self) {
        on!(AnyFlush, self, f => f.abort())
    }

    pub fn pending(&self) -> usize {
        on!(AnyFlush, self, f => f.pending())
    }
}
