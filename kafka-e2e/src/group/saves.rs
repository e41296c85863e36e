//! Where a [worker](super::worker) keeps its progress: a
//! [`ProgressStore`] (the scenario's is `inflight_rdkafka`'s
//! [`TopicStore`]) that reports each save it made, the periodic ones and a
//! hand-off's final one, as a `committed` event: the driver counts them to
//! pick its moments and reads from them how far the workers got.
//!
//! [`TopicStore`]: inflight_rdkafka::TopicStore

use super::events::{Events, WorkerEvent};
use inflight::Progress;
use inflight_rdkafka::{ProgressStore, TopicPartition};
use rdkafka::error::KafkaResult;
use rdkafka::TopicPartitionList;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A store that reports its saves (see the module docs).
pub struct Reported<S> {
    store: S,
    events: Events,
    saves: AtomicU64,
}

impl<S: ProgressStore> Reported<S> {
    /// `store`, reporting each save to `events`.
    pub fn new(store: S, events: Events) -> Reported<S> {
        Reported {
            store,
            events,
            saves: AtomicU64::new(0),
        }
    }
}

impl<S: ProgressStore> ProgressStore for Reported<S> {
    fn save(&self, points: &HashMap<TopicPartition, Progress>) -> KafkaResult<()> {
        self.store.save(points)?;
        // Relaxed: a count; saves run on the consumer's polling thread.
        let count = self.saves.fetch_add(1, Ordering::Relaxed) + 1;
        let next: BTreeMap<i32, u64> = points
            .iter()
            .map(|(partition, progress)| (partition.partition, progress.next()))
            .collect();
        (self.events)(WorkerEvent::Committed { count, next });
        Ok(())
    }

    fn load(
        &self,
        committed: &TopicPartitionList,
        timeout: Duration,
    ) -> KafkaResult<HashMap<TopicPartition, Progress>> {
        self.store.load(committed, timeout)
    }
}
