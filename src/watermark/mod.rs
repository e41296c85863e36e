//! Watermarks: per partition, the offset of the longest acked prefix, ready
//! to commit at any moment, without a barrier.
//!
//! This module owns each partition's watermark queue and its untaken mark.
//! The tracker links a record into its partition's queue when it sends it
//! and asks for an advance when it resolves it; `committable` takes marks.
//!
//! # The queue
//!
//! Each partition's records form a singly linked queue in send order,
//! threaded through the slots' `next_queued` links (an intrusive
//! multi-producer queue after Vyukov): a send swaps itself into `tail`, which
//! gives it its place, then stores itself into its predecessor's link (or the
//! partition's `first`, when the predecessor is the queue's stub). Every
//! queued record carries the `QUEUED` hold, so its slot, offset and link
//! stay put until the watermark has moved past it.
//!
//! ```text
//!            head (passed)      queued, in send order            tail
//!                │                                                 │
//!   stub ──▶ [r4 ACKED] ──▶ [r5 LIVE] ──▶ [r6 ACKED] ──▶ [r7 LIVE]◀─┘
//!            watermark = r4's offset; r6 waits behind r5
//! ```
//!
//! # Advancing
//!
//! `head` is the last record the watermark passed (the stub at first). To
//! advance is to follow `head`'s link while the next record is resolved:
//! each step passes one record, drops its predecessor's `QUEUED` hold (a
//! step late, or at the end of the pass, see `advance`), and makes an
//! acked record the new watermark. A failed record stops the
//! partition's watermark for good (`stopped`); the advance still passes
//! records after it, so they leave their generations, but never again marks
//! one. On a progress tracker it keeps the failed record and those it
//! passes after it held (`KEPT`), for the progress walk, until the life
//! ends (see `order`); elsewhere their slots are reclaimed as they pass.
//!
//! One thread at a time advances a partition. Every resolution adds one to
//! the partition's `work` word; the thread whose add found it zero advances,
//! then tries to put `work` back to zero with a CAS from the value it last
//! saw. A resolution that lands meanwhile makes that CAS fail, and the
//! advancer goes round again, so no resolution's advance is lost, and no
//! resolver ever waits: it either advances or leaves the work to the thread
//! that is advancing.
//!
//! # Marks, and what the advance does with the generation counts
//!
//! The newest watermark record not yet taken by `committable` sits in
//! `mark` with the `MARKED` hold; publishing a newer one swaps it in and
//! drops the hold on the older. `committable` swaps the mark out, so each
//! advance is taken exactly once, by one caller.
//!
//! On a tracker with watermarks a resolution does not leave its generation
//! (see `generation`): the advance does, when it passes the record, and only
//! after it has published the mark that covers it. So a record counts as in
//! flight until the watermark has passed it, and once `drain` (or a flush)
//! sees nothing in flight, `committable` returns everything.

mod advance;
mod committable;
mod link;
mod order;
pub(crate) use link::Run;
mod walk;
mod words;

use crate::mode::Mode;
use crate::pages::Pages;
use crate::slab::{status_of_state, tag, Slab, ACKED, FAILED, MARKED, QUEUED, REVOKED};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, CachePadded, Ordering, UnsafeCell};
use crate::Tracker;
use advance::advance_once;
pub use committable::Committable;
pub(crate) use order::Refusal;
use std::collections::HashMap;
use std::hash::Hash;
pub(crate) use walk::{Seen, Walk};
pub(crate) use words::MAX_CREDIT;
use words::{
    index_of, mark_index, mark_life, mark_word, node, owed_epoch, owed_word, tail_credit,
    tail_node, tail_tag, tail_word, DEBT_BITS, OWED,
};

/// One partition's queue and mark.
pub(crate) struct Queue {
    /// The last record queued, as a [`tail_word`]: its node (0, the stub,
    /// before the first), and on a progress tracker its tag and the
    /// budget credit left (see `order`).
    tail: AtomicU64,
    /// The stub's link: the partition's first record, 0 until it links.
    first: AtomicU32,
    /// Records ever queued.
    sent: AtomicU64,
    /// Advance requests; see the module docs.
    work: AtomicU64,
    /// The last record passed; 0 (the stub) before the first. Only the
    /// thread that holds `work` touches it.
    head: UnsafeCell<u32>,
    /// Whether `head` was published as a mark (so its `MARKED` hold is the
    /// mark's, not the advancer's). Only the holder of `work` touches it.
    head_marked: UnsafeCell<bool>,
    /// Records passed. Written only by the advancer.
    passed: AtomicU64,
    /// Acked records the watermark has passed, in all. Only the advancer
    /// writes it; each mark carries its value at the mark (`Slot::covered`).
    marked: AtomicU64,
    /// The largest such count `committable` has reported, modulo 2^32
    /// (counts are compared as serial numbers).
    reported: AtomicU32,
    /// On a progress tracker, `marked` (modulo 2^32) when `progress()`
    /// last walked the partition: the acked records it has handed out, for
    /// the statistics.
    progress_marked: AtomicU32,
    /// `STOPPED | life` once a failed (or revoked) record of that life was
    /// passed: the watermark never moves again in that life. 0 before.
    /// With [`KEPT`] while the advance keeps the life's records from the
    /// failed one on (progress trackers, see `kept`). Only the advancer
    /// writes it.
    stopped: AtomicU64,
    /// The newest life of the partition among the records passed. Only the
    /// advancer writes it.
    newest: AtomicU32,
    /// The newest untaken watermark record (holding `MARKED`) and its life,
    /// as a [`mark_word`], or 0.
    mark: AtomicU64,
    /// The last untaken mark of a life that a revoke ended, put aside when
    /// a mark of a newer life was published (holding `MARKED`), for that
    /// revoke to take; or 0.
    ended_mark: AtomicU64,
    /// The newest life whose revoke has taken its marks: `committable`
    /// drops marks of older lives (an advance still running when the
    /// revoke took the marks may publish one late).
    settled: AtomicU32,
    /// `drain_partition` calls waiting for this queue: the advancer wakes
    /// waiters when it finishes a pass while any are.
    watchers: AtomicU32,
    /// Progress trackers only (see `order`). The advancer's `head` as a
    /// [`tail_word`] (0 before the first pass), published at each step.
    last: AtomicU64,
    /// The position of the failed record that stopped the life `stopped`
    /// names.
    stop_seq: AtomicU64,
    /// Progress trackers only: the failed record that stopped the life
    /// `stopped` names, as a [`tail_word`] (node and tag), valid while
    /// `stopped` carries [`KEPT`]: the advance then keeps it and every
    /// record it passes after it (their `MARKED` hold, which no mark of a
    /// stopped life takes), so that the progress walk can still read what
    /// was acked beyond the failure; it lets them go, front to back, when
    /// the life ends (see `order`). Only the advancer writes it.
    kept: AtomicU64,
    /// The newest life a revoke moved the partition on to (0 before any):
    /// tells the advancer that a kept life has ended.
    ended: AtomicU32,
    /// Progress trackers only: how many records the advance keeps (see
    /// `kept`), the failed one included, at most `Watermarks::keep_max`;
    /// 0 while it keeps none. Only the advancer writes it.
    kept_len: AtomicU64,
    /// Progress trackers only: a `stopped` word (with [`KEPT`]) whose life
    /// must stop keeping: a sender's budget check found that the life's
    /// fixed blocks alone do not fit the budget (see "Keeping a failure,
    /// bounded" in `order`). The walk and the budget check treat that life
    /// as stopped at once; the advancer lets its records go at its next
    /// pass. 0 for none.
    unkept: AtomicU64,
    /// A fingerprint of the progress `Tracker::progress` last reported.
    seen: AtomicU64,
    /// Progress trackers only: the claim on the debt (see "Owed offsets"
    /// in `order`). Taken (false to true) by a sender about to record a
    /// debt, and held by the debt while `tail` carries [`OWED`]; released
    /// by whoever clears the flag by linking a record.
    owing: AtomicBool,
    /// The owed position and its life, written only by the claim's holder,
    /// before the tail CAS that sets [`OWED`].
    owed_seq: AtomicU64,
    owed_life: AtomicU32,
    /// A sender waits for this partition's metadata budget (see "Waiting
    /// for the budget" in `order`).
    budget_wanted: AtomicBool,
}

/// The flag of `Queue::stopped`.
const STOPPED: u64 = 1 << 32;

/// The flag of `Queue::stopped` that says the stopped life's records are
/// kept from its failed record on (`Queue::kept`).
const KEPT: u64 = 1 << 33;

/// Whether `stopped`, a `Queue::stopped` word, keeps its life's records
/// for the walk: it carries [`KEPT`], and no sender asked to stop keeping
/// them (`Queue::unkept`). Call after loading `stopped` with Acquire.
fn keeps(queue: &Queue, stopped: u64) -> bool {
    // Relaxed: a sender's request, which only makes us report less (the
    // failed offset alone, as after the life ends); the sender that made it
    // reads its own store.
    stopped & KEPT != 0 && queue.unkept.load(Ordering::Relaxed) != stopped
}

/// The most records the advance keeps after a failure, the failed one
/// included (see `Queue::kept`): as many positions as the bitset form of
/// a `max` character budget can encode, at most [`KEEP_LIMIT`].
fn keep_max(max: usize) -> u64 {
    crate::progress::budget::bitset_capacity(max).clamp(1, KEEP_LIMIT)
}

/// The most records a failure keeps on any budget: a constant bound on
/// the slots a failed partition holds past its failure, and on the
/// records a walk reads before the live queue. Three under loom, so that a
/// model reaches it.
#[cfg(not(loom))]
const KEEP_LIMIT: u64 = 4096;
#[cfg(loom)]
const KEEP_LIMIT: u64 = 3;

/// Whether a `Queue::stopped` word says that `life` is stopped.
fn stopped_in(stopped: u64, life: u32) -> bool {
    stopped & !KEPT == STOPPED | u64::from(life)
}

/// Whether life `a` is newer than life `b` (lives count revokes, modulo
/// 2^32, compared as serial numbers).
pub(crate) fn newer(a: u32, b: u32) -> bool {
    ahead_of(a, b) != 0
}

/// Moves `word` on to `life` unless it already names `life` or a newer
/// one (serial numbers, see [`newer`]): a `fetch_max` modulo 2^32.
/// Relaxed: the callers say what orders it.
fn raise_life(word: &AtomicU32, life: u32) {
    let mut current = word.load(Ordering::Relaxed);
    while newer(life, current) {
        match word.compare_exchange_weak(current, life, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break,
            Err(seen) => current = seen,
        }
    }
}

/// How far `count` is ahead of `before`, as serial numbers modulo 2^32
/// (RFC 1982): 0 when it is not ahead.
fn ahead_of(count: u32, before: u32) -> u32 {
    match count.wrapping_sub(before) {
        ahead if ahead < 1 << 31 => ahead,
        _ => 0,
    }
}

impl Queue {
    /// The debt a tail word with [`OWED`] names: its position and life.
    /// Call after loading that word with Acquire; the caller's CAS (or
    /// re-check) expecting it tells whether the debt is still the same.
    fn owed(&self) -> (u64, u32) {
        // Acquire, both: pair with the holder's Release stores, so that a
        // value of a later debt comes with the CAS that cleared ours.
        (
            self.owed_seq.load(Ordering::Acquire),
            self.owed_life.load(Ordering::Acquire),
        )
    }

    /// Lets go of a mark that will not be handed out by `committable`
    /// (taken by a revoke, or of an ended life): reports its count, so
    /// that no later call counts it, and drops its hold.
    fn drop_mark<O>(&self, mark: u64, slots: &Slab<O>) {
        let index = mark_index(mark);
        self.report(slots.slot_of(index).covered());
        slots.release(index, MARKED);
    }

    /// Raises `reported` to a taken mark's count and returns by how much:
    /// each count is reported by exactly one caller, even when two take
    /// marks at once (a later mark may be taken first).
    fn report(&self, covered: u32) -> u64 {
        // Relaxed, all: a statistic; the CAS hands each step to one caller.
        let mut before = self.reported.load(Ordering::Relaxed);
        loop {
            let ahead = ahead_of(covered, before);
            if ahead == 0 {
                return 0;
            }
            match self.reported.compare_exchange_weak(
                before,
                covered,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return u64::from(ahead),
                Err(seen) => before = seen,
            }
        }
    }

    fn new() -> Self {
        Self {
            tail: AtomicU64::new(0),
            first: AtomicU32::new(0),
            sent: AtomicU64::new(0),
            work: AtomicU64::new(0),
            head: UnsafeCell::new(0),
            head_marked: UnsafeCell::new(false),
            passed: AtomicU64::new(0),
            marked: AtomicU64::new(0),
            reported: AtomicU32::new(0),
            progress_marked: AtomicU32::new(0),
            stopped: AtomicU64::new(0),
            newest: AtomicU32::new(0),
            mark: AtomicU64::new(0),
            ended_mark: AtomicU64::new(0),
            settled: AtomicU32::new(0),
            watchers: AtomicU32::new(0),
            last: AtomicU64::new(0),
            stop_seq: AtomicU64::new(0),
            kept: AtomicU64::new(0),
            ended: AtomicU32::new(0),
            kept_len: AtomicU64::new(0),
            unkept: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            owing: AtomicBool::new(false),
            owed_seq: AtomicU64::new(0),
            owed_life: AtomicU32::new(0),
            budget_wanted: AtomicBool::new(false),
        }
    }
}

/// A partition's numbers, for the statistics.
pub(crate) struct Backlog {
    /// Records queued and not yet passed: in flight, or acked behind one that
    /// is.
    pub(crate) records: u64,
    /// Acked records the watermark passed that no `committable` call has
    /// taken yet.
    pub(crate) untaken: u64,
    /// The life a failed record stopped the partition's watermark in, if
    /// any (it matters only while that life is the current one).
    pub(crate) stopped: Option<u32>,
    /// Progress trackers: records passed that the advance keeps after a
    /// failure (see `Queue::kept`), holding their slots.
    pub(crate) kept: u64,
}

pub(crate) struct Watermarks {
    queues: Pages<CachePadded<Queue>, 16, 20>,
    /// On a progress tracker, each slot's record's position (see `order`).
    seqs: Option<order::Seqs>,
    /// On a progress tracker, the most records a failure keeps (see
    /// [`keep_max`]).
    keep_max: u64,
}

impl Watermarks {
    /// `max` is a progress tracker's metadata budget, in characters.
    pub(crate) fn new(progress: bool, max: usize) -> Self {
        Self {
            queues: Pages::new(),
            seqs: progress.then(Pages::new),
            keep_max: keep_max(max),
        }
    }
}

impl Watermarks {
    /// Advances `partition`'s watermark past every resolved record at the
    /// front of its queue, or leaves that to the thread already doing it.
    /// `leave(entered, n, failed, life)` removes `n` passed records, sent in
    /// the partition's life `life`, `failed` of them failed, that entered
    /// the same generation through the same count shard (`entered` is their
    /// slots' generation word, see `Slab::set_generation`), and returns true
    /// if waiters must be woken; so does the advance, for the caller to
    /// wake them (user code) last.
    ///
    /// No user code runs while this thread owns `work`: the slots it frees
    /// keep their offsets until they are reused (see `Slab::alloc`), and
    /// waiters are woken only after it has handed `work` back, so a
    /// panicking `Drop` or waker cannot leave the partition stuck.
    // Not inlined: keeps the resolve path of trackers without watermarks
    // small.
    #[inline(never)]
    pub(crate) fn advance<O, M: Mode>(
        &self,
        slots: &Slab<O>,
        partition: usize,
        leave: impl Fn(*const (), u64, u64, u32) -> bool,
    ) -> bool {
        let Some(queue) = self.queues.get(partition) else {
            return false; // cannot happen: the record was linked into it
        };
        // AcqRel: Release hands this resolution to whoever advances (their
        // Acquire on `work`); Acquire, when we become the advancer, takes
        // `head` from the previous advancer's Release reset.
        let mut seen = queue.work.fetch_add(1, Ordering::AcqRel);
        if seen != 0 {
            return false; // the advancer will see our add and go round again
        }
        seen = 1;
        let mut wakes = false;
        loop {
            advance_once::<O, M>(
                queue,
                slots,
                (self.seqs.as_ref(), self.keep_max),
                &leave,
                &mut wakes,
            );
            // AcqRel: Release hands `head` to the next advancer; Acquire (on
            // failure) sees the resolutions of the adds that beat us.
            match queue
                .work
                .compare_exchange(seen, 0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        // Relaxed: a watcher's count is ordered by its read-modify-write of
        // `work` (see `short_of`), which our CAS above read if it
        // came first; if it came after, the watcher sees our pass.
        wakes || queue.watchers.load(Ordering::Relaxed) != 0
    }

    /// Acked records the watermark of `partition` has passed, modulo 2^32:
    /// read by `progress()` before it walks the partition.
    pub(crate) fn marked(&self, partition: usize) -> u32 {
        // Relaxed: a statistic.
        self.queues
            .get(partition)
            .map_or(0, |queue| queue.marked.load(Ordering::Relaxed) as u32)
    }

    /// Records that `progress()` handed out `partition`'s progress covering
    /// the `marked` acked records it read before its walk.
    pub(crate) fn handed_out_progress(&self, partition: usize, marked: u32) {
        if let Some(queue) = self.queues.get(partition) {
            // Relaxed: a statistic. Never back: a slower call of an
            // earlier count leaves a later one.
            let mut before = queue.progress_marked.load(Ordering::Relaxed);
            while ahead_of(marked, before) != 0 {
                match queue.progress_marked.compare_exchange_weak(
                    before,
                    marked,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(seen) => before = seen,
                }
            }
        }
    }

    /// Records queued in `partition` so far: the target of a
    /// `drain_partition` (records sent before the call).
    pub(crate) fn sent(&self, partition: usize) -> u64 {
        // Relaxed: a send that returned before the caller's call happened
        // before it.
        self.queues
            .get(partition)
            .map_or(0, |queue| queue.sent.load(Ordering::Relaxed))
    }

    /// Starts a `drain_partition` watch of `partition`'s passes: returns
    /// whether it counted one (`partition` has a queue). Call with the
    /// watcher registered to be woken; end a watch that counted, and only
    /// such a watch, with [`unwatch`](Self::unwatch) (the queue may appear
    /// in between).
    pub(crate) fn watch(&self, partition: usize) -> bool {
        let Some(queue) = self.queues.get(partition) else {
            return false;
        };
        // Relaxed: published to the advancer by `short_of`'s
        // read-modify-write of `work`.
        queue.watchers.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Ends a watch that [`watch`](Self::watch) counted.
    pub(crate) fn unwatch(&self, partition: usize) {
        // A watch that counted found the queue, and queues stay.
        if let Some(queue) = self.queues.get(partition) {
            // Relaxed: a watcher gone only makes the advancer's wakes
            // spurious until it sees the count.
            queue.watchers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// How many of the first `target` records of `partition` the watermark
    /// has yet to pass. For a watcher: its read-modify-write of `work`
    /// orders it against the advancer's reset of `work` at the end of every
    /// pass, so either this sees the pass or the advancer sees the watcher
    /// (and wakes it).
    pub(crate) fn short_of(&self, partition: usize, target: u64) -> u64 {
        let Some(queue) = self.queues.get(partition) else {
            return target;
        };
        // AcqRel: Release hands our `watchers` increment to the advancer's
        // CAS that reads this; Acquire sees the passes of an advancer whose
        // reset we read. Adds nothing: an idle queue stays idle.
        queue.work.fetch_add(0, Ordering::AcqRel);
        // Relaxed: ordered by the Acquire above.
        target.saturating_sub(queue.passed.load(Ordering::Relaxed))
    }

    /// After a revoke moved `partition` on to life `life`: takes the last
    /// untaken mark of an older life, if any is left (the caller then owns
    /// its `MARKED` hold, and calls [`hand_over`](Self::hand_over) once it
    /// has cloned the offset). That is the ended life's last mark, or, in
    /// `mark`, one that a revoke whose `Clone` panicked put back (no newer
    /// life's mark came since, or it would have replaced it). A mark of the
    /// new life stays; others are dropped, their counts reported.
    pub(crate) fn take_ended<O>(
        &self,
        partition: usize,
        life: u32,
        slots: &Slab<O>,
    ) -> Option<u64> {
        let queue = self.queues.get(partition)?;
        let mut found = None;
        // AcqRel, all three: as in `take`.
        let mark = queue.mark.swap(0, Ordering::AcqRel);
        if mark != 0 {
            if newer(life, mark_life(mark)) {
                found = Some(mark);
            } else if queue
                .mark
                .compare_exchange(0, mark, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                // A newer life's, and an even newer one was published
                // meanwhile, which covers it.
                queue.drop_mark(mark, slots);
            }
        }
        let ended = queue.ended_mark.swap(0, Ordering::AcqRel);
        if ended != 0 {
            // Only the life just ended: an older one's was put aside when a
            // newer life's mark replaced it, and that newer one may have
            // been committed since (handing the older out would move a
            // commit back).
            if found.is_none() && mark_life(ended) == life.wrapping_sub(1) {
                found = Some(ended);
            } else {
                queue.drop_mark(ended, slots);
            }
        }
        found
    }

    /// Ends a mark [`take_ended`](Self::take_ended) took and its caller
    /// handed out: its count is reported (it was taken, as by
    /// `committable`), and its hold dropped.
    pub(crate) fn hand_over<O>(&self, partition: usize, mark: u64, slots: &Slab<O>) {
        match self.queues.get(partition) {
            Some(queue) => queue.drop_mark(mark, slots),
            None => slots.release(mark_index(mark), MARKED),
        }
    }

    /// Puts back a mark a caller took (`take`, `take_ended`) and could not
    /// hand out (user code panicked): as the partition's untaken mark again,
    /// unless the advance published a newer one meanwhile, which covers it;
    /// then its hold is dropped.
    pub(crate) fn put_back<O>(&self, partition: usize, mark: u64, slots: &Slab<O>) {
        let restored = self.queues.get(partition).is_some_and(|queue| {
            // AcqRel: Release hands the marked slot (and our hold) back to
            // the next taker or advancer; Acquire is for symmetry.
            queue
                .mark
                .compare_exchange(0, mark, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if !restored {
            slots.release(mark_index(mark), MARKED);
        }
    }

    /// The slot of a mark [`take_ended`](Self::take_ended) returned.
    pub(crate) fn mark_slot(mark: u64) -> usize {
        mark_index(mark)
    }

    /// Tells the advancer that a revoke moved `partition` on to `life`, so
    /// that the records it keeps of an older, stopped life can go (see
    /// `Queue::kept`). Call before the revoke's advance: its add to `work`
    /// hands this to whoever advances next.
    pub(crate) fn end_life(&self, partition: usize, life: u32) {
        let (Some(queue), Some(_)) = (self.queues.get(partition), &self.seqs) else {
            return;
        };
        // Relaxed (inside): published to the advancer by our add to `work`
        // (Release), which its next `work` read-modify-write (Acquire) sees
        // before it passes again.
        raise_life(&queue.ended, life);
    }

    /// Records that the revoke ending the lives before `life` has taken
    /// their marks: `committable` drops any it finds from now on.
    pub(crate) fn settle(&self, partition: usize, life: u32) {
        if let Some(queue) = self.queues.get(partition) {
            // Relaxed (inside): only orders marks the advancer published,
            // which `take` reads with their own Acquire swap.
            raise_life(&queue.settled, life);
        }
    }

    /// Takes the untaken mark of every partition: `f(partition, offset)`
    /// for each, then drops the marks' holds, and returns how many acked
    /// records the taken advances cover.
    ///
    /// `f` is user code (`Clone`, `Hash`, `Eq`) and may panic. So marks are
    /// taken first, all of them, then `f` runs, and only when every `f` has
    /// returned are the holds dropped and the counts reported; if one
    /// panics, every taken mark is put back (see [`Taken`]): the caller's
    /// result is lost with the panic, so the advances must stay for the
    /// next call.
    pub(crate) fn take<O>(
        &self,
        numbered: usize,
        slots: &Slab<O>,
        mut f: impl FnMut(usize, &O),
    ) -> u64 {
        let mut taken = Taken {
            watermarks: self,
            slots,
            marks: Vec::new(),
        };
        self.for_each(numbered, |partition, queue| {
            // Relaxed: a cheap look; the swap below decides.
            if queue.mark.load(Ordering::Relaxed) == 0 {
                return;
            }
            // AcqRel: Acquire takes the mark (and its slot's offset) from the
            // advancer's Release swap (or a put-back's Release CAS); Release
            // is for symmetry with them.
            let mark = queue.mark.swap(0, Ordering::AcqRel);
            if mark == 0 {
                return;
            }
            // Relaxed: see `settle`.
            let settled = queue.settled.load(Ordering::Relaxed);
            if newer(settled, mark_life(mark)) {
                // Of a life a completed revoke ended (published late by an
                // advance that was running then): not ours to hand out.
                queue.drop_mark(mark, slots);
            } else {
                taken.marks.push((partition, mark));
            }
        });
        for &(partition, mark) in &taken.marks {
            // SAFETY: we own the MARKED hold we swapped out, so the slot keeps
            // its (acked) value until we release it or put the mark back.
            f(partition, unsafe {
                slots.slot_of(mark_index(mark)).value()
            });
        }
        let mut records = 0;
        for (partition, mark) in std::mem::take(&mut taken.marks) {
            let index = mark_index(mark);
            let covered = slots.slot_of(index).covered();
            if let Some(queue) = self.queues.get(partition) {
                records += queue.report(covered);
            }
            slots.release(index, MARKED); // no user code: see `Slab::alloc`
        }
        records
    }

    /// Calls `f` on every queue numbered below `numbered` (the partition
    /// numbers handed out so far, see `Partitions::numbered`).
    fn for_each(&self, numbered: usize, mut f: impl FnMut(usize, &Queue)) {
        for partition in 0..numbered {
            if let Some(queue) = self.queues.get(partition) {
                f(partition, queue);
            }
        }
    }

    /// Calls `f(partition, backlog)` for each partition with a queue. A
    /// moment's snapshot: each counter is read once, without a lock.
    pub(crate) fn backlogs(&self, numbered: usize, mut f: impl FnMut(usize, Backlog)) {
        self.for_each(numbered, |partition, queue| {
            // Relaxed, all five: statistics, a moment's snapshot; the pairs
            // of counters are read apart, so each difference saturates at 0.
            let passed = queue.passed.load(Ordering::Relaxed);
            let sent = queue.sent.load(Ordering::Relaxed);
            let stopped = queue.stopped.load(Ordering::Relaxed);
            let stopped = (stopped & STOPPED != 0).then_some(stopped as u32);
            let marked = queue.marked.load(Ordering::Relaxed) as u32;
            let reported = queue.reported.load(Ordering::Relaxed);
            // On a progress tracker `progress()` hands acked records out
            // too: the later of the two counts is what was handed out.
            let by_progress = queue.progress_marked.load(Ordering::Relaxed);
            let reported = if ahead_of(by_progress, reported) != 0 {
                by_progress
            } else {
                reported
            };
            f(
                partition,
                Backlog {
                    records: sent.saturating_sub(passed),
                    untaken: u64::from(ahead_of(marked, reported)),
                    stopped,
                    // Relaxed: a statistic.
                    kept: queue.kept_len.load(Ordering::Relaxed),
                },
            );
        });
    }
}

/// Marks taken by [`Watermarks::take`] whose holds it has not yet dropped.
/// If user code panics before it does, dropping this puts each one back
/// as its partition's untaken mark, unless the advance published a newer
/// one meanwhile, which covers it; then its hold is dropped. Either way
/// no advance is lost, and no user code runs here.
struct Taken<'a, O> {
    watermarks: &'a Watermarks,
    slots: &'a Slab<O>,
    /// (partition number, mark), each holding `MARKED`.
    marks: Vec<(usize, u64)>,
}

impl<O> Drop for Taken<'_, O> {
    fn drop(&mut self) {
        for &(partition, mark) in &self.marks {
            self.watermarks.put_back(partition, mark, self.slots);
        }
    }
}
