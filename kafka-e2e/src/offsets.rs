//! Source offsets stored the way Kafka Connect stores them: as keyed
//! records in an offsets topic, the last value per key winning.
//!
//! Connect keys a record by `[connector, source partition]` and writes the
//! source offset as its value, both in JSON; here the key is
//! `<name>/<source partition>` and the value the last committed sequence
//! number, in decimal. [`OffsetStore::write`] returns only once every record
//! of the write is delivered (acknowledged by the broker), so that the
//! committer commits its flush only after the offsets are durable there.

use crate::kafka;
use crate::keyed::KeyedWriter;
use crate::Error;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Offsets per source partition.
pub type Offsets = BTreeMap<u32, u64>;

/// Writes and reads one worker's offsets.
pub struct OffsetStore {
    brokers: String,
    topic: String,
    name: String,
    writer: KeyedWriter,
}

impl OffsetStore {
    /// A store for the offsets of `name` in `topic` (one partition).
    pub fn new(brokers: &str, topic: &str, name: &str) -> Result<OffsetStore, Error> {
        Ok(OffsetStore {
            brokers: brokers.into(),
            topic: topic.into(),
            name: name.into(),
            writer: KeyedWriter::new(brokers, topic, "offsets")?,
        })
    }

    /// Writes one record per partition and waits until the broker has them
    /// all, or fails.
    pub fn write(&mut self, offsets: &HashMap<u32, u64>, timeout: Duration) -> Result<(), Error> {
        let records: Vec<(String, String)> = offsets
            .iter()
            .map(|(&partition, &seq)| (format!("{}/{partition}", self.name), seq.to_string()))
            .collect();
        self.writer.write(&records, timeout)
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
