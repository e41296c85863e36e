//! Producing a record that carries a ticket, without leaking the ticket.
//!
//! rdkafka's `send` refuses a record at once when its queue is full or the
//! record is too large, and hands the record back with the error as a
//! tuple, which `?` cannot propagate. The obvious `.map_err(|(e, _)| e)?`
//! drops the record and with it its ticket: that record stays in flight for
//! ever, and every flush or drain that covers it times out.
//! [`SendTracked::send_tracked`] fails the ticket first (nothing will
//! deliver the record, so its offset is never committed past; see
//! [`Tracker::fail`](inflight::Tracker::fail)), then returns the error
//! alone, so `?` is safe; [`send_tracked_timeout`](SendTracked::send_tracked_timeout)
//! first serves deliveries and tries again while the queue is full.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use inflight::Tracker;
//! use inflight_rdkafka::{SendTracked, TicketOpaque, TrackingContext};
//! use rdkafka::config::ClientConfig;
//! use rdkafka::producer::{BaseRecord, ThreadedProducer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tracker = Arc::new(Tracker::<u32, u64>::new());
//! let producer: ThreadedProducer<TrackingContext<u32, u64>> = ClientConfig::new()
//!     .set("bootstrap.servers", "127.0.0.1:9092")
//!     .create_with_context(TrackingContext::new(tracker.clone()))?;
//! let ticket = tracker.send(3, 1_000)?;
//! let record = BaseRecord::<(), _, _>::with_opaque_to("sink", TicketOpaque::from(ticket)).payload("v");
//! // Waits up to a second for room in a full queue; a refusal fails the
//! // ticket before it returns the error.
//! producer.send_tracked_timeout(record, Duration::from_secs(1))?;
//! # Ok(()) }
//! ```

use crate::producer::{TicketOpaque, TrackingContext};
use inflight::mode::Mode;
use rdkafka::error::KafkaError;
use rdkafka::message::ToBytes;
use rdkafka::producer::{BaseProducer, BaseRecord, Partitioner, ProducerContext, ThreadedProducer};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Sending a record whose delivery opaque is its ticket
/// ([`TicketOpaque`]), on a producer whose context is a
/// [`TrackingContext`]: a refused record's ticket is failed, never leaked.
/// For `BaseProducer` and `ThreadedProducer`.
pub trait SendTracked {
    /// Sends `record`. If rdkafka refuses it (its queue is full, the record
    /// is too large, the topic is unknown...), its ticket is failed on the
    /// context's tracker, and the error is returned: nothing will deliver
    /// the record, and its offset is never committed past (the record is
    /// redone after a restart, or a [`revoke`](inflight::Tracker::revoke)
    /// of its partition).
    fn send_tracked<K, V>(
        &self,
        record: BaseRecord<'_, K, V, TicketOpaque>,
    ) -> Result<(), KafkaError>
    where
        K: ToBytes + ?Sized,
        V: ToBytes + ?Sized;

    /// [`send_tracked`](Self::send_tracked), but while the producer's
    /// queue is full it serves deliveries (`poll`, which makes room) and
    /// tries again, until `timeout` has passed: then, or on any other
    /// refusal, the ticket is failed and the error returned.
    fn send_tracked_timeout<K, V>(
        &self,
        record: BaseRecord<'_, K, V, TicketOpaque>,
        timeout: Duration,
    ) -> Result<(), KafkaError>
    where
        K: ToBytes + ?Sized,
        V: ToBytes + ?Sized;
}

/// What both producers offer: a send that hands a refused record back,
/// and a poll that serves deliveries.
trait Sender {
    type Tracked: FailTicket;

    fn tracked(&self) -> &Self::Tracked;

    // rdkafka's own `send`, whose refusal carries the record back.
    #[allow(clippy::result_large_err)]
    fn try_send<'a, K, V>(
        &self,
        record: BaseRecord<'a, K, V, TicketOpaque>,
    ) -> Result<(), (KafkaError, BaseRecord<'a, K, V, TicketOpaque>)>
    where
        K: ToBytes + ?Sized,
        V: ToBytes + ?Sized;

    fn serve(&self, timeout: Duration);
}

/// A context that can fail a ticket on its tracker.
trait FailTicket {
    fn fail_ticket(&self, ticket: TicketOpaque);
}

impl<P, O, M: Mode, C> FailTicket for TrackingContext<P, O, M, C>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    fn fail_ticket(&self, ticket: TicketOpaque) {
        // An error here means the ticket was not this tracker's live one
        // (a forged opaque): nothing is in flight for it either way.
        let _ = ticket.fail(self.tracker());
    }
}

fn send_within<S: Sender, K, V>(
    sender: &S,
    mut record: BaseRecord<'_, K, V, TicketOpaque>,
    deadline: Option<Instant>,
) -> Result<(), KafkaError>
where
    K: ToBytes + ?Sized,
    V: ToBytes + ?Sized,
{
    let mut pause = Duration::from_millis(1);
    loop {
        let (error, refused) = match sender.try_send(record) {
            Ok(()) => return Ok(()),
            Err(refused) => refused,
        };
        let now = Instant::now();
        match deadline {
            Some(deadline) if crate::producer::is_queue_full(&error) && now < deadline => {
                // Deliveries free the queue: serve them for a while.
                sender.serve(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(100));
                record = refused;
            }
            _ => {
                // The tracker's bookkeeping first; the record (user data,
                // borrowed) is dropped after.
                sender.tracked().fail_ticket(refused.delivery_opaque);
                return Err(error);
            }
        }
    }
}

macro_rules! send_tracked_for {
    ($producer:ident) => {
        impl<P, O, M: Mode, C, Part> Sender for $producer<TrackingContext<P, O, M, C>, Part>
        where
            P: Hash + Eq + Clone + Send + Sync + 'static,
            O: Clone + Send + Sync + 'static,
            M: 'static,
            C: ProducerContext<Part> + 'static,
            C::DeliveryOpaque: From<TicketOpaque>,
            Part: Partitioner,
        {
            type Tracked = TrackingContext<P, O, M, C>;

            fn tracked(&self) -> &Self::Tracked {
                rdkafka::producer::Producer::context(self)
            }

            fn try_send<'a, K, V>(
                &self,
                record: BaseRecord<'a, K, V, TicketOpaque>,
            ) -> Result<(), (KafkaError, BaseRecord<'a, K, V, TicketOpaque>)>
            where
                K: ToBytes + ?Sized,
                V: ToBytes + ?Sized,
            {
                self.send(record)
            }

            fn serve(&self, timeout: Duration) {
                self.poll(timeout);
            }
        }

        impl<P, O, M: Mode, C, Part> SendTracked for $producer<TrackingContext<P, O, M, C>, Part>
        where
            P: Hash + Eq + Clone + Send + Sync + 'static,
            O: Clone + Send + Sync + 'static,
            M: 'static,
            C: ProducerContext<Part> + 'static,
            C::DeliveryOpaque: From<TicketOpaque>,
            Part: Partitioner,
        {
            fn send_tracked<K, V>(
                &self,
                record: BaseRecord<'_, K, V, TicketOpaque>,
            ) -> Result<(), KafkaError>
            where
                K: ToBytes + ?Sized,
                V: ToBytes + ?Sized,
            {
                send_within(self, record, None)
            }

            fn send_tracked_timeout<K, V>(
                &self,
                record: BaseRecord<'_, K, V, TicketOpaque>,
                timeout: Duration,
            ) -> Result<(), KafkaError>
            where
                K: ToBytes + ?Sized,
                V: ToBytes + ?Sized,
            {
                // A deadline past what an `Instant` holds waits as long as
                // the queue stays full.
                let deadline = Instant::now()
                    .checked_add(timeout)
                    .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
                send_within(self, record, Some(deadline))
            }
        }
    };
}

send_tracked_for!(BaseProducer);
send_tracked_for!(ThreadedProducer);
