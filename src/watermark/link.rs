//! Linking records into a partition's queue, on a watermark tracker
//! without progress (a progress tracker links with `order::link_checked`):
//! `look` at the tail while the send still holds its partition key, then
//! `link` with a CAS from there, or, if the partition owes an offset,
//! `link_owing`, which decides against the debt first (see "Owed offsets"
//! in `order`). A batch links its chunk as one chain (`chain`), with one
//! CAS.

use super::*;

/// The records a send (one) or a batch's chunk (several) links at once:
/// slots `first` to `last`, each but the last chained to the next (see
/// `Watermarks::chain`), `n` of them, the last one's tag `tag`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub(crate) first: usize,
    pub(crate) last: usize,
    pub(crate) n: u64,
    pub(crate) tag: u32,
}

impl Run {
    /// One record: slot `index`, tag `tag`.
    pub(crate) fn one(index: usize, tag: u32) -> Self {
        Self {
            first: index,
            last: index,
            n: 1,
            tag,
        }
    }

    /// The tail word with `run` linked after `tail`'s record, keeping
    /// `tail`'s debt (its flag and epoch) if it has one. The last record's
    /// tag is in it, so that a CAS expecting an old word fails once the
    /// slot went on to another record (an ABA that could otherwise clear a
    /// live debt, see `link_owing`).
    fn after(self, tail: u64) -> u64 {
        // Mutant `tagless_tail` (loom suite only): the word carries no tag,
        // as before review 5, so a reused tail slot brings an old word back.
        let tag = if cfg!(inflight_mutant = "tagless_tail") {
            0
        } else {
            self.tag
        };
        (tail & DEBT_BITS) | tail_word(node(self.last), tag, 0)
    }

    /// The tail word with `run` linked and no debt.
    fn paying(self) -> u64 {
        self.after(0)
    }
}

impl Watermarks {
    /// Where a send of a watermark tracker without progress starts linking
    /// (see `link`): `partition`'s queue and its tail word, or `None` for
    /// the word when the partition owes an offset: the send then decides
    /// against the debt (`link_owing`, see "Owed offsets" in `order`).
    #[inline]
    pub(crate) fn look(&self, partition: usize) -> (&Queue, Option<u64>) {
        let queue = self
            .queues
            .get_or_alloc(partition, || CachePadded::new(Queue::new()));
        // Acquire: a debt recorded before this send began is seen with its
        // flag (its `owed_*` stores come before the CAS that set it).
        let tail = queue.tail.load(Ordering::Acquire);
        // Mutant `unowed_look` (loom suite only): a send never sees a debt,
        // so an offset sent after a refused one is accepted and the
        // watermark passes the offset never sent.
        let owes = tail & OWED != 0 && !cfg!(inflight_mutant = "unowed_look");
        (queue, (!owes).then_some(tail))
    }

    /// Queues the prepared records of `run` (holding `QUEUED`, not yet
    /// published) at the end of `queue`, found by `look`, whose tail word
    /// `tail` is the first guess. Call before publishing the records, so
    /// that their resolution always finds them linked.
    ///
    /// A debt recorded since `look` stays on the tail (its flag and epoch):
    /// the records are ordered before it, as if they had linked first. On a
    /// watermark tracker that is the same decision: a debt depends on the
    /// tail record's life only, not on its offset (see `owe`).
    // Not inlined, as `advance`.
    #[inline(never)]
    pub(crate) fn link<O>(&self, slots: &Slab<O>, queue: &Queue, run: Run, tail: u64) {
        count(queue, run);
        let mut tail = tail;
        loop {
            let word = run.after(tail);
            // AcqRel: Release hands our last slot's reset link (`next_queued`
            // = 0, written at prepare) to the next sender, who stores into
            // it, and the links within our records; Acquire sees our
            // predecessor's reset link before we store into it. Relaxed on
            // failure: we try again.
            match queue
                .tail
                .compare_exchange_weak(tail, word, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => tail = now,
            }
        }
        linked_after(slots, queue, run, tail_node(tail));
    }

    /// Links the prepared record in slot `index` to the one in slot `next`,
    /// before both are queued together by `link`.
    pub(crate) fn chain<O>(slots: &Slab<O>, index: usize, next: usize) {
        // Relaxed: published with the records by `link`'s Release steps.
        slots
            .slot_of(index)
            .next_queued
            .store(node(next), Ordering::Relaxed);
    }
}

/// Counts `run`'s records in `queue`'s `sent`, before their CAS (see
/// `drain_partition`, which waits for `sent` to be passed).
fn count(queue: &Queue, run: Run) {
    // Mutant `counted_after_link` (loom suite only): the records are
    // counted after their CAS, so a `drain_partition` after a later send
    // can miss an earlier record linked ahead of it.
    if cfg!(inflight_mutant = "counted_after_link") {
        return;
    }
    // Relaxed: before the linking CAS (AcqRel), so that a later sender
    // whose CAS follows ours (Acquire) sees the count in its own
    // `drain_partition`; and before the record can be passed, so `passed`
    // never overtakes `sent`.
    queue.sent.fetch_add(run.n, Ordering::Relaxed);
}

/// After the CAS that made the last of `run` the tail of `queue` in place
/// of `previous`: links the first behind `previous`.
fn linked_after<O>(slots: &Slab<O>, queue: &Queue, run: Run, previous: u32) {
    if cfg!(inflight_mutant = "counted_after_link") {
        // Relaxed: the mutant's late count.
        queue.sent.fetch_add(run.n, Ordering::Relaxed);
    }
    let first = run.first;
    let link = if previous == 0 {
        &queue.first
    } else {
        // The predecessor is still queued (its successor, ours, is not
        // yet linked, so the watermark cannot have moved past it): its
        // slot is held and cannot be reused.
        &slots.slot_of(index_of(previous)).next_queued
    };
    // Release: publishes our prepared slots (value, partition, state,
    // and the links between them) to the advancer that follows this
    // link (Acquire).
    link.store(node(first), Ordering::Release);
}

impl Watermarks {
    /// The end of `link` on a watermark tracker without progress when
    /// `look` found the partition owing: decides `records` (as `link` takes
    /// them, sent in `life`, the first with the key `key`) against the
    /// debt, and links them unless refused. The owed offset pays the debt
    /// (its link clears the flag, then releases the claim), as does any
    /// record of a newer life than the debt's (a revoke forgot it); another
    /// offset of the debt's life is refused `OutOfOrder`, and nothing is
    /// linked. Records of an older life than the debt's are of an ended
    /// life: they link before it, as `link` does, and the send's re-check
    /// of the life releases them.
    #[cold]
    pub(crate) fn link_owing<O>(
        &self,
        slots: &Slab<O>,
        queue: &Queue,
        run: Run,
        key: u64,
        life: u32,
    ) -> Result<(), Refusal> {
        count(queue, run);
        let mut pays;
        // Acquire: as in `look`.
        let mut tail = queue.tail.load(Ordering::Acquire);
        loop {
            pays = false;
            if tail & OWED != 0 {
                let (owed_key, owed_life) = queue.owed();
                if owed_life == life && owed_key != key {
                    // Decided against a tail that may have moved (or a debt
                    // taken over): look again. Acquire: as above.
                    let now = queue.tail.load(Ordering::Acquire);
                    if now == tail {
                        if !cfg!(inflight_mutant = "counted_after_link") {
                            // Relaxed: as `count`; nothing was linked.
                            queue.sent.fetch_sub(run.n, Ordering::Relaxed);
                        }
                        return Err(Refusal::OutOfOrder);
                    }
                    tail = now;
                    continue;
                }
                pays = !newer(owed_life, life);
            }
            let word = if pays { run.paying() } else { run.after(tail) };
            // AcqRel: as in `link`; the Acquire also after the debt's
            // holder, whose claim we take over when we clear the flag.
            match queue
                .tail
                .compare_exchange(tail, word, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => tail = now,
            }
        }
        if pays {
            // The debt is paid (or forgotten by a new life): release the
            // claim it held. Release: our CAS above, which cleared `OWED`,
            // comes before the next holder's writes of the debt.
            queue.owing.store(false, Ordering::Release);
        }
        linked_after(slots, queue, run, tail_node(tail));
        Ok(())
    }
}
