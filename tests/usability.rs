//! What a new user needs beside the core contract: an owned flush that can
//! move into a task, statistics that take nothing, a report of the records
//! holding everything back, and sends that wait for room.

#[macro_use]
mod modes;

use inflight::{Committable, FlushError, OwnedFlush, SendError, Tracker};
use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// Long enough that reaching it means a wake-up was lost.
const FOREVER: Duration = Duration::from_secs(3600);

/// A waker that counts its wakes.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count::default());
    (Arc::clone(&count), Waker::from(count))
}

fn poll<F: Future>(future: std::pin::Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(waker))
}

// ---- The owned flush ------------------------------------------------------------

#[test]
fn an_owned_flush_is_send_and_static() {
    fn assert_send_static<T: Send + 'static>(_: &T) {}
    let tracker: Arc<Tracker<String, u64>> = Arc::new(Tracker::new());
    let flush = tracker.begin_flush_owned().unwrap();
    assert_send_static(&flush);
    // One flush at a time, owned or borrowed.
    assert!(tracker.begin_flush().is_err());
    assert!(tracker.begin_flush_owned().is_err());
    drop(flush);
    let borrowed = tracker.begin_flush().unwrap();
    assert!(tracker.begin_flush_owned().is_err());
    drop(borrowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owned_flush_waits_commits_and_aborts_inside_spawned_tasks() {
    let tracker = Arc::new(Tracker::new());
    for round in 0..20_u64 {
        let tickets: Vec<_> = (0..10)
            .map(|i| tracker.send(i % 3, round * 10 + i).unwrap())
            .collect();
        let flush: OwnedFlush<u64, u64> = tracker.begin_flush_owned().unwrap();
        let committer = tokio::spawn(async move {
            let mut flush = flush;
            let offsets = flush.wait_async().await.unwrap();
            assert_eq!(flush.pending(), 0);
            if round % 2 == 0 {
                flush.commit().unwrap();
            } else {
                flush.abort(); // the next flush covers these again
            }
            offsets
        });
        let acker = Arc::clone(&tracker);
        tokio::spawn(async move {
            for ticket in tickets.into_iter().rev() {
                acker.ack(ticket).unwrap();
            }
        })
        .await
        .unwrap();
        let offsets = committer.await.unwrap();
        let expected: HashMap<u64, u64> =
            (0..3).map(|p| (p, round * 10 + 9 - (9 - p) % 3)).collect();
        assert_eq!(offsets, expected, "round {round}");
    }
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn an_owned_flush_has_the_flush_rules() {
    let tracker = Arc::new(Tracker::new());
    let ticket = tracker.send("p", 1_u64).unwrap();
    let mut flush = tracker.begin_flush_owned().unwrap();
    assert_eq!(flush.pending(), 1);
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    tracker.interrupt();
    assert_eq!(flush.wait(FOREVER), Err(FlushError::Interrupted));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    let mut flush = tracker.begin_flush_owned().unwrap();
    assert!(Arc::ptr_eq(flush.tracker(), &tracker));
    tracker.ack(ticket).unwrap();
    assert_eq!(flush.wait(FOREVER).unwrap()["p"], 1);
    flush.commit().unwrap();
}

// ---- Statistics that take nothing ----------------------------------------------

/// A metrics poll beside a committer: the committer still gets every
/// advance, each once, and the poll's numbers add up at rest.
#[test]
fn a_metrics_poll_beside_a_committer_takes_nothing() {
    const RECORDS: u64 = 20_000;
    let tracker = Tracker::builder().watermarks().build();
    let done = AtomicUsize::new(0);
    let committed = std::thread::scope(|s| {
        s.spawn(|| {
            let mut window = Vec::new();
            for offset in 0..RECORDS {
                window.push(tracker.send(offset % 4, offset).unwrap());
                if window.len() == 16 {
                    for ticket in window.drain(..).rev() {
                        tracker.ack(ticket).unwrap();
                    }
                }
            }
            for ticket in window.drain(..).rev() {
                tracker.ack(ticket).unwrap();
            }
            done.store(1, Ordering::SeqCst);
        });
        s.spawn(|| {
            while done.load(Ordering::SeqCst) == 0 {
                let stats = tracker.stats();
                assert!(stats.in_flight as u64 <= RECORDS);
                assert!(stats.largest_partitions.len() <= 4);
            }
        });
        let mut committed = Committable::default();
        loop {
            let finished = done.load(Ordering::SeqCst) == 1;
            committed.merge(tracker.committable_with_stats());
            if finished {
                break committed;
            }
        }
    });
    let expected: HashMap<u64, u64> = (0..4).map(|p| (p, RECORDS - 4 + p)).collect();
    assert_eq!(committed.offsets, expected);
    assert_eq!(
        committed.committable_records, RECORDS,
        "every advance, once"
    );
    let stats = tracker.stats();
    assert_eq!((stats.in_flight, stats.committable_records), (0, 0));
    assert_eq!(stats.uncommittable_records, 0);
    assert!(stats.largest_partitions.is_empty() && stats.oldest_age.is_none());
}

#[test]
fn stats_of_a_barrier_tracker() {
    let tracker = Tracker::with_capacity(10);
    let a = tracker.send("a", 1_u64).unwrap();
    let b1 = tracker.send("b", 1_u64).unwrap();
    let b2 = tracker.send("b", 2_u64).unwrap();
    let stats = tracker.stats();
    assert_eq!(stats.in_flight, 3);
    assert_eq!(stats.capacity, Some(10));
    assert_eq!(stats.partitions, 2);
    assert_eq!(stats.largest_partitions, vec![("b", 2), ("a", 1)]);
    assert!(stats.oldest_age.is_some() && !stats.flush_in_progress);
    assert_eq!(stats.sealed_generations, 0);
    let flush = tracker.begin_flush().unwrap();
    let stats = tracker.stats();
    assert!(stats.flush_in_progress);
    assert_eq!(stats.sealed_generations, 1);
    flush.abort();
    for t in [a, b1, b2] {
        tracker.ack(t).unwrap();
    }
    tracker.close();
    let stats = tracker.stats();
    assert!(stats.closed && stats.largest_partitions.is_empty());
    assert_eq!((stats.in_flight, stats.oldest_age), (0, None));
}

// ---- The stuck-record report ---------------------------------------------------------

/// A task that panics holding a ticket leaves its record in flight; the
/// report names it, oldest first, and the report itself takes nothing.
#[test]
fn the_report_names_the_records_a_dropped_ticket_left_behind() {
    each_mode!(tracker = [Tracker::new(), Tracker::builder().watermarks().build(), Tracker::builder().inline_offsets().build(), Tracker::builder().inline_offsets().watermarks().build()] {
        let tracker = Arc::new(tracker);
        let old = tracker.send("orders", 10_u64).unwrap();
        tracker.begin_flush().unwrap().abort(); // a generation boundary
        let lost = std::thread::spawn({
            let tracker = Arc::clone(&tracker);
            move || {
                let ticket = tracker.send("users", 20_u64).unwrap();
                let _held = ticket;
                panic!("a task dies holding its ticket");
            }
        })
        .join();
        assert!(lost.is_err());
        let fine = tracker.send("orders", 11_u64).unwrap();
        tracker.ack(fine).unwrap();
        let report = tracker.oldest_unresolved(10);
        let seen: Vec<_> = report.iter().map(|r| (r.partition, r.offset)).collect();
        assert_eq!(seen, vec![("orders", 10), ("users", 20)], "oldest first");
        assert!(report[0].age >= report[1].age);
        assert_eq!(tracker.oldest_unresolved(1).len(), 1);
        // Nothing changed: the old record still resolves, the lost one
        // still holds back a drain.
        tracker.ack(old).unwrap();
        assert_eq!(tracker.in_flight(), 1);
        assert!(tracker.drain(Duration::ZERO).is_err());
        let report = tracker.oldest_unresolved(10);
        assert_eq!(report.len(), 1);
        assert_eq!((report[0].partition, report[0].offset), ("users", 20));
    });
}

/// Records resolved while the report runs are freed once it lets go.
#[test]
fn the_report_races_resolutions_safely() {
    let tracker = Tracker::new();
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            for offset in 0..20_000_u64 {
                let t = tracker.send(offset % 8, offset.to_string()).unwrap();
                tracker.ack(t).unwrap();
            }
        });
        start.wait();
        for _ in 0..200 {
            for record in tracker.oldest_unresolved(4) {
                assert_eq!(record.offset.parse::<u64>().unwrap() % 8, record.partition);
            }
        }
    });
    assert_eq!(tracker.in_flight(), 0);
    assert!(tracker.oldest_unresolved(10).is_empty());
}

// ---- Waiting for room ------------------------------------------------------------------

#[test]
fn send_timeout_waits_for_a_resolution_and_times_out_with_the_record() {
    let tracker = Tracker::with_capacity(2);
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("p", 2_u64).unwrap();
    match tracker.send_timeout("p", 3, Duration::from_millis(5)) {
        Err(SendError::Full(p, o, _)) => assert_eq!((p, o), ("p", 3)),
        other => panic!("{other:?}"),
    }
    std::thread::scope(|s| {
        let waiting = s.spawn(|| tracker.send_timeout("p", 3, FOREVER));
        tracker.ack(a).unwrap(); // wakes it (or it finds the room)
        tracker.ack(waiting.join().unwrap().unwrap()).unwrap();
    });
    tracker.ack(b).unwrap();
    assert_eq!(tracker.in_flight(), 0);
}

/// Many senders wait for room at once; each resolution lets one in, and
/// `close` ends the waits of the rest with their records.
#[test]
fn many_senders_wait_for_room_and_close_sends_the_rest_back() {
    const SENDERS: u64 = 4;
    let tracker = Tracker::with_capacity(1);
    let first = tracker.send(0_u64, 0_u64).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        for i in 1..=SENDERS {
            let (tracker, tx) = (&tracker, tx.clone());
            s.spawn(move || tx.send(tracker.send_timeout(i, i, FOREVER)).unwrap());
        }
        // Each ack makes room for exactly one of them.
        tracker.ack(first).unwrap();
        let second = rx.recv().unwrap().unwrap();
        tracker.ack(second).unwrap();
        let third = rx.recv().unwrap().unwrap();
        tracker.close();
        tracker.ack(third).unwrap();
        for _ in 2..SENDERS {
            match rx.recv().unwrap() {
                Err(SendError::Closed(p, o)) => assert_eq!(p, o, "its own record"),
                other => panic!("expected Closed, got {other:?}"),
            }
        }
    });
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn send_timeout_on_a_tracker_without_capacity_is_send() {
    let tracker = Tracker::new();
    let t = tracker.send_timeout("p", 1_u64, FOREVER).unwrap();
    tracker.close();
    assert!(matches!(
        tracker.send_timeout("p", 2, FOREVER),
        Err(SendError::Closed("p", 2))
    ));
    tracker.ack(t).unwrap();
}

#[test]
fn send_async_is_woken_by_the_resolution_that_makes_room() {
    let tracker = Tracker::with_capacity(1);
    let first = tracker.send("p", 1_u64).unwrap();
    let (woken, waker) = counting_waker();
    let mut sending = pin!(tracker.send_async("p", 2));
    assert!(poll(sending.as_mut(), &waker).is_pending());
    assert!(poll(sending.as_mut(), &waker).is_pending(), "still full");
    assert_eq!(woken.0.load(Ordering::SeqCst), 0);
    tracker.ack(first).unwrap();
    assert!(woken.0.load(Ordering::SeqCst) >= 1, "the ack woke it");
    let Poll::Ready(Ok(second)) = poll(sending.as_mut(), &waker) else {
        panic!("room after the ack");
    };
    tracker.ack(second).unwrap();
}

/// Cancellation: a dropped `send_async` future sends nothing, and its
/// record is dropped with it.
#[test]
fn a_dropped_send_async_future_sends_nothing() {
    let tracker = Tracker::with_capacity(1);
    let first = tracker.send("p", Arc::new(1_u64)).unwrap();
    let offset = Arc::new(2_u64);
    let (_, waker) = counting_waker();
    {
        let mut sending = pin!(tracker.send_async("p", Arc::clone(&offset)));
        assert!(poll(sending.as_mut(), &waker).is_pending());
    }
    assert_eq!(Arc::strong_count(&offset), 1, "the record was dropped");
    tracker.ack(first).unwrap();
    assert_eq!(tracker.in_flight(), 0, "nothing was sent");
    // The room is there for the next sender.
    let t = tracker.send("p", offset).unwrap();
    tracker.ack(t).unwrap();
}

#[test]
fn close_ends_a_pending_send_async_with_its_record() {
    let tracker = Tracker::with_capacity(1);
    let first = tracker.send("p", 1_u64).unwrap();
    let (woken, waker) = counting_waker();
    let mut sending = pin!(tracker.send_async("p", 2));
    assert!(poll(sending.as_mut(), &waker).is_pending());
    tracker.close();
    assert!(woken.0.load(Ordering::SeqCst) >= 1);
    assert!(matches!(
        poll(sending.as_mut(), &waker),
        Poll::Ready(Err(SendError::Closed("p", 2)))
    ));
    tracker.ack(first).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_async_under_a_bounded_tracker_with_tasks_acking() {
    const RECORDS: u64 = 5_000;
    let tracker = Arc::new(Tracker::with_capacity(8));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let acker = {
        let tracker = Arc::clone(&tracker);
        tokio::spawn(async move {
            let mut acked = 0;
            while let Some(ticket) = rx.recv().await {
                tracker.ack(ticket).unwrap();
                acked += 1;
            }
            acked
        })
    };
    for offset in 0..RECORDS {
        // (The bound itself is checked where it is exact: `in_flight()` is
        // a moment's snapshot while the acker runs, and may count a record
        // acked on one thread beside one sent on another.)
        let ticket = tracker.send_async(offset % 3, offset).await.unwrap();
        tx.send(ticket).unwrap();
    }
    drop(tx);
    assert_eq!(acker.await.unwrap(), RECORDS);
    assert_eq!(tracker.in_flight(), 0);
}

// ---- Committable -----------------------------------------------------------------------

#[test]
fn committable_merges_later_wins_and_compares() {
    let tracker = Tracker::builder().watermarks().build();
    let mut stored: Committable<&str, u64> = Committable::default();
    assert_eq!(stored, Committable::default());
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("q", 5_u64).unwrap();
    tracker.ack(a).unwrap();
    tracker.ack(b).unwrap();
    stored.merge(tracker.committable_with_stats());
    let c = tracker.send("p", 2_u64).unwrap();
    tracker.ack(c).unwrap();
    stored.merge(tracker.committable_with_stats());
    assert_eq!(stored.offsets, HashMap::from([("p", 2), ("q", 5)]));
    assert_eq!(stored.committable_records, 3);
    assert_ne!(stored, Committable::default());
}
