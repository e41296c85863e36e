//! `SendTracked` on librdkafka's mock cluster: a record the producer
//! refuses (queue full, too large) has its ticket failed, never leaked, and
//! `send_tracked_timeout` serves deliveries until a full queue has room.

use inflight::{FlushError, ResolveError, Tracker};
use inflight_rdkafka::{SendTracked, TicketOpaque, TrackingContext};
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use std::sync::Arc;
use std::time::Duration;

/// Generous: reaching it means the queue never made room.
const SAFETY_NET: Duration = Duration::from_secs(60);

type Contexted = TrackingContext<u32, u64>;

fn cluster() -> MockCluster<'static, DefaultProducerContext> {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink", 1, 1).unwrap();
    cluster
}

/// A producer whose queue holds one record (so a second, unserved, is
/// refused `QueueFull`) and whose records are at most 2,000 bytes.
fn config(cluster: &MockCluster<'static, DefaultProducerContext>) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("queue.buffering.max.messages", "1")
        .set("message.max.bytes", "2000");
    config
}

fn record(ticket: TicketOpaque) -> BaseRecord<'static, (), str, TicketOpaque> {
    BaseRecord::with_opaque_to("sink", ticket)
        .partition(0)
        .payload("v")
}

#[test]
fn a_refused_record_fails_its_ticket_and_leaks_nothing() {
    let cluster = cluster();
    let tracker = Arc::new(Tracker::<u32, u64>::new());
    let producer: BaseProducer<Contexted> = config(&cluster)
        .create_with_context(TrackingContext::new(tracker.clone()))
        .unwrap();
    let first = TicketOpaque::from(tracker.send(0, 1).unwrap());
    producer.send_tracked(record(first)).unwrap();
    // Nothing served the first: the queue is full.
    let second = TicketOpaque::from(tracker.send(0, 2).unwrap());
    let refused = producer.send_tracked(record(second)).unwrap_err();
    assert!(
        inflight_rdkafka::producer::is_queue_full(&refused),
        "{refused:?}"
    );
    assert_eq!(
        tracker.ack_raw(second.raw()),
        Err(ResolveError::AlreadyResolved),
        "failed by send_tracked"
    );
    // Too large: refused for good, at once, even with time to wait.
    let big = "x".repeat(4_000);
    let third = TicketOpaque::from(tracker.send(0, 3).unwrap());
    let too_large = BaseRecord::<(), str, _>::with_opaque_to("sink", third)
        .partition(0)
        .payload(big.as_str());
    let refused = producer
        .send_tracked_timeout(too_large, SAFETY_NET)
        .unwrap_err();
    assert!(
        !inflight_rdkafka::producer::is_queue_full(&refused),
        "{refused:?}"
    );
    assert_eq!(
        tracker.ack_raw(third.raw()),
        Err(ResolveError::AlreadyResolved)
    );
    // Only the first is in flight; the flush covering the refused ones
    // fails (their offsets are never committed past) instead of waiting.
    producer.flush(SAFETY_NET).unwrap();
    assert_eq!(
        tracker.in_flight(),
        0,
        "the first delivered, the others failed"
    );
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Failed { failed: 2 })
    );
}

#[test]
fn send_tracked_timeout_waits_for_room_in_a_full_queue() {
    let cluster = cluster();
    let tracker = Arc::new(Tracker::<u32, u64>::new());
    let base: BaseProducer<Contexted> = config(&cluster)
        .create_with_context(TrackingContext::new(tracker.clone()))
        .unwrap();
    let threaded: ThreadedProducer<Contexted> = config(&cluster)
        .create_with_context(TrackingContext::new(tracker.clone()))
        .unwrap();
    for offset in 0..6 {
        // The queue holds one: each send after the first waits for the
        // delivery of the one before (served by the wait's own polls).
        let ticket = TicketOpaque::from(tracker.send(0, offset).unwrap());
        base.send_tracked_timeout(record(ticket), SAFETY_NET)
            .unwrap();
        let ticket = TicketOpaque::from(tracker.send(1, offset).unwrap());
        threaded
            .send_tracked_timeout(record(ticket), SAFETY_NET)
            .unwrap();
    }
    base.flush(SAFETY_NET).unwrap();
    threaded.flush(SAFETY_NET).unwrap();
    assert_eq!(tracker.in_flight(), 0);
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = flush.wait(Duration::ZERO).unwrap();
    assert_eq!((offsets[&0], offsets[&1]), (5, 5));
    flush.commit().unwrap();
}
