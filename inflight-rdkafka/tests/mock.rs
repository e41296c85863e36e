//! Against librdkafka's in-process mock cluster (no broker to start): the
//! wrapped context's callbacks run, in the documented order; a failed
//! commit's progress is committed again; a rebalance hands off; a topic
//! store keeps progress where the group commit does not; what was read
//! back on assignment stays done in the next commits.
//!
//! Every wait is a poll loop on the condition, with a deadline.

mod common;

use common::*;
use inflight::mode::Watermarks;
use inflight::{Progress, ProgressTracker, Tracker, WatermarkTracker};
use inflight_rdkafka::consumer::store_watermarks;
use inflight_rdkafka::{commit_progress, HandOffContext, ProgressStore, TopicPartition};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::Message;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn a_failed_commit_is_committed_again_and_the_users_callback_sees_both() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let context = HandOffContext::wrap(
        Recording::default(),
        tracker.clone(),
        Duration::from_secs(5),
    );
    let consumer = consumer(&cluster, context);
    let assignment = source_from_the_beginning();
    consumer.subscribe(&["source"]).unwrap();
    let partition = TopicPartition::new("source", 0);
    let mut stuck = None;
    let seen = std::cell::Cell::new(0);
    poll_until(
        &consumer,
        |message| {
            let ticket = tracker.send(partition.clone(), message.offset()).unwrap();
            if message.offset() == 3 {
                stuck = Some(ticket);
            } else {
                tracker.ack(ticket).unwrap();
            }
            seen.set(seen.get() + 1);
        },
        |_| seen.get() == 10,
    );
    // The next commit fails at the broker.
    cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE],
    );
    assert_eq!(commit_progress(&consumer, CommitMode::Async).unwrap(), 1);
    let context = consumer.context();
    poll_until(&consumer, |_| {}, |c| c.context().commit_failures() == 1);
    assert_eq!(context.commits().unconfirmed(), 1);
    // Nothing changed on the tracker, and the failed progress goes out again.
    assert_eq!(commit_progress(&consumer, CommitMode::Async).unwrap(), 1);
    poll_until(
        &consumer,
        |_| {},
        |c| c.context().commits().unconfirmed() == 0,
    );
    assert_eq!(commit_progress(&consumer, CommitMode::Async).unwrap(), 0);
    assert_eq!(
        context.inner().events()[2..],
        ["commit failed", "commit ok"],
        "after the assignment's"
    );
    let committed = consumer
        .committed_offsets(assignment, Duration::from_secs(10))
        .unwrap();
    let back = inflight_rdkafka::consumer::progress_of(&committed);
    assert_eq!(back[&partition].next(), 3);
    // The metadata came back from the mock cluster: 4 to 9 are done.
    assert!(back[&partition].is_done(4) && !back[&partition].is_done(3));
    assert!(stuck.is_some(), "offset 3 was left in flight");
}

#[test]
fn a_rebalance_runs_the_users_callbacks_around_the_hand_off() {
    let cluster = cluster();
    let first: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    // The drain bound is short: offset 3 never comes.
    let context = HandOffContext::wrap(
        Recording::default(),
        first.clone(),
        Duration::from_millis(50),
    );
    let a = consumer(&cluster, context);
    a.subscribe(&["source"]).unwrap();
    let partition = TopicPartition::new("source", 0);
    let seen = std::cell::Cell::new(0);
    let mut stuck = None;
    poll_until(
        &a,
        |message| {
            let ticket = first.send(partition.clone(), message.offset()).unwrap();
            if message.offset() == 3 {
                stuck = Some(ticket);
            } else {
                first.ack(ticket).unwrap();
            }
            seen.set(seen.get() + 1);
        },
        |_| seen.get() == 10,
    );
    a.unsubscribe();
    poll_until(&a, |_| {}, |c| c.context().inner().events().len() >= 4);
    let events = a.context().inner().events();
    assert_eq!(
        events[..4],
        [
            "pre assign in_flight=0",
            "post assign done(3, 4)=(false, false)",
            // Before the hand-off: offset 3 is still tracked (and 4 to 9,
            // acked, held behind it)...
            "pre revoke in_flight=7",
            // ...after it, released.
            "post revoke done(3, 4)=(false, false)",
        ]
    );
    assert_eq!(first.in_flight(), 0, "the un-drained record was released");
    let stuck = stuck.unwrap();
    assert_eq!(first.ack(stuck), Err(inflight::ResolveError::Revoked));
    let errors = a.context().errors();
    assert!(
        errors.len() == 1 && errors[0].contains("drain"),
        "{errors:?}"
    );
    drop(a);
    // The next owner reads the committed progress back before its own
    // callback runs: 3 is redone, 4 skipped.
    let second: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let context = HandOffContext::wrap(Recording::default(), second, Duration::from_millis(50));
    let b = consumer(&cluster, context);
    b.subscribe(&["source"]).unwrap();
    poll_until(&b, |_| {}, |c| !c.context().inner().events().is_empty());
    let events = b.context().inner().events();
    assert_eq!(
        events[..2],
        [
            "pre assign in_flight=0",
            "post assign done(3, 4)=(false, true)"
        ]
    );
}

#[test]
fn a_watermark_tracker_commits_last_done_plus_one_and_stores_it_too() {
    let cluster = cluster();
    let tracker: Arc<WatermarkTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().watermarks().build());
    let consumer: BaseConsumer<HandOffContext<Watermarks>> = consumer(
        &cluster,
        HandOffContext::new(tracker.clone(), Duration::from_secs(1)),
    );
    let assignment = source_from_the_beginning();
    consumer.assign(&assignment).unwrap();
    let partition = TopicPartition::new("source", 0);
    for offset in 0..5 {
        let ticket = tracker.send(partition.clone(), offset).unwrap();
        tracker.ack(ticket).unwrap();
    }
    // Last done 4: Kafka's committed offset is 5.
    assert_eq!(commit_progress(&consumer, CommitMode::Sync).unwrap(), 1);
    let committed = consumer
        .committed_offsets(assignment.clone(), Duration::from_secs(10))
        .unwrap();
    assert_eq!(
        committed.find_partition("source", 0).unwrap().offset(),
        Offset::Offset(5)
    );
    // The store + auto-commit pattern: the same convention.
    for offset in 5..8 {
        let ticket = tracker.send(partition.clone(), offset).unwrap();
        tracker.ack(ticket).unwrap();
    }
    assert_eq!(store_watermarks(&consumer, &tracker).unwrap(), 1);
    consumer.commit_consumer_state(CommitMode::Sync).unwrap();
    let committed = consumer
        .committed_offsets(assignment, Duration::from_secs(10))
        .unwrap();
    assert_eq!(
        committed.find_partition("source", 0).unwrap().offset(),
        Offset::Offset(8)
    );
}

#[test]
fn a_topic_store_reads_back_what_it_saved_unless_the_group_is_further() {
    let cluster = cluster();
    cluster.create_topic("progress-store", 1, 1).unwrap();
    let store = store(&cluster, "group");
    let (p0, p1) = (
        TopicPartition::new("source", 0),
        TopicPartition::new("source", 1),
    );
    let done_past_gap = Progress::decode(10, &{
        let tracker = Tracker::builder().progress(4096).build();
        let tickets: Vec<_> = (10..13_u64).map(|o| tracker.send(0, o).unwrap()).collect();
        for ticket in tickets.into_iter().skip(1) {
            tracker.ack(ticket).unwrap();
        }
        tracker.progress()[&0].encode()
    })
    .unwrap();
    store
        .save(&HashMap::from([
            (p0.clone(), Progress::at(5)),
            (p1.clone(), Progress::at(7)),
        ]))
        .unwrap();
    store
        .save(&HashMap::from([(p0.clone(), done_past_gap.clone())]))
        .unwrap();
    // Another group's points in the same topic are not ours.
    self::store(&cluster, "other")
        .save(&HashMap::from([(p0.clone(), Progress::at(99))]))
        .unwrap();
    let mut committed = TopicPartitionList::new();
    committed
        .add_partition_offset("source", 0, Offset::Invalid)
        .unwrap();
    // The group committed past the store for partition 1.
    committed
        .add_partition_offset("source", 1, Offset::Offset(9))
        .unwrap();
    committed
        .add_partition_offset("source", 2, Offset::Invalid)
        .unwrap();
    let back = store.load(&committed, Duration::from_secs(10)).unwrap();
    assert_eq!(back.len(), 2, "{back:?}");
    assert_eq!(back[&p0], done_past_gap, "the last save, metadata and all");
    assert_eq!(back[&p1], Progress::at(9), "the group's, further on");
}

#[test]
fn a_hand_off_context_with_a_topic_store_resumes_from_it() {
    let cluster = cluster();
    cluster.create_topic("progress-store", 1, 1).unwrap();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let context = HandOffContext::new(tracker.clone(), Duration::from_secs(5))
        .store(store(&cluster, "group"));
    let first = consumer(&cluster, context);
    let assignment = source_from_the_beginning();
    first.assign(&assignment).unwrap();
    let partition = TopicPartition::new("source", 0);
    let mut tickets: Vec<_> = (0..10)
        .map(|o| tracker.send(partition.clone(), o).unwrap())
        .collect();
    let _stuck = tickets.remove(3);
    for ticket in tickets {
        tracker.ack(ticket).unwrap();
    }
    assert_eq!(commit_progress(&first, CommitMode::Sync).unwrap(), 1);
    assert_eq!(first.context().commits().unconfirmed(), 0);
    // A consumer of another group, which has no commits: what it knows
    // comes from the store (kept under "group").
    let second = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("group.id", "another")
        .set("enable.auto.commit", "false")
        .create_with_context(
            HandOffContext::new(
                Arc::new(Tracker::builder().progress(4096).build()),
                Duration::from_secs(10),
            )
            .store(store(&cluster, "group")),
        )
        .unwrap();
    let second: BaseConsumer<HandOffContext> = second;
    // The assignment callback, as rdkafka calls it.
    second.assign(&assignment).unwrap();
    second.context().read_committed(&second, &assignment);
    assert_eq!(second.context().errors(), Vec::<String>::new());
    let context = second.context();
    assert!(!context.is_done(&partition, 3) && context.is_done(&partition, 4));
}

#[test]
fn a_save_that_fails_makes_no_group_commit_and_is_made_again() {
    let cluster = cluster();
    cluster.create_topic("progress-store", 1, 1).unwrap();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let context = HandOffContext::new(tracker.clone(), Duration::from_secs(5))
        .store(store(&cluster, "group"));
    let consumer = consumer(&cluster, context);
    let assignment = source_from_the_beginning();
    consumer.assign(&assignment).unwrap();
    let partition = TopicPartition::new("source", 0);
    for offset in 0..4 {
        let ticket = tracker.send(partition.clone(), offset).unwrap();
        tracker.ack(ticket).unwrap();
    }
    // The store's write fails for good (an error librdkafka does not retry).
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    assert!(commit_progress(&consumer, CommitMode::Sync).is_err());
    let committed = |consumer: &BaseConsumer<HandOffContext>| {
        consumer
            .committed_offsets(assignment.clone(), Duration::from_secs(10))
            .unwrap()
            .find_partition("source", 0)
            .unwrap()
            .offset()
    };
    assert_eq!(committed(&consumer), Offset::Invalid, "no group commit");
    assert_eq!(consumer.context().commits().unconfirmed(), 1);
    // Nothing changed on the tracker: the next commit saves and commits it.
    assert_eq!(commit_progress(&consumer, CommitMode::Sync).unwrap(), 1);
    assert_eq!(committed(&consumer), Offset::Offset(4));
    assert_eq!(consumer.context().commits().unconfirmed(), 0);
}

#[test]
fn what_was_read_back_stays_done_when_the_partition_moves_on_early() {
    let cluster = cluster();
    let partition = TopicPartition::new("source", 0);
    let assignment = source_from_the_beginning();
    // The first owner committed next 3, with 4..10 done past it.
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let first = consumer(
        &cluster,
        HandOffContext::new(tracker.clone(), Duration::from_secs(5)),
    );
    first.assign(&assignment).unwrap();
    let mut tickets: Vec<_> = (0..10)
        .map(|o| tracker.send(partition.clone(), o).unwrap())
        .collect();
    let _stuck = tickets.remove(3);
    for ticket in tickets {
        tracker.ack(ticket).unwrap();
    }
    assert_eq!(commit_progress(&first, CommitMode::Sync).unwrap(), 1);
    drop(first);
    // The next owner reads that back and does offset 3 only: its tracker
    // was sent nothing past 3, and knows nothing of 4..10.
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let second = consumer(
        &cluster,
        HandOffContext::new(tracker.clone(), Duration::from_secs(10)),
    );
    second.assign(&assignment).unwrap();
    second.context().read_committed(&second, &assignment);
    assert_eq!(second.context().errors(), Vec::<String>::new());
    assert!(!second.context().is_done(&partition, 3));
    assert!(second.context().is_done(&partition, 4));
    let ticket = tracker.send(partition.clone(), 3).unwrap();
    tracker.ack(ticket).unwrap();
    assert_eq!(commit_progress(&second, CommitMode::Sync).unwrap(), 1);
    let committed = second
        .committed_offsets(assignment.clone(), Duration::from_secs(10))
        .unwrap();
    assert_eq!(
        committed.find_partition("source", 0).unwrap().offset(),
        Offset::Offset(10),
        "4..10 were done before: not redone by the owner after this one"
    );
}

#[test]
fn a_topic_store_reads_back_while_others_save() {
    let cluster = cluster();
    cluster.create_topic("progress-store", 1, 1).unwrap();
    let partition = TopicPartition::new("source", 0);
    store(&cluster, "group")
        .save(&HashMap::from([(partition.clone(), Progress::at(5))]))
        .unwrap();
    // Another group's consumer saves all along, as each member of a group
    // does every 100 ms.
    let others = Arc::new(store(&cluster, "other"));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let saving = {
        let (others, stop) = (others.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut next = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                next += 1;
                let points =
                    HashMap::from([(TopicPartition::new("source", 0), Progress::at(next))]);
                others.save(&points).unwrap();
            }
            next
        })
    };
    let mut committed = TopicPartitionList::new();
    committed
        .add_partition_offset("source", 0, Offset::Invalid)
        .unwrap();
    let started = Instant::now();
    let back = store(&cluster, "group").load(&committed, Duration::from_secs(10));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let saved = saving.join().unwrap();
    assert!(saved > 0);
    assert_eq!(
        back.unwrap()[&partition],
        Progress::at(5),
        "after {:?}",
        started.elapsed()
    );
}

#[test]
fn a_revocation_is_handed_off_outside_the_callback_once_its_records_are_done() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    // A bound no run reaches: the hand-off ends because offset 3 is done.
    let (a, stuck) = consumed_all_but_3(&cluster, &tracker, Duration::from_secs(600), "range");
    let partition = TopicPartition::new("source", 0);
    // A second member joins: the group revokes `a`'s partition.
    let b = joins(&cluster, "source", "range");
    poll_both(&a, &b, || a.context().is_handing_off());
    // rdkafka's callback returned: the hand-off waits for offset 3, outside
    // it, with the revoked partition's records still tracked...
    let context = a.context();
    assert_eq!(
        context.inner().events()[2..],
        ["pre revoke in_flight=7"],
        "after the assignment's, and no post revoke yet"
    );
    assert!(context.handing_off(&partition) && context.skip(&partition, 5));
    assert!(!context.handing_off(&TopicPartition::new("other", 0)));
    assert_eq!(tracker.in_flight(), 7);
    // ...and the group waits for it: nobody gets the partition meanwhile.
    for _ in 0..20 {
        let _ = a.poll(Duration::from_millis(10));
        let _ = b.poll(Duration::from_millis(10));
        assert!(inflight_rdkafka::continue_hand_off(&a));
        assert_eq!(b.assignment().unwrap().count(), 0);
    }
    assert_eq!(a.assignment().unwrap().count(), 1, "not let go yet");
    // Offset 3 is done: the next look finishes the hand-off.
    tracker.ack(stuck).unwrap();
    assert_eq!(commit_progress(&a, CommitMode::Async).unwrap(), 0);
    assert!(!context.is_handing_off() && !context.skip(&partition, 5));
    assert_eq!(
        but_refused_commit_events(context.inner().events())[3..],
        ["post revoke done(3, 4)=(false, false)"]
    );
    assert_eq!(but_refused_commits(context.errors()), Vec::<String>::new());
    assert_eq!(tracker.in_flight(), 0);
    // All ten were committed before the partition went, and the group's
    // rebalance goes on: one of the two owns the partition.
    assert_eq!(saved(&cluster), Progress::at(10));
    poll_both(&a, &b, || {
        a.assignment().unwrap().count() + b.assignment().unwrap().count() == 1
    });
}

#[test]
fn a_revocation_past_its_drain_bound_releases_what_is_left_and_commits_what_was_done() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let (a, stuck) = consumed_all_but_3(&cluster, &tracker, Duration::from_millis(200), "range");
    let b = joins(&cluster, "source", "range");
    poll_both(&a, &b, || a.context().is_handing_off());
    // Offset 3 never comes: once the bound passed, a look finishes the
    // hand-off without it.
    poll_both(&a, &b, || !inflight_rdkafka::continue_hand_off(&a));
    let context = a.context();
    assert_eq!(
        but_refused_commit_events(context.inner().events())[2..],
        [
            "pre revoke in_flight=7",
            "post revoke done(3, 4)=(false, false)"
        ]
    );
    let errors = but_refused_commits(context.errors());
    assert!(
        errors.len() == 1 && errors[0].starts_with("drain of [source/0]"),
        "{errors:?}"
    );
    assert_eq!(tracker.in_flight(), 0, "the un-drained record was released");
    assert_eq!(tracker.ack(stuck), Err(inflight::ResolveError::Revoked));
    // What was done is committed: next 3, with 4..10 done past it.
    let back = saved(&cluster);
    assert_eq!(back.next(), 3);
    assert!(back.is_done(4) && back.is_done(9));
}

#[test]
fn a_cooperative_revocation_hands_off_the_moving_partition_and_keeps_the_other() {
    let cluster = cluster();
    cluster.create_topic("pair", 2, 1).unwrap();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let context = HandOffContext::wrap(
        Recording::default(),
        tracker.clone(),
        Duration::from_secs(600),
    )
    .defer_hand_off();
    let a = consumer_with(&cluster, context, "cooperative-sticky");
    a.subscribe(&["pair"]).unwrap();
    poll_until(&a, |_| {}, |c| c.assignment().unwrap().count() == 2);
    // A record in flight on each partition.
    let (p0, p1) = (
        TopicPartition::new("pair", 0),
        TopicPartition::new("pair", 1),
    );
    let mut held = HashMap::new();
    held.insert(p0.clone(), tracker.send(p0.clone(), 0).unwrap());
    held.insert(p1.clone(), tracker.send(p1.clone(), 0).unwrap());
    let b = joins(&cluster, "pair", "cooperative-sticky");
    poll_both(&a, &b, || a.context().is_handing_off());
    // One partition moves; the other stays with `a`, and its records are
    // not waited for.
    let context = a.context();
    let (moving, staying) = if context.handing_off(&p0) {
        (p0, p1)
    } else {
        (p1, p0)
    };
    assert!(context.handing_off(&moving) && !context.handing_off(&staying));
    assert!(inflight_rdkafka::continue_hand_off(&a));
    tracker.ack(held.remove(&moving).unwrap()).unwrap();
    assert!(!inflight_rdkafka::continue_hand_off(&a));
    // Only the moving partition was let go (an incremental unassign).
    let assigned = a.assignment().unwrap();
    assert_eq!(assigned.count(), 1);
    assert_eq!(assigned.elements()[0].partition(), staying.partition);
    poll_both(&a, &b, || b.assignment().unwrap().count() == 1);
    assert_eq!(
        b.assignment().unwrap().elements()[0].partition(),
        moving.partition
    );
    assert_eq!(but_refused_commits(context.errors()), Vec::<String>::new());
    // The staying partition's record is still tracked, untouched.
    tracker.ack(held.remove(&staying).unwrap()).unwrap();
    // The clean stop: leave the group and let the hand-off (in the
    // callback: nobody would finish a deferred one) give the partition up
    // before the consumer is dropped.
    a.unsubscribe();
    poll_both(&a, &b, || {
        a.assignment().unwrap().count() == 0 && !a.context().is_handing_off()
    });
    assert_eq!(
        but_refused_commits(a.context().errors()),
        Vec::<String>::new()
    );
}

#[test]
fn finish_hand_off_lets_the_partitions_go_so_that_the_consumer_can_close() {
    let cluster = cluster();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let (a, stuck) = consumed_all_but_3(&cluster, &tracker, Duration::from_secs(600), "range");
    let b = joins(&cluster, "source", "range");
    poll_both(&a, &b, || a.context().is_handing_off());
    // The record is done on another thread while `finish_hand_off` waits.
    let acker = {
        let tracker = tracker.clone();
        std::thread::spawn(move || tracker.ack(stuck).unwrap())
    };
    inflight_rdkafka::finish_hand_off(&a);
    acker.join().unwrap();
    assert!(!a.context().is_handing_off());
    assert_eq!(saved(&cluster), Progress::at(10));
    // rdkafka's `Drop` closes the consumer, which waits for the partitions
    // to be let go: it returns now. (The deadline only reports a hang.)
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
