//! Where each partition's commit point and progress are kept:
//! [`ProgressStore`], with two implementations.
//!
//! - [`GroupCommitStore`] (the default): the group commit itself, with the
//!   progress as the commit's metadata. Needs a broker that returns commit
//!   metadata (Kafka does; tansu 0.6.0 returns an empty string, so there a
//!   new owner only knows the offset).
//! - [`TopicStore`]: a compacted topic, one record per group and
//!   partition (key `group/topic/partition`, value `next metadata`),
//!   written and awaited before the group commit, and read back on
//!   assignment. Works on any broker; the group commit still carries the
//!   offset.
//!
//! Every point is Kafka's convention, **next to read**.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use inflight::Tracker;
//! use inflight_rdkafka::{HandOffContext, TopicPartition, TopicStore};
//! use rdkafka::config::ClientConfig;
//! use rdkafka::consumer::BaseConsumer;
//!
//! let mut brokers = ClientConfig::new();
//! brokers.set("bootstrap.servers", "127.0.0.1:9092");
//! // A compacted topic, created beforehand (cleanup.policy=compact).
//! let store = TopicStore::new(&brokers, "pipeline-progress", "pipeline", Duration::from_secs(5))
//!     .expect("producer");
//! let tracker = Arc::new(Tracker::<TopicPartition, i64>::builder().progress(4096).build());
//! let context = HandOffContext::new(tracker, Duration::from_secs(5)).store(store);
//! let consumer: BaseConsumer<HandOffContext> = brokers
//!     .clone()
//!     .set("group.id", "pipeline")
//!     .set("enable.auto.commit", "false")
//!     .set("enable.auto.offset.store", "false")
//!     .create_with_context(context)
//!     .expect("consumer");
//! ```

use crate::consumer::{progress_of, TopicPartition};
use inflight::Progress;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::{ClientContext, Message};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Keeps each partition's commit point (**next to read**) with its
/// progress, and reads it back on assignment.
pub trait ProgressStore: Send + Sync {
    /// Saves `points` before the group commit that follows carries their
    /// offsets; returns once they are kept. An error leaves them due: the
    /// group commit is not made, and the next commit saves them again.
    fn save(&self, points: &HashMap<TopicPartition, Progress>) -> KafkaResult<()>;

    /// The points kept for the partitions of `committed`, the group's
    /// committed offsets (and metadata) for them as the consumer read them
    /// back, waiting at most `timeout`. A partition with nothing kept is
    /// left out (it starts where `auto.offset.reset` says).
    ///
    /// What is kept is not trusted: [`HandOffContext`](crate::HandOffContext)
    /// holds each point to the tracker's metadata budget
    /// ([`Progress::fits`]); one that does not fit counts as its offset
    /// alone, with nothing done beyond it (records redone, never skipped).
    fn load(
        &self,
        committed: &TopicPartitionList,
        timeout: Duration,
    ) -> KafkaResult<HashMap<TopicPartition, Progress>>;
}

/// The group commit with its metadata: nothing to save beyond it, and the
/// committed offsets and metadata are what a new owner reads (see
/// [`progress_of`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct GroupCommitStore;

impl ProgressStore for GroupCommitStore {
    fn save(&self, _: &HashMap<TopicPartition, Progress>) -> KafkaResult<()> {
        Ok(())
    }

    fn load(
        &self,
        committed: &TopicPartitionList,
        _: Duration,
    ) -> KafkaResult<HashMap<TopicPartition, Progress>> {
        Ok(progress_of(committed))
    }
}

/// Counts the store's failed deliveries.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            // Relaxed: read after `flush`, which waited for this callback.
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A compacted topic of commit points: one record per group and
/// partition, key `group/topic/partition`, value `next metadata`
/// ([`Progress::encode`], printable ASCII). Create the topic with
/// `cleanup.policy=compact` and one partition (or let the broker create
/// it). A save is produced and flushed (`acks=all`) before the group
/// commit; a load reads the topic from its start to its end (the high
/// watermark of its first fetch: records others save meanwhile may be
/// left out) and keeps the last record per key, or the group's committed
/// point where that is further (something else committed past it).
pub struct TopicStore {
    config: ClientConfig,
    topic: String,
    group: String,
    producer: ThreadedProducer<Deliveries>,
    /// Saves one at a time: a failure is counted per save.
    saving: Mutex<()>,
    save_timeout: Duration,
}

impl TopicStore {
    /// A store in `topic` for `group`'s partitions, reaching the brokers
    /// `config` names (its `bootstrap.servers` and security settings);
    /// each save waits at most `save_timeout` for its delivery.
    pub fn new(
        config: &ClientConfig,
        topic: &str,
        group: &str,
        save_timeout: Duration,
    ) -> KafkaResult<Self> {
        let producer = config
            .clone()
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .create_with_context(Deliveries::default())?;
        Ok(Self {
            config: config.clone(),
            topic: topic.to_owned(),
            group: group.to_owned(),
            producer,
            saving: Mutex::new(()),
            save_timeout,
        })
    }

    fn key(&self, partition: &TopicPartition) -> String {
        format!("{}/{}/{}", self.group, partition.topic, partition.partition)
    }
}

impl ProgressStore for TopicStore {
    fn save(&self, points: &HashMap<TopicPartition, Progress>) -> KafkaResult<()> {
        let _one = self.saving.lock().unwrap_or_else(PoisonError::into_inner);
        // Relaxed: this thread's own earlier reads; flush orders the rest.
        let failed = self.producer.context().failed.load(Ordering::Relaxed);
        for (partition, progress) in points {
            let key = self.key(partition);
            let value = format!("{} {}", progress.next(), progress.encode());
            let mut record = BaseRecord::to(&self.topic).key(&key).payload(&value);
            let deadline = crate::revocation::deadline_after(Instant::now(), self.save_timeout);
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((e, back)) if crate::producer::is_queue_full(&e) => {
                        if Instant::now() >= deadline {
                            return Err(e);
                        }
                        record = back;
                        // Room comes as deliveries complete.
                        self.producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => return Err(e),
                }
            }
        }
        self.producer.flush(self.save_timeout)?;
        if self.producer.context().failed.load(Ordering::Relaxed) != failed {
            return Err(KafkaError::MessageProduction(RDKafkaErrorCode::Fail));
        }
        Ok(())
    }

    fn load(
        &self,
        committed: &TopicPartitionList,
        timeout: Duration,
    ) -> KafkaResult<HashMap<TopicPartition, Progress>> {
        let mut points = progress_of(committed);
        let wanted: HashMap<String, TopicPartition> = committed
            .elements()
            .iter()
            .map(|e| {
                let partition = TopicPartition::new(e.topic(), e.partition());
                (self.key(&partition), partition)
            })
            .collect();
        let mut kept: HashMap<TopicPartition, Progress> = HashMap::new();
        let reader_group = format!("{}-store-reader", self.group);
        read_to_end(
            &self.config,
            &reader_group,
            &self.topic,
            timeout,
            |message| {
                let key = message.key().and_then(|k| std::str::from_utf8(k).ok());
                let value = message.payload().and_then(|v| std::str::from_utf8(v).ok());
                if let Some(partition) = key.and_then(|k| wanted.get(k)) {
                    if let Some(progress) = value.and_then(parse) {
                        kept.insert(partition.clone(), progress);
                    }
                }
            },
        )?;
        for (partition, progress) in kept {
            let further = points
                .get(&partition)
                .is_some_and(|group| group.next() > progress.next());
            if !further {
                points.insert(partition, progress);
            }
        }
        Ok(points)
    }
}

/// Reads partition 0 of `topic` from its beginning to the end it had when
/// the read began, passing each record to `each` in offset order; waits
/// at most `timeout`. `group` is the reader's `group.id` (librdkafka and
/// some brokers want one to assign; nothing is committed to it).
///
/// Where the read ends: the high watermark of the first fetch that brought
/// records, which was answered after the read began, so every record
/// written before is below it; or `PartitionEOF` (an empty topic). Not
/// `PartitionEOF` alone: while others write, tansu 0.6.0 never answers a
/// fetch at the end, and the read would not end. Not `fetch_watermarks`:
/// tansu answers ListOffsets(latest) short of the end.
pub(crate) fn read_to_end(
    config: &ClientConfig,
    group: &str,
    topic: &str,
    timeout: Duration,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> KafkaResult<()> {
    let reader: BaseConsumer = config
        .clone()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning)?;
    reader.assign(&list)?;
    let deadline = crate::revocation::deadline_after(Instant::now(), timeout);
    let mut end: Option<i64> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::OperationTimedOut,
            ));
        }
        match reader.poll(left) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(()),
            Some(Err(e)) => return Err(e),
            Some(Ok(message)) => {
                let end = *end.get_or_insert_with(|| high_watermark(&reader, topic));
                each(&message);
                if message.offset() + 1 >= end {
                    return Ok(());
                }
            }
        }
    }
}

/// Partition 0's high watermark as `reader`'s last fetch response gave it
/// (librdkafka's cached value, no request); `i64::MAX` if none is known.
fn high_watermark(reader: &BaseConsumer, topic: &str) -> i64 {
    let Ok(topic) = std::ffi::CString::new(topic) else {
        return i64::MAX;
    };
    let (mut low, mut high) = (-1_i64, -1_i64);
    // SAFETY: `reader`'s handle is live for this call; `topic` is a
    // NUL-terminated string that outlives it; the two outputs are valid
    // `i64`s for librdkafka to write.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            reader.client().native_ptr(),
            topic.as_ptr(),
            0,
            &mut low,
            &mut high,
        )
    };
    if err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0 {
        high
    } else {
        i64::MAX
    }
}

/// A stored value, `next metadata`; none if it does not parse.
fn parse(value: &str) -> Option<Progress> {
    let (next, metadata) = value.split_once(' ').unwrap_or((value, ""));
    let next = next.parse().ok()?;
    Some(Progress::decode(next, metadata).unwrap_or_else(|_| Progress::at(next)))
}
