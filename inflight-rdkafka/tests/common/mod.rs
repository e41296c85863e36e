//! What the mock-cluster tests share: a user's context that records what
//! reaches it, a cluster with ten records in `source`, consumers of the
//! group "group", and poll loops that wait for a condition (with a
//! deadline that only reports a hang).

#![allow(dead_code)] // each test file uses some of these

use inflight::{Progress, Tracker};
use inflight_rdkafka::{
    HandOffContext, OnRebalance, ProgressStore, Resumable, TopicPartition, TopicStore,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientContext;
use rdkafka::Message;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A user's context: records what reaches it.
#[derive(Default)]
pub struct Recording {
    events: Mutex<Vec<String>>,
}

impl Recording {
    pub fn push(&self, event: String) {
        self.events.lock().unwrap().push(event);
    }
    pub fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }
}

impl ClientContext for Recording {}

impl ConsumerContext for Recording {
    fn commit_callback(&self, result: KafkaResult<()>, _: &TopicPartitionList) {
        self.push(format!(
            "commit {}",
            if result.is_ok() { "ok" } else { "failed" }
        ));
    }
}

pub fn kind(rebalance: &Rebalance<'_>) -> &'static str {
    match rebalance {
        Rebalance::Assign(_) => "assign",
        Rebalance::Revoke(_) => "revoke",
        Rebalance::Error(_) => "error",
    }
}

impl OnRebalance for Recording {
    fn pre_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        consumer: &K,
        rebalance: &Rebalance<'_>,
    ) {
        let in_flight = consumer.context().tracker().in_flight();
        self.push(format!("pre {} in_flight={in_flight}", kind(rebalance)));
    }

    fn post_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        consumer: &K,
        rebalance: &Rebalance<'_>,
    ) {
        let context = consumer.context();
        let partition = TopicPartition::new("source", 0);
        let done = (
            context.is_done(&partition, 3),
            context.is_done(&partition, 4),
        );
        self.push(format!("post {} done(3, 4)={done:?}", kind(rebalance)));
    }
}

pub fn cluster() -> MockCluster<'static, DefaultProducerContext> {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("source", 1, 1).unwrap();
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .create()
        .unwrap();
    for i in 0..10 {
        let payload = i.to_string();
        producer
            .send(
                BaseRecord::<(), str>::to("source")
                    .partition(0)
                    .payload(&payload),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    cluster
}

pub fn consumer<M: Resumable, C: OnRebalance>(
    cluster: &MockCluster<'static, DefaultProducerContext>,
    context: HandOffContext<M, C>,
) -> BaseConsumer<HandOffContext<M, C>> {
    consumer_with(cluster, context, "range")
}

/// A consumer of the group "group" with `strategy` as its assignor.
pub fn consumer_with<M: Resumable, C: OnRebalance>(
    cluster: &MockCluster<'static, DefaultProducerContext>,
    context: HandOffContext<M, C>,
    strategy: &str,
) -> BaseConsumer<HandOffContext<M, C>> {
    ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("group.id", "group")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", strategy)
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .create_with_context(context)
        .unwrap()
}

/// Partition 0 of `source`, from its first offset.
pub fn source_from_the_beginning() -> TopicPartitionList {
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset("source", 0, Offset::Beginning)
        .unwrap();
    assignment
}

/// Polls `consumer` until `done` holds (a deadline of 30 s), handing each
/// message to `each`.
#[track_caller]
pub fn poll_until<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>),
    mut done: impl FnMut(&BaseConsumer<C>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let caller = std::panic::Location::caller();
    while !done(consumer) {
        assert!(
            Instant::now() < deadline,
            "condition not met in 30 s at {caller}"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(20)) {
            each(&message.unwrap());
        }
    }
}

pub fn store(cluster: &MockCluster<'static, DefaultProducerContext>, group: &str) -> TopicStore {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", cluster.bootstrap_servers());
    TopicStore::new(&config, "progress-store", group, Duration::from_secs(10)).unwrap()
}

/// Polls `a` and `b` in turn until `done` holds (a deadline of 30 s).
#[track_caller]
pub fn poll_both<A: ConsumerContext, B: ConsumerContext>(
    a: &BaseConsumer<A>,
    b: &BaseConsumer<B>,
    mut done: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let caller = std::panic::Location::caller();
    while !done() {
        assert!(
            Instant::now() < deadline,
            "condition not met in 30 s at {caller}"
        );
        // Messages of `b` are not processed here; `a`'s are the test's.
        let _ = a.poll(Duration::from_millis(10));
        let _ = b.poll(Duration::from_millis(10));
    }
}

/// The errors of a hand-off in `errors` but the group commit's refusal:
/// librdkafka's mock cluster refuses every commit while a group rebalances
/// (Kafka accepts those of the current generation, as the hand-off's), so
/// the tests read the commit point the hand-off saved in its store.
pub fn but_refused_commits(errors: Vec<String>) -> Vec<String> {
    errors
        .into_iter()
        .filter(|e| !(e.starts_with("final commit:") && e.contains("RebalanceInProgress")))
        .collect()
}

/// The events of a user's context but the group commit's refusal (see
/// [`but_refused_commits`]): a failed final commit reaches the user's
/// `commit_callback` too.
pub fn but_refused_commit_events(events: Vec<String>) -> Vec<String> {
    events
        .into_iter()
        .filter(|e| e != "commit failed")
        .collect()
}

/// What `group`'s topic store holds for partition 0 of `source`.
pub fn saved(cluster: &MockCluster<'static, DefaultProducerContext>) -> Progress {
    let mut nothing = TopicPartitionList::new();
    nothing
        .add_partition_offset("source", 0, Offset::Invalid)
        .unwrap();
    store(cluster, "group")
        .load(&nothing, Duration::from_secs(10))
        .unwrap()[&TopicPartition::new("source", 0)]
        .clone()
}

/// A second member of the group, subscribed to `topic` with `strategy`,
/// on a tracker of its own: joining makes the group rebalance.
pub fn joins(
    cluster: &MockCluster<'static, DefaultProducerContext>,
    topic: &str,
    strategy: &str,
) -> BaseConsumer<HandOffContext> {
    let tracker = Arc::new(Tracker::builder().progress(4096).build());
    let member = consumer_with(
        cluster,
        HandOffContext::new(tracker, Duration::from_secs(600)),
        strategy,
    );
    member.subscribe(&[topic]).unwrap();
    member
}

/// A consumer of the group that consumed all ten records of `source`,
/// with offset 3 left in flight (the others acked), and its ticket. Its
/// hand-off is deferred; its commit points are kept in a topic store
/// (`progress-store`, made here) as well.
pub fn consumed_all_but_3<M: Resumable>(
    cluster: &MockCluster<'static, DefaultProducerContext>,
    tracker: &Arc<Tracker<TopicPartition, i64, M>>,
    drain_timeout: Duration,
    strategy: &str,
) -> (BaseConsumer<HandOffContext<M, Recording>>, inflight::Ticket) {
    cluster.create_topic("progress-store", 1, 1).unwrap();
    let context = HandOffContext::wrap(Recording::default(), tracker.clone(), drain_timeout)
        .store(store(cluster, "group"))
        .read_timeout(Duration::from_secs(10))
        .defer_hand_off();
    let a = consumer_with(cluster, context, strategy);
    a.subscribe(&["source"]).unwrap();
    let seen = std::cell::Cell::new(0);
    let mut stuck = None;
    poll_until(
        &a,
        |message| {
            let partition = TopicPartition::new(message.topic(), message.partition());
            let ticket = tracker.send(partition, message.offset()).unwrap();
            if message.partition() == 0 && message.offset() == 3 {
                stuck = Some(ticket);
            } else {
                tracker.ack(ticket).unwrap();
            }
            seen.set(seen.get() + 1);
        },
        |_| seen.get() == 10,
    );
    (a, stuck.unwrap())
}
