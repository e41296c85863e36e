//! One thread of the `threaded` target: `Shared::run` runs its list of
//! [`ThreadOp`]s (a [`ThreadOp::Renew`] as the steps it stands for),
//! checks each result as it comes (with the invariants of `checks.rs`), and
//! keeps the bookkeeping the end state needs ([`Outcome`]).

use super::super::AnyFlush;
use super::super::{peek_raw, Offsets, State};
use super::{
    encode, plain, Done, Key, Outcome, Sealed, Shared, Slow, Stamp, ThreadOp, SHARED, SLOW,
};
use inflight::{BeginFlushError, DrainError, FlushError, ResolveError, SendError};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

/// One step of a thread: an operation, or the ack of the newest live
/// ticket (a step of [`ThreadOp::Renew`]).
enum Step {
    Op(ThreadOp),
    AckNewest,
}

impl Shared<'_> {
    /// The steps `ops` stand for: each is one, but a [`ThreadOp::Renew`]
    /// (a revoke of the shared partition, a send there, maybe its ack, a
    /// flush and a wait).
    fn steps(&self, ops: &[ThreadOp]) -> Vec<Step> {
        // The index `ThreadOp::Revoke` picks the shared partition by.
        let shared = (2 * self.unacked.len()) as u8;
        let mut steps = Vec::with_capacity(ops.len());
        for op in ops {
            match *op {
                ThreadOp::Renew { ack, flush } => {
                    steps.push(Step::Op(ThreadOp::Revoke(shared)));
                    steps.push(Step::Op(ThreadOp::Send {
                        shared: true,
                        second: false,
                    }));
                    if ack {
                        steps.push(Step::AckNewest);
                        if flush {
                            steps.push(Step::Op(ThreadOp::Begin));
                            steps.push(Step::Op(ThreadOp::Wait(true)));
                        }
                    }
                }
                ref other => steps.push(Step::Op(other.clone())),
            }
        }
        steps
    }

    /// Runs `ops` as thread `thread`, checking each result as it comes;
    /// returns what the thread leaves behind.
    pub(super) fn run(&self, thread: usize, ops: &[ThreadOp]) -> Outcome {
        let tracker = self.tracker;
        let mut flush: Option<AnyFlush<'_, Key, Stamp>> = None;
        let mut sealed = Sealed {
            done_before: Vec::new(),
            clock_after: 0,
            completed: 0,
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
        // On a watermark tracker, the seq each partition owes for this
        // thread (refused `Full`): its next send there sends it again, as a
        // source retries a refused record (see "Owed offsets").
        let mut owed: HashMap<u8, u64> = HashMap::new();
        let unacked = &self.unacked[thread];
        for step in self.steps(ops) {
            let op = match step {
                Step::Op(op) => op,
                Step::AckNewest => {
                    if let Some(newest) = out.tickets.len().checked_sub(1) {
                        self.resolve_ticket(thread, &mut out, &mut stale, newest, false);
                    }
                    continue;
                }
            };
            match op {
                ThreadOp::Send { shared, second } | ThreadOp::SlowSend { shared, second, .. } => {
                    let partition = if shared {
                        SHARED
                    } else {
                        (2 * thread + usize::from(second)) as u8
                    };
                    let seq = owed.remove(&partition).unwrap_or_else(|| {
                        seq += 1;
                        seq
                    });
                    let slow = match op {
                        ThreadOp::SlowSend { entered: true, .. } => Slow::Partition,
                        ThreadOp::SlowSend { entered: false, .. } => Slow::Offset,
                        _ => Slow::No,
                    };
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
                    SLOW.with(|s| s.set(slow));
                    let sent = tracker.send(Key(partition), Stamp(encode(thread, seq)));
                    SLOW.with(|s| s.set(Slow::No));
                    match sent {
                        Ok(ticket) => {
                            let begun_after = self.begun(partition);
                            let mut spans = self.spans[thread].lock().unwrap();
                            spans.get_mut(&(partition, seq)).expect("span").1 = begun_after;
                            drop(spans);
                            self.completed.lock().unwrap().push(Done {
                                partition,
                                thread,
                                seq,
                                start,
                                ended_before,
                            });
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
                            let out_of_order = matches!(error, SendError::OutOfOrder(..));
                            assert_eq!(
                                error.into_inner(),
                                (Key(partition), Stamp(encode(thread, seq)))
                            );
                            if full {
                                assert!(self.capacity.is_some(), "Full without a capacity");
                                if self.watermarks {
                                    owed.insert(partition, seq);
                                }
                            } else if out_of_order {
                                // Only a partition that owes another
                                // offset (refused `Full` before) refuses
                                // for order here.
                                assert!(
                                    self.watermarks && self.capacity.is_some(),
                                    "OutOfOrder without a debt"
                                );
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
                    let index = i as usize % out.tickets.len();
                    let fail = matches!(op, ThreadOp::Fail(_));
                    self.resolve_ticket(thread, &mut out, &mut stale, index, fail);
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
                    let completed = self.completed.lock().unwrap().len();
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
                                completed,
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
                    match flush.wait(short(park)).map(plain) {
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
                                (self.commit_sealed).store(sealed.clock_after, Ordering::SeqCst);
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
                    // A moment's estimate while other threads run: not a
                    // bound on this thread's unresolved records, since the
                    // count words it adds up are read one by one (another
                    // thread's ack may be read on one word without its
                    // send on another, or a capture between its word and
                    // the generation's pending count). Exact when quiet,
                    // which the single-threaded model checks; here it must
                    // only return.
                    let _ = tracker.in_flight();
                }
                ThreadOp::Committable(stats) => {
                    let offsets = if stats {
                        let now = tracker.committable_with_stats();
                        self.check_stats(&now, self.lone_taker);
                        plain(now.offsets)
                    } else {
                        self.plain_calls.fetch_add(1, Ordering::SeqCst);
                        plain(tracker.committable())
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
                ThreadOp::Renew { .. } => unreachable!("expanded by `steps`"),
            }
        }
        if let Some(flush) = flush.take() {
            self.holder.store(false, Ordering::SeqCst);
            drop(flush);
        }
        out
    }

    /// Revokes `partition` and checks what it returned.
    pub(super) fn revoke(&self, partition: u8) -> usize {
        self.revokes_begun[usize::from(partition)].fetch_add(1, Ordering::SeqCst);
        let revoked = self.tracker.revoke(&Key(partition));
        self.revokes_ended[usize::from(partition)].fetch_add(1, Ordering::SeqCst);
        self.released.fetch_add(revoked.released, Ordering::SeqCst);
        if let Some(Stamp(offset)) = revoked.committable {
            assert!(self.watermarks, "Revoked::committable without watermarks");
            self.check_acked("revoke", partition, offset);
            self.marks.lock().unwrap().push((partition, offset));
        }
        revoked.released
    }

    /// `ack` (or `fail`) of live ticket `index` of `out`, checked; its raw
    /// value goes to `stale`, with whether a revoke may have released it.
    fn resolve_ticket(
        &self,
        thread: usize,
        out: &mut Outcome,
        stale: &mut Vec<(u64, bool)>,
        index: usize,
        fail: bool,
    ) {
        let (ticket, id) = out.tickets.swap_remove(index);
        let raw = peek_raw(&ticket);
        self.resolving(&self.unacked[thread], out, id, fail);
        let result = if fail {
            self.tracker.fail(ticket)
        } else {
            self.tracker.ack(ticket)
        };
        let ok = self.resolved(thread, out, id, fail, result);
        stale.push((raw, !ok));
    }

    /// This thread's unresolved records that no revoke may have released.
    pub(super) fn mine(&self, thread: usize, out: &Outcome) -> usize {
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
    pub(super) fn resolved(
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
    pub(super) fn resolving(
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
