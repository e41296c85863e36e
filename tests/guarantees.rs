//! One or more integration tests per guarantee of the design contract
//! (`DESIGN.md`, "Guarantees" 1-11), named `gN_...` after the guarantee they
//! check. Every test would fail if its guarantee were broken.
//!
//! Multi-threaded tests synchronize with scoped threads, joins, channels and
//! barriers only; no test depends on timing. Where a test waits for a wake-up
//! (`Flush::wait` with an hour-long timeout) a lost wake-up shows up as a
//! hung test, which is the intended failure mode.

use inflight::{BeginFlushError, Flush, FlushError, ResolveError, SendError, Ticket, Tracker};
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::Duration;

/// Long enough that reaching it means a wake-up was lost.
const FOREVER: Duration = Duration::from_secs(3600);
/// A generous upper bound for waits whose records are all resolved (or will
/// be, by a thread that does not wait on anything).
const GENEROUS: Duration = Duration::from_secs(30);

mod common;
use common::Rng;

/// The tracker id of a raw ticket (`tracker:8 | slot:24 | tag:32`, as
/// documented in `Ticket` / IMPLEMENTATION.md).
fn raw_tracker(raw: u64) -> u8 {
    (raw >> 56) as u8
}

/// The slot index of a raw ticket.
fn raw_slot(raw: u64) -> u64 {
    (raw >> 32) & 0xFF_FFFF
}

/// The tracker id of `tracker`, read from a ticket it issues (the record is
/// acked straight away, so the tracker is left as it was, apart from a
/// retained offset of partition `p`).
fn tracker_id<P, O>(tracker: &Tracker<P, O>, p: P, o: O) -> u8
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    let raw = tracker.send(p, o).unwrap().into_raw();
    tracker.ack_raw(raw).unwrap();
    raw_tracker(raw)
}

fn wait_ok<P, O>(flush: &mut Flush<'_, P, O>) -> HashMap<P, O>
where
    P: Hash + Eq + Clone + Send + Sync + std::fmt::Debug,
    O: Clone + Send + Sync + std::fmt::Debug,
{
    match flush.wait(GENEROUS) {
        Ok(offsets) => offsets,
        Err(e) => panic!("expected Ok offsets, got {e:?}"),
    }
}

fn map<P: Hash + Eq, O>(pairs: impl IntoIterator<Item = (P, O)>) -> HashMap<P, O> {
    pairs.into_iter().collect()
}

// ---------------------------------------------------------------------------
// Guarantee 1: nothing lost. At quiescence in_flight() = sends - resolutions;
// an unresolved (even dropped) ticket stays pending and counted.
// ---------------------------------------------------------------------------

#[test]
fn g1_in_flight_equals_sends_minus_resolutions() {
    let tracker = Tracker::<u32, u64>::new();
    let mut rng = Rng::new(1);
    let mut live: Vec<u64> = Vec::new();
    let mut sends = 0_usize;
    let mut resolutions = 0_usize;
    for i in 0..5_000_u64 {
        if live.is_empty() || rng.below(3) != 0 {
            live.push(tracker.send((i % 7) as u32, i).unwrap().into_raw());
            sends += 1;
        } else {
            let raw = live.swap_remove(rng.below(live.len() as u64) as usize);
            match rng.below(4) {
                0 => tracker.ack_raw(raw).unwrap(),
                1 => tracker.fail_raw(raw).unwrap(),
                // Resolving twice must not count twice.
                2 => {
                    tracker.ack_raw(raw).unwrap();
                    assert!(tracker.ack_raw(raw).is_err());
                    assert!(tracker.fail_raw(raw).is_err());
                }
                _ => {
                    tracker.fail_raw(raw).unwrap();
                    assert!(tracker.fail_raw(raw).is_err());
                    assert!(tracker.ack_raw(raw).is_err());
                }
            }
            resolutions += 1;
        }
        assert_eq!(tracker.in_flight(), sends - resolutions);
        // Flushes (aborted here) must not change the count.
        if i % 500 == 0 {
            tracker.begin_flush().unwrap().abort();
            assert_eq!(tracker.in_flight(), sends - resolutions);
        }
    }
    for raw in live.drain(..) {
        tracker.ack_raw(raw).unwrap();
        resolutions += 1;
    }
    assert_eq!(sends, resolutions);
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn g1_typed_tickets_count_like_raw_ones() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    let b = tracker.send("q", 2).unwrap();
    let c = tracker.send("p", 3).unwrap();
    assert_eq!(tracker.in_flight(), 3);
    tracker.ack(b).unwrap();
    assert_eq!(tracker.in_flight(), 2);
    tracker.fail(a).unwrap();
    assert_eq!(tracker.in_flight(), 1);
    tracker.ack(c).unwrap();
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn g1_dropped_unresolved_ticket_stays_counted_and_holds_back_flushes() {
    let tracker = Tracker::<&str, u64>::new();
    drop(tracker.send("p", 1).unwrap());
    let acked = tracker.send("p", 2).unwrap();
    tracker.ack(acked).unwrap();
    assert_eq!(
        tracker.in_flight(),
        1,
        "a dropped ticket is still in flight"
    );

    // Every flush covering the dropped record stays pending, also after
    // aborts and newer, acked records.
    for round in 0..5 {
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(flush.pending(), 1, "round {round}");
        assert_eq!(
            flush.wait(Duration::ZERO),
            Err(FlushError::Timeout { pending: 1 })
        );
        flush.abort();
        let t = tracker.send("q", round).unwrap();
        tracker.ack(t).unwrap();
        assert_eq!(tracker.in_flight(), 1);
    }
}

#[test]
fn g1_refused_sends_are_not_counted() {
    let tracker = Tracker::<&str, u64>::with_capacity(2);
    let a = tracker.send("p", 1).unwrap();
    let b = tracker.send("p", 2).unwrap();
    assert!(matches!(tracker.send("p", 3), Err(SendError::Full("p", 3))));
    assert_eq!(tracker.in_flight(), 2);
    tracker.close();
    assert!(matches!(
        tracker.send("p", 4),
        Err(SendError::Closed("p", 4))
    ));
    assert_eq!(tracker.in_flight(), 2);
    tracker.ack(a).unwrap();
    tracker.ack(b).unwrap();
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn g1_concurrent_sends_and_resolutions_balance() {
    const THREADS: u64 = 4;
    const OPS: u64 = 20_000;
    let tracker = Tracker::<u64, u64>::new();
    let stop = AtomicBool::new(false);
    let (kept_tx, kept_rx) = mpsc::channel::<Vec<Ticket>>();
    let (sent, resolved) = thread::scope(|s| {
        // A committer keeps sealing generations under the workers' feet.
        let committer = s.spawn(|| {
            let mut flushes = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                let mut flush = tracker.begin_flush().unwrap();
                if let Ok(_offsets) = flush.wait(Duration::ZERO) {
                    flush.commit().unwrap();
                }
                flushes += 1;
            }
            flushes
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let tracker = &tracker;
                let kept_tx = kept_tx.clone();
                s.spawn(move || {
                    let mut rng = Rng::new(100 + t);
                    let mut held: Vec<Ticket> = Vec::new();
                    let mut kept: Vec<Ticket> = Vec::new();
                    let (mut sent, mut resolved) = (0_usize, 0_usize);
                    for i in 0..OPS {
                        if held.is_empty() || rng.below(2) == 0 {
                            held.push(tracker.send(t * 10 + i % 3, i).unwrap());
                            sent += 1;
                            continue;
                        }
                        let ticket = held.swap_remove(rng.below(held.len() as u64) as usize);
                        match rng.below(10) {
                            0 => kept.push(ticket), // never resolved
                            1 => {
                                tracker.fail(ticket).unwrap();
                                resolved += 1;
                            }
                            2 => {
                                let raw = ticket.into_raw();
                                tracker.ack_raw(raw).unwrap();
                                assert_eq!(
                                    tracker.ack_raw(raw),
                                    Err(ResolveError::AlreadyResolved)
                                );
                                resolved += 1;
                            }
                            _ => {
                                tracker.ack(ticket).unwrap();
                                resolved += 1;
                            }
                        }
                    }
                    kept.extend(held);
                    kept_tx.send(kept).unwrap();
                    (sent, resolved)
                })
            })
            .collect();
        let mut totals = (0, 0);
        for w in workers {
            let (s, r) = w.join().unwrap();
            totals.0 += s;
            totals.1 += r;
        }
        stop.store(true, Ordering::Relaxed);
        committer.join().unwrap();
        totals
    });
    drop(kept_tx);
    let kept: Vec<Ticket> = kept_rx.iter().flatten().collect();
    assert_eq!(tracker.in_flight(), sent - resolved);
    assert_eq!(kept.len(), sent - resolved);
    let n = kept.len();
    for (i, ticket) in kept.into_iter().enumerate() {
        tracker.ack(ticket).unwrap();
        assert_eq!(tracker.in_flight(), n - i - 1);
    }
}

// ---------------------------------------------------------------------------
// Guarantee 2: the seal is linearizable with send. A send before begin_flush
// is covered, one after is not; the offsets are, per partition, those of the
// latest covered send in send order; uncovered offsets never appear.
// ---------------------------------------------------------------------------

#[test]
fn g2_send_before_begin_flush_is_covered_send_after_is_not() {
    let tracker = Tracker::<&str, u64>::new();
    let before = tracker.send("p", 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 1);
    let after = tracker.send("p", 2).unwrap();
    assert_eq!(flush.pending(), 1, "a send after the seal is not covered");
    // Acking the uncovered record does not complete the flush...
    tracker.ack(after).unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    // ...and its offset never appears in it.
    tracker.ack(before).unwrap();
    assert_eq!(wait_ok(&mut flush), map([("p", 1)]));
    flush.commit().unwrap();
    // The next flush covers it.
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(wait_ok(&mut flush), map([("p", 2)]));
    flush.commit().unwrap();
}

#[test]
fn g2_offsets_are_the_latest_covered_send_per_partition_in_send_order() {
    let tracker = Tracker::<String, i64>::new();
    let mut tickets = Vec::new();
    let mut expected = HashMap::new();
    let mut rng = Rng::new(2);
    for i in 0..300_i64 {
        let p = format!("part-{}", rng.below(9));
        // Offsets are not monotonic: send order decides, not value.
        let o = (rng.below(1_000) as i64) - 500 + i;
        tickets.push(tracker.send(p.clone(), o).unwrap());
        expected.insert(p, o);
    }
    let mut flush = tracker.begin_flush().unwrap();
    // Later, uncovered sends of the same partitions must not leak in.
    let mut late = Vec::new();
    for k in 0..9 {
        late.push(tracker.send(format!("part-{k}"), 1_000_000 + k).unwrap());
        late.push(tracker.send(format!("late-{k}"), k).unwrap());
    }
    // Ack in a scrambled order.
    let mut order: Vec<usize> = (0..tickets.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut slots: Vec<Option<Ticket>> = tickets.into_iter().map(Some).collect();
    for i in order {
        tracker.ack(slots[i].take().unwrap()).unwrap();
    }
    for t in late.drain(..) {
        tracker.ack(t).unwrap();
    }
    assert_eq!(wait_ok(&mut flush), expected);
    flush.commit().unwrap();
}

#[test]
fn g2_decreasing_offsets_in_one_partition_return_the_last_sent() {
    let tracker = Tracker::<u8, u64>::new();
    let tickets: Vec<_> = (0..10).rev().map(|o| tracker.send(0, o).unwrap()).collect();
    let mut flush = tracker.begin_flush().unwrap();
    for t in tickets {
        tracker.ack(t).unwrap();
    }
    assert_eq!(wait_ok(&mut flush), map([(0, 0)]));
    flush.commit().unwrap();
}

#[test]
fn g2_partition_sent_only_after_the_seal_is_absent() {
    let tracker = Tracker::<&str, u64>::new();
    let p = tracker.send("p", 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let q = tracker.send("q", 1).unwrap();
    tracker.ack(q).unwrap();
    tracker.ack(p).unwrap();
    let offsets = wait_ok(&mut flush);
    assert_eq!(offsets, map([("p", 1)]));
    assert!(!offsets.contains_key("q"));
    flush.commit().unwrap();
}

#[test]
fn g2_committed_partitions_do_not_reappear_without_new_sends() {
    let tracker = Tracker::<&str, u64>::new();
    let t = tracker.send("p", 7).unwrap();
    tracker.ack(t).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(wait_ok(&mut flush), map([("p", 7)]));
    flush.commit().unwrap();

    let t = tracker.send("q", 8).unwrap();
    tracker.ack(t).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(wait_ok(&mut flush), map([("q", 8)]));
    flush.commit().unwrap();

    let mut flush = tracker.begin_flush().unwrap();
    assert!(wait_ok(&mut flush).is_empty());
    flush.commit().unwrap();
}

#[test]
fn g2_many_partitions_each_return_their_latest_offset() {
    let tracker = Tracker::<u32, u64>::new();
    let mut tickets = Vec::new();
    for round in 0..3_u64 {
        for p in 0..2_000_u32 {
            tickets.push(tracker.send(p, round * 10_000 + u64::from(p)).unwrap());
        }
    }
    let mut flush = tracker.begin_flush().unwrap();
    for t in tickets.drain(..).rev() {
        tracker.ack(t).unwrap();
    }
    let offsets = wait_ok(&mut flush);
    assert_eq!(offsets.len(), 2_000);
    for p in 0..2_000_u32 {
        assert_eq!(offsets[&p], 20_000 + u64::from(p));
    }
    flush.commit().unwrap();
}

#[test]
fn g2_partitions_first_seen_concurrently_get_one_identity() {
    // Threads race to introduce the same new partitions; afterwards one
    // more send per partition must be the offset every partition reports.
    const THREADS: usize = 4;
    const PARTITIONS: u32 = 300;
    let tracker = Tracker::<String, u64>::new();
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (tracker, barrier) = (&tracker, &barrier);
            s.spawn(move || {
                barrier.wait();
                for i in 0..PARTITIONS {
                    // Each thread walks the partitions in its own order.
                    let p = (i * 7 + t as u32 * 101) % PARTITIONS;
                    let ticket = tracker.send(format!("p{p}"), t as u64).unwrap();
                    tracker.ack(ticket).unwrap();
                }
            });
        }
    });
    for p in 0..PARTITIONS {
        let ticket = tracker.send(format!("p{p}"), 1_000 + u64::from(p)).unwrap();
        tracker.ack(ticket).unwrap();
    }
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = wait_ok(&mut flush);
    assert_eq!(offsets.len(), PARTITIONS as usize);
    for p in 0..PARTITIONS {
        assert_eq!(offsets[&format!("p{p}")], 1_000 + u64::from(p));
    }
    flush.commit().unwrap();
}

#[test]
fn g2_concurrent_sends_are_covered_iff_they_precede_the_seal() {
    // Senders (more than there are cores, so that they get preempted
    // mid-send) each send offsets 1, 2, 3, ... of their own partition and
    // ack each right away. Around each begin_flush the committer reads
    // `returned` (before) and `started` (after): the flush must cover every
    // send that returned before begin_flush began, and none that began after
    // it returned, so each offset lies in [returned, started].
    const SENDERS: usize = 4;
    let tracker = Tracker::<usize, u64>::new();
    let started: Vec<AtomicU64> = (0..SENDERS).map(|_| AtomicU64::new(0)).collect();
    let returned: Vec<AtomicU64> = (0..SENDERS).map(|_| AtomicU64::new(0)).collect();
    let acked: Vec<AtomicU64> = (0..SENDERS).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        for p in 0..SENDERS {
            let (tracker, stop) = (&tracker, &stop);
            let (started, returned, acked) = (&started[p], &returned[p], &acked[p]);
            s.spawn(move || {
                let mut k = 0;
                while !stop.load(Ordering::SeqCst) {
                    k += 1;
                    started.store(k, Ordering::SeqCst);
                    let t = tracker.send(p, k).unwrap();
                    returned.store(k, Ordering::SeqCst);
                    // Recorded before the ack, so "the tracker saw the ack"
                    // implies "acked >= k".
                    acked.store(k, Ordering::SeqCst);
                    tracker.ack(t).unwrap();
                }
            });
        }
        let mut committed = [0_u64; SENDERS];
        for _ in 0..30_000 {
            let lo: Vec<u64> = returned.iter().map(|r| r.load(Ordering::SeqCst)).collect();
            let mut flush = tracker.begin_flush().unwrap();
            let hi: Vec<u64> = started.iter().map(|r| r.load(Ordering::SeqCst)).collect();
            let offsets = wait_ok(&mut flush);
            for p in 0..SENDERS {
                match offsets.get(&p) {
                    Some(&x) => {
                        assert!(x > committed[p], "{x} was already committed");
                        assert!(
                            x >= lo[p],
                            "send {} returned before the seal, got {x}",
                            lo[p]
                        );
                        assert!(x <= hi[p], "send {x} began after the seal ({})", hi[p]);
                        assert!(x <= acked[p].load(Ordering::SeqCst), "{x} not acked yet");
                        committed[p] = x;
                    }
                    None => assert!(lo[p] <= committed[p], "send {} is absent", lo[p]),
                }
            }
            flush.commit().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
    });
    assert_eq!(tracker.in_flight(), 0);
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = wait_ok(&mut flush);
    for (p, r) in returned.iter().enumerate() {
        let last = r.load(Ordering::SeqCst);
        assert!(offsets.get(&p).is_none_or(|&x| x == last));
    }
}

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
    for round in 0..200_u64 {
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

/// Waits on `flush` (for up to `timeout`) while `resolve` runs on another
/// thread. That thread stays alive until the wait has returned: the end of a
/// scoped thread unparks the thread that owns the scope, which would hide a
/// lost wake-up.
fn wait_while<P, O>(
    flush: &mut Flush<'_, P, O>,
    timeout: Duration,
    resolve: impl FnOnce() + Send,
) -> Result<HashMap<P, O>, FlushError>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    let (done_tx, done_rx) = mpsc::channel::<()>();
    thread::scope(|s| {
        s.spawn(move || {
            resolve();
            let _ = done_rx.recv();
        });
        let result = flush.wait(timeout);
        drop(done_tx);
        result
    })
}

#[test]
fn g4_wait_wakes_on_the_last_ack_from_another_thread() {
    let tracker = Tracker::<u8, u64>::new();
    for round in 0..300_u64 {
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
            for o in 0..(round % 4) * 500 {
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
    for round in 0..50_u64 {
        // A tracker per round: a failure stays covered by every later flush,
        // which then fails at once without waiting (guarantee 15).
        let tracker = Tracker::<u8, u64>::new();
        let a = tracker.send(0, 1).unwrap();
        let b = tracker.send(0, 2).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        tracker.ack(a).unwrap();
        let result = wait_while(&mut flush, FOREVER, || {
            for o in 0..(round % 4) * 500 {
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
    for round in 0..100_u64 {
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
            for o in 0..(round % 3) * 500 {
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
    let tracker = Tracker::<usize, u64>::new();
    for round in 0..50_u64 {
        let per: Vec<Vec<Ticket>> = (0..ACKERS)
            .map(|p| {
                (0..50)
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
        let expected: HashMap<usize, u64> = (0..ACKERS).map(|p| (p, round * 100 + 49)).collect();
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
    for round in 0..50 {
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
    for round in 0..300_u64 {
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

// ---------------------------------------------------------------------------
// Guarantee 6: exactly-once resolution. A forged, stale, foreign or already
// resolved ticket (any u64) is an error and changes nothing.
// ---------------------------------------------------------------------------

#[test]
fn g6_double_resolution_via_raw_is_already_resolved() {
    let tracker = Tracker::<&str, u64>::new();
    let keep = tracker.send("p", 0).unwrap();
    let a = tracker.send("p", 1).unwrap().into_raw();
    let b = tracker.send("p", 2).unwrap().into_raw();
    tracker.ack_raw(a).unwrap();
    tracker.fail_raw(b).unwrap();
    for raw in [a, b] {
        assert_eq!(tracker.ack_raw(raw), Err(ResolveError::AlreadyResolved));
        assert_eq!(tracker.fail_raw(raw), Err(ResolveError::AlreadyResolved));
    }
    assert_eq!(tracker.in_flight(), 1);
    let mut flush = tracker.begin_flush().unwrap();
    tracker.ack(keep).unwrap();
    // Still exactly one failure: the second fail_raw of `b` changed nothing.
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Failed { failed: 1 }));
}

#[test]
fn g6_double_ack_of_acked_record_does_not_fail_it() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap().into_raw();
    tracker.ack_raw(a).unwrap();
    // The record is retained (latest of its partition): a late fail_raw must
    // not turn it into a failure.
    assert_eq!(tracker.fail_raw(a), Err(ResolveError::AlreadyResolved));
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(map([("p", 1)])));
    flush.commit().unwrap();
    // And after the commit released the slot.
    assert!(tracker.fail_raw(a).is_err());
    assert!(tracker.ack_raw(a).is_err());
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(HashMap::new()));
}

#[test]
fn g6_stale_raw_ticket_of_a_reused_slot_changes_nothing() {
    let tracker = Tracker::<&str, u64>::new();
    // Send and ack records until a slot has been reused by a live record.
    // Each record is followed by a newer one of the same partition, so its
    // slot is not retained and returns to the free list when acked.
    let mut stale: Vec<u64> = Vec::new();
    let mut reused: Option<(u64, u64, u64)> = None;
    for o in 0..1_000_u64 {
        let raw = tracker.send("p", o).unwrap().into_raw();
        if let Some(old) = stale
            .iter()
            .copied()
            .find(|&s| raw_slot(s) == raw_slot(raw))
        {
            assert_ne!(old, raw, "a reused slot issues a new tag");
            reused = Some((old, o, raw));
            break;
        }
        // A newer record displaces this one from its partition cell.
        let next = tracker.send("p", o + 1_000_000).unwrap().into_raw();
        tracker.ack_raw(raw).unwrap();
        stale.push(raw);
        tracker.ack_raw(next).unwrap();
        stale.push(next);
    }
    let (old, offset, live) = reused.expect("no slot was reused in 1000 sends");
    let mut flush = tracker.begin_flush().unwrap();
    let in_flight = tracker.in_flight();
    assert_eq!(in_flight, 1);
    assert_eq!(flush.pending(), 1);
    assert_eq!(tracker.ack_raw(old), Err(ResolveError::AlreadyResolved));
    assert_eq!(tracker.fail_raw(old), Err(ResolveError::AlreadyResolved));
    assert_eq!(tracker.in_flight(), in_flight);
    assert_eq!(flush.pending(), 1);
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    // The new record is still pending and un-acked: its own ticket resolves
    // it, and it was neither acked nor failed by the stale one.
    tracker.ack_raw(live).unwrap();
    assert_eq!(tracker.ack_raw(old), Err(ResolveError::AlreadyResolved));
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", offset)])));
    flush.commit().unwrap();
}

#[test]
fn g6_foreign_tracker_ticket_is_rejected() {
    let first = Tracker::<&str, u64>::new();
    let mut second = Tracker::<&str, u64>::new();
    // Tracker ids are 8 bits of a global counter; trackers created by tests
    // running in parallel could make these two collide, so make sure not.
    while tracker_id(&first, "id", 0) == tracker_id(&second, "id", 0) {
        second = Tracker::new();
    }
    let raw = first.send("p", 1).unwrap().into_raw();
    let theirs = second.send("p", 2).unwrap();
    let mut flush = second.begin_flush().unwrap();
    assert_eq!(second.ack_raw(raw), Err(ResolveError::ForeignTracker));
    assert_eq!(second.fail_raw(raw), Err(ResolveError::ForeignTracker));
    assert_eq!(second.in_flight(), 1);
    assert_eq!(flush.pending(), 1);
    assert_eq!(first.in_flight(), 1);
    // A typed ticket too.
    let typed = first.send("p", 3).unwrap();
    assert_eq!(second.ack(typed), Err(ResolveError::ForeignTracker));
    assert_eq!(second.in_flight(), 1);
    assert_eq!(
        first.in_flight(),
        2,
        "the record stays pending in its tracker"
    );
    // The raw ticket still works where it belongs.
    first.ack_raw(raw).unwrap();
    assert_eq!(first.in_flight(), 1);
    second.ack(theirs).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("id", 0), ("p", 2)])));
}

#[test]
fn g6_ticket_of_a_tracker_whose_id_collides_is_rejected() {
    // Tracker ids are 8 bits, so the 256th tracker created after this one
    // shares its id. The scenario: a source task's tracker is replaced (a
    // bounce) and a late producer callback of the old tracker acks on the
    // new one. Slot and tag must still tell the two apart.
    let old = Tracker::<u8, u64>::new();
    let raw = old.send(0, 1).unwrap().into_raw();
    let mut collider = None;
    for _ in 0..100_000 {
        let candidate = Tracker::<u8, u64>::new();
        let own = candidate.send(0, 100).unwrap().into_raw();
        if raw_tracker(own) == raw_tracker(raw) {
            collider = Some((candidate, own));
            break;
        }
    }
    let (new, own) = collider.expect("tracker ids repeat every 256 trackers");
    assert_eq!(new.in_flight(), 1);
    // The old tracker's ticket must not resolve the new tracker's record.
    assert!(
        new.ack_raw(raw).is_err(),
        "a ticket of another tracker ({raw:#x}) acked this tracker's record ({own:#x})"
    );
    assert_eq!(new.in_flight(), 1);
    new.ack_raw(own).unwrap();
    old.ack_raw(raw).unwrap();
}

#[test]
fn g6_arbitrary_u64_values_never_resolve_anything() {
    let tracker = Tracker::<u32, u64>::new();
    let id = tracker_id(&tracker, 99, 0);
    let mut all: Vec<u64> = Vec::new();
    let mut live: HashSet<u64> = HashSet::new();
    let mut rng = Rng::new(6);
    let mut covered_expected: HashMap<u32, u64> = HashMap::new();
    covered_expected.insert(99, 0);
    // Covered records, some resolved (a few retained as their partition's
    // latest, a few freed), some live.
    for o in 1..=60_u64 {
        let p = (o % 5) as u32;
        let raw = tracker.send(p, o).unwrap().into_raw();
        covered_expected.insert(p, o);
        all.push(raw);
        if rng.below(3) == 0 {
            tracker.ack_raw(raw).unwrap();
        } else {
            live.insert(raw);
        }
    }
    let mut flush = tracker.begin_flush().unwrap();
    // Uncovered records in the open generation.
    let mut open_expected: HashMap<u32, u64> = HashMap::new();
    for o in 100..130_u64 {
        let p = (o % 4) as u32;
        let raw = tracker.send(p, o).unwrap().into_raw();
        open_expected.insert(p, o);
        all.push(raw);
        if rng.below(3) == 0 {
            tracker.ack_raw(raw).unwrap();
        } else {
            live.insert(raw);
        }
    }
    let in_flight = tracker.in_flight();
    let pending = flush.pending();
    assert_eq!(in_flight, live.len());

    let mut values: Vec<u64> = vec![0, 1, u64::MAX, u64::MAX - 1, 1 << 32, u64::MAX >> 8];
    for bit in 0..64 {
        values.push(1 << bit);
        values.push(!(1 << bit));
    }
    for _ in 0..40_000 {
        values.push(rng.next());
    }
    // Near misses of every ticket the tracker issued: each bit flipped, tags
    // one off, this tracker's id on random slots and tags.
    for &raw in &all {
        for bit in 0..64 {
            values.push(raw ^ (1 << bit));
        }
        values.push(raw.wrapping_add(1));
        values.push(raw.wrapping_sub(1));
        values.push(raw & !0xFFFF_FFFF);
        values.push(raw | 0xFFFF_FFFF);
        values.push(raw ^ (1 << 56) ^ (1 << 63));
    }
    for _ in 0..20_000 {
        let slot = rng.below(300);
        let tag = rng.below(4);
        values.push((u64::from(id) << 56) | (slot << 32) | tag);
    }
    for _ in 0..2_000 {
        values.push((u64::from(id) << 56) | (rng.next() >> 8));
    }

    for (i, &value) in values.iter().enumerate() {
        if live.contains(&value) {
            continue; // a genuine ticket
        }
        let ack = tracker.ack_raw(value);
        let fail = tracker.fail_raw(value);
        assert!(ack.is_err(), "ack_raw({value:#x}) resolved something");
        assert!(fail.is_err(), "fail_raw({value:#x}) resolved something");
        if raw_tracker(value) != id {
            assert_eq!(ack, Err(ResolveError::ForeignTracker));
            assert_eq!(fail, Err(ResolveError::ForeignTracker));
        } else {
            assert_ne!(ack, Err(ResolveError::ForeignTracker));
        }
        if i % 7 == 0 || raw_tracker(value) == id {
            assert_eq!(tracker.in_flight(), in_flight, "after {value:#x}");
            assert_eq!(flush.pending(), pending, "after {value:#x}");
        }
    }
    assert_eq!(tracker.in_flight(), in_flight);
    assert_eq!(flush.pending(), pending);

    // Every genuine ticket still resolves, nothing was failed, and the
    // retained offsets are intact.
    for raw in live {
        tracker.ack_raw(raw).unwrap();
    }
    assert_eq!(tracker.in_flight(), 0);
    assert_eq!(flush.wait(GENEROUS), Ok(covered_expected));
    flush.commit().unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(open_expected));
    flush.commit().unwrap();
}

// ---------------------------------------------------------------------------
// Guarantee 7: abort merges. After abort (or drop) the next flush covers the
// aborted records and newer ones; later sends win.
// ---------------------------------------------------------------------------

#[test]
fn g7_abort_merges_into_the_next_flush_and_later_sends_win() {
    let tracker = Tracker::<&str, u64>::new();
    let p1 = tracker.send("p", 10).unwrap();
    let q1 = tracker.send("q", 20).unwrap();
    let flush = tracker.begin_flush().unwrap();
    flush.abort();
    // Lower values, later sends: they must win over the aborted ones.
    let p2 = tracker.send("p", 5).unwrap();
    let r2 = tracker.send("r", 30).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 4);
    // Ack the newest first, the oldest last.
    for t in [r2, p2, q1] {
        tracker.ack(t).unwrap();
    }
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    tracker.ack(p1).unwrap();
    assert_eq!(
        flush.wait(GENEROUS),
        Ok(map([("p", 5), ("q", 20), ("r", 30)]))
    );
    flush.commit().unwrap();
}

#[test]
fn g7_dropping_a_flush_aborts_it() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    {
        let _flush = tracker.begin_flush().unwrap();
    }
    let b = tracker.send("q", 2).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 2);
    tracker.ack(b).unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    tracker.ack(a).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1), ("q", 2)])));
}

#[test]
fn g7_timeout_then_abort_then_more_acks() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    let b = tracker.send("p", 2).unwrap();
    let c = tracker.send("q", 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 2 })
    );
    flush.abort();
    // Acks between flushes, and newer records.
    tracker.ack(b).unwrap();
    let d = tracker.send("p", 3).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 2);
    tracker.ack(d).unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    flush.abort();
    tracker.ack(c).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 0);
    assert_eq!(flush.wait(Duration::ZERO), Ok(map([("p", 3), ("q", 1)])));
    flush.commit().unwrap();
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn g7_abort_after_ok_keeps_the_offsets_for_the_next_flush() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    let b = tracker.send("q", 1).unwrap();
    tracker.ack(a).unwrap();
    tracker.ack(b).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1), ("q", 1)])));
    // Storing the offsets failed: abort.
    flush.abort();
    // Nothing new: the same offsets again.
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1), ("q", 1)])));
    drop(flush);
    // Something new in one partition: it wins there, the other stays.
    let c = tracker.send("q", 2).unwrap();
    tracker.ack(c).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1), ("q", 2)])));
    flush.commit().unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(HashMap::new()));
}

#[test]
fn g7_many_aborts_accumulate_into_one_flush() {
    let tracker = Tracker::<u64, u64>::new();
    let mut tickets = Vec::new();
    let mut expected = HashMap::new();
    for round in 0..50_u64 {
        for p in 0..3 {
            if (round + p) % 4 != 0 {
                tickets.push(tracker.send(p, round).unwrap());
                expected.insert(p, round);
            }
        }
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(flush.pending(), tickets.len());
        assert!(flush.wait(Duration::ZERO).is_err());
        if round % 2 == 0 {
            flush.abort();
        } else {
            drop(flush);
        }
    }
    let mut flush = tracker.begin_flush().unwrap();
    for t in tickets {
        tracker.ack(t).unwrap();
    }
    assert_eq!(flush.wait(GENEROUS), Ok(expected));
    flush.commit().unwrap();
}

// ---------------------------------------------------------------------------
// Guarantee 8: one flush at a time; commit without an Ok wait is NotReady
// and releases (aborts) the flush.
// ---------------------------------------------------------------------------

#[test]
fn g8_begin_flush_while_a_flush_is_alive_is_in_progress() {
    let tracker = Tracker::<&str, u64>::new();
    let t = tracker.send("p", 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(
        tracker.begin_flush().err(),
        Some(BeginFlushError::InProgress)
    );
    // Also from another thread.
    thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(
                tracker.begin_flush().err(),
                Some(BeginFlushError::InProgress)
            );
        });
    });
    // The refused begin_flush sealed nothing: a send now is still uncovered.
    let late = tracker.send("p", 2).unwrap();
    tracker.ack(late).unwrap();
    tracker.ack(t).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1)])));
    assert_eq!(
        tracker.begin_flush().err(),
        Some(BeginFlushError::InProgress)
    );
    flush.commit().unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 2)])));
}

#[test]
fn g8_commit_without_an_ok_wait_is_not_ready_and_releases_the_flush() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();

    // Never waited.
    let flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // Waited, timed out.
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // Waited, interrupted.
    let mut flush = tracker.begin_flush().unwrap();
    tracker.interrupt();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Interrupted));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // Not ready even if everything is acked by now, as long as wait did not
    // say Ok.
    let flush = tracker.begin_flush().unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // The NotReady commits aborted: the records are still covered.
    let b = tracker.send("p", 2).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 1);
    tracker.ack(b).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 2)])));
    flush.commit().unwrap();
}

#[test]
fn g8_commit_after_failed_wait_is_not_ready() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    tracker.fail(a).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Failed { failed: 1 }));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    assert!(tracker.begin_flush().is_ok());
}

#[test]
fn g8_commit_after_ok_starts_the_next_flush_fresh() {
    let tracker = Tracker::<&str, u64>::new();
    for round in 0..20_u64 {
        let t = tracker.send("p", round).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        tracker.ack(t).unwrap();
        assert_eq!(flush.wait(GENEROUS), Ok(map([("p", round)])));
        flush.commit().unwrap();
        let mut empty = tracker.begin_flush().unwrap();
        assert_eq!(empty.pending(), 0);
        assert_eq!(empty.wait(Duration::ZERO), Ok(HashMap::new()));
        empty.commit().unwrap();
    }
}

// ---------------------------------------------------------------------------
// Guarantee 9: close. Sends are refused with their record; outstanding
// tickets still resolve; a final flush drains everything accepted.
// ---------------------------------------------------------------------------

#[test]
fn g9_send_after_close_returns_the_record() {
    let tracker = Tracker::<String, Vec<u8>>::new();
    tracker.close();
    tracker.close(); // idempotent
    match tracker.send("p".to_string(), vec![1, 2, 3]) {
        Err(SendError::Closed(p, o)) => {
            assert_eq!(p, "p");
            assert_eq!(o, vec![1, 2, 3]);
        }
        other => panic!("expected Closed, got {other:?}"),
    }
    let err = tracker.send("q".to_string(), vec![4]).unwrap_err();
    assert_eq!(err.into_inner(), ("q".to_string(), vec![4]));
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn g9_outstanding_tickets_resolve_after_close_and_a_final_flush_drains() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    let b = tracker.send("q", 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    flush.abort();
    let c = tracker.send("p", 2).unwrap();
    let d = tracker.send("r", 9).unwrap().into_raw();
    tracker.close();
    assert!(matches!(
        tracker.send("p", 3),
        Err(SendError::Closed("p", 3))
    ));
    tracker.ack(b).unwrap();
    tracker.ack(c).unwrap();
    tracker.ack_raw(d).unwrap();
    assert_eq!(tracker.in_flight(), 0);
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(
        flush.wait(GENEROUS),
        Ok(map([("p", 2), ("q", 1), ("r", 9)]))
    );
    flush.commit().unwrap();
}

#[test]
fn g9_close_during_a_flush() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let b = tracker.send("p", 2).unwrap();
    tracker.close();
    assert!(matches!(
        tracker.send("p", 3),
        Err(SendError::Closed("p", 3))
    ));
    tracker.ack(a).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1)])));
    flush.commit().unwrap();
    let mut last = tracker.begin_flush().unwrap();
    assert_eq!(last.pending(), 1);
    let result = wait_while(&mut last, FOREVER, || tracker.ack(b).unwrap());
    assert_eq!(result, Ok(map([("p", 2)])));
    last.commit().unwrap();
}

#[test]
fn g9_close_racing_senders_final_flush_covers_every_accepted_record() {
    const SENDERS: u32 = 3;
    for round in 0..20 {
        let tracker = Tracker::<u32, u64>::new();
        let barrier = Barrier::new(SENDERS as usize + 1);
        let last_ok: Vec<u64> = thread::scope(|s| {
            let handles: Vec<_> = (0..SENDERS)
                .map(|p| {
                    let (tracker, barrier) = (&tracker, &barrier);
                    s.spawn(move || {
                        let mut last = 0;
                        for o in 1.. {
                            if o == 100 {
                                barrier.wait();
                            }
                            match tracker.send(p, o) {
                                Ok(t) => {
                                    last = o;
                                    tracker.ack(t).unwrap();
                                }
                                Err(SendError::Closed(rp, ro)) => {
                                    assert_eq!((rp, ro), (p, o));
                                    assert!(o >= 100, "closed before the barrier");
                                    break;
                                }
                                Err(e) => panic!("unexpected {e:?}"),
                            }
                        }
                        last
                    })
                })
                .collect();
            barrier.wait();
            tracker.close();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(tracker.in_flight(), 0);
        let mut flush = tracker.begin_flush().unwrap();
        let expected: HashMap<u32, u64> = (0..SENDERS).zip(last_ok).collect();
        assert_eq!(flush.wait(GENEROUS), Ok(expected), "round {round}");
        flush.commit().unwrap();
    }
}

// ---------------------------------------------------------------------------
// Guarantee 10: lock-freedom of send/ack/fail/begin_flush/commit/abort is
// structural (no lock in the crate, checked by review and the loom models);
// it has no behavioural integration test here.
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Guarantee 11: wrong use is an error, not a panic. Plus the capacity bound.
// ---------------------------------------------------------------------------

#[test]
fn g11_capacity_zero_refuses_every_send_with_its_record() {
    let tracker = Tracker::<String, String>::with_capacity(0);
    for i in 0..100 {
        match tracker.send(format!("p{i}"), format!("o{i}")) {
            Err(SendError::Full(p, o)) => {
                assert_eq!(p, format!("p{i}"));
                assert_eq!(o, format!("o{i}"));
            }
            other => panic!("expected Full, got {other:?}"),
        }
    }
    assert_eq!(tracker.in_flight(), 0);
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(HashMap::new()));
}

#[test]
fn g11_capacity_usize_max_works() {
    let tracker = Tracker::<u8, u64>::with_capacity(usize::MAX);
    let tickets: Vec<_> = (0..1_000).map(|o| tracker.send(0, o).unwrap()).collect();
    assert_eq!(tracker.in_flight(), 1_000);
    let mut flush = tracker.begin_flush().unwrap();
    for t in tickets {
        tracker.ack(t).unwrap();
    }
    assert_eq!(flush.wait(GENEROUS), Ok(map([(0, 999)])));
    flush.commit().unwrap();
}

#[test]
fn g11_capacity_bound_is_exact_and_resolutions_make_room() {
    for n in [1_usize, 2, 7, 64, 100] {
        let tracker = Tracker::<String, u64>::with_capacity(n);
        let mut tickets: Vec<_> = (0..n)
            .map(|i| tracker.send(format!("p{}", i % 3), i as u64).unwrap())
            .collect();
        match tracker.send("extra".to_string(), 12345) {
            Err(SendError::Full(p, o)) => assert_eq!((p.as_str(), o), ("extra", 12345)),
            other => panic!("expected Full, got {other:?}"),
        }
        assert_eq!(tracker.in_flight(), n);
        // An ack makes room for exactly one more.
        tracker.ack(tickets.pop().unwrap()).unwrap();
        tickets.push(tracker.send("extra".to_string(), 1).unwrap());
        assert!(matches!(
            tracker.send("x".to_string(), 2),
            Err(SendError::Full(..))
        ));
        // So does a fail, and a raw resolution.
        tracker.fail(tickets.pop().unwrap()).unwrap();
        tickets.push(tracker.send("extra".to_string(), 3).unwrap());
        assert!(tracker.send("x".to_string(), 4).is_err());
        let raw = tickets.pop().unwrap().into_raw();
        tracker.ack_raw(raw).unwrap();
        // A refused duplicate resolution frees nothing.
        assert!(tracker.ack_raw(raw).is_err());
        tickets.push(tracker.send("extra".to_string(), 5).unwrap());
        assert!(tracker.send("x".to_string(), 6).is_err());
        // Flushes do not change the bound.
        let mut flush = tracker.begin_flush().unwrap();
        assert!(tracker.send("x".to_string(), 7).is_err());
        for t in tickets.drain(..) {
            tracker.ack(t).unwrap();
        }
        assert!(flush.wait(GENEROUS).is_err(), "one record failed");
        flush.abort();
        let again: Vec<_> = (0..n)
            .map(|i| tracker.send("y".to_string(), i as u64).unwrap())
            .collect();
        assert!(tracker.send("x".to_string(), 8).is_err());
        for t in again {
            tracker.ack(t).unwrap();
        }
        assert_eq!(tracker.in_flight(), 0);
    }
}

#[test]
fn g11_bounded_tracker_under_concurrency_never_exceeds_its_capacity() {
    const CAPACITY: usize = 16;
    let tracker = Tracker::<u8, u64>::with_capacity(CAPACITY);
    let holding = AtomicUsize::new(0);
    thread::scope(|s| {
        for p in 0..4_u8 {
            let (tracker, holding) = (&tracker, &holding);
            s.spawn(move || {
                let mut mine = Vec::new();
                let mut rng = Rng::new(u64::from(p) + 11);
                for o in 0..20_000_u64 {
                    match tracker.send(p, o) {
                        Ok(t) => {
                            let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(now <= CAPACITY, "{now} records in flight");
                            mine.push(t);
                        }
                        Err(SendError::Full(rp, ro)) => assert_eq!((rp, ro), (p, o)),
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                    if !mine.is_empty() && rng.below(2) == 0 {
                        let t = mine.swap_remove(0);
                        // Counted out before the resolution frees the permit.
                        holding.fetch_sub(1, Ordering::SeqCst);
                        tracker.ack(t).unwrap();
                    }
                }
                for t in mine {
                    holding.fetch_sub(1, Ordering::SeqCst);
                    tracker.ack(t).unwrap();
                }
            });
        }
    });
    assert_eq!(tracker.in_flight(), 0);
}

/// Resolutions leave their permits spare on their own thread's shard; a
/// send on another thread still gets every one of them: the bound is exact
/// across threads, below, at and above the 64 permits a shard keeps.
#[test]
fn g11_permits_freed_on_one_thread_serve_sends_on_another() {
    for n in [1_usize, 5, 64, 65, 200, 1000] {
        let tracker = Tracker::<u8, u64>::with_capacity(n);
        thread::scope(|s| {
            s.spawn(|| {
                let tickets: Vec<_> = (0..n).map(|i| tracker.send(0, i as u64).unwrap()).collect();
                assert!(tracker.send(0, 0).is_err(), "capacity {n}");
                for t in tickets {
                    tracker.ack(t).unwrap();
                }
            });
        });
        // Every permit is spare on the other thread's shard, or back in the
        // capacity: this thread gets exactly `n`.
        let tickets: Vec<_> = (0..n)
            .map(|i| {
                tracker
                    .send(1, i as u64)
                    .unwrap_or_else(|e| panic!("{i} of {n}: {e:?}"))
            })
            .collect();
        assert!(matches!(tracker.send(1, 0), Err(SendError::Full(..))));
        assert_eq!(tracker.in_flight(), n);
        // And back again, the permits now spare on this thread's shard.
        for t in tickets {
            tracker.ack(t).unwrap();
        }
        thread::scope(|s| {
            s.spawn(|| {
                let tickets: Vec<_> = (0..n).map(|i| tracker.send(2, i as u64).unwrap()).collect();
                assert!(tracker.send(2, 0).is_err());
                for t in tickets {
                    tracker.fail(t).unwrap();
                }
            });
        });
        assert_eq!(tracker.in_flight(), 0);
    }
}

/// A sender waiting for room is woken by a resolution on any thread, which
/// keeps the permit spare on its own shard unless a sender waits: the
/// waiter's flag reaches every shard. (The timeout only bounds a failure.)
#[test]
fn g11_a_sender_waiting_for_room_is_woken_by_a_resolution_elsewhere() {
    for round in 0..50_u64 {
        let tracker = Tracker::<u8, u64>::with_capacity(1);
        let held = tracker.send(0, round).unwrap();
        thread::scope(|s| {
            let waiter = s.spawn(|| tracker.send_timeout(1, round, Duration::from_secs(60)));
            // The resolution runs on a third thread, on another shard than
            // the waiter's.
            s.spawn(|| tracker.ack(held).unwrap());
            let ticket = waiter.join().unwrap().expect("woken with room");
            assert_eq!(tracker.in_flight(), 1);
            tracker.ack(ticket).unwrap();
        });
    }
}

#[test]
fn g11_wait_with_duration_max_returns_when_acked() {
    let tracker = Tracker::<u8, u64>::new();
    // Already acked: returns at once.
    let t = tracker.send(0, 1).unwrap();
    tracker.ack(t).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::MAX), Ok(map([(0, 1)])));
    flush.commit().unwrap();
    // Acked by another thread while waiting.
    let t = tracker.send(0, 2).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let result = wait_while(&mut flush, Duration::MAX, || tracker.ack(t).unwrap());
    assert_eq!(result, Ok(map([(0, 2)])));
    flush.commit().unwrap();
    // Interrupted while waiting with no deadline.
    let _pending = tracker.send(0, 3).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let result = wait_while(&mut flush, Duration::MAX, || tracker.interrupt());
    assert_eq!(result, Err(FlushError::Interrupted));
    // The largest Duration other than MAX too.
    drop(flush);
    let mut flush = tracker.begin_flush().unwrap();
    tracker.interrupt();
    assert_eq!(
        flush.wait(Duration::new(u64::MAX, 0)),
        Err(FlushError::Interrupted)
    );
}

#[test]
fn g11_errors_implement_error_and_display() {
    fn check<E: std::error::Error + std::fmt::Display + std::fmt::Debug>(e: E) {
        assert!(!e.to_string().is_empty(), "{e:?} displays as nothing");
        assert!(!format!("{e:?}").is_empty());
        let boxed: Box<dyn std::error::Error> = Box::new(e);
        assert!(!boxed.to_string().is_empty());
    }
    // SendError needs no Debug/Display bound on the record.
    struct Opaque;
    check(SendError::Full(Opaque, Opaque));
    check(SendError::<Opaque, Opaque>::Closed(Opaque, Opaque));
    check(ResolveError::Unknown);
    check(ResolveError::AlreadyResolved);
    check(ResolveError::ForeignTracker);
    check(BeginFlushError::InProgress);
    check(FlushError::Timeout { pending: 3 });
    check(FlushError::Interrupted);
    check(FlushError::Failed { failed: 2 });
    check(FlushError::NotReady);
    assert!(FlushError::Timeout { pending: 3 }.to_string().contains('3'));
    assert!(FlushError::Failed { failed: 2 }.to_string().contains('2'));
}

#[test]
fn g11_public_types_are_send_sync_and_tickets_are_static() {
    fn send_sync<T: Send + Sync>() {}
    fn static_send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Tracker<String, u64>>();
    send_sync::<Arc<Tracker<String, String>>>();
    static_send_sync::<Ticket>();
    static_send_sync::<ResolveError>();
    static_send_sync::<FlushError>();
    static_send_sync::<BeginFlushError>();
    static_send_sync::<SendError<String, u64>>();
    fn send<T: Send>() {}
    send::<Flush<'static, String, u64>>();
}

#[test]
fn g11_misuse_sequences_do_not_panic() {
    let tracker = Tracker::<u8, u64>::new();
    tracker.interrupt(); // no flush at all
    tracker.interrupt();
    assert!(tracker.ack_raw(0).is_err());
    assert!(tracker.fail_raw(u64::MAX).is_err());
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 0);
    assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Interrupted));
    assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Interrupted));
    assert_eq!(flush.pending(), 0);
    flush.abort();
    for _ in 0..10 {
        assert_eq!(
            tracker.begin_flush().unwrap().commit(),
            Err(FlushError::NotReady)
        );
    }
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(HashMap::new()));
    // Waiting again after Ok is harmless.
    assert_eq!(flush.wait(Duration::ZERO), Ok(HashMap::new()));
    flush.commit().unwrap();
    tracker.close();
    tracker.close();
    tracker.interrupt();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Interrupted));
    drop(flush);
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(HashMap::new()));
    assert_eq!(tracker.in_flight(), 0);
    // A tracker dropped with records in flight, a live ticket outliving it,
    // and an open flush dropped first.
    let other = Tracker::<String, String>::new();
    let orphan = other.send("p".into(), "o".into()).unwrap();
    let acked = other.send("p".into(), "o2".into()).unwrap();
    other.ack(acked).unwrap();
    let flush = other.begin_flush().unwrap();
    drop(flush);
    drop(other);
    let _ = orphan.into_raw();
}

#[test]
fn g11_zero_sized_partitions_and_offsets() {
    let tracker = Tracker::<(), ()>::new();
    let tickets: Vec<_> = (0..100).map(|_| tracker.send((), ()).unwrap()).collect();
    let mut flush = tracker.begin_flush().unwrap();
    for t in tickets {
        tracker.ack(t).unwrap();
    }
    assert_eq!(flush.wait(GENEROUS), Ok(map([((), ())])));
    flush.commit().unwrap();
}

/// An offset type that counts its live instances, to catch leaks and double
/// drops of offsets held in slots, retained cells and the flush carry.
#[derive(Debug)]
struct Counted {
    value: u64,
    live: Arc<AtomicUsize>,
}

impl Counted {
    fn new(value: u64, live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        Counted {
            value,
            live: Arc::clone(live),
        }
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        Counted::new(self.value, &self.live)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let before = self.live.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "offset {} dropped twice", self.value);
    }
}

#[test]
fn g11_offsets_are_dropped_exactly_once() {
    let live = Arc::new(AtomicUsize::new(0));
    {
        let tracker = Tracker::<u8, Counted>::with_capacity(64);
        let mut rng = Rng::new(11);
        let mut tickets = Vec::new();
        for round in 0..200_u64 {
            for i in 0..(rng.below(20)) {
                match tracker.send((rng.below(5)) as u8, Counted::new(round * 100 + i, &live)) {
                    Ok(t) => tickets.push(t),
                    Err(e) => drop(e.into_inner()),
                }
            }
            // Resolve a random part, some by fail, some never.
            let keep = rng.below(tickets.len() as u64 + 1) as usize;
            for t in tickets.drain(keep..) {
                match rng.below(20) {
                    0 => tracker.fail(t).unwrap(),
                    1 => drop(t),
                    _ => tracker.ack(t).unwrap(),
                }
            }
            let mut flush = tracker.begin_flush().unwrap();
            match flush.wait(Duration::ZERO) {
                Ok(offsets) => {
                    drop(offsets);
                    if rng.below(3) == 0 {
                        flush.abort();
                    } else {
                        flush.commit().unwrap();
                    }
                }
                Err(_) => flush.abort(),
            }
            if round == 150 {
                tracker.close();
            }
        }
        drop(tickets);
        assert!(live.load(Ordering::SeqCst) > 0);
    }
    assert_eq!(live.load(Ordering::SeqCst), 0, "offsets leaked");
}

#[test]
fn g11_offsets_are_dropped_exactly_once_in_simple_cases() {
    let live = Arc::new(AtomicUsize::new(0));
    {
        let tracker = Tracker::<&str, Counted>::with_capacity(2);
        // Resolved and freed: the offset stays in its slot (resolution runs
        // no user code) until a send reuses the slot.
        let a = tracker.send("p", Counted::new(1, &live)).unwrap();
        let b = tracker.send("p", Counted::new(2, &live)).unwrap();
        tracker.ack(a).unwrap();
        assert_eq!(live.load(Ordering::SeqCst), 2, "kept until reused");
        // Retained as the latest of its partition, then committed.
        tracker.ack(b).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let offsets = flush.wait(GENEROUS).unwrap();
        assert_eq!(offsets["p"].value, 2);
        drop(offsets);
        flush.commit().unwrap();
        assert_eq!(live.load(Ordering::SeqCst), 2, "kept until reused");
        // Each send that reuses a slot drops the offset it held.
        for value in 3..5 {
            let t = tracker.send("p", Counted::new(value, &live)).unwrap();
            tracker.ack(t).unwrap();
        }
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(flush.wait(GENEROUS).unwrap()["p"].value, 4);
        flush.commit().unwrap();
        assert_eq!(live.load(Ordering::SeqCst), 2, "3 and 4 replaced 1 and 2");
        // Refused records come back and are dropped by the caller only.
        tracker.close();
        let e = tracker.send("p", Counted::new(5, &live)).unwrap_err();
        assert_eq!(live.load(Ordering::SeqCst), 3);
        drop(e);
        assert_eq!(live.load(Ordering::SeqCst), 2);
    }
    assert_eq!(live.load(Ordering::SeqCst), 0, "the tracker drops the rest");
}

/// A partition whose `Hash` panics for one value: user code that panics
/// inside `send` must not leak capacity or leave a record half-sent.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Touchy(u32);

impl Hash for Touchy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        assert_ne!(self.0, 13, "Touchy(13) refuses to be hashed");
        self.0.hash(state);
    }
}

#[test]
fn g11_panicking_partition_hash_leaks_no_capacity() {
    let tracker = Tracker::<Touchy, u64>::with_capacity(1);
    for _ in 0..3 {
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tracker.send(Touchy(13), 1)));
        assert!(result.is_err(), "the user's Hash panicked");
        assert_eq!(tracker.in_flight(), 0);
    }
    // The single permit is still free.
    let t = tracker.send(Touchy(1), 2).unwrap();
    assert!(matches!(
        tracker.send(Touchy(2), 3),
        Err(SendError::Full(Touchy(2), 3))
    ));
    let mut flush = tracker.begin_flush().unwrap();
    tracker.ack(t).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([(Touchy(1), 2)])));
    flush.commit().unwrap();
}

/// An offset whose `Clone` panics once when armed.
#[derive(Debug)]
struct Fragile {
    value: u64,
    armed: Arc<AtomicBool>,
}

impl Clone for Fragile {
    fn clone(&self) -> Self {
        assert!(
            !self.armed.swap(false, Ordering::SeqCst),
            "Fragile::clone failed"
        );
        Fragile {
            value: self.value,
            armed: Arc::clone(&self.armed),
        }
    }
}

#[test]
fn g11_panicking_offset_clone_in_wait_leaves_the_flush_not_ready() {
    let armed = Arc::new(AtomicBool::new(false));
    let tracker = Tracker::<&str, Fragile>::new();
    let t = tracker
        .send(
            "p",
            Fragile {
                value: 7,
                armed: Arc::clone(&armed),
            },
        )
        .unwrap();
    tracker.ack(t).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    armed.store(true, Ordering::SeqCst);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        flush.wait(GENEROUS).map(|o| o.len())
    }));
    assert!(result.is_err(), "the user's Clone panicked");
    // The offsets were never returned, so they cannot be committed...
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // ...and the next flush returns them.
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = flush.wait(GENEROUS).unwrap();
    assert_eq!(offsets["p"].value, 7);
    flush.commit().unwrap();
    assert_eq!(tracker.in_flight(), 0);
}
