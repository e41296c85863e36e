//! What `committable()` hands out: [`Committable`] and the tracker's
//! calls that take the published marks.

use super::*;
use crate::mode::{Mode, Watermarked};

/// What [`Tracker::committable_with_stats`] returns: the advanced watermarks
/// and the numbers Kafka's `CommittableOffsets` reports beside them.
///
/// ```
/// use inflight::Tracker;
/// let tracker = Tracker::builder().watermarks().build();
/// let a = tracker.send("p", 1_u64).unwrap();
/// let b = tracker.send("p", 2_u64).unwrap();
/// let c = tracker.send("q", 7_u64).unwrap();
/// tracker.ack(b).unwrap(); // waits behind a
/// tracker.ack(c).unwrap();
/// let now = tracker.committable_with_stats();
/// assert_eq!(now.offsets.get("q"), Some(&7));
/// assert!(!now.offsets.contains_key("p"));
/// assert_eq!(now.committable_records, 1);    // c
/// assert_eq!(now.uncommittable_records, 2);  // a, and b behind it
/// assert_eq!(now.partitions_in_flight, 1);
/// assert_eq!(now.largest_backlog, Some(("p", 2)));
/// # tracker.ack(a).unwrap();
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
#[must_use = "the advances are taken: no later call returns them"]
pub struct Committable<P, O> {
    /// For each partition whose watermark advanced since the previous call,
    /// its new watermark, as [`Tracker::committable`] returns them.
    pub offsets: HashMap<P, O>,
    /// Acked records newly behind the watermarks: those the advances in
    /// `offsets` cover.
    pub committable_records: u64,
    /// Records not yet behind their partition's watermark: in flight, or
    /// acked but waiting behind an earlier record that is not. (Records of a
    /// stopped partition are let go once resolved and not counted.)
    pub uncommittable_records: u64,
    /// Partitions with at least one such record.
    pub partitions_in_flight: usize,
    /// The partition with the most such records, and how many; `None` when
    /// there are none.
    pub largest_backlog: Option<(P, u64)>,
    /// Partitions whose watermark a failed record stopped for good: restart
    /// them from their committed offsets.
    pub stopped: Vec<P>,
}

impl<P, O> Default for Committable<P, O> {
    /// Nothing committable and nothing in flight.
    fn default() -> Self {
        Self {
            offsets: HashMap::new(),
            committable_records: 0,
            uncommittable_records: 0,
            partitions_in_flight: 0,
            largest_backlog: None,
            stopped: Vec::new(),
        }
    }
}

impl<P: Hash + Eq, O: PartialEq> PartialEq for Committable<P, O> {
    fn eq(&self, other: &Self) -> bool {
        self.offsets == other.offsets
            && self.committable_records == other.committable_records
            && self.uncommittable_records == other.uncommittable_records
            && self.partitions_in_flight == other.partitions_in_flight
            && self.largest_backlog == other.largest_backlog
            && self.stopped == other.stopped
    }
}

impl<P: Hash + Eq, O> Committable<P, O> {
    /// Merges a later call's result into this one, as a committer that polls
    /// several times before it stores does: offsets of the later call win
    /// (as Kafka's `updatedWith`), `committable_records` add up, and the
    /// statistics, which are snapshots, are the later call's.
    ///
    /// ```
    /// use inflight::{Committable, Tracker};
    /// let tracker = Tracker::builder().watermarks().build();
    /// let mut pending = Committable::default();
    /// let a = tracker.send("p", 1_u64).unwrap();
    /// tracker.ack(a).unwrap();
    /// pending.merge(tracker.committable_with_stats());
    /// let b = tracker.send("p", 2_u64).unwrap();
    /// let c = tracker.send("q", 9_u64).unwrap();
    /// tracker.ack(b).unwrap();
    /// pending.merge(tracker.committable_with_stats());
    /// assert_eq!(pending.offsets, [("p", 2)].into_iter().collect());
    /// assert_eq!(pending.committable_records, 2);
    /// assert_eq!(pending.uncommittable_records, 1); // c, from the later snapshot
    /// # tracker.ack(c).unwrap();
    /// ```
    pub fn merge(&mut self, later: Committable<P, O>) {
        self.offsets.extend(later.offsets);
        self.committable_records += later.committable_records;
        self.uncommittable_records = later.uncommittable_records;
        self.partitions_in_flight = later.partitions_in_flight;
        self.largest_backlog = later.largest_backlog;
        self.stopped = later.stopped;
    }
}

/// **Commit by watermark,** on a [`WatermarkTracker`](crate::WatermarkTracker)
/// or a [`ProgressTracker`](crate::ProgressTracker): each partition's **last
/// done** offset, at any moment, without a barrier (commit + 1 to Kafka).
///
/// ```
/// use inflight::Tracker;
/// let tracker = Tracker::builder().watermarks().build();
/// let ticket = tracker.send("orders-0", 41_u64).unwrap();
/// tracker.ack(ticket).unwrap();
/// assert_eq!(tracker.committable()["orders-0"], 41);
/// ```
impl<P, O, M: Watermarked> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// The **last done** offset of each partition whose watermark advanced
    /// since the previous call (Connect's convention; for Kafka, commit it
    /// **+ 1**): the offset of the latest record such that it and every
    /// earlier record of that partition (in send order) were acked.
    ///
    /// Merge the result into the offsets you store, later calls winning (as
    /// Kafka's `updatedWith` does); a partition that did not advance is
    /// absent. Callable at any moment while sends and acks go on, from any
    /// thread: it never blocks, and concurrent callers never receive the
    /// same advance twice nor lose one (each advance goes to exactly one
    /// call; if two calls may run at once, merge their results in the order
    /// the calls returned, or from one thread).
    ///
    /// A failed record stops its own partition's watermark for good (see
    /// [`Committable::stopped`]) and no other partition's. Exists on
    /// trackers built with [`Builder::watermarks`](crate::Builder::watermarks)
    /// or [`Builder::progress`](crate::Builder::progress).
    ///
    /// ```
    /// use inflight::Tracker;
    /// let tracker = Tracker::builder().watermarks().build();
    /// let t1 = tracker.send("orders", 10_u64).unwrap();
    /// let t2 = tracker.send("orders", 11_u64).unwrap();
    /// let t3 = tracker.send("orders", 12_u64).unwrap();
    /// tracker.ack(t1).unwrap();
    /// tracker.ack(t3).unwrap();                      // 12 waits behind 11
    /// assert_eq!(tracker.committable()["orders"], 10);
    /// assert!(tracker.committable().is_empty());     // nothing new
    /// tracker.ack(t2).unwrap();
    /// assert_eq!(tracker.committable()["orders"], 12);
    /// ```
    #[must_use = "the advances are taken: no later call returns them"]
    pub fn committable(&self) -> HashMap<P, O> {
        let watermarks = &self.watermarks;
        let mut offsets = HashMap::new();
        watermarks.take(self.partitions.numbered(), &self.slots, |number, offset| {
            if let Some(partition) = self.partitions.key(number) {
                offsets.insert(partition.clone(), offset.clone());
            }
        });
        offsets
    }

    /// [`committable`](Self::committable) (the **last done** offsets), with
    /// statistics about what is not committable yet. The statistics are a moment's snapshot, read
    /// without stopping sends and acks.
    #[must_use = "the advances are taken: no later call returns them"]
    pub fn committable_with_stats(&self) -> Committable<P, O> {
        let mut result = Committable::default();
        let watermarks = &self.watermarks;
        // The statistics first: they clone keys (user code), and a panic
        // there must come before any advance is taken.
        let mut largest: Option<(usize, u64)> = None;
        watermarks.backlogs(self.partitions.numbered(), |number, backlog| {
            if backlog
                .stopped
                .is_some_and(|life| self.is_current_life(number as u32, life))
            {
                if let Some(partition) = self.partitions.key(number) {
                    result.stopped.push(partition.clone());
                }
            }
            if backlog.records == 0 {
                return;
            }
            result.uncommittable_records += backlog.records;
            result.partitions_in_flight += 1;
            if largest.is_none_or(|(_, most)| backlog.records > most) {
                largest = Some((number, backlog.records));
            }
        });
        result.largest_backlog = largest
            .and_then(|(number, records)| Some((self.partitions.key(number)?.clone(), records)));
        result.committable_records =
            watermarks.take(self.partitions.numbered(), &self.slots, |number, offset| {
                if let Some(partition) = self.partitions.key(number) {
                    result.offsets.insert(partition.clone(), offset.clone());
                }
            });
        result
    }
}

impl<P, O, M: Mode> Tracker<P, O, M> {}
