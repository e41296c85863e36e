//! Watermark commits (`Tracker::committable`) and `Tracker::drain`.
//!
//! - W1: a watermark is the offset of the latest record such that it and
//!   every earlier record of its partition were acked; it is returned once,
//!   by the first call after it advanced.
//! - W2: a failed record stops its own partition's watermark for good, and
//!   no other partition's.
//! - W3: concurrent senders, ackers and committers: no watermark passes an
//!   unacked record, watermarks only move forward, no advance is returned
//!   twice or lost, and at the end every partition's last offset is
//!   committable and nothing is retained.
//! - W4: the statistics match the Kafka definitions.
//! - W5: the barrier flush keeps working on a watermark tracker.
//! - D1-D4: `drain` waits for what was sent before it, honours timeout and
//!   interrupt, works beside a flush, and leaves the watermarks complete.

mod common;

use common::Rng;
use inflight::{DrainError, FlushError, SendError, Tracker};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

fn watermarked<P, O>() -> inflight::WatermarkTracker<P, O>
where
    P: std::hash::Hash + Eq + Clone + Send + Sync,
    O: std::hash::Hash + Clone + Send + Sync,
{
    Tracker::builder().watermarks().build()
}

#[test]
fn w1_watermark_is_the_longest_acked_prefix() {
    let tracker = watermarked();
    let tickets: Vec<_> = (0..5_u64).map(|o| tracker.send("p", o).unwrap()).collect();
    assert!(tracker.committable().is_empty(), "nothing acked yet");
    let mut tickets: Vec<_> = tickets.into_iter().map(Some).collect();
    let mut ack = |i: usize| tracker.ack(tickets[i].take().unwrap()).unwrap();
    ack(1);
    ack(3);
    assert!(tracker.committable().is_empty(), "0 is unacked");
    ack(0);
    assert_eq!(tracker.committable(), HashMap::from([("p", 1)]));
    assert!(tracker.committable().is_empty(), "returned once");
    ack(2);
    assert_eq!(tracker.committable(), HashMap::from([("p", 3)]));
    ack(4);
    assert_eq!(tracker.committable(), HashMap::from([("p", 4)]));
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn w1_a_later_send_continues_the_watermark() {
    let tracker = watermarked();
    let a = tracker.send(1_u8, "a".to_string()).unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(tracker.committable()[&1], "a");
    let b = tracker.send(1, "b".to_string()).unwrap();
    let c = tracker.send(1, "c".to_string()).unwrap();
    tracker.ack(c).unwrap();
    assert!(tracker.committable().is_empty());
    tracker.ack(b).unwrap();
    assert_eq!(tracker.committable()[&1], "c");
}

#[test]
fn w1_only_advanced_partitions_are_returned() {
    let tracker = watermarked();
    let a = tracker.send("a", 1_u64).unwrap();
    let b = tracker.send("b", 1_u64).unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(tracker.committable(), HashMap::from([("a", 1)]));
    tracker.ack(b).unwrap();
    assert_eq!(tracker.committable(), HashMap::from([("b", 1)]));
}

#[test]
fn w1_raw_tickets_advance_watermarks_and_bad_ones_do_not() {
    let tracker = watermarked();
    let raw = tracker.send("p", 1_u64).unwrap().into_raw();
    assert!(tracker.ack_raw(raw ^ (1 << 40)).is_err());
    assert!(tracker.committable().is_empty());
    tracker.ack_raw(raw).unwrap();
    assert!(tracker.ack_raw(raw).is_err());
    assert_eq!(tracker.committable()["p"], 1);
}

#[test]
fn w2_a_failure_stops_only_its_own_partition() {
    let tracker = watermarked();
    let p1 = tracker.send("p", 1_u64).unwrap();
    let p2 = tracker.send("p", 2_u64).unwrap();
    let p3 = tracker.send("p", 3_u64).unwrap();
    let q1 = tracker.send("q", 1_u64).unwrap();
    tracker.ack(p1).unwrap();
    tracker.fail(p2).unwrap();
    tracker.ack(p3).unwrap();
    tracker.ack(q1).unwrap();
    let now = tracker.committable_with_stats();
    assert_eq!(now.offsets, HashMap::from([("p", 1), ("q", 1)]));
    assert_eq!(now.stopped, vec!["p"]);
    // Later acks of `p` never move it; `q` goes on.
    let p4 = tracker.send("p", 4_u64).unwrap();
    let q2 = tracker.send("q", 2_u64).unwrap();
    tracker.ack(p4).unwrap();
    tracker.ack(q2).unwrap();
    assert_eq!(tracker.committable(), HashMap::from([("q", 2)]));
    // Records behind the failure are still reclaimed.
    assert_eq!(tracker.in_flight(), 0);
    let stats = tracker.committable_with_stats();
    assert_eq!(stats.uncommittable_records, 0);
    assert_eq!(stats.stopped, vec!["p"]);
}

#[test]
fn w2_a_failure_before_any_ack_returns_nothing_for_its_partition() {
    let tracker = watermarked();
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("p", 2_u64).unwrap();
    tracker.ack(b).unwrap();
    tracker.fail(a).unwrap();
    assert!(tracker.committable().is_empty());
}

#[test]
fn w4_statistics() {
    let tracker = watermarked();
    let empty = tracker.committable_with_stats();
    assert!(empty.offsets.is_empty() && empty.largest_backlog.is_none());
    assert_eq!(
        (empty.committable_records, empty.uncommittable_records),
        (0, 0)
    );
    let mut p: Vec<_> = (0..4_u64).map(|o| tracker.send("p", o).unwrap()).collect();
    let q: Vec<_> = (0..2_u64).map(|o| tracker.send("q", o).unwrap()).collect();
    for t in q {
        tracker.ack(t).unwrap();
    }
    let last = p.pop().unwrap();
    tracker.ack(last).unwrap(); // behind 0..3
    tracker.ack(p.remove(0)).unwrap(); // 0: committable
    let now = tracker.committable_with_stats();
    assert_eq!(now.offsets, HashMap::from([("p", 0), ("q", 1)]));
    assert_eq!(now.committable_records, 3, "q0, q1 and p0");
    assert_eq!(
        now.uncommittable_records, 3,
        "p1, p2 unacked; p3 behind them"
    );
    assert_eq!(now.partitions_in_flight, 1);
    assert_eq!(now.largest_backlog, Some(("p", 3)));
    assert!(now.stopped.is_empty());
    for t in p {
        tracker.ack(t).unwrap();
    }
    let now = tracker.committable_with_stats();
    assert_eq!(now.offsets, HashMap::from([("p", 3)]));
    assert_eq!(now.committable_records, 3);
    assert_eq!(
        (now.uncommittable_records, now.partitions_in_flight),
        (0, 0)
    );
}

#[test]
fn w5_barrier_flush_on_a_watermark_tracker() {
    let tracker = Tracker::builder().watermarks().capacity(8).build();
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("p", 2_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let late = tracker.send("p", 3_u64).unwrap();
    tracker.ack(b).unwrap();
    assert_eq!(flush.pending(), 2, "b is behind a, so still counted");
    tracker.ack(a).unwrap();
    assert_eq!(flush.wait(Duration::from_secs(10)).unwrap()["p"], 2);
    flush.commit().unwrap();
    assert_eq!(tracker.committable()["p"], 2);
    tracker.fail(late).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(
        flush.wait(Duration::from_secs(10)),
        Err(FlushError::Failed { failed: 1 })
    );
    assert!(tracker.committable().is_empty());
}

/// Issue 26, item 4: an acked record held behind an unacked one keeps
/// its place in the capacity until the watermark passes it.
#[test]
fn w_capacity_counts_records_held_behind_the_watermark() {
    let tracker = Tracker::builder().watermarks().capacity(2).build();
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("p", 2_u64).unwrap();
    assert!(tracker.send("p", 3).is_err());
    tracker.ack(b).unwrap(); // resolved, but held behind a
    assert!(matches!(
        tracker.send("q", 3),
        Err(SendError::Full("q", 3, _))
    ));
    tracker.ack(a).unwrap(); // the watermark passes a and b
    let c = tracker.send("p", 3_u64).unwrap();
    let d = tracker.send("p", 4_u64).unwrap();
    tracker.ack(c).unwrap();
    tracker.ack(d).unwrap();
    assert_eq!(tracker.committable()["p"], 4);
}

/// W3: senders of their own partitions and of one shared partition, ackers
/// acking out of order, and two committers calling `committable` at once.
#[test]
fn w3_concurrent_sends_acks_and_committers() {
    const SENDERS: u64 = 3;
    const PER_SENDER: u64 = 20_000;
    const SHARED: u64 = 99;
    let tracker = watermarked::<u64, u64>();
    // Per partition, offsets whose ack has not started. Offsets of a
    // sender's own partition go up in send order, so a watermark `o` is only
    // valid if every offset <= o has started its ack.
    let unacked: Vec<Mutex<BTreeSet<u64>>> =
        (0..SENDERS).map(|_| Mutex::new(BTreeSet::new())).collect();
    let done = AtomicBool::new(false);
    let returned: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
    let calls = AtomicUsize::new(0);
    thread::scope(|s| {
        let (tracker, unacked, done, returned, calls) =
            (&tracker, &unacked, &done, &returned, &calls);
        let mut senders = Vec::new();
        for sender in 0..SENDERS {
            senders.push(s.spawn(move || {
                let mut rng = Rng::new(sender + 1);
                let mut window = Vec::new();
                for offset in 0..PER_SENDER {
                    unacked[sender as usize].lock().unwrap().insert(offset);
                    window.push((sender, offset, tracker.send(sender, offset).unwrap()));
                    // The shared partition: offsets distinct per sender.
                    let shared = offset * SENDERS + sender;
                    window.push((SHARED, shared, tracker.send(SHARED, shared).unwrap()));
                    if window.len() >= 32 || offset == PER_SENDER - 1 {
                        while !window.is_empty() {
                            let i = rng.below(window.len() as u64) as usize;
                            let (p, o, ticket) = window.swap_remove(i);
                            if p != SHARED {
                                unacked[p as usize].lock().unwrap().remove(&o);
                            }
                            tracker.ack(ticket).unwrap();
                        }
                    }
                }
            }));
        }
        let committers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(move || {
                    let mut last: HashMap<u64, u64> = HashMap::new();
                    loop {
                        let finished = done.load(Ordering::Acquire);
                        let offsets = tracker.committable();
                        calls.fetch_add(1, Ordering::Relaxed);
                        for (&p, &o) in &offsets {
                            if p != SHARED {
                                let oldest = unacked[p as usize].lock().unwrap().first().copied();
                                assert!(
                                    oldest.is_none_or(|u| u > o),
                                    "partition {p}: watermark {o} passed unacked {oldest:?}"
                                );
                                // One committer's own results only go forward.
                                assert!(last.get(&p).is_none_or(|&l| l < o));
                            }
                            last.insert(p, o);
                        }
                        returned.lock().unwrap().extend(offsets);
                        if finished {
                            return;
                        }
                    }
                })
            })
            .collect();
        for sender in senders {
            sender.join().unwrap();
        }
        tracker.drain(Duration::from_secs(60)).unwrap();
        done.store(true, Ordering::Release);
        for committer in committers {
            committer.join().unwrap();
        }
    });
    let returned = returned.into_inner().unwrap();
    assert!(calls.load(Ordering::Relaxed) > 2);
    // No advance returned twice: offsets are distinct per partition.
    let mut seen = BTreeSet::new();
    for &(p, o) in &returned {
        assert!(seen.insert((p, o)), "advance ({p}, {o}) returned twice");
    }
    // None lost: the newest watermark of each partition is its last record.
    for p in 0..SENDERS {
        let newest = returned.iter().filter(|r| r.0 == p).map(|r| r.1).max();
        assert_eq!(newest, Some(PER_SENDER - 1), "partition {p}");
    }
    let shared_max = returned.iter().filter(|r| r.0 == SHARED).map(|r| r.1).max();
    assert!(shared_max.is_some());
    assert_eq!(tracker.in_flight(), 0);
    let stats = tracker.committable_with_stats();
    assert!(stats.offsets.is_empty(), "everything was already taken");
    assert_eq!(stats.uncommittable_records, 0);
    assert_eq!(stats.partitions_in_flight, 0);
}

#[test]
fn d1_drain_waits_for_records_sent_before_it() {
    let tracker = Tracker::new();
    let tickets: Vec<_> = (0..100_u64)
        .map(|o| tracker.send(o % 3, o).unwrap())
        .collect();
    tracker.close();
    assert_eq!(
        tracker.drain(Duration::ZERO),
        Err(DrainError::Timeout { pending: 100 })
    );
    thread::scope(|s| {
        s.spawn(|| {
            for t in tickets {
                tracker.ack(t).unwrap();
            }
        });
        tracker.drain(Duration::from_secs(60)).unwrap();
    });
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn d1_drain_does_not_wait_for_later_sends() {
    let tracker = Tracker::new();
    let early = tracker.send("p", 1_u64).unwrap();
    tracker.ack(early).unwrap();
    tracker.drain(Duration::ZERO).unwrap();
    let pending = tracker.send("p", 2_u64).unwrap();
    // A drain started now covers `pending`...
    assert_eq!(
        tracker.drain(Duration::ZERO),
        Err(DrainError::Timeout { pending: 1 })
    );
    tracker.fail(pending).unwrap();
    // ...and failed records count as resolved.
    tracker.drain(Duration::ZERO).unwrap();
}

#[test]
fn d2_interrupt_ends_a_drain_once() {
    let tracker = Tracker::new();
    let ticket = tracker.send("p", 1_u64).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| tracker.drain(Duration::from_secs(3600)));
        // Whether it lands before the drain starts or while it waits, the
        // interrupt is kept until a wait consumes it.
        tracker.interrupt();
        assert_eq!(waiting.join().unwrap(), Err(DrainError::Interrupted));
    });
    // The interrupt was consumed: the next drain times out instead.
    assert_eq!(
        tracker.drain(Duration::ZERO),
        Err(DrainError::Timeout { pending: 1 })
    );
    tracker.ack(ticket).unwrap();
}

#[test]
fn d3_drain_beside_a_waiting_flush() {
    let tracker = Tracker::new();
    let a = tracker.send("p", 1_u64).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let b = tracker.send("p", 2_u64).unwrap();
    thread::scope(|s| {
        let flusher = s.spawn(|| flush.wait(Duration::from_secs(3600)).map(|o| o["p"]));
        let drainer = s.spawn(|| tracker.drain(Duration::from_secs(3600)));
        tracker.ack(b).unwrap();
        tracker.ack(a).unwrap();
        assert_eq!(flusher.join().unwrap(), Ok(1));
        assert_eq!(drainer.join().unwrap(), Ok(()));
    });
    flush.commit().unwrap();
}

#[test]
fn d4_after_drain_the_watermarks_are_complete() {
    for round in 0..50_u64 {
        let tracker = watermarked::<u64, u64>();
        let tickets: Vec<_> = (0..64_u64)
            .map(|o| tracker.send(o % 4, o).unwrap())
            .collect();
        tracker.close();
        thread::scope(|s| {
            let (left, right): (Vec<_>, Vec<_>) = tickets
                .into_iter()
                .enumerate()
                .partition(|(i, _)| i % 2 == 0);
            let tracker = &tracker;
            s.spawn(move || {
                left.into_iter()
                    .rev()
                    .for_each(|(_, t)| tracker.ack(t).unwrap())
            });
            s.spawn(move || right.into_iter().for_each(|(_, t)| tracker.ack(t).unwrap()));
            tracker.drain(Duration::from_secs(60)).unwrap();
            // Right after the drain, with no acks left to run.
            let offsets = tracker.committable();
            let expected: HashMap<u64, u64> = (0..4).map(|p| (p, 60 + p)).collect();
            assert_eq!(offsets, expected, "round {round}");
        });
    }
}

/// An offset freed by a watermark advance is not dropped by that `ack`
/// (resolution runs no user code) but by the `send` that reuses its slot:
/// a panicking `Drop` surfaces there, that send sends nothing, and the
/// partition keeps working (a panic inside the advance once risked
/// wedging it, found in review).
#[test]
fn w_a_panicking_drop_during_an_advance_does_not_wedge_the_partition() {
    use std::sync::atomic::AtomicBool;
    static BOOM: AtomicBool = AtomicBool::new(false);
    #[derive(Clone, Debug, PartialEq, Hash)]
    struct Off(u64);
    impl Drop for Off {
        fn drop(&mut self) {
            if self.0 == 1 && BOOM.swap(false, Ordering::SeqCst) {
                panic!("a user Drop panics");
            }
        }
    }
    let tracker: inflight::WatermarkTracker<&str, Off> = watermarked();
    let first = tracker.send("p", Off(1)).unwrap();
    let second = tracker.send("p", Off(2)).unwrap();
    tracker.ack(first).unwrap();
    assert_eq!(tracker.committable()["p"], Off(1));
    BOOM.store(true, Ordering::SeqCst);
    // Passing `second` frees `first`'s slot; its offset stays in it.
    tracker.ack(second).unwrap();
    assert!(BOOM.load(Ordering::SeqCst), "no drop in the ack");
    let mut last = 2;
    for offset in 3..10 {
        let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tracker.send("p", Off(offset))
        }));
        if let Ok(ticket) = sent {
            tracker.ack(ticket.unwrap()).unwrap();
            last = offset;
        }
        assert_eq!(tracker.in_flight(), 0, "a panicked send sends nothing");
    }
    assert!(
        !BOOM.load(Ordering::SeqCst),
        "a send reusing the slot dropped it"
    );
    assert_eq!(tracker.drain(Duration::ZERO), Ok(()));
    assert_eq!(tracker.committable()["p"], Off(last));
}
