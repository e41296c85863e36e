//! The source filler and the sink's check.
//!
//! The source holds, per partition `p`, the records `p 0`, `p 1`, … (the
//! sequence number equals the offset); a worker writes `p seq <worker>` to
//! partition `p` of the sink for each record it processed. Reading the
//! sink back then tells, per `(p, seq)`, which workers produced it, in the
//! order they did.

use crate::kafka::{client_config, Record};
use crate::Error;
use inflight_rdkafka::{ProgressStore, TopicPartition, TopicStore};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Counts the source's deliveries.
#[derive(Default)]
struct Counted {
    delivered: AtomicU64,
    failed: AtomicU64,
}

impl ClientContext for Counted {}

impl ProducerContext for Counted {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        // Relaxed: counts, read after the flush.
        match result {
            Ok(_) => self.delivered.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// Fills the source topic from a thread of its own.
pub struct Filler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Vec<u64>, Error>>,
}

impl Filler {
    /// Starts writing to `partitions` partitions of `topic` round-robin, at
    /// most `rate` records per second (0: unpaced), at most `limit` in all.
    pub fn start(
        brokers: &str,
        topic: &str,
        partitions: i32,
        rate: u64,
        limit: Option<u64>,
    ) -> Result<Filler, Error> {
        let producer: ThreadedProducer<Counted> = client_config(brokers)
            .set("linger.ms", "5")
            .set("acks", "all")
            // In order per partition: the sequence number is the offset.
            .set("max.in.flight.requests.per.connection", "1")
            .set("queue.buffering.max.messages", "100000")
            // Batches of at most this many records: a worker refetches
            // that far before its resume offset (claims::REFETCH_WINDOW).
            .set("batch.num.messages", "10000")
            .create_with_context(Counted::default())
            .map_err(|e| Error::kafka("creating the source producer", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let topic = topic.to_string();
        let stopping = stop.clone();
        let thread = thread::Builder::new()
            .name("filler".into())
            .spawn(move || {
                let started = Instant::now();
                let mut next = vec![0_u64; partitions as usize];
                let mut sent = 0_u64;
                'fill: while !stopping.load(Ordering::Acquire) {
                    for (p, seq) in (0..partitions).zip(next.iter_mut()) {
                        if limit.is_some_and(|limit| sent >= limit) {
                            break 'fill;
                        }
                        let payload = format!("{p} {seq}");
                        let mut record = BaseRecord::<(), String, ()>::to(&topic)
                            .partition(p)
                            .payload(&payload);
                        loop {
                            match producer.send(record) {
                                Ok(()) => break,
                                Err((e, back)) if inflight_rdkafka::producer::is_queue_full(&e) => {
                                    record = back;
                                    producer.poll(Duration::from_millis(10));
                                }
                                Err((e, _)) => return Err(Error::kafka("filling the source", e)),
                            }
                        }
                        *seq += 1;
                        sent += 1;
                    }
                    // Pace the source (correctness never depends on it).
                    let due = (sent * 1_000_000).checked_div(rate);
                    if let Some(ahead) =
                        due.and_then(|us| Duration::from_micros(us).checked_sub(started.elapsed()))
                    {
                        thread::sleep(ahead);
                    }
                }
                producer
                    .flush(Duration::from_secs(60))
                    .map_err(|e| Error::kafka("flushing the source", e))?;
                let context = producer.context();
                let (delivered, failed) = (
                    context.delivered.load(Ordering::Relaxed),
                    context.failed.load(Ordering::Relaxed),
                );
                if failed > 0 || delivered != sent {
                    return Err(Error::Other(format!(
                        "source: {sent} sent, {delivered} delivered, {failed} failed"
                    )));
                }
                Ok(next)
            })?;
        Ok(Filler { stop, thread })
    }

    /// Stops (or, with a limit, waits for the end) and returns the records
    /// written per partition, every one delivered.
    pub fn finish(self) -> Result<Vec<u64>, Error> {
        self.stop.store(true, Ordering::Release);
        self.join()
    }

    /// Waits for a filler with a limit to write them all.
    pub fn join(self) -> Result<Vec<u64>, Error> {
        self.thread
            .join()
            .map_err(|_| Error::Other("the source filler panicked".into()))?
    }
}

/// What the sink holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SinkCheck {
    /// Sink records read.
    pub records: usize,
    /// Source records with no sink record.
    pub missing: usize,
    /// Sink records that repeat one produced before by a worker that was
    /// not killed: a clean stop or a rebalance did not hand off right.
    pub clean_duplicates: usize,
    /// Sink records that repeat one produced before by a worker that was
    /// later killed: redone past its last progress.
    pub kill_duplicates: usize,
    /// Sink records that are not `p seq worker` on partition `p`, or name a
    /// record the source does not have.
    pub malformed: usize,
    /// A few missing records and clean duplicates, for the report.
    pub examples: Vec<String>,
}

/// Checks `sink` against the source's `counts` per partition; `killed`
/// names the workers that were killed.
pub fn check(sink: &[Record], counts: &[u64], killed: &HashSet<String>) -> SinkCheck {
    let mut out = SinkCheck {
        records: sink.len(),
        ..SinkCheck::default()
    };
    // Per (p, seq): the workers that produced it, in sink order.
    let mut by: HashMap<(i32, u64), Vec<&str>> = HashMap::new();
    for record in sink {
        let text = record
            .payload
            .as_deref()
            .and_then(|v| std::str::from_utf8(v).ok());
        let parsed = text.and_then(|t| {
            let mut fields = t.split(' ');
            let p = fields.next()?.parse::<i32>().ok()?;
            let seq = fields.next()?.parse::<u64>().ok()?;
            let worker = fields.next()?;
            Some((p, seq, worker)).filter(|_| fields.next().is_none())
        });
        match parsed {
            Some((p, seq, worker))
                if p == record.partition
                    && counts.get(p as usize).is_some_and(|&count| seq < count) =>
            {
                by.entry((p, seq)).or_default().push(worker);
            }
            _ => out.malformed += 1,
        }
    }
    for (p, &count) in (0..).zip(counts) {
        for seq in 0..count {
            match by.get(&(p, seq)) {
                None => {
                    out.missing += 1;
                    if out.examples.len() < 8 {
                        out.examples.push(format!("{p}/{seq} missing"));
                    }
                }
                Some(workers) => {
                    for pair in workers.windows(2) {
                        if killed.contains(pair[0]) {
                            out.kill_duplicates += 1;
                        } else {
                            out.clean_duplicates += 1;
                            if out.examples.len() < 8 {
                                out.examples.push(format!("{p}/{seq} by {workers:?}"));
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The next offset per partition that the progress store keeps for
/// `group` (what every owner has made done so far), read as a new owner
/// reads it: `TopicStore::load`, with no group commit to compare.
pub fn store_next(
    brokers: &str,
    store: &str,
    group: &str,
    source: &str,
    partitions: i32,
) -> Result<Vec<u64>, Error> {
    let store = TopicStore::new(
        &client_config(brokers),
        store,
        group,
        Duration::from_secs(5),
    )
    .map_err(|e| Error::kafka("creating a store reader", e))?;
    let mut wanted = TopicPartitionList::new();
    for p in 0..partitions {
        wanted
            .add_partition_offset(source, p, Offset::Invalid)
            .map_err(|e| Error::kafka("partition list", e))?;
    }
    let points = store
        .load(&wanted, Duration::from_secs(60))
        .map_err(|e| Error::kafka("reading the progress store", e))?;
    Ok((0..partitions)
        .map(|p| {
            points
                .get(&TopicPartition::new(source, p))
                .map_or(0, |progress| progress.next())
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(partition: i32, payload: &str) -> Record {
        Record {
            partition,
            offset: 0,
            key: None,
            payload: Some(payload.as_bytes().to_vec()),
        }
    }

    #[test]
    fn duplicates_are_attributed_to_the_earlier_producer() {
        let sink = [
            record(0, "0 0 w1"),
            record(0, "0 1 w1"),
            record(0, "0 1 w2"), // w1 was killed: a kill duplicate
            record(0, "0 2 w2"),
            record(0, "0 2 w3"), // w2 stopped cleanly: must not happen
            record(1, "1 0 w3"),
            record(1, "0 0 w3"), // on the wrong partition
            record(1, "1 9 w3"), // never in the source
        ];
        let killed = ["w1".to_string()].into_iter().collect();
        let check = check(&sink, &[4, 2], &killed);
        assert_eq!(
            check,
            SinkCheck {
                records: 8,
                missing: 2, // 0/3 and 1/1
                clean_duplicates: 1,
                kill_duplicates: 1,
                malformed: 2,
                examples: vec![
                    "0/2 by [\"w2\", \"w3\"]".into(),
                    "0/3 missing".into(),
                    "1/1 missing".into()
                ],
            }
        );
    }
}
