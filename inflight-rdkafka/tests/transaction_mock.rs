//! The transactional flush ([`ExactlyOnce`]) against librdkafka's mock
//! cluster, which accepts every transactional request and implements none
//! of the semantics, but injects errors (`MockCluster::request_errors`):
//! the API flow and what each error class does. Each test drives a
//! simulated source (offsets 0.. of `source/0`) to its end through
//! commits, seeking back on each rewind, and checks that every source
//! offset was committed exactly once, in order.

mod transaction_common;

use inflight::store::OffsetStore;
use inflight_rdkafka::transaction::{transactional_id, ExactlyOnce, Outcome, TxnError};
use inflight_rdkafka::{KafkaOffsetStore, TopicPartition};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use std::collections::HashMap;
use std::time::Duration;
use transaction_common::*;

#[test]
fn commits_to_the_group_cover_every_record_once() {
    let cluster = cluster();
    let txn = pipeline(&cluster, false);
    let group = group(&cluster);
    let mut run = Run::default();
    for _ in 0..3 {
        run.round(&txn, 5, || txn.commit_to_group(&group)).unwrap();
    }
    run.assert_exactly_once(15);
    assert_eq!(run.rewinds, 0);
    // Nothing sent: an empty commit.
    assert!(matches!(txn.commit_to_group(&group), Ok(Outcome::Committed(o)) if o.is_empty()));
    let stats = txn.stats();
    assert_eq!((stats.committed, stats.rewound), (4, 0));
    assert_eq!(txn.in_flight(), 0);
}

#[test]
fn commits_to_an_offsets_topic_are_what_the_offset_store_loads() {
    let cluster = cluster();
    let txn: ExactlyOnce<String, u64> =
        ExactlyOnce::builder(&config(&cluster), &transactional_id("files", "orders"))
            .build()
            .unwrap();
    for (file, offset) in [("a.csv", 10), ("b.csv", 4), ("a.csv", 11)] {
        let record = BaseRecord::<(), str>::to("sink").payload("row");
        txn.send(file.to_owned(), offset, record).unwrap();
    }
    let Outcome::Committed(offsets) = txn.commit_to_topic("offsets", "orders").unwrap() else {
        panic!("rewound")
    };
    assert_eq!(
        offsets,
        HashMap::from([("a.csv".into(), 11), ("b.csv".into(), 4)])
    );
    let mut store: KafkaOffsetStore<String, u64> =
        KafkaOffsetStore::builder(&config(&cluster), "offsets", "orders")
            .check_topic(false)
            .open()
            .unwrap();
    assert_eq!(store.load().unwrap(), offsets);
}

/// The source's end in the scenarios: three batches of five.
const END: i64 = 15;

/// A scenario: one clean commit, then `errors` injected on `api`, then
/// rounds until the source's end is committed (or an error stops it).
fn scenario(
    api: RDKafkaApiKey,
    errors: &[RDKafkaRespErr],
    overlapping: bool,
) -> (Run, Result<(), TxnError>, ExactlyOnce<TopicPartition, i64>) {
    let cluster = cluster();
    let txn = pipeline(&cluster, overlapping);
    let group = group(&cluster);
    let mut run = Run::default();
    run.round(&txn, 5, || txn.commit_to_group(&group)).unwrap();
    cluster.request_errors(api, errors);
    let mut result = Ok(());
    let mut rewinds = 0;
    for _ in 0..20 {
        if run.committed.len() as i64 >= END {
            break;
        }
        // Right after a rewind, a short batch: a merge with the aborted
        // transaction's acks would commit past it.
        let rest = (END - run.position).max(0);
        let batch = if run.rewinds > rewinds {
            rest.min(2)
        } else {
            rest
        };
        rewinds = run.rewinds;
        if let Err(error) = run.round(&txn, batch, || txn.commit_to_group(&group)) {
            result = Err(error);
            break;
        }
    }
    (run, result, txn)
}

/// The scenario ran to the end, every offset committed once, after at
/// least one rewind.
fn assert_rewound_then_exactly_once(api: RDKafkaApiKey, error: RDKafkaRespErr) {
    for overlapping in [false, true] {
        let (run, result, txn) = scenario(api, &[error], overlapping);
        result.unwrap();
        run.assert_exactly_once(END);
        assert!(run.rewinds >= 1, "{api:?} {error:?}: rewound");
        assert_eq!(txn.stats().rewound as usize, run.rewinds);
    }
}

/// The scenario ran to the end without a rewind: the retriable errors
/// were retried (by librdkafka, or by the pipeline).
fn assert_retried_then_exactly_once(api: RDKafkaApiKey, errors: &[RDKafkaRespErr]) {
    let (run, result, _) = scenario(api, errors, false);
    result.unwrap();
    run.assert_exactly_once(END);
    assert_eq!(run.rewinds, 0, "{api:?}: retried, not rewound");
}

/// The scenario stopped at the injection with a fatal error: nothing
/// after the clean commit was committed, and the pipeline refuses
/// everything after.
fn assert_fatal(api: RDKafkaApiKey, error: RDKafkaRespErr) {
    let (run, result, txn) = scenario(api, &[error], false);
    assert!(
        matches!(result, Err(TxnError::Fatal { .. })),
        "{api:?} {error:?}: {result:?}"
    );
    run.assert_exactly_once(5);
    let record = BaseRecord::<(), str>::to("sink").payload("x");
    assert!(matches!(
        txn.send(source(), 99, record),
        Err(TxnError::Stopped)
    ));
    assert!(matches!(txn.resume(), Err(TxnError::Stopped)));
}

use RDKafkaApiKey as Api;
use RDKafkaRespErr as E;

#[test]
fn a_record_not_delivered_rewinds_and_the_redo_commits_once() {
    assert_rewound_then_exactly_once(Api::Produce, E::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
}

#[test]
fn abortable_errors_at_send_offsets_rewind() {
    assert_rewound_then_exactly_once(
        Api::AddOffsetsToTxn,
        E::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED,
    );
    assert_rewound_then_exactly_once(
        Api::TxnOffsetCommit,
        E::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED,
    );
    // A consumer that lost its partitions to a rebalance (KIP-447).
    assert_rewound_then_exactly_once(
        Api::TxnOffsetCommit,
        E::RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION,
    );
}

#[test]
fn an_abortable_error_at_commit_rewinds() {
    assert_rewound_then_exactly_once(Api::EndTxn, E::RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID);
}

#[test]
fn retriable_errors_are_retried_at_every_step() {
    let busy = [E::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 3];
    assert_retried_then_exactly_once(Api::AddOffsetsToTxn, &busy);
    assert_retried_then_exactly_once(Api::TxnOffsetCommit, &busy);
    assert_retried_then_exactly_once(Api::EndTxn, &busy);
}

#[test]
fn a_retriable_error_past_the_timeout_stops() {
    let cluster = cluster();
    let txn = ExactlyOnce::builder(&config(&cluster), &transactional_id("copy", 0))
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let group = group(&cluster);
    let mut run = Run::default();
    run.round(&txn, 5, || txn.commit_to_group(&group)).unwrap();
    // Far more errors than retries fit in two seconds (each librdkafka
    // retry backs off 100 ms): a slower machine only consumes fewer.
    cluster.request_errors(
        Api::EndTxn,
        &[E::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 2000],
    );
    let result = run.round(&txn, 5, || txn.commit_to_group(&group));
    assert!(
        matches!(
            result,
            Err(TxnError::TimedOut {
                doing: "commit_transaction",
                ..
            })
        ),
        "{result:?}"
    );
    cluster.clear_request_errors(Api::EndTxn);
    run.assert_exactly_once(5);
    assert!(matches!(
        txn.commit_to_group(&group),
        Err(TxnError::Stopped)
    ));
}

#[test]
fn fatal_errors_stop_at_every_step() {
    assert_fatal(Api::AddOffsetsToTxn, E::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE);
    assert_fatal(
        Api::TxnOffsetCommit,
        E::RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH,
    );
    // Fenced: another instance initialised the same transactional id.
    assert_fatal(Api::EndTxn, E::RD_KAFKA_RESP_ERR_PRODUCER_FENCED);
}

#[test]
fn init_transactions_retries_a_busy_coordinator_and_stops_when_refused() {
    let cluster = cluster();
    cluster.request_errors(
        Api::InitProducerId,
        &[E::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 3],
    );
    let txn = pipeline(&cluster, false);
    let group = group(&cluster);
    let mut run = Run::default();
    run.round(&txn, 5, || txn.commit_to_group(&group)).unwrap();
    run.assert_exactly_once(5);
    let cluster = self::cluster();
    cluster.request_errors(
        Api::InitProducerId,
        &[E::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED],
    );
    let refused = ExactlyOnce::<TopicPartition, i64>::builder(&config(&cluster), "copy-0").build();
    assert!(
        matches!(
            refused,
            Err(TxnError::Fatal {
                doing: "init_transactions",
                ..
            })
        ),
        "{refused:?}"
    );
}

#[test]
fn a_rewind_is_not_a_merge_a_partition_not_redone_is_not_committed() {
    let cluster = cluster();
    for overlapping in [false, true] {
        let txn = pipeline(&cluster, overlapping);
        let group = group(&cluster);
        let (p0, p1) = (source(), TopicPartition::new("source", 1));
        let send = |partition: &TopicPartition, offset: i64| {
            let record = BaseRecord::<(), str>::to("sink").payload("v");
            txn.send(partition.clone(), offset, record).unwrap();
        };
        send(&p0, 0);
        send(&p1, 0);
        let Outcome::Committed(first) = txn.commit_to_group(&group).unwrap() else {
            panic!("rewound")
        };
        assert_eq!(first, HashMap::from([(p0.clone(), 0), (p1.clone(), 0)]));
        // Both partitions' next records are delivered, then the commit
        // fails: an abort.
        send(&p0, 1);
        send(&p1, 1);
        cluster.request_errors(
            RDKafkaApiKey::EndTxn,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID],
        );
        let Outcome::Rewound(rewind) = txn.commit_to_group(&group).unwrap() else {
            panic!("committed")
        };
        let mut partitions = rewind.partitions().to_vec();
        partitions.sort();
        assert_eq!(partitions, [p0.clone(), p1.clone()]);
        assert_eq!(
            rewind.committed(),
            &first,
            "seek back to what was committed"
        );
        txn.resume().unwrap();
        // Only p0 is read again before the next commit: p1's aborted
        // offset must not come back with it.
        send(&p0, 1);
        let Outcome::Committed(next) = txn.commit_to_group(&group).unwrap() else {
            panic!("rewound")
        };
        assert_eq!(next, HashMap::from([(p0.clone(), 1)]));
    }
}

#[test]
fn a_record_the_tracker_refuses_makes_the_next_commit_rewind() {
    let cluster = cluster();
    let mut config = config(&cluster);
    config.set("reconnect.backoff.max.ms", "100");
    // The timeout is how long the refused send waits for room.
    let txn = ExactlyOnce::builder(&config, &transactional_id("copy", 0))
        .capacity(1)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let group = group(&cluster);
    let p0 = source();
    // Record 0 stays in flight while the broker is down: the tracker has
    // no room for record 1.
    cluster.broker_down(1).unwrap();
    let record = || BaseRecord::<(), str>::to("sink").payload("v");
    txn.send(p0.clone(), 0, record()).unwrap();
    assert!(matches!(
        txn.send(p0.clone(), 1, record()),
        Err(TxnError::Tracker(_))
    ));
    cluster.broker_up(1).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while txn.in_flight() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "record 0 not delivered"
        );
        std::thread::yield_now();
    }
    // Record 0 is delivered, but record 1 was never sent: nothing may
    // commit past it.
    let Outcome::Rewound(rewind) = txn.commit_to_group(&group).unwrap() else {
        panic!("committed past a dropped record")
    };
    assert_eq!(rewind.partitions(), [p0]);
    assert!(rewind.committed().is_empty());
}

#[test]
fn an_offsets_record_not_delivered_rewinds_and_the_store_loads_the_redo() {
    let cluster = cluster();
    let txn: ExactlyOnce<String, u64> =
        ExactlyOnce::builder(&config(&cluster), &transactional_id("files", "orders"))
            .build()
            .unwrap();
    let send = |offset: u64| {
        let record = BaseRecord::<(), str>::to("sink").payload("row");
        txn.send("a.csv".to_owned(), offset, record).unwrap();
    };
    send(1);
    assert!(matches!(
        txn.commit_to_topic("offsets", "orders"),
        Ok(Outcome::Committed(_))
    ));
    send(2);
    // Record 2 is delivered; the next produce request is the offsets
    // record's, and it fails for good.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while txn.in_flight() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "record 2 not delivered"
        );
        std::thread::yield_now();
    }
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let Outcome::Rewound(rewind) = txn.commit_to_topic("offsets", "orders").unwrap() else {
        panic!("committed")
    };
    assert!(
        rewind.cause().contains("offsets record"),
        "{}",
        rewind.cause()
    );
    assert_eq!(
        rewind.committed(),
        &HashMap::from([("a.csv".to_owned(), 1)])
    );
    txn.resume().unwrap();
    // The redo: records 2 and 3, possibly a second rewind (see
    // IMPLEMENTATION.md), until a commit.
    let mut committed = None;
    for _ in 0..5 {
        send(2);
        send(3);
        match txn.commit_to_topic("offsets", "orders").unwrap() {
            Outcome::Committed(offsets) => {
                committed = Some(offsets);
                break;
            }
            Outcome::Rewound(_) => txn.resume().unwrap(),
        }
    }
    assert_eq!(committed, Some(HashMap::from([("a.csv".to_owned(), 3)])));
    let mut store: KafkaOffsetStore<String, u64> =
        KafkaOffsetStore::builder(&config(&cluster), "offsets", "orders")
            .check_topic(false)
            .open()
            .unwrap();
    assert_eq!(
        store.load().unwrap(),
        HashMap::from([("a.csv".to_owned(), 3)])
    );
}

/// A source partition whose `Serialize` panics while `PANICS` is set.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Touchy(u32);

static PANICS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl serde::Serialize for Touchy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        assert!(
            !PANICS.load(std::sync::atomic::Ordering::Relaxed),
            "the user's Serialize panics"
        );
        serializer.serialize_u32(self.0)
    }
}

#[test]
fn a_panic_of_user_code_in_a_commit_stops_the_pipeline() {
    let cluster = cluster();
    let txn: ExactlyOnce<Touchy, u64> =
        ExactlyOnce::builder(&config(&cluster), &transactional_id("touchy", 0))
            .overlapping(true)
            .build()
            .unwrap();
    let record = || BaseRecord::<(), str>::to("sink").payload("row");
    txn.send(Touchy(1), 7, record()).unwrap();
    PANICS.store(true, std::sync::atomic::Ordering::Relaxed);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        txn.commit_to_topic("offsets", "touchy")
    }));
    PANICS.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(panicked.is_err());
    // The sealed transaction is half done: nothing goes on.
    assert!(matches!(
        txn.send(Touchy(1), 8, record()),
        Err(TxnError::Stopped)
    ));
    assert!(matches!(
        txn.commit_to_topic("offsets", "touchy"),
        Err(TxnError::Stopped)
    ));
    assert!(matches!(txn.resume(), Err(TxnError::Stopped)));
    assert!(txn.pending_rewind().is_none());
}

#[test]
fn rewind_seek_moves_the_consumer_back_to_the_committed_offsets() {
    use rdkafka::producer::{Producer, ThreadedProducer};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    use rdkafka::Message;
    let cluster = cluster();
    let filler: ThreadedProducer<DefaultProducerContext> = config(&cluster).create().unwrap();
    for partition in [0, 1] {
        for i in 0..10 {
            let payload = i.to_string();
            let record = BaseRecord::<(), str>::to("source")
                .partition(partition)
                .payload(&payload);
            filler.send(record).map_err(|(e, _)| e).unwrap();
        }
    }
    filler.flush(Duration::from_secs(30)).unwrap();
    let consumer: BaseConsumer = config(&cluster)
        .set("group.id", "group")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for partition in [0, 1] {
        assignment
            .add_partition_offset("source", partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let next = |count: usize| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut read = Vec::new();
        while read.len() < count {
            assert!(std::time::Instant::now() < deadline, "nothing to read");
            if let Some(message) = consumer.poll(Duration::from_millis(100)) {
                let message = message.unwrap();
                read.push((message.partition(), message.offset()));
            }
        }
        read
    };
    let txn = pipeline(&cluster, false);
    let group = consumer.group_metadata().unwrap();
    let send = |(partition, offset): (i32, i64)| {
        let record = BaseRecord::<(), str>::to("sink").payload("v");
        let source = TopicPartition::new("source", partition);
        txn.send(source, offset, record).unwrap();
    };
    // Partition 0 up to 4 is committed; partition 1 never is.
    let mut read = next(20);
    read.sort();
    read.iter()
        .filter(|(p, o)| *p == 0 && *o < 5)
        .for_each(|&r| send(r));
    assert!(matches!(
        txn.commit_to_group(&group),
        Ok(Outcome::Committed(_))
    ));
    read.iter()
        .filter(|(p, o)| *p == 1 || *o >= 5)
        .for_each(|&r| send(r));
    cluster.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID],
    );
    let Outcome::Rewound(rewind) = txn.commit_to_group(&group).unwrap() else {
        panic!("committed")
    };
    rewind.seek(&consumer, Duration::from_secs(10)).unwrap();
    txn.resume().unwrap();
    // Read again: partition 0 from 5 (after what was committed), partition
    // 1 from its beginning (the group has no offset for it).
    let mut again = next(15);
    again.sort();
    let expected: Vec<_> = (5..10)
        .map(|o| (0, o))
        .chain((0..10).map(|o| (1, o)))
        .collect();
    assert_eq!(again, expected);
}

#[test]
fn close_aborts_the_open_transaction() {
    let cluster = cluster();
    for overlapping in [false, true] {
        let txn = pipeline(&cluster, overlapping);
        let group = group(&cluster);
        send_range(&txn, 0, 3);
        assert!(matches!(
            txn.commit_to_group(&group),
            Ok(Outcome::Committed(_))
        ));
        send_range(&txn, 3, 5);
        txn.close().unwrap();
    }
    // After a rewind there is no open transaction: nothing to abort.
    let txn = pipeline(&cluster, false);
    let group = group(&cluster);
    send_range(&txn, 0, 3);
    cluster.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID],
    );
    assert!(matches!(
        txn.commit_to_group(&group),
        Ok(Outcome::Rewound(_))
    ));
    txn.close().unwrap();
}
