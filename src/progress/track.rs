//! A progress tracker: [`Builder::progress`] and [`Tracker::progress`].
//!
//! The tracker keeps no progress of its own: the watermark queue already
//! holds, in position order, every record of a partition that the
//! watermark has not passed, acked or not. `progress()` walks each queue
//! (see `watermark::order`) and builds the partition's [`Progress`] from
//! what it reads: `next` is the first record not acked (or one past the
//! last, when all are), and from there each acked record and each offset
//! skipped between two records is done. After a failure the walk starts at
//! the failed record, which the advance keeps, with the records it passes
//! after it (a bounded number, see `watermark::order`), until the life
//! ends. Sends check order and budget as they
//! link (see `watermark::order`), so the progress handed out always
//! encodes within the budget.

use super::NO_POSITION;
use super::{Progress, SeqOffset};
use crate::mode::{self, Mode};
use crate::watermark::{Seen, Walk};
use crate::{Builder, Tracker};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

/// What [`Builder::progress`] sets: the budget, and how to read an
/// offset's position (`Clone` and [`SeqOffset::seq`], user code run by the
/// send before it takes anything); and what [`Builder::watermarks`] sets:
/// how to tell an owed offset when it is sent again (`key_of`).
pub(crate) struct ProgressConfig<O> {
    pub(crate) max_metadata_bytes: usize,
    pub(crate) seq_of: fn(&O) -> u64,
    /// On a watermark tracker without progress, the key that identifies
    /// an owed offset (see "Owed offsets" in `watermark::order`): a 64-bit
    /// hash of it (`O`'s `Hash`, user code), run on the refusal path and
    /// by a send that finds its partition owing, never on the common path.
    pub(crate) key_of: fn(&O) -> u64,
}

/// The key of an offset that a watermark tracker owes (see
/// `ProgressConfig::key_of`): SipHash-1-3 of its `Hash`, with fixed keys,
/// so that one offset always gives one key. Two different offsets share a
/// key with a chance of one in 2^64 per comparison, which only a sender
/// that skipped the owed offset can meet, if `O`'s `Hash` tells its values
/// apart (one that hashes part of an offset does not: see
/// `Builder::watermarks`).
pub(crate) fn key_of<O: Hash>(offset: &O) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(offset)
}

// Derived `Clone`/`Copy` would require `O: Clone`.
impl<O> Clone for ProgressConfig<O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<O> Copy for ProgressConfig<O> {}

impl<O> ProgressConfig<O> {
    /// The configuration of a tracker that keeps no progress: never read.
    pub(crate) fn none() -> Self {
        Self {
            max_metadata_bytes: 0,
            seq_of: |_| NO_POSITION,
            key_of: |_| 0,
        }
    }
}

impl<P, O, M: Mode> Builder<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: SeqOffset + Clone + Send + Sync,
{
    /// Keeps each partition's progress beyond its watermark, for
    /// [`Tracker::progress`]: which offsets past the first unacked one are
    /// done, encoded for a commit's metadata in at most
    /// `max_metadata_bytes` characters (Kafka's `offset.metadata.max.bytes`,
    /// 4096 by default). Implies [`watermarks`](Self::watermarks).
    ///
    /// On such a tracker a partition's offsets must be sent in increasing
    /// order, as a consumer or a source reading one partition sends them: a
    /// send whose offset is not above every earlier one of the partition's
    /// current life (or is no position, see [`SeqOffset`]) returns
    /// [`SendError::OutOfOrder`](crate::SendError::OutOfOrder) with the
    /// record. An offset skipped is done: compaction and transaction
    /// markers leave such gaps, and they do not come back.
    ///
    /// **A refused offset is owed.** So that a refusal cannot make a gap,
    /// an offset refused with [`SendError::Full`](crate::SendError::Full)
    /// (the capacity, the budget below, the tracker's internal limit on
    /// records; a batch's first unsent offset; a
    /// [`send_timeout`](crate::Tracker::send_timeout) that gives up) is
    /// owed by its partition: until it is sent, every other send of the
    /// partition is refused with `OutOfOrder`, above it and below it (a
    /// partition owes one offset at a time: retry that one first). A
    /// [`revoke`](crate::Tracker::revoke) of the partition forgets the
    /// debt. A send refused for want of a partition number (the tracker's
    /// 2^24 − 1 partitions all taken) owes nothing: no later send of that
    /// partition can be accepted either, until a number frees. To skip a
    /// record for good, send it and ack it.
    ///
    /// **The budget is exact.** A send to a partition returns
    /// [`SendError::Full`](crate::SendError::Full) when accepting it could
    /// let the partition's encoded progress outgrow `max_metadata_bytes`,
    /// whichever of its records are acked later (and, up to a few bytes of
    /// the run form's bound, only then); other partitions are unaffected,
    /// and once the stuck record is acked the partition accepts again. With
    /// 4096 bytes, a partition takes about 24,500 consecutive offsets in
    /// flight behind one unacked record, and any number of acked ones. A
    /// budget that failed records alone fill (nothing a resolution could
    /// free) never refuses: the partition's life then stops keeping what
    /// it acked past its failures (see [`Tracker::progress`]).
    ///
    /// **Memory after a failure.** The tracker keeps a failed record and
    /// the records the watermark passes after it, slots held (their
    /// permits given back), for [`Tracker::progress`]: at most as many as
    /// the budget's bitset form encodes positions (about 6 per byte of
    /// `max_metadata_bytes`), and never more than 4,096, per failed
    /// partition, until its life ends. They count in
    /// [`Stats::held_records`](crate::Stats::held_records) and
    /// [`Stats::slots`](crate::Stats::slots), beyond a
    /// [capacity](Self::capacity).
    ///
    /// ```
    /// use inflight::{SendError, Tracker};
    /// let tracker = Tracker::builder().progress(16).build();
    /// let _stuck = tracker.send("p", 0_u64).unwrap();
    /// // Acked records behind a stuck one cost a few bytes: never refused.
    /// for offset in 1..1_000 {
    ///     let ticket = tracker.send("p", offset).unwrap();
    ///     tracker.ack(ticket).unwrap();
    /// }
    /// // Records in flight behind it fill the budget: then `Full`.
    /// let refused = (1_000..1_100_u64).map(|o| tracker.send("p", o)).find_map(Result::err);
    /// assert!(matches!(refused, Some(SendError::Full("p", _, _))));
    /// // Offsets rise within a partition, and the refused one is owed.
    /// assert!(matches!(tracker.send("p", 1), Err(SendError::OutOfOrder("p", 1))));
    /// let owed = refused.unwrap().into_inner().1;
    /// assert!(matches!(tracker.send("p", owed + 1), Err(SendError::OutOfOrder(..))));
    /// ```
    pub fn progress(self, max_metadata_bytes: usize) -> Builder<P, O, M::WithProgress> {
        Builder {
            capacity: self.capacity,
            progress: ProgressConfig {
                max_metadata_bytes,
                seq_of: |offset: &O| offset.clone().seq(),
                key_of: self.progress.key_of,
            },
            _types: PhantomData,
            _mode: PhantomData,
        }
    }
}

/// **Commit by progress,** on a [`ProgressTracker`](crate::ProgressTracker):
/// each partition's **next** offset to read (Kafka's, commit it as it is)
/// and what is done beyond it, as the commit's metadata.
///
/// ```
/// use inflight::Tracker;
/// let tracker = Tracker::builder().progress(4096).build();
/// let ticket = tracker.send("orders-0", 41_u64).unwrap();
/// tracker.ack(ticket).unwrap();
/// let progress = &tracker.progress()["orders-0"];
/// assert_eq!((progress.next(), progress.encode().as_str()), (42, ""));
/// ```
impl<P, O, M: mode::Progressive> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// For each partition whose progress changed since the previous call,
    /// its progress now: where to resume ([`Progress::next`], the offset to
    /// commit) and which offsets past it are done ([`Progress::is_done`]),
    /// encoded within the tracker's budget ([`Progress::encode`], the
    /// commit's metadata). A later call's value supersedes an earlier
    /// one's. Exists on trackers built with [`Builder::progress`].
    ///
    /// Lock-free, and callable at any moment beside sends and acks: it
    /// writes nothing the hot path reads, and an offset it reports done
    /// was acked before it returned. `next` never moves back within a
    /// partition's life; a [`revoke`](Self::revoke) starts the partition's
    /// progress afresh, and its records of the ended life are never
    /// reported.
    ///
    /// **Progress survives a failure.** A failed record is never done, so
    /// `next` stops at it, but what was acked (or never sent) beyond it
    /// stays done, and records acked later are added as they come: a
    /// restart redoes only the failed and unacked records. The tracker
    /// keeps the records past a failure, slots held, until a revoke ends
    /// the partition's life, and keeps a bounded number of them: at most
    /// as many as the budget's bitset form encodes positions (about 6 per
    /// byte of `max_metadata_bytes`), never more than 4,096. Past that, or
    /// once the failed records alone fill the metadata budget, it lets
    /// them go, and the partition's progress falls back to `next` at the
    /// failed offset with nothing done beyond it (a restart then redoes
    /// more, never less), and its sends are no longer checked against the
    /// budget. The watermark, [`committable`](Self::committable), stays
    /// at the last record before the failure.
    ///
    /// Calls that overlap may both report a change; a call that begins
    /// after another returned reports only what changed since. Changes are
    /// recognised by a 64-bit fingerprint, so a change that collides with
    /// the previous fingerprint (once in 2^64) is reported at the next
    /// change instead: the committed progress is then older, never ahead.
    ///
    /// ```
    /// use inflight::{Progress, Tracker};
    /// let tracker = Tracker::builder().progress(4096).build();
    /// let tickets: Vec<_> = (100..110_u64).map(|o| tracker.send("p", o).unwrap()).collect();
    /// for ticket in tickets.into_iter().skip(1) {
    ///     tracker.ack(ticket).unwrap(); // all but offset 100
    /// }
    /// let progress = &tracker.progress()["p"];
    /// assert_eq!(progress.next(), 100);          // commit this offset...
    /// let metadata = progress.encode();          // ...with this metadata
    /// assert!(progress.is_done(105) && !progress.is_done(100));
    /// // On restart: read both back, resume at `next`, skip what is done.
    /// let resumed = Progress::decode(100, &metadata).unwrap();
    /// assert_eq!(&resumed, progress);
    /// assert!(tracker.progress().is_empty());    // nothing changed since
    /// ```
    pub fn progress(&self) -> HashMap<P, Progress> {
        let mut out = HashMap::new();
        let (watermarks, config) = (&self.watermarks, self.progress);
        let mut walk = Walk::default();
        let mut reported = Vec::new();
        // Partitions whose progress the caller has (reported now or
        // before), with the acked count that progress covers.
        let mut handed = Vec::new();
        for number in 0..self.partitions.numbered() {
            let Some(lifecycle) = self.partitions.lifecycle(number) else {
                continue;
            };
            let life = lifecycle.life.load(crate::sync::Ordering::Acquire);
            // Before the walk: every record counted here is covered by
            // what the walk reads (for the statistics).
            let marked = watermarks.marked(number);
            if !watermarks.walk(&self.slots, number, life, &mut walk) {
                continue;
            }
            let Some(progress) = of_walk(&walk) else {
                continue;
            };
            let progress = within(progress, config.max_metadata_bytes);
            let fingerprint = fingerprint(life, &progress);
            handed.push((number, marked));
            if watermarks.seen(number) == fingerprint {
                continue;
            }
            let Some(partition) = self.partitions.key(number) else {
                continue;
            };
            // User code: the key's `Clone`, `Hash` and `Eq`.
            out.insert(partition.clone(), progress);
            reported.push((number, fingerprint));
        }
        // Only once every key is in the map: if user code panicked above,
        // no fingerprint moved, and the next call reports every change.
        for (number, fingerprint) in reported {
            watermarks.swap_seen(number, fingerprint);
        }
        for (number, marked) in handed {
            watermarks.handed_out_progress(number, marked);
        }
        out
    }

    /// The metadata budget, in characters, that [`Builder::progress`] set:
    /// what [`Progress::decode_within`] and [`Progress::merge`] take for
    /// progress read back from a commit.
    ///
    /// ```
    /// use inflight::{Progress, Tracker};
    /// let tracker = Tracker::builder().progress(512).build();
    /// # let _ = tracker.send("p", 0_u64);
    /// let resumed = Progress::decode_within(100, "", tracker.max_metadata_bytes());
    /// assert_eq!(resumed, Ok(Progress::at(100)));
    /// ```
    pub fn max_metadata_bytes(&self) -> usize {
        self.progress.max_metadata_bytes
    }
}

/// The progress a walk read, or `None` if the life has no record yet.
fn of_walk(walk: &Walk) -> Option<Progress> {
    if let Some(failed) = walk.stopped_at {
        return Some(Progress::at(failed));
    }
    let records = &walk.records;
    let Some(first) = records.iter().position(|&(_, seen)| seen != Seen::Done) else {
        return match records.last() {
            Some(&(seq, _)) => Some(Progress::at(seq + 1)),
            None => walk.done_below.map(Progress::at),
        };
    };
    let end = records.last().map_or(0, |&(seq, _)| seq + 1);
    let pending = records[first..]
        .iter()
        .filter(|&&(_, seen)| seen != Seen::Done)
        .map(|&(seq, _)| seq);
    Progress::from_pending(records[first].0, end, pending)
}

/// `progress`, with its last done runs dropped until it encodes within
/// `max` characters. The sends' budget check makes this a no-op; it is
/// here so that the bound holds whatever happens.
fn within(mut progress: Progress, max: usize) -> Progress {
    debug_assert!(
        progress.encoded_len() <= max,
        "the budget check let {progress:?} outgrow {max}"
    );
    while progress.encoded_len() > max && !progress.runs.is_empty() {
        let keep = progress.runs.len().saturating_sub(2);
        progress.runs.truncate(keep);
    }
    progress
}

/// A fingerprint of a partition's progress in a life; never 0 (the
/// "nothing reported" value).
fn fingerprint(life: u32, progress: &Progress) -> u64 {
    // SipHash with fixed keys: the same on every call.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    life.hash(&mut hasher);
    progress.next.hash(&mut hasher);
    progress.runs.hash(&mut hasher);
    hasher.finish() | 1
}

#[cfg(test)]
mod tests {
    use crate::Tracker;

    // Enough to fill several slot chunks. Miri, which checks the letting
    // go, runs fewer (every send walks the kept records at least once per
    // 127 sends): enough to fill two chunks of 128, too few for the reuse
    // bound in `assert_reused` to fail (it needs more than 256); that is
    // checked natively.
    const N: u64 = if cfg!(miri) { 130 } else { 2_000 };

    /// A progress tracker whose partition `p` failed at 0 and then had `N`
    /// records acked past it, and the slots it has used.
    fn kept() -> (Tracker<&'static str, u64, crate::mode::Progress>, usize) {
        let tracker = Tracker::builder().progress(4096).build();
        let failed = tracker.send("p", 0).unwrap();
        tracker.fail(failed).unwrap();
        for o in 1..=N {
            let ticket = tracker.send("p", o).unwrap();
            tracker.ack(ticket).unwrap();
        }
        // Kept: every record past the failure holds its slot.
        let used = tracker.slots.used();
        assert!(used > N as usize, "{used} slots for {N} kept records");
        assert!(tracker.progress()["p"].is_done(N));
        (tracker, used)
    }

    /// What a failure keeps for `progress()` (the records acked past it,
    /// whose slots stay held) is let go when a revoke ends the life, even
    /// if the partition never sends again: other partitions' sends reuse
    /// those slots instead of taking new ones.
    #[test]
    fn a_revoke_lets_go_of_what_a_failure_kept() {
        let (tracker, used) = kept();
        let _ = tracker.revoke("p");
        assert_reused(&tracker, used);
    }

    /// Checks that `N` records in flight at once take no slot beyond the
    /// `used` ones (a few for the allocation's granularity).
    fn assert_reused(tracker: &Tracker<&'static str, u64, crate::mode::Progress>, used: usize) {
        let open: Vec<_> = (0..N).map(|o| tracker.send("q", o).unwrap()).collect();
        assert!(
            tracker.slots.used() <= used + 256,
            "{} > {used}",
            tracker.slots.used()
        );
        for ticket in open {
            tracker.ack(ticket).unwrap();
        }
    }

    /// The same when the revoke's own advance does not see the end of the
    /// life (a send of the new life is passed first): the advance lets the
    /// kept records go when it passes the new life's first record.
    #[test]
    fn a_new_life_lets_go_of_what_a_failure_kept() {
        let (tracker, used) = kept();
        // The revoke, as the advance sees it when the new life's record
        // comes first.
        let number = tracker.partitions.find("p").unwrap();
        let lifecycle = tracker.partitions.lifecycle(number).unwrap();
        lifecycle.life.fetch_add(1, crate::sync::Ordering::AcqRel);
        let ticket = tracker.send("p", 0).unwrap();
        tracker.ack(ticket).unwrap();
        assert_eq!(tracker.progress()["p"].next(), 1);
        assert_reused(&tracker, used);
    }
}
