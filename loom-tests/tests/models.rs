//! Loom models of inflight's multi-threaded guarantees.
//!
//! Each model is two or three threads and a handful of operations; loom runs
//! it under every interleaving up to `LOOM_MAX_PREEMPTIONS` preemptions. A
//! wait that could hang forever (a lost wake-up, an ignored interrupt) shows
//! up as a loom deadlock. Offsets are `loom::sync::Arc<u64>`, so an offset
//! that is leaked or dropped twice fails the model too, and every generation
//! carries a loom leak check.
//!
//! Build with `--cfg loom --cfg crossbeam_loom` (see `../run`).
#![cfg(loom)]

use inflight::{DrainError, FlushError, ResolveError, SendError, Tracker};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;

use common::{off, plain, run_model, run_model_bounded, Off, FOREVER, T};

/// 1. A send racing `begin_flush` is covered or not, never half, and the
/// flush's offsets agree with its coverage.
#[test]
fn send_vs_begin_flush_covers_or_not() {
    run_model("send_vs_begin_flush_covers_or_not", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let t2 = tracker.clone();
        let sender = thread::spawn(move || t2.send("p", off(1)).unwrap());
        let mut flush = tracker.begin_flush().unwrap();
        let ticket = sender.join().unwrap();
        let covered = flush.pending();
        assert!(covered <= 1);
        tracker.ack(ticket).unwrap();
        let first = plain(flush.wait(FOREVER).unwrap());
        flush.commit().unwrap();
        let mut next = tracker.begin_flush().unwrap();
        let second = plain(next.wait(FOREVER).unwrap());
        next.commit().unwrap();
        if covered == 1 {
            assert_eq!((first, second), (vec![("p", 1)], vec![]));
        } else {
            assert_eq!((first, second), (vec![], vec![("p", 1)]));
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 2. KAFKA-2867 exactly: a send (and its ack) racing the commit of the
/// previous flush lands in the open generation, its ack finds it, and the
/// next flush completes with its offset.
#[test]
fn send_vs_commit_of_previous_flush() {
    run_model("send_vs_commit_of_previous_flush", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let first = tracker.send("p", off(1)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        tracker.ack(first).unwrap();
        let t2 = tracker.clone();
        let sender = thread::spawn(move || {
            let ticket = t2.send("p", off(2)).unwrap();
            t2.ack(ticket)
        });
        assert_eq!(plain(flush.wait(FOREVER).unwrap()), vec![("p", 1)]);
        flush.commit().unwrap();
        assert_eq!(sender.join().unwrap(), Ok(()), "the ack found its record");
        assert_eq!(tracker.in_flight(), 0);
        let mut next = tracker.begin_flush().unwrap();
        assert_eq!(plain(next.wait(Duration::ZERO).unwrap()), vec![("p", 2)]);
        next.commit().unwrap();
    });
}

/// 2b. The same race, with the late record still unacked: it must be counted
/// and covered by the next flush, never lost in a finished generation.
#[test]
fn unacked_send_vs_finishing_flush_is_not_lost() {
    run_model("unacked_send_vs_finishing_flush_is_not_lost", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let t2 = tracker.clone();
        let sender = thread::spawn(move || t2.send("p", off(1)).unwrap());
        let mut flush = tracker.begin_flush().unwrap();
        let covered_now = match flush.wait(Duration::ZERO) {
            Ok(offsets) => {
                assert!(offsets.is_empty(), "offsets of an unacked record");
                flush.commit().unwrap();
                false
            }
            Err(FlushError::Timeout { pending: 1 }) => {
                flush.abort();
                true
            }
            Err(e) => panic!("unexpected {e:?}"),
        };
        let ticket = sender.join().unwrap();
        assert_eq!(tracker.in_flight(), 1, "the record is counted");
        let mut next = tracker.begin_flush().unwrap();
        assert_eq!(
            next.pending(),
            1,
            "the record is covered (covered_now={covered_now})"
        );
        tracker.ack(ticket).unwrap();
        assert_eq!(plain(next.wait(Duration::ZERO).unwrap()), vec![("p", 1)]);
        next.commit().unwrap();
    });
}

/// 3. The last covered ack wakes the waiting flush: no lost wake-up.
#[test]
fn ack_vs_wait_no_lost_wakeup() {
    run_model("ack_vs_wait_no_lost_wakeup", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let ticket = tracker.send("p", off(7)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(ticket).unwrap());
        assert_eq!(plain(flush.wait(FOREVER).unwrap()), vec![("p", 7)]);
        flush.commit().unwrap();
        acker.join().unwrap();
    });
}

/// 4. An ack racing the seal is counted once, in its record's generation,
/// and a send after it lands in exactly one of two consecutive flushes.
#[test]
fn ack_vs_begin_flush_counted_once() {
    run_model("ack_vs_begin_flush_counted_once", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let ticket = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let other = thread::spawn(move || {
            t2.ack(ticket).unwrap();
            let late = t2.send("p", off(2)).unwrap();
            t2.ack(late).unwrap();
        });
        let mut flush = tracker.begin_flush().unwrap();
        let first = plain(flush.wait(FOREVER).unwrap());
        flush.commit().unwrap();
        other.join().unwrap();
        assert_eq!(tracker.in_flight(), 0);
        let mut next = tracker.begin_flush().unwrap();
        let second = plain(next.wait(Duration::ZERO).unwrap());
        next.commit().unwrap();
        match first.as_slice() {
            [("p", 1)] => assert_eq!(second, vec![("p", 2)]),
            [("p", 2)] => assert_eq!(second, vec![]),
            _ => panic!("first flush returned {first:?}"),
        }
    });
}

/// 5. Two acks racing on the last two covered records: the flush completes
/// once, with both partitions.
#[test]
fn two_acks_race_on_the_last_records() {
    run_model("two_acks_race_on_the_last_records", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let a = tracker.send("p", off(1)).unwrap();
        let b = tracker.send("q", off(2)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let (ta, tb) = (tracker.clone(), tracker.clone());
        let ha = thread::spawn(move || ta.ack(a).unwrap());
        let hb = thread::spawn(move || tb.ack(b).unwrap());
        assert_eq!(
            plain(flush.wait(FOREVER).unwrap()),
            vec![("p", 1), ("q", 2)]
        );
        flush.commit().unwrap();
        ha.join().unwrap();
        hb.join().unwrap();
    });
}

/// 6. A covered failure makes the flush fail, never succeed.
#[test]
fn fail_vs_wait_is_failed_never_ok() {
    run_model("fail_vs_wait_is_failed_never_ok", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let doomed = tracker.send("p", off(1)).unwrap();
        let fine = tracker.send("p", off(2)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let failer = thread::spawn(move || t2.fail(doomed).unwrap());
        tracker.ack(fine).unwrap();
        assert_eq!(
            flush.wait(FOREVER).map(plain),
            Err(FlushError::Failed { failed: 1 })
        );
        assert_eq!(flush.commit(), Err(FlushError::NotReady));
        failer.join().unwrap();
    });
}

/// 6b. Fail fast: a covered record fails while another covered record stays
/// pending (for good: it is acked only after the flush gave up). The
/// flusher, which may already be parked in `wait`, must be woken by the
/// failure and return `Failed` at once rather than wait for the other
/// record; a failure that wakes nobody shows up as a loom deadlock. The
/// failure also races the seal (both records were sent before
/// `begin_flush`, so both are covered wherever the failure's leave lands:
/// in its count shard or in the sealed generation's `pending`).
#[test]
fn fail_wakes_wait_while_another_covered_record_is_pending() {
    run_model(
        "fail_wakes_wait_while_another_covered_record_is_pending",
        || {
            let tracker: Arc<T> = Arc::new(Tracker::new());
            let doomed = tracker.send("p", off(1)).unwrap();
            let stuck = tracker.send("q", off(2)).unwrap();
            let t2 = tracker.clone();
            let failer = thread::spawn(move || t2.fail(doomed).unwrap());
            let mut flush = tracker.begin_flush().unwrap();
            assert_eq!(
                flush.wait(FOREVER).map(plain),
                Err(FlushError::Failed { failed: 1 }),
                "the wait did not fail fast"
            );
            failer.join().unwrap();
            assert_eq!(tracker.in_flight(), 1, "the other record is still pending");
            flush.abort();
            tracker.ack(stuck).unwrap();
            assert_eq!(tracker.in_flight(), 0);
        },
    );
}

/// 7. An interrupt reaches exactly one wait: the one in progress, or the
/// next one if it comes first.
#[test]
fn interrupt_vs_wait_delivered_once() {
    run_model("interrupt_vs_wait_delivered_once", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let stuck = tracker.send("p", off(1)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let interrupter = thread::spawn(move || t2.interrupt());
        assert_eq!(flush.wait(FOREVER).map(plain), Err(FlushError::Interrupted));
        assert_eq!(
            flush.wait(Duration::ZERO).map(plain),
            Err(FlushError::Interrupted)
        );
        flush.abort();
        interrupter.join().unwrap();
        let mut next = tracker.begin_flush().unwrap();
        assert_eq!(
            next.wait(Duration::ZERO).map(plain),
            Err(FlushError::Timeout { pending: 1 }),
            "the interrupt was delivered twice"
        );
        next.abort();
        tracker.ack(stuck).unwrap();
    });
}

/// 8. Abort racing a send and its ack: the next flush covers the aborted
/// flush's record and the new one; the newer offset wins.
#[test]
fn abort_vs_send_vs_ack_merges() {
    run_model("abort_vs_send_vs_ack_merges", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let old = tracker.send("p", off(1)).unwrap();
        let flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let other = thread::spawn(move || {
            let new = t2.send("p", off(2)).unwrap();
            t2.ack(new).unwrap();
        });
        tracker.ack(old).unwrap();
        flush.abort();
        other.join().unwrap();
        let mut next = tracker.begin_flush().unwrap();
        assert_eq!(plain(next.wait(Duration::ZERO).unwrap()), vec![("p", 2)]);
        next.commit().unwrap();
    });
}

/// 9. `ack_raw` and `fail_raw` of the same ticket: exactly one wins, and the
/// flush reflects the winner.
#[test]
fn ack_raw_vs_fail_raw_exactly_one() {
    run_model("ack_raw_vs_fail_raw_exactly_one", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let raw = tracker.send("p", off(1)).unwrap().into_raw();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack_raw(raw));
        let failed = tracker.fail_raw(raw);
        let acked = acker.join().unwrap();
        assert!(
            acked.is_ok() != failed.is_ok(),
            "exactly one resolution wins: ack {acked:?}, fail {failed:?}"
        );
        let loser = if acked.is_ok() { failed } else { acked };
        assert_eq!(loser, Err(ResolveError::AlreadyResolved));
        assert_eq!(tracker.in_flight(), 0);
        let mut flush = tracker.begin_flush().unwrap();
        let outcome = flush.wait(Duration::ZERO).map(plain);
        if acked.is_ok() {
            assert_eq!(outcome, Ok(vec![("p", 1)]));
        } else {
            assert_eq!(outcome, Err(FlushError::Failed { failed: 1 }));
        }
    });
}

/// 10. A stale raw ticket racing a send that reuses its slot leaves the new
/// record untouched.
#[test]
fn stale_raw_ticket_vs_slot_reuse() {
    run_model("stale_raw_ticket_vs_slot_reuse", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let stale = tracker.send("p", off(1)).unwrap().into_raw();
        // A newer record of "p" takes over the partition cell, so the stale
        // ticket's slot is not retained for its offset and is freed at once.
        let keep = tracker.send("p", off(2)).unwrap();
        tracker.ack_raw(stale).unwrap();
        let t2 = tracker.clone();
        // Takes the slot just freed (one free list under loom).
        let sender = thread::spawn(move || t2.send("q", off(3)).unwrap());
        // A scheduling point, so that loom also runs the reuse first: its
        // DPOR keeps only the last access per atomic, and the sender's read
        // of the slot's state just before its write would hide our read.
        thread::yield_now();
        let replay = tracker.ack_raw(stale);
        let fresh = sender.join().unwrap();
        assert!(replay.is_err(), "a stale ticket resolved something");
        // And once the slot certainly holds the new record.
        assert_eq!(tracker.ack_raw(stale), Err(ResolveError::AlreadyResolved));
        assert_eq!(tracker.in_flight(), 2, "the new record is untouched");
        tracker.ack(fresh).unwrap();
        tracker.ack(keep).unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 11. `close` racing a send: the send either gets in (and a flush after the
/// close covers it) or gets its record back; no count leaks.
#[test]
fn close_vs_send() {
    run_model("close_vs_send", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let t2 = tracker.clone();
        let sender = thread::spawn(move || t2.send("p", off(1)));
        tracker.close();
        let mut flush = tracker.begin_flush().unwrap();
        match sender.join().unwrap() {
            Ok(ticket) => {
                assert_eq!(tracker.in_flight(), 1);
                assert_eq!(flush.pending(), 1, "a flush after close covers it");
                tracker.ack(ticket).unwrap();
                assert_eq!(plain(flush.wait(Duration::ZERO).unwrap()), vec![("p", 1)]);
            }
            Err(SendError::Closed(p, o)) => {
                assert_eq!((p, *o), ("p", 1), "the record comes back");
                assert_eq!(tracker.in_flight(), 0);
                assert!(flush.wait(Duration::ZERO).unwrap().is_empty());
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert!(matches!(
            tracker.send("p", off(2)),
            Err(SendError::Closed(..))
        ));
    });
}

/// 11b. `close` then `drain` racing a send, while the open generation is
/// not the first, so that `drain` may find it idle (every count shard
/// empty) and seal nothing. A send that is accepted (and never acked) must
/// be waited for: the drain then returns `Timeout { pending: 1 }`, never
/// `Ok`. Either the drain's idle check comes after the send's entry on its
/// count shard (and sees the record), or before it, and then the send sees
/// the close and gets its record back. With the idle check a plain load
/// (mutant `idle_load`) both can miss each other: a lost record.
#[test]
fn close_then_drain_vs_send_waits_for_an_accepted_record() {
    run_model(
        "close_then_drain_vs_send_waits_for_an_accepted_record",
        || {
            let tracker: Arc<T> = Arc::new(Tracker::new());
            // Seals generation 0: the open one is now number 1, the only
            // kind `drain` may skip sealing.
            tracker.drain(Duration::ZERO).unwrap();
            let t2 = tracker.clone();
            let sender = thread::spawn(move || t2.send("p", off(1)));
            tracker.close();
            let drained = tracker.drain(Duration::ZERO);
            match sender.join().unwrap() {
                Ok(ticket) => {
                    assert_eq!(
                        drained,
                        Err(DrainError::Timeout { pending: 1 }),
                        "drain after close passed an accepted, unacked record"
                    );
                    assert_eq!(tracker.in_flight(), 1);
                    tracker.ack(ticket).unwrap();
                }
                Err(SendError::Closed(p, o)) => {
                    assert_eq!((p, *o), ("p", 1), "the record comes back");
                    // The drain may have counted the record before the send
                    // backed out.
                    assert!(
                        matches!(drained, Ok(()) | Err(DrainError::Timeout { pending: 1 })),
                        "{drained:?}"
                    );
                    assert_eq!(tracker.in_flight(), 0);
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
            tracker.drain(Duration::ZERO).unwrap();
        },
    );
}

/// 12. At capacity, a send racing an ack is refused (with its record) or
/// takes the freed place; the bound holds either way.
#[test]
fn capacity_full_vs_ack() {
    run_model("capacity_full_vs_ack", || {
        let tracker: Arc<T> = Arc::new(Tracker::with_capacity(1));
        let first = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(first).unwrap());
        let second = tracker.send("p", off(2));
        acker.join().unwrap();
        match second {
            Ok(ticket) => {
                assert_eq!(tracker.in_flight(), 1);
                tracker.ack(ticket).unwrap();
            }
            Err(SendError::Full(p, o)) => {
                assert_eq!((p, *o), ("p", 2));
                assert_eq!(tracker.in_flight(), 0);
                let ticket = tracker.send(p, o).unwrap();
                tracker.ack(ticket).unwrap();
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 13. Reclamation: generations are folded and freed while another thread
/// sends into them and acks; every generation and every offset is freed
/// exactly once by the end (loom reports leaks and double drops).
#[test]
fn reclamation_no_leak_no_early_free() {
    run_model("reclamation_no_leak_no_early_free", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let t2 = tracker.clone();
        let worker = thread::spawn(move || {
            let a = t2.send("p", off(1)).unwrap();
            t2.ack(a).unwrap();
            let b = t2.send("p", off(2)).unwrap();
            t2.ack(b).unwrap();
        });
        for _ in 0..2 {
            let mut flush = tracker.begin_flush().unwrap();
            if flush.wait(Duration::ZERO).is_ok() {
                flush.commit().unwrap();
            }
        }
        worker.join().unwrap();
        assert_eq!(tracker.in_flight(), 0);
        drop(tracker);
    });
}

/// 14. Two sends of one partition racing a seal: the flush returns the later
/// covered send, and the next flush the rest.
#[test]
fn same_partition_sends_vs_seal_latest_covered_wins() {
    run_model("same_partition_sends_vs_seal_latest_covered_wins", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let t2 = tracker.clone();
        let sender = thread::spawn(move || {
            let a = t2.send("p", off(1)).unwrap();
            let b = t2.send("p", off(2)).unwrap();
            (a, b)
        });
        let mut flush = tracker.begin_flush().unwrap();
        let (a, b) = sender.join().unwrap();
        let covered = flush.pending();
        tracker.ack(b).unwrap();
        tracker.ack(a).unwrap();
        let first = plain(flush.wait(Duration::ZERO).unwrap());
        flush.commit().unwrap();
        let mut next = tracker.begin_flush().unwrap();
        let second = plain(next.wait(Duration::ZERO).unwrap());
        match covered {
            0 => assert_eq!((first, second), (vec![], vec![("p", 2)])),
            1 => assert_eq!((first, second), (vec![("p", 1)], vec![("p", 2)])),
            2 => assert_eq!((first, second), (vec![("p", 2)], vec![])),
            n => panic!("{n} covered of 2"),
        }
    });
}

/// 15. An ack of a record whose slot is held for its offset races a newer
/// send that releases that hold (freeing the slot) and a send that reuses
/// the slot in the next generation: the ack is counted in its own
/// generation, and the flush covering it completes.
#[test]
fn ack_of_held_record_vs_release_and_reuse() {
    run_model("ack_of_held_record_vs_release_and_reuse", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let first = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(first).unwrap());
        let second = tracker.send("p", off(2)).unwrap(); // releases first's hold
        let mut flush = tracker.begin_flush().unwrap(); // covers 1 and 2
        let third = tracker.send("q", off(3)).unwrap(); // may reuse first's slot
        acker.join().unwrap();
        tracker.ack(second).unwrap();
        assert_eq!(plain(flush.wait(FOREVER).unwrap()), vec![("p", 2)]);
        flush.commit().unwrap();
        tracker.ack(third).unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 16. Two seals race a send: `begin_flush` (main thread, count shard 0)
/// and a `drain` (shard 1) each move `open` on and capture both count
/// shards, while the drainer's own send may find its shard lagging behind
/// `open` and capture it itself. Each shard is captured once per
/// generation between them, so every record is counted exactly once; the
/// flush covers a prefix of the partition and completes, and the next one
/// returns the rest.
#[test]
fn seals_race_a_send_on_a_lagging_shard() {
    run_model("seals_race_a_send_on_a_lagging_shard", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let a = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let drainer = thread::spawn(move || {
            let b = t2.send("p", off(2)).unwrap();
            let drained = t2.drain(Duration::ZERO);
            assert!(
                matches!(drained, Err(DrainError::Timeout { .. })),
                "{drained:?}"
            );
            b
        });
        let mut flush = tracker.begin_flush().unwrap();
        let b = drainer.join().unwrap();
        assert_eq!(tracker.in_flight(), 2);
        let covered = flush.pending();
        assert!(covered == 1 || covered == 2, "{covered} covered");
        tracker.ack(a).unwrap();
        tracker.ack(b).unwrap();
        let expected = if covered == 2 { 2 } else { 1 };
        assert_eq!(plain(flush.wait(FOREVER).unwrap()), vec![("p", expected)]);
        flush.commit().unwrap();
        let mut next = tracker.begin_flush().unwrap();
        let rest = plain(next.wait(Duration::ZERO).unwrap());
        assert_eq!(rest, if covered == 2 { vec![] } else { vec![("p", 2)] });
        next.commit().unwrap();
        tracker.drain(Duration::ZERO).unwrap();
    });
}

/// 17. Two sends introduce the same new partition at once: both get the
/// same partition number, so the flush returns the partition once, with the
/// later of the two offsets (in the order their sends entered). Both sends
/// take the slow path (arena entry, table copy and CAS), so the state space
/// is large: the bound is capped at 2 (627,137 executions, about 90 s).
#[test]
fn first_sends_of_a_partition_race_one_number() {
    run_model_bounded("first_sends_of_a_partition_race_one_number", 2, || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let t2 = tracker.clone();
        let other = thread::spawn(move || t2.send("new", off(1)).unwrap());
        let mine = tracker.send("new", off(2)).unwrap();
        let theirs = other.join().unwrap();
        assert_eq!(tracker.partitions(), 1);
        tracker.ack(mine).unwrap();
        tracker.ack(theirs).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let offsets = plain(flush.wait(Duration::ZERO).unwrap());
        assert!(
            offsets == vec![("new", 1)] || offsets == vec![("new", 2)],
            "{offsets:?}"
        );
    });
}

/// A tracker that keeps watermarks.
fn watermarked() -> Arc<T> {
    Arc::new(Tracker::builder().watermarks().build())
}

/// 18. W: acks racing `committable()`. Two records of one partition are
/// acked by two threads while the main thread takes the watermark: a
/// watermark never passes a record whose ack has not started, each advance
/// is returned once, and none is lost (the last call ends on the last
/// record). `skip_unacked` is caught here.
#[test]
fn watermark_acks_vs_committable() {
    run_model("watermark_acks_vs_committable", || {
        let tracker = watermarked();
        let first = tracker.send("p", off(1)).unwrap();
        let second = tracker.send("p", off(2)).unwrap();
        let started = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (t2, s2) = (tracker.clone(), started.clone());
        let acker = thread::spawn(move || {
            // Release: a watermark at or past record 1 implies this store.
            s2.store(true, std::sync::atomic::Ordering::Release);
            t2.ack(first).unwrap();
        });
        let t3 = tracker.clone();
        let other = thread::spawn(move || t3.ack(second).unwrap());
        let during = plain(tracker.committable());
        // Acquire: pairs with the acker's store, through the mark.
        let first_started = started.load(std::sync::atomic::Ordering::Acquire);
        if !during.is_empty() {
            assert!(
                first_started,
                "watermark {during:?} passed an unacked record"
            );
        }
        acker.join().unwrap();
        other.join().unwrap();
        let after = plain(tracker.committable());
        match (during.as_slice(), after.as_slice()) {
            ([], [("p", 2)]) | ([("p", 1)], [("p", 2)]) | ([("p", 2)], []) => {}
            other => panic!("advances returned twice or lost: {other:?}"),
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 19. W: two senders of one partition race each other and their acks. Send
/// order is the order the sends took their place in the partition's queue;
/// whatever it is, the watermark never passes the earlier record before its
/// ack started, each record is returned at most once, and the last
/// watermark is the later record. (The partition exists and a fresh
/// generation is open before the race, so that the model explores the
/// queue, not partition creation or racing seals, which have models of their
/// own.)
#[test]
fn watermark_two_senders_one_partition() {
    run_model("watermark_two_senders_one_partition", || {
        let tracker = watermarked();
        let zero = tracker.send("p", off(0)).unwrap();
        tracker.ack(zero).unwrap();
        assert_eq!(plain(tracker.committable()), vec![("p", 0)]);
        tracker.drain(Duration::ZERO).unwrap(); // seals: a fresh generation
        let started = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (t2, s2) = (tracker.clone(), started.clone());
        let other = thread::spawn(move || {
            let ticket = t2.send("p", off(2)).unwrap();
            // Release: see the first model.
            s2.store(true, std::sync::atomic::Ordering::Release);
            t2.ack(ticket).unwrap();
        });
        let mine = tracker.send("p", off(1)).unwrap();
        tracker.ack(mine).unwrap();
        let during = plain(tracker.committable());
        // Acquire: as in the first model; read after the call.
        let theirs_started = started.load(std::sync::atomic::Ordering::Acquire);
        other.join().unwrap();
        let after = plain(tracker.committable());
        // The last watermark returned is the later record in send order.
        let last = after
            .first()
            .or(during.first())
            .expect("an advance was lost")
            .1;
        if let [("p", o)] = during.as_slice() {
            assert!(after.first().is_none_or(|a| a.1 != *o), "returned twice");
            if *o == 1 && last == 2 {
                // Ours is the earlier record and it was acked: fine.
            } else if *o == 1 {
                // Ours is the later record: the earlier (theirs) was passed.
                assert!(theirs_started, "passed their unacked record");
            }
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 20. W: a failure stops its own partition only. `p`'s record fails while
/// `q`'s is acked, racing `committable()`: `p` is never returned, `q`
/// exactly once, and `p` is reported stopped.
#[test]
fn watermark_failure_isolation() {
    run_model("watermark_failure_isolation", || {
        let tracker = watermarked();
        let p = tracker.send("p", off(1)).unwrap();
        let q = tracker.send("q", off(1)).unwrap();
        let t2 = tracker.clone();
        let failer = thread::spawn(move || t2.fail(p).unwrap());
        let t3 = tracker.clone();
        let acker = thread::spawn(move || t3.ack(q).unwrap());
        let during = plain(tracker.committable());
        failer.join().unwrap();
        acker.join().unwrap();
        let after = tracker.committable_with_stats();
        let mut all = during;
        all.extend(plain(after.offsets));
        assert_eq!(all, vec![("q", 1)]);
        assert_eq!(after.stopped, vec!["p"]);
        assert_eq!(after.uncommittable_records, 0);
    });
}

/// 21. D: `drain` returns only once everything sent before it is resolved,
/// and then the watermarks are complete: out-of-order acks from two
/// threads (one of which may leave its advance to the other) race a drain,
/// and the `committable()` right after it has the last offset.
#[test]
fn drain_then_watermarks_are_complete() {
    run_model("drain_then_watermarks_are_complete", || {
        let tracker = watermarked();
        let first = tracker.send("p", off(1)).unwrap();
        let second = tracker.send("p", off(2)).unwrap();
        let t2 = tracker.clone();
        let a = thread::spawn(move || t2.ack(second).unwrap());
        let t3 = tracker.clone();
        let b = thread::spawn(move || t3.ack(first).unwrap());
        tracker.drain(FOREVER).unwrap();
        assert_eq!(plain(tracker.committable()), vec![("p", 2)]);
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// 22. W + barrier: one slot held by a partition cell (then the flush
/// carry), the watermark queue and a mark at once. An acker passes records
/// while the flush folds, commits and releases the cell holds: every offset
/// is dropped exactly once (loom's leak and double-drop tracking), the flush
/// returns the covered record, and the watermarks end on the last record.
#[test]
fn watermarks_beside_a_barrier_flush() {
    run_model("watermarks_beside_a_barrier_flush", || {
        let tracker = watermarked();
        let first = tracker.send("p", off(1)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let second = tracker.send("p", off(2)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || {
            t2.ack(first).unwrap();
            let during = plain(t2.committable());
            t2.ack(second).unwrap();
            during
        });
        assert_eq!(plain(flush.wait(FOREVER).unwrap()), vec![("p", 1)]);
        flush.commit().unwrap();
        let during = acker.join().unwrap();
        let after = plain(tracker.committable());
        assert!(during.is_empty() || during == vec![("p", 1)], "{during:?}");
        assert_eq!(after, vec![("p", 2)]);
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 23. The partition index grows in place: a first send that crowds the
/// table (and so copies it into a bigger one, freezing the old) races the
/// first send of another new partition. Neither partition is lost or
/// numbered twice, and both are found afterwards. (Bound capped at 2: the
/// copy touches every entry of both tables.)
#[test]
fn partition_index_grows_while_a_partition_is_added() {
    run_model_bounded(
        "partition_index_grows_while_a_partition_is_added",
        2,
        || {
            let tracker: Arc<Tracker<u32, Off>> = Arc::new(Tracker::new());
            // Four partitions fill the 8-entry table to half; the fifth grows it.
            for p in 0..4 {
                let t = tracker.send(p, off(u64::from(p))).unwrap();
                tracker.ack(t).unwrap();
            }
            let t2 = tracker.clone();
            let other = thread::spawn(move || t2.send(5, off(5)).unwrap());
            let mine = tracker.send(4, off(4)).unwrap();
            let theirs = other.join().unwrap();
            tracker.ack(mine).unwrap();
            tracker.ack(theirs).unwrap();
            // Both are found again: a key lost from the table would be
            // added a second time, under a new number.
            for p in [4, 5] {
                let again = tracker.send(p, off(u64::from(p))).unwrap();
                tracker.ack(again).unwrap();
            }
            assert_eq!(tracker.partitions(), 6);
            let mut flush = tracker.begin_flush().unwrap();
            let offsets = flush.wait(Duration::ZERO).unwrap();
            let mut seen: Vec<(u32, u64)> = offsets.into_iter().map(|(p, o)| (p, *o)).collect();
            seen.sort();
            assert_eq!(seen, (0..6).map(|p| (p, u64::from(p))).collect::<Vec<_>>());
        },
    );
}

/// 24. R: an `ack` and a `revoke` race for the same record, and exactly one
/// wins its compare-and-swap from `LIVE`: either the ack is delivered
/// (`Ok`) and the revoke released nothing, or the revoke released the
/// record (`released == 1`) and the ack answers `Revoked`. Never both,
/// never neither; nothing is in flight afterwards. And since the revoke
/// ended the partition's life either way, a flush begun after both returns
/// no offset of it, even when the ack won. Mutant `ack_after_revoke` (a
/// released record's ticket still resolves) is caught here.
#[test]
fn revoke_vs_ack_of_the_same_record() {
    run_model("revoke_vs_ack_of_the_same_record", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let ticket = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(ticket));
        let revoked = tracker.revoke("p");
        let acked = acker.join().unwrap();
        match acked {
            Ok(()) => assert_eq!(revoked.released, 0, "delivered and released"),
            Err(ResolveError::Revoked) => {
                assert_eq!(revoked.released, 1, "neither delivered nor released")
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert!(revoked.committable.is_none(), "no watermarks");
        assert_eq!(tracker.in_flight(), 0);
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(
            plain(flush.wait(Duration::ZERO).unwrap()),
            vec![],
            "an offset of the ended life (ack {acked:?})"
        );
        flush.commit().unwrap();
    });
}

/// 25. R: a send races a revoke of its partition (which exists already, so
/// the race is about lives, not partition creation). The send returns a
/// ticket either way. Either its record belongs to the ended life and is
/// released, by the revoke's scan or by the send itself (which then counts
/// it in `released_late`, collected by this revoke or the next): its ack
/// answers `Revoked`, the two revokes count it exactly once, and no flush
/// reports it. Or it belongs to the new life: its ack is delivered, no
/// revoke counts it, and a flush reports its offset. Never both, never
/// neither; nothing is in flight at the end.
#[test]
fn revoke_vs_send_to_the_same_partition() {
    run_model("revoke_vs_send_to_the_same_partition", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let zero = tracker.send("p", off(0)).unwrap();
        tracker.ack(zero).unwrap();
        let t2 = tracker.clone();
        let sender = thread::spawn(move || t2.send("p", off(1)).unwrap());
        let first = tracker.revoke("p");
        let ticket = sender.join().unwrap();
        match tracker.ack(ticket) {
            Err(ResolveError::Revoked) => {
                let second = tracker.revoke("p");
                assert_eq!(
                    (first.released, second.released),
                    if first.released == 1 { (1, 0) } else { (0, 1) },
                    "the released send is counted exactly once"
                );
                let mut flush = tracker.begin_flush().unwrap();
                assert_eq!(
                    plain(flush.wait(Duration::ZERO).unwrap()),
                    vec![],
                    "an offset of the ended life"
                );
                flush.commit().unwrap();
            }
            Ok(()) => {
                assert_eq!(first.released, 0, "delivered and released");
                let mut flush = tracker.begin_flush().unwrap();
                assert_eq!(
                    plain(flush.wait(Duration::ZERO).unwrap()),
                    vec![("p", 1)],
                    "a record of the new life is reported"
                );
                flush.commit().unwrap();
                let second = tracker.revoke("p");
                assert_eq!(second.released, 0, "delivered and released late");
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 25b. R: model 25 with the send reusing a freed slot (one below the
/// slots the revoke scans) rather than taking a never-used one: the
/// send's slot is written (its stale offset dropped, its next tag
/// prepared) while the revoke's scan may touch it. Same guarantee: the
/// record is released exactly once (its ack answers `Revoked`, and the
/// two revokes count it once), or it belongs to the new life (delivered,
/// counted by no revoke, reported by a flush); nothing is in flight at the
/// end. (The send's writes to a reused slot's state word, the stale
/// offset's clear and the prepare, are read-modify-writes: a store there
/// would end the release sequence the scan's `touch` heads, and loom 0.7
/// would also let it land inside the `touch`, tokio-rs/loom#254.)
#[test]
fn revoke_vs_send_reusing_a_freed_slot() {
    run_model("revoke_vs_send_reusing_a_freed_slot", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let a = tracker.send("p", off(0)).unwrap();
        let b = tracker.send("p", off(1)).unwrap(); // takes over a's hold
        tracker.ack(a).unwrap(); // frees a's slot onto this thread's list
        tracker.ack(b).unwrap();
        let t2 = tracker.clone();
        let revoker = thread::spawn(move || t2.revoke("p"));
        let ticket = tracker.send("p", off(2)).unwrap(); // reuses a's slot
        let first = revoker.join().unwrap();
        match tracker.ack(ticket) {
            Err(ResolveError::Revoked) => {
                let second = tracker.revoke("p");
                assert_eq!(
                    (first.released, second.released),
                    if first.released == 1 { (1, 0) } else { (0, 1) },
                    "the released send is counted exactly once"
                );
                let mut flush = tracker.begin_flush().unwrap();
                assert_eq!(
                    plain(flush.wait(Duration::ZERO).unwrap()),
                    vec![],
                    "an offset of the ended life"
                );
                flush.commit().unwrap();
            }
            Ok(()) => {
                assert_eq!(first.released, 0, "delivered and released");
                let mut flush = tracker.begin_flush().unwrap();
                assert_eq!(
                    plain(flush.wait(Duration::ZERO).unwrap()),
                    vec![("p", 2)],
                    "a record of the new life is reported"
                );
                flush.commit().unwrap();
                let second = tracker.revoke("p");
                assert_eq!(second.released, 0, "delivered and released late");
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 26. R + W: a record of `p` was acked (so its advance is published as
/// `p`'s mark) before a `committable()` call races a revoke of `p`: the
/// mark is a hand-over of its own, so exactly one of them returns the
/// offset (the call's map, or `Revoked::committable`), never both, never
/// neither; a later `committable()` returns nothing.
#[test]
fn revoke_vs_committable_hands_the_last_advance_out_once() {
    run_model(
        "revoke_vs_committable_hands_the_last_advance_out_once",
        || {
            let tracker = watermarked();
            let ticket = tracker.send("p", off(1)).unwrap();
            tracker.ack(ticket).unwrap();
            let t2 = tracker.clone();
            let taker = thread::spawn(move || plain(t2.committable()));
            let revoked = tracker.revoke("p");
            let taken = taker.join().unwrap();
            assert_eq!(revoked.released, 0);
            let by_revoke = revoked.committable.map(|o| *o);
            match (taken.as_slice(), by_revoke) {
                ([("p", 1)], None) | ([], Some(1)) => {}
                other => panic!("the advance was returned twice or lost: {other:?}"),
            }
            assert!(plain(tracker.committable()).is_empty(), "returned again");
            assert_eq!(tracker.in_flight(), 0);
        },
    );
}

/// 27. R: a flush covers an unacked record of `p` and an acked record of
/// `q`, and waits (for ever) while another thread revokes `p`. The
/// released record no longer counts in its generation, and its release
/// wakes the flusher: the wait returns `Ok` with `q`'s offset and none of
/// `p` (whose life ended). A lost wake-up, or a released record still
/// counted, is a loom deadlock: mutant `revoke_keeps_pending` is caught
/// here.
#[test]
fn revoke_vs_waiting_barrier_flush() {
    run_model("revoke_vs_waiting_barrier_flush", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let stuck = tracker.send("p", off(1)).unwrap();
        let done = tracker.send("q", off(2)).unwrap();
        tracker.ack(done).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let revoker = thread::spawn(move || t2.revoke("p").released);
        assert_eq!(
            plain(flush.wait(FOREVER).unwrap()),
            vec![("q", 2)],
            "the flush reports q, and nothing of p's ended life"
        );
        flush.commit().unwrap();
        assert_eq!(revoker.join().unwrap(), 1, "the revoke released p's record");
        assert_eq!(tracker.ack(stuck), Err(ResolveError::Revoked));
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 28. R + W: a revoke restarts a failed partition. `p`'s record failed
/// (its watermark is stopped); the revoke forgives the failure; then a new
/// record of `p` is sent and acked on one thread while another calls
/// `committable()`. The watermark moves again: the new record's offset is
/// returned exactly once, by the racing call or by the one after the join,
/// and `p` is no longer reported stopped.
#[test]
fn revoke_of_a_failed_partition_then_send_and_ack() {
    run_model("revoke_of_a_failed_partition_then_send_and_ack", || {
        let tracker = watermarked();
        let doomed = tracker.send("p", off(1)).unwrap();
        tracker.fail(doomed).unwrap();
        let stopped = tracker.committable_with_stats();
        assert!(stopped.offsets.is_empty());
        assert_eq!(stopped.stopped, vec!["p"]);
        let revoked = tracker.revoke("p");
        assert_eq!(revoked.released, 0, "the failed record was resolved");
        assert!(
            revoked.committable.is_none(),
            "a failed record is never marked"
        );
        let t2 = tracker.clone();
        let restarted = thread::spawn(move || {
            let ticket = t2.send("p", off(2)).unwrap();
            t2.ack(ticket).unwrap();
        });
        let mut all = plain(tracker.committable());
        restarted.join().unwrap();
        let after = tracker.committable_with_stats();
        assert!(after.stopped.is_empty(), "stopped: {:?}", after.stopped);
        all.extend(plain(after.offsets));
        assert_eq!(all, vec![("p", 2)], "the new life's advance, exactly once");
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// 29. Waiting for room: on a tracker of capacity 1 with one record in
/// flight, `send_timeout` (with no clock, only a wake-up can end its wait)
/// races the ack of that record. The ack's return of its permit either
/// sees the sender's `ROOM_WANTED` and wakes it, or comes first and the
/// sender's flagging CAS sees the free permit: the send returns `Ok`, and
/// the bound holds. A lost wake-up is a loom deadlock: mutant
/// `lost_room_wakeup` is caught here.
#[test]
fn send_timeout_vs_ack_makes_room() {
    run_model("send_timeout_vs_ack_makes_room", || {
        let tracker: Arc<T> = Arc::new(Tracker::with_capacity(1));
        let first = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(first).unwrap());
        let second = tracker
            .send_timeout("p", off(2), FOREVER)
            .expect("the ack made room");
        acker.join().unwrap();
        assert_eq!(tracker.in_flight(), 1);
        tracker.ack(second).unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
}
