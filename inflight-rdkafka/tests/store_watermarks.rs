//! `store_watermarks` takes any tracker with watermarks (issue 39, item 7):
//! an inline watermark tracker and a progress tracker store `last done + 1`
//! as a plain watermark tracker does (`tests/mock.rs`), on librdkafka's
//! mock cluster.

use inflight::mode::Watermarked;
use inflight::Tracker;
use inflight_rdkafka::{store_watermarks, TopicPartition};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::time::Duration;

/// Sends and acks 0..8 of partition 0 of "source" (out of order), stores
/// the watermark and commits what is stored: Kafka's offset is then 8.
fn stores_last_done_plus_one<M: Watermarked>(
    tracker: Tracker<TopicPartition, i64, M>,
    group: &str,
) {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("source", 1, 1).unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset("source", 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let partition = TopicPartition::new("source", 0);
    let tickets: Vec<_> = (0..8)
        .map(|offset| tracker.send(partition.clone(), offset).unwrap())
        .collect();
    for ticket in tickets.into_iter().rev() {
        tracker.ack(ticket).unwrap();
    }
    assert_eq!(store_watermarks(&consumer, &tracker).unwrap(), 1);
    consumer.commit_consumer_state(CommitMode::Sync).unwrap();
    let committed = consumer
        .committed_offsets(assignment, Duration::from_secs(10))
        .unwrap();
    assert_eq!(
        committed.find_partition("source", 0).unwrap().offset(),
        Offset::Offset(8)
    );
}

#[test]
fn an_inline_watermark_tracker_stores_its_watermarks() {
    stores_last_done_plus_one(
        Tracker::builder().inline_offsets().watermarks().build(),
        "inline",
    );
}

#[test]
fn a_progress_tracker_stores_its_watermarks() {
    stores_last_done_plus_one(Tracker::builder().progress(4096).build(), "progress");
}
