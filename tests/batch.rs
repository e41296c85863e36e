//! Batches: `send_batch`, `ack_all` and `fail_all` do what a loop of
//! `send`, `ack` and `fail` does, refuse part of a batch without losing a
//! record, and back out cleanly when user code panics in the middle.

#[macro_use]
mod modes;

use inflight::{FlushError, Refused, ResolveError, Ticket, Tracker};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

mod common;
use common::{flush_now, Rng};

#[test]
fn a_batch_is_sent_in_order_and_resolves_ticket_by_ticket() {
    let tracker = Tracker::new();
    let mut tickets = Vec::new();
    // Several chunks: 64, 64, 22.
    assert_eq!(
        tracker.send_batch(&"p", 0_u64..150, &mut tickets).unwrap(),
        150
    );
    assert_eq!(tracker.in_flight(), 150);
    let mut flush = tracker.begin_flush().unwrap();
    // Out of order, one at a time: the flush waits for the last of them.
    let last = tickets.pop().unwrap();
    for t in tickets.drain(..).rev() {
        tracker.ack(t).unwrap();
    }
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    tracker.ack(last).unwrap();
    assert_eq!(flush.wait(Duration::ZERO).unwrap()[&"p"], 149);
    flush.commit().unwrap();
}

#[test]
fn an_empty_batch_sends_nothing() {
    let tracker = Tracker::<&str, u64>::new();
    let mut tickets = Vec::new();
    assert_eq!(tracker.send_batch(&"p", [], &mut tickets).unwrap(), 0);
    assert!(tickets.is_empty());
    assert_eq!(tracker.ack_all(tickets), Ok(0));
    assert_eq!(tracker.partitions(), 0, "an empty batch adds no partition");
}

#[test]
fn a_batch_over_capacity_sends_what_fits_and_gives_the_rest_back() {
    let tracker = Tracker::with_capacity(100);
    let mut tickets = Vec::new();
    let err = tracker
        .send_batch(&7_u32, 0_u64..150, &mut tickets)
        .unwrap_err();
    assert_eq!(err.reason, Refused::Full);
    assert_eq!(err.unsent, [100]);
    assert_eq!(tickets.len(), 100);
    assert_eq!(tracker.in_flight(), 100);
    let rest: Vec<u64> = err.into_offsets().collect();
    assert_eq!(rest, (100..150).collect::<Vec<_>>(), "nothing lost");
    // Room again: the rest goes.
    assert_eq!(tracker.ack_all(tickets.drain(..50)), Ok(50));
    assert_eq!(
        tracker
            .send_batch(&7, rest[..50].iter().copied(), &mut tickets)
            .unwrap(),
        50
    );
    assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(100));
    assert_eq!(flush_now(&tracker).unwrap()[&7], 149);
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn a_closed_tracker_refuses_the_whole_batch() {
    let tracker = Tracker::new();
    let mut tickets = Vec::new();
    tracker.send_batch(&"p", 0_u64..3, &mut tickets).unwrap();
    tracker.close();
    let err = tracker
        .send_batch(&"p", 3_u64..200, &mut tickets)
        .unwrap_err();
    assert_eq!(err.reason, Refused::Closed);
    assert_eq!(
        err.into_offsets().collect::<Vec<_>>(),
        (3..200).collect::<Vec<_>>()
    );
    assert_eq!(tickets.len(), 3);
    assert_eq!(tracker.in_flight(), 3);
}

#[test]
fn watermarks_pass_a_batch_acked_in_any_order() {
    let tracker = Tracker::builder().watermarks().build();
    let mut tickets = Vec::new();
    tracker.send_batch(&"a", 1_u64..=100, &mut tickets).unwrap();
    tracker.send_batch(&"b", 1_u64..=10, &mut tickets).unwrap();
    // Hold back a's offset 40 (sent 40th): a's watermark stops before it.
    let held = tickets.remove(39);
    let mut rng = Rng::new(7);
    for i in (1..tickets.len()).rev() {
        tickets.swap(i, rng.below(i as u64 + 1) as usize);
    }
    assert_eq!(tracker.ack_all(tickets), Ok(109));
    let committable = tracker.committable();
    assert_eq!(committable.get("a"), Some(&39));
    assert_eq!(committable.get("b"), Some(&10));
    tracker.ack(held).unwrap();
    assert_eq!(tracker.committable().get("a"), Some(&100));
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn a_progress_tracker_checks_each_record_of_a_batch() {
    let tracker = Tracker::<&str, u64>::builder().progress(4096).build();
    let mut tickets = Vec::new();
    let err = tracker
        .send_batch(&"p", [1_u64, 2, 5, 4, 9], &mut tickets)
        .unwrap_err();
    assert_eq!(err.reason, Refused::OutOfOrder);
    assert_eq!(err.into_offsets().collect::<Vec<_>>(), [4, 9]);
    assert_eq!(tickets.len(), 3);
    let five = tickets.pop().unwrap();
    assert_eq!(tracker.ack_all(tickets), Ok(2));
    tracker.ack(five).unwrap();
    assert_eq!(tracker.progress()[&"p"].next(), 6);
}

#[test]
fn a_batch_of_tickets_resolves_the_good_ones_and_counts_the_others() {
    let tracker = Tracker::new();
    let other = Tracker::new();
    let mut tickets = Vec::new();
    tracker.send_batch(&"p", 0_u64..4, &mut tickets).unwrap();
    tracker.send_batch(&"q", 0_u64..2, &mut tickets).unwrap();
    let theirs = other.send("p", 1_u64).unwrap();
    // The records of "q" are released by a revoke: their tickets answer
    // `Revoked`, and change nothing.
    let _ = tracker.revoke("q");
    tickets.insert(1, theirs);
    let err = tracker.ack_all(tickets).unwrap_err();
    assert_eq!((err.resolved, err.refused), (4, 3));
    assert_eq!(err.first, ResolveError::ForeignTracker);
    assert_eq!(tracker.in_flight(), 0);
    assert_eq!(other.in_flight(), 1);
    assert_eq!(flush_now(&tracker).unwrap()[&"p"], 3);
}

#[test]
fn fail_all_fails_every_flush_that_covers_the_batch() {
    let tracker = Tracker::new();
    let mut tickets = Vec::new();
    tracker.send_batch(&1_u8, 0_u64..70, &mut tickets).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let kept = tickets.split_off(60);
    assert_eq!(tracker.fail_all(tickets), Ok(60));
    // Failed at once, while 10 are still in flight.
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Failed { failed: 60 })
    );
    flush.abort();
    assert_eq!(tracker.ack_all(kept), Ok(10));
}

/// An iterator that panics when it reaches `at`.
fn panicking(at: u64) -> impl Iterator<Item = u64> {
    (0..).inspect(move |&i| assert!(i != at, "the source panicked"))
}

#[test]
fn a_source_that_panics_mid_chunk_leaves_only_whole_chunks_sent() {
    for (at, sent) in [(0, 0), (10, 0), (63, 0), (64, 64), (70, 64), (130, 128)] {
        each_mode!(tracker = [Tracker::new(), Tracker::builder().watermarks().build(), Tracker::builder().inline_offsets().build(), Tracker::builder().inline_offsets().watermarks().build()] {
            let mut tickets = Vec::new();
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                tracker.send_batch(&"p", panicking(at), &mut tickets)
            }));
            assert!(outcome.is_err(), "the panic goes on");
            assert_eq!(tickets.len(), sent, "panic at {at}");
            assert_eq!(
                tracker.in_flight(),
                sent,
                "panic at {at}: nothing else counts"
            );
            // A flush begun now covers exactly those: it completes once
            // they are acked, and names the last one.
            let mut flush = tracker.begin_flush().unwrap();
            assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(sent));
            let offsets = flush.wait(Duration::ZERO).unwrap();
            assert_eq!(offsets.get("p").copied(), (sent as u64).checked_sub(1));
            flush.commit().unwrap();
            // The backed-out slots are reused.
            assert_eq!(
                tracker
                    .send_batch(&"p", 1000_u64..1100, &mut tickets)
                    .unwrap(),
                100
            );
            assert_eq!(tracker.ack_all(tickets.drain(..)), Ok(100));
            assert_eq!(flush_now(&tracker).unwrap()[&"p"], 1099);
        });
    }
}

#[test]
fn tickets_that_panic_mid_batch_leave_the_resolved_ones_resolved() {
    each_mode!(tracker = [Tracker::new(), Tracker::builder().watermarks().build(), Tracker::builder().inline_offsets().build(), Tracker::builder().inline_offsets().watermarks().build()] {
        let mut tickets = Vec::new();
        tracker.send_batch(&"p", 0_u64..10, &mut tickets).unwrap();
        tracker.send_batch(&"q", 0_u64..10, &mut tickets).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        // Acks "p" 0..10 and "q" 0..5, then panics.
        let mut iter = tickets.into_iter();
        let first: Vec<Ticket> = iter.by_ref().take(15).collect();
        let rest: Vec<Ticket> = iter.collect();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let report = first
                .into_iter()
                .chain(std::iter::from_fn(|| -> Option<Ticket> {
                    panic!("the sink's report panicked")
                }));
            tracker.ack_all(report)
        }));
        assert!(outcome.is_err());
        assert_eq!(
            tracker.in_flight(),
            5,
            "the 15 acked before the panic count out"
        );
        assert_eq!(tracker.ack_all(rest), Ok(5));
        let offsets = flush.wait(Duration::ZERO).unwrap();
        assert_eq!((offsets[&"p"], offsets[&"q"]), (9, 9));
        flush.commit().unwrap();
    });
}

/// An offset whose `Drop` panics while `PANIC` is set, if it is below 10
/// (the old offsets; a new one dropped while unwinding must not panic).
#[derive(Clone, Debug, PartialEq)]
struct Touchy(u64);

static PANIC: AtomicBool = AtomicBool::new(false);
static DROPPED: AtomicU64 = AtomicU64::new(0);

impl Drop for Touchy {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::SeqCst);
        if PANIC.load(Ordering::SeqCst) && self.0 < 10 {
            panic!("Touchy({}) panicked in drop", self.0);
        }
    }
}

#[test]
fn an_old_offset_that_panics_when_its_slot_is_reused_mid_batch() {
    let tracker = Tracker::new();
    let mut tickets = Vec::new();
    tracker
        .send_batch(&"p", (0..3).map(Touchy), &mut tickets)
        .unwrap();
    tracker.ack_all(tickets.drain(..)).unwrap();
    flush_now(&tracker).unwrap();
    // Their slots hold the old offsets until reused: the batch's allocs
    // drop them, and the first drop panics.
    PANIC.store(true, Ordering::SeqCst);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        tracker.send_batch(&"p", (10..20).map(Touchy), &mut tickets)
    }));
    PANIC.store(false, Ordering::SeqCst);
    assert!(outcome.is_err());
    assert!(tickets.is_empty());
    assert_eq!(tracker.in_flight(), 0);
    assert_eq!(
        tracker
            .send_batch(&"p", (20..30).map(Touchy), &mut tickets)
            .unwrap(),
        10
    );
    tracker.ack_all(tickets.drain(..)).unwrap();
    assert_eq!(flush_now(&tracker).unwrap()[&"p"], Touchy(29));
}

/// Senders batch records of their own partition, ackers resolve them in
/// shuffled batches, and a committer flushes all along: every committed
/// offset's records, and all before them, were acked first.
#[test]
fn concurrent_batches_commit_only_what_was_acked() {
    const SENDERS: usize = 2;
    const RECORDS: u64 = 40_000;
    let tracker = Arc::new(Tracker::<usize, u64>::with_capacity(2_000));
    let acked: Arc<Vec<Vec<AtomicBool>>> = Arc::new(
        (0..SENDERS)
            .map(|_| (0..RECORDS).map(|_| AtomicBool::new(false)).collect())
            .collect(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let committer = {
        let (tracker, acked, done) = (tracker.clone(), acked.clone(), done.clone());
        thread::spawn(move || {
            let mut commits = 0;
            let mut last: [Option<u64>; SENDERS] = [None; SENDERS];
            // At least one commit even on a machine too loaded for any
            // flush to complete while records are in flight: once `done`,
            // every record was acked, and the next flush completes.
            while commits == 0 || !done.load(Ordering::SeqCst) {
                let mut flush = tracker.begin_flush().unwrap();
                let Ok(offsets) = flush.wait(Duration::from_millis(2)) else {
                    flush.abort();
                    continue;
                };
                for (&p, &o) in &offsets {
                    // Every record up to the committed one was acked.
                    let from = last[p].map_or(0, |l| l + 1);
                    for (i, a) in acked[p][from as usize..=o as usize].iter().enumerate() {
                        assert!(
                            a.load(Ordering::SeqCst),
                            "committed {o} of {p}, {} not acked",
                            from as usize + i
                        );
                    }
                    assert!(last[p].is_none_or(|l| l <= o), "commits go forward");
                    last[p] = Some(o);
                }
                flush.commit().unwrap();
                commits += 1;
            }
            (commits, last)
        })
    };
    let (tx, rx) = mpsc::sync_channel::<(usize, Vec<(u64, Ticket)>)>(64);
    let acker = {
        let (tracker, acked) = (tracker.clone(), acked.clone());
        thread::spawn(move || {
            let mut rng = Rng::new(3);
            let mut pending: Vec<(usize, u64, Ticket)> = Vec::new();
            let mut batch = Vec::with_capacity(200);
            let mut ack_some = |pending: &mut Vec<(usize, u64, Ticket)>, keep: usize| {
                while pending.len() > keep {
                    let take = (rng.below(100) as usize + 1).min(pending.len() - keep);
                    for _ in 0..take {
                        let i = rng.below(pending.len() as u64) as usize;
                        let (p, o, t) = pending.swap_remove(i);
                        acked[p][o as usize].store(true, Ordering::SeqCst);
                        batch.push(t);
                    }
                    assert_eq!(tracker.ack_all(batch.drain(..)), Ok(take));
                }
            };
            while let Ok((p, records)) = rx.recv() {
                pending.extend(records.into_iter().map(|(o, t)| (p, o, t)));
                ack_some(&mut pending, 300);
            }
            ack_some(&mut pending, 0);
        })
    };
    let senders: Vec<_> = (0..SENDERS)
        .map(|p| {
            let (tracker, tx) = (tracker.clone(), tx.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(10 + p as u64);
                let mut next = 0;
                let mut tickets = Vec::new();
                while next < RECORDS {
                    let n = (rng.below(150) + 1).min(RECORDS - next);
                    let sent = match tracker.send_batch(&p, next..next + n, &mut tickets) {
                        Ok(sent) => sent,
                        Err(e) => {
                            assert_eq!(e.reason, Refused::Full);
                            assert_eq!(e.unsent[0], next + tickets.len() as u64);
                            if tickets.is_empty() {
                                thread::yield_now();
                            }
                            tickets.len()
                        }
                    };
                    if sent > 0 {
                        let records = (next..).zip(tickets.drain(..)).collect();
                        next += sent as u64;
                        tx.send((p, records)).unwrap();
                    }
                }
            })
        })
        .collect();
    drop(tx);
    for s in senders {
        s.join().unwrap();
    }
    acker.join().unwrap();
    done.store(true, Ordering::SeqCst);
    let (commits, mut last) = committer.join().unwrap();
    assert!(commits > 0);
    assert_eq!(tracker.in_flight(), 0);
    for (p, o) in flush_now(&tracker).unwrap() {
        last[p] = Some(o);
    }
    assert_eq!(
        last,
        [Some(RECORDS - 1); SENDERS],
        "the last commit has every record"
    );
}

/// A long resolution batch settles its counts and permits every 64
/// tickets, not only at its end: a sender on a full tracker gets room
/// while the batch is still resolving.
#[test]
fn a_long_resolution_batch_gives_room_as_it_goes() {
    let tracker = Tracker::with_capacity(200);
    let mut tickets = Vec::new();
    tracker.send_batch(&"p", 0_u64..200, &mut tickets).unwrap();
    assert!(tracker.send("q", 9).is_err(), "full");
    let mut midway = None;
    let report = tickets.into_iter().enumerate().map(|(i, ticket)| {
        if i == 130 {
            // 130 resolved, 128 of them settled.
            midway = Some((tracker.in_flight(), tracker.send("q", 9)));
        }
        ticket
    });
    assert_eq!(tracker.ack_all(report), Ok(200));
    let (in_flight, sent) = midway.unwrap();
    assert_eq!(in_flight, 72);
    tracker
        .ack(sent.expect("room made by the first 128"))
        .unwrap();
    assert_eq!(tracker.in_flight(), 0);
}
