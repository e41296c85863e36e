//! The transactional flush against a broker that implements transactions
//! (`KAFKA_E2E_BROKERS`; `kafka-e2e/run` runs these): the group's offsets
//! move only when a transaction commits, and a restart with the same
//! transactional id fences the instance it replaces. Ignored unless run
//! with `--include-ignored`.

mod broker_common;

use broker_common::{block_on, config, unique};
use inflight_rdkafka::transaction::{ExactlyOnce, Outcome, TxnError};
use inflight_rdkafka::TopicPartition;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::Message;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A source topic of `records` records (one partition) and a sink.
fn topics(records: usize) -> (String, String) {
    let (source, sink) = (unique("txn-source"), unique("txn-sink"));
    let admin: AdminClient<DefaultClientContext> = config().create().unwrap();
    let new = [
        NewTopic::new(&source, 1, TopicReplication::Fixed(1)),
        NewTopic::new(&sink, 1, TopicReplication::Fixed(1)),
    ];
    for result in block_on(admin.create_topics(&new, &AdminOptions::new())).unwrap() {
        result.unwrap();
    }
    let producer: ThreadedProducer<DefaultProducerContext> = config().create().unwrap();
    for i in 0..records {
        let payload = i.to_string();
        producer
            .send(
                BaseRecord::<(), str>::to(&source)
                    .partition(0)
                    .payload(&payload),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    (source, sink)
}

/// A consumer of `group` reading `source` from its beginning.
fn consumer(group: &str, source: &str) -> BaseConsumer {
    let consumer: BaseConsumer = config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    // Assigned, not subscribed: no join to wait for (tansu takes seconds);
    // the group metadata carries the group id alone.
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(source, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    consumer
}

/// Reads `count` records (with a deadline that only reports a hang).
fn read(consumer: &BaseConsumer, count: usize) -> Vec<(TopicPartition, i64, Vec<u8>)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut read = Vec::new();
    while read.len() < count {
        assert!(Instant::now() < deadline, "read {} of {count}", read.len());
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.unwrap();
            let partition = TopicPartition::new(message.topic(), message.partition());
            let payload = message.payload().unwrap_or_default().to_vec();
            read.push((partition, message.offset(), payload));
        }
    }
    read
}

/// The group's committed offset of `source/0`.
fn committed(consumer: &BaseConsumer, source: &str) -> Offset {
    let mut list = TopicPartitionList::new();
    list.add_partition(source, 0);
    let committed = consumer
        .committed_offsets(list, Duration::from_secs(10))
        .unwrap();
    committed.elements()[0].offset()
}

fn copy(
    txn: &ExactlyOnce<TopicPartition, i64>,
    sink: &str,
    read: &[(TopicPartition, i64, Vec<u8>)],
) {
    for (partition, offset, payload) in read {
        let record = BaseRecord::<(), [u8]>::to(sink).payload(payload);
        txn.send(partition.clone(), *offset, record).unwrap();
    }
}

#[test]
#[ignore = "needs a broker: KAFKA_E2E_BROKERS"]
fn the_groups_offsets_move_only_when_the_transaction_commits() {
    for overlapping in [false, true] {
        let (source, sink) = topics(10);
        let group = unique("txn-group");
        let consumer = consumer(&group, &source);
        let txn = ExactlyOnce::builder(&config(), &unique("txn-copy"))
            .overlapping(overlapping)
            .build()
            .unwrap();
        copy(&txn, &sink, &read(&consumer, 6));
        assert_eq!(
            committed(&consumer, &source),
            Offset::Invalid,
            "nothing yet"
        );
        let metadata = consumer.group_metadata().unwrap();
        let Outcome::Committed(offsets) = txn.commit_to_group(&metadata).unwrap() else {
            panic!("rewound")
        };
        assert_eq!(
            offsets,
            HashMap::from([(TopicPartition::new(&source, 0), 5)])
        );
        assert_eq!(committed(&consumer, &source), Offset::Offset(6));
        copy(&txn, &sink, &read(&consumer, 4));
        let metadata = consumer.group_metadata().unwrap();
        assert!(matches!(
            txn.commit_to_group(&metadata),
            Ok(Outcome::Committed(_))
        ));
        assert_eq!(committed(&consumer, &source), Offset::Offset(10));
    }
}

#[test]
#[ignore = "needs a broker: KAFKA_E2E_BROKERS"]
fn a_restart_with_the_same_id_fences_the_zombie() {
    let (source, sink) = topics(4);
    let group = unique("txn-group");
    let consumer = consumer(&group, &source);
    let id = unique("txn-copy");
    let zombie = ExactlyOnce::builder(&config(), &id)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let read = read(&consumer, 4);
    copy(&zombie, &sink, &read[..2]);
    // The restart: its init_transactions fences the zombie and aborts its
    // open transaction.
    let successor = ExactlyOnce::builder(&config(), &id).build().unwrap();
    let metadata = consumer.group_metadata().unwrap();
    // On tansu: an abortable error, then an abort that gets no answer
    // (`TimedOut` after the zombie's 5 s).
    let result = zombie.commit_to_group(&metadata);
    assert!(
        matches!(
            result,
            Err(TxnError::Fatal { .. } | TxnError::TimedOut { .. }) | Ok(Outcome::Rewound(_))
        ),
        "the zombie must not commit: {result:?}"
    );
    assert_eq!(committed(&consumer, &source), Offset::Invalid);
    copy(&successor, &sink, &read);
    let metadata = consumer.group_metadata().unwrap();
    assert!(matches!(
        successor.commit_to_group(&metadata),
        Ok(Outcome::Committed(_))
    ));
    assert_eq!(committed(&consumer, &source), Offset::Offset(4));
}

#[test]
#[ignore = "needs a broker: KAFKA_E2E_BROKERS"]
fn offsets_committed_to_a_topic_are_what_the_offset_store_loads() {
    use inflight::store::OffsetStore;
    use inflight_rdkafka::KafkaOffsetStore;
    let (_, sink) = topics(0);
    let offsets = unique("txn-offsets");
    // Creates the offsets topic, compacted.
    let mut store: KafkaOffsetStore<String, u64> =
        KafkaOffsetStore::open(&config(), &offsets, "orders").unwrap();
    let txn: ExactlyOnce<String, u64> = ExactlyOnce::builder(&config(), &unique("txn-files"))
        .build()
        .unwrap();
    for (file, offset) in [("a.csv", 10), ("b.csv", 4), ("a.csv", 11)] {
        let record = BaseRecord::<(), str>::to(&sink).payload("row");
        txn.send(file.to_owned(), offset, record).unwrap();
    }
    let Outcome::Committed(committed) = txn.commit_to_topic(&offsets, "orders").unwrap() else {
        panic!("rewound")
    };
    let expected = HashMap::from([("a.csv".to_owned(), 11), ("b.csv".to_owned(), 4)]);
    assert_eq!(committed, expected);
    assert_eq!(store.load().unwrap(), expected);
}
