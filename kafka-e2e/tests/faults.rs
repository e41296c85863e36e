//! Faults against a real broker: unreachable, a delivery that fails, and a
//! broker that stops answering mid-run.
//!
//! The last two need a broker and are `#[ignore]`d in a plain `cargo test`;
//! `kafka-e2e/run` runs them with `--include-ignored`, setting
//! `KAFKA_E2E_BROKERS` (its broker) and `KAFKA_E2E_TANSU` (the binary, for
//! the test that starts and stops a broker of its own).
//!
//! No sleeps: every wait is on the worker's events, with a deadline that
//! only keeps a broken run from hanging.

use kafka_e2e::broker::{self, Broker};
use kafka_e2e::offsets::{self, Offsets};
use kafka_e2e::worker::{CommitError, Config, Event, Fault, Worker};
use kafka_e2e::{kafka, Error};
use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// Only guards against a hang; nothing waits for it to pass.
const DEADLINE: Duration = Duration::from_secs(120);

fn brokers() -> String {
    std::env::var("KAFKA_E2E_BROKERS")
        .expect("KAFKA_E2E_BROKERS is not set: run kafka-e2e/run, which starts a broker")
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("kafka-e2e-{name}-{}-{nanos}", std::process::id())
}

/// The next event, or a panic naming what was awaited.
fn next(events: &Receiver<Event>, awaiting: &str) -> Event {
    events
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|e| panic!("no event while awaiting {awaiting}: {e}"))
}

#[test]
fn unreachable_broker_is_a_clear_error() {
    // A port nothing listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let result = Worker::start(Config::new(&address, &unique("unreachable"), "w"));
    let took = started.elapsed();
    let Err(error) = result else {
        panic!("a worker started against {address}, where nothing listens");
    };
    eprintln!("after {took:.1?}: {error}");
    assert!(
        matches!(&error, Error::Unreachable { brokers, waited, .. }
            if *brokers == address && *waited == kafka::CONNECT_TIMEOUT),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("not reachable") && message.contains(&address),
        "{message}"
    );
}

/// Runs a worker with `fault` at `(partition, seq)` and checks: the ticket
/// fails, the error is reported, every commit from then on fails, and no
/// committed offset of that partition ever reaches `seq`.
fn failed_delivery(fault: Fault, partition: u32, seq: u64, expected: &str) {
    let brokers = brokers();
    let mut config = Config::new(&brokers, &unique("delivery"), "w");
    config.records_per_sec = 10_000;
    config.flush_timeout = Duration::from_secs(5);
    config.fault = Some(fault);
    let offsets_topic = config.offsets_topic.clone();
    let (worker, events) = Worker::start(config).expect("worker starts");

    let mut last_committed = Offsets::new();
    let mut reported = None;
    let mut failed_commits = 0;
    // Until the failure is reported and three commits in a row failed
    // because of it.
    while reported.is_none() || failed_commits < 3 {
        match next(&events, "the failure") {
            Event::Started(_) => {}
            Event::DeliveryFailed(e) => {
                eprintln!("reported: {e}");
                reported.get_or_insert(e);
            }
            Event::Committed(offsets) => {
                assert!(
                    offsets.get(&partition).is_none_or(|&c| c < seq),
                    "committed {offsets:?}, past the failed record {partition}/{seq}"
                );
                assert_eq!(failed_commits, 0, "a commit after a flush failed");
                last_committed = offsets;
            }
            Event::CommitFailed(CommitError::RecordsFailed { failed }) => {
                assert_eq!(failed, 1);
                failed_commits += 1;
            }
            Event::CommitFailed(e) => panic!("a commit failed for another reason: {e}"),
        }
    }
    let reported = reported.unwrap();
    assert!(
        reported.contains(expected),
        "{reported:?} should say {expected:?}"
    );
    assert!(
        !last_committed.is_empty(),
        "the fault came before any commit: move it later"
    );
    let stop = worker.stop();
    assert_eq!(stop.failed, 1, "{stop:?}");
    assert_eq!(
        stop.final_commit,
        Err(CommitError::RecordsFailed { failed: 1 }),
        "the final commit must fail too"
    );
    // What a restarted worker would resume from: the last commit before
    // the failure, nothing past it.
    let stored = offsets::read(&brokers, &offsets_topic, "w", DEADLINE).expect("offsets read back");
    assert_eq!(stored, last_committed);
    assert!(stored.get(&partition).is_none_or(|&c| c < seq));
    eprintln!(
        "{} sent, {} acked, 1 failed; committed offsets stay at {stored:?}",
        stop.sent, stop.acked
    );
}

#[test]
#[ignore = "needs a broker: KAFKA_E2E_BROKERS (kafka-e2e/run sets it)"]
fn an_oversize_record_fails_its_ticket_and_every_later_commit() {
    // Kafka's default limit (message.max.bytes, 1 MB), enforced by
    // librdkafka at send; tansu 0.6.0 checks no size itself.
    failed_delivery(
        Fault::Oversize {
            partition: 2,
            seq: 3_000,
        },
        2,
        3_000,
        "size too large",
    );
}

#[test]
#[ignore = "needs a broker: KAFKA_E2E_BROKERS (kafka-e2e/run sets it)"]
fn a_delivery_callback_failure_fails_its_ticket_and_every_later_commit() {
    // The broker answers that the topic does not exist; librdkafka gives
    // up on the record and reports it to the delivery callback.
    failed_delivery(
        Fault::MissingTopic {
            partition: 1,
            seq: 3_000,
        },
        1,
        3_000,
        "Unknown topic",
    );
}

/// Waits for a `Committed` event, panicking on delivery failures.
fn next_commit(events: &Receiver<Event>, failures: &mut usize) -> Offsets {
    loop {
        match next(events, "a commit") {
            Event::Committed(offsets) => return offsets,
            Event::CommitFailed(e) => {
                *failures += 1;
                eprintln!("commit failed: {e}");
            }
            Event::DeliveryFailed(e) => panic!("a delivery failed: {e}"),
            Event::Started(_) => {}
        }
    }
}

#[test]
#[ignore = "needs tansu: KAFKA_E2E_TANSU (kafka-e2e/run sets it)"]
fn broker_stopped_mid_run_commits_fail_then_nothing_is_missing() {
    let log = std::env::temp_dir().join(format!("kafka-e2e-paused-{}.log", std::process::id()));
    let broker = Broker::start(&broker::tansu_binary(), &log).expect("a broker of our own");
    let brokers = broker.address();
    let mut config = Config::new(&brokers, &unique("paused"), "w");
    config.records_per_sec = 5_000;
    config.flush_timeout = Duration::from_secs(1);
    let (data_topic, offsets_topic) = (config.data_topic.clone(), config.offsets_topic.clone());
    let partitions = config.partitions;
    let (worker, events) = Worker::start(config).expect("worker starts");

    let mut failures = 0;
    let mut last = Offsets::new();
    for _ in 0..3 {
        last = next_commit(&events, &mut failures);
    }
    assert_eq!(failures, 0, "commits failed before the broker stopped");

    // Stop the broker (SIGSTOP): it takes connections and answers nothing.
    broker.pause().expect("SIGSTOP");
    let mut committed_while_stopped = 0;
    let mut failed_in_a_row = 0;
    while failed_in_a_row < 3 {
        match next(&events, "failing commits") {
            Event::CommitFailed(e) => {
                eprintln!("broker stopped, commit failed: {e}");
                failed_in_a_row += 1;
            }
            Event::Committed(offsets) => {
                // At most the commit that was on its way when it stopped.
                committed_while_stopped += 1;
                failed_in_a_row = 0;
                last = offsets;
            }
            Event::DeliveryFailed(e) => panic!("a delivery failed for good: {e}"),
            Event::Started(_) => {}
        }
    }
    assert!(
        committed_while_stopped <= 1,
        "{committed_while_stopped} commits succeeded while the broker was stopped"
    );

    // Let it go on (SIGCONT): commits resume and move past where they were.
    broker.resume().expect("SIGCONT");
    let mut failures_after = 0;
    loop {
        let offsets = next_commit(&events, &mut failures_after);
        if (0..partitions).all(|p| offsets.get(&p) > last.get(&p)) {
            eprintln!("broker back: committed {offsets:?} (was {last:?})");
            break;
        }
    }
    let stop = worker.stop();
    let Ok(committed) = stop.final_commit else {
        panic!("final commit after the broker returned: {stop:?}");
    };

    // Nothing committed is missing from the data topic; nothing acked is
    // missing either, and the offsets topic holds the final commit.
    let stored = offsets::read(&brokers, &offsets_topic, "w", DEADLINE).expect("offsets");
    assert_eq!(stored, committed);
    let records = kafka::read_topic(&brokers, &data_topic, partitions as i32, DEADLINE)
        .expect("data topic read back");
    let mut seen: HashMap<u32, Vec<u32>> = HashMap::new();
    for record in &records {
        let text = String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default());
        let mut fields = text.split(' ');
        let mut field = || fields.next().expect("<partition> <seq> <run>");
        let (p, seq): (u32, usize) = (field().parse().unwrap(), field().parse().unwrap());
        let counts = seen.entry(p).or_default();
        if counts.len() <= seq {
            counts.resize(seq + 1, 0);
        }
        counts[seq] += 1;
    }
    let mut missing = 0;
    let mut duplicates = 0;
    for p in 0..partitions {
        let counts = seen.get(&p).map_or(&[][..], Vec::as_slice);
        let end = committed[&p] as usize + 1;
        missing += (0..end)
            .filter(|&s| counts.get(s).is_none_or(|&c| c == 0))
            .count();
        duplicates += counts
            .iter()
            .map(|&c| c.saturating_sub(1) as usize)
            .sum::<usize>();
    }
    eprintln!(
        "{} records read back, {} sent, {} acked; committed {committed:?}; {missing} missing, {duplicates} duplicates (retries while stopped)",
        records.len(),
        stop.sent,
        stop.acked
    );
    assert_eq!(missing, 0);
    assert_eq!(stop.acked, stop.sent, "every record sent was delivered");
    assert_eq!(records.len() as u64 - duplicates as u64, stop.sent);
}
