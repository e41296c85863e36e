//! Guarantees 9 to 11: `close`, lock-freedom (structural), and wrong use
//! answered with an error; the capacity bound.

use super::*;

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
    // Sends of each sender before the close.
    const BEFORE: u64 = if cfg!(miri) { 10 } else { 100 };
    for round in 0..if cfg!(miri) { 2 } else { 20 } {
        let tracker = Tracker::<u32, u64>::new();
        let barrier = Barrier::new(SENDERS as usize + 1);
        let last_ok: Vec<u64> = thread::scope(|s| {
            let handles: Vec<_> = (0..SENDERS)
                .map(|p| {
                    let (tracker, barrier) = (&tracker, &barrier);
                    s.spawn(move || {
                        let mut last = 0;
                        for o in 1.. {
                            if o == BEFORE {
                                barrier.wait();
                            }
                            match tracker.send(p, o) {
                                Ok(t) => {
                                    last = o;
                                    tracker.ack(t).unwrap();
                                }
                                Err(SendError::Closed(rp, ro)) => {
                                    assert_eq!((rp, ro), (p, o));
                                    assert!(o >= BEFORE, "closed before the barrier");
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
    for i in 0..if cfg!(miri) { 10 } else { 100 } {
        match tracker.send(format!("p{i}"), format!("o{i}")) {
            Err(SendError::Full(p, o, _)) => {
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

/// A capacity of 0 is a permanent refusal: `send_timeout` with no deadline
/// and `send_async` answer `Full` at once, as for a tracker out of slots
/// (review 4, item 8: they waited for room that nothing makes; the
/// timeout here is unbounded, so the old code never returned).
#[test]
fn g11_capacity_zero_answers_full_at_once_when_waiting_for_room() {
    use inflight::Limit;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let barrier = Tracker::<&str, u64>::with_capacity(0);
    let watermarks: inflight::WatermarkTracker<&str, u64> =
        Tracker::builder().capacity(0).watermarks().build();
    let progress: inflight::ProgressTracker<&str, u64> =
        Tracker::builder().capacity(0).progress(64).build();
    let timed = [
        barrier.send_timeout("p", 1, Duration::MAX),
        watermarks.send_timeout("p", 1, Duration::MAX),
        progress.send_timeout("p", 1, Duration::MAX),
    ];
    for refused in timed {
        assert!(
            matches!(refused, Err(SendError::Full("p", 1, Limit::Capacity))),
            "{refused:?}"
        );
    }
    let mut cx = Context::from_waker(Waker::noop());
    let mut future = std::pin::pin!(barrier.send_async("p", 2));
    assert!(matches!(
        future.as_mut().poll(&mut cx),
        Poll::Ready(Err(SendError::Full("p", 2, Limit::Capacity)))
    ));
    // The refused offset 1 is owed on a tracker with watermarks: retried
    // first.
    let mut future = std::pin::pin!(watermarks.send_async("p", 1));
    assert!(matches!(
        future.as_mut().poll(&mut cx),
        Poll::Ready(Err(SendError::Full("p", 1, Limit::Capacity)))
    ));
    let mut future = std::pin::pin!(progress.send_async("p", 1));
    assert!(matches!(
        future.as_mut().poll(&mut cx),
        Poll::Ready(Err(SendError::Full("p", 1, Limit::Capacity)))
    ));
    assert_eq!(
        barrier.in_flight() + watermarks.in_flight() + progress.in_flight(),
        0
    );
}

#[test]
fn g11_capacity_usize_max_works() {
    let tracker = Tracker::<u8, u64>::with_capacity(usize::MAX);
    let n = scaled(1_000_u64);
    let tickets: Vec<_> = (0..n).map(|o| tracker.send(0, o).unwrap()).collect();
    assert_eq!(tracker.in_flight(), n as usize);
    let mut flush = tracker.begin_flush().unwrap();
    for t in tickets {
        tracker.ack(t).unwrap();
    }
    assert_eq!(flush.wait(GENEROUS), Ok(map([(0, n - 1)])));
    flush.commit().unwrap();
}

#[test]
fn g11_capacity_bound_is_exact_and_resolutions_make_room() {
    let sizes: &[usize] = if cfg!(miri) {
        &[1, 7]
    } else {
        &[1, 2, 7, 64, 100]
    };
    for &n in sizes {
        let tracker = Tracker::<String, u64>::with_capacity(n);
        let mut tickets: Vec<_> = (0..n)
            .map(|i| tracker.send(format!("p{}", i % 3), i as u64).unwrap())
            .collect();
        match tracker.send("extra".to_string(), 12345) {
            Err(SendError::Full(p, o, _)) => assert_eq!((p.as_str(), o), ("extra", 12345)),
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
                for o in 0..if cfg!(miri) { 20 } else { 20_000_u64 } {
                    match tracker.send(p, o) {
                        Ok(t) => {
                            let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(now <= CAPACITY, "{now} records in flight");
                            mine.push(t);
                        }
                        Err(SendError::Full(rp, ro, _)) => assert_eq!((rp, ro), (p, o)),
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
    // Under Miri, below and above the 64 still.
    let sizes: &[usize] = if cfg!(miri) {
        &[1, 65]
    } else {
        &[1, 5, 64, 65, 200, 1000]
    };
    for &n in sizes {
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
    for round in 0..if cfg!(miri) { 2 } else { 50_u64 } {
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
    // SendError needs no Display bound on the record; its Debug shows it.
    #[derive(Debug)]
    struct Opaque;
    check(SendError::Full(Opaque, Opaque, inflight::Limit::Capacity));
    check(SendError::<Opaque, Opaque>::Closed(Opaque, Opaque));
    assert_eq!(
        format!(
            "{:?}",
            SendError::Full("p", 7, inflight::Limit::MetadataBudget)
        ),
        r#"Full("p", 7, MetadataBudget)"#
    );
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
        for round in 0..if cfg!(miri) { 10 } else { 200_u64 } {
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
        Err(SendError::Full(Touchy(2), 3, _))
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
