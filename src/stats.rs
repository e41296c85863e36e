//! What a metrics poll or an operator asks: [`Tracker::stats`], a snapshot
//! that takes nothing, and [`Tracker::oldest_unresolved`], which names the
//! records holding everything back.
//!
//! Both read without stopping sends and acks: each number is read once,
//! atomically, so the whole is a moment's estimate, not one instant. Neither
//! is on the hot path; the record ages come from the time each generation
//! opened (a flush seals one), so no send or ack reads a clock.

use crate::counts::entered_from;
use crate::generation::Generation;
use crate::mode::Mode;
use crate::permits::Permits;
use crate::slab::INSPECTED;
use crate::sync::epoch;
use crate::sync::Ordering;
use crate::Tracker;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How many partitions [`Stats::largest_partitions`] lists at most.
pub const LARGEST_PARTITIONS: usize = 8;

/// A snapshot of a tracker, from [`Tracker::stats`]. Plain data for any
/// metrics library to export; taking it changes nothing (unlike
/// [`Tracker::committable_with_stats`], which takes the advances it
/// reports).
///
/// ```
/// use inflight::Tracker;
/// let tracker = Tracker::builder().watermarks().capacity(100).build();
/// let a = tracker.send("p", 1_u64).unwrap();
/// let b = tracker.send("p", 2_u64).unwrap();
/// let c = tracker.send("q", 7_u64).unwrap();
/// tracker.ack(b).unwrap(); // waits behind a
/// tracker.ack(c).unwrap();
/// let stats = tracker.stats();
/// assert_eq!(stats.in_flight, 2);             // a, and b behind it
/// assert_eq!(stats.committable_records, 1);   // c, not yet taken
/// assert_eq!(stats.uncommittable_records, 2);
/// assert_eq!(stats.largest_partitions, vec![("p", 2)]);
/// assert!(stats.oldest_age.is_some());
/// assert_eq!(tracker.committable()["q"], 7);  // stats took nothing
/// # tracker.ack(a).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats<P> {
    /// Records in flight, as [`Tracker::in_flight`] counts them.
    pub in_flight: usize,
    /// The capacity, if the tracker has one.
    pub capacity: Option<usize>,
    /// Partitions the tracker has seen.
    pub partitions: usize,
    /// The partitions with the most records in flight, most first, at most
    /// [`LARGEST_PARTITIONS`] of them. On a tracker without watermarks this
    /// scans the slots (work in proportion to the most records the tracker
    /// ever held); with watermarks it reads one counter pair per partition.
    pub largest_partitions: Vec<(P, usize)>,
    /// How long the oldest record in flight has been: at least that long,
    /// and at most that plus the time its generation stayed open (a flush
    /// interval, when flushes are regular). `None` when nothing is in
    /// flight.
    pub oldest_age: Option<Duration>,
    /// A [`Flush`](crate::Flush) is alive.
    pub flush_in_progress: bool,
    /// Sealed generations not yet folded into a flush: more than a few
    /// means flushes keep timing out (each covers the last one's records
    /// again).
    pub sealed_generations: usize,
    /// [`Tracker::close`] was called.
    pub closed: bool,
    /// Watermark trackers: acked records behind the watermarks that no
    /// [`committable`](Tracker::committable) call has taken yet; on a
    /// progress tracker, that neither `committable` nor
    /// [`progress`](Tracker::progress) has handed out yet.
    pub committable_records: u64,
    /// Watermark trackers: records not yet behind their partition's
    /// watermark (in flight, or acked behind one that is).
    pub uncommittable_records: u64,
    /// Partitions that a failed record stops, in their current life: on a
    /// watermark or progress tracker, whose watermark the failure stopped;
    /// on a barrier tracker, whose failure makes every flush return
    /// [`FlushError::Failed`](crate::FlushError::Failed). The way on is to
    /// [`revoke`](Tracker::revoke) each and start it again from its
    /// committed offset (its failed record is then redone);
    /// [`failed_records`](Tracker::failed_records) names the records.
    pub stopped: Vec<P>,
    /// Senders waiting for room on a bounded tracker:
    /// [`send_timeout`](Tracker::send_timeout) and
    /// [`send_async`](Tracker::send_async) calls registered to be woken
    /// when a resolution (or, with watermarks, an advance) frees a permit.
    pub waiting_senders: usize,
    /// Watermark trackers: records resolved (acked, or failed) but held
    /// behind an unresolved record of their partition, which the
    /// watermark has not passed yet. They count in `in_flight` and against
    /// the capacity, and keep their slots, until it does. Counted by a scan
    /// of the slots (work in proportion to [`slots`](Self::slots)); 0 on a
    /// tracker without watermarks. On a progress tracker, also the records
    /// a failure keeps for [`progress`](Tracker::progress) after the
    /// watermark passed them: at most 4,096 per failed partition (see
    /// [`Builder::progress`](crate::Builder::progress)), which hold slots
    /// but no permit, until the partition's life ends.
    pub held_records: u64,
    /// Slots the tracker has allocated, one per record it held at once at
    /// most (and a few more, see [`Builder::capacity`](crate::Builder::capacity));
    /// each keeps the offset of its last record until it is reused, so the
    /// tracker's memory is in proportion to them. They are kept for the
    /// tracker's life.
    pub slots: usize,
}

/// A record still in flight, from [`Tracker::oldest_unresolved`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unresolved<P, O> {
    /// The record's partition.
    pub partition: P,
    /// The record's offset.
    pub offset: O,
    /// How long it has been in flight, at least (to within the time its
    /// generation stayed open, as for [`Stats::oldest_age`]).
    pub age: Duration,
}

/// **Observe.** [`stats`](Self::stats) for a metrics poll (it takes
/// nothing), [`oldest_unresolved`](Self::oldest_unresolved) for what holds
/// a commit back, and the counts.
///
/// ```
/// use inflight::Tracker;
/// let tracker = Tracker::with_capacity(100);
/// let ticket = tracker.send("orders-0", 41_u64).unwrap();
/// assert_eq!((tracker.in_flight(), tracker.capacity()), (1, Some(100)));
/// assert_eq!(tracker.oldest_unresolved(1)[0].offset, 41);
/// # tracker.ack(ticket).unwrap();
/// ```
impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// A snapshot of the tracker for metrics: what is in flight, where,
    /// for how long, and what is committable. Takes nothing and changes
    /// nothing; lock-free; allocates only the vectors it returns. See
    /// [`Stats`].
    pub fn stats(&self) -> Stats<P> {
        let now = Instant::now();
        let guard = epoch::pin();
        let shards = self.shards.snapshot();
        let (mut in_flight, mut sealed, mut oldest) = (0, 0, None);
        self.walk(&guard, None, |generation| {
            let live = generation.live(&shards);
            in_flight += live;
            // Relaxed: only tells the open generation from sealed ones.
            if !generation.next.load(Ordering::Relaxed, &guard).is_null() {
                sealed += 1;
            }
            if live != 0 && oldest.is_none() {
                oldest = Some(now.saturating_duration_since(generation.opened));
            }
        });
        let mut stats = Stats {
            in_flight,
            capacity: self.capacity(),
            partitions: self.partitions.len(),
            largest_partitions: Vec::new(),
            oldest_age: oldest,
            // Relaxed, both: flags read as statistics.
            flush_in_progress: self.flushing.load(Ordering::Relaxed),
            sealed_generations: sealed,
            closed: self.closed.load(Ordering::Relaxed),
            committable_records: 0,
            uncommittable_records: 0,
            stopped: Vec::new(),
            waiting_senders: self.room.len(),
            held_records: 0,
            slots: self.slots.allocated(),
        };
        let mut counts: Vec<(usize, usize)> = Vec::new();
        let mut kept = 0_u64;
        match self.marks() {
            Some(watermarks) => {
                watermarks.backlogs(self.partitions.numbered(), |number, backlog| {
                    stats.committable_records += backlog.untaken;
                    stats.uncommittable_records += backlog.records;
                    kept += backlog.kept;
                    if backlog
                        .stopped
                        .is_some_and(|life| self.is_current_life(number as u32, life))
                    {
                        stats.stopped.extend(self.partitions.key(number).cloned());
                    }
                    if backlog.records != 0 {
                        counts.push((number, backlog.records as usize));
                    }
                });
                // Not passed, less unresolved: held. (Read apart, so it
                // saturates at 0.)
                let mut unresolved = 0_u64;
                self.slots.for_each_live(|_, _, _, _| unresolved += 1);
                stats.held_records = stats.uncommittable_records.saturating_sub(unresolved);
                // And what a failure keeps for `progress()`, passed.
                stats.held_records += kept;
            }
            None => {
                // A barrier tracker's failure fails every flush until its
                // partition is revoked: stopped while its life is current.
                for number in 0..self.partitions.numbered() {
                    let Some(lifecycle) = self.partitions.lifecycle(number) else {
                        continue;
                    };
                    // Relaxed, both: statistics (see `Tracker::add_failed`).
                    let failed_in = lifecycle.failed_in.load(Ordering::Relaxed);
                    let life = lifecycle.life.load(Ordering::Relaxed);
                    if failed_in == crate::partition::FAILED_IN | u64::from(life) {
                        stats.stopped.extend(self.partitions.key(number).cloned());
                    }
                }
                let mut by_number = vec![0_usize; self.partitions.numbered()];
                self.slots.for_each_live(|_, _, number, _| {
                    if let Some(count) = by_number.get_mut(number as usize) {
                        *count += 1;
                    }
                });
                counts.extend(by_number.into_iter().enumerate().filter(|&(_, n)| n != 0));
            }
        }
        counts.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        counts.truncate(LARGEST_PARTITIONS);
        stats.largest_partitions = counts
            .into_iter()
            .filter_map(|(number, n)| Some((self.partitions.key(number)?.clone(), n)))
            .collect();
        stats
    }

    /// The `n` oldest records still unresolved (acked or failed ones are
    /// not listed, even on a watermark tracker), oldest first, with their
    /// partition, offset and age: the report to log when a flush or a
    /// `drain` keeps timing out, or `in_flight()` does not fall.
    ///
    /// The usual culprit is a ticket that was dropped: by a task that
    /// panicked, or a sink callback that never fired. Such a record stays
    /// in flight for ever (nothing is silently forgotten), so every flush
    /// that covers it times out and a watermark stops behind it. The way
    /// out is to give up the partition's records and restart it from its
    /// committed offset (`revoke`, from the partition-lifecycle work), or to
    /// restart the tracker.
    ///
    /// Not for the hot path: it scans every slot the tracker has allocated
    /// (work in proportion to the most records it ever held), without a
    /// lock; records resolved meanwhile may or may not be listed. Ages are
    /// at least the age given, to within the time the record's generation
    /// stayed open.
    ///
    /// ```
    /// use inflight::Tracker;
    /// let tracker = Tracker::new();
    /// let stuck = tracker.send("orders", 41_u64).unwrap();
    /// let fine = tracker.send("orders", 42_u64).unwrap();
    /// tracker.ack(fine).unwrap();
    /// let report = tracker.oldest_unresolved(10);
    /// assert_eq!(report.len(), 1);
    /// assert_eq!((report[0].partition, report[0].offset), ("orders", 41));
    /// # tracker.ack(stuck).unwrap();
    /// ```
    pub fn oldest_unresolved(&self, n: usize) -> Vec<Unresolved<P, O>> {
        let now = Instant::now();
        // Pinned before the scan: a record seen unresolved keeps its
        // generation from being folded, and once folded, the generation is
        // freed only after this guard goes.
        let guard = epoch::pin();
        // The generation pointers are only trusted once `inspect` proved
        // their records still unresolved.
        let mut live: Vec<(usize, u64, u32, *const Generation)> = Vec::new();
        self.slots
            .for_each_live(|index, state, partition, generation| {
                live.push((index, state, partition, entered_from(generation).0));
            });
        let mut held = Inspected {
            slots: &self.slots,
            indices: Vec::new(),
        };
        let mut found: Vec<(u64, Instant, usize, u32)> = Vec::new();
        for &(index, state, partition, generation) in &live {
            if !self.slots.inspect(index, state) {
                continue; // resolved (or inspected by another caller) meanwhile
            }
            held.indices.push(index);
            // SAFETY: `inspect` succeeded from the state that showed the
            // record unresolved, so the generation pointer read with it is
            // the record's, and the record kept that generation from being
            // folded until after we pinned: `guard` keeps it allocated.
            let generation = unsafe { &*generation };
            found.push((generation.id, generation.opened, index, partition));
        }
        drop(live);
        found.sort_unstable_by_key(|&(id, _, index, _)| (id, index));
        found.truncate(n);
        let mut report = Vec::with_capacity(found.len());
        for (_, opened, index, partition) in found {
            let Some(key) = self.partitions.key(partition as usize) else {
                continue;
            };
            // SAFETY: we hold `INSPECTED` on the slot, so its offset stays
            // put until `held` releases it.
            let offset = unsafe { self.slots.slot_of(index).value() };
            // User code (`Clone`): `held` releases the holds even if it
            // panics, and nothing else was changed.
            report.push(Unresolved {
                partition: key.clone(),
                offset: offset.clone(),
                age: now.saturating_duration_since(opened),
            });
        }
        drop(held);
        drop(guard);
        report
    }

    /// Records sent and not yet resolved; on a tracker with
    /// [watermarks](crate::Builder::watermarks), not yet passed by their
    /// watermark (an acked record held behind an unresolved one still
    /// counts). What a capacity bounds. Exact when no call is running
    /// concurrently; otherwise an estimate, which the sends and
    /// resolutions made meanwhile may move either way (it adds up count
    /// words read one by one), so not a bound on the records in flight
    /// throughout the call.
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let a = tracker.send(0_u8, 0_u8).unwrap();
    /// let b = tracker.send(0_u8, 1_u8).unwrap();
    /// tracker.fail(a).unwrap();
    /// assert_eq!(tracker.in_flight(), 1);
    /// # tracker.ack(b).unwrap();
    /// ```
    pub fn in_flight(&self) -> usize {
        let guard = epoch::pin();
        let shards = self.shards.snapshot();
        let mut total = 0;
        self.walk(&guard, None, |generation| total += generation.live(&shards));
        total
    }

    /// The capacity given to [`with_capacity`](Self::with_capacity), or
    /// `None` for an unbounded tracker.
    ///
    /// ```
    /// use inflight::Tracker;
    /// assert_eq!(Tracker::<u8, u8>::with_capacity(8).capacity(), Some(8));
    /// assert_eq!(Tracker::<u8, u8>::new().capacity(), None);
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        self.permits.as_ref().map(Permits::capacity)
    }

    /// How many distinct partitions the tracker has seen. A tracker holds at
    /// most 16,777,152; a send of a partition beyond that returns
    /// [`SendError::Full`](crate::SendError::Full).
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let a = tracker.send("a", 1_u8).unwrap();
    /// let b = tracker.send("b", 1_u8).unwrap();
    /// let c = tracker.send("a", 2_u8).unwrap();
    /// assert_eq!(tracker.partitions(), 2);
    /// # for t in [a, b, c] { tracker.ack(t).unwrap(); }
    /// ```
    pub fn partitions(&self) -> usize {
        self.partitions.len()
    }

    /// Whether the tracker keeps watermarks: true on a
    /// [`WatermarkTracker`](crate::WatermarkTracker) or
    /// [`ProgressTracker`](crate::ProgressTracker). The type says it too;
    /// this is for code generic over the mode ([`Builder::watermarks`](crate::Builder::watermarks)).
    ///
    /// ```
    /// assert!(!inflight::Tracker::<u8, u8>::new().has_watermarks());
    /// ```
    pub fn has_watermarks(&self) -> bool {
        M::WATERMARKS
    }
}

/// The `INSPECTED` holds [`Tracker::oldest_unresolved`] took, released on
/// drop (also when a `Clone` panics). Releasing runs no user code.
struct Inspected<'a, O> {
    slots: &'a crate::slab::Slab<O>,
    indices: Vec<usize>,
}

impl<O> Drop for Inspected<'_, O> {
    fn drop(&mut self) {
        for &index in &self.indices {
            self.slots.release(index, INSPECTED);
        }
    }
}
