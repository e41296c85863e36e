//! The consumer side: partitions and commit points, progress committed
//! with its metadata and read back on assignment.
//!
//! The tracker is a progress tracker (or a watermark tracker) over
//! [`TopicPartition`]s and Kafka's `i64` offsets: each consumed record is
//! sent to it (in offset order per partition, as a consumer reads them)
//! and acked when processed (or when its output is delivered, see
//! [`crate::producer`]). [`HandOffContext`](crate::HandOffContext) runs
//! the commits and the rebalances; this module holds what they are made
//! of, for a consumer that does its own.
//!
//! Each call says which offset convention it uses: **next to read**
//! (Kafka's committed offset, [`Progress::next`]) or **last done**
//! (`committable()`, a flush, `Revoked::committable`: Kafka wants it
//! `+ 1`).

use inflight::mode::{self, Watermarked};
use inflight::{Progress, Revoked, Tracker};
use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList, TopicPartitionListElem};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A partition of a topic: the tracker's partition key on the consumer
/// side.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: Arc<str>,
    /// The partition's number.
    pub partition: i32,
}

impl TopicPartition {
    /// The partition `partition` of `topic`.
    pub fn new(topic: &str, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// The list to commit for `progress`: each partition's offset
/// [`Progress::next`] (the next to read: Kafka's committed offset, no
/// `+ 1`), with [`Progress::encode`] as its metadata.
pub fn commit_list(
    progress: &HashMap<TopicPartition, Progress>,
) -> KafkaResult<TopicPartitionList> {
    let mut list = TopicPartitionList::with_capacity(progress.len());
    let mut sorted: Vec<_> = progress.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    for (partition, progress) in sorted {
        let next = i64::try_from(progress.next()).unwrap_or(i64::MAX);
        list.add_partition_offset(&partition.topic, partition.partition, Offset::Offset(next))?;
        if let Some(mut element) = list.find_partition(&partition.topic, partition.partition) {
            element.set_metadata(progress.encode());
        }
    }
    Ok(list)
}

/// The tracker modes whose commit points the glue commits: progress
/// trackers ([`mode::Progress`]: `next()` with its `encode()`d progress as
/// metadata) and watermark trackers ([`mode::Watermarks`]: `committable()`
/// `+ 1`, no metadata), and both with offsets inline
/// ([`mode::Inline`], from `Builder::inline_offsets`: Kafka's `i64`
/// offsets qualify, and it saves two locked steps a record). Either way a commit point is a [`Progress`], in
/// Kafka's convention (**next to read**).
pub trait Resumable: Watermarked + Sized {
    /// The commit points that changed since the last call: for a progress
    /// tracker [`Tracker::progress`] as it is; for a watermark tracker
    /// [`Tracker::committable`] (**last done**) `+ 1`, with nothing done
    /// beyond it. Each change is handed out once.
    fn changes(tracker: &Tracker<TopicPartition, i64, Self>) -> HashMap<TopicPartition, Progress>;

    /// The commit point a [`revoke`](Tracker::revoke) handed over:
    /// `Revoked::committable` (**last done**) `+ 1`, the ended life's last
    /// done prefix that no earlier call had taken. On a progress tracker
    /// it covers an ack that landed after the last `progress()` (the
    /// hand-off commits it, with what that `progress()` said was done
    /// beyond, if that is not behind it).
    fn revoked(revoked: &Revoked<i64>) -> Option<Progress>;

    /// The metadata budget, in characters, that the progress read back on
    /// assignment and the commit points are held to (see
    /// [`Progress::merge`]): a progress tracker's own
    /// ([`Tracker::max_metadata_bytes`]); for a watermark tracker, which
    /// keeps none, Kafka's default `offset.metadata.max.bytes`
    /// ([`DEFAULT_MAX_METADATA_BYTES`]).
    fn max_metadata_bytes(tracker: &Tracker<TopicPartition, i64, Self>) -> usize;
}

/// Kafka's default `offset.metadata.max.bytes`: the budget of metadata
/// read back for a watermark tracker (see [`Resumable::max_metadata_bytes`]).
pub const DEFAULT_MAX_METADATA_BYTES: usize = 4096;

/// `Resumable` for a progress mode and a watermark mode, plain and with
/// offsets inline (`Builder::inline_offsets`): the same commit points.
macro_rules! resumable {
    (progress: $($progress:ty),*; watermarks: $($watermarks:ty),*) => {
        $(
            impl Resumable for $progress {
                fn changes(
                    tracker: &Tracker<TopicPartition, i64, Self>,
                ) -> HashMap<TopicPartition, Progress> {
                    tracker.progress()
                }

                fn revoked(revoked: &Revoked<i64>) -> Option<Progress> {
                    // The ended life's last done prefix, which an ack
                    // after the last `progress()` may have moved on.
                    revoked.committable.and_then(next_after)
                }

                fn max_metadata_bytes(tracker: &Tracker<TopicPartition, i64, Self>) -> usize {
                    tracker.max_metadata_bytes()
                }
            }
        )*
        $(
            impl Resumable for $watermarks {
                fn changes(
                    tracker: &Tracker<TopicPartition, i64, Self>,
                ) -> HashMap<TopicPartition, Progress> {
                    watermark_points(tracker.committable())
                }

                fn revoked(revoked: &Revoked<i64>) -> Option<Progress> {
                    revoked.committable.and_then(next_after)
                }

                fn max_metadata_bytes(_: &Tracker<TopicPartition, i64, Self>) -> usize {
                    DEFAULT_MAX_METADATA_BYTES
                }
            }
        )*
    };
}

resumable!(
    progress: mode::Progress, mode::Inline<mode::Progress>;
    watermarks: mode::Watermarks, mode::Inline<mode::Watermarks>
);

/// **Last done** `last` as Kafka's commit point, **next to read**.
fn next_after(last: i64) -> Option<Progress> {
    u64::try_from(last).ok()?.checked_add(1).map(Progress::at)
}

/// A watermark tracker's `committable()` (**last done**) as commit points
/// (**next to read**, `+ 1`).
fn watermark_points(last_done: HashMap<TopicPartition, i64>) -> HashMap<TopicPartition, Progress> {
    last_done
        .into_iter()
        .filter_map(|(partition, last)| Some((partition, next_after(last)?)))
        .collect()
}

/// Stores each partition's watermark with `store_offsets`, for the
/// auto-commit pattern (`enable.auto.commit=true`,
/// `enable.auto.offset.store=false`): librdkafka then commits what is
/// stored, and retries on its own. Takes [`Tracker::committable`] (**last
/// done**) and stores it `+ 1` (**next to read**, Kafka's convention).
/// Returns how many partitions it stored. An error means a partition was
/// not assigned to this consumer (any more): its watermark is not stored,
/// and its next owner starts from the last commit (records redone, never
/// skipped). Any tracker with watermarks: a
/// [`WatermarkTracker`](inflight::WatermarkTracker), an inline one
/// (`builder().inline_offsets().watermarks()`) or a progress tracker.
///
/// ```no_run
/// use inflight::{Tracker, WatermarkTracker};
/// use inflight_rdkafka::{consumer::store_watermarks, TopicPartition};
/// use rdkafka::config::ClientConfig;
/// use rdkafka::consumer::{BaseConsumer, Consumer};
/// use rdkafka::Message;
/// use std::time::Duration;
///
/// let tracker: WatermarkTracker<TopicPartition, i64> = Tracker::builder().watermarks().build();
/// let consumer: BaseConsumer = ClientConfig::new()
///     .set("bootstrap.servers", "127.0.0.1:9092")
///     .set("group.id", "pipeline")
///     .set("enable.auto.commit", "true")         // librdkafka commits what is stored...
///     .set("enable.auto.offset.store", "false")  // ...and only what the tracker says is done
///     .create()
///     .expect("consumer");
/// consumer.subscribe(&["source"]).expect("subscribe");
/// loop {
///     if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
///         let partition = TopicPartition::new(message.topic(), message.partition());
///         let ticket = tracker.send(partition, message.offset()).expect("room");
///         // ... process it (on another thread, out of order), then:
///         tracker.ack(ticket).expect("a live ticket");
///     }
///     store_watermarks(&consumer, &tracker).expect("stored");
/// }
/// ```
pub fn store_watermarks<K: ConsumerContext, M: Watermarked>(
    consumer: &impl Consumer<K>,
    tracker: &Tracker<TopicPartition, i64, M>,
) -> KafkaResult<usize> {
    let points = watermark_points(tracker.committable());
    if points.is_empty() {
        return Ok(0);
    }
    consumer.store_offsets(&commit_list(&points)?)?;
    Ok(points.len())
}

/// Reads back the committed offset and metadata of each of `partitions`:
/// its [`Progress`] (a partition with no commit is left out: it starts
/// where `auto.offset.reset` says). Metadata that does not decode (written
/// by something else, or by a broker that keeps none, or describing more
/// positions than any budget allows, see [`Progress::decode`]) counts as
/// nothing done beyond the offset: at worst records are redone, never
/// skipped. [`HandOffContext`](crate::HandOffContext) also holds what it
/// reads back to the tracker's budget ([`Progress::fits`]), and merges it
/// with the tracker's progress within that budget ([`Progress::merge`]).
pub fn committed_progress<C>(
    consumer: &impl Consumer<C>,
    partitions: &TopicPartitionList,
    timeout: Duration,
) -> KafkaResult<HashMap<TopicPartition, Progress>>
where
    C: ConsumerContext,
{
    let committed = consumer.committed_offsets(partitions.clone(), timeout)?;
    Ok(progress_of(&committed))
}

/// The progress a list of committed offsets and metadata describes.
pub fn progress_of(committed: &TopicPartitionList) -> HashMap<TopicPartition, Progress> {
    let mut out = HashMap::new();
    for element in committed.elements() {
        let Offset::Offset(offset) = element.offset() else {
            continue;
        };
        let Ok(next) = u64::try_from(offset) else {
            continue;
        };
        let metadata = metadata_of(&element);
        let progress = Progress::decode(next, &metadata).unwrap_or_else(|_| Progress::at(next));
        out.insert(
            TopicPartition::new(element.topic(), element.partition()),
            progress,
        );
    }
    out
}

/// An element's metadata; none where it is not UTF-8 (rdkafka's accessor
/// panics on that).
pub(crate) fn metadata_of(element: &TopicPartitionListElem<'_>) -> String {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        element.metadata().to_owned()
    }))
    .unwrap_or_default()
}

/// What was done in the partitions this consumer was assigned, read from
/// their commits: skip a record that [`is_done`](Self::is_done).
#[derive(Debug, Default, Clone)]
pub struct Resume {
    pub(crate) progress: HashMap<TopicPartition, Progress>,
}

impl Resume {
    /// Whether `offset` of `partition` was done before the partition came
    /// to this consumer: skip it. False for a partition with no commit.
    pub fn is_done(&self, partition: &TopicPartition, offset: i64) -> bool {
        let Ok(offset) = u64::try_from(offset) else {
            return false;
        };
        self.progress
            .get(partition)
            .is_some_and(|progress| progress.is_done(offset))
    }

    /// The progress read back for `partition`, if it had a commit.
    pub fn get(&self, partition: &TopicPartition) -> Option<&Progress> {
        self.progress.get(partition)
    }

    /// `changes`, a tracker's commit points, each with what was read back
    /// for its partition: everything either says is done, held to
    /// `max_metadata_bytes` (see [`Progress::merge`]).
    pub(crate) fn merged(
        &self,
        mut changes: HashMap<TopicPartition, Progress>,
        max_metadata_bytes: usize,
    ) -> HashMap<TopicPartition, Progress> {
        for (partition, tracked) in &mut changes {
            if let Some(resumed) = self.progress.get(partition) {
                *tracked = merge(resumed, tracked, max_metadata_bytes);
            }
        }
        changes
    }

    /// Keeps `loaded`, the progress a store read back on assignment, each
    /// held to `max_metadata_bytes`: one that a tracker with that budget
    /// could not have reported ([`Progress::fits`]: hostile or corrupt
    /// metadata, or a store's own value) counts as its committed offset
    /// alone (records redone, never skipped).
    pub(crate) fn extend(
        &mut self,
        loaded: HashMap<TopicPartition, Progress>,
        max_metadata_bytes: usize,
    ) {
        self.progress
            .extend(loaded.into_iter().map(|(partition, progress)| {
                if progress.fits(max_metadata_bytes) {
                    (partition, progress)
                } else {
                    (partition, Progress::at(progress.next()))
                }
            }));
    }
}

/// `resumed` (read back on assignment) and `tracked` (the tracker's
/// progress since: it starts at or after `resumed.next()`) as one commit
/// point: every offset either says is done, within `max_metadata_bytes`
/// ([`Progress::merge`]: on runs, never offset by offset, so metadata
/// that claims billions of pending offsets costs no more than any other).
///
/// The tracker knows only what it was sent: the records the consumer
/// skipped as done (`is_done`) count as done while they lie between sent
/// ones, but what `resumed` had done past the tracker's last record would
/// be lost at the next commit, and redone by the next owner, if the
/// partition moved on before the tracker got past it.
pub(crate) fn merge(resumed: &Progress, tracked: &Progress, max_metadata_bytes: usize) -> Progress {
    resumed.merge(tracked, max_metadata_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_goes_into_the_commit_list_and_back() {
        let tracker: inflight::ProgressTracker<TopicPartition, i64> =
            inflight::Tracker::builder().progress(4096).build();
        let a = TopicPartition::new("source", 0);
        let b = TopicPartition::new("source", 3);
        let tickets: Vec<_> = (100..110)
            .map(|o| tracker.send(a.clone(), o).unwrap())
            .collect();
        for t in tickets.into_iter().skip(1) {
            tracker.ack(t).unwrap();
        }
        let t = tracker.send(b.clone(), 7).unwrap();
        tracker.ack(t).unwrap();
        let progress = tracker.progress();
        let list = commit_list(&progress).unwrap();
        let element = list.find_partition("source", 0).unwrap();
        assert_eq!(element.offset(), Offset::Offset(100), "next, not next + 1");
        assert_eq!(element.metadata(), progress[&a].encode());
        assert_eq!(
            list.find_partition("source", 3).unwrap().offset(),
            Offset::Offset(8)
        );
        // What a consumer reads back on assignment.
        let back = progress_of(&list);
        assert_eq!(back, progress);
        let resume = Resume { progress: back };
        assert!(!resume.is_done(&a, 100) && resume.is_done(&a, 101) && resume.is_done(&a, 99));
        assert!(!resume.is_done(&a, 110) && !resume.is_done(&TopicPartition::new("x", 0), 1));
    }

    #[test]
    fn merge_keeps_what_the_resumed_progress_had_done() {
        // Resumed: next 100, 101..150 and 160..170 done.
        let resumed = Progress::from_pending(100, 170, [100].into_iter().chain(150..160)).unwrap();
        // The tracker sent 100 (acked) and 150 (in flight), skipping 101..150.
        let tracked = Progress::from_pending(150, 151, [150]).unwrap();
        let merged = merge(&resumed, &tracked, 4096);
        assert_eq!(merged.next(), 150);
        assert!(merged.is_done(149) && !merged.is_done(150) && !merged.is_done(155));
        assert!(merged.is_done(165) && !merged.is_done(170));
        // All acked up to 159: the resumed ranges join on.
        assert_eq!(merge(&resumed, &Progress::at(160), 4096), Progress::at(170));
        // Past the resumed ranges: the tracker alone.
        let tracked = Progress::from_pending(180, 190, [180]).unwrap();
        assert_eq!(merge(&resumed, &tracked, 4096), tracked);
        // Nothing resumed beyond next.
        let tracked = Progress::from_pending(100, 105, [100, 103]).unwrap();
        assert_eq!(merge(&Progress::at(100), &tracked, 4096), tracked);
    }

    #[test]
    fn metadata_that_does_not_decode_means_nothing_done_beyond_the_offset() {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset("t", 0, Offset::Offset(42))
            .unwrap();
        list.find_partition("t", 0)
            .unwrap()
            .set_metadata("not ours!");
        list.add_partition_offset("t", 1, Offset::Invalid).unwrap();
        let back = progress_of(&list);
        assert_eq!(back.len(), 1, "no commit: left out");
        assert_eq!(back[&TopicPartition::new("t", 0)], Progress::at(42));
    }

    #[test]
    fn inline_trackers_give_the_same_commit_points() {
        use inflight::mode::{Inline, Progress as ProgressMode, Watermarks};
        fn points<M: Resumable>(tracker: Tracker<TopicPartition, i64, M>) -> Vec<(i32, u64)> {
            let p = TopicPartition::new("t", 0);
            for offset in [5, 6] {
                let ticket = tracker.send(p.clone(), offset).unwrap();
                tracker.ack(ticket).unwrap();
            }
            let mut points: Vec<_> = M::changes(&tracker)
                .into_iter()
                .map(|(tp, progress)| (tp.partition, progress.next()))
                .collect();
            points.sort_unstable();
            points
        }
        let marks: Tracker<TopicPartition, i64, Watermarks> =
            Tracker::builder().watermarks().build();
        let inline_marks: Tracker<TopicPartition, i64, Inline<Watermarks>> =
            Tracker::builder().inline_offsets().watermarks().build();
        let inline_progress: Tracker<TopicPartition, i64, Inline<ProgressMode>> =
            Tracker::builder().inline_offsets().progress(4096).build();
        assert_eq!(points(marks), vec![(0, 7)], "next to read");
        assert_eq!(points(inline_marks), vec![(0, 7)]);
        assert_eq!(points(inline_progress), vec![(0, 7)]);
    }
}
