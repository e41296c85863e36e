//! Guarantees 1 and 2: nothing is lost, and the seal is linearizable with
//! `send`.

use super::*;

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
    for i in 0..scaled(5_000_u64) {
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
        if i % scaled(500) == 0 {
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
    assert!(matches!(
        tracker.send("p", 3),
        Err(SendError::Full("p", 3, _))
    ));
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
                    for i in 0..scaled(OPS) {
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
    for i in 0..if cfg!(miri) { 60 } else { 300_i64 } {
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
    let partitions = scaled(2_000_u32);
    for round in 0..3_u64 {
        for p in 0..partitions {
            tickets.push(tracker.send(p, round * 10_000 + u64::from(p)).unwrap());
        }
    }
    let mut flush = tracker.begin_flush().unwrap();
    for t in tickets.drain(..).rev() {
        tracker.ack(t).unwrap();
    }
    let offsets = wait_ok(&mut flush);
    assert_eq!(offsets.len(), partitions as usize);
    for p in 0..partitions {
        assert_eq!(offsets[&p], 20_000 + u64::from(p));
    }
    flush.commit().unwrap();
}

#[test]
fn g2_partitions_first_seen_concurrently_get_one_identity() {
    // Threads race to introduce the same new partitions; afterwards one
    // more send per partition must be the offset every partition reports.
    const THREADS: usize = 4;
    // Under Miri, still across four resizes of the partition index.
    const PARTITIONS: u32 = if cfg!(miri) { 40 } else { 300 };
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
        for _ in 0..if cfg!(miri) { 15 } else { 30_000 } {
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
