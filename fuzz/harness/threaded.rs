//! The `threaded` target: the operation list split across 2 or 3 threads
//! released by one barrier, each owning its tickets, checked against
//! invariants that hold under any interleaving (while running, and at
//! rest). Its tracker is a plain `Tracker<Key, Stamp>` (a `u8` partition
//! and a `u64` offset whose `Drop`s may sleep, see [`ThreadOp::SlowSend`]):
//! planned panics in user code are the `ops` target's (`user.rs`); here
//! every call must return.
//!
//! With [`ThreadOp::Revoke`] (of any thread's partition, or the shared
//! one), a record may be released by a revoke that did not end before its
//! send began: only then may its `ack` or `fail` answer `Revoked` (or
//! `AlreadyResolved`), and only then may an earlier unacked record of its
//! sender be of another life than a later one that is reported. At the
//! end, after every ticket is resolved (`Ok`, or `Revoked` where allowed)
//! and one last revoke of every partition (which collects the records that
//! sends racing a revoke released themselves): `Ok` resolutions plus the
//! records every revoke released are the records sent, nothing is in
//! flight, no offset was ever reported (by a flush, `committable` or a
//! revoke) whose record's resolution did not return `Ok`, and a final
//! flush returns no offsets and no failure (every life ended).
//!
//! Revokes race sends of one partition often: [`ThreadOp::SlowSend`] is a
//! send whose partition or offset `Drop` inside the tracker (between the
//! send's read of the partition's life and the install of its record)
//! sleeps, and [`ThreadOp::Renew`] revokes the shared partition and at once
//! sends a record of its new life there (then maybe acks it and flushes),
//! so that a slow send of the ended life lands after the new life's record. An `Ok`
//! flush must then still report every partition that has a send it must
//! reach (see `Shared::check_reached`), and never with an offset of a life
//! that ended; at rest, a revoked partition whose last life has records,
//! all acked, has a watermark of that life.
//!
//! The files: this one has the operations ([`ThreadOp`]), what the
//! threads share, the entry points and the end state; `threaded/thread.rs`
//! runs one thread's list; `threaded/checks.rs` has the invariants, those
//! checked while running and those at rest.

mod checks;
mod thread;

use self::checks::{check_watermarks_at_rest, final_flush, queue_numbers};
use super::AnyTracker;
use super::{build_tracker, pick_setup, Offsets, State};
use arbitrary::{Arbitrary, Unstructured};
use inflight::{DrainError, FlushError, Ticket};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

/// The partition all threads share; thread `t` owns partitions `2t, 2t+1`.
const SHARED: u8 = 100;

/// One step of one thread in `run_threaded`.
#[derive(Arbitrary, Debug, Clone)]
pub enum ThreadOp {
    /// Send on the thread's own partition (`second` picks which), or on the
    /// shared one.
    Send {
        /// Send on the shared partition.
        shared: bool,
        /// The thread's second partition.
        second: bool,
    },
    /// `ack` the i-th live `Ticket`.
    Ack(u8),
    /// `fail` the i-th live `Ticket`.
    Fail(u8),
    /// Turn the i-th live `Ticket` into a raw ticket.
    IntoRaw(u8),
    /// `ack_raw` (or `fail_raw`) of the i-th live raw ticket.
    AckRaw(u8, bool),
    /// `ack_raw` (or `fail_raw`) of one of this thread's resolved tickets.
    Stale(u8, bool),
    /// `begin_flush`.
    Begin,
    /// `wait` on this thread's flush, zero timeout or a short park.
    Wait(bool),
    /// `commit` this thread's flush.
    Commit,
    /// `abort` this thread's flush.
    Abort,
    /// `interrupt`.
    Interrupt,
    /// `close`.
    Close,
    /// `in_flight`: at least this thread's unresolved records.
    InFlight,
    /// `committable_with_stats` (`true`) or `committable`.
    Committable(bool),
    /// `drain`, zero timeout or a short park.
    Drain(bool),
    /// `revoke` of a partition: the i-th (modulo their number) of every
    /// thread's own partitions and the shared one.
    Revoke(u8),
    /// `Send`, slowly: a `Drop` the tracker runs inside the send sleeps,
    /// so that revokes and sends of other threads overtake it. Both come
    /// after the send read its partition's life: that of a reused slot's
    /// old offset before the record enters a generation, that of the
    /// partition argument after it entered one, before it is installed in
    /// the generation's partition cell.
    SlowSend {
        /// Send on the shared partition.
        shared: bool,
        /// The thread's second partition.
        second: bool,
        /// The partition's `Drop` sleeps (after the record entered a
        /// generation), not the old offset's.
        entered: bool,
    },
    /// `revoke` of the shared partition, then at once a send there (of the
    /// new life, racing any slow send still in the ended one); with `ack`,
    /// that record is acked at once; with `flush` too, a flush is begun
    /// (unless this thread holds one) and waited for (a short park).
    Renew {
        /// Ack the new record at once.
        ack: bool,
        /// Then begin a flush and wait for it.
        flush: bool,
    },
}

/// How long (in µs) a partition's or offset's `Drop` sleeps inside a
/// [`ThreadOp::SlowSend`]: 20 (the fuzz target), or as [`set_slow_drop`]
/// set it.
static SLOW_DROP: AtomicU64 = AtomicU64::new(20);

/// Sets how long each partition or offset `Drop` inside a
/// [`ThreadOp::SlowSend`] sleeps, for every thread of the process (a test
/// that wants its races to come out one way on a loaded machine).
pub fn set_slow_drop(sleep: Duration) {
    let micros = u64::try_from(sleep.as_micros()).unwrap_or(u64::MAX);
    SLOW_DROP.store(micros, Ordering::Relaxed);
}

/// Which `Drop`s sleep on a thread: none but inside a
/// [`ThreadOp::SlowSend`]'s `send`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slow {
    No,
    /// Offsets' (a reused slot's old offset, before the record entered a
    /// generation).
    Offset,
    /// Partitions' (the partition argument, after it entered one).
    Partition,
}

thread_local! {
    /// Which `Drop`s sleep on this thread now.
    static SLOW: Cell<Slow> = const { Cell::new(Slow::No) };
}

/// The partition type of `run_threaded`, whose `Drop` may sleep while its
/// thread runs a [`ThreadOp::SlowSend`] (the tracker drops the partition
/// argument of a send it accepts inside the send).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key(u8);

/// The offset type of `run_threaded`: `thread << 32 | seq` (see
/// [`encode`]), whose `Drop` may sleep as [`Key`]'s (the tracker drops a
/// reused slot's old offset inside the send that takes the slot).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Stamp(u64);

/// A `Drop` of the kind `which` inside a [`ThreadOp::SlowSend`] sleeps.
fn slow_drop(which: Slow) {
    if SLOW.with(Cell::get) == which {
        std::thread::sleep(Duration::from_micros(SLOW_DROP.load(Ordering::Relaxed)));
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        slow_drop(Slow::Partition);
    }
}

impl Drop for Stamp {
    fn drop(&mut self) {
        slow_drop(Slow::Offset);
    }
}

/// The offsets of a map the tracker returned.
fn plain(offsets: HashMap<Key, Stamp>) -> Offsets {
    offsets.into_iter().map(|(p, o)| (p.0, o.0)).collect()
}

/// Offsets in `run_threaded` name their sender: `thread << 32 | seq`.
fn encode(thread: usize, seq: u64) -> u64 {
    (thread as u64) << 32 | seq
}

/// The sender and seq an offset of `run_threaded` names.
fn decode(offset: u64) -> (usize, u64) {
    ((offset >> 32) as usize, offset & 0xffff_ffff)
}

struct Shared<'a> {
    tracker: &'a AnyTracker<Key, Stamp>,
    capacity: Option<usize>,
    watermarks: bool,
    /// Per thread: `(partition, seq)` of records sent (about to be) and not
    /// acked. Inserted before `send`, removed before `ack`; failed records
    /// stay. A flush or a watermark that returns offset `seq` for a
    /// partition must find no entry of its sender at or below it.
    unacked: Vec<Mutex<BTreeSet<(u8, u64)>>>,
    /// Offsets of committed flushes, in commit order (the lock is held
    /// across `commit`).
    committed: Mutex<Vec<Offsets>>,
    /// Set by the holder of a flush while it is alive.
    holder: AtomicBool,
    /// `fail`s begun so far.
    fails: AtomicUsize,
    /// Partitions on which a `fail` began.
    failing: Mutex<BTreeSet<u8>>,
    /// Set before any `close()`.
    closing: AtomicBool,
    /// Ticks once before every send; read after every `begin_flush`.
    clock: AtomicU64,
    /// Per thread: the `clock` value taken before the send of `(partition,
    /// seq)`.
    started: Vec<Mutex<HashMap<(u8, u64), u64>>>,
    /// Per thread and own partition: the seq of its last send that returned
    /// `Ok` (0: none yet). Stored after `send` returns.
    done: Vec<[AtomicU64; 2]>,
    /// Every watermark any `committable` call returned.
    marks: Mutex<Vec<(u8, u64)>>,
    /// Calls of the plain `committable`, whose record counts nobody sees.
    plain_calls: AtomicUsize,
    /// `committable_records`, summed over all calls.
    committable_records: AtomicU64,
    /// Whether any thread's list holds a `Revoke` or a `Renew`.
    revoking: bool,
    /// Whether no two calls may take watermarks at once: no revokes, and
    /// `committable` calls in one thread's list at most.
    lone_taker: bool,
    /// Per partition number: revokes of it begun so far.
    revokes_begun: Vec<AtomicU64>,
    /// Per partition number: revokes of it ended so far.
    revokes_ended: Vec<AtomicU64>,
    /// Per thread: for `(partition, seq)`, the revokes of its partition
    /// ended before its send began, and those begun before its send
    /// returned (`u64::MAX` until then).
    spans: Vec<Mutex<Spans>>,
    /// `released`, summed over all revokes.
    released: AtomicUsize,
    /// Every offset reported: by an `Ok` wait, `committable`, a revoke.
    reported: Mutex<Vec<(u8, u64)>>,
    /// Offsets whose `ack` returned `Ok`.
    acked_ok: Mutex<HashSet<u64>>,
    /// Every send that returned `Ok`, in the order they returned.
    completed: Mutex<Vec<Done>>,
    /// `clock_after` of the last committed flush (0: none yet); stored
    /// under the `committed` lock.
    commit_sealed: AtomicU64,
}

/// A send that returned `Ok`.
#[derive(Clone, Copy, Debug)]
struct Done {
    partition: u8,
    thread: usize,
    seq: u64,
    /// The `clock` value taken before the send.
    start: u64,
    /// Revokes of its partition ended before the send began.
    ended_before: u64,
}

/// Per record `(partition, seq)` of one thread: the revokes of its
/// partition ended before its send began, and those begun before it
/// returned.
type Spans = HashMap<(u8, u64), (u64, u64)>;

/// What a flush's holder noted around `begin_flush`, to check its offsets.
struct Sealed {
    /// `done` of every own partition, read before `begin_flush` began.
    done_before: Vec<(u8, u64)>,
    /// `clock` read after `begin_flush` returned.
    clock_after: u64,
    /// How many sends had returned `Ok` (`Shared::completed`) before
    /// `begin_flush` began.
    completed: usize,
}

/// What a thread leaves behind.
struct Outcome {
    /// Live tickets, with their index in `records`.
    tickets: Vec<(Ticket, usize)>,
    /// Live raw tickets, with their index in `records`.
    raws: Vec<(u64, usize)>,
    /// Its records (sends that returned `Ok`), in send order: partition,
    /// seq, state.
    records: Vec<(u8, u64, State)>,
    sent: usize,
    /// Resolutions that returned `Ok`.
    resolved: usize,
    /// Fails that returned `Ok`.
    failed: usize,
    /// Last successful send per partition: its seq.
    last: HashMap<u8, u64>,
}

impl Outcome {
    /// This thread's records of `partition`, in send order: seq and state.
    fn of(&self, partition: u8) -> impl Iterator<Item = (u64, State)> + '_ {
        (self.records.iter())
            .filter(move |r| r.0 == partition)
            .map(|&(_, seq, state)| (seq, state))
    }
}

/// The `threaded` target: the operation list split across 2 or 3 threads
/// started together, then end-state invariants.
pub fn run_threaded(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let threads = 2 + usize::from(u8::arbitrary(&mut u).unwrap_or(0) % 2);
    let (capacity, watermarks) = pick_setup(&mut u, 32);
    let mut per_thread: Vec<Vec<ThreadOp>> = vec![Vec::new(); threads];
    if let Ok(iter) = u.arbitrary_iter::<(u8, ThreadOp)>() {
        for (thread, op) in iter.take(1024).map_while(Result::ok) {
            per_thread[usize::from(thread) % threads].push(op);
        }
    }
    run_threaded_ops(capacity, watermarks, &per_thread);
}

/// Runs each list of `per_thread` on its own thread (all released by one
/// barrier) on a tracker of `capacity`, with or without `watermarks`, then
/// checks the end state. Panics on a violation.
pub fn run_threaded_ops(capacity: Option<usize>, watermarks: bool, per_thread: &[Vec<ThreadOp>]) {
    let tracker = build_tracker(capacity, watermarks);
    let revoking = (per_thread.iter().flatten())
        .any(|op| matches!(op, ThreadOp::Revoke(_) | ThreadOp::Renew { .. }));
    let shared = Shared {
        tracker: &tracker,
        capacity,
        watermarks,
        unacked: per_thread.iter().map(|_| Mutex::default()).collect(),
        committed: Mutex::default(),
        holder: AtomicBool::new(false),
        fails: AtomicUsize::new(0),
        failing: Mutex::default(),
        closing: AtomicBool::new(false),
        clock: AtomicU64::new(0),
        started: per_thread.iter().map(|_| Mutex::default()).collect(),
        done: per_thread
            .iter()
            .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
            .collect(),
        marks: Mutex::default(),
        plain_calls: AtomicUsize::new(0),
        committable_records: AtomicU64::new(0),
        revoking,
        lone_taker: !revoking
            && (per_thread.iter())
                .filter(|ops| ops.iter().any(|op| matches!(op, ThreadOp::Committable(_))))
                .count()
                <= 1,
        revokes_begun: (0..256).map(|_| AtomicU64::new(0)).collect(),
        revokes_ended: (0..256).map(|_| AtomicU64::new(0)).collect(),
        spans: per_thread.iter().map(|_| Mutex::default()).collect(),
        released: AtomicUsize::new(0),
        reported: Mutex::default(),
        acked_ok: Mutex::default(),
        completed: Mutex::default(),
        commit_sealed: AtomicU64::new(0),
    };
    let barrier = Barrier::new(per_thread.len());
    let mut outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (per_thread.iter().enumerate())
            .map(|(thread, ops)| {
                let (shared, barrier) = (&shared, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    shared.run(thread, ops)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });

    // Nothing lost: at quiescence, in_flight = sends - resolutions, and on
    // a watermark tracker also the resolved records behind an unresolved
    // one of their partition: exactly known for the threads' own
    // partitions; on the shared one, at least those behind an unresolved
    // record of their own sender, at most all resolved ones too. With
    // revokes, at most sends - resolutions - records released so far (sends
    // that raced a revoke may have released their own, counted later).
    let sent: usize = outcomes.iter().map(|o| o.sent).sum();
    let resolved: usize = outcomes.iter().map(|o| o.resolved).sum();
    let in_flight = tracker.in_flight();
    if revoking {
        let released = shared.released.load(Ordering::SeqCst);
        if !watermarks {
            assert!(
                in_flight <= sent - resolved - released,
                "in_flight {in_flight} at quiescence: {sent} sent, {resolved} resolved, \
                 {released} released"
            );
        }
    } else if watermarks {
        let (mut at_least, mut at_most) = (0, 0);
        for (thread, outcome) in outcomes.iter().enumerate() {
            for partition in [2 * thread as u8, 2 * thread as u8 + 1] {
                let unpassed = queue_numbers(outcome.of(partition)).0;
                at_least += unpassed;
                at_most += unpassed;
            }
            at_least += queue_numbers(outcome.of(SHARED)).0;
            at_most += outcome.of(SHARED).count();
        }
        assert!(
            (at_least..=at_most).contains(&in_flight),
            "in_flight {in_flight} at quiescence, not in {at_least}..={at_most}"
        );
    } else {
        assert_eq!(in_flight, sent - resolved, "in_flight at quiescence");
    }
    if let (Some(capacity), false) = (capacity, revoking) {
        assert!(sent - resolved <= capacity);
    }

    for (thread, outcome) in outcomes.iter_mut().enumerate() {
        let unacked = &shared.unacked[thread];
        for (ticket, id) in std::mem::take(&mut outcome.tickets) {
            shared.resolving(unacked, outcome, id, false);
            let result = tracker.ack(ticket);
            shared.resolved(thread, outcome, id, false, result);
        }
        for (raw, id) in std::mem::take(&mut outcome.raws) {
            shared.resolving(unacked, outcome, id, false);
            let result = tracker.ack_raw(raw);
            shared.resolved(thread, outcome, id, false, result);
        }
    }
    assert_eq!(tracker.in_flight(), 0);
    check_watermarks_at_rest(&shared, &outcomes);

    // Nothing in flight: a drain returns at once.
    let mut drained = tracker.drain(Duration::ZERO);
    if drained == Err(DrainError::Interrupted) {
        // A leftover interrupt; it is delivered once.
        drained = tracker.drain(Duration::ZERO);
    }
    assert_eq!(drained, Ok(()), "drain at rest");

    let resolved: usize = outcomes.iter().map(|o| o.resolved).sum();
    let failed: usize = outcomes.iter().map(|o| o.failed).sum();
    let partitions: Vec<u8> = (0..2 * per_thread.len() as u8).chain([SHARED]).collect();
    if revoking {
        // A last revoke of every partition: nothing left to release but
        // the records sends released themselves, racing a revoke; nothing
        // to hand over (`check_watermarks_at_rest` took every advance).
        for &partition in &partitions {
            let before = shared.marks.lock().unwrap().len();
            shared.revoke(partition);
            assert_eq!(
                shared.marks.lock().unwrap().len(),
                before,
                "a last revoke's committable"
            );
        }
        let released = shared.released.load(Ordering::SeqCst);
        assert_eq!(
            resolved + released,
            sent,
            "{resolved} resolved + {released} released, {sent} sent"
        );
        assert_eq!(tracker.in_flight(), 0);
        // Every life ended: the final flush has nothing to report or fail.
        let mut flush = tracker.begin_flush().expect("no flush is alive any more");
        let mut result = flush.wait(Duration::ZERO).map(plain);
        if result == Err(FlushError::Interrupted) {
            flush.abort();
            flush = tracker.begin_flush().expect("no flush is alive any more");
            result = flush.wait(Duration::ZERO).map(plain);
        }
        assert_eq!(
            result,
            Ok(Offsets::new()),
            "the final flush after the last revokes"
        );
        assert_eq!(flush.commit(), Ok(()));
    } else {
        let committed = std::mem::take(&mut *shared.committed.lock().unwrap());
        let last: Vec<HashMap<u8, u64>> = outcomes.into_iter().map(|o| o.last).collect();
        final_flush(&tracker, committed, &last, failed);
        for &partition in &partitions {
            let before = shared.marks.lock().unwrap().len();
            assert_eq!(
                shared.revoke(partition),
                0,
                "a last revoke released something"
            );
            assert_eq!(
                shared.marks.lock().unwrap().len(),
                before,
                "a last revoke's committable"
            );
        }
        assert_eq!(resolved, sent);
    }
    // No offset reported whose record's resolution did not return Ok.
    let acked_ok = shared.acked_ok.lock().unwrap();
    for &(partition, offset) in shared.reported.lock().unwrap().iter() {
        let (thread, seq) = decode(offset);
        assert!(
            acked_ok.contains(&offset),
            "{partition}:{seq} of thread {thread} reported, never acked"
        );
    }
}
