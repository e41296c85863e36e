//! Exactly-once consume → transform → produce: each commit is a Kafka
//! transaction holding the records produced and the source offsets
//! (`ExactlyOnce::commit_to_group`), so a kill at any point redoes
//! nothing that was committed and commits nothing twice.
//!
//! ```text
//! cargo run -p inflight-rdkafka --release --example transactional_pipeline -- [BROKERS SOURCE SINK GROUP] [--overlapping] [--rtt-ms=N]
//! ```
//!
//! Without `BROKERS` it runs on librdkafka's in-process mock cluster (a
//! `source` topic of 20,000 records it fills first): the flow, not the
//! semantics (the mock aborts nothing), each request taking `N` ms more
//! with `--rtt-ms=N`. With them it runs until the
//! source is idle for 5 s. Run one copy per task; the transactional id is
//! the group and the task number (`transactional_id`), the same at every
//! restart, so a restarted copy fences its killed predecessor. Prints the
//! commits, rewinds and how long sends were kept out at the boundaries.
//!
//! The loop is all it takes: send each result with its source partition
//! and offset; a committer thread commits every 100 ms; on a rewind the
//! loop (the thread that reads the source) seeks back and resumes.

use inflight_rdkafka::transaction::{transactional_id, ExactlyOnce, Outcome, TxnError};
use inflight_rdkafka::TopicPartition;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let overlapping = args.iter().any(|a| a == "--overlapping");
    // The mock's round trip, to see what a commit keeps sends out for.
    let rtt = args
        .iter()
        .find_map(|a| a.strip_prefix("--rtt-ms="))
        .map(str::parse::<u64>)
        .transpose()?;
    let args: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let mock;
    let (brokers, source, sink, group) = match args[..] {
        [brokers, source, sink, group] => (brokers.to_owned(), source, sink, group),
        [] => {
            mock = MockCluster::new(1)?;
            fill(&mock, 20_000)?;
            if let Some(rtt) = rtt {
                mock.broker_round_trip_time(1, Duration::from_millis(rtt))?;
            }
            (mock.bootstrap_servers(), "source", "sink", "copy")
        }
        _ => {
            return Err(
                "arguments: [BROKERS SOURCE SINK GROUP] [--overlapping] [--rtt-ms=N]".into(),
            )
        }
    };
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &brokers);

    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        // Only committed records of the source (when it is a sink of
        // another transactional pipeline).
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[source])?;
    // One task here; the task number would come from the deployment.
    let txn = ExactlyOnce::<TopicPartition, i64>::builder(&config, &transactional_id(group, 0))
        .overlapping(overlapping)
        .build()?;

    let started = Instant::now();
    let done = AtomicBool::new(false);
    let mut copied = 0_u64;
    let mut last_record = Instant::now();
    std::thread::scope(
        |s| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            // The committer: every 100 ms a transaction with the source
            // offsets in it. With `--overlapping` the loop below keeps sending
            // (into the next transaction) while it waits and commits.
            let committer = s.spawn(|| -> Result<Vec<Duration>, TxnError> {
                // How long each commit with records in it took.
                let mut took = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    let Some(metadata) = consumer.group_metadata() else {
                        continue;
                    };
                    let start = Instant::now();
                    match txn.commit_to_group(&metadata) {
                        Ok(Outcome::Committed(offsets)) if !offsets.is_empty() => {
                            took.push(start.elapsed())
                        }
                        Ok(_) | Err(TxnError::Rewinding) => {} // the loop below rewinds
                        Err(fatal) => return Err(fatal),
                    }
                }
                Ok(took)
            });
            while last_record.elapsed() < Duration::from_secs(5) && !committer.is_finished() {
                // A rewind: seek back to what was committed, then go on.
                if let Some(rewind) = txn.pending_rewind() {
                    eprintln!("rewound: {}", rewind.cause());
                    rewind.seek(&consumer, Duration::from_secs(10))?;
                    txn.resume()?;
                }
                let Some(message) = consumer.poll(Duration::from_millis(10)) else {
                    continue;
                };
                let message = message?;
                last_record = Instant::now();
                let payload = message.payload().unwrap_or_default().to_ascii_uppercase();
                let record = BaseRecord::<[u8], [u8]>::to(sink)
                    .key(message.key().unwrap_or_default())
                    .payload(&payload);
                let source = TopicPartition::new(message.topic(), message.partition());
                // A refusal is rewound by a commit: keep going.
                if txn.send(source, message.offset(), record).is_ok() {
                    copied += 1;
                }
            }
            done.store(true, Ordering::Relaxed);
            let mut took = committer.join().expect("the committer panicked")?;
            took.sort();
            if let (Some(median), Some(max)) = (took.get(took.len() / 2), took.last()) {
                println!(
                    "{} commits with records: median {:.1} ms, max {:.1} ms each",
                    took.len(),
                    median.as_secs_f64() * 1e3,
                    max.as_secs_f64() * 1e3
                );
            }
            Ok(())
        },
    )
    .map_err(|e| e.to_string())?;
    let metadata = consumer.group_metadata().ok_or("no group metadata")?;
    if let Outcome::Rewound(rewind) = txn.commit_to_group(&metadata)? {
        eprintln!("the last commit rewound: {}", rewind.cause());
    }
    let stats = txn.stats();
    // Nothing left open for the next instance to abort.
    txn.close()?;
    println!(
        "copied {copied} records in {:.2} s ({}): {} commits, {} rewinds, sends kept out {:.1} ms \
         in all ({:.3} ms a commit)",
        (last_record - started).as_secs_f64(),
        if overlapping {
            "overlapping"
        } else {
            "one producer"
        },
        stats.committed,
        stats.rewound,
        stats.paused.as_secs_f64() * 1e3,
        stats.paused.as_secs_f64() * 1e3 / stats.committed.max(1) as f64,
    );
    Ok(())
}

/// Fills the mock cluster's `source` (4 partitions) with `count` records.
fn fill(
    cluster: &MockCluster<'static, DefaultProducerContext>,
    count: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    cluster.create_topic("source", 4, 1)?;
    cluster.create_topic("sink", 4, 1)?;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .create()?;
    for i in 0..count {
        let key = (i % 64).to_string();
        let payload = format!("record {i}");
        let mut record = BaseRecord::to("source").key(&key).payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30))?;
    Ok(())
}
