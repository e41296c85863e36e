//! [`KafkaOffsetStore`]: a source task's offsets in a compacted Kafka
//! topic, as Kafka Connect's `KafkaOffsetBackingStore` keeps them in
//! `connect-offsets`.

use crate::store::read_to_end;
use inflight::store::{OffsetStore, StoreError};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// An [`OffsetStore`] in a compacted Kafka topic: one record per task and
/// source partition, the last one per key winning, as Kafka Connect keeps
/// source offsets in `connect-offsets`. For a source task that already
/// runs beside Kafka and has no disk of its own to keep a
/// [`FileStore`](inflight::store::FileStore) on.
///
/// - **Records.** The key is the JSON of `[task, partition]` (Connect's
///   layout: `["orders-source",{"file":"orders.csv"}]`), the value the
///   JSON of the offset; a removed partition gets a tombstone (a record
///   with no value), which compaction clears. All go to partition 0.
/// - **Durable on return.** The producer is idempotent with `acks=all`
///   (as durable as the topic's replicas and `min.insync.replicas` make
///   it); [`save`](OffsetStore::save) and [`remove`](OffsetStore::remove)
///   wait for every record's delivery and fail, naming the key, if one
///   failed or did not come within the store's timeout. Each partition's
///   offset is a record of its own: a save that fails may have stored
///   some of its partitions and not others, each at its offset before the
///   save or the one the save carried, either a safe place to resume (the
///   next flush covers them again). Records of a failed save that are
///   delivered later land before those of the next save (the idempotent
///   producer keeps their order).
/// - **Load reads to the end.** [`load`](OffsetStore::load) reads the
///   topic from its start to the end it had when the load began (on every
///   broker, tansu included, which never reports the end while others
///   write), keeps this task's records and ignores other tasks' and
///   foreign keys. A record of this task whose partition or offset is not
///   JSON of `P` or `O` is [`StoreError::Corrupt`], naming the topic and
///   the record's offset: never read as "no offset".
/// - **Compacted, or refused.** [`open`](Self::open) creates the topic
///   (one partition, `cleanup.policy=compact`) when it is missing, and
///   refuses one that exists with another cleanup policy
///   ([`OffsetTopicError::NotCompacted`]): a deleting topic would drop the
///   offsets of partitions that stay quiet longer than its retention.
/// - **One writer per task.** Nothing fences a second process running the
///   same task (unlike [`FileStore`](inflight::store::FileStore)'s lock):
///   run each task once.
///
/// ```no_run
/// use std::collections::HashMap;
/// use inflight::store::OffsetStore;
/// use inflight_rdkafka::KafkaOffsetStore;
/// use rdkafka::config::ClientConfig;
///
/// let mut config = ClientConfig::new();
/// config.set("bootstrap.servers", "127.0.0.1:9092");
/// // Creates "source-offsets" compacted if it is missing.
/// let mut store: KafkaOffsetStore<String, (u64, u64)> =
///     KafkaOffsetStore::open(&config, "source-offsets", "orders-source")?;
/// let resume = store.load()?; // empty on a first start
/// store.save(&HashMap::from([("orders.csv".to_string(), (12, 4_096))]))?;
/// store.remove(&["old.csv".to_string()])?; // a source partition that ended
/// # Ok::<(), inflight::store::StoreError>(())
/// ```
///
/// With a [`Tracker`](inflight::Tracker), each commit is
/// `tracker.flush_to(&mut store, timeout)`: wait for what was sent, save
/// it here, then commit the flush.
pub struct KafkaOffsetStore<P, O> {
    config: ClientConfig,
    topic: String,
    task: String,
    timeout: Duration,
    /// Its own thread serves the delivery callbacks, which wake the save
    /// that waits for them. (Not `flush`: rust-rdkafka 0.39's polls for
    /// 100 ms at a time, and a save would take at least that.)
    producer: ThreadedProducer<Deliveries>,
    /// Numbers the saves: a delivery report counts for its own save only.
    saves: usize,
    _types: PhantomData<fn() -> (P, O)>,
}

impl<P, O> fmt::Debug for KafkaOffsetStore<P, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaOffsetStore")
            .field("topic", &self.topic)
            .field("task", &self.task)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// How [`KafkaOffsetStore::builder`] opens a store.
pub struct KafkaOffsetStoreBuilder<P, O> {
    config: ClientConfig,
    topic: String,
    task: String,
    timeout: Duration,
    replication: i32,
    check_topic: bool,
    _types: PhantomData<fn() -> (P, O)>,
}

impl<P, O> fmt::Debug for KafkaOffsetStoreBuilder<P, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaOffsetStoreBuilder")
            .field("topic", &self.topic)
            .field("task", &self.task)
            .field("timeout", &self.timeout)
            .field("replication", &self.replication)
            .field("check_topic", &self.check_topic)
            .finish_non_exhaustive()
    }
}

impl<P, O> KafkaOffsetStoreBuilder<P, O> {
    /// How long each request, save, remove and load may take (30 s by
    /// default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The replication factor of the topic if [`open`](Self::open)
    /// creates it; by default -1, the broker's default
    /// (`default.replication.factor`).
    pub fn replication_factor(mut self, replication: i32) -> Self {
        self.replication = replication;
        self
    }

    /// Whether [`open`](Self::open) creates the topic when missing and
    /// checks that it is compacted (the default, `true`). `false` for a
    /// principal without the rights to create topics and describe their
    /// configuration, or a broker that answers neither (librdkafka's mock
    /// cluster): the topic must then exist, created with
    /// `cleanup.policy=compact`.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use inflight::store::OffsetStore;
    /// use inflight_rdkafka::KafkaOffsetStore;
    /// use rdkafka::config::ClientConfig;
    /// use rdkafka::mocking::MockCluster;
    ///
    /// let cluster = MockCluster::new(1)?;
    /// cluster.create_topic("source-offsets", 1, 1)?;
    /// let mut config = ClientConfig::new();
    /// config.set("bootstrap.servers", cluster.bootstrap_servers());
    /// let mut store: KafkaOffsetStore<String, u64> =
    ///     KafkaOffsetStore::builder(&config, "source-offsets", "orders-source")
    ///         .check_topic(false) // the mock answers no CreateTopics / DescribeConfigs
    ///         .open()?;
    /// store.save(&HashMap::from([("orders.csv".to_string(), 41), ("users.csv".to_string(), 7)]))?;
    /// store.save(&HashMap::from([("orders.csv".to_string(), 42)]))?; // a merge
    /// let stored = store.load()?;
    /// assert_eq!((stored["orders.csv"], stored["users.csv"]), (42, 7));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_topic(mut self, check: bool) -> Self {
        self.check_topic = check;
        self
    }

    /// Opens the store: creates and checks the topic (see
    /// [`check_topic`](Self::check_topic)) and creates its producer. Reads
    /// nothing: [`load`](OffsetStore::load) does.
    pub fn open(self) -> Result<KafkaOffsetStore<P, O>, StoreError> {
        let kafka = |doing: &str| {
            let topic = self.topic.clone();
            let doing = doing.to_owned();
            move |error| {
                other(OffsetTopicError::Kafka {
                    topic,
                    doing,
                    error,
                })
            }
        };
        if self.check_topic {
            let admin: AdminClient<DefaultClientContext> = self
                .config
                .create()
                .map_err(kafka("creating an admin client"))?;
            let options = AdminOptions::new()
                .request_timeout(Some(self.timeout))
                .operation_timeout(Some(self.timeout));
            let topic = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(self.replication))
                .set("cleanup.policy", "compact");
            let created =
                block_on(admin.create_topics([&topic], &options)).map_err(kafka("creating it"))?;
            for result in created {
                match result {
                    Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((_, code)) => return Err(kafka("creating it")(KafkaError::AdminOp(code))),
                }
            }
            let described = block_on(
                admin.describe_configs([&ResourceSpecifier::Topic(&self.topic)], &options),
            )
            .map_err(kafka("describing its configuration"))?;
            let Some(described) = described.into_iter().next() else {
                return Err(kafka("describing its configuration")(
                    KafkaError::AdminOpCreation("no answer for the topic".into()),
                ));
            };
            let described = described
                .map_err(|code| kafka("describing its configuration")(KafkaError::AdminOp(code)))?;
            let policy = described
                .get("cleanup.policy")
                .and_then(|entry| entry.value.clone());
            if !only_compact(policy.as_deref()) {
                return Err(other(OffsetTopicError::NotCompacted {
                    topic: self.topic,
                    policy,
                }));
            }
        }
        let producer = self
            .config
            .clone()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "0")
            .create_with_context(Deliveries::default())
            .map_err(kafka("creating its producer"))?;
        Ok(KafkaOffsetStore {
            config: self.config,
            topic: self.topic,
            task: self.task,
            timeout: self.timeout,
            producer,
            saves: 0,
            _types: PhantomData,
        })
    }
}

/// Whether a `cleanup.policy` keeps the last record of every key for
/// ever: `compact` alone (`compact,delete` deletes old ones too; no policy
/// reported is Kafka's default, `delete`).
fn only_compact(policy: Option<&str>) -> bool {
    let Some(policy) = policy else { return false };
    let mut policies = policy.split(',').map(str::trim).filter(|p| !p.is_empty());
    policies.clone().next().is_some() && policies.all(|p| p == "compact")
}

impl<P, O> KafkaOffsetStore<P, O> {
    /// A builder for the store of `task`'s offsets in `topic`, reaching
    /// the brokers `config` names (its `bootstrap.servers` and security
    /// settings; the store sets what it needs on top).
    pub fn builder(
        config: &ClientConfig,
        topic: &str,
        task: &str,
    ) -> KafkaOffsetStoreBuilder<P, O> {
        KafkaOffsetStoreBuilder {
            config: config.clone(),
            topic: topic.to_owned(),
            task: task.to_owned(),
            timeout: Duration::from_secs(30),
            replication: -1,
            check_topic: true,
            _types: PhantomData,
        }
    }

    /// Opens the store of `task`'s offsets in `topic` with the defaults of
    /// [`builder`](Self::builder): the topic is created compacted if
    /// missing, refused if it is not compacted
    /// ([`OffsetTopicError::NotCompacted`] in [`StoreError::Other`]).
    pub fn open(config: &ClientConfig, topic: &str, task: &str) -> Result<Self, StoreError> {
        Self::builder(config, topic, task).open()
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The task whose offsets this store keeps.
    pub fn task(&self) -> &str {
        &self.task
    }

    /// How long each later save, remove and load may take (the builder's
    /// [`timeout`](KafkaOffsetStoreBuilder::timeout) until then): a task's
    /// last commit before it stops may wait longer than the regular ones.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn kafka(&self, doing: &str, error: KafkaError) -> StoreError {
        other(OffsetTopicError::Kafka {
            topic: self.topic.clone(),
            doing: doing.to_owned(),
            error,
        })
    }

    /// Produces `records` (key, value; no value: a tombstone) and waits
    /// until the broker has every one of them.
    fn write(&mut self, records: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        self.saves += 1;
        let save = self.saves;
        self.producer.context().begin(save);
        let deadline = crate::revocation::deadline_after(Instant::now(), self.timeout);
        for (key, value) in &records {
            let mut record =
                BaseRecord::<Vec<u8>, Vec<u8>, usize>::with_opaque_to(&self.topic, save)
                    .partition(0)
                    .key(key);
            if let Some(value) = value {
                record = record.payload(value);
            }
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((e, back)) if crate::producer::is_queue_full(&e) => {
                        if Instant::now() >= deadline {
                            return Err(self.kafka("saving", e));
                        }
                        record = back;
                        // Room comes as deliveries complete.
                        self.producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => return Err(self.kafka("saving", e)),
                }
            }
        }
        match self.producer.context().wait(records.len(), deadline) {
            Delivered::All => Ok(()),
            Delivered::Failed(key, error) => Err(other(OffsetTopicError::NotDelivered {
                topic: self.topic.clone(),
                key: String::from_utf8_lossy(&key).into_owned(),
                error,
            })),
            Delivered::TimedOut => Err(self.kafka(
                "waiting for the save's deliveries",
                KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut),
            )),
        }
    }
}

impl<P, O> KafkaOffsetStore<P, O>
where
    P: Serialize,
{
    /// The record key of `partition`: the JSON of `[task, partition]`.
    fn key(&self, partition: &P) -> Result<Vec<u8>, StoreError> {
        record_key(&self.task, partition).map_err(|e| self.encode_error(e))
    }

    fn encode_error(&self, e: serde_json::Error) -> StoreError {
        StoreError::Encode {
            path: PathBuf::from(&self.topic),
            reason: e.to_string(),
        }
    }
}

impl<P, O> OffsetStore<P, O> for KafkaOffsetStore<P, O>
where
    P: Serialize + DeserializeOwned + Hash + Eq,
    O: Serialize + DeserializeOwned,
{
    /// Reads the topic from its start to the end it had when the load
    /// began.
    fn load(&mut self) -> Result<HashMap<P, O>, StoreError> {
        // The last record per key, as compaction keeps it.
        let mut last: HashMap<Vec<u8>, Stored> = HashMap::new();
        let group = format!("{}-offsets-reader", self.task);
        read_to_end(&self.config, &group, &self.topic, self.timeout, |message| {
            let Some(key) = message.key() else { return };
            if let Some(partition) = ours(&self.task, key) {
                let value = message.payload().map(<[u8]>::to_vec);
                last.insert(key.to_vec(), (message.offset(), partition, value));
            }
        })
        .map_err(|e| self.kafka("loading", e))?;
        let mut records: Vec<_> = last.into_values().collect();
        records.sort_by_key(|&(offset, ..)| offset);
        let mut offsets = HashMap::with_capacity(records.len());
        for (at, partition_json, value) in records {
            let corrupt = |what: &str, e: serde_json::Error| StoreError::Corrupt {
                path: PathBuf::from(&self.topic),
                reason: format!(
                    "the {what} of partition {partition_json} in the record at {}/0@{at}: {e}",
                    self.topic
                ),
            };
            let partition: P =
                serde_json::from_value(partition_json.clone()).map_err(|e| corrupt("key", e))?;
            match value {
                None => {
                    offsets.remove(&partition);
                }
                Some(value) => {
                    let offset: O =
                        serde_json::from_slice(&value).map_err(|e| corrupt("offset", e))?;
                    offsets.insert(partition, offset);
                }
            }
        }
        Ok(offsets)
    }

    fn save(&mut self, offsets: &HashMap<P, O>) -> Result<(), StoreError> {
        let mut records = Vec::with_capacity(offsets.len());
        for (partition, offset) in offsets {
            let value = record_value(offset).map_err(|e| self.encode_error(e))?;
            records.push((self.key(partition)?, Some(value)));
        }
        self.write(records)
    }

    fn remove(&mut self, partitions: &[P]) -> Result<(), StoreError> {
        let records = partitions
            .iter()
            .map(|partition| Ok((self.key(partition)?, None)))
            .collect::<Result<_, StoreError>>()?;
        self.write(records)
    }
}

/// The key of `task`'s record for `partition`: the JSON of
/// `[task, partition]` (Connect's layout). The one encoding of a key, for
/// the store and for the transactional flush's offsets
/// (`transaction::OffsetsTopic`), which [`KafkaOffsetStore::load`] reads.
pub(crate) fn record_key<P: Serialize>(task: &str, partition: &P) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&(task, partition))
}

/// The value of a partition's record: the JSON of its offset.
pub(crate) fn record_value<O: Serialize>(offset: &O) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(offset)
}

/// A record of the task as a load found it: its offset in the topic, the
/// partition's JSON, and the value (none: a tombstone).
type Stored = (i64, Value, Option<Vec<u8>>);

/// The partition's JSON if `key` is a key of `task` (`[task, partition]`).
fn ours(task: &str, key: &[u8]) -> Option<Value> {
    let Ok(Value::Array(mut pair)) = serde_json::from_slice(key) else {
        return None;
    };
    if pair.len() != 2 || pair[0].as_str() != Some(task) {
        return None;
    }
    pair.pop()
}

/// Why a [`KafkaOffsetStore`] failed, inside [`StoreError::Other`]
/// (`downcast_ref` it to tell them apart).
#[derive(Debug)]
#[non_exhaustive]
pub enum OffsetTopicError {
    /// The topic exists with a cleanup policy other than `compact`: the
    /// broker would delete the offsets of quiet partitions. Recreate it
    /// with `cleanup.policy=compact`, or name another.
    NotCompacted {
        /// The topic.
        topic: String,
        /// Its `cleanup.policy`, if the broker reported one.
        policy: Option<String>,
    },
    /// A record of a save or remove was not delivered.
    NotDelivered {
        /// The topic.
        topic: String,
        /// The record's key.
        key: String,
        /// What librdkafka reported.
        error: KafkaError,
    },
    /// A request to the broker failed or timed out.
    Kafka {
        /// The topic.
        topic: String,
        /// What the store was doing.
        doing: String,
        /// What librdkafka reported.
        error: KafkaError,
    },
}

impl fmt::Display for OffsetTopicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotCompacted { topic, policy } => write!(
                f,
                "offset topic {topic} is not compacted (cleanup.policy={}): the broker would \
                 delete the offsets of quiet partitions; use a topic with cleanup.policy=compact",
                policy
                    .as_deref()
                    .unwrap_or("not reported, Kafka's default: delete")
            ),
            Self::NotDelivered { topic, key, error } => write!(
                f,
                "offset topic {topic}: the record of {key} was not delivered: {error}"
            ),
            Self::Kafka {
                topic,
                doing,
                error,
            } => write!(f, "offset topic {topic}: {doing}: {error}"),
        }
    }
}

impl std::error::Error for OffsetTopicError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NotCompacted { .. } => None,
            Self::NotDelivered { error, .. } | Self::Kafka { error, .. } => Some(error),
        }
    }
}

fn other(error: OffsetTopicError) -> StoreError {
    StoreError::Other(Box::new(error))
}

/// The delivery reports of the save in progress.
#[derive(Default)]
struct Deliveries {
    current: Mutex<Save>,
    /// Notified at each delivery report of the current save.
    reported: Condvar,
}

/// How a save's deliveries ended.
enum Delivered {
    All,
    /// The first record that failed: its key, and why.
    Failed(Vec<u8>, KafkaError),
    TimedOut,
}

#[derive(Default)]
struct Save {
    number: usize,
    delivered: usize,
    /// The first record that failed: its key, and why.
    failed: Option<(Vec<u8>, KafkaError)>,
}

impl Deliveries {
    fn begin(&self, number: usize) {
        let mut save = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        *save = Save {
            number,
            ..Save::default()
        };
    }

    /// Waits until the current save's `sent` records are delivered, one
    /// failed, or `deadline` passes.
    fn wait(&self, sent: usize, deadline: Instant) -> Delivered {
        let mut save = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some((key, error)) = save.failed.take() {
                return Delivered::Failed(key, error);
            }
            if save.delivered >= sent {
                return Delivered::All;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Delivered::TimedOut;
            }
            save = self
                .reported
                .wait_timeout(save, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    /// The number of the save the record belongs to.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, number: usize) {
        let mut save = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if save.number != number {
            return; // a late record of an earlier, failed save
        }
        match result {
            Ok(_) => save.delivered += 1,
            Err((error, message)) => {
                if save.failed.is_none() {
                    let key = message.key().unwrap_or_default().to_vec();
                    save.failed = Some((key, error.clone()));
                }
            }
        }
        drop(save);
        self.reported.notify_all();
    }
}

/// Drives a future (the admin client's) to completion on this thread.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::only_compact;

    #[test]
    fn only_compact_alone_keeps_every_key() {
        assert!(only_compact(Some("compact")));
        assert!(only_compact(Some(" compact ")));
        assert!(!only_compact(Some("delete")));
        assert!(
            !only_compact(Some("compact,delete")),
            "deletes old keys too"
        );
        assert!(!only_compact(Some("delete,compact")));
        assert!(!only_compact(Some("")));
        assert!(!only_compact(None), "Kafka's default is delete");
    }
}
