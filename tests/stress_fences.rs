//! Sends, acks, flushes and revokes of the same partitions on real threads,
//! with the asymmetric barrier that orders a send against a revoke as this
//! process has it: the `membarrier` system call where Linux offers it, full
//! fences where it does not or `INFLIGHT_NO_MEMBARRIER` is set (CI runs the
//! whole suite once that way). Loom checks the argument with both sides as
//! `SeqCst` fences; this checks the kernel call does what the argument
//! needs of it.
//!
//! Three senders send single records and batches to four shared partitions
//! and hand the tickets to two ackers; a revoker revokes the partitions in
//! turn as fast as it can; a flusher begins, waits for and commits (or
//! abandons) flushes, or takes watermarks. Whatever the interleaving, every
//! record ends exactly one way: its ack is delivered, or it was released
//! by exactly one revoke (its ack answers `Revoked`, and the revokes'
//! `released` counts it once). A record that a revoke of its partition
//! began after its send returned, and ended before its ack began, is
//! released (neither the revoke's scan nor the send's re-check may miss
//! it). At the end nothing is in flight.

use inflight::mode::Mode;
use inflight::{ResolveError, Ticket, Tracker};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

const SENDERS: usize = 3;
const ACKERS: usize = 2;
const PARTITIONS: u32 = 4;
/// Rounds per sender: one single send and one batch of `BATCH` each.
const ROUNDS: u64 = if cfg!(miri) { 20 } else { 20_000 };
const BATCH: u64 = 3;

/// What the threads counted.
#[derive(Debug, Default)]
struct Counts {
    /// Revokes of each partition begun, and ended.
    begun: [AtomicUsize; PARTITIONS as usize],
    ended: [AtomicUsize; PARTITIONS as usize],
    delivered: AtomicUsize,
    revoked: AtomicUsize,
    released: AtomicUsize,
    revokes: AtomicUsize,
}

fn run<M: Mode>(tracker: &Tracker<u32, u64, M>, flush: impl Fn(&Tracker<u32, u64, M>) + Sync)
where
    u32: Hash + Eq,
{
    let counts = Counts::default();
    let sending = AtomicUsize::new(SENDERS);
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let mut queues = Vec::new();
        for _ in 0..ACKERS {
            // A ticket, its partition, and how many revokes of it had
            // begun when its send returned.
            let (to_acker, tickets) = mpsc::channel::<(Ticket, u32, usize)>();
            queues.push(to_acker);
            let counts = &counts;
            s.spawn(move || {
                for (ticket, partition, begun) in tickets {
                    // SeqCst, as the revoker's counts.
                    let ended = counts.ended[partition as usize].load(Ordering::SeqCst);
                    match tracker.ack(ticket) {
                        Ok(()) => {
                            assert!(
                                ended <= begun,
                                "delivered, though a revoke of {partition} began after \
                                 its send and ended before its ack"
                            );
                            counts.delivered.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(ResolveError::Revoked) => {
                            counts.revoked.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => panic!("an ack answered {e:?}"),
                    };
                }
            });
        }
        for sender in 0..SENDERS {
            let queues = queues.clone();
            let (sending, begun) = (&sending, &counts.begun);
            s.spawn(move || {
                let mut batch = Vec::new();
                for round in 0..ROUNDS {
                    let partition = (round as u32 + sender as u32) % PARTITIONS;
                    let offset = round * (BATCH + 1);
                    let ticket = tracker.send(partition, offset).unwrap();
                    // SeqCst: a revoke not yet begun here bumps the life
                    // after this send returned.
                    let now = begun[partition as usize].load(Ordering::SeqCst);
                    queues[round as usize % ACKERS]
                        .send((ticket, partition, now))
                        .unwrap();
                    tracker
                        .send_batch(&partition, offset + 1..=offset + BATCH, &mut batch)
                        .unwrap();
                    let now = begun[partition as usize].load(Ordering::SeqCst);
                    for ticket in batch.drain(..) {
                        let queue = &queues[(round as usize + 1) % ACKERS];
                        queue.send((ticket, partition, now)).unwrap();
                    }
                }
                sending.fetch_sub(1, Ordering::Release);
            });
        }
        drop(queues);
        let (counts, stop_ref) = (&counts, &stop);
        s.spawn(move || {
            let mut partition = 0;
            while !stop_ref.load(Ordering::Acquire) {
                // SeqCst, both: ordered with the senders' and ackers' looks.
                counts.begun[partition as usize].fetch_add(1, Ordering::SeqCst);
                let revoked = tracker.revoke(&partition);
                counts.ended[partition as usize].fetch_add(1, Ordering::SeqCst);
                counts
                    .released
                    .fetch_add(revoked.released, Ordering::Relaxed);
                counts.revokes.fetch_add(1, Ordering::Relaxed);
                partition = (partition + 1) % PARTITIONS;
                // A few microseconds between revokes: sends go on between.
                for _ in 0..500 {
                    std::hint::spin_loop();
                }
            }
        });
        let flush = &flush;
        s.spawn(move || {
            while !stop_ref.load(Ordering::Acquire) {
                flush(tracker);
            }
        });
        // The revoker and the flusher stop once every sender is done.
        while sending.load(Ordering::Acquire) != 0 {
            thread::yield_now();
        }
        stop.store(true, Ordering::Release);
    });
    // Every ack was made. A revoke of each partition collects the records
    // whose own sends released them after the revoker's last look.
    for partition in 0..PARTITIONS {
        let revoked = tracker.revoke(&partition);
        counts
            .released
            .fetch_add(revoked.released, Ordering::Relaxed);
    }
    let records = SENDERS * ROUNDS as usize * (BATCH as usize + 1);
    let (delivered, revoked) = (
        counts.delivered.load(Ordering::Relaxed),
        counts.revoked.load(Ordering::Relaxed),
    );
    assert_eq!(delivered + revoked, records, "every record ended one way");
    assert_eq!(
        counts.released.load(Ordering::Relaxed),
        revoked,
        "each revoked record was released once, by one revoke ({counts:?})"
    );
    assert_eq!(tracker.in_flight(), 0);
    println!(
        "{records} records, membarrier: {}, {counts:?}",
        inflight::uses_membarrier()
    );
}

/// `INFLIGHT_NO_MEMBARRIER` turns the system call off: the ignored test
/// below, run in a process of its own with the switch set, finds full
/// fences in use.
#[test]
#[cfg_attr(miri, ignore = "Miri runs no other process")]
fn the_switch_turns_the_system_call_off() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "switched_off", "--ignored", "--nocapture"])
        .env("INFLIGHT_NO_MEMBARRIER", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[test]
#[ignore = "run by the_switch_turns_the_system_call_off, with the switch set"]
fn switched_off() {
    let _tracker = Tracker::<u32, u64>::new();
    assert!(!inflight::uses_membarrier());
}

/// The flusher of the barrier runs: a flush that commits what it waited
/// for, or aborts when a millisecond was not enough.
fn barrier_flush<M: Mode>(tracker: &Tracker<u32, u64, M>) {
    let Ok(mut flush) = tracker.begin_flush() else {
        return;
    };
    match flush.wait(Duration::from_millis(1)) {
        Ok(_) => flush.commit().unwrap(),
        Err(_) => flush.abort(),
    }
}

#[test]
fn revokes_against_sends_acks_and_barrier_flushes() {
    let tracker = Tracker::<u32, u64>::new();
    run(&tracker, barrier_flush);
}

#[test]
fn revokes_against_sends_acks_and_barrier_flushes_with_offsets_inline() {
    let tracker: Tracker<u32, u64, inflight::mode::Inline> =
        Tracker::builder().inline_offsets().build();
    run(&tracker, barrier_flush);
}

#[test]
fn revokes_against_sends_acks_and_watermarks() {
    let tracker = Tracker::<u32, u64>::builder().watermarks().build();
    run(&tracker, |tracker| {
        let _ = tracker.committable();
        thread::yield_now();
    });
}
