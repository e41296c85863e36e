//! Guarantees 3 to 5: no premature commit, no lost wake-up, and
//! `interrupt` delivered exactly once.

use super::*;

// ---------------------------------------------------------------------------
// Guarantee 3: no premature commit. Ok only when every covered record is
// acked; any covered failure gives Failed and never offsets, for good.
// ---------------------------------------------------------------------------

#[test]
fn g3_wait_is_not_ok_until_every_covered_record_is_acked() {
    let tracker = Tracker::<&str, u64>::new();
    let mut tickets: Vec<_> = (0..5).map(|o| tracker.send("p", o).unwrap()).collect();
    let mut flush = tracker.begin_flush().unwrap();
    // Ack the latest first: its offset is retained, but the flush must still
    // wait for the older ones.
    tickets.reverse();
    let last = tickets.pop().unwrap(); // offset 0, the oldest
    for (i, t) in tickets.into_iter().enumerate() {
        tracker.ack(t).unwrap();
        assert_eq!(flush.pending(), 4 - i);
        assert!(flush.wait(Duration::ZERO).is_err());
    }
    assert_eq!(flush.pending(), 1);
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    assert_eq!(
        flush.wait(Duration::from_millis(1)),
        Err(FlushError::Timeout { pending: 1 })
    );
    tracker.ack(last).unwrap();
    assert_eq!(flush.pending(), 0);
    assert_eq!(wait_ok(&mut flush), map([("p", 4)]));
    flush.commit().unwrap();
}

#[test]
fn g3_pending_counts_down_with_each_covered_resolution() {
    let tracker = Tracker::<u8, u64>::new();
    let tickets: Vec<_> = (0..10)
        .map(|o| tracker.send(o as u8 % 3, o).unwrap())
        .collect();
    let mut flush = tracker.begin_flush().unwrap();
    let _uncovered = tracker.send(0, 99).unwrap();
    for (i, t) in tickets.into_iter().enumerate() {
        assert_eq!(flush.pending(), 10 - i);
        assert_eq!(
            flush.wait(Duration::ZERO),
            Err(FlushError::Timeout { pending: 10 - i })
        );
        tracker.ack(t).unwrap();
    }
    assert_eq!(flush.pending(), 0);
    assert_eq!(wait_ok(&mut flush), map([(0, 9), (1, 7), (2, 8)]));
}

#[test]
fn g3_covered_failure_gives_failed_and_no_offsets() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    let b = tracker.send("p", 2).unwrap();
    let c = tracker.send("q", 3).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    tracker.ack(a).unwrap();
    tracker.fail(b).unwrap();
    // Not Ok (and not offsets) while the rest is pending.
    assert!(flush.wait(Duration::ZERO).is_err());
    tracker.ack(c).unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Failed { failed: 1 })
    );
    // Asking again does not turn it into success.
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Failed { failed: 1 }));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
}

#[test]
fn g3_failed_counts_every_failed_covered_record() {
    let tracker = Tracker::<&str, u64>::new();
    let tickets: Vec<_> = (0..6).map(|o| tracker.send("p", o).unwrap()).collect();
    let mut flush = tracker.begin_flush().unwrap();
    for (i, t) in tickets.into_iter().enumerate() {
        if i % 2 == 0 {
            tracker.fail_raw(t.into_raw()).unwrap();
        } else {
            tracker.ack(t).unwrap();
        }
    }
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Failed { failed: 3 }));
    flush.abort();
    // A failure in a newer generation adds to the older ones.
    let t = tracker.send("q", 0).unwrap();
    tracker.fail(t).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Failed { failed: 4 }));
}

#[test]
fn g3_failure_of_an_uncovered_record_does_not_affect_the_current_flush() {
    let tracker = Tracker::<&str, u64>::new();
    let covered = tracker.send("p", 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let uncovered = tracker.send("p", 2).unwrap();
    tracker.fail(uncovered).unwrap();
    tracker.ack(covered).unwrap();
    assert_eq!(wait_ok(&mut flush), map([("p", 1)]));
    flush.commit().unwrap();
    // The next flush covers the failure.
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Failed { failed: 1 }));
}

#[test]
fn g3_failed_stays_failed_for_every_later_flush() {
    let tracker = Tracker::<&str, u64>::new();
    let bad = tracker.send("p", 1).unwrap();
    tracker.fail(bad).unwrap();
    for round in 0..10_u64 {
        // Newer records, all acked, never make it succeed again.
        let t = tracker.send("p", 100 + round).unwrap();
        tracker.ack(t).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(
            flush.wait(GENEROUS),
            Err(FlushError::Failed { failed: 1 }),
            "round {round}"
        );
        if round % 2 == 0 {
            flush.abort();
        } else {
            assert_eq!(flush.commit(), Err(FlushError::NotReady));
        }
    }
    // Also with nothing new at all.
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Failed { failed: 1 }));
}

#[test]
fn g3_no_offset_returned_before_its_prefix_is_acked_out_of_order() {
    // Out-of-order acks from another thread: each Ok must only come once
    // every covered record was acked (recorded before each ack).
    let tracker = Tracker::<u8, u64>::new();
    for round in 0..if cfg!(miri) { 6 } else { 200_u64 } {
        let n = 1 + round % 17;
        let tickets: Vec<_> = (0..n).map(|o| (o, tracker.send(0, o).unwrap())).collect();
        let mut flush = tracker.begin_flush().unwrap();
        let acked = AtomicUsize::new(0);
        let result = wait_while(&mut flush, FOREVER, || {
            let mut rng = Rng::new(round);
            let mut tickets = tickets;
            while !tickets.is_empty() {
                let (_, t) = tickets.swap_remove(rng.below(tickets.len() as u64) as usize);
                acked.fetch_add(1, Ordering::SeqCst);
                tracker.ack(t).unwrap();
            }
        });
        // Each ack is counted before it is made: an Ok that came before the
        // last ack could see fewer than n here.
        assert_eq!(acked.load(Ordering::SeqCst), n as usize);
        assert_eq!(result, Ok(map([(0, n - 1)])));
        flush.commit().unwrap();
    }
}

// ---------------------------------------------------------------------------
// Guarantee 4: no lost wake-up. The last covered resolution wakes a waiting
// `wait` (here: one with an hour-long timeout) from another thread.
// ---------------------------------------------------------------------------

#[test]
fn g4_wait_wakes_on_the_last_ack_from_another_thread() {
    let tracker = Tracker::<u8, u64>::new();
    for round in 0..if cfg!(miri) { 8 } else { 300_u64 } {
        let mut tickets: Vec<_> = (0..3)
            .map(|o| tracker.send(0, round * 3 + o).unwrap())
            .collect();
        let mut flush = tracker.begin_flush().unwrap();
        let last = tickets.pop().unwrap();
        let result = wait_while(&mut flush, FOREVER, || {
            for t in tickets {
                tracker.ack(t).unwrap();
            }
            // Busy work on uncovered records before the last covered ack, so
            // that in most rounds the waiter has parked by then (this only
            // widens coverage; no outcome depends on it).
            for o in 0..(round % 4) * scaled(500) {
                let t = tracker.send(1, o).unwrap();
                tracker.ack(t).unwrap();
            }
            tracker.ack(last).unwrap();
        });
        assert_eq!(result.unwrap().get(&0), Some(&(round * 3 + 2)));
        flush.commit().unwrap();
    }
}

#[test]
fn g4_wait_wakes_on_the_last_fail_from_another_thread() {
    for round in 0..if cfg!(miri) { 4 } else { 50_u64 } {
        // A tracker per round: a failure stays covered by every later flush,
        // which then fails at once without waiting (guarantee 15).
        let tracker = Tracker::<u8, u64>::new();
        let a = tracker.send(0, 1).unwrap();
        let b = tracker.send(0, 2).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        tracker.ack(a).unwrap();
        let result = wait_while(&mut flush, FOREVER, || {
            for o in 0..(round % 4) * scaled(500) {
                let t = tracker.send(1, o).unwrap();
                tracker.ack(t).unwrap();
            }
            tracker.fail(b).unwrap();
        });
        assert_eq!(result, Err(FlushError::Failed { failed: 1 }));
    }
}

#[test]
fn g4_wait_wakes_when_an_older_aborted_generation_drains_last() {
    let tracker = Tracker::<u8, u64>::new();
    for round in 0..if cfg!(miri) { 6 } else { 100_u64 } {
        let old = tracker.send(0, round * 2).unwrap();
        tracker.begin_flush().unwrap().abort();
        let new = tracker.send(1, round * 2 + 1).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(flush.pending(), 2);
        // Either generation may drain last; in even rounds it is the older
        // (aborted) one.
        let (first, last) = if round % 2 == 0 {
            (new, old)
        } else {
            (old, new)
        };
        tracker.ack(first).unwrap();
        let result = wait_while(&mut flush, FOREVER, || {
            for o in 0..(round % 3) * scaled(500) {
                let t = tracker.send(2, o).unwrap();
                tracker.ack(t).unwrap();
            }
            tracker.ack(last).unwrap();
        });
        let offsets = result.unwrap();
        assert_eq!(offsets.get(&0), Some(&(round * 2)));
        assert_eq!(offsets.get(&1), Some(&(round * 2 + 1)));
        flush.commit().unwrap();
    }
}

#[test]
fn g4_wait_wakes_when_many_threads_ack_concurrently() {
    const ACKERS: usize = 4;
    // Records per acker (under Miri, fewer: the rounds are the schedules).
    const PER: u64 = if cfg!(miri) { 20 } else { 50 };
    let tracker = Tracker::<usize, u64>::new();
    for round in 0..if cfg!(miri) { 3 } else { 50_u64 } {
        let per: Vec<Vec<Ticket>> = (0..ACKERS)
            .map(|p| {
                (0..PER)
                    .map(|o| tracker.send(p, round * 100 + o).unwrap())
                    .collect()
            })
            .collect();
        let mut flush = tracker.begin_flush().unwrap();
        let start = Barrier::new(ACKERS);
        // The ackers stay alive until the wait returned (see `wait_while`).
        let done = Barrier::new(ACKERS + 1);
        let result = thread::scope(|s| {
            for tickets in per {
                let (tracker, start, done) = (&tracker, &start, &done);
                s.spawn(move || {
                    start.wait();
                    for t in tickets {
                        tracker.ack(t).unwrap();
                    }
                    done.wait();
                });
            }
            let result = flush.wait(FOREVER);
            done.wait();
            result
        });
        let expected: HashMap<usize, u64> =
            (0..ACKERS).map(|p| (p, round * 100 + PER - 1)).collect();
        assert_eq!(result, Ok(expected));
        flush.commit().unwrap();
    }
}

// ---------------------------------------------------------------------------
// Guarantee 5: interrupt() is delivered to exactly one wait: the one in
// progress, else the next one; that flush can then only be aborted.
// ---------------------------------------------------------------------------

#[test]
fn g5_interrupt_ends_a_wait_in_progress() {
    let tracker = Tracker::<u8, u64>::new();
    let pending = tracker.send(0, 1).unwrap();
    for round in 0..if cfg!(miri) { 4 } else { 50 } {
        let mut flush = tracker.begin_flush().unwrap();
        let barrier = Barrier::new(2);
        let (result, flush) = thread::scope(|s| {
            let waiter = s.spawn(|| {
                barrier.wait();
                // The record is never acked: only the interrupt ends this.
                let result = flush.wait(FOREVER);
                (result, flush)
            });
            barrier.wait();
            tracker.interrupt();
            waiter.join().unwrap()
        });
        assert_eq!(result, Err(FlushError::Interrupted), "round {round}");
        let mut flush = flush;
        assert_eq!(flush.wait(FOREVER), Err(FlushError::Interrupted));
        assert_eq!(flush.commit(), Err(FlushError::NotReady));
        // Delivered exactly once: the next wait just times out.
        let mut next = tracker.begin_flush().unwrap();
        assert_eq!(
            next.wait(Duration::ZERO),
            Err(FlushError::Timeout { pending: 1 })
        );
        next.abort();
    }
    tracker.ack(pending).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(wait_ok(&mut flush), map([(0, 1)]));
}

#[test]
fn g5_interrupt_before_wait_goes_to_the_next_wait_exactly_once() {
    let tracker = Tracker::<u8, u64>::new();
    let t = tracker.send(0, 1).unwrap();
    // Before begin_flush.
    tracker.interrupt();
    let mut flush = tracker.begin_flush().unwrap();
    // A lost interrupt would make this a Timeout after 30 s.
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Interrupted));
    flush.abort();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    // After begin_flush, before wait.
    tracker.interrupt();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Interrupted));
    drop(flush);
    let mut flush = tracker.begin_flush().unwrap();
    tracker.ack(t).unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(map([(0, 1)])));
    flush.commit().unwrap();
}

#[test]
fn g5_concurrent_interrupt_is_delivered_exactly_once() {
    // An interrupt from another thread races with a series of waits: exactly
    // one of them (a racing one, else the next) returns Interrupted.
    let tracker = Tracker::<u8, u64>::new();
    let one_wait = |interrupted: &mut usize| {
        let mut flush = tracker.begin_flush().unwrap();
        match flush.wait(Duration::ZERO) {
            Ok(_) => flush.commit().unwrap(),
            Err(FlushError::Interrupted) => {
                *interrupted += 1;
                assert_eq!(flush.commit(), Err(FlushError::NotReady));
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    };
    // Under Miri, one round per count of waits before the interrupt's.
    for round in 0..if cfg!(miri) { 7 } else { 300_u64 } {
        let t = tracker.send(0, round).unwrap();
        tracker.ack(t).unwrap();
        let mut interrupted = 0;
        thread::scope(|s| {
            let interrupter = s.spawn(|| tracker.interrupt());
            for _ in 0..round % 7 {
                one_wait(&mut interrupted);
            }
            interrupter.join().unwrap();
        });
        for _ in 0..3 {
            one_wait(&mut interrupted);
        }
        assert_eq!(interrupted, 1, "round {round}");
    }
}

#[test]
fn g5_repeated_interrupts_are_delivered_once() {
    let tracker = Tracker::<u8, u64>::new();
    let _pending = tracker.send(0, 1).unwrap();
    tracker.interrupt();
    tracker.interrupt();
    tracker.interrupt();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Interrupted));
    flush.abort();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
}

#[test]
fn g5_interrupt_is_delivered_even_when_nothing_is_pending() {
    let tracker = Tracker::<u8, u64>::new();
    let t = tracker.send(0, 5).unwrap();
    tracker.ack(t).unwrap();
    tracker.interrupt();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Interrupted));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // The interrupted flush's records are covered by the next one.
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(map([(0, 5)])));
    flush.commit().unwrap();
}

#[test]
fn g5_interrupted_flush_stays_interrupted_after_its_records_are_acked() {
    let tracker = Tracker::<u8, u64>::new();
    let t = tracker.send(0, 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    tracker.interrupt();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Interrupted));
    tracker.ack(t).unwrap();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Interrupted));
    assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Interrupted));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(map([(0, 1)])));
}
