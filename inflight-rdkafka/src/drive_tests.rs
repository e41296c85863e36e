//! The driver's tests, on a fake consumer (see `drive.rs`).

use super::*;
use inflight::{DrainError, Tracker};
use rdkafka::consumer::DefaultConsumerContext;
use rdkafka::topic_partition_list::Offset;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

/// A consumer that records the calls the driver makes, and answers
/// the commits with `commits`, in turn (the last one for ever).
struct Fake {
    calls: RefCell<Vec<String>>,
    commits: RefCell<VecDeque<KafkaResult<()>>>,
}

impl Fake {
    fn new(commit: KafkaResult<()>) -> Self {
        Self::answering(vec![commit])
    }

    fn answering(commits: Vec<KafkaResult<()>>) -> Self {
        Self {
            calls: RefCell::new(Vec::new()),
            commits: RefCell::new(commits.into()),
        }
    }

    fn record(&self, call: &str, list: &TopicPartitionList) {
        let what: Vec<_> = list
            .elements()
            .iter()
            .map(|e| match e.offset() {
                Offset::Offset(o) => format!("{}/{}@{o}", e.topic(), e.partition()),
                _ => format!("{}/{}", e.topic(), e.partition()),
            })
            .collect();
        self.calls
            .borrow_mut()
            .push(format!("{call} {}", what.join(",")));
    }
}

type Context = HandOffContext<inflight::mode::Progress, DefaultConsumerContext>;

impl Edge<inflight::mode::Progress, DefaultConsumerContext> for Fake {
    fn handle(&self) -> Option<Handle> {
        None
    }
    fn lost(&self) -> bool {
        false
    }
    fn closing(&self) -> bool {
        false
    }
    fn closed(&self) -> bool {
        false
    }
    fn pause(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        self.record("pause", list);
        Ok(())
    }
    fn resume(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        self.record("resume", list);
        Ok(())
    }
    fn let_go(&self, list: &TopicPartitionList, _: bool) -> KafkaResult<()> {
        self.record("let go", list);
        Ok(())
    }
    fn commit(&self, list: &TopicPartitionList) -> KafkaResult<()> {
        self.record("commit", list);
        let mut commits = self.commits.borrow_mut();
        if commits.len() > 1 {
            commits.pop_front().unwrap()
        } else {
            commits[0].clone()
        }
    }
    fn post_rebalance(&self, _: &Context, list: &TopicPartitionList) {
        self.record("post", list);
    }
    fn commit_callback(&self, _: &Context, result: KafkaResult<()>, list: &TopicPartitionList) {
        self.record(
            if result.is_ok() {
                "callback ok"
            } else {
                "callback failed"
            },
            list,
        );
    }
}

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

/// A progress tracker with offsets 0..5 of `t/0` acked and 5 in flight.
fn tracker() -> (
    Arc<inflight::ProgressTracker<TopicPartition, i64>>,
    inflight::Ticket,
) {
    let tracker = Arc::new(Tracker::builder().progress(4096).build());
    for offset in 0..5 {
        let ticket = tracker.send(tp(0), offset).unwrap();
        tracker.ack(ticket).unwrap();
    }
    let stuck = tracker.send(tp(0), 5).unwrap();
    (tracker, stuck)
}

#[test]
fn a_deferred_hand_off_on_a_fake_consumer_pauses_then_finishes_at_a_look() {
    let (tracker, stuck) = tracker();
    let context = Context::new(tracker.clone(), Duration::from_secs(600)).defer_hand_off();
    let fake = Fake::new(Ok(()));
    context.on_revoke(&fake, &list_of(&[tp(0)]));
    assert_eq!(*fake.calls.borrow(), ["pause t/0"]);
    assert!(context.handing_off(&tp(0)));
    context.look(&fake, false, false);
    assert_eq!(fake.calls.borrow().len(), 1, "not drained: nothing more");
    tracker.ack(stuck).unwrap();
    context.look(&fake, false, false);
    assert_eq!(
        *fake.calls.borrow(),
        [
            "pause t/0",
            "commit t/0@6",
            "resume t/0",
            "let go t/0",
            "post t/0"
        ]
    );
    assert!(!context.is_handing_off());
    assert_eq!(context.errors(), Vec::<String>::new());
}

/// Finding 3, without a cluster: a pending interrupt stays for the
/// user's wait while the hand-off (in the callback) waits for a record.
#[test]
fn the_hand_offs_wait_leaves_the_interrupt_for_the_users_wait() {
    let (tracker, stuck) = tracker();
    let _users = tracker.send(tp(9), 0).unwrap();
    let context = Context::new(tracker.clone(), Duration::from_secs(600));
    let fake = Fake::new(Ok(()));
    tracker.interrupt();
    std::thread::scope(|s| {
        let acker = s.spawn(|| {
            while !context.is_handing_off() {
                std::thread::yield_now();
            }
            tracker.ack(stuck)
        });
        context.on_revoke(&fake, &list_of(&[tp(0)]));
        assert_eq!(acker.join().unwrap(), Ok(()), "waited for, not released");
    });
    // The final commit carries what else is due: the user's partition.
    assert_eq!(fake.calls.borrow()[0], "commit t/0@6,t/9@0");
    assert_eq!(tracker.drain(Duration::ZERO), Err(DrainError::Interrupted));
}

/// Finding 3, concurrently: a user's wait and the hand-off's wait run
/// at once, and the user's interrupt reaches the user's wait, never the
/// hand-off (which goes on waiting for its record).
#[test]
fn a_users_wait_is_interrupted_while_a_hand_off_waits() {
    let (tracker, stuck) = tracker();
    let _users = tracker.send(tp(9), 0).unwrap();
    let context = Context::new(tracker.clone(), Duration::from_secs(600));
    std::thread::scope(|s| {
        let hand_off = s.spawn(|| {
            let fake = Fake::new(Ok(()));
            context.on_revoke(&fake, &list_of(&[tp(0)]));
            fake.calls.into_inner()
        });
        while !context.is_handing_off() {
            std::thread::yield_now();
        }
        let user = s.spawn(|| tracker.drain(Duration::from_secs(30)));
        tracker.interrupt();
        let users = user.join().unwrap();
        let still_waits = context.is_handing_off();
        // (Acked before asserting: a failure does not wait the bound.)
        tracker.ack(stuck).unwrap();
        let calls = hand_off.join().unwrap();
        assert_eq!(users, Err(DrainError::Interrupted));
        assert!(still_waits, "the hand-off still waited");
        assert_eq!(calls[0], "commit t/0@6,t/9@0");
    });
    assert_eq!(context.errors(), Vec::<String>::new());
}

/// Finding 2, without a cluster: a failed final commit counts and is
/// reported, in `errors()` and to your `commit_callback`.
#[test]
fn a_failed_final_commit_counts_and_is_reported() {
    let (tracker, stuck) = tracker();
    tracker.ack(stuck).unwrap();
    let context = Context::new(tracker, Duration::from_secs(600));
    // Fenced: not made again (see the next tests for a refusal that may
    // pass).
    let fake = Fake::new(Err(KafkaError::ConsumerCommit(
        RDKafkaErrorCode::IllegalGeneration,
    )));
    context.on_revoke(&fake, &list_of(&[tp(0)]));
    assert_eq!(context.commit_failures(), 1);
    let errors = context.errors();
    assert!(
        errors.len() == 1 && errors[0].starts_with("final commit:"),
        "{errors:?}"
    );
    // Review finding 4: it reaches your `commit_callback` too.
    assert_eq!(
        *fake.calls.borrow(),
        [
            "commit t/0@6",
            "callback failed t/0@6",
            "let go t/0",
            "post t/0"
        ]
    );
}

fn rebalancing() -> KafkaResult<()> {
    Err(KafkaError::ConsumerCommit(
        RDKafkaErrorCode::RebalanceInProgress,
    ))
}

/// Issue 39, item 4: a final commit refused while the group rebalances
/// is made again while the partitions are still owned, and what the
/// hand-off did says so.
#[test]
fn a_refused_final_commit_is_made_again_and_confirmed() {
    let (tracker, stuck) = tracker();
    tracker.ack(stuck).unwrap();
    let context = Context::new(tracker, Duration::from_secs(600));
    let fake = Fake::answering(vec![rebalancing(), Ok(())]);
    context.on_revoke(&fake, &list_of(&[tp(0)]));
    assert_eq!(
        *fake.calls.borrow(),
        ["commit t/0@6", "commit t/0@6", "let go t/0", "post t/0"]
    );
    assert_eq!(context.commit_failures(), 0);
    assert_eq!(context.errors(), Vec::<String>::new());
    let done = context.last_hand_off().unwrap();
    assert_eq!(
        (done.final_commit, done.commit_attempts, done.released),
        (Some(Ok(())), 2, 0)
    );
}

/// Issue 39, item 4: a final commit refused until the drain bound passed
/// (made once more at least) fails, and is reported: in `errors()` with
/// how many times it was made, to your `commit_callback`, and in
/// `last_hand_off()`.
#[test]
fn a_final_commit_refused_past_the_bound_is_reported_with_its_attempts() {
    let (tracker, stuck) = tracker();
    tracker.ack(stuck).unwrap();
    let context = Context::new(tracker, Duration::ZERO);
    let fake = Fake::new(rebalancing());
    context.on_revoke(&fake, &list_of(&[tp(0)]));
    assert_eq!(
        *fake.calls.borrow(),
        [
            "commit t/0@6",
            "commit t/0@6",
            "callback failed t/0@6",
            "let go t/0",
            "post t/0"
        ]
    );
    assert_eq!(context.commit_failures(), 1);
    let errors = context.errors();
    assert!(
        errors.len() == 1 && errors[0].contains("(made 2 times within the drain bound)"),
        "{errors:?}"
    );
    let done = context.last_hand_off().unwrap();
    assert_eq!(done.final_commit, Some(rebalancing()));
    assert_eq!(done.commit_attempts, 2);
}

/// A store whose save panics (user code).
struct Panics;

impl crate::ProgressStore for Panics {
    fn save(
        &self,
        _: &std::collections::HashMap<TopicPartition, inflight::Progress>,
    ) -> KafkaResult<()> {
        panic!("the store's save");
    }
    fn load(
        &self,
        committed: &TopicPartitionList,
        _: Duration,
    ) -> KafkaResult<std::collections::HashMap<TopicPartition, inflight::Progress>> {
        Ok(crate::consumer::progress_of(committed))
    }
}

/// Review finding 1 (A): a `Duration::MAX` drain timeout hands off
/// (by default and deferred), never panics in the callback.
#[test]
fn a_drain_timeout_of_duration_max_hands_off() {
    for defer in [false, true] {
        let (tracker, stuck) = tracker();
        let context = Context::new(tracker.clone(), Duration::MAX);
        let context = if defer {
            context.defer_hand_off()
        } else {
            context
        };
        let fake = Fake::new(Ok(()));
        if !defer {
            tracker.ack(stuck).unwrap();
            context.on_revoke(&fake, &list_of(&[tp(0)]));
        } else {
            context.on_revoke(&fake, &list_of(&[tp(0)]));
            tracker.ack(stuck).unwrap();
            context.look(&fake, false, false);
        }
        assert!(!context.is_handing_off());
        assert!(fake.calls.borrow().contains(&"let go t/0".to_owned()));
    }
}

/// Review finding 1 (B): a store whose save panics in the final commit
/// does not leave the hand-off half-way: the partitions are let go,
/// your `post_rebalance` runs, then the panic goes on.
#[test]
fn a_panicking_store_still_lets_the_partitions_go() {
    for defer in [false, true] {
        let (tracker, stuck) = tracker();
        let context = Context::new(tracker.clone(), Duration::from_secs(600)).store(Panics);
        let context = if defer {
            context.defer_hand_off()
        } else {
            context
        };
        let fake = Fake::new(Ok(()));
        if defer {
            context.on_revoke(&fake, &list_of(&[tp(0)]));
            tracker.ack(stuck).unwrap();
        } else {
            tracker.ack(stuck).unwrap();
        }
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if defer {
                context.look(&fake, false, false);
            } else {
                context.on_revoke(&fake, &list_of(&[tp(0)]));
            }
        }));
        assert!(unwound.is_err(), "the panic goes on");
        assert!(!context.is_handing_off());
        let calls = fake.calls.borrow();
        assert_eq!(
            calls[calls.len() - 2..],
            ["let go t/0".to_owned(), "post t/0".to_owned()]
        );
        assert!(context.errors().iter().any(|e| e.contains("panicked")));
        assert_eq!(
            tracker.ack(tracker.send(tp(0), 6).unwrap()),
            Ok(()),
            "a new life"
        );
    }
}
