//! Unit tests of the transactional flush's steps: the error classes and
//! the retry of retriable errors (librdkafka's transactional errors
//! cannot be made outside it: the mock-cluster tests,
//! `tests/transaction_mock.rs`, inject those).

use super::steps::{classify, retrying, Class, Step};
use super::*;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use std::cell::Cell;

fn timed_out() -> KafkaError {
    KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)
}

#[test]
fn a_flush_timing_out_is_retriable_and_an_error_of_no_class_fatal() {
    assert_eq!(classify(&timed_out()), Class::Retriable);
    assert_eq!(classify(&KafkaError::Canceled), Class::Fatal);
    assert_eq!(
        classify(&KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)),
        Class::Fatal
    );
}

#[test]
fn a_retriable_error_is_retried_until_it_clears() {
    let calls = Cell::new(0);
    let far = Instant::now() + Duration::from_secs(3600);
    let retries = retrying("commit_transaction", far, |_| {
        calls.set(calls.get() + 1);
        if calls.get() < 3 {
            Err(timed_out())
        } else {
            Ok(())
        }
    });
    assert_eq!(retries.ok(), Some(2));
    assert_eq!(calls.get(), 3);
}

#[test]
fn a_retriable_error_past_the_deadline_stops_naming_the_call() {
    let calls = Cell::new(0);
    let past = Instant::now();
    let result = retrying("send_offsets_to_transaction", past, |left| {
        assert_eq!(left, Duration::ZERO);
        calls.set(calls.get() + 1);
        Err(timed_out())
    });
    assert_eq!(calls.get(), 1);
    match result {
        Err(Step::Stop(TxnError::TimedOut { doing, .. })) => {
            assert_eq!(doing, "send_offsets_to_transaction")
        }
        _ => panic!("not a time-out"),
    }
}

#[test]
fn a_fatal_error_stops_at_once() {
    let calls = Cell::new(0);
    let far = Instant::now() + Duration::from_secs(3600);
    let result = retrying("begin", far, |_| {
        calls.set(calls.get() + 1);
        Err(KafkaError::Canceled)
    });
    assert_eq!(calls.get(), 1);
    let error = match result {
        Err(Step::Stop(error)) => error,
        _ => panic!("not stopped"),
    };
    assert!(matches!(error, TxnError::Fatal { doing: "begin", .. }));
    assert!(error.to_string().contains("start a new one"), "{error}");
}

#[test]
fn the_transactional_id_is_the_prefix_and_the_task() {
    assert_eq!(transactional_id("orders-copy", 3), "orders-copy-3");
    assert_eq!(transactional_id("files", "orders.csv"), "files-orders.csv");
}
