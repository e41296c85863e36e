//! Where a commit puts the source offsets: the consumer group
//! ([`ExactlyOnce::commit_to_group`]) or an offsets topic
//! ([`ExactlyOnce::commit_to_topic`]); and the seek of a rewind.

use super::context::OffsetsDelivered;
use super::steps::{self, Step};
use super::{ExactlyOnce, Outcome, Rewind, TxnError};
use crate::consumer::TopicPartition;
use crate::producer::TicketOpaque;
use rdkafka::consumer::{Consumer, ConsumerContext, ConsumerGroupMetadata};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::Serialize;
use std::hash::Hash;
use std::time::{Duration, Instant};

impl ExactlyOnce<TopicPartition, i64> {
    /// Commits the open transaction with its source offsets in the
    /// consumer group `group` describes (`consumer.group_metadata()`, taken
    /// now: it carries the group's generation, which fences a consumer
    /// that lost its partitions): each source partition's last done
    /// offset `+ 1`, through `send_offsets_to_transaction`.
    pub fn commit_to_group(
        &self,
        group: &ConsumerGroupMetadata,
    ) -> Result<Outcome<TopicPartition, i64>, TxnError> {
        self.commit_with(|producer, offsets, deadline| {
            if offsets.is_empty() {
                return Ok(());
            }
            let mut list = TopicPartitionList::with_capacity(offsets.len());
            for (partition, offset) in offsets {
                list.add_partition_offset(
                    &partition.topic,
                    partition.partition,
                    Offset::Offset(offset.saturating_add(1)),
                )
                .map_err(|error| {
                    Step::Stop(TxnError::Fatal {
                        doing: "listing the offsets",
                        error,
                    })
                })?;
            }
            steps::retrying("send_offsets_to_transaction", deadline, |left| {
                producer.send_offsets_to_transaction(&list, group, left)
            })
            .map(|_| ())
        })
    }
}

impl<P, O> ExactlyOnce<P, O>
where
    P: Hash + Eq + Clone + Send + Sync + Serialize + 'static,
    O: Clone + Send + Sync + Serialize + 'static,
{
    /// Commits the open transaction with its source offsets written into
    /// the offsets topic `topic` under `task`, by the same producer, in
    /// the same transaction: one record per source partition, as
    /// [`KafkaOffsetStore`](crate::KafkaOffsetStore) keeps them (its
    /// `load` with the same topic and task reads them back; the last done
    /// offset, as a flush gives it). The topic must exist (compacted).
    pub fn commit_to_topic(&self, topic: &str, task: &str) -> Result<Outcome<P, O>, TxnError> {
        self.commit_with(|producer, offsets, deadline| {
            producer.context().begin_offsets();
            for (partition, offset) in offsets {
                let encoded = crate::offset_topic::record_key(task, partition)
                    .and_then(|key| Ok((key, crate::offset_topic::record_value(offset)?)));
                let (key, value) = encoded.map_err(|e| {
                    Step::Stop(TxnError::Encode {
                        topic: topic.to_owned(),
                        reason: e.to_string(),
                    })
                })?;
                let mut record = BaseRecord::with_opaque_to(topic, TicketOpaque::NONE)
                    .partition(0)
                    .key(&key)
                    .payload(&value);
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((error, back))
                            if crate::producer::is_queue_full(&error)
                                && Instant::now() < deadline =>
                        {
                            record = back;
                            producer.poll(Duration::from_millis(10));
                        }
                        Err((error, _)) => return Err(classify_send(error)),
                    }
                }
            }
            match producer.context().wait_offsets(offsets.len(), deadline) {
                OffsetsDelivered::All => Ok(()),
                OffsetsDelivered::Failed(error) => Err(Step::Abort(format!(
                    "an offsets record was not delivered: {error}"
                ))),
                OffsetsDelivered::TimedOut => Err(Step::Abort(
                    "the offsets records were not delivered in time".to_owned(),
                )),
            }
        })
    }
}

/// A produce refused at once: a transaction state error (abortable state)
/// aborts; anything else too (a record too large for the offsets topic).
fn classify_send(error: KafkaError) -> Step {
    Step::Abort(format!("producing an offsets record: {error}"))
}

impl Rewind<TopicPartition, i64> {
    /// Seeks `consumer` back: each revoked partition it has assigned to
    /// its committed offset (the last done offset this pipeline committed
    /// `+ 1`; for a partition it never committed, the group's committed
    /// offset, or its beginning if the group has none). Partitions no
    /// longer assigned are left alone.
    pub fn seek<C: ConsumerContext, K: Consumer<C>>(
        &self,
        consumer: &K,
        timeout: Duration,
    ) -> Result<(), KafkaError> {
        let assigned = consumer.assignment()?;
        let mut unknown = TopicPartitionList::new();
        let mut list = TopicPartitionList::new();
        for partition in &self.partitions {
            if assigned
                .find_partition(&partition.topic, partition.partition)
                .is_none()
            {
                continue;
            }
            match self.committed.get(partition) {
                Some(done) => list.add_partition_offset(
                    &partition.topic,
                    partition.partition,
                    Offset::Offset(done.saturating_add(1)),
                )?,
                None => {
                    unknown.add_partition(&partition.topic, partition.partition);
                }
            }
        }
        if unknown.count() > 0 {
            for element in consumer.committed_offsets(unknown, timeout)?.elements() {
                let offset = match element.offset() {
                    Offset::Offset(next) => Offset::Offset(next),
                    _ => Offset::Beginning,
                };
                list.add_partition_offset(element.topic(), element.partition(), offset)?;
            }
        }
        if list.count() == 0 {
            return Ok(());
        }
        let failed = consumer.seek_partitions(list, timeout)?;
        for element in failed.elements() {
            element.error()?;
        }
        Ok(())
    }
}
