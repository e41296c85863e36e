//! `inflight` against a real Kafka-protocol broker.
//!
//! A *worker* ([`worker`]) reads a verifiable source (per source partition,
//! the sequence numbers 0, 1, 2, …), produces each record through an
//! rdkafka `ThreadedProducer` and tracks it in an [`inflight::Tracker`]: the
//! ticket travels as the record's delivery opaque and librdkafka's delivery
//! callback acks it (delivered) or fails it (failed for good). A committer
//! flushes the tracker every few milliseconds and stores the committed
//! offsets the way Kafka Connect does, as keyed records in an offsets topic
//! ([`offsets`]: `inflight_rdkafka::KafkaOffsetStore`, through
//! `Tracker::flush_to`); only when that write is delivered does it commit
//! the flush. On start a worker reads the offsets topic back and resumes
//! after it.
//!
//! [`bounce`] bounces worker processes (clean stops and SIGKILLs) and then
//! reads the data topic back to check that nothing is missing and that no
//! clean bounce duplicated anything. [`broker`] starts and stops a tansu
//! broker for the fault tests. [`group`] is the consumer-group system
//! test: worker processes in one group, consuming, processing out of order
//! and producing to a sink, joined, stopped and killed by a driver.
//! `kafka-e2e/run` does all of it.

pub mod bounce;
pub mod broker;
pub mod exactly_once;
pub mod group;
pub mod kafka;
pub mod keyed;
pub mod offsets;
pub mod worker;

use std::fmt;
use std::time::Duration;

/// What went wrong, in words a person running the scenario can act on.
#[derive(Debug)]
pub enum Error {
    /// No broker answered a metadata request in time.
    Unreachable {
        brokers: String,
        waited: Duration,
        cause: String,
    },
    /// The broker answered but refused or failed a request.
    Kafka { what: String, cause: String },
    /// A record's delivery failed for good; nothing at or past it was
    /// committed.
    Delivery(String),
    /// The scenario's own checks or I/O.
    Other(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unreachable {
                brokers,
                waited,
                cause,
            } => write!(
                f,
                "Kafka broker not reachable at {brokers}: no metadata within {waited:?} ({cause})"
            ),
            Error::Kafka { what, cause } => write!(f, "Kafka: {what}: {cause}"),
            Error::Delivery(message) => write!(f, "delivery failed: {message}"),
            Error::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    pub(crate) fn kafka(what: impl Into<String>, cause: impl fmt::Display) -> Error {
        Error::Kafka {
            what: what.into(),
            cause: cause.to_string(),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Other(format!("I/O: {e}"))
    }
}
