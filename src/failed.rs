//! Failures that name their records: [`Tracker::failed_records`], and the
//! small log of failed records' offsets behind it.
//!
//! A failed record's slot is not kept: on a barrier tracker it is freed at
//! its failure, on a watermark tracker once the watermark passes it (a
//! progress tracker keeps it for its walk, but only up to a bound). So the
//! cold failure calls (`fail`, `fail_raw`, `fail_all`) name the record as
//! they fail it, in a [`Log`] of at most [`NAMED_FAILURES`] entries
//! allocated at the tracker's first named failure: before its resolution
//! the call takes the record's `INSPECTED` hold (so the slot keeps its
//! offset), after it clones the offset into an entry with the record's
//! partition and life, and lets the hold go. Nothing of this is on the
//! send or ack path.
//!
//! An entry is let go when its partition's life ends (a revoke): the
//! listing skips it, and a later failure reuses it (dropping the offset it
//! held then, as its last user code). At most [`PER_LIFE`] entries name
//! records of one partition's life, so one partition that fails every
//! record does not crowd the others out.
//!
//! # An entry's state word
//!
//! ```text
//!  63            24 23         8 7     4    3         2       1  0
//! +----------------+------------+-------+------+------------+--------+
//! |    readers     |   reuses   | cause |unused| HAS_OFFSET | status |
//! +----------------+------------+-------+------+------------+--------+
//! ```
//!
//! `status` is `EMPTY`, `WRITING` (one writer owns the entry) or `READY`.
//! A writer claims an `EMPTY` entry, or a `READY` one of an ended life with
//! no readers, by one CAS to `WRITING`, writes the fields and the offset,
//! and publishes them with a Release store of `READY`. A listing adds
//! itself to `readers` of a `READY` entry by CAS, reads it, and leaves
//! with a Release `fetch_sub`; a writer's claim expects no readers, so it
//! never overwrites an offset being cloned. No call waits: a CAS that
//! fails means another call made progress, and a busy entry is skipped.
//!
//! `reuses` counts the entry's publications (modulo 2^16): each publish
//! stores the count its claim read plus one. Without it, a writer that
//! read a free entry's word, then stalled while another writer reused the
//! entry and published the very same word (same cause, an offset again,
//! no readers), would claim the entry by its CAS all the same (an ABA),
//! overwrite the new entry of a current life and drop its offset: that
//! failure's name would be lost. With it, the stalled claim fails and
//! tries another entry. The count wraps: a claim is fooled only if
//! exactly a multiple of 2^16 publications of its entry, each a reuse
//! after a revoke ended the life before, happen between its read and its
//! CAS, and then only a name is lost (the offset it takes out is an
//! initialised one, dropped once): the same kind of bound as the slot
//! tags' wrap. (The readers' count, above it, is unbounded in practice:
//! 2^40 concurrent reports.)
//!
//! Under loom the log has two entries (`loom-tests/tests/failed_models.rs`
//! models it).

use crate::mode::Mode;
use crate::partition::FAILED_IN;
use crate::slab::{status_of_state, tag, FAILED, INSPECTED, REVOKED};
use crate::sync::{AtomicPtr, AtomicU64, Ordering, UnsafeCell};
use crate::ticket::RawTicket;
use crate::Tracker;
use std::hash::Hash;
use std::mem::MaybeUninit;

/// How many failed records a tracker names at once, at most: the entries
/// of its log. Failures beyond them name only their partition (see
/// [`Tracker::failed_records`]).
#[cfg(not(loom))]
pub const NAMED_FAILURES: usize = 64;
/// Two under loom, so that a model reaches an entry's reuse.
#[cfg(loom)]
pub const NAMED_FAILURES: usize = 2;

/// How many entries name records of one life of one partition, at most.
pub const PER_LIFE: usize = 8;

const EMPTY: u64 = 0;
const WRITING: u64 = 1;
const READY: u64 = 2;
const STATUS: u64 = 0b11;
const HAS_OFFSET: u64 = 0b100;
const CAUSE_SHIFT: u32 = 4;
const CAUSE: u64 = 0b1111 << CAUSE_SHIFT;
/// One publication, in the `reuses` count (see the module docs).
const REUSE: u64 = 1 << 8;
const REUSES: u64 = 0xffff << 8;
const READER: u64 = 1 << 24;

/// The `reuses` count of the publication after the one in `state` (the
/// word a claim read), wrapping at 2^16.
fn next_reuses(state: u64) -> u64 {
    // Mutant `claim_without_reuse_count` (loom suite only): a publish
    // repeats the count, so a reused entry can show a stalled claim the
    // word it read (the ABA the count prevents).
    if cfg!(inflight_mutant = "claim_without_reuse_count") {
        return state & REUSES;
    }
    (state & REUSES).wrapping_add(REUSE) & REUSES
}

/// What failed a record named by [`Tracker::failed_records`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailedBy {
    /// [`fail`](Tracker::fail), [`fail_raw`](Tracker::fail_raw) or
    /// [`fail_all`](Tracker::fail_all): the sink gave up on it.
    Fail,
    /// The crate, inside the send that made it: on a progress tracker, a
    /// send whose partition key's `Drop` panicked after the record was
    /// published fails the record rather than leave it in flight. Its
    /// offset is not named (nothing is cloned while a panic unwinds).
    SendUnwound,
    /// Not known: the partition's failures were not named (more than
    /// [`PER_LIFE`] in its life, the log full, the record was being read
    /// by another report as it failed, or its offset's `Clone` panicked).
    /// Only the partition is given.
    Unknown,
}

impl FailedBy {
    fn bits(self) -> u64 {
        let code = match self {
            FailedBy::Fail => 0,
            FailedBy::SendUnwound => 1,
            FailedBy::Unknown => 2,
        };
        code << CAUSE_SHIFT
    }

    fn from_bits(state: u64) -> Self {
        match (state & CAUSE) >> CAUSE_SHIFT {
            0 => FailedBy::Fail,
            1 => FailedBy::SendUnwound,
            _ => FailedBy::Unknown,
        }
    }
}

/// A failed record whose partition's life has not ended, from
/// [`Tracker::failed_records`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedRecord<P, O> {
    /// The record's partition.
    pub partition: P,
    /// The record's offset, when the failure named it (see
    /// [`failed_by`](Self::failed_by)).
    pub offset: Option<O>,
    /// What failed it, as far as known.
    pub failed_by: FailedBy,
}

/// One named failure; see the module docs.
struct Entry<O> {
    /// See the module docs.
    state: AtomicU64,
    /// The record's partition number and life, `partition << 32 | life`.
    record: AtomicU64,
    /// When it was named: the log's count of names.
    seq: AtomicU64,
    /// The record's offset, present while `READY` with `HAS_OFFSET` (or
    /// `WRITING`, for the writer that claimed an entry that had one).
    offset: UnsafeCell<MaybeUninit<O>>,
}

type Entries<O> = [Entry<O>; NAMED_FAILURES];

/// The named failures of a tracker (see the module docs).
pub(crate) struct Log<O> {
    /// The entries, from `Box::into_raw`, allocated at the first name;
    /// null before. Freed with the log.
    entries: AtomicPtr<Entries<O>>,
    /// Names given, to order the entries.
    named: AtomicU64,
}

impl<O> Log<O> {
    pub(crate) fn new() -> Self {
        Self {
            entries: AtomicPtr::new(std::ptr::null_mut()),
            named: AtomicU64::new(0),
        }
    }

    /// The entries, if any failure was named yet.
    fn entries(&self) -> Option<&Entries<O>> {
        // Acquire: pairs with the Release CAS that published them.
        let entries = self.entries.load(Ordering::Acquire);
        // SAFETY: non-null only once published by `entries_or_new`, and
        // freed only with the log (`&mut self`).
        unsafe { entries.as_ref() }
    }

    /// The entries, allocated on first use (cold: a failure).
    fn entries_or_new(&self) -> &Entries<O> {
        if let Some(entries) = self.entries() {
            return entries;
        }
        let fresh: Box<Entries<O>> = Box::new(std::array::from_fn(|_| Entry {
            state: AtomicU64::new(EMPTY),
            record: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            offset: UnsafeCell::new(MaybeUninit::uninit()),
        }));
        let fresh = Box::into_raw(fresh);
        // Release: publishes the initialised entries; Acquire on failure:
        // the winner's entries, published by its Release.
        match self.entries.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: just published; freed only with the log.
            Ok(_) => unsafe { &*fresh },
            Err(winner) => {
                // SAFETY: `fresh` is ours, never shared; its entries are
                // all EMPTY, so nothing in it needs a drop but the box.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: as in `entries`.
                unsafe { &*winner }
            }
        }
    }

    /// Names a failed record of partition number `partition`, sent in
    /// `life`: keeps `offset` (if any) and `cause` in an entry, unless
    /// [`PER_LIFE`] entries already name that life or no entry is free.
    /// `ended(record)` says whether an entry's `partition << 32 | life` is
    /// of an ended life (a revoke): such an entry is reused. With `quiet`
    /// (the caller is unwinding) no entry holding an offset is reused.
    ///
    /// Returns what the caller must drop, last, as user code: the offset
    /// an entry held before, or `offset` if it was not kept. Runs no user
    /// code itself.
    pub(crate) fn name(
        &self,
        (partition, life): (u32, u32),
        cause: FailedBy,
        offset: Option<O>,
        quiet: bool,
        ended: impl Fn(u64) -> bool,
    ) -> Option<O> {
        let record = (u64::from(partition) << 32) | u64::from(life);
        let entries = self.entries_or_new();
        // Two rounds: a claim that loses its CAS tries the next entry.
        for _ in 0..2 {
            let mut same = 0;
            let mut free = None;
            for (index, entry) in entries.iter().enumerate() {
                // Acquire: pairs with the Release store of `READY`, so the
                // record read next is at least the one it published (a
                // writer may be reusing the entry: then this is a guess,
                // which only moves the count by one).
                let state = entry.state.load(Ordering::Acquire);
                let status = state & STATUS;
                // Relaxed: see above.
                let theirs = entry.record.load(Ordering::Relaxed);
                if status == READY && theirs == record {
                    same += 1;
                } else if free.is_none()
                    && (status == EMPTY
                        || (status == READY
                            // Mutant `reuse_while_read` (loom suite only):
                            // an entry a report is reading is reused.
                            && (cfg!(inflight_mutant = "reuse_while_read") || state < READER)
                            && (!quiet || state & HAS_OFFSET == 0)
                            && ended(theirs)))
                {
                    free = Some((index, state));
                }
            }
            if same >= PER_LIFE {
                return offset;
            }
            let Some((index, state)) = free else {
                return offset;
            };
            let entry = &entries[index];
            // Acquire: the last writer's fields and offset, and the last
            // reader's reads (its Release `fetch_sub`) happen before ours;
            // the claim expects no readers, so none is reading. It expects
            // the `reuses` count read too, so an entry reused and published
            // again since (even with the same word otherwise) fails it.
            // `WRITING` keeps the count, for the module docs' diagram.
            if entry
                .state
                .compare_exchange(
                    state,
                    WRITING | (state & REUSES),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            // The entry is ours: a reused one's life has ended (lives only
            // move on), and its offset is ours to drop.
            let old = if state & HAS_OFFSET != 0 {
                // SAFETY: `HAS_OFFSET` says the offset is initialised; we
                // own the entry (`WRITING`), so nobody else reads it.
                Some(entry.offset.with(|o| unsafe { (*o).assume_init_read() }))
            } else {
                None
            };
            let has_offset = if let Some(offset) = offset {
                // SAFETY: we own the entry; its old offset was moved out.
                entry.offset.with_mut(|o| unsafe { (*o).write(offset) });
                HAS_OFFSET
            } else {
                0
            };
            // Relaxed, all three: published by the Release store below.
            let seq = self.named.fetch_add(1, Ordering::Relaxed);
            entry.seq.store(seq, Ordering::Relaxed);
            entry.record.store(record, Ordering::Relaxed);
            // Release: publishes the fields and offset to a reader's (or
            // the next writer's) Acquire CAS. A store: nothing else writes
            // the word of an entry in `WRITING`. With the next `reuses`
            // count, so that no claim that read an earlier word succeeds.
            entry.state.store(
                READY | has_offset | cause.bits() | next_reuses(state),
                Ordering::Release,
            );
            return old;
        }
        offset
    }

    /// Adds a reader to every `READY` entry and calls `f(entry, record,
    /// seq, cause, has_offset)` for each; the caller must [`leave`](Self::leave)
    /// each entry it keeps. Entries being written are skipped.
    fn read(&self, mut f: impl FnMut(usize, u64, u64, FailedBy, bool)) {
        let Some(entries) = self.entries() else {
            return;
        };
        for (index, entry) in entries.iter().enumerate() {
            // Relaxed: a first guess; the CAS decides.
            let mut state = entry.state.load(Ordering::Relaxed);
            while state & STATUS == READY {
                // Acquire: pairs with the writer's Release store of `READY`:
                // its fields and offset are seen. (A writer's claim expects
                // no readers, so the entry stays as read until we leave.)
                match entry.state.compare_exchange_weak(
                    state,
                    state + READER,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // Relaxed, both: ordered by the Acquire CAS.
                        let record = entry.record.load(Ordering::Relaxed);
                        let seq = entry.seq.load(Ordering::Relaxed);
                        let cause = FailedBy::from_bits(state);
                        f(index, record, seq, cause, state & HAS_OFFSET != 0);
                        break;
                    }
                    Err(seen) => state = seen,
                }
            }
        }
    }

    /// The offset of entry `index`.
    ///
    /// # Safety
    ///
    /// SAFETY: the caller is a reader of the entry (see [`read`](Self::read)),
    /// which it found with `HAS_OFFSET`, and stays one for the borrow.
    unsafe fn offset(&self, index: usize) -> &O {
        let entries = self.entries().expect("read from the entries");
        // SAFETY: by the contract, initialised and not written while read.
        entries[index]
            .offset
            .with(|o| unsafe { (*o).assume_init_ref() })
    }

    /// Leaves entry `index`, read by [`read`](Self::read).
    fn leave(&self, index: usize) {
        if let Some(entries) = self.entries() {
            // Release: our reads of the offset happen before a writer's
            // claim (its Acquire CAS reads this value, or a later one).
            entries[index].state.fetch_sub(READER, Ordering::Release);
        }
    }
}

impl<O> Drop for Log<O> {
    fn drop(&mut self) {
        // Relaxed: `&mut self`, every other thread is done with us.
        let entries = self.entries.load(Ordering::Relaxed);
        if entries.is_null() {
            return;
        }
        // SAFETY: made by `Box::into_raw` in `entries_or_new`, freed here
        // once. Each entry's offset is dropped if it holds one; the box
        // then frees the memory (also if a `Drop` panics: the guard below).
        let entries = unsafe { Box::from_raw(entries) };
        for entry in entries.iter() {
            // Relaxed: as above.
            let state = entry.state.load(Ordering::Relaxed);
            if state & STATUS == READY && state & HAS_OFFSET != 0 {
                // Cleared first, so a panic below leaves nothing dropped
                // twice.
                entry.state.store(EMPTY, Ordering::Relaxed);
                // SAFETY: initialised (`HAS_OFFSET`) and ours.
                entry
                    .offset
                    .with_mut(|o| unsafe { (*o).assume_init_drop() });
            }
        }
    }
}

/// The reader holds [`Tracker::failed_records`] took, left on drop (also
/// when a `Clone` panics). Leaving runs no user code.
struct Reading<'a, O> {
    log: &'a Log<O>,
    entries: Vec<usize>,
}

impl<O> Drop for Reading<'_, O> {
    fn drop(&mut self) {
        for &index in &self.entries {
            self.log.leave(index);
        }
    }
}

/// The `INSPECTED` hold a failure call takes on its record, to name it
/// once failed; released on drop (also if the resolution's wakers, or the
/// offset's `Clone`, panic). Releasing runs no user code.
pub(crate) struct Naming<'a, O> {
    slots: &'a crate::slab::Slab<O>,
    held: Vec<usize>,
}

impl<O> Drop for Naming<'_, O> {
    fn drop(&mut self) {
        for &index in &self.held {
            self.slots.release(index, INSPECTED);
        }
    }
}

impl<O> Naming<'_, O> {
    /// Holds the record `raw` names, if it is live and this tracker's
    /// (`id`), so that its offset can be named after its failure. At most
    /// [`NAMED_FAILURES`] per call.
    pub(crate) fn hold(&mut self, raw: u64, id: u8) {
        if self.held.len() >= NAMED_FAILURES {
            return;
        }
        let ticket = RawTicket::decode(raw);
        if ticket.tracker != id || ticket.tag == 0 {
            return;
        }
        let Some(slot) = self.slots.get(ticket.index) else {
            return;
        };
        // Acquire (inside `state`): as `for_each_live`'s read; `inspect`
        // then proves the record is still this ticket's and live.
        let state = slot.state();
        if tag(state) == ticket.tag && self.slots.inspect(ticket.index, state) {
            self.held.push(ticket.index);
        }
    }
}

/// **Observe failures.** [`failed_records`](Self::failed_records) names the
/// failed records that stop commits, for the recovery
/// [`FlushError::Failed`](crate::FlushError::Failed) asks for.
///
/// ```
/// use inflight::{FailedBy, Tracker};
/// let tracker = Tracker::new();
/// let bad = tracker.send("orders-3", 17_u64).unwrap();
/// tracker.fail(bad).unwrap();
/// let failed = tracker.failed_records(10);
/// assert_eq!((failed[0].partition, failed[0].offset), ("orders-3", Some(17)));
/// assert_eq!(failed[0].failed_by, FailedBy::Fail);
/// ```
impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// At most `n` failed records not yet let go, first failed first: the
    /// records whose failure still stops their partition's commits (every
    /// barrier flush fails; the partition's watermark stays put), with
    /// their partition, offset and what failed them. A record is let go
    /// when its partition's life ends: [`revoke`](Self::revoke) it, then
    /// rewind the source to the partition's committed offset and send from
    /// there (the failed records are redone).
    ///
    /// The failure calls ([`fail`](Self::fail), [`fail_raw`](Self::fail_raw),
    /// [`fail_all`](Self::fail_all)) name each record as they fail it,
    /// cloning its offset, on every kind of tracker: a failed record's slot
    /// is not kept (a barrier tracker frees it at once), so naming it
    /// later would be too late, and nothing is added to `send` or `ack`.
    /// Up to [`NAMED_FAILURES`] records are named at once, at most
    /// [`PER_LIFE`] per partition (in its current life), and the first
    /// [`NAMED_FAILURES`] of one `fail_all`. A partition whose failure is not named (one
    /// beyond those bounds, a record failed as another report read it, or
    /// one failed by the crate itself, [`FailedBy::SendUnwound`]) is still
    /// listed once, with no offset, if its failure stops it (as
    /// [`Stats::stopped`](crate::Stats::stopped) names it): every partition
    /// to recover is in the list, once `n` allows.
    ///
    /// A record is named once its failure call returns: a report made
    /// meanwhile (by a flush's waiter the failure woke, say) may find its
    /// partition only (`offset: None`, [`FailedBy::Unknown`]), or nothing
    /// yet. Records revoked, rather than failed, are not listed: their
    /// life has ended.
    ///
    /// Not for the hot path: it reads every entry of the log and every
    /// partition's failure word (work in proportion to the partitions),
    /// without a lock. Concurrent failures may or may not be listed. A
    /// named offset is kept until its entry is reused after its
    /// partition's life ended, or the tracker is dropped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{FlushError, Tracker};
    /// let tracker = Tracker::new();
    /// let good = tracker.send("a", 1_u64).unwrap();
    /// let bad = tracker.send("b", 7_u64).unwrap();
    /// tracker.ack(good).unwrap();
    /// tracker.fail(bad).unwrap();
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.wait(Duration::ZERO), Err(FlushError::Failed { failed: 1 }));
    /// drop(flush);
    /// for failed in tracker.failed_records(16) {
    ///     assert_eq!((failed.partition, failed.offset), ("b", Some(7)));
    ///     let _ = tracker.revoke(&failed.partition); // then redo it from its committed offset
    /// }
    /// assert!(tracker.failed_records(16).is_empty());
    /// let mut flush = tracker.begin_flush().unwrap();
    /// assert_eq!(flush.wait(Duration::ZERO).unwrap().get("a"), Some(&1));
    /// ```
    pub fn failed_records(&self, n: usize) -> Vec<FailedRecord<P, O>> {
        let mut reading = Reading {
            log: &self.failures,
            entries: Vec::new(),
        };
        // (seq, entry, partition, cause, has offset)
        let mut found: Vec<(u64, usize, u32, FailedBy, bool)> = Vec::new();
        self.failures.read(|index, record, seq, cause, has_offset| {
            reading.entries.push(index);
            let (partition, life) = ((record >> 32) as u32, record as u32);
            if self.is_current_life(partition, life) {
                found.push((seq, index, partition, cause, has_offset));
            }
        });
        found.sort_unstable_by_key(|&(seq, ..)| seq);
        // Each stopped partition that no entry names, once, unnamed.
        let mut named: Vec<u32> = found.iter().map(|&(_, _, p, ..)| p).collect();
        named.sort_unstable();
        named.dedup();
        for partition in self.stopped_numbers() {
            if named.binary_search(&partition).is_err() {
                found.push((u64::MAX, usize::MAX, partition, FailedBy::Unknown, false));
            }
        }
        found.truncate(n);
        let mut report = Vec::with_capacity(found.len());
        for (_, index, partition, cause, has_offset) in found {
            let Some(key) = self.partitions.key(partition as usize) else {
                continue;
            };
            // User code (`Clone`): `reading` leaves the entries even if it
            // panics, and nothing else was changed.
            let offset = has_offset.then(|| {
                // SAFETY: we are a reader of entry `index`, read with
                // `HAS_OFFSET`, until `reading` drops.
                unsafe { self.failures.offset(index) }.clone()
            });
            report.push(FailedRecord {
                partition: key.clone(),
                offset,
                failed_by: cause,
            });
        }
        drop(reading);
        report
    }

    /// The partitions a failure stops in their current life, by number:
    /// what [`Stats::stopped`](crate::Stats::stopped) names.
    fn stopped_numbers(&self) -> Vec<u32> {
        let mut stopped = Vec::new();
        match self.marks() {
            Some(watermarks) => watermarks.backlogs(self.partitions.numbered(), |number, b| {
                if b.stopped
                    .is_some_and(|life| self.is_current_life(number as u32, life))
                {
                    stopped.push(number as u32);
                }
            }),
            None => {
                for number in 0..self.partitions.numbered() {
                    let Some(lifecycle) = self.partitions.lifecycle(number) else {
                        continue;
                    };
                    // Relaxed, both: as in `stats` (see `Tracker::add_failed`).
                    let failed_in = lifecycle.failed_in.load(Ordering::Relaxed);
                    let life = lifecycle.life.load(Ordering::Relaxed);
                    if failed_in == FAILED_IN | u64::from(life) {
                        stopped.push(number as u32);
                    }
                }
            }
        }
        stopped
    }

    /// A [`Naming`] for a failure call: take holds with `hold`, resolve,
    /// then [`name_failed`](Self::name_failed).
    pub(crate) fn naming(&self) -> Naming<'_, O> {
        Naming {
            slots: &self.slots,
            held: Vec::new(),
        }
    }

    /// After the failure call resolved: names each held record that is now
    /// failed (not revoked) with its offset, then releases the holds.
    /// Clones and drops offsets (user code): call it last.
    #[cold]
    pub(crate) fn name_failed(&self, mut naming: Naming<'_, O>) {
        // Popped in the order held; the rest stay held by `naming` if a
        // `Clone` or `Drop` below panics, and are released as it drops.
        naming.held.reverse();
        while let Some(index) = naming.held.pop() {
            // Released even if the `Clone` panics.
            let release = Naming {
                slots: &self.slots,
                held: vec![index],
            };
            let slot = self.slots.slot_of(index);
            // Acquire (inside `state`): our hold keeps the slot; the
            // resolution's Release CAS is seen.
            let state = slot.state();
            if status_of_state(state) != FAILED || state & REVOKED != 0 {
                continue; // not failed by us: refused, or revoked first
            }
            let record = (slot.partition(), slot.life());
            // SAFETY: we hold `INSPECTED` on the slot (`release`), so its
            // offset stays put.
            let offset = unsafe { slot.value() }.clone(); // user code
            drop(release);
            let dropped =
                self.failures
                    .name(record, FailedBy::Fail, Some(offset), false, |theirs| {
                        !self.is_current_life((theirs >> 32) as u32, theirs as u32)
                    });
            drop(dropped); // user code, last
        }
    }
}

impl<P, O, M: Mode> Tracker<P, O, M> {
    /// Names a record that the crate failed as a send unwound (no offset,
    /// no user code: the caller is unwinding).
    #[cold]
    pub(crate) fn name_unwound(&self, partition: u32, life: u32) {
        let none = self.failures.name(
            (partition, life),
            FailedBy::SendUnwound,
            None,
            true,
            |theirs| !self.is_current_life((theirs >> 32) as u32, theirs as u32),
        );
        debug_assert!(none.is_none(), "no offset given, none reused");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_publish_moves_the_reuses_count_on_and_it_wraps_in_its_field() {
        let word = READY | HAS_OFFSET | FailedBy::Unknown.bits();
        assert_eq!(next_reuses(word), REUSE, "the first publish counts 1");
        assert_eq!(next_reuses(word | REUSE), 2 * REUSE);
        // 2^16 publications bring a word back, and no other field moves.
        assert_eq!(next_reuses(word | REUSES | (3 * READER)), 0, "wraps");
        let mut count = 0;
        for _ in 0..(1 << 16) {
            count = next_reuses(count);
            assert_eq!(count & !REUSES, 0);
        }
        assert_eq!(count, 0);
    }
}
