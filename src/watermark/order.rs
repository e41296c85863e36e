//! The progress side of a watermark queue, on a tracker built with
//! `Builder::progress`: each record's position (`seq`), the link that
//! refuses a record out of order or over the metadata budget, and the walk
//! that reads the records still queued without holding anything.
//!
//! # Positions
//!
//! A send computes its offset's position (user code, before it takes
//! anything) and stores it in `seqs`, a table beside the slots, before it
//! links the record: whoever follows the link (Acquire) sees it. The
//! advancer and the walk read positions from there, so neither runs user
//! code.
//!
//! # The checked link
//!
//! On a progress tracker a send links itself with a compare-and-swap of
//! `tail` rather than a swap, and decides both checks against the record it
//! would follow: the order (its position must be above its predecessor's,
//! when that one is of the same life), and the budget. Two senders of one
//! partition are decided in the order their CASes land, which is the queue
//! order. The tail word carries the predecessor's tag, so a CAS fails if
//! the slot went on to another record meanwhile (a read of a moved-on
//! slot's fields is then discarded).
//!
//! # The budget
//!
//! A record may be acked or not, so the check bounds every way the
//! partition's unresolved records may end (see `progress::budget`): the
//! walk reads the records still queued, as `Tracker::progress` does, and
//! the new one is checked against the largest encoding they could give.
//! To keep that off the common path, the check also says how much room is
//! left, in *units*: a record adds one unit per position it moves the
//! partition's end (itself and the offsets skipped before it), which is at
//! least what it can add to either form (a bit per position to the bitset,
//! and to the run form a byte for its own run and a varint for the skipped
//! ones). The tail word carries that credit (at most 127), and a send that
//! fits in it takes its share without walking; the CAS that links it is the
//! one that takes the credit, so two senders cannot spend it twice. Acks
//! and the watermark's moves only shrink what the records could take, and
//! a new life's records start from nothing, so credit never over-promises.
//! A partition walks about once per 127 sends, the queue's length each
//! time.
//!
//! # Keeping a failure, bounded
//!
//! After a failure the advance keeps the failed record and those it passes
//! after it (see `Queue::kept`), so that `progress()` still reports what
//! was acked beyond the failure. It keeps at most `Watermarks::keep_max`
//! of them (as many positions as the budget's bitset form encodes, at most
//! 4,096): past that, or when a sender's budget check finds that the
//! life's fixed blocks (its failed records, with every open record taken
//! as acked) alone do not fit the budget, the life *stops keeping*. The
//! advancer lets the records go (front to back, as when the life ends),
//! and the life reads as stopped: the failed offset, nothing done past
//! it, and no budget check, as before a failure was kept. A sender cannot
//! let go itself (the advancer owns the queue): it stores the life's
//! `stopped` word in `Queue::unkept`, which the walk and the budget check
//! read as stopped at once, and the advancer acts on at its next pass.
//! Forgetting kept records only makes a restart redo them: the walk never
//! reads a failed or unacked record as done either way.
//!
//! # Owed offsets
//!
//! An offset never sent below a sent one counts as done (a compaction
//! gap). So an offset refused for want of room (a permit, a slot, the
//! budget; a batch's first unsent offset and a `send_timeout` or
//! `send_async` giving up are such refusals) is *owed*: until it is sent,
//! or the partition revoked, every other send of the partition's life is
//! refused `OutOfOrder`, above it (it would make it a gap) and below it
//! (the source retries the owed offset first; a partition owes one offset
//! at a time). A refusal of an offset that is itself out of order, or made
//! while another offset is owed, is a refusal for order and owes nothing.
//!
//! The debt is part of the order decision. The tail word's bit 31,
//! [`OWED`], says the partition owes; the debt's position and life are in
//! `Queue::owed_seq` and `owed_life`, written only by the holder of the
//! claim `Queue::owing` (a CAS from false to true), before the tail CAS
//! that sets `OWED` (Release), and read by whoever loads a tail with it
//! (Acquire). A sender decides against the tail it read, flag included,
//! and links with a CAS expecting that very word: a debt set meanwhile
//! fails the CAS, and the send decides again. With the flag set, only the
//! owed offset of the owed life is accepted, and a send of a newer life
//! (the partition was revoked: a new life forgets the debt); their link
//! writes the tail without the flag, and then releases the claim. A send
//! of an older life than the debt's is stale, and starts again in the new
//! life, as when a newer life's record is queued.
//!
//! A refused sender owes (`owe`) thus: it takes the claim (if the claim is
//! held but the tail has no flag, its holder is about to set the flag or to
//! release the claim: it waits, spinning, on this refusal path only),
//! decides the order against the tail's record as a link would (out of
//! order or of an ended life: release the claim, owe nothing), writes the
//! debt and sets the flag with a CAS expecting the tail it decided against
//! (a link meanwhile fails it: decide again). A sender that finds the flag
//! set decides against the debt instead: owed already (a retry of the owed
//! offset, refused again), or another offset owed (`OutOfOrder`), or a
//! debt of an ended life, which it takes over: a CAS clears the flag (the
//! claim passes to it with the debt it clears), and it records its own.
//!
//! Refusals are linearized as sends are: a budget refusal at the tail it
//! was decided against, a refusal without a link (a permit, a slot) at the
//! CAS that sets the flag; an owed refusal decided against a tail that has
//! moved is decided again. Concurrent senders of one partition therefore
//! see one order: a record linked before the debt makes the refused offset
//! out of order (if it is below it) or is below it; none links after it
//! but the owed offset.
//!
//! ## On a watermark tracker without progress
//!
//! The same debt, with the same flag, claim and epochs, with two changes.
//! There is no order, so the debt's `owed_seq` holds the owed offset's key
//! (a 64-bit hash of it, `ProgressConfig::key_of`) and `owe` checks only
//! lives. And the common path stays a link without a decision: a send
//! `look`s at the tail (Acquire) while it still holds the partition key;
//! with no flag it links with a CAS that keeps whatever debt was recorded
//! since (flag and epoch), as if it had linked first. That is the same
//! decision: the debt depends on the tail record's life only, and a record
//! of the debt's life (or an older one) leaves it owed either way, while a
//! newer life's record makes an older debt void whether it is cleared now
//! or by the next send. A send that finds the flag decides against the
//! debt (`link_owing`, cold): the owed offset (same life, same key) links
//! and clears the flag, then releases the claim; a record of a newer life
//! than the debt's does the same (a revoke forgot it); one of an older
//! life links and keeps the flag (it is of an ended life, and releases
//! itself); any other offset is handed back `OutOfOrder` with nothing
//! linked. A batch links its chunk as one chain with one CAS, decided as
//! its first record. A send that looked without the flag, began after a
//! refusal returned, and links after it cannot happen: the refusal's CAS
//! came before the look.
//!
//! The flag's bits are reused while it is set: a tail with a debt carries
//! no credit (the owed send walks), and its credit bits count the debts
//! recorded at the same tail record, so that a CAS expecting an old debt's
//! word fails once a newer life took it over (an ABA that would otherwise
//! let a stale sender clear the new debt). The count wraps at 128 debts
//! at one record, that is 128 revokes of the partition, each followed by a
//! refusal and no send, while one sender is stalled between its read and
//! its CAS: the same kind of bound as the slot tags' wrap.
//!
//! # Waiting for the budget
//!
//! A `send_timeout` or `send_async` refused for the budget registers in the
//! room's waiters, then flags the partition (`want_budget`: a store of
//! `budget_wanted`, then an add of 0 to the partition's `work`, a
//! read-modify-write), then sends again, and parks only if that send is
//! refused too. Every resolution (and revoke) of the partition adds to
//! `work` before it reads the flag (`budget_freed`), and wakes the room if
//! it was set. The adds to `work` are totally ordered: a resolution whose
//! add comes after the waiter's sees the flag; one whose add came before is
//! seen by the waiter's send again (Acquire), so its effect on the budget
//! is in that decision. Either way no wake-up is lost. A resolution of a
//! progress tracker pays one relaxed load of a flag beside `work` for
//! this.
//!

use super::*;
use crate::progress::budget;

/// Each slot's record's position, on a progress tracker.
pub(crate) type Seqs = Pages<AtomicU64, 32, 20>;

/// The position of the record in slot `index`.
#[inline]
pub(crate) fn seq_of(seqs: &Seqs, index: usize) -> u64 {
    // Relaxed: written before the record was linked; readers follow the
    // link (or `last`, or `stopped`) with Acquire.
    seqs.get(index).map_or(0, |seq| seq.load(Ordering::Relaxed))
}

/// Why a checked link refused a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    OutOfOrder,
    OverBudget,
    /// The partition's life moved on since the send read it: a record of
    /// the newer life is queued. The send starts again, in the new life.
    Stale,
}

/// Why the budget check did not accept a record.
enum Undecided {
    /// Refused.
    Refused(Refusal),
    /// The walk did not end at the record the send would follow (a sender
    /// between its CAS and its link store, or the queue moved on): decide
    /// again.
    Again,
}

impl Watermarks {
    /// Stores a prepared record's position, before it is linked.
    #[inline]
    pub(crate) fn set_seq(&self, index: usize, seq: u64) {
        if let Some(seqs) = &self.seqs {
            // Relaxed: published by the link's Release store.
            seqs.get_or_alloc(index, || AtomicU64::new(0))
                .store(seq, Ordering::Relaxed);
        }
    }

    /// Links a prepared record of `life` at position `seq` into
    /// `partition`'s queue, if it is in order and within `max` characters
    /// of metadata (see the module docs); `tag` is the record's. On
    /// refusal nothing is linked.
    pub(crate) fn link_checked<O>(
        &self,
        slots: &Slab<O>,
        partition: usize,
        index: usize,
        record: (u32, u64, u32),
        max: usize,
    ) -> Result<(), Refusal> {
        let (tag, seq, life) = record;
        let queue = self
            .queues
            .get_or_alloc(partition, || CachePadded::new(Queue::new()));
        let seqs = self.seqs.as_ref().expect("a progress tracker");
        let me = node(index);
        let mut walk = None;
        // Acquire: the predecessor's position and life (written before its
        // link CAS) are visible, and with `OWED`, the debt (written before
        // the CAS that set it).
        let mut tail = queue.tail.load(Ordering::Acquire);
        loop {
            // The partition's debt, if it owes an offset.
            let owed = (tail & OWED != 0).then(|| queue.owed());
            let previous = tail_node(tail);
            // The life of the record we would follow (it is the tail, so its
            // slot is held and cannot move on), and its position if it is of
            // our life.
            let previous_life = (previous != 0).then(|| slots.slot_of(index_of(previous)).life());
            let before = previous_life
                .filter(|&previous_life| previous_life == life)
                .map(|_| seq_of(seqs, index_of(previous)));
            let decision = match (before, owed) {
                // The partition owes an offset of our life: only that one
                // is accepted (which pays the debt); see "Owed offsets".
                (_, Some((owed_seq, owed_life))) if owed_life == life && owed_seq != seq => {
                    Err(Undecided::Refused(Refusal::OutOfOrder))
                }
                // A newer life owes: the partition was revoked since we read
                // its life. Start again, in the new life.
                (_, Some((_, owed_life))) if newer(owed_life, life) => {
                    Err(Undecided::Refused(Refusal::Stale))
                }
                // A record of a newer life is queued: our send raced a revoke
                // of the partition, and must not queue behind the new life's
                // records, where the next send of the new life would take it
                // for its predecessor and skip its order and budget checks.
                // Mutant `stale_links_behind_new` (loom suite only): it does.
                #[cfg(not(inflight_mutant = "stale_links_behind_new"))]
                _ if previous_life.is_some_and(|previous| newer(previous, life)) => {
                    Err(Undecided::Refused(Refusal::Stale))
                }
                // Mutant `unordered_link` (loom suite only): no order check,
                // so a lower offset may queue behind a higher one.
                #[cfg(not(inflight_mutant = "unordered_link"))]
                (Some(before), _) if seq <= before => Err(Undecided::Refused(Refusal::OutOfOrder)),
                _ => {
                    // Positions this record adds to the partition's span
                    // (itself and those skipped before it); at least what it
                    // adds to the run form in bytes (see `budget`).
                    let units = before.map_or(1, |b| seq.saturating_sub(b).max(1));
                    self.budget_after(slots, partition, life, seq, units, tail, max, &mut walk)
                }
            };
            let credit = match decision {
                Ok(credit) => credit,
                Err(Undecided::Again) => {
                    // Wait for that sender's link store, as the advance does.
                    crate::sync::spin_hint();
                    // Acquire: as above.
                    tail = queue.tail.load(Ordering::Acquire);
                    continue;
                }
                Err(Undecided::Refused(refusal)) => {
                    // Decided against a tail that may have moved: look again.
                    // Acquire: as above.
                    let now = queue.tail.load(Ordering::Acquire);
                    if now != tail {
                        tail = now;
                        continue;
                    }
                    if refusal != Refusal::OverBudget {
                        return Err(refusal);
                    }
                    // Refused for the budget, not for order: the partition
                    // owes our offset (or we are of an ended life, or out of
                    // order after all, as `owe` decides).
                    return match self.owe(slots, partition, seq, life) {
                        Ok(()) => Err(Refusal::OverBudget),
                        Err(refusal) => Err(refusal),
                    };
                }
            };
            // AcqRel: Release publishes our position and reset link to the
            // next sender; Acquire sees our predecessor's. Decides our place
            // in the queue and in the partition's order at once, and, if
            // the tail carried a debt, clears it (we are the owed offset,
            // or the first record of a newer life).
            match queue.tail.compare_exchange(
                tail,
                tail_word(me, tag, credit),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => tail = now,
            }
        }
        if tail & OWED != 0 {
            // The debt is paid (or forgotten by a new life): release the
            // claim it held. Release: our CAS above, which cleared `OWED`,
            // comes before the next holder's writes of the debt.
            queue.owing.store(false, Ordering::Release);
        }
        // Relaxed: a statistic, as in `link`.
        queue.sent.fetch_add(1, Ordering::Relaxed);
        let previous = tail_node(tail);
        let link = if previous == 0 {
            &queue.first
        } else {
            // As in `link`: the predecessor is still queued.
            &slots.slot_of(index_of(previous)).next_queued
        };
        // Release: as in `link`.
        link.store(me, Ordering::Release);
        Ok(())
    }

    /// Records that `partition` owes position `seq` of `life`, whose send
    /// was refused for a reason other than order (see "Owed offsets" in the
    /// module docs). On a watermark tracker without progress, `seq` is the
    /// offset's key (see `ProgressConfig::key_of`), and no order is checked. `Ok` when the partition owes it now (it did already,
    /// or the debt is recorded), or when the send is of an ended life (a
    /// newer life forgets it: nothing is recorded); `Err(OutOfOrder)` when
    /// the offset is itself out of order, or another offset of `life` is
    /// owed: the send is then refused for order, and nothing is owed.
    pub(crate) fn owe<O>(
        &self,
        slots: &Slab<O>,
        partition: usize,
        seq: u64,
        life: u32,
    ) -> Result<(), Refusal> {
        // Mutant `owed_forgotten` (loom suite only): a refused offset is not
        // owed, so a later offset may be accepted and the refused one
        // counted done.
        if cfg!(inflight_mutant = "owed_forgotten") {
            return Ok(());
        }
        let queue = self
            .queues
            .get_or_alloc(partition, || CachePadded::new(Queue::new()));
        // None on a watermark tracker without progress: no order to check.
        let seqs = self.seqs.as_ref();
        // Whether we hold `owing`, and the epoch our debt takes.
        let mut claimed = false;
        let mut epoch = 0;
        // Acquire: as in `link_checked`.
        let mut tail = queue.tail.load(Ordering::Acquire);
        loop {
            let node = tail_node(tail);
            if tail & OWED != 0 {
                // Only the claim's holder sets the flag.
                debug_assert!(!claimed, "a debt set while we hold the claim");
                let (owed_seq, owed_life) = queue.owed();
                let decided = if owed_life == life {
                    // Owed already (a retry of the owed offset), or another.
                    Some(if owed_seq == seq {
                        Ok(())
                    } else {
                        Err(Refusal::OutOfOrder)
                    })
                } else if newer(owed_life, life) {
                    // Our life ended: nothing to owe.
                    Some(Ok(()))
                } else {
                    None
                };
                if let Some(decided) = decided {
                    // Decided against a tail that may have moved (or a debt
                    // taken over): look again. Acquire: as above.
                    let now = queue.tail.load(Ordering::Acquire);
                    if now == tail {
                        return decided;
                    }
                    tail = now;
                    continue;
                }
                // A debt of an ended life: take it over. Clearing the flag
                // hands us its claim; the credit left is 0 (safe: it only
                // makes the next sender walk). AcqRel: Acquire, after the
                // debt's holder; Release, for symmetry with the link CAS.
                match queue.tail.compare_exchange(
                    tail,
                    tail_word(node, tail_tag(tail), 0),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        claimed = true;
                        // The next debt at this record takes a new epoch,
                        // so that no CAS expecting the old one succeeds.
                        // Mutant `owed_epochless` (loom suite only): it
                        // takes the same, and a stalled sender of the old
                        // debt's offset links and clears the new one.
                        epoch = if cfg!(inflight_mutant = "owed_epochless") {
                            owed_epoch(tail)
                        } else {
                            owed_epoch(tail) + 1
                        };
                        tail = tail_word(node, tail_tag(tail), 0);
                    }
                    Err(now) => {
                        tail = now;
                        continue;
                    }
                }
            }
            if !claimed {
                // Acquire: after the previous holder's writes and release.
                if queue
                    .owing
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    // Held, and the tail carries no debt (or did not when we
                    // read it): its holder is about to set `OWED`, or has
                    // just cleared it by linking and is about to release the
                    // claim. Wait for either, as `link_checked` waits for a
                    // link store: on the refusal path only.
                    crate::sync::spin_hint();
                    // Acquire: as above.
                    tail = queue.tail.load(Ordering::Acquire);
                    continue;
                }
                claimed = true;
            }
            // We hold the claim, and the tail carries no debt: only we can
            // set one. Decide the order against the record we would follow,
            // as `link_checked` does.
            let previous_life = (node != 0).then(|| slots.slot_of(index_of(node)).life());
            let refused = match previous_life {
                // Of an ended life: a newer life's record is queued.
                Some(previous) if newer(previous, life) => Some(Ok(())),
                Some(previous)
                    if previous == life
                        && seqs.is_some_and(|seqs| seq <= seq_of(seqs, index_of(node))) =>
                {
                    Some(Err(Refusal::OutOfOrder))
                }
                _ => None,
            };
            if let Some(refused) = refused {
                // Acquire: as above.
                let now = queue.tail.load(Ordering::Acquire);
                if now != tail {
                    tail = now;
                    continue;
                }
                // Release: our reads come before the next holder's writes.
                queue.owing.store(false, Ordering::Release);
                return refused;
            }
            // Release, both: a reader that sees either sees the CAS that
            // cleared the debt before (ours or the payer's), and so finds
            // the tail it read gone.
            queue.owed_seq.store(seq, Ordering::Release);
            queue.owed_life.store(life, Ordering::Release);
            // Mutant `owed_unchecked` (loom suite only): the flag is set
            // whatever the tail has become since the order was decided, so
            // a record linked meanwhile above the owed offset stays.
            #[cfg(inflight_mutant = "owed_unchecked")]
            {
                queue.tail.fetch_or(OWED, Ordering::AcqRel);
                return Ok(());
            }
            // AcqRel: Release publishes the debt with the flag; Acquire, as
            // the link CAS. A sender that decided without the flag expects
            // the tail without it, and fails.
            match queue.tail.compare_exchange(
                tail,
                owed_word(node, tail_tag(tail), epoch),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                // A record linked meanwhile (nothing else changes the tail
                // while we hold the claim and it carries no debt): decide
                // again against it.
                Err(now) => tail = now,
            }
        }
    }

    /// Asks the next resolution (or revoke) of a record of `partition` to
    /// wake the room's waiters: a sender registered there was refused for
    /// the metadata budget, and sends again after this. See "Waiting for the
    /// budget" in the module docs.
    pub(crate) fn want_budget(&self, partition: usize) {
        let Some(queue) = self.queues.get(partition) else {
            return;
        };
        // Relaxed: published by the read-modify-write of `work` below.
        queue.budget_wanted.store(true, Ordering::Relaxed);
        // AcqRel: adds nothing, but takes a place among the resolutions'
        // adds to `work`: a resolution whose add comes later sees the flag
        // (Release); one whose add came before is seen by the send after
        // this (Acquire).
        queue.work.fetch_add(0, Ordering::AcqRel);
    }

    /// After a resolution (or revoke) of a record of `partition` added to
    /// its `work`: whether a sender waits for the partition's budget (the
    /// caller wakes the room's waiters, last). Clears the flag.
    #[inline]
    pub(crate) fn budget_freed(&self, partition: usize) -> bool {
        // Mutant `lost_budget_wakeup` (loom suite only): a resolution never
        // tells that a sender waits for the budget, so nobody wakes it.
        if cfg!(inflight_mutant = "lost_budget_wakeup") {
            return false;
        }
        self.queues.get(partition).is_some_and(|queue| {
            // Relaxed: ordered after the waiter's store by the two
            // read-modify-writes of `work` (see `want_budget`).
            queue.budget_wanted.load(Ordering::Relaxed)
                // Relaxed: the waiters are woken next, and look again.
                && queue.budget_wanted.swap(false, Ordering::Relaxed)
        })
    }

    /// The credit the tail keeps if a record at `seq`, `units` positions
    /// past its predecessor's, is linked, or `OverBudget`.
    #[allow(clippy::too_many_arguments)]
    fn budget_after<O>(
        &self,
        slots: &Slab<O>,
        partition: usize,
        life: u32,
        seq: u64,
        units: u64,
        tail: u64,
        max: usize,
        walk: &mut Option<Walk>,
    ) -> Result<u64, Undecided> {
        let credit = tail_credit(tail);
        // A failure stops the watermark, not the budget: what was acked
        // past it is still reported while the life keeps it, so the walk
        // reads it, from the failed record on, and the check bounds it as
        // before the failure.
        if credit >= units {
            return Ok(credit - units);
        }
        let walk = walk.get_or_insert_with(Walk::default);
        self.walk(slots, partition, life, walk);
        if walk.stopped_at.is_some() {
            // The life ended (a revoke let its kept records go): it reports
            // nothing past its failure, so no budget to keep.
            return Ok(credit);
        }
        // The walk must have ended at the very record we would follow (its
        // node and tag: a slot reused since would end it at the same node),
        // so that its records are exactly those before us: in position
        // order, below ours. Anything else means the queue moved on since we
        // read the tail, and the CAS would fail: decide again.
        let exact = walk.end == tail_word(tail_node(tail), tail_tag(tail), 0);
        let in_order = walk.records.windows(2).all(|w| w[0].0 < w[1].0)
            && walk.records.last().is_none_or(|&(last, _)| last < seq);
        if !exact || !in_order {
            return Err(Undecided::Again);
        }
        if let Some(credit) = budget::check(&walk.records, seq, max) {
            return Ok(credit);
        }
        if walk.kept != 0 {
            // A kept life: its failed records are not done for good. If,
            // with every record still open acked, ours would not fit
            // either, nothing can free the budget: the life stops keeping
            // (see "Keeping a failure, bounded"), and, read as stopped,
            // skips the check. In place: the walk is read again anyway.
            for record in &mut walk.records {
                if record.1 == Seen::Open {
                    record.1 = Seen::Done;
                }
            }
            // Mutant `kept_past_bound` (loom suite only): the life keeps
            // its records, and the send is refused for good.
            if budget::check(&walk.records, seq, max).is_none()
                && cfg!(not(inflight_mutant = "kept_past_bound"))
            {
                if let Some(queue) = self.queues.get(partition) {
                    // Relaxed: read by `keeps`, which orders nothing on it;
                    // our own walk, next, reads our store.
                    queue.unkept.store(walk.kept, Ordering::Relaxed);
                }
                return Err(Undecided::Again);
            }
        }
        Err(Undecided::Refused(Refusal::OverBudget))
    }

    /// The record last queued in `partition`, as a tail word without credit
    /// (its node and tag), 0 for none or on a tracker without progress.
    /// With `sent`, what a `drain_partition` waits for: on a progress
    /// tracker a send counts itself in `sent` only after its link CAS, so
    /// two senders may count in the other order than they queued, and a
    /// record sent before the drain may be missing from the count while a
    /// later one is in it. The tail the drain reads is at or after every
    /// record sent before it, and the watermark passes records in queue
    /// order.
    pub(crate) fn last_queued(&self, partition: usize) -> u64 {
        if self.seqs.is_none() {
            return 0;
        }
        self.queues.get(partition).map_or(0, |queue| {
            // Acquire: a send that returned before the caller's call
            // happened before this load, so its link CAS is this value or
            // one before it.
            let tail = queue.tail.load(Ordering::Acquire);
            tail_word(tail_node(tail), tail_tag(tail), 0)
        })
    }

    /// Whether the watermark has passed `record` (from
    /// [`last_queued`](Self::last_queued); 0 has nothing to pass). Call
    /// after [`short_of`](Self::short_of), whose read-modify-write of
    /// `work` orders this read against the advancer's, as for the count.
    pub(crate) fn has_passed<O>(&self, slots: &Slab<O>, partition: usize, record: u64) -> bool {
        // Mutant `sent_after_link` (loom suite only): the drain trusts
        // `sent` alone, which a racing sender may not have counted yet.
        if cfg!(inflight_mutant = "sent_after_link") || record == 0 {
            return true;
        }
        let Some(queue) = self.queues.get(partition) else {
            return true;
        };
        // Acquire: pairs with the advancer's Release store; the head it
        // names was passed.
        let last = queue.last.load(Ordering::Acquire);
        if tail_word(tail_node(last), tail_tag(last), 0) == record {
            return true;
        }
        // Acquire (inside `state`): a hold released before. The advancer
        // drops a record's `QUEUED` hold only once it has passed it (and
        // the slot takes a new tag only after that), so either says so.
        let state = slots.slot_of(index_of(tail_node(record))).state();
        tag(state) != tail_tag(record) || state & QUEUED == 0
    }

    /// Swaps in the fingerprint of the progress about to be reported for
    /// `partition`; returns the one reported before.
    pub(crate) fn swap_seen(&self, partition: usize, fingerprint: u64) -> u64 {
        self.queues.get(partition).map_or(0, |queue| {
            // Relaxed: a later `progress` call that begins after this one
            // returned sees it; concurrent calls may both report.
            queue.seen.swap(fingerprint, Ordering::Relaxed)
        })
    }

    /// The fingerprint last reported for `partition`.
    pub(crate) fn seen(&self, partition: usize) -> u64 {
        // Relaxed: as in `swap_seen`.
        self.queues
            .get(partition)
            .map_or(0, |queue| queue.seen.load(Ordering::Relaxed))
    }
}
