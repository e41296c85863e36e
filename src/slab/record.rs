//! A record's transitions of its slot's state word: prepare, publish,
//! resolve, the holds' release and mark, and the reads a revoke, a drain
//! or a report makes of a live record (see the parent module's state
//! diagram).

use super::*;

impl<O> Slab<O> {
    /// Moves `value` into a slot the caller owns (fresh from [`alloc`]), with
    /// the next tag and the hold bits `holds`, and returns that tag. The slot
    /// stays invisible to tickets until [`publish`](Self::publish).
    #[inline]
    pub(crate) fn prepare(
        &self,
        slot: &Slot<O>,
        value: O,
        partition: u32,
        life: u32,
        holds: u64,
    ) -> u32 {
        let next = self.stamp(slot, holds);
        self.fill(slot, value, partition, life);
        next
    }

    /// Gives a slot the caller owns its next tag and the hold bits `holds`
    /// (still `FREE`), and returns the tag: the first half of `prepare`.
    #[inline]
    pub(crate) fn stamp(&self, slot: &Slot<O>, holds: u64) -> u32 {
        debug_assert_eq!(holds & !HOLDS, 0);
        // Relaxed: the slot is still private to this thread.
        let previous_state = slot.state.load(Ordering::Relaxed);
        let next = next_tag(previous_state);
        // A remembered revoked tag (see `REMEMBERS`) survives the reuse.
        let remembers = previous_state & REMEMBERS;
        // A store: nothing else writes the word of a slot we own (a
        // revoke's scan only reads it, ordered by the barrier pair after
        // the publish, see `revoke.rs`); a newer record may clear `HELD`
        // only once the install made the slot reachable. Release: it
        // replaces a read-modify-write that continued the release
        // sequences of the slot's earlier writes, so a reader that
        // acquires this value must still see what they published; it
        // does through us, who acquired the slot from its free list (a
        // stale ticket's resolver sees the `covered` tag `REMEMBERS`
        // vouches for; a walk that finds the slot moved on, a newer
        // watermark head). A plain `mov` on x86.
        slot.state.store(
            (u64::from(next) << 32) | holds | FREE | remembers,
            Ordering::Release,
        );
        // Release fence: the new tag before the fields `fill` writes next,
        // for a progress walk that reads a slot without holding it
        // (`watermark::order`): if it reads any of them (or the position
        // the send stores next), its Acquire fence makes its check of the
        // state see the new tag, and it drops what it read. Free on x86.
        fence(Ordering::Release);
        next
    }

    /// Writes a record's offset, partition and life into a slot the caller
    /// owns; the second half of `prepare`, and all a batch's record that
    /// nothing points at before its publish needs (see
    /// [`publish_filled`](Self::publish_filled)).
    #[inline]
    pub(crate) fn fill(&self, slot: &Slot<O>, value: O, partition: u32, life: u32) {
        // SAFETY: the caller owns the slot (it came from `alloc`), so nothing
        // else reads or writes its value; a free slot holds no value.
        slot.value.with_mut(|v| unsafe { (*v).write(value) });
        // Relaxed, all three: private until the Release publish (or a
        // Release cell CAS or queue link that makes it reachable as held).
        slot.link.store(partition, Ordering::Relaxed);
        slot.life.store(life, Ordering::Relaxed);
        slot.next_queued.store(0, Ordering::Relaxed);
    }

    /// Publishes a filled slot that was never stamped, in one step: its
    /// next tag, `LIVE`, no hold; returns the tag. Only for a record that
    /// nothing reaches before it is resolvable, on a tracker without
    /// watermarks (no queue links it, no cell holds it, no walk reads it):
    /// a batch's records but the last of each chunk.
    #[inline]
    pub(crate) fn publish_filled(&self, slot: &Slot<O>) -> u32 {
        // Relaxed: the slot is still private to this thread.
        let previous_state = slot.state.load(Ordering::Relaxed);
        let next = next_tag(previous_state);
        let remembers = previous_state & REMEMBERS;
        // Release store: publishes the value, fields and generation to the
        // resolver's Acquire CAS and a revoke's Acquire scan, as `publish`
        // (which this is, with `stamp` folded in). A store: nothing else
        // writes the word of a slot nothing reaches (the batch's light
        // barrier after its publishes orders it against a revoke).
        slot.state.store(
            (u64::from(next) << 32) | LIVE | remembers,
            Ordering::Release,
        );
        next
    }

    /// Records the generation a prepared slot entered.
    #[inline]
    pub(crate) fn set_generation(&self, slot: &Slot<O>, generation: *const ()) {
        // Relaxed: published by the Release `publish` that follows.
        slot.generation
            .store(generation as *mut (), Ordering::Relaxed);
    }

    /// Drops holds a prepared slot took in advance that nothing will use (it
    /// lost the race for its partition cell, or it is being taken back).
    pub(crate) fn unhold_prepared(&self, slot: &Slot<O>, holds: u64) {
        // Relaxed: nothing else reads these bits of an unpublished slot: a
        // newer record may clear HELD, but only a hold it displaced.
        slot.state.fetch_and(!holds, Ordering::Relaxed);
    }

    /// Adds `holds` to a prepared, unpublished slot: the last record of a
    /// batch's chunk, which its partition cell is about to hold.
    #[inline]
    pub(crate) fn hold_prepared(&self, slot: &Slot<O>, holds: u64) {
        // Relaxed: nothing reads these bits before the install's AcqRel
        // CAS or the publish, and nothing else writes the word yet.
        slot.state.fetch_or(holds, Ordering::Relaxed);
    }

    /// Makes a prepared slot resolvable by its ticket.
    #[inline]
    pub(crate) fn publish(&self, slot: &Slot<O>) {
        // Release: publishes the value and generation to whoever resolves
        // the ticket (their Acquire CAS), and to a revoke's Acquire scan
        // (ordered against it by the send's light barrier that follows, see
        // `revoke.rs`). An RMW, not a store, because a newer record of the
        // partition may clear `HELD` concurrently (the install made the
        // slot reachable); a record nothing holds is published with a store
        // (`publish_filled`).
        slot.state.fetch_or(LIVE, Ordering::Release);
    }

    /// [`publish`](Self::publish) for a slot nothing holds (an inline
    /// offset's record, see `cell`): a plain store, because nothing else
    /// writes the state word of a slot nothing reaches before its publish
    /// (a queue that links it writes only its own words until the record
    /// is resolved; a revoke's scan only reads).
    #[inline]
    pub(crate) fn publish_unheld(&self, slot: &Slot<O>) {
        // Relaxed: our own prepare's value.
        let state = slot.state.load(Ordering::Relaxed);
        debug_assert_eq!(state & HELD, 0);
        // Release: as in `publish`; ordered against a revoke by the send's
        // light barrier that follows, as `publish` is.
        slot.state.store(state | LIVE, Ordering::Release);
    }

    /// Takes the value back out of a prepared, unpublished slot that is not
    /// held, and frees the slot (empty: nothing left to drop).
    pub(crate) fn unprepare(&self, index: usize, slot: &Slot<O>) -> O {
        // SAFETY: prepared by this thread and never published or held, so the
        // value is initialised and private.
        let value = slot.value.with(|v| unsafe { (*v).assume_init_read() });
        self.push_slot(index, slot);
        value
    }

    /// Frees a prepared, unpublished slot that is not held, leaving its value
    /// in it `STALE` for the slot's next user to drop: the back-out of a
    /// send that is unwinding, which must run no user code.
    pub(crate) fn abandon_prepared(&self, index: usize, slot: &Slot<O>) {
        // Relaxed: the slot is private to this thread until the push.
        slot.state.fetch_or(STALE, Ordering::Relaxed);
        self.push_slot(index, slot);
    }

    /// Resolves the record in `index` if it is `LIVE` with `tag`.
    ///
    /// Returns the generation the record entered, its partition, and whether
    /// the slot was freed (it was not held). A freed slot is not yet back on
    /// a free list: the caller finishes with it, then calls
    /// [`recycle_slot`](Self::recycle_slot). Its offset stays in it, `STALE`.
    #[inline(always)]
    pub(crate) fn resolve(
        &self,
        index: usize,
        ticket_tag: u32,
        outcome: Outcome,
    ) -> Result<Resolved<'_, O>, ResolveError> {
        if ticket_tag == 0 {
            return Err(ResolveError::Unknown); // no ticket ever has tag 0
        }
        let slot = self.get(index).ok_or(ResolveError::Unknown)?;
        // Acquire: pairs with the sender's Release publish.
        let mut current = slot.state.load(Ordering::Acquire);
        loop {
            let slot_tag = tag(current);
            // Mutant `unchecked_tag` (loom suite only) compiles this check
            // out: a stale raw ticket resolves whatever record owns the slot.
            #[cfg(not(inflight_mutant = "unchecked_tag"))]
            if slot_tag != ticket_tag {
                // Relaxed: written before the Release store that set
                // REMEMBERS, which our Acquire load of `state` read (or a
                // later value, by a Release store of a later owner, who
                // took the slot with an Acquire pop after it).
                if current & REMEMBERS != 0 && slot.covered.load(Ordering::Relaxed) == ticket_tag {
                    return Err(ResolveError::Revoked);
                }
                return Err(classify_stale(slot_tag, ticket_tag, self.first_tag));
            }
            if status(current) != LIVE {
                return Err(if current & REVOKED != 0 {
                    ResolveError::Revoked
                } else {
                    ResolveError::AlreadyResolved
                });
            }
            let held = current & HOLDS != 0;
            // Relaxed, all three: ordered by the Acquire load of `state` that
            // saw this record LIVE. Read before the CAS: once a held slot is
            // resolved, its holder may free and reuse it at once. The CAS
            // from LIVE(tag) proves the reads belong to this record.
            let generation = slot.generation.load(Ordering::Relaxed);
            let partition = slot.link.load(Ordering::Relaxed);
            // Only failures (and revokes) need it.
            let life = if outcome == Outcome::Ack {
                0
            } else {
                slot.life.load(Ordering::Relaxed)
            };
            let next = match (held, outcome) {
                // FREE, same tag; the offset stays until the slot's reuse.
                (false, Outcome::Revoke) => (current & !STATUS) | STALE | REVOKED,
                (false, _) => (current & !STATUS) | STALE,
                (true, Outcome::Ack) => (current & !STATUS) | ACKED,
                (true, Outcome::Fail) => (current & !STATUS) | FAILED,
                // Passed, never marked, by a watermark (see `watermark`).
                (true, Outcome::Revoke) => (current & !STATUS) | FAILED | REVOKED,
            };
            // Nothing is written to the slot before this CAS decides whose
            // the record is: an ack that wins it may have the advance mark
            // the record, whose count lives in `covered`. A revoked record
            // is remembered for its ticket (`REMEMBERS`) by whoever frees
            // its slot, which owns it then (see `quarantine`).
            //
            // Mutant `covered_before_cas` (loom suite only): the revoke
            // writes its tag into `covered` first, so a lost CAS overwrites
            // the count of the mark the winning ack's advance publishes.
            #[cfg(inflight_mutant = "covered_before_cas")]
            if outcome == Outcome::Revoke {
                slot.covered.store(ticket_tag, Ordering::Relaxed);
            }
            // AcqRel: Acquire sees the sender's value and generation; Release
            // orders this resolution before whoever frees or reuses the slot.
            match slot.state.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(Resolved {
                        slot,
                        generation,
                        partition,
                        life,
                        freed: !held,
                        watched: current & WATCHED != 0,
                    })
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Mutant `ack_after_revoke` (loom suite only): what `resolve` would
    /// return for the record, without changing its state.
    #[cfg(inflight_mutant = "ack_after_revoke")]
    pub(crate) fn resolve_peek(&self, index: usize, ticket_tag: u32) -> Option<Resolved<'_, O>> {
        let slot = self.get(index)?;
        let current = slot.state.load(Ordering::Acquire);
        (tag(current) == ticket_tag && status(current) == LIVE).then(|| Resolved {
            slot,
            generation: slot.generation.load(Ordering::Relaxed),
            partition: slot.link.load(Ordering::Relaxed),
            life: slot.life.load(Ordering::Relaxed),
            freed: false,
            watched: current & WATCHED != 0,
        })
    }

    /// Puts a slot whose state this thread set to `FREE` (or that it took
    /// and did not use) back on a free list. A freed record's offset stays
    /// in it, `STALE`, until the slot's next [`alloc`](Self::alloc): no user
    /// code runs here.
    #[inline]
    pub(crate) fn recycle_slot(&self, index: usize, slot: &Slot<O>) {
        self.push_slot(index, slot);
    }

    /// [`recycle_slot`](Self::recycle_slot) for a slot whose freeing state
    /// was `state`: a revoked record's slot goes to the quarantine.
    #[inline]
    fn recycle_freed(&self, index: usize, slot: &Slot<O>, state: u64) {
        if state & REVOKED != 0 {
            self.quarantine(index, slot);
        } else {
            self.push_slot(index, slot);
        }
    }

    /// Frees the slot of a record a revoke released (see `quarantine`).
    pub(crate) fn quarantine_slot(&self, index: usize, slot: &Slot<O>) {
        self.quarantine(index, slot);
    }

    /// Frees the slot of a revoked record (the caller freed it and owns
    /// it): remembers the record's tag for its ticket (see `REMEMBERS`),
    /// then puts the slot on the quarantine, which is reused last.
    #[cold]
    fn quarantine(&self, index: usize, slot: &Slot<O>) {
        // Relaxed: the slot is ours; its tag moves on only at its reuse.
        let state = slot.state.load(Ordering::Relaxed);
        // Relaxed: published by the Release store below (to a resolver
        // that reads `REMEMBERS`) and the Release push (to the next user).
        slot.covered.store(tag(state), Ordering::Relaxed);
        // Release: a stale ticket's resolver that reads `REMEMBERS` (with
        // its Acquire load) sees the tag in `covered`. A store: the slot is
        // free, so nothing else writes its word.
        slot.state.store(state | REMEMBERS, Ordering::Release);
        // Release (inside `push`): hands the slot to the next popper.
        stack::push(&self.quarantine, index as u32 + 1, &slot.link);
    }

    /// The number of slots ever handed out: every record lives below it.
    /// For a revoke's scan, after its heavy barrier: a fresh-slot claim of
    /// `alloc_fresh` is seen here, or its send sees the revoke's new life
    /// (see `revoke.rs`). A page below it may not be allocated yet (the
    /// claim comes first): the scan skips it.
    pub(crate) fn used(&self) -> usize {
        // Acquire: the claims it counts, and what their claimers did
        // before.
        self.next_unused.load(Ordering::Acquire)
    }

    /// The number of slots ever handed out, for the statistics.
    pub(crate) fn allocated(&self) -> usize {
        // Relaxed: a statistic.
        self.next_unused.load(Ordering::Relaxed)
    }

    /// Reads `index`'s state for `Tracker::revoke`'s scan, which runs after
    /// the revoke's heavy barrier: a send's publish before its light
    /// barrier is seen here, or that send sees the revoke's bump.
    pub(crate) fn scan(&self, index: usize) -> Option<(&Slot<O>, u64)> {
        let slot = self.get(index)?;
        // Acquire: pairs with the sender's Release publish, so the
        // record's partition and life read next are its own.
        Some((slot, slot.state.load(Ordering::Acquire)))
    }

    /// Sets `WATCHED` on `index` if it still holds the unresolved record of
    /// `state`; true if it does (its resolution will then wake waiters).
    pub(crate) fn watch(&self, index: usize, state: u64) -> bool {
        let slot = self.slot(index);
        let mut current = state;
        loop {
            if tag(current) != tag(state) || status(current) != LIVE {
                return false;
            }
            if current & WATCHED != 0 {
                return true;
            }
            // AcqRel: the resolution's CAS reads this write, and so sees the
            // flag; Acquire is for symmetry.
            match slot.state.compare_exchange_weak(
                current,
                current | WATCHED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// Whether `index` still holds the unresolved record of `state`.
    pub(crate) fn still_live(&self, index: usize, state: u64) -> bool {
        // Acquire: a resolution seen here happened before.
        let current = self.slot(index).state.load(Ordering::Acquire);
        tag(current) == tag(state) && status(current) == LIVE
    }

    /// Drops the hold `hold` (one or more hold bits, all the caller's) on
    /// `index`. If the record was already resolved and that was its last
    /// hold, the slot is freed and recycled (its offset is dropped at its
    /// reuse, not here, so this runs no user code).
    pub(crate) fn release(&self, index: usize, hold: u64) {
        self.release_at(index, self.slot(index), hold);
    }

    /// [`release`](Self::release) for a caller that has the slot at hand.
    #[inline(always)]
    pub(crate) fn release_at(&self, index: usize, slot: &Slot<O>, hold: u64) {
        // Acquire: pairs with the Release CAS of the resolution (or publish).
        let mut current = slot.state.load(Ordering::Acquire);
        loop {
            debug_assert!(
                current & hold == hold,
                "release of a hold that is not there"
            );
            let rest = current & !hold;
            let frees = matches!(status(current), ACKED | FAILED) && rest & HOLDS == 0;
            let next = if frees {
                // FREE, same tag; the offset stays until the slot's reuse.
                (rest & !STATUS) | STALE
            } else {
                rest
            };
            // AcqRel: Acquire takes ownership from the resolver if we free;
            // Release orders our earlier reads of the value before reuse.
            match slot.state.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    if frees {
                        self.recycle_freed(index, slot, next);
                    }
                    return;
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Makes a queued record, born with the `MARKED` hold (see
    /// `QUEUE_HOLDS`), ready to be its partition's mark, with the count
    /// `covered` it reports; the caller then hands the hold to the mark.
    pub(crate) fn mark(&self, slot: &Slot<O>, covered: u32) {
        // Relaxed, all: the caller's own holds keep the slot; whoever later
        // takes the mark is ordered by the Release swap that publishes it.
        // `covered` stops remembering a revoked tag (cleared after the
        // store: a stale ticket compared against the count for a moment
        // would only be told `Revoked` instead of `AlreadyResolved`). The
        // record is resolved, so no revoke sets `REMEMBERS` any more.
        slot.covered.store(covered, Ordering::Relaxed);
        let state = slot.state.load(Ordering::Relaxed);
        if state & REMEMBERS != 0 {
            slot.state.fetch_and(!REMEMBERS, Ordering::Relaxed);
        }
        debug_assert!(state & QUEUE_HOLDS == QUEUE_HOLDS);
    }

    /// Calls `f(index, state, partition, generation)` for every slot that
    /// holds an unresolved record (a moment's snapshot: the record may be
    /// resolved, and the slot reused, as `f` looks; `state` is what was
    /// read, for [`inspect`](Self::inspect)).
    pub(crate) fn for_each_live(&self, mut f: impl FnMut(usize, u64, u32, *const ())) {
        // Relaxed: only bounds the scan.
        let used = self.next_unused.load(Ordering::Relaxed);
        for index in 0..used {
            // A page may be missing below `used` (a claimer moves the
            // counter, then allocates), and pages above it may hold records
            // sent before the caller looked: skip it, do not stop. A record
            // sent before the call found its page, so the page is visible.
            let Some(slot) = self.get(index) else {
                continue;
            };
            // Acquire: pairs with the sender's Release publish, so the
            // partition and generation read next are this record's, unless
            // the slot moves on meanwhile (`inspect` then fails).
            let state = slot.state.load(Ordering::Acquire);
            if status(state) == LIVE {
                // Relaxed, both: ordered by the Acquire above.
                let partition = slot.link.load(Ordering::Relaxed);
                let generation = slot.generation.load(Ordering::Relaxed);
                f(index, state, partition, generation);
            }
        }
    }

    /// Takes the `INSPECTED` hold on `index` if it still holds the
    /// unresolved record of `state` (same tag, still `LIVE`) and nobody
    /// else inspects it: the record's offset then stays put until
    /// [`release`](Self::release) of that hold.
    pub(crate) fn inspect(&self, index: usize, state: u64) -> bool {
        let slot = self.slot(index);
        let mut current = state;
        loop {
            if tag(current) != tag(state) || status(current) != LIVE || current & INSPECTED != 0 {
                return false;
            }
            // AcqRel: Acquire, as in `resolve`; Release, since a resolver's
            // Acquire may read this write.
            match slot.state.compare_exchange_weak(
                current,
                current | INSPECTED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// The partition number and life of the live record that `ticket_tag`
    /// names in slot `index`: `None` once it is resolved or released (or
    /// if the slot never issued that tag). Reads a slot it does not hold,
    /// as the progress walk does: the state, the fields, the state again.
    pub(crate) fn live_record(&self, index: usize, ticket_tag: u32) -> Option<(u32, u32)> {
        let slot = self.get(index)?;
        let live = |state: u64| tag(state) == ticket_tag && status(state) == LIVE;
        // Acquire: pairs with the record's Release publish, so the fields
        // read next are at least the record's own.
        if !live(slot.state.load(Ordering::Acquire)) {
            return None;
        }
        let found = (slot.partition(), slot.life());
        // Acquire fence: pairs with `stamp`'s Release fence (a send's
        // reuse) or the one a batch runs before `fill` (a batch record's
        // reuse, which takes no stamp). If a reuse of the slot wrote either
        // field we read, the re-check below sees the state moved on from
        // our tag or from `LIVE`, and we drop what we read.
        fence(Ordering::Acquire);
        // Relaxed: ordered after the reads above by the fence.
        live(slot.state.load(Ordering::Relaxed)).then_some(found)
    }

    /// The status of a slot, for tests and debugging.
    #[cfg(test)]
    pub(crate) fn status_of(&self, index: usize) -> Option<(u32, u64, bool)> {
        let state = self.get(index)?.state.load(Ordering::Acquire);
        Some((tag(state), status(state), state & HELD != 0))
    }
}

/// What a successful resolution found.
pub(crate) struct Resolved<'a, O> {
    /// The record's slot.
    pub(crate) slot: &'a Slot<O>,
    /// The generation the record entered (opaque to the slab).
    pub(crate) generation: *const (),
    /// The record's partition number.
    pub(crate) partition: u32,
    /// The life of its partition it was sent in (0 for an ack, which does
    /// not need it).
    pub(crate) life: u32,
    /// The slot was not held and is now free: the caller recycles it.
    pub(crate) freed: bool,
    /// A `drain_partition` waits for the record: wake waiters.
    pub(crate) watched: bool,
}

/// Why a ticket's tag does not match its slot: the slot issued that tag
/// and has moved on since (`AlreadyResolved`), or it never issued it
/// (`Unknown`). A slot issues the tags after `first_tag`, one per use, up
/// to its current tag; after 2^32 uses the answer is best effort (the ABA
/// bound of the tag width).
pub(super) fn classify_stale(slot_tag: u32, ticket_tag: u32, first_tag: u32) -> ResolveError {
    let issued = slot_tag.wrapping_sub(first_tag);
    let age = ticket_tag.wrapping_sub(first_tag);
    if ticket_tag != 0 && age != 0 && age <= issued {
        ResolveError::AlreadyResolved
    } else {
        ResolveError::Unknown
    }
}
