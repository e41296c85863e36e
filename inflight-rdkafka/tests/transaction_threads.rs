//! The transactional flush across threads, on librdkafka's mock cluster:
//! with `overlapping`, sends go into the next transaction while the sealed
//! one waits and commits, and a rewind aborts both; with one producer a
//! send waits for the commit; a reader and a committer on two threads
//! commit every record once.

mod transaction_common;

use inflight_rdkafka::transaction::{Outcome, TxnError};
use rdkafka::producer::BaseRecord;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use std::collections::HashMap;
use std::time::Duration;
use transaction_common::*;

#[test]
fn overlapping_sends_go_into_the_next_transaction_while_the_sealed_one_waits() {
    let cluster = cluster();
    let txn = pipeline(&cluster, true);
    let group = group(&cluster);
    let p0 = source();
    let send = |offset: i64| send_range(&txn, offset, offset + 1);
    send(0);
    assert!(matches!(
        txn.commit_to_group(&group),
        Ok(Outcome::Committed(_))
    ));
    // Record 1 cannot be delivered while the broker is down: the commit
    // that seals it waits.
    cluster.broker_down(1).unwrap();
    send(1);
    std::thread::scope(|s| {
        let commit = s.spawn(|| txn.commit_to_group(&group));
        until_sealed(&txn, 2);
        // Into the next transaction, at once.
        send(2);
        assert!(!commit.is_finished(), "the sealed transaction still waits");
        cluster.broker_up(1).unwrap();
        let Outcome::Committed(offsets) = commit.join().unwrap().unwrap() else {
            panic!("rewound")
        };
        assert_eq!(
            offsets,
            HashMap::from([(p0.clone(), 1)]),
            "record 2 is not in it"
        );
    });
    let Outcome::Committed(offsets) = txn.commit_to_group(&group).unwrap() else {
        panic!("rewound")
    };
    assert_eq!(offsets, HashMap::from([(p0.clone(), 2)]));
    assert_eq!(txn.transactional_ids(), ["copy-0-a", "copy-0-b"]);
}

#[test]
fn without_overlapping_a_send_waits_for_the_commit() {
    let cluster = cluster();
    let txn = pipeline(&cluster, false);
    let group = group(&cluster);
    let p0 = source();
    let send = |offset: i64| send_range(&txn, offset, offset + 1);
    send(0);
    assert!(matches!(
        txn.commit_to_group(&group),
        Ok(Outcome::Committed(_))
    ));
    cluster.broker_down(1).unwrap();
    send(1);
    std::thread::scope(|s| {
        let commit = s.spawn(|| txn.commit_to_group(&group));
        until_sealed(&txn, 2);
        let sent = s.spawn(|| send(2));
        assert!(!commit.is_finished());
        cluster.broker_up(1).unwrap();
        let Outcome::Committed(offsets) = commit.join().unwrap().unwrap() else {
            panic!("rewound")
        };
        assert_eq!(offsets, HashMap::from([(p0.clone(), 1)]));
        sent.join().unwrap();
    });
    let Outcome::Committed(offsets) = txn.commit_to_group(&group).unwrap() else {
        panic!("rewound")
    };
    assert_eq!(offsets, HashMap::from([(p0.clone(), 2)]));
    assert_eq!(txn.transactional_ids(), ["copy-0"]);
}

#[test]
fn overlapping_a_rewind_aborts_the_next_transaction_too() {
    let cluster = cluster();
    let txn = pipeline(&cluster, true);
    let group = group(&cluster);
    let p0 = source();
    let send = |offset: i64| send_range(&txn, offset, offset + 1);
    send(0);
    assert!(matches!(
        txn.commit_to_group(&group),
        Ok(Outcome::Committed(_))
    ));
    cluster.broker_down(1).unwrap();
    send(1);
    cluster.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID],
    );
    std::thread::scope(|s| {
        let commit = s.spawn(|| txn.commit_to_group(&group));
        until_sealed(&txn, 2);
        // Record 2 goes into the next transaction, read after record 1:
        // when 1's transaction aborts, 2's must too.
        send(2);
        cluster.broker_up(1).unwrap();
        let Outcome::Rewound(rewind) = commit.join().unwrap().unwrap() else {
            panic!("committed")
        };
        assert_eq!(rewind.committed(), &HashMap::from([(p0.clone(), 0)]));
    });
    assert_eq!(txn.in_flight(), 0, "record 2 revoked or delivered");
    txn.resume().unwrap();
    send(1);
    send(2);
    let Outcome::Committed(offsets) = txn.commit_to_group(&group).unwrap() else {
        panic!("rewound")
    };
    assert_eq!(offsets, HashMap::from([(p0.clone(), 2)]));
    assert_eq!(txn.stats().rewound, 1);
}

/// A reading thread sends without pause (seeking back itself at each
/// rewind, through `pending_rewind`) while this thread commits, with
/// errors injected now and then: every offset is committed once, in
/// order, with one producer and with two.
#[test]
fn a_reader_and_a_committer_on_two_threads_commit_every_record_once() {
    const END: i64 = 3_000;
    for overlapping in [false, true] {
        let cluster = cluster();
        let txn = pipeline(&cluster, overlapping);
        let group = group(&cluster);
        let done = std::sync::atomic::AtomicBool::new(false);
        let mut committed: Vec<i64> = Vec::new();
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut position = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Some(rewind) = txn.pending_rewind() {
                        // The seek.
                        position = rewind.committed().get(&source()).map_or(0, |d| d + 1);
                        txn.resume().unwrap();
                    }
                    if position == END {
                        std::thread::yield_now();
                        continue;
                    }
                    let record = BaseRecord::<(), str>::to("sink").payload("v");
                    match txn.send(source(), position, record) {
                        // Refused (the transaction failed): the next
                        // commit rewinds; read on.
                        Ok(()) | Err(TxnError::Refused(_)) => position += 1,
                        Err(TxnError::Rewinding) => {}
                        Err(error) => panic!("{error}"),
                    }
                }
            });
            // Stops the reader however this thread leaves the scope.
            struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let _stop = Stop(&done);
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            let mut commits = 0;
            while committed.len() < END as usize {
                if std::time::Instant::now() >= deadline {
                    panic!(
                        "{} committed, {:?}, overlapping {overlapping}",
                        committed.len(),
                        txn.stats()
                    );
                }
                commits += 1;
                // A few errors in all: each waits in the mock for the next
                // request of its kind (an empty commit sends none).
                match commits {
                    1 | 3 | 7 => cluster.request_errors(
                        RDKafkaApiKey::EndTxn,
                        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID],
                    ),
                    2 => cluster.request_errors(
                        RDKafkaApiKey::Produce,
                        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
                    ),
                    _ => {}
                }
                match txn.commit_to_group(&group) {
                    Ok(Outcome::Committed(offsets)) => {
                        if let Some(&last) = offsets.get(&source()) {
                            let start = committed.last().map_or(0, |l| l + 1);
                            assert!(last >= start, "{last} committed again");
                            committed.extend(start..=last);
                        }
                    }
                    Ok(Outcome::Rewound(_)) | Err(TxnError::Rewinding) => {}
                    Err(error) => panic!("{error}"),
                }
            }
            drop(_stop);
            reader.join().unwrap();
        });
        assert_eq!(committed, (0..END).collect::<Vec<_>>());
        assert!(txn.stats().rewound >= 1, "{:?}", txn.stats());
    }
}
