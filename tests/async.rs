//! The async waits, `Flush::wait_async` and `Tracker::drain_async`, under
//! tokio (a dev-dependency only: the crate itself uses no runtime).
//!
//! Tests synchronize by awaiting, joining and polling by hand; none depends
//! on timing. `tokio::time::timeout` appears in two roles: as a safety net
//! of a minute around awaits that must complete (reaching it means a lost
//! wake-up), and as the cancellation under test around awaits that cannot
//! complete (a covered record that nobody acks), where how long it takes
//! to fire does not matter.

use inflight::{DrainError, FlushError, Tracker};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

/// Reaching this means a wake-up was lost.
const SAFETY_NET: Duration = Duration::from_secs(60);
/// How long a cancelled await runs; any value would do.
const CANCEL_AFTER: Duration = Duration::from_millis(5);

/// Awaits `future`, failing the test if the safety net is reached.
async fn within<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(SAFETY_NET, future)
        .await
        .expect("a lost wake-up: the await did not complete")
}

/// Polls `future` once with the current task's waker.
async fn poll_once<F: Future>(mut future: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}

#[tokio::test]
async fn wait_async_returns_offsets_once_every_covered_record_is_acked() {
    let tracker = Arc::new(Tracker::new());
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("q", 2_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let late = tracker.send("p", 3_u64).unwrap(); // not covered
    let acker = {
        let tracker = tracker.clone();
        tokio::spawn(async move {
            tracker.ack(b).unwrap();
            tracker.ack(a).unwrap();
        })
    };
    let offsets = within(flush.wait_async()).await.unwrap();
    assert_eq!(offsets, HashMap::from([("p", 1), ("q", 2)]));
    flush.commit().unwrap();
    acker.await.unwrap();
    tracker.ack(late).unwrap();
}

#[tokio::test]
async fn a_flush_with_nothing_pending_is_ready_at_once() {
    let tracker = Tracker::<u8, u8>::new();
    let mut flush = tracker.begin_flush().unwrap();
    let mut future = Box::pin(flush.wait_async());
    assert!(
        matches!(poll_once(future.as_mut()).await, Poll::Ready(Ok(offsets)) if offsets.is_empty())
    );
}

#[tokio::test]
async fn a_timed_out_await_leaves_the_flush_usable_by_a_second_await() {
    let tracker = Tracker::new();
    let ticket = tracker.send("p", 9_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    // Nobody acks yet: the timeout fires and drops the future.
    assert!(tokio::time::timeout(CANCEL_AFTER, flush.wait_async())
        .await
        .is_err());
    assert!(tokio::time::timeout(CANCEL_AFTER, flush.wait_async())
        .await
        .is_err());
    assert_eq!(flush.pending(), 1);
    tracker.ack(ticket).unwrap();
    assert_eq!(within(flush.wait_async()).await.unwrap()["p"], 9);
    flush.commit().unwrap();
}

#[tokio::test]
async fn a_dropped_future_then_a_blocking_wait() {
    let tracker = Tracker::new();
    let ticket = tracker.send("p", 4_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let mut future = Box::pin(flush.wait_async());
    assert!(poll_once(future.as_mut()).await.is_pending());
    drop(future);
    // The ack comes from another thread while this one blocks (the runtime
    // is not needed meanwhile): the dropped task's registration is gone,
    // and the parked thread is woken.
    std::thread::scope(|s| {
        s.spawn(|| tracker.ack(ticket).unwrap());
        assert_eq!(flush.wait(SAFETY_NET).unwrap()["p"], 4);
    });
    flush.commit().unwrap();
}

/// Many flush cycles on a multi-threaded runtime: a producer task sends and
/// spawns one task per ack (so acks arrive out of order, on any worker), and
/// a committer task awaits flushes back to back while sends go on, each
/// flush begun after at least one more round of sends. Every flush
/// completes; offsets only move forward, none is returned while an earlier
/// record of its partition is unacked, and the last committed offset of
/// each partition is its last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_flush_cycles_with_acks_from_spawned_tasks() {
    const CYCLES: usize = if cfg!(miri) { 3 } else { 300 };
    const PARTITIONS: u32 = 3;
    let tracker: Arc<Tracker<u32, u64>> = Arc::new(Tracker::new());
    // Offsets sent and not yet acked, per partition. The test may lock; the
    // tracker does not.
    let unacked: Arc<Vec<Mutex<BTreeSet<u64>>>> = Arc::new(
        (0..PARTITIONS)
            .map(|_| Mutex::new(BTreeSet::new()))
            .collect(),
    );
    // Rounds sent (one record per partition each), and whether the
    // committer is done.
    let rounds = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));

    let producer = {
        let (tracker, unacked) = (tracker.clone(), unacked.clone());
        let (rounds, done) = (rounds.clone(), done.clone());
        tokio::spawn(async move {
            let mut acks = Vec::new();
            let mut round = 0_u64;
            // Acquire: pairs with the committer's Release once it is done.
            while !done.load(Ordering::Acquire) {
                for p in 0..PARTITIONS {
                    unacked[p as usize].lock().unwrap().insert(round);
                    let ticket = tracker.send(p, round).unwrap();
                    let (tracker, unacked) = (tracker.clone(), unacked.clone());
                    acks.push(tokio::spawn(async move {
                        tokio::task::yield_now().await;
                        unacked[p as usize].lock().unwrap().remove(&round);
                        tracker.ack(ticket).unwrap();
                    }));
                }
                round += 1;
                // Release: this round's sends returned before a flush that
                // reads the new count begins, so that flush covers them.
                rounds.store(round, Ordering::Release);
                tokio::task::yield_now().await;
            }
            for ack in acks {
                ack.await.unwrap();
            }
            round
        })
    };

    let committer = {
        let (tracker, unacked) = (tracker.clone(), unacked.clone());
        let (rounds, done) = (rounds.clone(), done.clone());
        tokio::spawn(async move {
            let mut last: HashMap<u32, u64> = HashMap::new();
            let mut seen = 0;
            for cycle in 0..CYCLES {
                // Not a sleep: yield until the producer sent a new round.
                // Acquire: pairs with the producer's Release.
                while rounds.load(Ordering::Acquire) == seen {
                    tokio::task::yield_now().await;
                }
                seen = rounds.load(Ordering::Acquire);
                let mut flush = tracker.begin_flush().unwrap();
                let offsets = within(flush.wait_async()).await.unwrap();
                if cycle == 0 {
                    // Round 0 was sent before it, and no flush before it.
                    assert_eq!(offsets.len(), PARTITIONS as usize);
                }
                for (&p, &o) in &offsets {
                    // Each record is covered by exactly one flush.
                    assert!(last.get(&p).is_none_or(|&before| before < o));
                    let oldest = unacked[p as usize].lock().unwrap().first().copied();
                    assert!(
                        oldest.is_none_or(|oldest| oldest > o),
                        "partition {p}: offset {o} returned while {oldest:?} is unacked"
                    );
                }
                flush.commit().unwrap();
                last.extend(offsets);
            }
            // Release: the cycles above happen before the producer stops.
            done.store(true, Ordering::Release);
            last
        })
    };

    let mut last = committer.await.unwrap();
    let sent = producer.await.unwrap();
    assert_eq!(tracker.in_flight(), 0);
    let mut flush = tracker.begin_flush().unwrap();
    last.extend(within(flush.wait_async()).await.unwrap());
    flush.commit().unwrap();
    for p in 0..PARTITIONS {
        assert_eq!(last[&p], sent - 1, "partition {p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_async_waits_for_everything_sent_before_it() {
    let tracker = Arc::new(Tracker::new());
    let tickets: Vec<_> = (0..64_u64)
        .map(|o| tracker.send(o % 4, o).unwrap())
        .collect();
    tracker.close();
    let drain = tracker.drain_async();
    // Sent after the call: not waited for (and refused: the tracker is
    // closed, so nothing else is in flight).
    assert!(tracker.send(0, 99).is_err());
    let acks: Vec<_> = tickets
        .into_iter()
        .map(|ticket| {
            let tracker = tracker.clone();
            tokio::spawn(async move { tracker.ack(ticket).unwrap() })
        })
        .collect();
    within(drain).await.unwrap();
    assert_eq!(tracker.in_flight(), 0);
    for ack in acks {
        ack.await.unwrap();
    }
}

#[tokio::test]
async fn drain_async_does_not_wait_for_later_sends() {
    let tracker = Tracker::new();
    let before = tracker.send("p", 1_u64).unwrap();
    let drain = tracker.drain_async(); // seals here, not at the first poll
    let after = tracker.send("p", 2_u64).unwrap();
    tracker.ack(before).unwrap();
    within(drain).await.unwrap();
    assert_eq!(tracker.in_flight(), 1);
    tracker.ack(after).unwrap();
}

#[tokio::test]
async fn a_failed_record_gives_failed_not_offsets() {
    let tracker = Tracker::new();
    let good = tracker.send("p", 1_u64).unwrap();
    let bad = tracker.send("p", 2_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let mut future = Box::pin(flush.wait_async());
    assert!(poll_once(future.as_mut()).await.is_pending());
    tracker.fail(bad).unwrap();
    tracker.ack(good).unwrap();
    assert_eq!(within(future).await, Err(FlushError::Failed { failed: 1 }));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
}

/// An interrupt from another thread ends a pending future, once: the flush
/// stays interrupted, and the next flush does not see the interrupt again.
#[tokio::test]
async fn interrupt_ends_a_pending_future_exactly_once() {
    let tracker = Arc::new(Tracker::new());
    let stuck = tracker.send("p", 1_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let mut future = Box::pin(flush.wait_async());
    assert!(poll_once(future.as_mut()).await.is_pending());
    let interrupter = {
        let tracker = tracker.clone();
        std::thread::spawn(move || tracker.interrupt())
    };
    assert_eq!(within(future).await, Err(FlushError::Interrupted));
    interrupter.join().unwrap();
    assert_eq!(flush.wait_async().await, Err(FlushError::Interrupted));
    assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Interrupted));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    let mut next = tracker.begin_flush().unwrap();
    assert_eq!(
        next.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 }),
        "the interrupt was delivered twice"
    );
    next.abort();
    tracker.ack(stuck).unwrap();
}

/// A future woken by an interrupt but dropped before it was polled again
/// did not take the interrupt: the next wait gets it.
#[tokio::test]
async fn a_dropped_future_leaves_the_interrupt_to_the_next_wait() {
    let tracker = Tracker::new();
    let stuck = tracker.send("p", 1_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let mut future = Box::pin(flush.wait_async());
    assert!(poll_once(future.as_mut()).await.is_pending());
    tracker.interrupt(); // wakes the task; the future is never polled again
    drop(future);
    assert_eq!(flush.wait_async().await, Err(FlushError::Interrupted));
    flush.abort();
    tracker.ack(stuck).unwrap();
}

/// An interrupt before the first poll is delivered to that poll.
#[tokio::test]
async fn an_interrupt_before_the_await_is_delivered_to_it() {
    let tracker = Tracker::new();
    let stuck = tracker.send("p", 1_u64).unwrap();
    tracker.interrupt();
    assert_eq!(tracker.drain_async().await, Err(DrainError::Interrupted));
    let mut flush = tracker.begin_flush().unwrap();
    assert!(tokio::time::timeout(CANCEL_AFTER, flush.wait_async())
        .await
        .is_err());
    flush.abort();
    tracker.ack(stuck).unwrap();
}

/// A flush's `wait_async` and a `drain_async` wait at once, on two tasks of
/// a multi-threaded runtime; one last ack ends both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ack_ends_a_flush_await_and_a_drain_await() {
    let tracker = Arc::new(Tracker::new());
    let ticket = tracker.send("p", 8_u64).unwrap();
    let flusher = {
        let tracker = tracker.clone();
        tokio::spawn(async move {
            let mut flush = tracker.begin_flush().unwrap();
            let offsets = within(flush.wait_async()).await.unwrap();
            flush.commit().unwrap();
            offsets
        })
    };
    let drainer = {
        let tracker = tracker.clone();
        tokio::spawn(async move { within(tracker.drain_async()).await })
    };
    tokio::task::yield_now().await;
    tracker.ack(ticket).unwrap();
    drainer.await.unwrap().unwrap();
    assert_eq!(flusher.await.unwrap()["p"], 8);
}

#[test]
fn the_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let tracker = Tracker::<String, u64>::new();
    let drain = tracker.drain_async();
    assert_send(&drain);
    drop(drain);
    let mut flush = tracker.begin_flush().unwrap();
    let wait = flush.wait_async();
    assert_send(&wait);
}
