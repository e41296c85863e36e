//! The advance: one pass of the thread that holds a queue's `work`, which
//! moves the queue's head over resolved records and publishes marks (see
//! the parent module).

use super::*;
use crate::slab::{Slot, QUEUE_HOLDS};

/// One pass of the advance: moves `head` over every resolved record at the
/// front of the queue. Only the holder of `work` calls it.
pub(super) fn advance_once<O, M: Mode>(
    queue: &Queue,
    slots: &Slab<O>,
    (seqs, keep_max): (Option<&order::Seqs>, u64),
    leave: &impl Fn(*const (), u64, u64, u32) -> bool,
    wakes: &mut bool,
) {
    // The positions are kept on a progress tracker only: a constant, so a
    // watermark tracker's advance holds no code for them.
    let seqs = if M::PROGRESS { seqs } else { None };
    // SAFETY: only the holder of `work` touches `head`; the Acquire/Release
    // on `work` order one holder's accesses before the next one's.
    let mut head = queue.head.with(|h| unsafe { *h });
    let mut head_slot = (head != 0).then(|| slots.slot_of(index_of(head)));
    // SAFETY: as for `head`.
    let mut head_marked = queue.head_marked.with(|m| unsafe { *m });
    // Relaxed, both: only advancers write them, and we are the advancer.
    let mut stopped = queue.stopped.load(Ordering::Relaxed);
    let mut newest = queue.newest.load(Ordering::Relaxed);
    // A progress tracker keeps the records it passes after a failure, the
    // failed one on (see `Queue::kept`), until the life ends. Relaxed: a
    // revoke's store, published by its add to `work`, which our (or our
    // caller's) `work` read-modify-write acquired.
    // Mutant `kept_outlives_revoke` (loom suite only): a revoke's end of
    // the kept life is not seen here, so its records stay kept until a
    // record of a newer life is passed, for ever if none comes.
    if stopped & KEPT != 0
        && ((cfg!(not(inflight_mutant = "kept_outlives_revoke"))
            && newer(queue.ended.load(Ordering::Relaxed), stopped as u32))
            || !keeps(queue, stopped))
    {
        // A revoke ended the kept life, and no record of a newer one may
        // come to say so; or a sender found that the life's fixed blocks
        // alone do not fit the budget (see `Queue::unkept`): let its
        // records go now.
        let_go_kept(queue, slots, &mut stopped, head);
    }
    // Whether `newest` is stopped, and whether we keep what we pass: flags
    // beside `stopped` and `newest`, so that each step tests one.
    let mut newest_stopped = stopped_in(stopped, newest);
    let mut keeping = stopped & KEPT != 0;
    // Whether `head` is an acked record to publish as the mark (the newest
    // passed, not yet published).
    let mut candidate = false;
    // The record passed before `head`, whose `QUEUED` hold we still owe:
    // dropped at the next step, or, if it is the mark the next publish
    // replaces (an advance of one record in order), with the mark's hold
    // in one step (see `Unqueued`).
    let mut unqueued = Unqueued { owed: None };
    // Passed records whose generation count we have yet to decrement, all of
    // one generation and count shard and one life: (their generation word,
    // how many, how many failed, their life).
    let mut group: Option<(*const (), u64, u64, u32)> = None;
    let (mut passed, mut marked) = (0_u64, 0_u64);
    // Publishes `head`, the candidate, as the mark (the caller clears
    // `candidate` if it reads it again before the next step).
    macro_rules! publish_head {
        () => {
            if let Some(slot) = head_slot {
                publish(
                    queue,
                    slots,
                    (head, slot),
                    &mut marked,
                    newest,
                    &mut unqueued,
                );
            }
            head_marked = true;
        };
    }
    loop {
        let link = match head_slot {
            None => &queue.first,
            Some(slot) => &slot.next_queued,
        };
        // Acquire: pairs with the sender's Release store of the link.
        let next = link.load(Ordering::Acquire);
        if next == 0 {
            break; // the end, or a sender between its swap and its link
        }
        let slot = slots.slot_of(index_of(next));
        // Acquire (inside `state`): pairs with the resolution's Release CAS.
        let state = slot.state();
        let status = status_of_state(state);
        // Mutant `skip_unacked` (loom suite only): the watermark passes
        // records that are not yet resolved.
        #[cfg(inflight_mutant = "skip_unacked")]
        let status = if status == crate::slab::LIVE {
            ACKED
        } else {
            status
        };
        if status != ACKED && status != FAILED {
            break; // LIVE, or prepared and not yet published
        }
        let generation = slot.generation();
        // Read like the generation: written before the publish that the
        // resolution (which we acquired) came after.
        let life = slot.life();
        let revoked = state & REVOKED != 0;
        // A record of a newer life: the older life's watermark is final.
        // Publish it (a revoke takes it), then start the new life afresh.
        if newer(life, newest) {
            if candidate {
                publish_head!();
                candidate = false;
            }
            if keeping {
                // The kept life ended: its records go, up to `head`.
                let_go_kept(queue, slots, &mut stopped, head);
                keeping = false;
            }
            newest = life;
            newest_stopped = stopped_in(stopped, newest);
            // Relaxed: advancer-owned, read by `stats` as a statistic.
            queue.newest.store(newest, Ordering::Relaxed);
        }
        // Before the group changes generation (or life), publish the mark
        // that covers the group's records: their generation may drain on our
        // decrement, and whoever sees it drained must find the mark.
        if let Some((current, count, failed, group_life)) = group {
            if current != generation || group_life != life {
                if candidate {
                    publish_head!();
                    candidate = false;
                }
                *wakes |= leave(current, count, failed, group_life);
                group = None;
            }
        }
        // A revoked record is not a failure: nothing failed, its life ended.
        let failed = u64::from(status == FAILED && !revoked);
        group = Some(match group {
            Some((g, count, f, l)) => (g, count + 1, f + failed, l),
            None => (generation, 1, failed, life),
        });
        // Records of an older life (sent while a revoke ran) are passed and
        // nothing more: their life's watermark was final already.
        let current = life == newest;
        let stopped_now = newest_stopped;
        if status == FAILED && current && !stopped_now {
            // A failure (or a record the revoke released) ends this life's
            // contiguous acked prefix.
            stopped = STOPPED | u64::from(newest);
            newest_stopped = true;
            if let Some(seqs) = seqs {
                // Relaxed: published by the Release store of `stopped`.
                let seq = order::seq_of(seqs, index_of(next));
                queue.stop_seq.store(seq, Ordering::Relaxed);
                // A failure (not a revoke's release, whose life ended):
                // keep it and what we pass after it, for `progress()`.
                // Mutant `progress_forgets_after_failure` (loom suite only):
                // nothing is kept, and the walk reports nothing past it.
                if !revoked && cfg!(not(inflight_mutant = "progress_forgets_after_failure")) {
                    debug_assert!(!keeping);
                    // Relaxed: published by the Release store of `stopped`.
                    queue
                        .kept
                        .store(tail_word(next, tag(state), 0), Ordering::Relaxed);
                    stopped |= KEPT;
                    keeping = true;
                    // Relaxed: advancer-owned (a statistic for others).
                    queue.kept_len.store(0, Ordering::Relaxed);
                }
            }
            // Release: a progress walk that reads it sees `stop_seq`; for
            // the statistics, and the advancer re-reads its own writes.
            queue.stopped.store(stopped, Ordering::Release);
            if candidate {
                // `head` is the last good watermark: publish it before its
                // queue hold goes.
                publish_head!();
            }
        }
        if seqs.is_some() {
            // Release: the new head's fields to a progress walk (Acquire),
            // which starts there. Before the old head's hold goes: a walk
            // that finds `last` still 0 knows nothing was passed (see
            // `order`).
            queue
                .last
                .store(tail_word(next, tag(state), 0), Ordering::Release);
        }
        if let Some(slot) = head_slot {
            unqueued.owe(slots, (head, slot), head_marked);
        }
        head = next;
        head_slot = Some(slot);
        // A kept record's `MARKED` hold is the keep's, not ours to drop.
        head_marked = keeping;
        if keeping {
            // Relaxed: advancer-owned (a statistic for others).
            let kept = queue.kept_len.load(Ordering::Relaxed) + 1;
            queue.kept_len.store(kept, Ordering::Relaxed);
            // Mutant `kept_past_bound` (loom suite only): the advance keeps
            // every record past a failure, however many.
            if kept > keep_max && cfg!(not(inflight_mutant = "kept_past_bound")) {
                // Past the bound: the life stops keeping, and its progress
                // falls back to the failed offset alone (see "Keeping a
                // failure, bounded" in `order`). `head`'s `MARKED` hold goes
                // with the rest; `head_marked` stays true, so the step that
                // passes it drops only `QUEUED`.
                let_go_kept(queue, slots, &mut stopped, head);
                keeping = false;
            }
        }
        passed += 1;
        candidate = status == ACKED && current && !stopped_now;
        marked += u64::from(candidate);
    }
    if candidate {
        publish_head!();
    }
    unqueued.pay(slots);
    debug_assert_eq!(marked, 0, "every marked record is covered by a mark");
    if passed != 0 {
        // Relaxed: a statistic. Only the advancer writes it.
        let total = queue.passed.load(Ordering::Relaxed) + passed;
        queue.passed.store(total, Ordering::Relaxed);
    }
    // SAFETY: as above.
    queue.head.with_mut(|h| unsafe { *h = head });
    // SAFETY: as above.
    queue.head_marked.with_mut(|m| unsafe { *m = head_marked });
    if let Some((generation, count, failed, life)) = group {
        *wakes |= leave(generation, count, failed, life);
    }
}

/// Lets go of the records kept for the progress walk since a failure
/// stopped their life (see `Queue::kept`), which has ended: clears [`KEPT`]
/// from `stopped`, then drops the `MARKED` hold of each, front to back,
/// from the failed record to `head`, the last passed. In queue order: while
/// a walk's record is still held, its successor's slot cannot be reused
/// (see `order`). The `QUEUED` holds owed on the last two go as usual.
#[cold]
#[inline(never)]
fn let_go_kept<O>(queue: &Queue, slots: &Slab<O>, stopped: &mut u64, head: u32) {
    *stopped &= !KEPT;
    // Relaxed: advancer-owned (a statistic for others).
    queue.kept_len.store(0, Ordering::Relaxed);
    // Relaxed: a walk that finds a kept record released (Acquire, reading
    // our Release below) sees this too, and stops starting at `kept`.
    queue.stopped.store(*stopped, Ordering::Relaxed);
    // Relaxed: our own write.
    let mut node = tail_node(queue.kept.load(Ordering::Relaxed));
    loop {
        let slot = slots.slot_of(index_of(node));
        // Before the release, after which the slot may be reused. Relaxed:
        // we read it with Acquire when we passed the successor (every kept
        // record but `head` was passed, so its successor is linked).
        let next = if node == head {
            0
        } else {
            slot.next_queued.load(Ordering::Relaxed)
        };
        // Release (inside): orders the store above before a reuse of the
        // slot, which a walk that finds the hold gone sees.
        slots.release_at(index_of(node), slot, MARKED);
        if next == 0 {
            return;
        }
        node = next;
    }
}

/// A passed record whose holds the advancer has yet to drop: `QUEUED`, and
/// `MARKED` too unless the record was published as a mark (then that hold
/// is the mark's). They go one step late, so that when the record is the
/// mark the advance replaces (the common case: records acked in order,
/// each advance passing one), its two holds go in one read-modify-write.
/// Holding a passed record a moment longer only delays its slot's reuse.
struct Unqueued<'a, O> {
    /// The record's node and slot, and whether it was published as a mark.
    owed: Option<(u32, &'a Slot<O>, bool)>,
}

impl<'a, O> Unqueued<'a, O> {
    /// Owes the holds of `node`, the head being passed (`marked` if it was
    /// published as a mark), dropping those owed before.
    fn owe(&mut self, slots: &Slab<O>, (node, slot): (u32, &'a Slot<O>), marked: bool) {
        self.pay(slots);
        self.owed = Some((node, slot, marked));
    }

    /// Drops the holds owed, if any.
    fn pay(&mut self, slots: &Slab<O>) {
        if let Some((node, slot, marked)) = self.owed.take() {
            // Mutant `dropped_mark_hold` (loom suite only): the advancer
            // drops the hold of a record it published as the mark, which
            // is the mark's (and `committable`'s, once taken).
            #[cfg(inflight_mutant = "dropped_mark_hold")]
            let marked = false;
            let holds = if marked { QUEUED } else { QUEUE_HOLDS };
            slots.release_at(index_of(node), slot, holds);
        }
    }

    /// Drops the mark's `MARKED` hold on `node`, a mark just replaced, with
    /// the `QUEUED` hold owed on it if it is the record owed.
    fn unmark(&mut self, slots: &Slab<O>, node: u32) {
        match self.owed {
            Some((owed, slot, marked)) if owed == node => {
                debug_assert!(marked, "a mark is a record published as one");
                self.owed = None;
                slots.release_at(index_of(node), slot, QUEUE_HOLDS);
            }
            _ => slots.release(index_of(node), MARKED),
        }
    }
}

/// Makes `candidate` (the advancer's `head`, so still queued and held) the
/// partition's mark, handing it the `MARKED` hold the record was born with
/// and dropping the hold of the mark it replaces. The mark
/// carries the partition's count of acked records passed so far, `marked`
/// of them new since the last mark.
fn publish<'a, O>(
    queue: &Queue,
    slots: &'a Slab<O>,
    (candidate, slot): (u32, &Slot<O>),
    marked: &mut u64,
    life: u32,
    unqueued: &mut Unqueued<'a, O>,
) {
    // Relaxed, both: only the holder of `work`, the caller, writes it (the
    // `work` handover orders the writers); `stats` reads it as a statistic.
    let total = queue.marked.load(Ordering::Relaxed) + std::mem::take(marked);
    queue.marked.store(total, Ordering::Relaxed);
    // Modulo 2^32: `Queue::report` compares these as serial numbers.
    slots.mark(slot, total as u32);
    // AcqRel: Release publishes the marked slot (and its acked value) to
    // `committable`'s Acquire swap; Acquire takes over the replaced mark.
    let replaced = queue
        .mark
        .swap(mark_word(candidate, life), Ordering::AcqRel);
    if replaced == 0 {
        return;
    }
    if newer(life, mark_life(replaced)) {
        // The last mark of a life a revoke ended: put it aside for the
        // revoke (the mark of a newer life does not cover it). AcqRel: as
        // for `mark`.
        let stale = queue.ended_mark.swap(replaced, Ordering::AcqRel);
        if stale != 0 {
            slots.release(mark_index(stale), MARKED);
        }
    } else {
        unqueued.unmark(slots, replaced as u32);
    }
}
