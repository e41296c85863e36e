//! The hand-off against librdkafka's mock cluster, where its order of steps
//! meets rdkafka's: a final commit that carries what an asynchronous
//! commit still had on its way (and a failure of either that reaches the
//! user), an interrupt left to the user's own wait, and a consumer dropped
//! (or unwound by a panic) in the middle of a deferred hand-off.
//!
//! Every wait is a poll loop on the condition, with a deadline that only
//! reports a hang.

mod common;

use common::*;
use inflight::{DrainError, Progress, ProgressTracker, ResolveError, Tracker};
use inflight_rdkafka::{commit_progress, HandOffContext, ProgressStore, TopicPartition};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::topic_partition_list::Offset;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A consumer of `source` (the default hand-off, in rdkafka's callback)
/// that consumed all ten records; `each` decides per offset whether to
/// keep the ticket (return it) or ack it.
fn consumed(
    cluster: &rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    tracker: &Arc<ProgressTracker<TopicPartition, i64>>,
    drain_timeout: Duration,
    keep: i64,
) -> (
    BaseConsumer<HandOffContext<inflight::mode::Progress, Recording>>,
    Option<inflight::Ticket>,
) {
    let context = HandOffContext::wrap(Recording::default(), tracker.clone(), drain_timeout);
    let a = consumer(cluster, context);
    a.subscribe(&["source"]).unwrap();
    let seen = std::cell::Cell::new(0);
    let mut kept = None;
    poll_until(
        &a,
        |message| {
            let partition = TopicPartition::new(message.topic(), message.partition());
            let ticket = tracker.send(partition, message.offset()).unwrap();
            if message.offset() == keep {
                kept = Some(ticket);
            } else {
                tracker.ack(ticket).unwrap();
            }
            seen.set(seen.get() + 1);
        },
        |_| seen.get() == 10,
    );
    (a, kept)
}

/// What the group committed for partition 0 of `source`.
fn committed<C: rdkafka::consumer::ConsumerContext>(consumer: &BaseConsumer<C>) -> Offset {
    consumer
        .committed_offsets(source_from_the_beginning(), Duration::from_secs(10))
        .unwrap()
        .find_partition("source", 0)
        .unwrap()
        .offset()
}

#[test]
fn the_final_commit_carries_a_point_still_on_its_way_and_its_failure_reaches_the_user() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let (a, _) = consumed(&cluster, &tracker, Duration::from_secs(5), -1);
    // All ten are done; their point goes out asynchronously, and the
    // broker refuses that commit.
    cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE],
    );
    assert_eq!(commit_progress(&a, CommitMode::Async).unwrap(), 1);
    // The hand-off starts before its result came back.
    a.unsubscribe();
    poll_until(
        &a,
        |_| {},
        |c| {
            c.assignment().unwrap().count() == 0
                && c.context()
                    .inner()
                    .events()
                    .iter()
                    .any(|e| e == "commit failed")
        },
    );
    let context = a.context();
    assert_eq!(
        context.commit_failures(),
        1,
        "a failure for a partition handed off counts too"
    );
    // The final commit did not skip the point that was on its way.
    assert_eq!(committed(&a), Offset::Offset(10));
}

/// The order the review found, made certain: an asynchronous commit is on
/// its way (its result comes only with a poll) when a deferred hand-off
/// ends. The final commit carries its point all the same (the topic store
/// the hand-off saves in shows it), and its failure, which comes after the
/// hand-off, counts and is reported as a handed-off partition's.
#[test]
fn a_commit_on_its_way_when_a_hand_off_ends_is_in_its_final_commit_and_its_failure_counts() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let (a, stuck) = consumed_all_but_3(&cluster, &tracker, Duration::from_secs(600), "range");
    let b = joins(&cluster, "source", "range");
    poll_both(&a, &b, || a.context().is_handing_off());
    tracker.ack(stuck).unwrap();
    cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE],
    );
    let context = a.context();
    // All ten are done: their point goes out asynchronously (no hand-off
    // look, no poll)...
    assert_eq!(
        context
            .commits()
            .commit(&a, &*tracker, CommitMode::Async)
            .unwrap(),
        1
    );
    // ...and the hand-off ends before its result can come.
    assert!(!inflight_rdkafka::continue_hand_off(&a));
    assert_eq!(saved(&cluster), Progress::at(10), "in the final commit");
    let failures = context.commit_failures();
    // A failed final commit reached your `commit_callback` already (review
    // finding 4); the asynchronous one's result comes with a poll.
    let failed = || {
        context
            .inner()
            .events()
            .iter()
            .filter(|e| *e == "commit failed")
            .count()
    };
    let before = failed();
    poll_both(&a, &b, || failed() > before);
    // Both reach the user: the late failure too.
    assert!(context.commit_failures() > failures);
    let errors = context.errors();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("source/0") && e.contains("after their hand-off")),
        "{errors:?}"
    );
}

#[test]
fn a_hand_off_leaves_the_users_interrupt_to_the_users_wait() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let (a, stuck) = consumed(&cluster, &tracker, Duration::from_secs(30), 3);
    let stuck = stuck.unwrap();
    // A record of the user's own, which the user's wait waits for.
    let _other = tracker.send(TopicPartition::new("other", 0), 0).unwrap();
    // Offset 3 is done on another thread once the hand-off began.
    let acker = {
        let (context, tracker) = (a.context().clone(), tracker.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !context
                .inner()
                .events()
                .iter()
                .any(|e| e.starts_with("pre revoke"))
            {
                assert!(Instant::now() < deadline, "no revocation");
                std::thread::yield_now();
            }
            tracker.ack(stuck)
        })
    };
    // The user interrupts a wait of theirs (before it starts: the
    // interrupt waits for it)...
    tracker.interrupt();
    a.unsubscribe();
    poll_until(&a, |_| {}, |c| c.assignment().unwrap().count() == 0);
    // ...the hand-off neither took it nor gave up: it waited for offset 3.
    assert_eq!(acker.join().unwrap(), Ok(()), "not released");
    let errors = a.context().errors();
    assert!(
        !errors.iter().any(|e| e.contains("nterrupted")),
        "{errors:?}"
    );
    assert_eq!(committed(&a), Offset::Offset(10));
    // The user's wait gets the interrupt.
    assert_eq!(tracker.drain(Duration::ZERO), Err(DrainError::Interrupted));
}

/// Drops `a` on another thread while `b` polls; returns once the drop did.
/// (The deadline only reports a hang.)
fn drop_polling<C: rdkafka::consumer::ConsumerContext + 'static>(
    a: BaseConsumer<C>,
    b: &BaseConsumer<HandOffContext>,
) {
    let (closed, close) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(a);
        closed.send(()).unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while close.try_recv().is_err() {
        assert!(Instant::now() < deadline, "the consumer did not close");
        let _ = b.poll(Duration::from_millis(10));
    }
}

/// What the hand-off saved in its topic store for partition 0 of
/// `source`, if anything.
fn saved_if_any(
    cluster: &rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
) -> Option<Progress> {
    let mut nothing = rdkafka::TopicPartitionList::new();
    nothing
        .add_partition_offset("source", 0, Offset::Invalid)
        .unwrap();
    let mut back = store(cluster, "group")
        .load(&nothing, Duration::from_secs(10))
        .unwrap();
    back.remove(&TopicPartition::new("source", 0))
}

// librdkafka's close does not wait for a revocation the application has
// not let go: it may end the group at once, and then answers no commit
// (the mock cluster's often does, in milliseconds). So a dropped
// consumer's hand-off commits what was done if the group still answers
// (best effort, asserted as "nothing, or exactly what was done"), and
// always releases the records and returns.

#[test]
fn a_consumer_dropped_during_a_deferred_hand_off_releases_its_records_and_returns() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let (a, stuck) = consumed_all_but_3(&cluster, &tracker, Duration::from_secs(2), "range");
    let b = joins(&cluster, "source", "range");
    poll_both(&a, &b, || a.context().is_handing_off());
    // Offset 3 never comes; no `finish_hand_off`: the consumer is dropped
    // while the hand-off waits.
    drop_polling(a, &b);
    assert_eq!(tracker.in_flight(), 0, "released");
    assert_eq!(tracker.ack(stuck), Err(ResolveError::Revoked));
    if let Some(back) = saved_if_any(&cluster) {
        assert_eq!(back.next(), 3, "what was done, if anything");
        assert!(back.is_done(4) && back.is_done(9));
    }
}

#[test]
fn a_consumer_dropped_once_its_hand_off_could_finish_returns() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let (a, stuck) = consumed_all_but_3(&cluster, &tracker, Duration::from_secs(600), "range");
    let b = joins(&cluster, "source", "range");
    poll_both(&a, &b, || a.context().is_handing_off());
    // Offset 3 is done, but nothing looked since: the drop finishes it.
    tracker.ack(stuck).unwrap();
    drop_polling(a, &b);
    assert_eq!(tracker.in_flight(), 0);
    if let Some(back) = saved_if_any(&cluster) {
        assert_eq!(back, Progress::at(10));
    }
}

#[test]
fn a_panic_during_a_deferred_hand_off_unwinds_through_the_consumers_drop() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let (a, stuck) = consumed_all_but_3(&cluster, &tracker, Duration::from_secs(2), "range");
    let b = joins(&cluster, "source", "range");
    poll_both(&a, &b, || a.context().is_handing_off());
    // The loop that owns the consumer panics (an early `?` return is the
    // same): unwinding drops the consumer, with the hand-off waiting.
    let (unwound, unwinding) = std::sync::mpsc::channel();
    let owner = std::thread::spawn(move || {
        let _signal = Signal(unwound);
        let _consumer = a;
        panic!("the processing loop failed");
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while unwinding.try_recv().is_err() {
        assert!(
            Instant::now() < deadline,
            "the unwinding drop did not return"
        );
        let _ = b.poll(Duration::from_millis(10));
    }
    assert!(owner.join().is_err(), "the panic is the owner's");
    assert_eq!(tracker.in_flight(), 0, "released");
    assert_eq!(tracker.ack(stuck), Err(ResolveError::Revoked));
    if let Some(back) = saved_if_any(&cluster) {
        assert_eq!(back.next(), 3);
    }
}

/// Sends on the channel when dropped: after the consumer (declared
/// before it, dropped after it).
struct Signal(std::sync::mpsc::Sender<()>);

impl Drop for Signal {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Review finding 1 (A): a drain timeout of `Duration::MAX` saturates to
/// a far deadline: the revocation's callback does not panic (a panic
/// there left a revocation nobody let go, and the drop hung).
#[test]
fn a_drain_timeout_of_duration_max_hands_off_and_the_drop_returns() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let (a, stuck) = consumed_all_but_3(&cluster, &tracker, Duration::MAX, "range");
    let b = joins(&cluster, "source", "range");
    poll_both(&a, &b, || a.context().is_handing_off());
    tracker.ack(stuck).unwrap();
    drop_polling(a, &b);
    assert_eq!(tracker.in_flight(), 0);
}

/// A store whose save panics once armed (user code).
struct PanicsWhenArmed(Arc<std::sync::atomic::AtomicBool>);

impl ProgressStore for PanicsWhenArmed {
    fn save(
        &self,
        _: &std::collections::HashMap<TopicPartition, Progress>,
    ) -> rdkafka::error::KafkaResult<()> {
        assert!(
            !self.0.load(std::sync::atomic::Ordering::SeqCst),
            "the store's save panics"
        );
        Ok(())
    }

    fn load(
        &self,
        committed: &rdkafka::TopicPartitionList,
        _: Duration,
    ) -> rdkafka::error::KafkaResult<std::collections::HashMap<TopicPartition, Progress>> {
        Ok(inflight_rdkafka::consumer::progress_of(committed))
    }
}

/// Review finding 1 (B): a store that panics in the final commit does not
/// leave the hand-off half-way: the partitions are let go (the group's
/// rebalance goes on), the panic reaches the caller, and the drop returns.
#[test]
fn a_store_that_panics_in_the_final_commit_still_lets_the_partitions_go() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let context = HandOffContext::wrap(
        Recording::default(),
        tracker.clone(),
        Duration::from_secs(600),
    )
    .store(PanicsWhenArmed(armed.clone()))
    .defer_hand_off();
    let a = consumer(&cluster, context);
    a.subscribe(&["source"]).unwrap();
    let seen = std::cell::Cell::new(0);
    let mut stuck = None;
    poll_until(
        &a,
        |message| {
            let partition = TopicPartition::new(message.topic(), message.partition());
            let ticket = tracker.send(partition, message.offset()).unwrap();
            if message.offset() == 3 {
                stuck = Some(ticket);
            } else {
                tracker.ack(ticket).unwrap();
            }
            seen.set(seen.get() + 1);
        },
        |_| seen.get() == 10,
    );
    let b = joins(&cluster, "source", "range");
    poll_both(&a, &b, || a.context().is_handing_off());
    tracker.ack(stuck.unwrap()).unwrap();
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        commit_progress(&a, CommitMode::Sync)
    }));
    assert!(unwound.is_err(), "the store's panic reaches the caller");
    assert!(!a.context().is_handing_off(), "not left half-way");
    assert_eq!(a.assignment().unwrap().count(), 0, "let go");
    drop_polling(a, &b);
    assert_eq!(tracker.in_flight(), 0);
}
