//! The advance: one pass of the thread that holds a queue's `work`, which
//! moves the queue's head over resolved records and publishes marks (see
//! the parent module).

use super::*;

/// One pass of the advance: moves `head` over every resolved record at the
/// front of the queue. Only the holder of `work` calls it.
pub(super) fn advance_once<O>(
    queue: &Queue,
    slots: &Slab<O>,
    seqs: Option<&order::Seqs>,
    leave: &impl Fn(*const (), u64, u64, u32) -> bool,
    wakes: &mut bool,
) {
    // SAFETY: only the holder of `work` touches `head`; the Acquire/Release
    // on `work` order one holder's accesses before the next one's.
    let mut head = queue.head.with(|h| unsafe { *h });
    // Relaxed, both: only advancers write them, and we are the advancer.
    let mut stopped = queue.stopped.load(Ordering::Relaxed);
    let mut newest = queue.newest.load(Ordering::Relaxed);
    // The newest passed acked record, not yet published as the mark. It is
    // always `head` when set.
    let mut candidate = 0_u32;
    // Passed records whose generation count we have yet to decrement, all of
    // one generation and count shard and one life: (their generation word,
    // how many, how many failed, their life).
    let mut group: Option<(*const (), u64, u64, u32)> = None;
    let (mut passed, mut marked) = (0_u64, 0_u64);
    loop {
        let link = if head == 0 {
            &queue.first
        } else {
            &slots.slot_of(index_of(head)).next_queued
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
            if candidate != 0 {
                publish(queue, slots, candidate, &mut marked, newest);
                candidate = 0;
            }
            newest = life;
            // Relaxed: advancer-owned, read by `stats` as a statistic.
            queue.newest.store(newest, Ordering::Relaxed);
        }
        // Before the group changes generation (or life), publish the mark
        // that covers the group's records: their generation may drain on our
        // decrement, and whoever sees it drained must find the mark.
        if let Some((current, count, failed, group_life)) = group {
            if current != generation || group_life != life {
                if candidate != 0 {
                    publish(queue, slots, candidate, &mut marked, newest);
                    candidate = 0;
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
        let stopped_now = stopped == STOPPED | u64::from(newest);
        if status == FAILED && current && !stopped_now {
            // A failure (or a record the revoke released) ends this life's
            // contiguous acked prefix.
            stopped = STOPPED | u64::from(newest);
            if let Some(seqs) = seqs {
                // Relaxed: published by the Release store of `stopped`.
                let seq = order::seq_of(seqs, index_of(next));
                queue.stop_seq.store(seq, Ordering::Relaxed);
            }
            // Release: a progress walk that reads it sees `stop_seq`; for
            // the statistics, and the advancer re-reads its own writes.
            queue.stopped.store(stopped, Ordering::Release);
            if candidate != 0 {
                // `head` is the last good watermark: publish it before the
                // step below drops its queue hold.
                publish(queue, slots, candidate, &mut marked, newest);
                candidate = 0;
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
        if head != 0 {
            slots.release(index_of(head), QUEUED);
        }
        head = next;
        passed += 1;
        if status == ACKED && current && !stopped_now {
            candidate = next;
            marked += 1;
        }
    }
    if candidate != 0 {
        publish(queue, slots, candidate, &mut marked, newest);
    }
    debug_assert_eq!(marked, 0, "every marked record is covered by a mark");
    if passed != 0 {
        // Relaxed: a statistic. Only the advancer writes it.
        let total = queue.passed.load(Ordering::Relaxed) + passed;
        queue.passed.store(total, Ordering::Relaxed);
    }
    // SAFETY: as above.
    queue.head.with_mut(|h| unsafe { *h = head });
    if let Some((generation, count, failed, life)) = group {
        *wakes |= leave(generation, count, failed, life);
    }
}

/// Makes `candidate` (the advancer's `head`, so still queued and held) the
/// partition's mark, dropping the hold on the mark it replaces. The mark
/// carries the partition's count of acked records passed so far, `marked`
/// of them new since the last mark.
fn publish<O>(queue: &Queue, slots: &Slab<O>, candidate: u32, marked: &mut u64, life: u32) {
    // Relaxed, both: only the holder of `work`, the caller, writes it (the
    // `work` handover orders the writers); `stats` reads it as a statistic.
    let total = queue.marked.load(Ordering::Relaxed) + std::mem::take(marked);
    queue.marked.store(total, Ordering::Relaxed);
    // Modulo 2^32: `Queue::report` compares these as serial numbers.
    slots.mark(index_of(candidate), total as u32);
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
        slots.release(mark_index(replaced), MARKED);
    }
}
