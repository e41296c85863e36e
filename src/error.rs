//! Everything that can go wrong, as values. No public call panics.

use std::fmt;

/// Why [`Tracker::send`](crate::Tracker::send) refused a record. The record
/// comes back in the error, so nothing is lost.
///
/// ```
/// use inflight::{Limit, SendError, Tracker};
/// let tracker = Tracker::with_capacity(1);
/// let _first = tracker.send("p", 1_u64).unwrap();
/// match tracker.send("p", 2_u64) {
///     Err(SendError::Full(partition, offset, Limit::Capacity)) => {
///         assert_eq!((partition, offset), ("p", 2))
///     }
///     other => panic!("expected Full, got {other:?}"),
/// }
/// let refused = tracker.send("p", 3_u64).unwrap_err();
/// assert_eq!(format!("{refused:?}"), r#"Full("p", 3, Capacity)"#);
/// assert_eq!(
///     refused.to_string(),
///     "the tracker holds its capacity of records in flight; the record was not sent"
/// );
/// ```
#[derive(PartialEq, Eq, Clone)]
#[non_exhaustive]
pub enum SendError<P, O> {
    /// A limit is reached, the [`Limit`] says which: the tracker's
    /// capacity (see
    /// [`Tracker::with_capacity`](crate::Tracker::with_capacity)), resolve
    /// some records and retry; on a progress tracker, the partition's
    /// metadata budget (see [`Builder::progress`](crate::Builder::progress)),
    /// until its stuck record is acked; or the tracker's internal limit on
    /// records or partitions. [`send_timeout`](crate::Tracker::send_timeout)
    /// and [`send_async`](crate::Tracker::send_async) wait for the first
    /// two.
    ///
    /// On a tracker with watermarks (a progress tracker included) the
    /// partition now **owes** the offset: every later send of the
    /// partition is refused with [`OutOfOrder`](SendError::OutOfOrder)
    /// until this offset is sent (or the partition revoked), since an
    /// offset never sent below a sent one would count as done (progress),
    /// or be passed by the watermark (watermarks). Retry it
    /// ([`send_timeout`](crate::Tracker::send_timeout) and
    /// [`send_async`](crate::Tracker::send_async) wait for room); to skip a
    /// record for good, send it and ack it.
    Full(P, O, Limit),
    /// [`Tracker::close`](crate::Tracker::close) was called; no record is
    /// accepted any more.
    Closed(P, O),
    /// On a progress tracker (see
    /// [`Builder::progress`](crate::Builder::progress)), the offset is not
    /// above every offset sent before it in the partition's current life
    /// (or it is no position at all, as a negative `i64`). Sending it would
    /// make the offsets skipped before it count as done. Also, on any
    /// tracker with watermarks: the partition owes another offset, refused
    /// before (see [`Full`](SendError::Full)); send that one first (on a
    /// progress tracker an offset below it then counts as done, as any
    /// offset below a sent one does). To skip a record for good, send it
    /// and ack it.
    OutOfOrder(P, O),
}

impl<P, O> SendError<P, O> {
    /// The refused record, `(partition, offset)`.
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// tracker.close();
    /// let err = tracker.send("p", String::from("offset-7")).unwrap_err();
    /// assert_eq!(err.into_inner(), ("p", String::from("offset-7")));
    /// ```
    pub fn into_inner(self) -> (P, O) {
        match self {
            SendError::Full(p, o, _) | SendError::Closed(p, o) | SendError::OutOfOrder(p, o) => {
                (p, o)
            }
        }
    }

    /// The limit that refused the record, for [`Full`](SendError::Full);
    /// `None` for the other refusals.
    ///
    /// ```
    /// use inflight::{Limit, Tracker};
    /// let tracker = Tracker::with_capacity(0);
    /// let refused = tracker.send("p", 1_u64).unwrap_err();
    /// assert_eq!(refused.limit(), Some(Limit::Capacity));
    /// ```
    pub fn limit(&self) -> Option<Limit> {
        match self {
            SendError::Full(_, _, limit) => Some(*limit),
            _ => None,
        }
    }
}

/// Which limit refused a record with [`SendError::Full`] (or stopped a
/// batch with [`Refused::Full`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// The tracker's capacity: it holds as many records as
    /// [`Tracker::with_capacity`](crate::Tracker::with_capacity) (or
    /// [`Builder::capacity`](crate::Builder::capacity)) allows. Waiting
    /// sends are woken when one leaves.
    Capacity,
    /// The partition's metadata budget, on a progress tracker (see
    /// [`Builder::progress`](crate::Builder::progress)): accepting the
    /// record could let its encoded progress outgrow `max_metadata_bytes`.
    /// Waiting sends are woken when a record of the partition is resolved.
    /// Only records in flight fill it: a partition whose failed records
    /// alone fill it stops keeping its progress past the failure (see
    /// [`Tracker::progress`](crate::Tracker::progress)) and accepts.
    MetadataBudget,
    /// The tracker's internal limit: 2^24 − 1 records held, or 16,777,152
    /// partitions (records held include, on a progress tracker, at most
    /// 4,096 per failed partition kept for its progress). It does not pass
    /// by waiting for a resolution in general; a tracker that meets it
    /// needs a capacity.
    Internal,
}

impl Limit {
    fn describe(self) -> &'static str {
        match self {
            Limit::Capacity => "the tracker holds its capacity of records in flight",
            Limit::MetadataBudget => {
                "the partition's progress could outgrow its metadata budget \
                 until its oldest unacked record is acked"
            }
            Limit::Internal => {
                "the tracker's internal limit (2^24 - 1 records or 16,777,152 partitions) \
                 is reached"
            }
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Shows the record: `Full("p", 3, Capacity)`.
impl<P: fmt::Debug, O: fmt::Debug> fmt::Debug for SendError<P, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Full(p, o, limit) => f
                .debug_tuple("Full")
                .field(p)
                .field(o)
                .field(limit)
                .finish(),
            SendError::Closed(p, o) => f.debug_tuple("Closed").field(p).field(o).finish(),
            SendError::OutOfOrder(p, o) => f.debug_tuple("OutOfOrder").field(p).field(o).finish(),
        }
    }
}

impl<P, O> fmt::Display for SendError<P, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Full(_, _, limit) => write!(f, "{limit}; the record was not sent"),
            SendError::Closed(..) => f.write_str("the tracker is closed; the record was not sent"),
            SendError::OutOfOrder(..) => f.write_str(
                "the offset is not above every earlier one of its partition; the record was not sent",
            ),
        }
    }
}

impl<P: fmt::Debug, O: fmt::Debug> std::error::Error for SendError<P, O> {}

/// Why a ticket could not be resolved. In every case nothing changed.
///
/// ```
/// use inflight::{ResolveError, Tracker};
/// let tracker = Tracker::new();
/// let raw = tracker.send("p", 1_u64).unwrap().into_raw();
/// tracker.ack_raw(raw).unwrap();
/// assert_eq!(tracker.ack_raw(raw), Err(ResolveError::AlreadyResolved));
/// let other = Tracker::<&str, u64>::new();
/// assert_eq!(other.ack_raw(raw), Err(ResolveError::ForeignTracker));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResolveError {
    /// The ticket names no record this tracker issued: a forged raw value
    /// (a tag its slot never issued, a slot never used, tag 0).
    Unknown,
    /// The ticket's record was already acked or failed (its slot may since
    /// hold another record, which stays untouched). Reported for any tag the
    /// slot issued before its current one, within the ABA bound of
    /// [`Ticket`](crate::Ticket).
    AlreadyResolved,
    /// The ticket was issued by another tracker.
    ForeignTracker,
    /// The ticket's record was released by
    /// [`Tracker::revoke`](crate::Tracker::revoke) of its partition: it is
    /// no longer in flight, and resolving it changes nothing. A typed
    /// [`Ticket`](crate::Ticket) (move-only, so never resolved any other
    /// way) answers this for as long as it is held, however often its slot
    /// was reused since. A raw ticket answers it until the record's slot is
    /// reused (revoked slots are reused last, and the slot remembers the
    /// revoked tag until its next record is marked by a watermark); after
    /// that, `AlreadyResolved`, which then means "resolved or released".
    Revoked,
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResolveError::Unknown => "the ticket names no record of this tracker",
            ResolveError::AlreadyResolved => "the ticket's record was already acked or failed",
            ResolveError::ForeignTracker => "the ticket was issued by another tracker",
            ResolveError::Revoked => "the ticket's partition was revoked after it was sent",
        })
    }
}

impl std::error::Error for ResolveError {}

/// Why [`Tracker::begin_flush`](crate::Tracker::begin_flush) could not start
/// a flush.
///
/// ```
/// use inflight::{BeginFlushError, Tracker};
/// let tracker = Tracker::<u8, u8>::new();
/// let _flush = tracker.begin_flush().unwrap();
/// assert_eq!(tracker.begin_flush().err(), Some(BeginFlushError::InProgress));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BeginFlushError {
    /// Another [`Flush`](crate::Flush) is alive; commit, abort or drop it first.
    InProgress,
}

impl fmt::Display for BeginFlushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a flush is already in progress")
    }
}

impl std::error::Error for BeginFlushError {}

/// Why a flush did not produce offsets.
///
/// ```
/// use std::time::Duration;
/// use inflight::{FlushError, Tracker};
/// let tracker = Tracker::new();
/// let ticket = tracker.send("p", 1_u64).unwrap();
/// let mut flush = tracker.begin_flush().unwrap();
/// match flush.wait(Duration::from_millis(10)) {
///     Err(FlushError::Timeout { pending }) => assert_eq!(pending, 1),
///     other => panic!("expected a timeout, got {other:?}"),
/// }
/// flush.abort(); // the next flush covers the record again
/// # tracker.ack(ticket).unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FlushError {
    /// The deadline passed with `pending` covered records still unresolved.
    /// The flush is still usable: wait again, or abort it.
    Timeout {
        /// Covered records not yet acked or failed.
        pending: usize,
    },
    /// [`Tracker::interrupt`](crate::Tracker::interrupt) was called. The flush
    /// can now only be aborted (or dropped); `commit` returns `NotReady`.
    Interrupted,
    /// A covered record failed: no offsets are safe to commit; restart from
    /// the last committed ones. Returned as soon as a covered record has
    /// failed, while others may still be in flight: the flush can never
    /// succeed, so nobody waits for them.
    ///
    /// Every later flush fails too, until the failed record's partition is
    /// revoked. [`Tracker::failed_records`](crate::Tracker::failed_records)
    /// names the failed records (partition, offset, what failed them), and
    /// [`Stats::stopped`](crate::Stats::stopped) the partitions:
    /// [`revoke`](crate::Tracker::revoke) each, rewind the source to its
    /// committed offset, and send from there (the failed record is redone;
    /// the other partitions' flushes commit again).
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, Tracker};
    /// let tracker = Tracker::new();
    /// let good = tracker.send("a", 1_u64).unwrap();
    /// let bad = tracker.send("b", 7_u64).unwrap();
    /// tracker.ack(good).unwrap();
    /// tracker.fail(bad).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Failed { failed: 1 }));
    /// drop(flush);
    /// // Which record? Revoke its partition, redo it from its committed offset.
    /// let failed = &tracker.failed_records(10)[0];
    /// assert_eq!((failed.partition, failed.offset), ("b", Some(7)));
    /// assert_eq!(tracker.stats().stopped, vec!["b"]);
    /// let _ = tracker.revoke("b");
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.wait(Duration::ZERO).unwrap().get("a"), Some(&1));
    /// ```
    Failed {
        /// Covered records resolved by `fail`, as far as seen so far (on a
        /// watermark tracker, those its partition's watermark has reached).
        failed: usize,
    },
    /// `commit` was called on a flush whose `wait` had not returned `Ok`. The
    /// flush was aborted.
    NotReady,
}

impl fmt::Display for FlushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlushError::Timeout { pending } => {
                write!(f, "flush timed out with {pending} covered records pending")
            }
            FlushError::Interrupted => f.write_str("flush interrupted"),
            FlushError::Failed { failed } => {
                write!(
                    f,
                    "{failed} covered records failed; no offsets can be committed \
                     (Tracker::failed_records names them, Stats::stopped their \
                     partitions: revoke those)"
                )
            }
            FlushError::NotReady => {
                f.write_str("commit before wait returned Ok; the flush was aborted")
            }
        }
    }
}

impl std::error::Error for FlushError {}

/// Why [`Tracker::drain`](crate::Tracker::drain) (or `drain_async`,
/// [`drain_partition`](crate::Tracker::drain_partition),
/// `drain_partition_async`) did not see everything resolved: all that can
/// come from a drain, which commits
/// nothing (so neither `Failed` nor `NotReady`, as a flush can).
///
/// ```
/// use std::time::Duration;
/// use inflight::{DrainError, Tracker};
/// let tracker = Tracker::new();
/// let ticket = tracker.send("p", 1_u64).unwrap();
/// assert_eq!(tracker.drain(Duration::ZERO), Err(DrainError::Timeout { pending: 1 }));
/// tracker.interrupt();
/// assert_eq!(tracker.drain(Duration::from_secs(60)), Err(DrainError::Interrupted));
/// # tracker.ack(ticket).unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DrainError {
    /// The deadline passed with `pending` records still in flight; call
    /// again to keep waiting.
    Timeout {
        /// Records sent before the call and not yet resolved (on a
        /// watermark tracker, not yet passed by their watermark).
        pending: usize,
    },
    /// [`Tracker::interrupt`](crate::Tracker::interrupt) was called.
    Interrupted,
}

impl DrainError {
    /// The drain's result from that of the wait it shares with flushes,
    /// whose other errors a drain never meets.
    pub(crate) fn from_wait(error: FlushError) -> DrainError {
        match error {
            FlushError::Timeout { pending } => DrainError::Timeout { pending },
            _ => DrainError::Interrupted,
        }
    }
}

impl fmt::Display for DrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DrainError::Timeout { pending } => {
                write!(f, "drain timed out with {pending} records in flight")
            }
            DrainError::Interrupted => f.write_str("drain interrupted"),
        }
    }
}

impl std::error::Error for DrainError {}

impl From<DrainError> for FlushError {
    /// The same meaning, as the error type of flushes.
    fn from(error: DrainError) -> FlushError {
        match error {
            DrainError::Timeout { pending } => FlushError::Timeout { pending },
            DrainError::Interrupted => FlushError::Interrupted,
        }
    }
}

/// Why [`Tracker::send_batch`](crate::Tracker::send_batch) stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refused {
    /// As [`SendError::Full`]: a limit is reached;
    /// [`SendBatchError::limit`] says which.
    Full,
    /// As [`SendError::Closed`].
    Closed,
    /// As [`SendError::OutOfOrder`].
    OutOfOrder,
}

/// A batch the tracker refused part of: the records before the refused
/// ones were sent, and every offset not sent comes back here, in order.
///
/// ```
/// use inflight::{Refused, Tracker};
/// let tracker = Tracker::new();
/// tracker.close();
/// let err = tracker.send_batch(&"p", vec![1_u64, 2, 3], &mut Vec::new()).unwrap_err();
/// assert_eq!(err.reason, Refused::Closed);
/// assert_eq!(err.into_offsets().collect::<Vec<_>>(), [1, 2, 3]);
/// ```
pub struct SendBatchError<O, I> {
    /// Why the batch stopped.
    pub reason: Refused,
    /// For [`Refused::Full`], the limit reached.
    pub limit: Option<Limit>,
    /// The offsets taken from the batch and not sent, in order (at least
    /// one: one for `Full` and `OutOfOrder`, up to 64 for `Closed`).
    pub unsent: Vec<O>,
    /// The batch's offsets after those, not yet taken.
    pub rest: I,
}

impl<O, I: Iterator<Item = O>> SendBatchError<O, I> {
    pub(crate) fn new((reason, limit): (Refused, Option<Limit>), unsent: Vec<O>, rest: I) -> Self {
        Self {
            reason,
            limit,
            unsent,
            rest,
        }
    }

    /// Every offset not sent, in order: `unsent`, then `rest`.
    pub fn into_offsets(self) -> std::iter::Chain<std::vec::IntoIter<O>, I> {
        self.unsent.into_iter().chain(self.rest)
    }
}

impl<O, I> fmt::Debug for SendBatchError<O, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendBatchError")
            .field("reason", &self.reason)
            .field("limit", &self.limit)
            .field("unsent", &self.unsent.len())
            .finish_non_exhaustive()
    }
}

impl<O, I> fmt::Display for SendBatchError<O, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match (self.reason, self.limit) {
            (Refused::Full, Some(limit)) => limit.describe(),
            (Refused::Full, None) => "a limit of the tracker is reached",
            (Refused::Closed, _) => "the tracker is closed",
            (Refused::OutOfOrder, _) => "an offset is not above every earlier one of its partition",
        };
        write!(f, "{why}; the batch stopped there, the rest was not sent")
    }
}
impl<O, I> std::error::Error for SendBatchError<O, I> {}

/// Some tickets of [`Tracker::ack_all`](crate::Tracker::ack_all) or
/// [`Tracker::fail_all`](crate::Tracker::fail_all) could not be resolved;
/// they changed nothing, and every other ticket was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResolveBatchError {
    /// How many tickets were resolved.
    pub resolved: usize,
    /// How many could not be.
    pub refused: usize,
    /// Why the first of those could not be.
    pub first: ResolveError,
}

impl fmt::Display for ResolveBatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} tickets resolved, {} not: the first because {}",
            self.resolved, self.refused, self.first
        )
    }
}

impl std::error::Error for ResolveBatchError {}
