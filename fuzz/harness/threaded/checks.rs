//! The invariants of the `threaded` target: those checked while the
//! threads run (what a flush, `committable` or a revoke returned, and the
//! statistics), and those checked at rest (the final flush, the
//! watermarks once every record is resolved).

use super::super::AnyTracker;
use super::super::{Offsets, State};
use super::{decode, encode, plain, Key, Outcome, Sealed, Shared, Stamp, SHARED};
use inflight::{Committable, FlushError};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Of records in send order: how many follow the first unresolved one (and
/// it), and the acked prefix (its length and last seq).
pub(super) fn queue_numbers(
    records: impl Iterator<Item = (u64, State)>,
) -> (usize, usize, Option<u64>) {
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
    pub(super) fn begun(&self, partition: u8) -> u64 {
        self.revokes_begun[usize::from(partition)].load(Ordering::SeqCst)
    }

    /// Whether a revoke of `partition` that had not ended when the send of
    /// `(partition, seq)` by `thread` began has begun by now: it may have
    /// released that record, or ended its life.
    pub(super) fn may_be_revoked(&self, thread: usize, partition: u8, seq: u64) -> bool {
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
    pub(super) fn two_lives(&self, thread: usize, partition: u8, early: u64, late: u64) -> bool {
        if !self.revoking {
            return false;
        }
        let spans = self.spans[thread].lock().unwrap();
        let (ended_before, _) = spans[&(partition, early)];
        let (_, begun_after) = spans[&(partition, late)];
        begun_after > ended_before
    }

    /// Checks the offsets of an `Ok` wait of the flush noted in `sealed`.
    pub(super) fn check_ok(&self, offsets: &Offsets, sealed: &Sealed) {
        // A send that completed before `begin_flush` began is covered by this
        // flush or by a committed one: the offset of its partition, here or
        // in a commit, is at least its own. (The commit lock orders this
        // read after the previous flush's push: that push precedes the end of
        // the previous flush, which precedes our `begin_flush`.)
        let committed = self.committed.lock().unwrap();
        let commit_sealed = self.commit_sealed.load(Ordering::SeqCst);
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
        self.check_reached(offsets, sealed, commit_sealed);
    }

    /// An `Ok` wait reports every partition `p` that has a send `S` it must
    /// reach, and with an offset of `S`'s life. `S` is one that returned
    /// `Ok` before `begin_flush` began (so the flush covers it, unless a
    /// committed flush did), that began after the last committed flush was
    /// sealed (`commit_sealed`: no committed flush covered it), and such
    /// that every revoke of `p` begun by now (after the wait returned) had
    /// ended before `S` began: no revoke released `S` or ended its life,
    /// and the wait being `Ok`, `S` was acked (a failure of a covered
    /// record of a current life makes it `Failed`). The offset reported for
    /// `p` must not be of a record whose send returned before a revoke of
    /// `p` began that ended before `S` began (an ended life). A send of the
    /// ended life that raced a revoke and installed its record after `S`'s
    /// (issue 25) must not erase `S`'s offset.
    fn check_reached(&self, offsets: &Offsets, sealed: &Sealed, commit_sealed: u64) {
        let completed = self.completed.lock().unwrap();
        let mut checked: BTreeSet<u8> = BTreeSet::new();
        for done in completed[..sealed.completed].iter().rev() {
            let partition = done.partition;
            if checked.contains(&partition) {
                continue;
            }
            let life = self.begun(partition);
            if done.ended_before != life || done.start < commit_sealed {
                continue;
            }
            checked.insert(partition);
            let Some(&offset) = offsets.get(&partition) else {
                panic!(
                    "partition {partition}: the flush returned nothing, but {}:{} of thread {} \
                     (after {life} revokes of it, none since) completed before begin_flush \
                     and no committed flush covered it: {offsets:?}",
                    partition, done.seq, done.thread
                );
            };
            let (thread, seq) = decode(offset);
            let spans = self.spans[thread].lock().unwrap();
            let begun_after = spans.get(&(partition, seq)).map_or(u64::MAX, |s| s.1);
            drop(spans);
            assert!(
                begun_after >= life,
                "partition {partition}: the flush returned {seq} of thread {thread}, of a \
                 life that ended ({begun_after} revokes begun when it was sent, {life} ended \
                 before {}:{} of thread {} was sent)",
                partition,
                done.seq,
                done.thread
            );
        }
    }

    /// Checks that `offset`, returned for `partition` by `what`, names a
    /// record of a thread that may send there, and that neither it nor an
    /// earlier record of its sender on that partition is unacked. Returns
    /// the sender and seq.
    pub(super) fn check_acked(&self, what: &str, partition: u8, offset: u64) -> (usize, u64) {
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
    pub(super) fn check_marks(&self, offsets: &Offsets, last: &mut HashMap<(u8, usize), u64>) {
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
    /// counts its records. `alone`: no other call could take a watermark
    /// meanwhile.
    pub(super) fn check_stats(&self, now: &Committable<Key, Stamp>, alone: bool) {
        if !self.watermarks {
            assert!(now.offsets.is_empty() && now.stopped.is_empty());
            assert_eq!((now.committable_records, now.uncommittable_records), (0, 0));
            assert_eq!((now.partitions_in_flight, &now.largest_backlog), (0, &None));
            return;
        }
        // Each advance covers an acked record, but its count is reported
        // by whoever takes a watermark of the partition first: a call that
        // took an older one may find its count already reported with a
        // newer one, by another `committable` call or by a revoke (which
        // reports the mark it hands over). So only for a lone taker.
        assert!(
            !alone || now.committable_records >= now.offsets.len() as u64,
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
        let stopped: BTreeSet<u8> = now.stopped.iter().map(|p| p.0).collect();
        assert_eq!(stopped.len(), now.stopped.len(), "{now:?}: stopped twice");
        assert!(
            stopped.is_subset(&failing),
            "{now:?}: stopped, but no fail began on {failing:?}"
        );
        drop(failing);
        (self.committable_records).fetch_add(now.committable_records, Ordering::SeqCst);
    }
}

/// Without revokes: the final flush covers everything not committed. It
/// returns `Failed { failed: all fails }`, or else, for each partition, its
/// last offset exactly when no committed flush returned it.
pub(super) fn final_flush(
    tracker: &AnyTracker<Key, Stamp>,
    committed: Vec<Offsets>,
    last: &[HashMap<u8, u64>],
    failed: usize,
) {
    let mut flush = tracker.begin_flush().expect("no flush is alive any more");
    let mut result = flush.wait(Duration::ZERO).map(plain);
    if result == Err(FlushError::Interrupted) {
        // A leftover interrupt; it is delivered once.
        flush.abort();
        flush = tracker.begin_flush().expect("no flush is alive any more");
        result = flush.wait(Duration::ZERO).map(plain);
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
    assert_eq!(flush.wait(Duration::ZERO).map(plain), Ok(Offsets::new()));
    assert_eq!(flush.commit(), Ok(()));
}

/// At rest, on a watermark tracker: a revoked partition whose last life has
/// a record that surely belongs to it (its send began after every revoke
/// of the partition had ended), with no failed record that may belong to it
/// (one whose send returned after the last revoke began), has a watermark
/// of that life among `marks` (every `committable` call's, the one at rest
/// included): a record whose send returned after the last revoke began.
/// Its records are all acked, and a stale send of the ended life that
/// raced a revoke (issue 25) must not hold the watermark back or take its
/// place.
fn check_last_lives(shared: &Shared<'_>, outcomes: &[Outcome], marks: &[(u8, u64)]) {
    let partitions = (0..2 * outcomes.len() as u8).chain([SHARED]);
    for partition in partitions {
        let life = shared.begun(partition);
        if life == 0 {
            continue;
        }
        let (mut surely, mut failed) = (None, false);
        for (thread, outcome) in outcomes.iter().enumerate() {
            let spans = shared.spans[thread].lock().unwrap();
            for (seq, state) in outcome.of(partition) {
                let (ended_before, begun_after) = spans[&(partition, seq)];
                if ended_before == life {
                    surely = Some((thread, seq));
                }
                failed |= begun_after >= life && state == State::Failed;
            }
        }
        let (Some((thread, seq)), false) = (surely, failed) else {
            continue;
        };
        let of_last_life = |&&(p, offset): &&(u8, u64)| {
            let (sender, sent) = decode(offset);
            let spans = shared.spans[sender].lock().unwrap();
            p == partition && spans.get(&(p, sent)).map_or(u64::MAX, |s| s.1) >= life
        };
        assert!(
            marks.iter().any(|mark| of_last_life(&mark)),
            "partition {partition}: no watermark of its last life (after {life} revokes), \
             though {partition}:{seq} of thread {thread} is of it and all of it is acked: \
             {marks:?}"
        );
    }
}

/// With every record resolved and every thread joined: the watermarks have
/// passed everything, and all `committable` calls together returned each
/// partition's acked prefix. Of a partition ever revoked, only that no
/// advance was returned twice (by `committable` calls and revokes), and that
/// it is stopped only if a fail began there.
pub(super) fn check_watermarks_at_rest(shared: &Shared<'_>, outcomes: &[Outcome]) {
    let tracker = shared.tracker;
    let now = tracker.committable_with_stats();
    shared.check_stats(&now, true);
    let offsets = plain(now.offsets.clone());
    shared.check_marks(&offsets, &mut HashMap::new());
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
    let stopped: BTreeSet<u8> = now.stopped.iter().map(|p| p.0).collect();
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
    check_last_lives(shared, outcomes, &marks);
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
