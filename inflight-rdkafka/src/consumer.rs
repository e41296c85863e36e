//! The consumer side: progress committed with its metadata, read back on
//! assignment, and the clean hand-off when a rebalance revokes partitions.
//!
//! The tracker is a progress tracker over [`TopicPartition`]s and Kafka's
//! `i64` offsets: each consumed record is sent to it (in offset order per
//! partition, as a consumer reads them) and acked when processed (or when
//! its output is delivered, see [`crate::producer`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use inflight::Tracker;
//! use inflight_rdkafka::{commit_progress, HandOffContext, TopicPartition};
//! use rdkafka::config::ClientConfig;
//! use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
//! use rdkafka::Message;
//!
//! let tracker = Arc::new(Tracker::<TopicPartition, i64>::builder().progress(4096).build());
//! let context = HandOffContext::new(tracker.clone(), Duration::from_secs(5));
//! let consumer: BaseConsumer<HandOffContext> = ClientConfig::new()
//!     .set("bootstrap.servers", "127.0.0.1:9092")
//!     .set("group.id", "pipeline")
//!     .set("enable.auto.commit", "false")
//!     .set("enable.auto.offset.store", "false")
//!     .create_with_context(context)
//!     .expect("consumer");
//! consumer.subscribe(&["source"]).expect("subscribe");
//! loop {
//!     if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
//!         let partition = TopicPartition::new(message.topic(), message.partition());
//!         if consumer.context().is_done(&partition, message.offset()) {
//!             continue; // done before a restart or a rebalance
//!         }
//!         let ticket = tracker.send(partition, message.offset()).expect("in order, in budget");
//!         // ... process it, then:
//!         tracker.ack(ticket).expect("a live ticket");
//!     }
//!     commit_progress(&consumer, &tracker, CommitMode::Async).expect("commit");
//! }
//! ```

use inflight::{Progress, ProgressTracker};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientContext;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
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

/// Commits what changed since the last call (see
/// [`Tracker::progress`]): each changed partition's `next()` with its
/// encoded progress as metadata. Returns how many partitions it committed
/// (none: nothing is sent). On an error the progress taken is not
/// committed; it is reported again only once it changes, so commit with
/// [`CommitMode::Sync`] where that matters (the hand-off does).
pub fn commit_progress<C>(
    consumer: &impl Consumer<C>,
    tracker: &ProgressTracker<TopicPartition, i64>,
    mode: CommitMode,
) -> KafkaResult<usize>
where
    C: ConsumerContext,
{
    let progress = tracker.progress();
    if progress.is_empty() {
        return Ok(0);
    }
    let list = commit_list(&progress)?;
    consumer.commit(&list, mode)?;
    Ok(progress.len())
}

/// Reads back the committed offset and metadata of each of `partitions`:
/// its [`Progress`] (a partition with no commit is left out: it starts
/// where `auto.offset.reset` says). Metadata that does not decode (written
/// by something else, or by a broker that keeps none) counts as nothing
/// done beyond the offset: at worst records are redone, never skipped.
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
        // rdkafka's accessor panics on metadata that is not UTF-8: treat it
        // as none.
        let metadata = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            element.metadata().to_owned()
        }))
        .unwrap_or_default();
        let progress = Progress::decode(next, &metadata).unwrap_or_else(|_| Progress::at(next));
        out.insert(
            TopicPartition::new(element.topic(), element.partition()),
            progress,
        );
    }
    out
}

/// What was done in the partitions this consumer was assigned, read from
/// their commits: skip a record that [`is_done`](Self::is_done).
#[derive(Debug, Default, Clone)]
pub struct Resume {
    progress: HashMap<TopicPartition, Progress>,
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
}

/// A consumer context that runs the clean hand-off on revocation and reads
/// progress back on assignment:
///
/// - **revoked** partitions: a bounded
///   [`drain_partition`](Tracker::drain_partition) of each (records still
///   in flight after `drain_timeout` are redone by the next owner, never
///   lost), then a synchronous [`commit_progress`] (the drained progress,
///   and whatever else changed), then [`revoke`](Tracker::revoke) of each,
///   so late acks of their records answer `Revoked` and change nothing;
/// - **assigned** partitions: [`committed_progress`] into the context's
///   [`Resume`], which the processing loop asks before it handles a record.
///
/// Errors (a commit that fails, a drain that times out) are counted in
/// [`HandOffContext::errors`]: the callback cannot return them, and the
/// next owner then redoes the records, which is safe.
pub struct HandOffContext {
    tracker: Arc<ProgressTracker<TopicPartition, i64>>,
    drain_timeout: Duration,
    resume: Mutex<Resume>,
    errors: Mutex<Vec<String>>,
}

impl HandOffContext {
    /// A context handing off `tracker`'s partitions, waiting at most
    /// `drain_timeout` for each revoked partition's records.
    pub fn new(
        tracker: Arc<ProgressTracker<TopicPartition, i64>>,
        drain_timeout: Duration,
    ) -> Self {
        Self {
            tracker,
            drain_timeout,
            resume: Mutex::new(Resume::default()),
            errors: Mutex::new(Vec::new()),
        }
    }

    /// The tracker.
    pub fn tracker(&self) -> &Arc<ProgressTracker<TopicPartition, i64>> {
        &self.tracker
    }

    /// Whether `offset` of `partition` was done before the partition was
    /// assigned here (see [`Resume::is_done`]): skip it.
    pub fn is_done(&self, partition: &TopicPartition, offset: i64) -> bool {
        self.resume
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_done(partition, offset)
    }

    /// What was done in the partitions assigned so far (a snapshot).
    pub fn resume(&self) -> Resume {
        self.resume
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The errors met in rebalance callbacks, oldest first, taken.
    pub fn errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.errors.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn error(&self, what: String) {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(what);
    }

    fn hand_off(&self, consumer: &BaseConsumer<Self>, revoked: &TopicPartitionList) {
        let partitions: Vec<TopicPartition> = revoked
            .elements()
            .iter()
            .map(|e| TopicPartition::new(e.topic(), e.partition()))
            .collect();
        for partition in &partitions {
            if let Err(e) = self.tracker.drain_partition(partition, self.drain_timeout) {
                self.error(format!("drain of {partition:?}: {e}"));
            }
        }
        if let Err(e) = commit_progress(consumer, &self.tracker, CommitMode::Sync) {
            self.error(format!("final commit: {e}"));
        }
        for partition in &partitions {
            let _ = self.tracker.revoke(partition);
        }
        let mut resume = self.resume.lock().unwrap_or_else(PoisonError::into_inner);
        for partition in &partitions {
            resume.progress.remove(partition);
        }
    }

    fn take_over(&self, consumer: &BaseConsumer<Self>, assigned: &TopicPartitionList) {
        match committed_progress(consumer, assigned, Duration::from_secs(10)) {
            Ok(progress) => self
                .resume
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .progress
                .extend(progress),
            Err(e) => self.error(format!("reading committed progress: {e}")),
        }
    }
}

impl ClientContext for HandOffContext {}

impl ConsumerContext for HandOffContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(revoked) = rebalance {
            self.hand_off(consumer, revoked);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(assigned) = rebalance {
            self.take_over(consumer, assigned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_goes_into_the_commit_list_and_back() {
        let tracker: ProgressTracker<TopicPartition, i64> =
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
}
