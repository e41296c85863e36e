//! The same worker on the crate's transactional flush:
//! `inflight_rdkafka::transaction::ExactlyOnce` (issue 42, item 2), in
//! place of [`worker`](super::worker)'s own loop on rdkafka's producer.
//!
//! `build` initialises the transactional id (fencing a predecessor) and
//! opens the first transaction; each record goes in with `send` (its
//! source partition and offset); `commit_to_group` seals, waits for every
//! delivery, puts the offsets into the transaction, commits it and the
//! flush, and opens the next. A rewind re-assigns the source at the
//! offsets last committed, then `resume`; any error ends the process.
//! Three phases are gated here: `sent`, `delivered` (every record of the
//! transaction delivered, before `commit_to_group`), `committed`; the
//! steps inside `commit_to_group` are the crate's.

use super::worker::{assign, Ended, Gate, TxnConfig, SLOW_COMMIT};
use crate::kafka::client_config;
use crate::Error;
use inflight_rdkafka::transaction::{ExactlyOnce, Outcome, TxnError};
use inflight_rdkafka::TopicPartition;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::BaseRecord;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Runs the worker on `ExactlyOnce` (see the module docs).
pub(crate) fn run(config: &TxnConfig, gate: &Gate) -> Result<Ended, Error> {
    let mut producer_config = client_config(&config.brokers);
    producer_config
        .set("compression.type", "none")
        .set("linger.ms", "5");
    let txn = ExactlyOnce::<TopicPartition, i64>::builder(
        &producer_config,
        &TxnConfig::transactional_id(&config.group, config.task),
    )
    .timeout(config.call_timeout)
    .build()
    .map_err(|e| Error::kafka("ExactlyOnce::build", e))?;
    let consumer: BaseConsumer = client_config(&config.brokers)
        .set("group.id", &config.group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "20")
        .create()
        .map_err(|e| Error::kafka("creating the consumer", e))?;
    let owned = config.owned();
    let mut wanted = TopicPartitionList::new();
    for &p in &owned {
        wanted.add_partition(&config.source, p);
    }
    let read = consumer
        .committed_offsets(wanted, config.call_timeout)
        .map_err(|e| Error::kafka("reading the committed offsets", e))?;
    let mut committed = BTreeMap::new();
    for &p in &owned {
        let at = match read.find_partition(&config.source, p).map(|e| e.offset()) {
            Some(Offset::Offset(at)) => at,
            _ => 0,
        };
        committed.insert(p, at);
    }
    if !gate.pass(&format!("ready {committed:?}"))? {
        return Ok(Ended::Closed);
    }
    let metadata = consumer
        .group_metadata()
        .ok_or_else(|| Error::Other("the consumer has no group metadata".into()))?;
    assign(&consumer, &config.source, &committed)?;
    let mut position = committed.clone();
    let at_end = |at: &BTreeMap<i32, i64>| at.iter().all(|(&p, &at)| at >= config.ends[p as usize]);
    let (mut transactions, mut rewinds) = (0_u64, 0_u64);
    let (mut ending, mut committing) = (Duration::ZERO, Duration::ZERO);
    let mut slow_commits = 0;
    loop {
        if at_end(&committed) {
            // A clean stop: the transaction opened after the last commit
            // (empty) is aborted, not left to the next instance.
            txn.close()
                .map_err(|e| Error::kafka("ExactlyOnce::close", e))?;
            gate.say(&format!(
                "done {transactions} transactions, {rewinds} rewinds, at {committed:?}"
            ))?;
            return Ok(Ended::Done {
                transactions,
                rewinds,
                ending,
                committing,
                slow_commits,
            });
        }
        let n = transactions + 1;
        if !gate.pass(&format!("phase begin {n}"))? {
            return Ok(Ended::Closed);
        }
        let started = Instant::now();
        let mut sent = 0;
        while sent < config.max_per_txn && !at_end(&position) {
            let left = config.txn_interval.saturating_sub(started.elapsed());
            if left.is_zero() {
                break;
            }
            let message = match consumer.poll(left) {
                None => continue,
                Some(Err(e)) => return Err(Error::kafka("consume", e)),
                Some(Ok(message)) => message,
            };
            let (p, offset) = (message.partition(), message.offset());
            let payload = message
                .payload()
                .and_then(|v| std::str::from_utf8(v).ok())
                .ok_or_else(|| Error::Other(format!("source record {p}/{offset} is not text")))?
                .to_owned();
            let record = BaseRecord::<(), String, ()>::to(&config.sink)
                .partition(p)
                .payload(&payload);
            match txn.send(TopicPartition::new(&config.source, p), offset, record) {
                Ok(()) => {}
                // Refused: the commit below rewinds.
                Err(TxnError::Refused(e)) => gate.say(&format!("refused {p}/{offset}: {e}"))?,
                Err(e) => return Err(Error::kafka("ExactlyOnce::send", e)),
            }
            sent += 1;
            position.insert(p, offset + 1);
        }
        if !gate.pass(&format!("phase sent {n} {sent}"))? {
            return Ok(Ended::Closed);
        }
        let sealed = Instant::now();
        // A point for the driver inside the transaction with its records
        // in the log: every record delivered (`commit_to_group` would wait
        // for the same, then put the offsets in and commit). The tracker
        // wakes no one here, so look every millisecond, up to the deadline.
        let deadline = Instant::now() + config.call_timeout;
        while txn.in_flight() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !gate.pass(&format!("phase delivered {n}"))? {
            return Ok(Ended::Closed);
        }
        let commit_started = Instant::now();
        match txn
            .commit_to_group(&metadata)
            .map_err(|e| Error::kafka("ExactlyOnce::commit_to_group", e))?
        {
            Outcome::Committed(offsets) => {
                let this_committing = commit_started.elapsed();
                committing += this_committing;
                slow_commits += u64::from(this_committing >= SLOW_COMMIT);
                ending += sealed.elapsed();
                for (partition, last) in offsets {
                    committed.insert(partition.partition, last + 1);
                }
                transactions += 1;
                if !gate.pass(&format!("phase committed {n} {sent}"))? {
                    return Ok(Ended::Closed);
                }
            }
            Outcome::Rewound(rewind) => {
                rewinds += 1;
                gate.say(&format!("rewind {n}: {}", rewind.cause()))?;
                assign(&consumer, &config.source, &committed)?;
                position = committed.clone();
                txn.resume()
                    .map_err(|e| Error::kafka("ExactlyOnce::resume", e))?;
            }
        }
    }
}
