//! Linking records into a partition's queue, on a watermark tracker
//! without progress (a progress tracker links with `order::link_checked`):
//! `look` at the tail while the send still holds its partition key, then
//! `link` with a CAS from there, or, if the partition owes an offset,
//! `link_owing`, which decides against the debt first (see "Owed offsets"
//! in `order`). A batch links its chunk as one chain (`chain`), with one
//! CAS.

use super::*;

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

    /// Queues `n` prepared records, from slot `first` to slot `last`
    /// (holding `QUEUED`, not yet published; each but the last already
    /// links to the next, see `chain`) at the end
    /// of `queue`, found by `look`, whose tail word `tail` is the first
    /// guess. Call before publishing the records, so that their resolution
    /// always finds them linked.
    ///
    /// A debt recorded since `look` stays on the tail (its flag and epoch):
    /// the records are ordered before it, as if they had linked first. On a
    /// watermark tracker that is the same decision: a debt depends on the
    /// tail record's life only, not on its offset (see `owe`).
    // Not inlined, as `advance`.
    #[inline(never)]
    pub(crate) fn link<O>(
        &self,
        slots: &Slab<O>,
        queue: &Queue,
        records: (usize, usize, u64),
        tail: u64,
    ) {
        let (_, last, _) = records;
        let mut tail = tail;
        loop {
            let word = (tail & !NODE_BITS) | u64::from(node(last));
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
        linked_after(slots, queue, records, tail_node(tail));
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

/// After the CAS that made the last of `records` (as `link` takes them)
/// the tail of `queue` in place of `previous`: counts them and links the
/// first behind `previous`.
fn linked_after<O>(slots: &Slab<O>, queue: &Queue, records: (usize, usize, u64), previous: u32) {
    let (first, _, n) = records;
    // Relaxed: a statistic; `passed` never overtakes it because a record
    // is counted here before it can be passed (the link below).
    queue.sent.fetch_add(n, Ordering::Relaxed);
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
        records: (usize, usize, u64),
        key: u64,
        life: u32,
    ) -> Result<(), Refusal> {
        let (_, last, _) = records;
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
                        return Err(Refusal::OutOfOrder);
                    }
                    tail = now;
                    continue;
                }
                pays = !newer(owed_life, life);
            }
            let word = if pays {
                tail_word(node(last), 0, 0)
            } else {
                (tail & !NODE_BITS) | u64::from(node(last))
            };
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
        linked_after(slots, queue, records, tail_node(tail));
        Ok(())
    }
}
