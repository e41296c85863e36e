//! The walk: what `progress()` and the budget check read of a partition's
//! queue, without writing anything (see `order` for positions and the
//! checked link).
//!
//! It starts at `last`, the advancer's head (the last record passed, which
//! keeps its `QUEUED` hold at least until the advance moves past its
//! successor), or at the queue's `first` link before any pass, and follows
//! the links. A slot read while its predecessor is still queued, with the
//! tag the walk saw, belongs to that predecessor's successor: the advance
//! releases a record's hold no sooner than it passes the next one, and
//! frees a slot only after it has passed it. So each step reads the successor's fields, then
//! checks that the predecessor is still queued; if not (the watermark moved
//! past it), the walk starts again from the new `last`. Before the first
//! pass the check is that `last` is still 0: the advancer publishes the
//! new head there before it drops the old head's hold. Nothing is written;
//! a walk never delays a send or an ack.
//!
//! After a failure (`stopped` with `KEPT`, see `Queue::kept`) the walk
//! starts at the failed record instead: the advance keeps it and every
//! record it passes after it (their `MARKED` hold) until the life ends, so
//! the walk vouches for a record by `QUEUED | MARKED` with its tag, and
//! stops at a record of a newer life (a mark there holds `MARKED` for
//! itself). The advance lets kept records go front to back, after clearing
//! `KEPT`: a walk that finds one gone starts again and reports the failed
//! offset alone (the life ended). The advance keeps at most
//! `Watermarks::keep_max` records, so such a walk reads at most that many
//! before the live queue; a life past the bound, or one a sender asked to
//! stop keeping (`Queue::unkept`), reads as stopped.

use super::order::seq_of;
use super::*;
use crate::slab::Slot;
use crate::sync::fence;

/// What a walk saw of a queued record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Acked.
    Done,
    /// Failed: not done, and it will not be.
    Failed,
    /// Unresolved (or not yet published).
    Open,
}

/// What a walk found for one life of one partition.
#[derive(Debug, Default)]
pub(crate) struct Walk {
    /// Every position of the life below this one is done: the watermark
    /// passed an acked record of the life at the position before it.
    pub(crate) done_below: Option<u64>,
    /// A failed record at this position stopped the life's watermark, and
    /// nothing past it is known: the life ended (its kept records let go),
    /// or a revoke's release stopped it. After a failure of a live life
    /// the walk reads on instead, from the failed record (in `records`).
    pub(crate) stopped_at: Option<u64>,
    /// The life's records still queued, in queue (and position) order.
    pub(crate) records: Vec<(u64, Seen)>,
    /// The `stopped` word of the kept life the walk read from its failed
    /// record on (see `Queue::kept`), or 0: not a kept life.
    pub(super) kept: u64,
    /// The last record the walk reached (of any life), as a [`tail_word`]
    /// without credit (its node and tag), 0 for none.
    pub(super) end: u64,
}

/// A record `walk` reads, and whether it is still the one it saw.
struct Held<'a, O> {
    slot: &'a Slot<O>,
    tag: u32,
    /// The holds that keep it: `QUEUED`, or on a walk of a kept life
    /// (after a failure), `QUEUED | MARKED` (see `Queue::kept`).
    holds: u64,
}

/// The walk's half of a seqlock-like check. An Acquire fence between its
/// reads of a slot's fields and the load that checks them: if a read saw a
/// field a later user of the slot wrote (after its Release fence, see
/// `Slab::prepare`), the check sees that user's tag, or the released hold
/// that had to come before the slot's reuse, and fails.
fn check_point() {
    // Mutant `unfenced_walk` (loom suite only): no fence, so a check may
    // pass on a stale state after reading a reused slot's new fields.
    #[cfg(not(inflight_mutant = "unfenced_walk"))]
    fence(Ordering::Acquire);
}

impl<O> Held<'_, O> {
    /// Still held with the tag seen: not yet passed beyond (or let go,
    /// when kept). Call after reading what the check vouches for (see
    /// [`check_point`]).
    fn still_queued(&self) -> bool {
        check_point();
        // Acquire (inside `state`): sees a release of its hold made before.
        let state = self.slot.state();
        tag(state) == self.tag && state & self.holds != 0
    }
}

impl Watermarks {
    /// Reads `partition`'s queue for the records of `life` (see the module
    /// docs). False if the partition has no queue.
    pub(crate) fn walk<O>(
        &self,
        slots: &Slab<O>,
        partition: usize,
        life: u32,
        out: &mut Walk,
    ) -> bool {
        let (Some(queue), Some(seqs)) = (self.queues.get(partition), &self.seqs) else {
            return false;
        };
        'start: loop {
            out.records.clear();
            out.done_below = None;
            out.stopped_at = None;
            out.kept = 0;
            // Acquire: pairs with the advancer's Release store: the head's
            // fields (its position included) are visible.
            let last = queue.last.load(Ordering::Acquire);
            out.end = last;
            // Acquire: pairs with the advancer's Release store, after
            // `stop_seq` and `kept`.
            let stopped = queue.stopped.load(Ordering::Acquire);
            // A kept life: its failure was passed, and its records are kept
            // from there on (see `Queue::kept`): start at the failed record.
            // A life a sender asked to stop keeping (`Queue::unkept`) is
            // read as stopped at once, before the advancer lets it go.
            let kept = stopped_in(stopped, life) && keeps(queue, stopped);
            if stopped_in(stopped, life) && !kept {
                // The life ended since (its records are let go), or was
                // stopped by a revoke's release: nothing past the stop is
                // known. Relaxed: ordered by the load above.
                out.stopped_at = Some(queue.stop_seq.load(Ordering::Relaxed));
                return true;
            }
            let (mut link, mut held) = if kept {
                // Relaxed: ordered by the load of `stopped` above.
                let failed = queue.kept.load(Ordering::Relaxed);
                let index = index_of(tail_node(failed));
                let slot = slots.slot_of(index);
                let first = Held {
                    slot,
                    tag: tail_tag(failed),
                    holds: QUEUED | MARKED,
                };
                // Acquire (inside `state`): the resolution's Release CAS,
                // before the advance passed it.
                let state = slot.state();
                let (failed_life, seq) = (slot.life(), seq_of(seqs, index));
                // Let go since we read `stopped` (or another life's failure
                // kept now): start again.
                if !first.still_queued() || tag(state) != first.tag || failed_life != life {
                    continue 'start;
                }
                out.records.push((seq, Seen::Failed));
                out.kept = stopped;
                out.end = tail_word(tail_node(failed), first.tag, 0);
                (&slot.next_queued, Some(first))
            } else if last == 0 {
                (&queue.first, None)
            } else {
                let index = index_of(tail_node(last));
                let slot = slots.slot_of(index);
                let head = Held {
                    slot,
                    tag: tail_tag(last),
                    holds: QUEUED,
                };
                let state = slot.state();
                let (head_life, seq) = (slot.life(), seq_of(seqs, index));
                if !head.still_queued() || tag(state) != head.tag {
                    continue 'start;
                }
                if head_life == life {
                    match status_of_state(state) {
                        ACKED => out.done_below = Some(seq + 1),
                        // A failure of this life the `stopped` we read
                        // did not show yet.
                        FAILED if state & REVOKED == 0 => {
                            out.stopped_at = Some(seq);
                            return true;
                        }
                        _ => {}
                    }
                }
                (&slot.next_queued, Some(head))
            };
            loop {
                // Acquire: pairs with the sender's Release store of the link:
                // its position and life are visible.
                let next = link.load(Ordering::Acquire);
                if next == 0 {
                    return true;
                }
                let index = index_of(next);
                let slot = slots.slot_of(index);
                let state = slot.state();
                let (record_life, seq) = (slot.life(), seq_of(seqs, index));
                // The predecessor still queued: what we read is its
                // successor's, not a later user's of the slot.
                let valid = match &held {
                    Some(held) => held.still_queued(),
                    None => {
                        check_point();
                        // Acquire: as above; still 0, nothing was passed.
                        queue.last.load(Ordering::Acquire) == 0
                    }
                };
                if !valid {
                    continue 'start;
                }
                // A kept life ended: the newer life's records are not ours,
                // and a mark among them holds `MARKED` for itself (so it
                // vouches for no successor).
                if kept && newer(record_life, life) {
                    return true;
                }
                if record_life == life {
                    let seen = match status_of_state(state) {
                        ACKED => Seen::Done,
                        FAILED => Seen::Failed,
                        _ => Seen::Open,
                    };
                    out.records.push((seq, seen));
                }
                held = Some(Held {
                    slot,
                    tag: tag(state),
                    holds: if kept { QUEUED | MARKED } else { QUEUED },
                });
                out.end = tail_word(next, tag(state), 0);
                link = &slot.next_queued;
            }
        }
    }
}
