//! What the transactional flush's mock-cluster tests share
//! (`transaction_mock.rs`, `transaction_threads.rs`): the cluster, a
//! pipeline, and a simulated source driven through commits.
#![allow(dead_code)] // each test file uses some of these

use inflight_rdkafka::transaction::{transactional_id, ExactlyOnce, Outcome, TxnError};
use inflight_rdkafka::TopicPartition;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext};
use std::time::Duration;

pub type Cluster = MockCluster<'static, DefaultProducerContext>;

pub fn cluster() -> Cluster {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink", 2, 1).unwrap();
    cluster.create_topic("offsets", 1, 1).unwrap();
    cluster.create_topic("source", 2, 1).unwrap();
    cluster
}

pub fn config(cluster: &Cluster) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", cluster.bootstrap_servers());
    config
}

/// The group metadata a consume → transform → produce worker passes.
pub fn group(cluster: &Cluster) -> ConsumerGroupMetadata {
    let consumer: BaseConsumer = config(cluster)
        .set("group.id", "group")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.group_metadata().unwrap()
}

pub fn pipeline(cluster: &Cluster, overlapping: bool) -> ExactlyOnce<TopicPartition, i64> {
    ExactlyOnce::builder(&config(cluster), &transactional_id("copy", 0))
        .overlapping(overlapping)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub fn source() -> TopicPartition {
    TopicPartition::new("source", 0)
}

/// Sends source offsets `from..to` into the open transaction.
pub fn send_range(txn: &ExactlyOnce<TopicPartition, i64>, from: i64, to: i64) {
    for offset in from..to {
        let payload = offset.to_string();
        let record = BaseRecord::<(), str>::to("sink").payload(&payload);
        txn.send(source(), offset, record).unwrap();
    }
}

/// What the source saw: each commit's range, and the rewinds.
#[derive(Default, Debug)]
pub struct Run {
    /// The source position: the next offset to read.
    pub position: i64,
    /// Every offset committed, in commit order.
    pub committed: Vec<i64>,
    pub rewinds: usize,
}

impl Run {
    /// One round: read `batch` records, commit; on a rewind seek back.
    pub fn round(
        &mut self,
        txn: &ExactlyOnce<TopicPartition, i64>,
        batch: i64,
        commit: impl FnOnce() -> Result<Outcome<TopicPartition, i64>, TxnError>,
    ) -> Result<(), TxnError> {
        let start = self.committed.last().map_or(0, |last| last + 1);
        send_range(txn, self.position, self.position + batch);
        self.position += batch;
        let outcome = commit()?;
        match outcome {
            Outcome::Committed(offsets) => {
                if let Some(&done) = offsets.get(&source()) {
                    self.committed.extend(start..=done);
                    assert_eq!(done, self.position - 1, "the whole batch is covered");
                }
            }
            Outcome::Rewound(rewind) => {
                self.rewinds += 1;
                assert_eq!(rewind.partitions(), [source()], "every partition revoked");
                let back = rewind.committed().get(&source()).map_or(0, |done| done + 1);
                assert_eq!(back, start, "sought back to the committed offset");
                self.position = back;
                assert!(matches!(
                    txn.send(
                        source(),
                        back,
                        BaseRecord::<(), str>::to("sink").payload("x")
                    ),
                    Err(TxnError::Rewinding)
                ));
                let pending = txn.pending_rewind().expect("pending until resumed");
                assert_eq!(pending.partitions(), rewind.partitions());
                txn.resume().unwrap();
                assert!(txn.pending_rewind().is_none());
            }
        }
        Ok(())
    }

    /// Every offset below `end` committed once, in order.
    pub fn assert_exactly_once(&self, end: i64) {
        assert_eq!(self.committed, (0..end).collect::<Vec<_>>());
    }
}

/// Waits (a poll loop, with a deadline that only reports a hang) until
/// `txn` has sealed `sealed` transactions.
pub fn until_sealed(txn: &ExactlyOnce<TopicPartition, i64>, sealed: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while txn.stats().sealed < sealed {
        assert!(std::time::Instant::now() < deadline, "no seal");
        std::thread::yield_now();
    }
}
