//! The glue with tokio's `StreamConsumer` (issue 39, items 1 and 2), on
//! librdkafka's mock cluster: an async pipeline (`member.rs`, as
//! `examples/async_pipeline.rs`) whose members join and leave the group
//! while records flow loses no record and produces none twice; and after
//! a hand-off that released records still in flight (their workers held
//! past the drain bound), the old owner produces none of them, the new
//! owner produces each once, and the hand-off says how many it released.
//!
//! Every wait is on a condition, with a deadline that only reports a hang.

#[path = "stream/member.rs"]
mod member;

use member::{Member, Setup};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::Message;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

type Cluster = MockCluster<'static, DefaultProducerContext>;

/// A cluster with `source` (`partitions` partitions) and `sink` (one).
fn cluster(partitions: i32) -> Cluster {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("source", partitions, 1).unwrap();
    cluster.create_topic("sink", 1, 1).unwrap();
    cluster.create_topic("progress-store", 1, 1).unwrap();
    cluster
}

/// Produces `each` records to every partition of `source`.
fn fill(cluster: &Cluster, partitions: i32, each: usize) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .create()
        .unwrap();
    for partition in 0..partitions {
        for _ in 0..each {
            producer
                .send(
                    BaseRecord::<(), str>::to("source")
                        .partition(partition)
                        .payload("x"),
                )
                .map_err(|(e, _)| e)
                .unwrap();
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Waits (polling, 120 s at most: a request librdkafka retries times out
/// in 60) until `done` holds; a hang reports `what` and the members.
#[track_caller]
fn wait_for(what: &str, members: &[&Member], mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        if Instant::now() >= deadline {
            let states: Vec<_> = members.iter().map(|m| m.state()).collect();
            panic!("{what}: not in 120 s; members: {states:#?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A consumer of `group` that joins no group (it reads the sink).
fn reader(cluster: &Cluster, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap()
}

/// Whether every record of `source` (`partitions` × `each`) was
/// produced, by `members` or as `earlier` says.
fn covered(members: &[&Member], earlier: &[(i32, i64)], partitions: i32, each: i64) -> bool {
    let mut seen: HashSet<(i32, i64)> = earlier.iter().copied().collect();
    for member in members {
        seen.extend(member.log.lock().unwrap().produced.iter().copied());
    }
    (0..partitions).all(|p| (0..each).all(|o| seen.contains(&(p, o))))
}

/// How many times each source record (`partition/offset`) is in `sink`.
fn sink(cluster: &Cluster) -> HashMap<String, usize> {
    let reader = reader(cluster, "sink-reader");
    let (_, high) = reader
        .fetch_watermarks("sink", 0, Duration::from_secs(10))
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset("sink", 0, Offset::Beginning)
        .unwrap();
    reader.assign(&list).unwrap();
    let mut seen = HashMap::new();
    let mut read = 0;
    wait_for("the sink read", &[], || {
        if let Some(message) = reader.poll(Duration::from_millis(20)) {
            let message = message.unwrap();
            let key = String::from_utf8(message.key().unwrap().to_vec()).unwrap();
            *seen.entry(key).or_insert(0) += 1;
            read = message.offset() + 1;
        }
        read >= high
    });
    seen
}

/// Each record of `source` (`partitions` × `each`) in `sink` exactly once.
fn assert_exactly_once(cluster: &Cluster, partitions: i32, each: i64) {
    let seen = sink(cluster);
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "produced twice: {twice:?}");
    for partition in 0..partitions {
        for offset in 0..each {
            assert!(
                seen.contains_key(&format!("{partition}/{offset}")),
                "{partition}/{offset} lost"
            );
        }
    }
    assert_eq!(seen.len(), (i64::from(partitions) * each) as usize);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

/// Item 1: `StreamConsumer` members join and leave while records flow;
/// each clean rebalance hands off with nothing released, and every record
/// is in the sink once.
#[test]
fn stream_consumers_join_and_leave_without_losing_or_repeating_a_record() {
    let cluster = cluster(4);
    let brokers = cluster.bootstrap_servers();
    fill(&cluster, 4, 50);
    let runtime = runtime();
    let a = runtime.block_on(async { Member::start(&brokers, Duration::from_secs(60), true) });
    wait_for("a's first records", &[&a], || a.produced() > 0);
    let b = runtime.block_on(async { Member::start(&brokers, Duration::from_secs(60), true) });
    wait_for("the rebalance", &[&a, &b], || {
        !a.hand_offs().is_empty() && b.assigned() > 0
    });
    fill(&cluster, 4, 50);
    wait_for("b's first records", &[&a, &b], || b.produced() > 0);
    wait_for("100 per partition produced", &[&a, &b], || {
        covered(&[&a, &b], &[], 4, 100)
    });
    // b leaves: a takes its partitions back.
    let mut hand_offs = b.hand_offs();
    let b_log = runtime.block_on(b.stop());
    fill(&cluster, 4, 50);
    wait_for("150 per partition produced", &[&a], || {
        covered(&[&a], &b_log.produced, 4, 150)
    });
    hand_offs.extend(a.hand_offs());
    let a_log = runtime.block_on(a.stop());
    assert!(!b_log.produced.is_empty() && !a_log.produced.is_empty());
    assert!(a_log.dropped.is_empty() && b_log.dropped.is_empty());
    // Each rebalance gave partitions from one to the other: handed off
    // clean (a final commit may be refused by the mock: see `member.rs`).
    assert!(hand_offs.iter().all(|h| h.released == 0), "{hand_offs:?}");
    assert_exactly_once(&cluster, 4, 150);
}

/// Item 2 (and 3): a hand-off whose drain bound passes while its records
/// are still with the workers releases them, and says how many; the old
/// owner's workers ask `is_current` and produce none of them; the new
/// owner produces each once.
#[test]
fn records_a_hand_off_released_are_produced_by_the_new_owner_only() {
    let cluster = cluster(2);
    let brokers = cluster.bootstrap_servers();
    fill(&cluster, 2, 20);
    let runtime = runtime();
    // a's workers are held: its records stay in flight past the bound.
    let a = runtime.block_on(async { Member::start(&brokers, Duration::from_millis(200), false) });
    wait_for("a consumed all 40", &[&a], || a.tracker.in_flight() == 40);
    let b = runtime.block_on(async { Member::start(&brokers, Duration::from_secs(60), true) });
    wait_for("a's hand-off", &[&a, &b], || !a.hand_offs().is_empty());
    // As a's `post_rebalance` saw it.
    let handed = a.hand_offs()[0].clone();
    assert_eq!(handed.partitions.len(), 1, "{handed}");
    let moved = handed.partitions[0].partition;
    assert_eq!(handed.released, 20, "{handed}");
    assert_eq!(a.tracker.in_flight(), 20, "the other partition's stay");
    let errors = a.context.errors();
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with(&format!("drain of [source/{moved}]: 20 records"))),
        "{errors:?}"
    );
    wait_for("b produced the moved partition", &[&a, &b], || {
        b.produced() == 20
    });
    a.open();
    wait_for("a's workers went through", &[&a, &b], || {
        a.produced() + a.dropped() == 40
    });
    let (a_log, b_log) = runtime.block_on(async { (a.stop().await, b.stop().await) });
    let released: Vec<_> = (0..20).map(|offset| (moved, offset)).collect();
    let mut dropped = a_log.dropped.clone();
    dropped.sort_unstable();
    assert_eq!(dropped, released, "a dropped exactly the released records");
    assert!(a_log.produced.iter().all(|(p, _)| *p != moved));
    let mut produced = b_log.produced.clone();
    produced.sort_unstable();
    assert_eq!(produced, released, "b produced each released record");
    assert_exactly_once(&cluster, 2, 20);
}

/// Item 4: under eager assignment (`range`) the mock cluster refuses every
/// commit while its group is joining, the hand-off's final commit
/// included: it is made again, then reported (`last_hand_off`, which the
/// user's `post_rebalance` reads, and `errors()`), and a `TopicStore`, saved before the group commit, keeps
/// what the next owners skip: every record is in the sink once. (The
/// first member commits nothing before the rebalance, so every point is
/// in that refused final commit alone; without the store, its 200 records
/// would be redone.)
#[test]
fn a_final_commit_refused_by_an_eager_rebalance_is_reported_and_the_store_keeps_it() {
    let cluster = cluster(4);
    let brokers = cluster.bootstrap_servers();
    fill(&cluster, 4, 50);
    let runtime = runtime();
    let eager = |committing| Setup {
        drain_timeout: Duration::from_secs(60),
        open: true,
        strategy: "range",
        committing,
    };
    let a = runtime.block_on(async { Member::start_with(&brokers, eager(false)) });
    wait_for("a did all 200", &[&a], || {
        a.produced() == 200 && a.tracker.in_flight() == 0
    });
    let b = runtime.block_on(async { Member::start_with(&brokers, eager(true)) });
    wait_for("the rebalance", &[&a, &b], || {
        !a.hand_offs().is_empty() && b.assigned() > 0
    });
    // The first (the mock may rebalance twice as b joins), as a's
    // `post_rebalance` saw it.
    let handed = a.hand_offs()[0].clone();
    assert_eq!(
        (handed.partitions.len(), handed.released),
        (4, 0),
        "{handed}"
    );
    assert_eq!(
        handed.final_commit,
        Some(Err(KafkaError::ConsumerCommit(
            RDKafkaErrorCode::RebalanceInProgress
        ))),
        "{handed}"
    );
    assert!(handed.commit_attempts >= 2, "made again: {handed}");
    let errors = a.context.errors();
    assert!(
        errors.iter().any(|e| e.starts_with("final commit:")
            && e.contains("RebalanceInProgress")
            && e.contains("times within the drain bound")),
        "{errors:?}"
    );
    a.commit(true);
    fill(&cluster, 4, 50);
    wait_for("b's first records", &[&a, &b], || b.produced() > 0);
    wait_for("100 per partition produced", &[&a, &b], || {
        covered(&[&a, &b], &[], 4, 100)
    });
    let b_log = runtime.block_on(b.stop());
    fill(&cluster, 4, 50);
    wait_for("150 per partition produced", &[&a], || {
        covered(&[&a], &b_log.produced, 4, 150)
    });
    let a_log = runtime.block_on(a.stop());
    assert!(a_log.dropped.is_empty() && b_log.dropped.is_empty());
    assert_exactly_once(&cluster, 4, 150);
}
