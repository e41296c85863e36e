//! Source offsets stored the way Kafka Connect stores them, as keyed
//! records in a compacted offsets topic: `inflight_rdkafka`'s
//! [`KafkaOffsetStore`], keyed by `[worker, source partition]` (JSON), the
//! last committed sequence number as the value. Its save returns only once
//! every record of it is delivered, so that `Tracker::flush_to` commits a
//! flush only after its offsets are durable there.

use crate::Error;
use inflight::store::OffsetStore;
use inflight_rdkafka::KafkaOffsetStore;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::kafka::client_config;

/// Offsets per source partition.
pub type Offsets = BTreeMap<u32, u64>;

/// One worker's offsets: source partition → last committed sequence number.
pub type Store = KafkaOffsetStore<u32, u64>;

/// Opens the store of `name`'s offsets in `topic` (created compacted if it
/// is missing), each request, save and load waiting at most `timeout`.
pub fn open(brokers: &str, topic: &str, name: &str, timeout: Duration) -> Result<Store, Error> {
    KafkaOffsetStore::builder(&client_config(brokers), topic, name)
        .timeout(timeout)
        .open()
        .map_err(|e| Error::kafka("opening the offsets store", e))
}

/// Reads the committed offsets of `name` from `topic` back: the last value
/// per key, the way Connect's `KafkaOffsetBackingStore` rebuilds its map.
pub fn read(brokers: &str, topic: &str, name: &str, deadline: Duration) -> Result<Offsets, Error> {
    load(&mut open(brokers, topic, name, deadline)?)
}

/// What `store` holds.
pub fn load(store: &mut Store) -> Result<Offsets, Error> {
    let offsets = store
        .load()
        .map_err(|e| Error::kafka("reading the offsets back", e))?;
    Ok(offsets.into_iter().collect())
}
