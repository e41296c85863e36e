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
use rdkafka::producer::{DefaultProducerContext, DeliveryResult, Partitioner, ProducerContext};
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
    /// The opaque of a record that carries no ticket: 0, which no ticket's
    /// raw value is (its tag is never 0).
    pub(crate) const NONE: Self = Self(0);

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

/// What a wrapped context's `delivery` gets when its opaque is `()`
/// (rdkafka's `DefaultProducerContext`, and most contexts): nothing, since
/// the ticket occupies the opaque.
impl From<TicketOpaque> for () {
    fn from(_: TicketOpaque) -> Self {}
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
///
/// It wraps a context of yours, `C` (rdkafka's `DefaultProducerContext`
/// unless you [`wrap`](Self::wrap) one), and every callback it does not
/// own goes to yours: `log`, `stats`, `stats_raw`, `error`,
/// `generate_oauth_token` (and `ENABLE_REFRESH_OAUTH_TOKEN`), and
/// `get_custom_partitioner`. `delivery` resolves the ticket **first**, then
/// calls yours with the same result, so your callback sees the tracker
/// already updated. The ticket occupies rdkafka's delivery opaque: yours
/// gets `C::DeliveryOpaque::from(TicketOpaque)`, which is `()` for a
/// context whose opaque is `()` and the ticket itself for one whose opaque
/// is [`TicketOpaque`].
///
/// ```no_run
/// use std::sync::Arc;
/// use inflight::Tracker;
/// use inflight_rdkafka::TrackingContext;
/// use rdkafka::client::ClientContext;
/// use rdkafka::config::ClientConfig;
/// use rdkafka::producer::{DeliveryResult, ProducerContext, ThreadedProducer};
///
/// /// A context of your own: it keeps its callbacks.
/// struct Logging;
/// impl ClientContext for Logging {
///     fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
///         eprintln!("producer: {error}: {reason}");
///     }
/// }
/// impl ProducerContext for Logging {
///     type DeliveryOpaque = ();
///     fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
///         if let Err((error, _)) = result {
///             eprintln!("not delivered: {error}");
///         }
///     }
/// }
///
/// let tracker = Arc::new(Tracker::<u32, u64>::new());
/// let producer: ThreadedProducer<TrackingContext<u32, u64, inflight::mode::Barrier, Logging>> =
///     ClientConfig::new()
///         .set("bootstrap.servers", "127.0.0.1:9092")
///         .create_with_context(TrackingContext::wrap(Logging, tracker.clone()))
///         .expect("producer");
/// ```
pub struct TrackingContext<P, O, M: Mode = Barrier, C = DefaultProducerContext> {
    tracker: Arc<Tracker<P, O, M>>,
    inner: C,
    delivered: AtomicU64,
    failed: AtomicU64,
    unresolved: AtomicU64,
}

impl<P, O, M: Mode> TrackingContext<P, O, M> {
    /// A context resolving the tickets of `tracker`, around rdkafka's
    /// `DefaultProducerContext`.
    pub fn new(tracker: Arc<Tracker<P, O, M>>) -> Self {
        Self::wrap(DefaultProducerContext, tracker)
    }
}

impl<P, O, M: Mode, C> TrackingContext<P, O, M, C> {
    /// A context resolving the tickets of `tracker` around `inner`, your
    /// context: its callbacks still run (see the type's docs for which and
    /// in what order).
    pub fn wrap(inner: C, tracker: Arc<Tracker<P, O, M>>) -> Self {
        Self {
            tracker,
            inner,
            delivered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            unresolved: AtomicU64::new(0),
        }
    }

    /// The tracker whose tickets it resolves.
    pub fn tracker(&self) -> &Arc<Tracker<P, O, M>> {
        &self.tracker
    }

    /// The context it wraps.
    pub fn inner(&self) -> &C {
        &self.inner
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

impl<P, O, M: Mode, C: ClientContext> ClientContext for TrackingContext<P, O, M, C>
where
    P: Send + Sync,
    O: Send + Sync,
{
    crate::delegate_client_context!(C);
}

impl<P, O, M: Mode, C, Part> ProducerContext<Part> for TrackingContext<P, O, M, C>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
    C: ProducerContext<Part>,
    C::DeliveryOpaque: From<TicketOpaque>,
    Part: Partitioner,
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
        self.inner.delivery(result, ticket.into());
    }

    fn get_custom_partitioner(&self) -> Option<&Part> {
        self.inner.get_custom_partitioner()
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

    /// A context of the user's: counts what reaches it.
    #[derive(Default)]
    struct Counting {
        deliveries: AtomicU64,
        errors: AtomicU64,
        stats: AtomicU64,
        /// Tickets still in flight when the delivery reached the user's
        /// callback.
        in_flight_seen: std::sync::Mutex<Vec<usize>>,
        tracker: std::sync::OnceLock<Arc<Tracker<u32, u64>>>,
    }

    impl ClientContext for Counting {
        fn error(&self, _: KafkaError, _: &str) {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        fn stats_raw(&self, _: &[u8]) {
            self.stats.fetch_add(1, Ordering::Relaxed);
        }
    }

    impl ProducerContext for Counting {
        type DeliveryOpaque = ();
        fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {
            self.deliveries.fetch_add(1, Ordering::Relaxed);
            let in_flight = self.tracker.get().map_or(usize::MAX, |t| t.in_flight());
            self.in_flight_seen.lock().unwrap().push(in_flight);
        }
    }

    #[test]
    fn the_wrapped_contexts_callbacks_still_run_after_the_ticket_resolves() {
        use rdkafka::config::ClientConfig;
        use rdkafka::mocking::MockCluster;
        use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
        use std::time::Duration;

        // librdkafka's in-process mock cluster: no broker needed.
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("sink", 1, 1).unwrap();
        let tracker = Arc::new(Tracker::<u32, u64>::new());
        let user = Counting::default();
        user.tracker.set(tracker.clone()).ok().unwrap();
        let producer: ThreadedProducer<TrackingContext<u32, u64, Barrier, Counting>> =
            ClientConfig::new()
                .set("bootstrap.servers", cluster.bootstrap_servers())
                .set("statistics.interval.ms", "10")
                .create_with_context(TrackingContext::wrap(user, tracker.clone()))
                .unwrap();
        for offset in 0..5 {
            let ticket = tracker.send(0, offset).unwrap();
            let record = BaseRecord::<(), str, TicketOpaque>::with_opaque_to("sink", ticket.into())
                .payload("v");
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(Duration::from_secs(30)).unwrap();
        assert_eq!(producer.context().counts(), (5, 0, 0));
        let user = producer.context().inner();
        assert_eq!(
            user.deliveries.load(Ordering::Relaxed),
            5,
            "the user's delivery ran"
        );
        // Each ticket was resolved before the user's callback saw it: the
        // last call saw nothing in flight.
        assert_eq!(user.in_flight_seen.lock().unwrap().last(), Some(&0));
        // The other callbacks: called as rdkafka would.
        let context = producer.context();
        context.error(KafkaError::Canceled, "test");
        context.stats_raw(b"{}");
        assert_eq!(user.errors.load(Ordering::Relaxed), 1);
        assert!(user.stats.load(Ordering::Relaxed) >= 1);
    }
}
