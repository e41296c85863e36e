//! Loom models of the async waits: `Flush::wait_async` and
//! `Tracker::drain_async`.
//!
//! The futures run under `loom::future::block_on`, whose waker is a loom
//! `Notify`: a wake-up that is never delivered leaves `block_on` waiting
//! forever, which loom reports as a deadlock. Whether a re-poll presents a
//! waker that `will_wake` the registered one depends on how loom builds its
//! waker clones, so the same-waker path is covered by the unit test
//! `same_waker_registers_once_and_drop_unregisters` in `src/future.rs`.
//! A second `block_on` on the same future polls it with a different waker,
//! which exercises the replacement of a registered waker. Offsets are
//! `loom::sync::Arc<u64>`, so leaks and double drops fail a model, and
//! `Tracker::registered_waiters` (a loom-only hook) shows that no
//! registration outlives its future.
//!
//! Build with `--cfg loom --cfg crossbeam_loom` (see `../run`).
#![cfg(loom)]

use inflight::{FlushError, Tracker};
use loom::future::block_on;
use loom::sync::Arc;
use loom::thread;
use std::future::Future;
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Duration;

mod common;

use common::{off, plain, run_model, FOREVER, T};

/// Polls `future` once, under a `block_on` of its own (so with a waker of
/// its own), and returns what the poll returned.
fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    let mut future = Some(future);
    block_on(std::future::poll_fn(move |cx| {
        Poll::Ready(future.take().expect("polled once").poll(cx))
    }))
}

/// A1. The last covered ack races the task's waker registration: the
/// awaited flush completes (a lost wake-up would leave `block_on` waiting
/// forever), and its registration is gone afterwards.
#[test]
fn async_ack_vs_waker_registration_no_lost_wakeup() {
    run_model("async_ack_vs_waker_registration_no_lost_wakeup", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let ticket = tracker.send("p", off(7)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(ticket).unwrap());
        assert_eq!(plain(block_on(flush.wait_async()).unwrap()), vec![("p", 7)]);
        assert_eq!(tracker.registered_waiters(), 0);
        flush.commit().unwrap();
        acker.join().unwrap();
    });
}

/// A2. The last covered ack races a re-registration: the future was polled
/// (and registered) with one waker, and is then awaited with another, whose
/// replacement of the first must not lose the ack's wake-up either.
#[test]
fn async_ack_vs_waker_replacement_no_lost_wakeup() {
    run_model("async_ack_vs_waker_replacement_no_lost_wakeup", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let ticket = tracker.send("p", off(7)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(ticket).unwrap());
        let offsets = {
            let mut future = pin!(flush.wait_async());
            match poll_once(future.as_mut()) {
                Poll::Ready(offsets) => offsets,
                Poll::Pending => block_on(future),
            }
        };
        assert_eq!(plain(offsets.unwrap()), vec![("p", 7)]);
        assert_eq!(tracker.registered_waiters(), 0);
        flush.commit().unwrap();
        acker.join().unwrap();
    });
}

/// A3. An interrupt races a pending future: the future returns
/// `Interrupted` (promptly: no lost wake-up), the flush stays interrupted,
/// and the interrupt is not delivered a second time to the next flush.
#[test]
fn async_interrupt_vs_pending_future() {
    run_model("async_interrupt_vs_pending_future", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let stuck = tracker.send("p", off(1)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let interrupter = thread::spawn(move || t2.interrupt());
        assert_eq!(
            block_on(flush.wait_async()).map(plain),
            Err(FlushError::Interrupted)
        );
        assert_eq!(
            block_on(flush.wait_async()).map(plain),
            Err(FlushError::Interrupted)
        );
        assert_eq!(tracker.registered_waiters(), 0);
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

/// A4. A future is polled, then dropped while the last covered ack races
/// it: its registration is gone, and the flush is usable afterwards, by a
/// second `wait_async` that must complete (the ack may have happened while
/// nobody was registered) with the covered offset.
#[test]
fn async_drop_of_future_vs_last_ack() {
    run_model("async_drop_of_future_vs_last_ack", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let ticket = tracker.send("p", off(3)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(ticket).unwrap());
        let first = {
            let mut future = pin!(flush.wait_async());
            poll_once(future.as_mut())
            // Dropped here, pending or not.
        };
        assert_eq!(tracker.registered_waiters(), 0, "a dropped future's waker");
        let offsets = match first {
            Poll::Ready(offsets) => offsets,
            Poll::Pending => block_on(flush.wait_async()),
        };
        assert_eq!(plain(offsets.unwrap()), vec![("p", 3)]);
        flush.commit().unwrap();
        acker.join().unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
}

/// A5. One wake reaches a parked thread and a task alike: a flush's
/// blocking `wait` on one thread, and on the other a task that registers a
/// `drain_async` and, in the same poll, acks the last record. Only the
/// ack's one wake can end both waits: the task returned `Pending`, so
/// `block_on` polls it again only when its waker is woken. (A third thread
/// acking instead is too many states: minutes at a bound of 2.)
#[test]
fn async_drain_and_blocking_wait_woken_by_one_ack() {
    run_model("async_drain_and_blocking_wait_woken_by_one_ack", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let ticket = tracker.send("p", off(5)).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        let t2 = tracker.clone();
        let other = thread::spawn(move || {
            let mut drain = pin!(t2.drain_async());
            let mut ticket = Some(ticket);
            block_on(std::future::poll_fn(|cx| {
                let poll = drain.as_mut().poll(cx);
                if let Some(ticket) = ticket.take() {
                    assert!(poll.is_pending(), "the record is not resolved yet");
                    t2.ack(ticket).unwrap();
                }
                poll
            }))
            .unwrap();
        });
        assert_eq!(plain(flush.wait(FOREVER).unwrap()), vec![("p", 5)]);
        flush.commit().unwrap();
        other.join().unwrap();
        assert_eq!(tracker.in_flight(), 0);
        assert_eq!(tracker.registered_waiters(), 0);
    });
}

/// A6. Waiting for room, awaited: on a tracker of capacity 1 with one
/// record in flight, `send_async` races the ack of that record. The future
/// registers its waker in the `room` list and flags `ROOM_WANTED`; the
/// ack's return of its permit either sees the flag and wakes the task, or
/// comes first and the flagging CAS sees the free permit. The send
/// completes (a lost wake-up leaves `block_on` waiting for ever), and the
/// bound holds.
#[test]
fn async_send_vs_ack_makes_room() {
    run_model("async_send_vs_ack_makes_room", || {
        let tracker: Arc<T> = Arc::new(Tracker::with_capacity(1));
        let first = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(first).unwrap());
        let second = block_on(tracker.send_async("p", off(2))).expect("the ack made room");
        acker.join().unwrap();
        assert_eq!(tracker.in_flight(), 1);
        tracker.ack(second).unwrap();
        assert_eq!(tracker.in_flight(), 0);
    });
}
