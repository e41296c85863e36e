//! `KafkaOffsetStore` (issue 40, item 3) on librdkafka's mock cluster:
//! save, merge, remove, reload by a second store, other tasks' keys, a
//! corrupt record, a failed delivery, and the commit cycle with a tracker.
//!
//! The mock answers neither CreateTopics nor DescribeConfigs, so these
//! stores are opened with `check_topic(false)` on a topic the mock
//! created; the creation of a missing topic and the refusal of one that is
//! not compacted are tested against a broker (`tests/broker.rs`, run by
//! `kafka-e2e/run`).

use inflight::store::{OffsetStore, StoreError};
use inflight::Tracker;
use inflight_rdkafka::{KafkaOffsetStore, OffsetTopicError};
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;

const TOPIC: &str = "source-offsets";

/// A source partition as a Connect source task keys it: a file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct File {
    file: String,
}

/// Where in the file: a line and a byte position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    line: u64,
    byte: u64,
}

fn file(name: &str) -> File {
    File { file: name.into() }
}

fn at(line: u64) -> Position {
    Position {
        line,
        byte: line * 100,
    }
}

fn cluster() -> MockCluster<'static, DefaultProducerContext> {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    cluster
}

fn config(cluster: &MockCluster<'static, DefaultProducerContext>) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", cluster.bootstrap_servers());
    config
}

fn store<P, O>(
    cluster: &MockCluster<'static, DefaultProducerContext>,
    task: &str,
) -> KafkaOffsetStore<P, O> {
    KafkaOffsetStore::builder(&config(cluster), TOPIC, task)
        .check_topic(false) // the mock answers no CreateTopics / DescribeConfigs
        .timeout(Duration::from_secs(10))
        .open()
        .unwrap()
}

/// Writes one raw record to the topic, as another writer would.
fn produce_raw(
    cluster: &MockCluster<'static, DefaultProducerContext>,
    key: &str,
    value: Option<&str>,
) {
    let producer: BaseProducer = config(cluster).create().unwrap();
    let mut record = BaseRecord::<str, str>::to(TOPIC).partition(0).key(key);
    if let Some(value) = value {
        record = record.payload(value);
    }
    producer.send(record).map_err(|(e, _)| e).unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();
}

#[test]
fn saves_merge_removes_forget_and_a_second_store_reads_them_back() {
    let cluster = cluster();
    let mut store: KafkaOffsetStore<File, Position> = store(&cluster, "orders-source");
    assert!(store.load().unwrap().is_empty(), "a first start");
    store
        .save(&HashMap::from([
            (file("a.csv"), at(1)),
            (file("b.csv"), at(2)),
            (file("c.csv"), at(3)),
        ]))
        .unwrap();
    // A partial save: b and c keep theirs.
    store
        .save(&HashMap::from([(file("a.csv"), at(10))]))
        .unwrap();
    store.remove(&[file("c.csv")]).unwrap();
    store.save(&HashMap::new()).unwrap(); // nothing moved
    let expected = HashMap::from([(file("a.csv"), at(10)), (file("b.csv"), at(2))]);
    assert_eq!(store.load().unwrap(), expected);
    // A restart: a second store of the same task.
    drop(store);
    let mut again: KafkaOffsetStore<File, Position> = self::store(&cluster, "orders-source");
    assert_eq!(again.load().unwrap(), expected);
    // A removed partition saved again comes back.
    again
        .save(&HashMap::from([(file("c.csv"), at(30))]))
        .unwrap();
    assert_eq!(again.load().unwrap()[&file("c.csv")], at(30));
}

#[test]
fn other_tasks_and_foreign_keys_are_not_ours() {
    let cluster = cluster();
    let mut ours: KafkaOffsetStore<String, u64> = store(&cluster, "task-a");
    let mut theirs: KafkaOffsetStore<String, u64> = store(&cluster, "task-b");
    ours.save(&HashMap::from([("p".to_string(), 1)])).unwrap();
    theirs
        .save(&HashMap::from([
            ("p".to_string(), 99),
            ("q".to_string(), 7),
        ]))
        .unwrap();
    theirs.remove(&["p".to_string()]).unwrap();
    // Records that are not a store's: not JSON, not a pair.
    produce_raw(&cluster, "task-a/p", Some("5"));
    produce_raw(&cluster, r#"{"task":"task-a"}"#, Some("5"));
    assert_eq!(ours.load().unwrap(), HashMap::from([("p".to_string(), 1)]));
    assert_eq!(
        theirs.load().unwrap(),
        HashMap::from([("q".to_string(), 7)])
    );
}

#[test]
fn the_keys_and_values_are_connects_json() {
    let cluster = cluster();
    let mut store: KafkaOffsetStore<File, Position> = store(&cluster, "orders-source");
    // What Connect's JsonConverter (schemas off) writes for a file source.
    produce_raw(
        &cluster,
        r#"["orders-source",{"file":"x.csv"}]"#,
        Some(r#"{"line":4,"byte":400}"#),
    );
    assert_eq!(
        store.load().unwrap(),
        HashMap::from([(file("x.csv"), at(4))])
    );
    // A tombstone removes it.
    produce_raw(&cluster, r#"["orders-source",{"file":"x.csv"}]"#, None);
    assert!(store.load().unwrap().is_empty());
}

#[test]
fn keys_spelled_apart_name_one_partition_and_the_last_record_wins() {
    let cluster = cluster();
    let mut store: KafkaOffsetStore<String, u64> = store(&cluster, "t");
    store.save(&HashMap::from([("p".to_string(), 1)])).unwrap();
    // Another writer's spelling of the same key (compaction keeps both).
    produce_raw(&cluster, r#"[ "t", "p" ]"#, Some("5"));
    assert_eq!(store.load().unwrap()["p"], 5, "the later record");
    store.remove(&["p".to_string()]).unwrap();
    assert!(store.load().unwrap().is_empty(), "the later tombstone");
}

#[test]
fn a_record_of_the_task_that_does_not_decode_is_corrupt_and_names_where_it_is() {
    let cluster = cluster();
    let mut store: KafkaOffsetStore<String, u64> = store(&cluster, "t");
    store.save(&HashMap::from([("p".to_string(), 1)])).unwrap(); // offset 0
    produce_raw(&cluster, r#"["t","p"]"#, Some("not json")); // offset 1
    let err = store.load().unwrap_err();
    let StoreError::Corrupt { path, reason } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(path.to_str(), Some(TOPIC));
    assert!(reason.contains("source-offsets/0@1"), "{reason}");
    assert!(reason.contains("\"p\""), "{reason}");
    // A partition of another type is as corrupt.
    let mut numbered: KafkaOffsetStore<u32, u64> = self::store(&cluster, "t");
    assert!(matches!(numbered.load(), Err(StoreError::Corrupt { .. })));
    // The last record per key is what counts: a good one after it heals.
    store.save(&HashMap::from([("p".to_string(), 2)])).unwrap();
    assert_eq!(store.load().unwrap()["p"], 2);
}

#[test]
fn a_save_whose_record_is_not_delivered_fails_naming_the_key() {
    let cluster = cluster();
    let mut store: KafkaOffsetStore<String, u64> = store(&cluster, "t");
    store.save(&HashMap::from([("p".to_string(), 1)])).unwrap();
    // An error librdkafka does not retry.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let err = store
        .save(&HashMap::from([("p".to_string(), 2)]))
        .unwrap_err();
    let StoreError::Other(other) = &err else {
        panic!("{err:?}");
    };
    match other.downcast_ref::<OffsetTopicError>() {
        Some(OffsetTopicError::NotDelivered { topic, key, .. }) => {
            assert_eq!((topic.as_str(), key.as_str()), (TOPIC, r#"["t","p"]"#));
        }
        _ => panic!("{other}"),
    }
    assert_eq!(store.load().unwrap()["p"], 1, "the stored offset is kept");
    store.save(&HashMap::from([("p".to_string(), 3)])).unwrap();
    assert_eq!(store.load().unwrap()["p"], 3);
}

#[test]
fn a_save_the_broker_does_not_answer_times_out_and_the_next_one_wins() {
    let cluster = cluster();
    let mut store: KafkaOffsetStore<String, u64> = store(&cluster, "t");
    store.save(&HashMap::from([("p".to_string(), 1)])).unwrap();
    cluster.broker_down(1).unwrap();
    // Nothing can be delivered while the broker is down: the save fails
    // at its deadline, whatever the deadline.
    store.set_timeout(Duration::from_millis(300));
    let err = store
        .save(&HashMap::from([("p".to_string(), 2)]))
        .unwrap_err();
    let StoreError::Other(other) = &err else {
        panic!("{err:?}");
    };
    assert!(
        matches!(
            other.downcast_ref::<OffsetTopicError>(),
            Some(OffsetTopicError::Kafka { .. })
        ),
        "{other}"
    );
    assert!(
        err.to_string()
            .contains("waiting for the save's deliveries"),
        "{err}"
    );
    cluster.broker_up(1).unwrap();
    store.set_timeout(Duration::from_secs(30));
    // The failed save's record may land late, but before this one.
    store.save(&HashMap::from([("p".to_string(), 3)])).unwrap();
    assert_eq!(store.load().unwrap()["p"], 3);
}

#[test]
fn flush_to_saves_each_commit_into_the_topic() {
    let cluster = cluster();
    let mut store: KafkaOffsetStore<String, u64> = store(&cluster, "t");
    let tracker = Tracker::new();
    let a = tracker.send("a".to_string(), 41_u64).unwrap();
    let b = tracker.send("b".to_string(), 7).unwrap();
    tracker.ack(b).unwrap();
    tracker.ack(a).unwrap();
    tracker
        .flush_to(&mut store, Duration::from_secs(10))
        .unwrap();
    let c = tracker.send("a".to_string(), 42).unwrap();
    tracker.ack(c).unwrap();
    let saved = tracker
        .flush_to(&mut store, Duration::from_secs(10))
        .unwrap();
    assert_eq!(saved, HashMap::from([("a".to_string(), 42)]));
    let mut restarted: KafkaOffsetStore<String, u64> = self::store(&cluster, "t");
    assert_eq!(
        restarted.load().unwrap(),
        HashMap::from([("a".to_string(), 42), ("b".to_string(), 7)])
    );
}
