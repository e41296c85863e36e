//! The `threaded` target: the operation list split across 2 or 3 threads
//! released by one barrier, each owning its tickets, checked against
//! invariants that hold under any interleaving (while running, and at
//! rest). Its tracker is a plain `Tracker<u8, u64>`: planned panics in
//! user code are the `ops` target's (`user.rs`); here every call must
//! return.
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

use super::{build_tracker, peek_raw, pick_setup, Offsets, State};
use arbitrary::{Arbitrary, Unstructured};
use inflight::{
    BeginFlushError, Committable, DrainError, Flush, FlushError, ResolveError, SendError, Ticket,
    Tracker,
};
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
    tracker: &'a Tracker<u8, u64>,
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
    /// Whether any thread's list holds a `Revoke`.
    revoking: bool,
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

/// Of records in send order: how many follow the first unresolved one (and
/// it), and the acked prefix (its length and last seq).
fn queue_numbers(records: impl Iterator<Item = (u64, State)>) -> (usize, usize, Option<u64>) {
    let (mut unpassed, mut acked, mut last) = (0, 0, None);
    let mut stopped = false;
    for (seq, state) in records {
        if unpassed > 0 || state == State::Live {
            unpassed += 1;
        }
        stopped |= state != State::Acked;
        if !stopped {
            acked += 1;
            last = Some(seq);
        }
    }
    (unpassed, acked, last)
}

impl Shared<'_> {
    /// Revokes of `partition` begun so far.
    fn begun(&self, partition: u8) -> u64 {
        self.revokes_begun[usize::from(partition)].load(Ordering::SeqCst)
    }

    /// Whether a revoke of `partition` that had not ended when the send of
    /// `(partition, seq)` by `thread` began has begun by now: it may have
    /// released that record, or ended its life.
    fn may_be_revoked(&self, thread: usize, partition: u8, seq: u64) -> bool {
        if !self.revoking {
            return false;
        }
        let spans = self.spans[thread].lock().unwrap();
        let (ended_before, _) = spans[&(partition, seq)];
        drop(spans);
        self.begun(partition) > ended_before
    }

    /// Whether records `early` and `late` (sent in this order by `thread`
    /// to `partition`) may belong to two lives of it: a revoke of it that
    /// had not ended when `early`'s send began had begun when `late`'s send
    /// returned.
    fn two_lives(&self, thread: usize, partition: u8, early: u64, late: u64) -> bool {
        if !self.revoking {
            return false;
        }
        let spans = self.spans[thread].lock().unwrap();
        let (ended_before, _) = spans[&(partition, early)];
        let (_, begun_after) = spans[&(partition, late)];
        begun_after > ended_before
    }

    /// Checks the offsets of an `Ok` wait of the flush noted in `sealed`.
    fn check_ok(&self, offsets: &Offsets, sealed: &Sealed) {
        // A send that completed before `begin_flush` began is covered by this
        // flush or by a committed one: the offset of its partition, here or
        // in a commit, is at least its own. (The commit lock orders this
        // read after the previous flush's push: that push precedes the end of
        // the previous flush, which precedes our `begin_flush`.)
        let committed = self.committed.lock().unwrap();
        for &(partition, seq) in &sealed.done_before {
            let thread = usize::from(partition / 2);
            if self.may_be_revoked(thread, partition, seq) {
                // Released, or of a life that ended: not reported.
                continue;
            }
            let seq_of = |o: Option<&u64>| o.map_or(0, |&o| o & 0xffff_ffff);
            let here = seq_of(offsets.get(&partition));
            let before = committed
                .iter()
                .map(|c| seq_of(c.get(&partition)))
                .max()
                .unwrap_or(0);
            assert!(
                here >= seq || before >= seq,
                "partition {partition} (thread {thread}): send {seq} completed before \
                 begin_flush, but the flush returned {here} and commits reached {before}"
            );
        }
        drop(committed);
        for (&partition, &offset) in offsets {
            let (thread, seq) = self.check_acked("flush", partition, offset);
            // A send that began after `begin_flush` returned is not covered.
            let started = self.started[thread].lock().unwrap()[&(partition, seq)];
            assert!(
                started < sealed.clock_after,
                "flush returned {partition}:{seq} of thread {thread}, sent after it was sealed"
            );
        }
    }

    /// Checks that `offset`, returned for `partition` by `what`, names a
    /// record of a thread that may send there, and that neither it nor an
    /// earlier record of its sender on that partition is unacked. Returns
    /// the sender and seq.
    fn check_acked(&self, what: &str, partition: u8, offset: u64) -> (usize, u64) {
        let (thread, seq) = decode(offset);
        assert!(
            thread < self.unacked.len(),
            "{what}: offset {offset:#x} from nowhere"
        );
        assert!(
            partition == SHARED || usize::from(partition / 2) == thread,
            "{what}: partition {partition} got thread {thread}'s offset"
        );
        let unacked = self.unacked[thread].lock().unwrap();
        let early: Vec<u64> = (unacked.range((partition, 0)..=(partition, seq)))
            .map(|&(_, early)| early)
            .collect();
        drop(unacked);
        for early in early {
            // An earlier record of an ended life does not hold back a later
            // life's; the record itself must have been acked.
            assert!(
                early != seq && self.two_lives(thread, partition, early, seq),
                "{what} returned {partition}:{seq} of thread {thread} while \
                 {partition}:{early} is not acked"
            );
        }
        self.reported.lock().unwrap().push((partition, offset));
        (thread, seq)
    }

    /// Checks what one `committable` call returned. `last` is the caller's
    /// newest watermark per partition and sender: they only move forward.
    fn check_marks(&self, offsets: &Offsets, last: &mut HashMap<(u8, usize), u64>) {
        if !self.watermarks {
            assert!(offsets.is_empty(), "committable without watermarks");
            return;
        }
        for (&partition, &offset) in offsets {
            let (thread, seq) = self.check_acked("committable", partition, offset);
            if let Some(before) = last.insert((partition, thread), seq) {
                assert!(
                    before < seq,
                    "partition {partition}: watermark {seq} of thread {thread} after {before}"
                );
            }
        }
        self.marks
            .lock()
            .unwrap()
            .extend(offsets.iter().map(|(&p, &o)| (p, o)));
    }

    /// Checks the statistics of a `committable_with_stats` call, then
    /// counts its records.
    fn check_stats(&self, now: &Committable<u8, u64>) {
        if !self.watermarks {
            assert!(now.offsets.is_empty() && now.stopped.is_empty());
            assert_eq!((now.committable_records, now.uncommittable_records), (0, 0));
            assert_eq!((now.partitions_in_flight, now.largest_backlog), (0, None));
            return;
        }
        assert!(
            now.committable_records >= now.offsets.len() as u64,
            "{now:?}: an advance covers an acked record"
        );
        let busy = now.uncommittable_records > 0;
        assert_eq!(now.partitions_in_flight > 0, busy, "{now:?}");
        assert!(now.partitions_in_flight <= 2 * self.unacked.len() + 1);
        match now.largest_backlog {
            None => assert!(!busy, "{now:?}: no largest backlog"),
            Some((_, most)) => assert!(
                most > 0
                    && most <= now.uncommittable_records
                    && most * now.partitions_in_flight as u64 >= now.uncommittable_records,
                "{now:?}: largest backlog"
            ),
        }
        let failing = self.failing.lock().unwrap();
        let stopped: BTreeSet<u8> = now.stopped.iter().copied().collect();
        assert_eq!(stopped.len(), now.stopped.len(), "{now:?}: stopped twice");
        assert!(
            stopped.is_subset(&failing),
            "{now:?}: stopped, but no fail began on {failing:?}"
        );
        drop(failing);
        (self.committable_records).fetch_add(now.committable_records, Ordering::SeqCst);
    }

    fn run(&self, thread: usize, ops: &[ThreadOp]) -> Outcome {
        let tracker = self.tracker;
        let mut flush: Option<Flush<'_, u8, u64>> = None;
        let mut sealed = Sealed {
            done_before: Vec::new(),
            clock_after: 0,
        };
        let mut ready: Option<Offsets> = None;
        // Raw tickets of records resolved, and whether a revoke may have
        // released the record (its answer was not `Ok`).
        let mut stale: Vec<(u64, bool)> = Vec::new();
        let mut last_mark = HashMap::new();
        let mut out = Outcome {
            tickets: Vec::new(),
            raws: Vec::new(),
            records: Vec::new(),
            sent: 0,
            resolved: 0,
            failed: 0,
            last: HashMap::new(),
        };
        let mut seq = 0_u64;
        let unacked = &self.unacked[thread];
        for op in ops {
            match *op {
                ThreadOp::Send { shared, second } => {
                    let partition = if shared {
                        SHARED
                    } else {
                        (2 * thread + usize::from(second)) as u8
                    };
                    seq += 1;
                    let ended_before =
                        self.revokes_ended[usize::from(partition)].load(Ordering::SeqCst);
                    (self.spans[thread].lock().unwrap())
                        .insert((partition, seq), (ended_before, u64::MAX));
                    unacked.lock().unwrap().insert((partition, seq));
                    let start = self.clock.fetch_add(1, Ordering::SeqCst);
                    self.started[thread]
                        .lock()
                        .unwrap()
                        .insert((partition, seq), start);
                    match tracker.send(partition, encode(thread, seq)) {
                        Ok(ticket) => {
                            let begun_after = self.begun(partition);
                            let mut spans = self.spans[thread].lock().unwrap();
                            spans.get_mut(&(partition, seq)).expect("span").1 = begun_after;
                            drop(spans);
                            if !shared {
                                self.done[thread][usize::from(second)].store(seq, Ordering::SeqCst);
                            }
                            out.tickets.push((ticket, out.records.len()));
                            out.records.push((partition, seq, State::Live));
                            out.sent += 1;
                            out.last.insert(partition, seq);
                        }
                        Err(error) => {
                            let full = matches!(error, SendError::Full(..));
                            assert_eq!(error.into_inner(), (partition, encode(thread, seq)));
                            if full {
                                assert!(self.capacity.is_some(), "Full without a capacity");
                            } else {
                                assert!(self.closing.load(Ordering::SeqCst), "Closed, not closed");
                            }
                            unacked.lock().unwrap().remove(&(partition, seq));
                        }
                    }
                }
                ThreadOp::Ack(i) | ThreadOp::Fail(i) => {
                    if out.tickets.is_empty() {
                        continue;
                    }
                    let (ticket, id) = out.tickets.swap_remove(i as usize % out.tickets.len());
                    let raw = peek_raw(&ticket);
                    let fail = matches!(op, ThreadOp::Fail(_));
                    self.resolving(unacked, &mut out, id, fail);
                    let result = if fail {
                        tracker.fail(ticket)
                    } else {
                        tracker.ack(ticket)
                    };
                    let ok = self.resolved(thread, &mut out, id, fail, result);
                    stale.push((raw, !ok));
                }
                ThreadOp::IntoRaw(i) => {
                    if !out.tickets.is_empty() {
                        let (ticket, id) = out.tickets.swap_remove(i as usize % out.tickets.len());
                        out.raws.push((ticket.into_raw(), id));
                    }
                }
                ThreadOp::AckRaw(i, fail) => {
                    if out.raws.is_empty() {
                        continue;
                    }
                    let (raw, id) = out.raws.swap_remove(i as usize % out.raws.len());
                    self.resolving(unacked, &mut out, id, fail);
                    let result = if fail {
                        tracker.fail_raw(raw)
                    } else {
                        tracker.ack_raw(raw)
                    };
                    let ok = self.resolved(thread, &mut out, id, fail, result);
                    stale.push((raw, !ok));
                }
                ThreadOp::Stale(i, fail) => {
                    if let Some(&(raw, released)) = stale.get(i as usize % stale.len().max(1)) {
                        let result = if fail {
                            tracker.fail_raw(raw)
                        } else {
                            tracker.ack_raw(raw)
                        };
                        if released {
                            assert!(
                                matches!(
                                    result,
                                    Err(ResolveError::Revoked | ResolveError::AlreadyResolved)
                                ),
                                "stale raw of a released record: {result:?}"
                            );
                        } else {
                            assert_eq!(result, Err(ResolveError::AlreadyResolved));
                        }
                    }
                }
                ThreadOp::Begin => {
                    let done_before = (self.done.iter().enumerate())
                        .flat_map(|(t, done)| {
                            (0..2).map(move |i| ((2 * t + i) as u8, done[i].load(Ordering::SeqCst)))
                        })
                        .filter(|&(_, seq)| seq > 0)
                        .collect();
                    match tracker.begin_flush() {
                        Ok(new) => {
                            sealed = Sealed {
                                done_before,
                                clock_after: self.clock.load(Ordering::SeqCst),
                            };
                            assert!(flush.is_none(), "begin_flush while this thread holds one");
                            assert!(!self.holder.swap(true, Ordering::SeqCst), "two flushes");
                            flush = Some(new);
                            ready = None;
                        }
                        Err(BeginFlushError::InProgress) => {}
                        Err(other) => panic!("begin_flush: unexpected {other:?}"),
                    }
                }
                ThreadOp::Wait(park) => {
                    let Some(flush) = &mut flush else { continue };
                    match flush.wait(short(park)) {
                        Ok(offsets) => {
                            self.check_ok(&offsets, &sealed);
                            if let Some(before) = &ready {
                                // The same offsets, less those of lives a
                                // revoke ended meanwhile.
                                for (partition, offset) in before {
                                    if offsets.get(partition) != Some(offset) {
                                        assert!(
                                            !offsets.contains_key(partition)
                                                && self.begun(*partition) > 0,
                                            "a second Ok wait differs: {before:?}, {offsets:?}"
                                        );
                                    }
                                }
                                assert!(
                                    offsets.keys().all(|p| before.contains_key(p)),
                                    "a second Ok wait differs: {before:?}, {offsets:?}"
                                );
                            }
                            ready = Some(offsets);
                        }
                        Err(FlushError::Failed { failed }) => {
                            assert!(failed > 0 && failed <= self.fails.load(Ordering::SeqCst));
                            assert!(ready.is_none(), "Failed after Ok");
                        }
                        Err(FlushError::Timeout { pending }) => {
                            assert!(pending > 0);
                            assert!(ready.is_none(), "Timeout after Ok");
                        }
                        Err(FlushError::Interrupted) => ready = None,
                        Err(other) => panic!("wait returned {other:?}"),
                    }
                }
                ThreadOp::Commit => {
                    if let Some(flush) = flush.take() {
                        let mut committed = self.committed.lock().unwrap();
                        self.holder.store(false, Ordering::SeqCst);
                        let result = flush.commit();
                        match ready.take() {
                            Some(offsets) => {
                                assert_eq!(result, Ok(()));
                                committed.push(offsets);
                            }
                            None => assert_eq!(result, Err(FlushError::NotReady)),
                        }
                    }
                }
                ThreadOp::Abort => {
                    if let Some(flush) = flush.take() {
                        self.holder.store(false, Ordering::SeqCst);
                        flush.abort();
                    }
                }
                ThreadOp::Interrupt => tracker.interrupt(),
                ThreadOp::Close => {
                    self.closing.store(true, Ordering::SeqCst);
                    tracker.close();
                }
                ThreadOp::InFlight => {
                    // This thread's unresolved records are in flight
                    // throughout the call (unless a revoke released them).
                    let in_flight = tracker.in_flight();
                    let mine = self.mine(thread, &out);
                    assert!(in_flight >= mine, "in_flight {in_flight}, {mine} of mine");
                }
                ThreadOp::Committable(stats) => {
                    let offsets = if stats {
                        let now = tracker.committable_with_stats();
                        self.check_stats(&now);
                        now.offsets
                    } else {
                        self.plain_calls.fetch_add(1, Ordering::SeqCst);
                        tracker.committable()
                    };
                    self.check_marks(&offsets, &mut last_mark);
                }
                ThreadOp::Drain(park) => {
                    // This thread's unresolved records were sent before the
                    // call and stay unresolved throughout it.
                    let drained = tracker.drain(short(park));
                    let mine = self.mine(thread, &out);
                    match drained {
                        Ok(()) => assert_eq!(mine, 0, "drain Ok, {mine} of mine unresolved"),
                        Err(DrainError::Timeout { pending }) => {
                            assert!(
                                pending > 0 && pending >= mine,
                                "pending {pending}, mine {mine}"
                            );
                        }
                        Err(DrainError::Interrupted) => {}
                        Err(error) => panic!("drain returned {error:?}"),
                    }
                }
                ThreadOp::Revoke(i) => {
                    let own = 2 * self.unacked.len();
                    let partition = match usize::from(i) % (own + 1) {
                        pick if pick == own => SHARED,
                        pick => pick as u8,
                    };
                    self.revoke(partition);
                }
            }
        }
        if let Some(flush) = flush.take() {
            self.holder.store(false, Ordering::SeqCst);
            drop(flush);
        }
        out
    }

    /// Revokes `partition` and checks what it returned.
    fn revoke(&self, partition: u8) -> usize {
        self.revokes_begun[usize::from(partition)].fetch_add(1, Ordering::SeqCst);
        let revoked = self.tracker.revoke(&partition);
        self.revokes_ended[usize::from(partition)].fetch_add(1, Ordering::SeqCst);
        self.released.fetch_add(revoked.released, Ordering::SeqCst);
        if let Some(offset) = revoked.committable {
            assert!(self.watermarks, "Revoked::committable without watermarks");
            self.check_acked("revoke", partition, offset);
            self.marks.lock().unwrap().push((partition, offset));
        }
        revoked.released
    }

    /// This thread's unresolved records that no revoke may have released.
    fn mine(&self, thread: usize, out: &Outcome) -> usize {
        (out.tickets.iter().map(|&(_, id)| id))
            .chain(out.raws.iter().map(|&(_, id)| id))
            .filter(|&id| {
                let (partition, seq, _) = out.records[id];
                !self.may_be_revoked(thread, partition, seq)
            })
            .count()
    }

    /// Bookkeeping once resolving record `id` of `out` (see
    /// [`resolving`](Self::resolving)) returned `result`: `Ok`, or
    /// `Revoked` or `AlreadyResolved` if a revoke may have released it
    /// (then it is `Released`, and not acked). Returns whether it was `Ok`.
    fn resolved(
        &self,
        thread: usize,
        out: &mut Outcome,
        id: usize,
        fail: bool,
        result: Result<(), ResolveError>,
    ) -> bool {
        let (partition, seq, _) = out.records[id];
        match result {
            Ok(()) => {
                if !fail {
                    self.acked_ok.lock().unwrap().insert(encode(thread, seq));
                }
                true
            }
            Err(ResolveError::Revoked | ResolveError::AlreadyResolved)
                if self.may_be_revoked(thread, partition, seq) =>
            {
                out.records[id].2 = State::Released;
                out.resolved -= 1;
                if fail {
                    out.failed -= 1;
                } else {
                    // Not acked after all: it holds back what follows it in
                    // its life.
                    self.unacked[thread]
                        .lock()
                        .unwrap()
                        .insert((partition, seq));
                }
                false
            }
            Err(error) => panic!("{partition}:{seq} of thread {thread}: {error:?}"),
        }
    }

    /// Bookkeeping before record `id` of `out` is acked or failed.
    fn resolving(
        &self,
        unacked: &Mutex<BTreeSet<(u8, u64)>>,
        out: &mut Outcome,
        id: usize,
        fail: bool,
    ) {
        let (partition, seq, state) = &mut out.records[id];
        if fail {
            self.fails.fetch_add(1, Ordering::SeqCst);
            self.failing.lock().unwrap().insert(*partition);
            out.failed += 1;
            *state = State::Failed;
        } else {
            unacked.lock().unwrap().remove(&(*partition, *seq));
            *state = State::Acked;
        }
        out.resolved += 1;
    }
}

/// A zero timeout, or a short park.
fn short(park: bool) -> Duration {
    if park {
        Duration::from_micros(200)
    } else {
        Duration::ZERO
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
        revoking: (per_thread.iter().flatten()).any(|op| matches!(op, ThreadOp::Revoke(_))),
        revokes_begun: (0..256).map(|_| AtomicU64::new(0)).collect(),
        revokes_ended: (0..256).map(|_| AtomicU64::new(0)).collect(),
        spans: per_thread.iter().map(|_| Mutex::default()).collect(),
        released: AtomicUsize::new(0),
        reported: Mutex::default(),
        acked_ok: Mutex::default(),
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
    let revoking = shared.revoking;
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
        let mut result = flush.wait(Duration::ZERO);
        if result == Err(FlushError::Interrupted) {
            flush.abort();
            flush = tracker.begin_flush().expect("no flush is alive any more");
            result = flush.wait(Duration::ZERO);
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

/// Without revokes: the final flush covers everything not committed. It
/// returns `Failed { failed: all fails }`, or else, for each partition, its
/// last offset exactly when no committed flush returned it.
fn final_flush(
    tracker: &Tracker<u8, u64>,
    committed: Vec<Offsets>,
    last: &[HashMap<u8, u64>],
    failed: usize,
) {
    let mut flush = tracker.begin_flush().expect("no flush is alive any more");
    let mut result = flush.wait(Duration::ZERO);
    if result == Err(FlushError::Interrupted) {
        // A leftover interrupt; it is delivered once.
        flush.abort();
        flush = tracker.begin_flush().expect("no flush is alive any more");
        result = flush.wait(Duration::ZERO);
    }
    if failed > 0 {
        assert_eq!(result, Err(FlushError::Failed { failed }));
        return;
    }
    let offsets = result.expect("every record acked");
    assert_eq!(flush.commit(), Ok(()));

    // Commits of one sender's records on one partition move forward.
    let mut seen: HashMap<(u8, u64), u64> = HashMap::new();
    for offsets in &committed {
        for (&partition, &offset) in offsets {
            let (thread, seq) = (offset >> 32, offset & 0xffff_ffff);
            if let Some(before) = seen.insert((partition, thread), seq) {
                assert!(
                    before < seq,
                    "partition {partition}: committed {seq} after {before}"
                );
            }
        }
    }
    // Each partition's last record is returned by exactly one flush: the
    // final one, or a committed one.
    for (thread, last) in last.iter().enumerate() {
        for partition in [2 * thread as u8, 2 * thread as u8 + 1] {
            let Some(&seq) = last.get(&partition) else {
                assert!(!offsets.contains_key(&partition));
                assert!(committed.iter().all(|c| !c.contains_key(&partition)));
                continue;
            };
            let want = encode(thread, seq);
            if let Some(&got) = offsets.get(&partition) {
                assert_eq!(got, want, "partition {partition}: final flush");
            }
            let in_final = offsets.get(&partition) == Some(&want);
            let in_committed = committed.iter().any(|c| c.get(&partition) == Some(&want));
            assert!(
                in_final != in_committed,
                "partition {partition}: last offset {seq} in final {in_final}, committed {in_committed}"
            );
        }
    }
    if let Some(&offset) = offsets.get(&SHARED) {
        let thread = (offset >> 32) as usize;
        assert_eq!(
            last[thread].get(&SHARED).map(|&seq| encode(thread, seq)),
            Some(offset),
            "shared partition: final offset is not its sender's last"
        );
    }
    let mut flush = tracker.begin_flush().expect("no flush is alive");
    assert_eq!(flush.wait(Duration::ZERO), Ok(Offsets::new()));
    assert_eq!(flush.commit(), Ok(()));
}

/// With every record resolved and every thread joined: the watermarks have
/// passed everything, and all `committable` calls together returned each
/// partition's acked prefix. Of a partition ever revoked, only that no
/// advance was returned twice (by `committable` calls and revokes), and that
/// it is stopped only if a fail began there.
fn check_watermarks_at_rest(shared: &Shared<'_>, outcomes: &[Outcome]) {
    let tracker = shared.tracker;
    let now = tracker.committable_with_stats();
    shared.check_stats(&now);
    shared.check_marks(&now.offsets, &mut HashMap::new());
    if !shared.watermarks {
        return;
    }
    assert_eq!(now.uncommittable_records, 0, "{now:?}");
    assert_eq!(now.largest_backlog, None);
    let revoked = |partition: u8| shared.begun(partition) > 0;
    let mut failed_on: BTreeSet<u8> = BTreeSet::new();
    for outcome in outcomes {
        for &(partition, _, state) in &outcome.records {
            assert_ne!(state, State::Live);
            if state == State::Failed {
                failed_on.insert(partition);
            }
        }
    }
    let stopped: BTreeSet<u8> = now.stopped.iter().copied().collect();
    assert!(
        stopped.is_subset(&failed_on),
        "stopped {stopped:?}, failed on {failed_on:?}"
    );
    let never_revoked = |set: &BTreeSet<u8>| -> BTreeSet<u8> {
        set.iter().copied().filter(|&p| !revoked(p)).collect()
    };
    assert_eq!(
        never_revoked(&stopped),
        never_revoked(&failed_on),
        "stopped partitions at rest"
    );

    let marks = shared.marks.lock().unwrap();
    let distinct: BTreeSet<(u8, u64)> = marks.iter().copied().collect();
    assert_eq!(distinct.len(), marks.len(), "an advance returned twice");
    // Per partition and sender: the newest seq any call returned.
    let mut newest: HashMap<(u8, usize), u64> = HashMap::new();
    for &(partition, offset) in marks.iter() {
        let (thread, seq) = decode(offset);
        let entry = newest.entry((partition, thread)).or_default();
        *entry = seq.max(*entry);
    }
    // Own partitions: the newest watermark is the acked prefix's last
    // record, and the records returned are the acked prefix's.
    let mut acked_prefixes = 0;
    for (thread, outcome) in outcomes.iter().enumerate() {
        for partition in [2 * thread as u8, 2 * thread as u8 + 1] {
            if revoked(partition) {
                continue;
            }
            let (_, acked, last) = queue_numbers(outcome.of(partition));
            assert_eq!(
                newest.get(&(partition, thread)).copied(),
                last,
                "partition {partition}: newest watermark"
            );
            acked_prefixes += acked as u64;
        }
    }
    // The shared partition, whose send order across threads is unknown:
    // without failures, its newest watermark is the last record sent there,
    // the last of its sender's.
    let shared_sent: u64 = outcomes.iter().map(|o| o.of(SHARED).count() as u64).sum();
    let shared_acked: u64 = (outcomes.iter())
        .map(|o| o.of(SHARED).filter(|r| r.1 == State::Acked).count() as u64)
        .sum();
    if !failed_on.contains(&SHARED) && shared_sent > 0 && !revoked(SHARED) {
        assert!(
            (outcomes.iter().enumerate()).any(|(thread, outcome)| {
                let last = outcome.of(SHARED).last().map(|r| r.0);
                last.is_some() && newest.get(&(SHARED, thread)).copied() == last
            }),
            "shared partition: no sender's last record is a watermark"
        );
    }
    if shared.plain_calls.load(Ordering::SeqCst) == 0 && !shared.revoking {
        let records = shared.committable_records.load(Ordering::SeqCst);
        if failed_on.contains(&SHARED) {
            assert!(
                (acked_prefixes..=acked_prefixes + shared_acked).contains(&records),
                "committable_records {records}, own prefixes {acked_prefixes}, \
                 shared acked {shared_acked}"
            );
        } else {
            assert_eq!(records, acked_prefixes + shared_sent, "committable_records");
        }
    }
    drop(marks);
    let after = tracker.committable_with_stats();
    assert!(after.offsets.is_empty() && after.committable_records == 0);
}
