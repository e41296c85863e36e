//! Plain rdkafka plumbing: client configuration, the reachability check,
//! topic creation, and reading a topic from its beginning to its end.
//!
//! No async runtime: the admin client's future is driven by [`block_on`],
//! a dozen lines over `std::thread::park`.

use crate::Error;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// How long a request may take before the broker counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The settings every client here shares.
pub fn client_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        // Fail a connection attempt quickly: the broker is on this host.
        .set("socket.connection.setup.timeout.ms", "2000")
        .set("reconnect.backoff.ms", "50")
        .set("reconnect.backoff.max.ms", "500")
        // librdkafka logs through the `log` crate, which nothing here
        // installs; errors reach the caller as values instead.
        .set("log_level", "3");
    config
}

/// Asks the broker for its metadata; a clear [`Error::Unreachable`] if no
/// answer comes within `within`.
pub fn check_reachable(brokers: &str, within: Duration) -> Result<(), Error> {
    let consumer: BaseConsumer = client_config(brokers)
        .create()
        .map_err(|e| Error::kafka("creating a client", e))?;
    consumer
        .fetch_metadata(None, within)
        .map(drop)
        .map_err(|e| Error::Unreachable {
            brokers: brokers.into(),
            waited: within,
            cause: e.to_string(),
        })
}

/// Repeats the metadata request until the broker answers or `deadline`
/// passes (each request blocks for at most a second: no sleeping).
pub fn wait_ready(brokers: &str, deadline: Duration) -> Result<Duration, Error> {
    let started = Instant::now();
    let consumer: BaseConsumer = client_config(brokers)
        .create()
        .map_err(|e| Error::kafka("creating a client", e))?;
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        match consumer.fetch_metadata(None, left.min(Duration::from_secs(1))) {
            Ok(_) => return Ok(started.elapsed()),
            Err(e) if started.elapsed() >= deadline => {
                return Err(Error::Unreachable {
                    brokers: brokers.into(),
                    waited: deadline,
                    cause: e.to_string(),
                })
            }
            Err(_) => {}
        }
    }
}

/// A topic to create: name, partitions, and topic configuration.
pub type TopicSpec<'a> = (&'a str, i32, &'a [(&'a str, &'a str)]);

/// Creates the topics that do not exist yet (single replica).
pub fn create_topics(brokers: &str, topics: &[TopicSpec<'_>]) -> Result<(), Error> {
    let admin: AdminClient<DefaultClientContext> = client_config(brokers)
        .create()
        .map_err(|e| Error::kafka("creating an admin client", e))?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|&(name, partitions, config)| {
            config.iter().fold(
                NewTopic::new(name, partitions, TopicReplication::Fixed(1)),
                |topic, &(key, value)| topic.set(key, value),
            )
        })
        .collect();
    let options = AdminOptions::new().request_timeout(Some(CONNECT_TIMEOUT));
    let results = block_on(admin.create_topics(&new, &options))
        .map_err(|e| Error::kafka("creating topics", e))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => return Err(Error::kafka(format!("creating topic {name}"), code)),
        }
    }
    // The metadata of a new topic reaches the clients through the next
    // metadata request; make sure it answers before anyone produces.
    let consumer: BaseConsumer = client_config(brokers)
        .create()
        .map_err(|e| Error::kafka("creating a client", e))?;
    for &(name, partitions, _) in topics {
        let metadata = consumer
            .fetch_metadata(Some(name), CONNECT_TIMEOUT)
            .map_err(|e| Error::kafka(format!("metadata of {name}"), e))?;
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == name)
            .map_or(0, |t| t.partitions().len());
        if found != partitions as usize {
            return Err(Error::kafka(
                format!("topic {name}"),
                format!("{found} partitions after creating it with {partitions}"),
            ));
        }
    }
    Ok(())
}

/// One record read back.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
}

/// Reads partitions `0..partitions` of `topic` from their beginning to
/// their end, in offset order per partition. Meant for a topic nobody
/// writes to meanwhile (records written during the read may or may not be
/// in it). Fails if the end is not reached within `deadline`.
///
/// The end is where librdkafka reports `PartitionEOF`, that is the high
/// watermark of a fetch response. Not `fetch_watermarks`: tansu 0.6.0
/// (memory storage) answers a ListOffsets(latest) request with the base
/// offset of the last *batch* plus one, short of the end whenever that
/// batch holds more than one record.
pub fn read_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    deadline: Duration,
) -> Result<Vec<Record>, Error> {
    let started = Instant::now();
    let consumer: BaseConsumer = client_config(brokers)
        // `assign` wants a group id, though nothing is committed to it.
        .set("group.id", "kafka-e2e-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "50")
        .create()
        .map_err(|e| Error::kafka("creating a consumer", e))?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .map_err(|e| Error::kafka("assignment", e))?;
    }
    consumer
        .assign(&assignment)
        .map_err(|e| Error::kafka(format!("assigning {topic}"), e))?;
    let mut at_end = vec![false; partitions as usize];
    // The next offset expected per partition.
    let mut next = vec![0_i64; partitions as usize];
    let mut records = Vec::new();
    while at_end.contains(&false) {
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(Error::kafka(
                format!("reading {topic}"),
                format!("no end after {deadline:?}: read up to offsets {next:?}"),
            ));
        }
        let message = match consumer.poll(left.min(Duration::from_millis(500))) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                if let Some(end) = at_end.get_mut(partition as usize) {
                    *end = true;
                }
                continue;
            }
            Some(Err(e)) => return Err(Error::kafka(format!("reading {topic}"), e)),
            Some(Ok(message)) => message,
        };
        let partition = message.partition();
        let Some(slot) = next.get_mut(partition as usize) else {
            continue;
        };
        if message.offset() < *slot {
            continue; // fetched again
        }
        *slot = message.offset() + 1;
        at_end[partition as usize] = false;
        records.push(Record {
            partition,
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
        });
    }
    Ok(records)
}

/// Drives a future to completion on this thread.
pub fn block_on<F: Future>(future: F) -> F::Output {
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
