//! Source offsets stored the way Kafka Connect stores them: as keyed
//! records in an offsets topic, the last value per key winning.
//!
//! Connect keys a record by `[connector, source partition]` and writes the
//! source offset as its value, both in JSON; here the key is
//! `<name>/<source partition>` and the value the last committed sequence
//! number, in decimal. [`OffsetStore::write`] returns only once every record
//! of the write is delivered (acknowledged by the broker), so that the
//! committer commits its flush only after the offsets are durable there.

use crate::kafka::{self, client_config};
use crate::Error;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::producer::{NoCustomPartitioner, PurgeConfig};
use rdkafka::ClientContext;
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

/// Offsets per source partition.
pub type Offsets = BTreeMap<u32, u64>;

/// Reports each offset record's delivery, tagged with its write.
struct WriteContext {
    delivered: Mutex<mpsc::Sender<(usize, Result<(), String>)>>,
}

impl ClientContext for WriteContext {}

impl ProducerContext<NoCustomPartitioner> for WriteContext {
    /// The number of the write the record belongs to.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, write: usize) {
        let result = match result {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(e.to_string()),
        };
        // The receiver lives as long as the store; a send can only fail
        // while the store is being dropped, when nobody waits any more.
        let _ = self.delivered.lock().unwrap().send((write, result));
    }
}

/// Writes and reads one worker's offsets.
pub struct OffsetStore {
    brokers: String,
    topic: String,
    name: String,
    producer: BaseProducer<WriteContext>,
    delivered: mpsc::Receiver<(usize, Result<(), String>)>,
    writes: usize,
}

impl OffsetStore {
    /// A store for the offsets of `name` in `topic` (one partition).
    pub fn new(brokers: &str, topic: &str, name: &str) -> Result<OffsetStore, Error> {
        let (tx, rx) = mpsc::channel();
        let producer = client_config(brokers)
            .set("linger.ms", "0")
            // Writes reach the broker in the order they were made, so
            // that the last value per key is the newest one.
            .set("max.in.flight.requests.per.connection", "1")
            // A write that cannot be delivered within this fails, and with
            // it the commit; the next commit writes newer offsets anyway.
            .set("message.timeout.ms", "5000")
            .create_with_context(WriteContext {
                delivered: Mutex::new(tx),
            })
            .map_err(|e| Error::kafka("creating the offsets producer", e))?;
        Ok(OffsetStore {
            brokers: brokers.into(),
            topic: topic.into(),
            name: name.into(),
            producer,
            delivered: rx,
            writes: 0,
        })
    }

    /// Writes one record per partition and waits until the broker has them
    /// all, or fails.
    pub fn write(&mut self, offsets: &HashMap<u32, u64>, timeout: Duration) -> Result<(), Error> {
        self.writes += 1;
        let write = self.writes;
        for (&partition, &seq) in offsets {
            let key = format!("{}/{partition}", self.name);
            let value = seq.to_string();
            let record = BaseRecord::with_opaque_to(&self.topic, write)
                .partition(0)
                .key(&key)
                .payload(&value);
            if let Err((e, _)) = self.producer.send(record) {
                self.discard();
                return Err(Error::kafka("writing offsets", e));
            }
        }
        // `flush` serves the delivery callbacks.
        if let Err(e) = self.producer.flush(timeout) {
            self.discard();
            return Err(Error::kafka("writing offsets", e));
        }
        let mut outcomes = 0;
        let mut failure = None;
        while let Ok((of, result)) = self.delivered.try_recv() {
            if of != write {
                continue; // a purged record of an earlier, failed write
            }
            outcomes += 1;
            if let Err(e) = result {
                failure.get_or_insert(e);
            }
        }
        match failure {
            Some(e) => Err(Error::kafka("offset record not delivered", e)),
            None if outcomes != offsets.len() => Err(Error::Other(format!(
                "offset write {write}: {outcomes} of {} deliveries reported",
                offsets.len()
            ))),
            None => Ok(()),
        }
    }

    /// Drops whatever a failed write left queued, so that it does not pile
    /// up while the broker is away. (A purged record that already reached
    /// the broker may still land there: harmless, its offsets were acked.)
    fn discard(&self) {
        self.producer
            .purge(PurgeConfig::default().queue().inflight());
        self.producer.poll(Duration::ZERO);
        while self.delivered.try_recv().is_ok() {}
    }

    /// Reads this worker's committed offsets back (last value per key).
    pub fn read(&self, deadline: Duration) -> Result<Offsets, Error> {
        read(&self.brokers, &self.topic, &self.name, deadline)
    }
}

/// Reads the committed offsets of `name` from `topic`: the last value per
/// key, the way Connect's `KafkaOffsetBackingStore` rebuilds its map.
pub fn read(brokers: &str, topic: &str, name: &str, deadline: Duration) -> Result<Offsets, Error> {
    let prefix = format!("{name}/");
    let mut offsets = Offsets::new();
    for record in kafka::read_topic(brokers, topic, 1, deadline)? {
        let key = record.key.as_deref().map(String::from_utf8_lossy);
        let Some(partition) = key.as_deref().and_then(|k| k.strip_prefix(&prefix)) else {
            continue; // another worker's key
        };
        let parsed = partition.parse::<u32>().ok().zip(
            record
                .payload
                .as_deref()
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<u64>().ok()),
        );
        let Some((partition, seq)) = parsed else {
            return Err(Error::Other(format!(
                "offsets topic {topic}: unreadable record at offset {}",
                record.offset
            )));
        };
        offsets.insert(partition, seq);
    }
    Ok(offsets)
}
