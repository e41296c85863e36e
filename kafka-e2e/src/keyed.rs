//! Keyed records to partition 0 of a one-partition topic, each write
//! awaited until the broker has every record of it: what the consumer
//! group's ledger (`group/ledger.rs`) writes with, the last value per key
//! winning when it is read back.

use crate::kafka::client_config;
use crate::Error;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::producer::{NoCustomPartitioner, PurgeConfig};
use rdkafka::ClientContext;
use std::sync::{mpsc, Mutex, PoisonError};
use std::time::Duration;

/// Reports each record's delivery, tagged with its write.
struct WriteContext {
    delivered: Mutex<mpsc::Sender<(usize, Result<(), String>)>>,
}

impl ClientContext for WriteContext {}

impl ProducerContext<NoCustomPartitioner> for WriteContext {
    /// The number of the write the record belongs to.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, write: usize) {
        let result = result.as_ref().map(drop).map_err(|(e, _)| e.to_string());
        // The receiver lives as long as the writer; a send can only fail
        // while the writer is being dropped, when nobody waits any more.
        let _ = self
            .delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send((write, result));
    }
}

/// Writes keyed records to one topic, a write at a time.
pub struct KeyedWriter {
    topic: String,
    /// What the records are, for errors ("ledger").
    what: &'static str,
    producer: BaseProducer<WriteContext>,
    delivered: mpsc::Receiver<(usize, Result<(), String>)>,
    writes: usize,
}

impl KeyedWriter {
    /// A writer to partition 0 of `topic`.
    pub fn new(brokers: &str, topic: &str, what: &'static str) -> Result<KeyedWriter, Error> {
        let (tx, rx) = mpsc::channel();
        let producer = client_config(brokers)
            .set("linger.ms", "0")
            .set("acks", "all")
            // Writes reach the broker in the order they were made, so that
            // the last value per key is the newest one.
            .set("max.in.flight.requests.per.connection", "1")
            // A write that cannot be delivered within this fails; the next
            // write carries newer values anyway.
            .set("message.timeout.ms", "5000")
            .create_with_context(WriteContext {
                delivered: Mutex::new(tx),
            })
            .map_err(|e| Error::kafka(format!("creating the {what} producer"), e))?;
        Ok(KeyedWriter {
            topic: topic.into(),
            what,
            producer,
            delivered: rx,
            writes: 0,
        })
    }

    /// Writes `records` (key, value) and returns once the broker has them
    /// all, or fails. Nothing to write succeeds at once.
    pub fn write(&mut self, records: &[(String, String)], timeout: Duration) -> Result<(), Error> {
        if records.is_empty() {
            return Ok(());
        }
        let what = self.what;
        self.writes += 1;
        let write = self.writes;
        for (key, value) in records {
            let record = BaseRecord::with_opaque_to(&self.topic, write)
                .partition(0)
                .key(key)
                .payload(value);
            if let Err((e, _)) = self.producer.send(record) {
                self.discard();
                return Err(Error::kafka(format!("writing {what}"), e));
            }
        }
        // `flush` serves the delivery callbacks.
        if let Err(e) = self.producer.flush(timeout) {
            self.discard();
            return Err(Error::kafka(format!("writing {what}"), e));
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
            Some(e) => Err(Error::kafka(format!("{what} record not delivered"), e)),
            None if outcomes != records.len() => Err(Error::Other(format!(
                "{what} write {write}: {outcomes} of {} deliveries reported",
                records.len()
            ))),
            None => Ok(()),
        }
    }

    /// Drops whatever a failed write left queued, so that it does not pile
    /// up while the broker is away. (A purged record that already reached
    /// the broker may still land there: harmless, its values were true.)
    fn discard(&self) {
        self.producer
            .purge(PurgeConfig::default().queue().inflight());
        self.producer.poll(Duration::ZERO);
        while self.delivered.try_recv().is_ok() {}
    }
}
