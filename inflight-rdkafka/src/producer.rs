//! The producer side: tickets as delivery opaques, and a delivery callback
//! that resolves them.
//!
//! ```no_run
//! use std::sync::Arc;
//! use inflight::Tracker;
//! use inflight_rdkafka::{TicketOpaque, TrackingContext};
//! use rdkafka::config::ClientConfig;
//! use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
//!
//! let tracker = Arc::new(Tracker::<u32, u64>::new());
//! let producer: ThreadedProducer<TrackingContext<u32, u64>> = ClientConfig::new()
//!     .set("bootstrap.servers", "127.0.0.1:9092")
//!     .create_with_context(TrackingContext::new(tracker.clone()))
//!     .expect("producer");
//! // A source record: partition 3, offset 1000 of the source.
//! let ticket = tracker.send(3, 1_000).expect("room");
//! let record = BaseRecord::with_opaque_to("sink", TicketOpaque::from(ticket))
//!     .key("k")
//!     .payload("v");
//! if let Err((_error, refused)) = producer.send(record) {
//!     // Refused at once (queue full, too large...): nothing will deliver it.
//!     let _ = refused.delivery_opaque.fail(&tracker);
//! }
//! // Later the delivery callback acks the ticket; flushes and watermarks
//! // then cover source offset 1000.
//! ```

use inflight::mode::{Barrier, Mode};
use inflight::{ResolveError, Ticket, Tracker};
use rdkafka::client::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::util::IntoOpaque;
use std::ffi::c_void;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A ticket as rdkafka's delivery opaque: its raw `u64` carried in the
/// pointer itself, so a record costs no allocation (rather than a
/// `Box<u64>`). The pointer is never dereferenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketOpaque(u64);

impl From<Ticket> for TicketOpaque {
    fn from(ticket: Ticket) -> Self {
        Self(ticket.into_raw())
    }
}

impl TicketOpaque {
    /// The ticket's raw value ([`Ticket::into_raw`]).
    pub fn raw(self) -> u64 {
        self.0
    }

    /// Acks the ticket on `tracker`.
    pub fn ack<P, O, M: Mode>(self, tracker: &Tracker<P, O, M>) -> Result<(), ResolveError>
    where
        P: Hash + Eq + Clone + Send + Sync,
        O: Clone + Send + Sync,
    {
        tracker.ack_raw(self.0)
    }

    /// Fails the ticket on `tracker`: for a record the producer refused at
    /// `send`, which no delivery callback will report.
    pub fn fail<P, O, M: Mode>(self, tracker: &Tracker<P, O, M>) -> Result<(), ResolveError>
    where
        P: Hash + Eq + Clone + Send + Sync,
        O: Clone + Send + Sync,
    {
        tracker.fail_raw(self.0)
    }
}

impl IntoOpaque for TicketOpaque {
    fn into_ptr(self) -> *mut c_void {
        // A 64-bit target (see the crate root): the value fits the address.
        std::ptr::without_provenance_mut(self.0 as usize)
    }

    unsafe fn from_ptr(ptr: *mut c_void) -> Self {
        // Never dereferenced: the address is the value.
        Self(ptr.addr() as u64)
    }
}

/// A producer context whose delivery callback resolves each record's
/// ticket: acked when the broker has the record, failed when its delivery
/// failed for good (librdkafka retries before it reports). Counts both, and
/// tickets that would not resolve (never expected: a ticket travels with
/// one record).
pub struct TrackingContext<P, O, M: Mode = Barrier> {
    tracker: Arc<Tracker<P, O, M>>,
    delivered: AtomicU64,
    failed: AtomicU64,
    unresolved: AtomicU64,
}

impl<P, O, M: Mode> TrackingContext<P, O, M> {
    /// A context resolving the tickets of `tracker`.
    pub fn new(tracker: Arc<Tracker<P, O, M>>) -> Self {
        Self {
            tracker,
            delivered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            unresolved: AtomicU64::new(0),
        }
    }

    /// The tracker whose tickets it resolves.
    pub fn tracker(&self) -> &Arc<Tracker<P, O, M>> {
        &self.tracker
    }

    /// Deliveries reported: `(delivered, failed, tickets that did not
    /// resolve)`.
    pub fn counts(&self) -> (u64, u64, u64) {
        // Relaxed: statistics.
        (
            self.delivered.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.unresolved.load(Ordering::Relaxed),
        )
    }
}

impl<P, O, M: Mode> ClientContext for TrackingContext<P, O, M>
where
    P: Send + Sync,
    O: Send + Sync,
{
}

impl<P, O, M: Mode> ProducerContext for TrackingContext<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    type DeliveryOpaque = TicketOpaque;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: TicketOpaque) {
        let resolved = match result {
            Ok(_) => {
                // Relaxed: statistics.
                self.delivered.fetch_add(1, Ordering::Relaxed);
                ticket.ack(&self.tracker)
            }
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                ticket.fail(&self.tracker)
            }
        };
        if resolved.is_err() {
            self.unresolved.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Resolves `ticket` from a delivery's result, for producers whose opaque
/// is not the ticket (a `FutureProducer` awaits its own): acked on `Ok`,
/// failed on `Err`.
///
/// ```
/// use inflight::Tracker;
/// let tracker = Tracker::<u32, u64>::new();
/// let ticket = tracker.send(3, 1_000).expect("room");
/// // With rdkafka's `tokio` feature, what a `FutureProducer` hands back:
/// // let delivery = producer.send(record, timeout).await;
/// let delivery: Result<(i32, i64), ()> = Ok((0, 42)); // (partition, offset)
/// inflight_rdkafka::resolve_delivery(&tracker, ticket, &delivery).expect("a live ticket");
/// assert_eq!(tracker.in_flight(), 0);
/// ```
pub fn resolve_delivery<P, O, M: Mode, T, E>(
    tracker: &Tracker<P, O, M>,
    ticket: Ticket,
    delivery: &Result<T, E>,
) -> Result<(), ResolveError>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    match delivery {
        Ok(_) => tracker.ack(ticket),
        Err(_) => tracker.fail(ticket),
    }
}

/// Whether `error` means the producer's queue is full: the record came
/// back, and sending it again after serving deliveries (`poll`) may
/// succeed; any other refusal is final (fail its ticket).
pub fn is_queue_full(error: &KafkaError) -> bool {
    matches!(
        error,
        KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_survives_the_opaque_round_trip() {
        let tracker = Tracker::<u32, u64>::new();
        let ticket = tracker.send(1, 7).unwrap();
        let raw = ticket.into_raw();
        let tickets = [raw, 0, u64::MAX, 1 << 63];
        for value in tickets {
            let ptr = TicketOpaque(value).into_ptr();
            // SAFETY: made by `into_ptr` just above.
            let back = unsafe { TicketOpaque::from_ptr(ptr) };
            assert_eq!(back.raw(), value);
        }
        let ptr = TicketOpaque(raw).into_ptr();
        // SAFETY: made by `into_ptr` just above.
        let back = unsafe { TicketOpaque::from_ptr(ptr) };
        back.ack(&tracker).unwrap();
        assert_eq!(tracker.in_flight(), 0);
        assert_eq!(back.ack(&tracker), Err(ResolveError::AlreadyResolved));
    }

    #[test]
    fn a_future_delivery_resolves_its_ticket() {
        let tracker = Tracker::<u32, u64>::builder().watermarks().build();
        let ok = tracker.send(1, 7).unwrap();
        let failed = tracker.send(2, 9).unwrap();
        resolve_delivery(&tracker, ok, &Ok::<(), ()>(())).unwrap();
        resolve_delivery(&tracker, failed, &Err::<(), ()>(())).unwrap();
        let committable = tracker.committable_with_stats();
        assert_eq!(committable.offsets.get(&1), Some(&7));
        assert_eq!(committable.stopped, vec![2]);
    }
}
