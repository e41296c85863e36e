//! Guarantee 16: partitions that come and go. `revoke` (a rebalance, or a
//! restart after a failure) releases a partition's unresolved records and
//! starts its next life; `drain_partition` waits for one partition only.

#[macro_use]
mod modes;

use inflight::{DrainError, FlushError, ResolveError, SendError, Ticket, Tracker};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

mod common;
use common::{flush_now as flush, Rng};

/// Long enough that reaching it means a wake-up was lost.
const FOREVER: Duration = Duration::from_secs(3600);

#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

// ---- Releasing ------------------------------------------------------------------

#[test]
fn revoke_releases_the_partitions_unresolved_records_and_nothing_else() {
    each_mode!(tracker = [Tracker::builder().capacity(4).build(), Tracker::builder().capacity(4).watermarks().build(), Tracker::builder().capacity(4).inline_offsets().build(), Tracker::builder().capacity(4).inline_offsets().watermarks().build()] {
        let a = tracker.send("p", 1_u64).unwrap();
        let b = tracker.send("p", 2_u64).unwrap();
        let raw = tracker.send("p", 3_u64).unwrap().into_raw();
        let q = tracker.send("q", 9_u64).unwrap();
        assert!(matches!(tracker.send("q", 10), Err(SendError::Full(..))));
        tracker.ack(a).unwrap();
        let revoked = tracker.revoke("p");
        assert_eq!(revoked.released, 2, "b and the raw one");
        assert_eq!(tracker.in_flight(), 1, "q only");
        assert_eq!(tracker.ack(b), Err(ResolveError::Revoked));
        assert_eq!(tracker.fail_raw(raw), Err(ResolveError::Revoked));
        assert_eq!(tracker.ack_raw(raw), Err(ResolveError::Revoked));
        // The capacity came back: three more fit.
        let more: Vec<Ticket> = (0..3).map(|i| tracker.send("r", i).unwrap()).collect();
        assert!(matches!(tracker.send("r", 9), Err(SendError::Full(..))));
        for t in more {
            tracker.ack(t).unwrap();
        }
        tracker.ack(q).unwrap();
        tracker.drain(Duration::ZERO).unwrap();
        let offsets = flush(&tracker).unwrap();
        assert_eq!(offsets.get("q"), Some(&9));
        assert_eq!(offsets.get("p"), None, "nothing of p's ended life");
        // A partition never seen, and a second revoke: nothing to release.
        assert_eq!(tracker.revoke("never").released, 0);
        assert_eq!(tracker.revoke("p").released, 0);
    });
}

#[test]
fn a_flush_waiting_on_a_revoked_record_completes_without_its_offset() {
    let tracker = Tracker::new();
    let p = tracker.send("p", 1_u64).unwrap();
    let q = tracker.send("q", 5_u64).unwrap();
    let mut waiting = tracker.begin_flush().unwrap();
    tracker.ack(q).unwrap();
    std::thread::scope(|s| {
        // Would wait FOREVER for p if the revoke did not wake it.
        let waiter = s.spawn(|| waiting.wait(FOREVER));
        assert_eq!(tracker.revoke("p").released, 1);
        let offsets = waiter.join().unwrap().unwrap();
        assert_eq!(offsets, HashMap::from([("q", 5)]));
    });
    waiting.commit().unwrap();
    assert_eq!(tracker.ack(p), Err(ResolveError::Revoked));
}

/// A record acked before the revoke, retained as its partition's latest
/// (or merged from an aborted flush), is of the ended life too: no flush
/// reports it after the revoke.
#[test]
fn no_flush_reports_an_offset_of_an_ended_life() {
    let tracker = Tracker::new();
    let a = tracker.send("p", 1_u64).unwrap();
    tracker.ack(a).unwrap();
    tracker.begin_flush().unwrap().abort(); // into a sealed generation
    let b = tracker.send("p", 2_u64).unwrap();
    tracker.ack(b).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO).unwrap()["p"], 2);
    flush.abort(); // folded into the carry, not committed
    assert_eq!(tracker.revoke("p").released, 0);
    assert!(flush_of(&tracker).is_empty());
    // The next life is reported.
    let c = tracker.send("p", 1_u64).unwrap();
    tracker.ack(c).unwrap();
    assert_eq!(flush_of(&tracker), HashMap::from([("p", 1)]));
}

fn flush_of<M: inflight::mode::Mode>(
    tracker: &Tracker<&'static str, u64, M>,
) -> HashMap<&'static str, u64> {
    flush(tracker).unwrap()
}

// ---- Restarting after a failure ---------------------------------------------------

#[test]
fn revoke_restarts_a_failed_partition_for_barrier_flushes() {
    let tracker = Tracker::new();
    let bad = tracker.send("p", 1_u64).unwrap();
    let good = tracker.send("q", 7_u64).unwrap();
    tracker.fail(bad).unwrap();
    tracker.ack(good).unwrap();
    assert_eq!(flush(&tracker), Err(FlushError::Failed { failed: 1 }));
    assert_eq!(
        flush(&tracker),
        Err(FlushError::Failed { failed: 1 }),
        "for good"
    );
    assert_eq!(tracker.revoke("p").released, 0);
    // Flushes begun after the revoke no longer fail for p's old failure.
    assert_eq!(flush(&tracker).unwrap(), HashMap::from([("q", 7)]));
    let again = tracker.send("p", 1_u64).unwrap();
    tracker.ack(again).unwrap();
    assert_eq!(flush(&tracker).unwrap(), HashMap::from([("p", 1)]));
}

#[test]
fn revoke_restarts_a_stopped_watermark() {
    let tracker = Tracker::builder().watermarks().build();
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("p", 2_u64).unwrap();
    let c = tracker.send("p", 3_u64).unwrap();
    tracker.ack(a).unwrap();
    tracker.fail(b).unwrap();
    tracker.ack(c).unwrap();
    assert_eq!(tracker.committable(), HashMap::from([("p", 1)]));
    assert_eq!(tracker.committable_with_stats().stopped, vec!["p"]);
    let revoked = tracker.revoke("p");
    assert_eq!((revoked.released, revoked.committable), (0, None));
    assert!(tracker.committable_with_stats().stopped.is_empty());
    // Re-sent from the committed offset: the watermark moves again.
    let b2 = tracker.send("p", 2_u64).unwrap();
    let c2 = tracker.send("p", 3_u64).unwrap();
    tracker.ack(c2).unwrap();
    assert!(tracker.committable().is_empty(), "3 waits behind 2");
    tracker.ack(b2).unwrap();
    assert_eq!(tracker.committable(), HashMap::from([("p", 3)]));
    let mut f = tracker.begin_flush().unwrap();
    assert_eq!(
        f.wait(Duration::ZERO).unwrap()["p"],
        3,
        "barrier flushes too"
    );
    f.commit().unwrap();
}

// ---- Watermarks and Revoked::committable ----------------------------------------

/// Each advance goes to exactly one of `committable()` and the revoke.
#[test]
fn the_last_untaken_advance_goes_to_the_revoke_once() {
    let tracker = Tracker::builder().watermarks().build();
    let a = tracker.send("p", 1_u64).unwrap();
    let b = tracker.send("p", 2_u64).unwrap();
    let c = tracker.send("p", 3_u64).unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(tracker.committable(), HashMap::from([("p", 1)]));
    tracker.ack(b).unwrap();
    let revoked = tracker.revoke("p");
    assert_eq!(revoked.released, 1, "c");
    assert_eq!(revoked.committable, Some(2), "b's advance, untaken");
    assert!(tracker.committable().is_empty(), "not twice");
    assert_eq!(tracker.ack(c), Err(ResolveError::Revoked));
    // Taken already: the revoke has nothing.
    let d = tracker.send("p", 10_u64).unwrap();
    tracker.ack(d).unwrap();
    assert_eq!(tracker.committable(), HashMap::from([("p", 10)]));
    assert_eq!(tracker.revoke("p").committable, None);
    assert_eq!(tracker.in_flight(), 0);
}

/// The advance a revoke hands out is counted there: a later
/// `committable_with_stats` does not count it again (found by fuzzing).
#[test]
fn an_advance_taken_by_a_revoke_is_not_counted_again() {
    let tracker = Tracker::builder().watermarks().build();
    let a = tracker.send("p", 1_u64).unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(tracker.revoke("p").committable, Some(1));
    let b = tracker.send("p", 2_u64).unwrap();
    tracker.ack(b).unwrap();
    let now = tracker.committable_with_stats();
    assert_eq!(now.offsets, HashMap::from([("p", 2)]));
    assert_eq!(now.committable_records, 1, "b only");
}

/// Records sent after the revoke start a new watermark, not behind the old
/// life's unacked ones.
#[test]
fn a_new_life_does_not_wait_behind_the_old_one() {
    let tracker = Tracker::builder().watermarks().build();
    let stuck = tracker.send("p", 100_u64).unwrap();
    assert_eq!(tracker.revoke("p").released, 1);
    let fresh = tracker.send("p", 50_u64).unwrap();
    tracker.ack(fresh).unwrap();
    assert_eq!(tracker.committable(), HashMap::from([("p", 50)]));
    assert_eq!(tracker.ack(stuck), Err(ResolveError::Revoked));
    assert_eq!(tracker.in_flight(), 0);
    tracker.drain(Duration::ZERO).unwrap();
}

// ---- drain_partition ---------------------------------------------------------------

#[test]
fn drain_partition_waits_for_one_partition_only() {
    each_mode!(tracker = [Tracker::builder().build(), Tracker::builder().watermarks().build(), Tracker::builder().inline_offsets().build(), Tracker::builder().inline_offsets().watermarks().build()] {
        let watermarks = tracker.has_watermarks();
        let p1 = tracker.send("p", 1_u64).unwrap();
        let p2 = tracker.send("p", 2_u64).unwrap();
        let q = tracker.send("q", 9_u64).unwrap();
        assert_eq!(
            tracker.drain_partition("p", Duration::ZERO),
            Err(DrainError::Timeout { pending: 2 })
        );
        assert_eq!(tracker.drain_partition("nobody", Duration::ZERO), Ok(()));
        std::thread::scope(|s| {
            s.spawn(|| {
                tracker.ack(p2).unwrap();
                tracker.ack(p1).unwrap();
            });
            // Woken by the last of p's records, while q stays in flight.
            tracker.drain_partition("p", FOREVER).unwrap();
        });
        if watermarks {
            assert_eq!(tracker.committable(), HashMap::from([("p", 2)]));
        }
        // Records sent after the call are not waited for.
        let late = tracker.send("p", 3_u64).unwrap();
        tracker.interrupt();
        assert_eq!(
            tracker.drain_partition("p", FOREVER),
            Err(DrainError::Interrupted)
        );
        tracker.ack(late).unwrap();
        tracker.ack(q).unwrap();
    });
}

#[test]
fn is_partition_drained_looks_without_waiting_and_leaves_an_interrupt_to_the_wait() {
    each_mode!(tracker = [Tracker::builder().build(), Tracker::builder().watermarks().build(), Tracker::builder().inline_offsets().build(), Tracker::builder().inline_offsets().watermarks().build()] {
        let p1 = tracker.send("p", 1_u64).unwrap();
        let p2 = tracker.send("p", 2_u64).unwrap();
        let q = tracker.send("q", 1_u64).unwrap();
        assert!(tracker.is_partition_drained("nobody"));
        assert!(!tracker.is_partition_drained("p"));
        tracker.ack(p2).unwrap();
        // On a watermark tracker, 2 is acked but not passed yet.
        assert!(!tracker.is_partition_drained("p"));
        tracker.ack(p1).unwrap();
        assert!(tracker.is_partition_drained("p"), "q stays in flight, ignored");
        // Looking takes no interrupt: the wait it was meant for gets it.
        let late = tracker.send("p", 3_u64).unwrap();
        tracker.interrupt();
        assert!(!tracker.is_partition_drained("p"));
        assert_eq!(
            tracker.drain_partition("p", FOREVER),
            Err(DrainError::Interrupted)
        );
        tracker.ack(late).unwrap();
        tracker.ack(q).unwrap();
        assert!(tracker.is_partition_drained("p") && tracker.is_partition_drained("q"));
    });
}

#[test]
fn drain_partition_async_is_woken_by_the_partitions_last_ack() {
    each_mode!(tracker = [Tracker::builder().build(), Tracker::builder().watermarks().build(), Tracker::builder().inline_offsets().build(), Tracker::builder().inline_offsets().watermarks().build()] {
        let p = tracker.send("p", 1_u64).unwrap();
        let q = tracker.send("q", 1_u64).unwrap();
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let mut draining = pin!(tracker.drain_partition_async("p"));
        let late = tracker.send("p", 2_u64).unwrap(); // after the call: not waited for
        assert!(draining.as_mut().poll(&mut cx).is_pending());
        tracker.ack(q).unwrap();
        tracker.ack(p).unwrap();
        assert!(count.0.load(Ordering::SeqCst) >= 1, "woken");
        assert!(matches!(
            draining.as_mut().poll(&mut cx),
            Poll::Ready(Ok(()))
        ));
        tracker.ack(late).unwrap();
    });
}

/// The clean hand-off: drain the partition, revoke it, commit what the
/// revoke hands back; nothing of the partition is left, the rest goes on.
#[test]
fn the_clean_hand_off() {
    let tracker = Tracker::builder().watermarks().build();
    let mut tickets = Vec::new();
    for offset in 0..100_u64 {
        tickets.push(tracker.send(offset % 2, offset).unwrap());
    }
    let mut committed: HashMap<u64, u64> = HashMap::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            for t in tickets.into_iter().rev() {
                tracker.ack(t).unwrap();
            }
        });
        committed.extend(tracker.committable());
        tracker.drain_partition(&0, FOREVER).unwrap();
        let revoked = tracker.revoke(&0);
        assert_eq!(revoked.released, 0, "all delivered");
        if let Some(offset) = revoked.committable {
            committed.insert(0, offset);
        }
    });
    committed.extend(tracker.committable());
    assert_eq!(committed[&0], 98, "partition 0 handed over at its end");
    assert_eq!(committed[&1], 99);
}

// ---- Stress ---------------------------------------------------------------------------

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Threads send and ack over many partitions while another revokes random
/// ones, and a committer takes watermarks: every ack is `Ok` or `Revoked`,
/// `Ok` acks plus released records equal the records sent, and no offset
/// reported (by `committable`, a flush or a revoke) was not acked.
#[test]
fn revokes_racing_sends_acks_and_commits() {
    const SENDERS: u64 = 3;
    // Under Miri, three windows of 8 per sender.
    const RECORDS: u64 = if cfg!(miri) { 24 } else { 6_000 };
    const PARTITIONS: u64 = 6;
    each_mode!(tracker = [Tracker::builder().build(), Tracker::builder().watermarks().build(), Tracker::builder().inline_offsets().build(), Tracker::builder().inline_offsets().watermarks().build()] {
        let watermarks = tracker.has_watermarks();
        let acked_ok: Mutex<HashSet<u64>> = Mutex::default();
        let reported: Mutex<Vec<u64>> = Mutex::default();
        let (ok, revoked_acks, released) =
            (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            // Stops the revoker and committer even if a sender panics, so
            // that a failure fails the test rather than hanging it.
            let _stop = StopOnDrop(&done);
            let senders: Vec<_> = (0..SENDERS)
                .map(|id| {
                    let (tracker, acked_ok, ok, revoked_acks) =
                        (&tracker, &acked_ok, &ok, &revoked_acks);
                    s.spawn(move || {
                        let mut rng = Rng::new(id + 1);
                        let mut window = Vec::new();
                        for i in 0..RECORDS {
                            // Offsets unique over the whole test.
                            let offset = i * SENDERS + id;
                            let partition = rng.below(PARTITIONS);
                            window.push((offset, tracker.send(partition, offset).unwrap()));
                            if window.len() == 8 || i + 1 == RECORDS {
                                while !window.is_empty() {
                                    let k = rng.below(window.len() as u64) as usize;
                                    let (offset, ticket) = window.swap_remove(k);
                                    // Noted before the ack: a committer may
                                    // report it as soon as the ack lands.
                                    acked_ok.lock().unwrap().insert(offset);
                                    match tracker.ack(ticket) {
                                        Ok(()) => ok.fetch_add(1, Ordering::SeqCst),
                                        // Released: `Revoked`, or, once its
                                        // slot was reused (and remarked),
                                        // `AlreadyResolved`.
                                        Err(
                                            ResolveError::Revoked | ResolveError::AlreadyResolved,
                                        ) => {
                                            acked_ok.lock().unwrap().remove(&offset);
                                            revoked_acks.fetch_add(1, Ordering::SeqCst)
                                        }
                                        Err(e) => panic!("ack: {e:?}"),
                                    };
                                }
                            }
                        }
                    })
                })
                .collect();
            s.spawn(|| {
                let mut rng = Rng::new(99);
                while !done.load(Ordering::SeqCst) {
                    let revoked = tracker.revoke(&rng.below(PARTITIONS));
                    released.fetch_add(revoked.released as u64, Ordering::SeqCst);
                    reported.lock().unwrap().extend(revoked.committable);
                }
            });
            s.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    let offsets = if watermarks {
                        tracker.committable()
                    } else {
                        let mut flush = tracker.begin_flush().unwrap();
                        let offsets = flush.wait(Duration::from_millis(1)).unwrap_or_default();
                        let _ = flush.commit();
                        offsets
                    };
                    reported.lock().unwrap().extend(offsets.into_values());
                }
            });
            for sender in senders {
                sender.join().unwrap();
            }
        });
        // A send that raced a revoke and released its own record is counted
        // by the next revoke of its partition: a last one of each.
        for partition in 0..PARTITIONS {
            let revoked = tracker.revoke(&partition);
            released.fetch_add(revoked.released as u64, Ordering::SeqCst);
        }
        let total = SENDERS * RECORDS;
        let (ok, released) = (ok.into_inner(), released.into_inner());
        assert_eq!(ok + released, total, "every record acked or released, once");
        assert_eq!(
            revoked_acks.into_inner(),
            released,
            "a released record's ack says Revoked"
        );
        assert_eq!(tracker.in_flight(), 0);
        let acked_ok = acked_ok.into_inner().unwrap();
        for offset in reported.into_inner().unwrap() {
            assert!(
                acked_ok.contains(&offset),
                "offset {offset} reported but never acked"
            );
        }
    });
}
