//! Progress read from outside, held to a metadata budget: what
//! [`Progress::decode_within`] accepts, what [`Progress::merge`] makes of
//! two, and [`Progress::fits`].
//!
//! Metadata is not trusted: anyone who can commit to the group (or write
//! the store it is kept in) writes it. Its run form spends a varint per
//! run however long the run, so nine characters can claim 2^34 offsets
//! pending before one done. A `Progress` keeps runs, so holding that costs
//! nothing; what costs is code that lists the offsets of a run one by one.
//! Two rules close that off, whatever the input:
//!
//! - **Positions.** A progress read from metadata describes at most as many
//!   positions *not done* (from `next` to the end of its last done range)
//!   as the budget's bitset form holds, [`budget::positions`]: about 6 a
//!   character, never more than 2^20 (the widest bitset written). A
//!   tracker never reports more: its unresolved records are held to the
//!   budget by the send's check, the records a failure keeps to the same
//!   count. `decode` applies the largest budget's bound (2^20),
//!   `decode_within` the caller's; more is refused as
//!   [`DecodeError::OverBudget`], and a caller starts from the committed
//!   offset (records redone, never skipped).
//! - **Runs, not offsets.** `merge` works on the runs of its two inputs,
//!   in time and memory in proportion to their number (each bounded by its
//!   encoding's length), and drops its last done ranges until the union
//!   encodes within the budget and describes at most its positions: what
//!   it hands to a commit is never larger than the budget, whatever it was
//!   given.

use super::budget;
use super::{DecodeError, Progress};

impl Progress {
    /// [`decode`](Self::decode) held to a metadata budget of
    /// `max_metadata_bytes` characters (the tracker's, see
    /// [`Builder::progress`](crate::Builder::progress)): refuses with
    /// [`DecodeError::OverBudget`] a string longer than the budget, or one
    /// that describes more positions not done (between
    /// [`next`](Self::next) and its last done offset) than the budget's
    /// bitset form holds (about 6 per character). Whatever a tracker with
    /// that budget reported and encoded reads back. Time and memory are in
    /// proportion to the string's length, at most the budget.
    ///
    /// ```
    /// use inflight::{DecodeError, Progress};
    /// let p = Progress::from_pending(100, 110, [100, 103]).unwrap();
    /// assert_eq!(Progress::decode_within(100, &p.encode(), 4096), Ok(p));
    /// // Nine characters that claim 2^34 offsets pending before one done.
    /// assert_eq!(Progress::decode_within(0, "RgICAgEAB", 4096), Err(DecodeError::OverBudget));
    /// assert_eq!(Progress::decode_within(0, "RgICAgEAB", 4), Err(DecodeError::OverBudget));
    /// ```
    pub fn decode_within(
        next: u64,
        metadata: &str,
        max_metadata_bytes: usize,
    ) -> Result<Progress, DecodeError> {
        if metadata.len() > max_metadata_bytes {
            return Err(DecodeError::OverBudget);
        }
        let progress = Self::decode(next, metadata)?;
        if progress.pending_positions() > budget::positions(max_metadata_bytes) {
            return Err(DecodeError::OverBudget);
        }
        Ok(progress)
    }

    /// Whether this progress is one a tracker with a budget of
    /// `max_metadata_bytes` characters could report: it encodes within the
    /// budget, and describes no more positions not done than
    /// [`decode_within`](Self::decode_within) accepts. For a progress from
    /// elsewhere (a store of your own): one that does not fit is safely
    /// replaced by [`Progress::at`] its `next()` (records redone, never
    /// skipped).
    ///
    /// ```
    /// use inflight::Progress;
    /// let p = Progress::from_pending(0, 100_000, [0]).unwrap();
    /// assert!(p.fits(4096));
    /// let wide = Progress::from_pending(0, 100_000, 0..99_999).unwrap();
    /// assert!(!wide.fits(4096));
    /// ```
    pub fn fits(&self, max_metadata_bytes: usize) -> bool {
        self.encoded_len() <= max_metadata_bytes
            && self.pending_positions() <= budget::positions(max_metadata_bytes)
    }

    /// The positions not done from `next` to the end of the last done
    /// range (the pending runs), saturating.
    pub(crate) fn pending_positions(&self) -> u64 {
        self.runs
            .iter()
            .step_by(2)
            .fold(0_u64, |sum, &len| sum.saturating_add(len))
    }

    /// Every offset either `self` or `other` says is done, as one progress
    /// (its `next` is the first offset neither says is done), held to a
    /// budget of `max_metadata_bytes` characters: its last done ranges are
    /// dropped until it [`fits`](Self::fits) (an offset dropped is redone
    /// after a restart, never skipped). Works on runs, not offsets: time
    /// and memory in proportion to the ranges of the two, whatever they
    /// span.
    ///
    /// For a consumer that resumed from a commit's progress and tracks
    /// what it has done since: the point to commit is the merge of the two.
    ///
    /// ```
    /// use inflight::Progress;
    /// // Read back on assignment: 100 pending, 101..150 and 160..170 done.
    /// let resumed = Progress::from_pending(100, 170, [100].into_iter().chain(150..160)).unwrap();
    /// // The tracker since: 100 acked (so 101..150, skipped, are done), 150 in flight.
    /// let tracked = Progress::from_pending(150, 151, [150]).unwrap();
    /// let merged = resumed.merge(&tracked, 4096);
    /// assert_eq!(merged.next(), 150);
    /// assert!(merged.is_done(165) && !merged.is_done(155));
    /// // Within a small budget the last done range goes first.
    /// assert_eq!(resumed.merge(&tracked, 0), Progress::at(150));
    /// ```
    pub fn merge(&self, other: &Progress, max_metadata_bytes: usize) -> Progress {
        // Each one's done ranges, `0..next` first, in order: merged as two
        // sorted lists, joining ranges that touch or overlap.
        fn ranges(p: &Progress) -> impl Iterator<Item = std::ops::Range<u64>> + '_ {
            std::iter::once(0..p.next).chain(p.done_ranges())
        }
        let (mut a, mut b) = (ranges(self).peekable(), ranges(other).peekable());
        let mut union: Vec<std::ops::Range<u64>> =
            Vec::with_capacity(self.runs.len() / 2 + other.runs.len() / 2 + 2);
        loop {
            let range = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x.start <= y.start => a.next(),
                (Some(_), Some(_)) | (None, Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, None) => break,
            };
            let Some(range) = range.filter(|r| !r.is_empty()) else {
                continue;
            };
            match union.last_mut() {
                Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
                _ => union.push(range),
            }
        }
        // `next`: the end of the range from 0, if any.
        let mut ranges = union.into_iter().peekable();
        let next = match ranges.peek() {
            Some(first) if first.start == 0 => ranges.next().map_or(0, |r| r.end),
            _ => 0,
        };
        let mut runs = Vec::new();
        let mut at = next;
        for range in ranges {
            runs.push(range.start - at); // not done: non-zero, ranges apart
            runs.push(range.end - range.start);
            at = range.end;
        }
        runs.truncate(fitting(&runs, max_metadata_bytes));
        let merged = Progress { next, runs };
        debug_assert!(merged.fits(max_metadata_bytes), "{merged:?}");
        merged
    }
}

/// How many of `runs` (pending and done, alternating, from a pending one)
/// to keep so that they fit `max` characters: the longest prefix that ends
/// with a done run and [`fits`](Progress::fits). One pass: the encoding's
/// two forms and the positions not done all grow with the prefix.
fn fitting(runs: &[u64], max: usize) -> usize {
    let positions = budget::positions(max);
    let (mut bytes, mut span, mut pending) = (0_usize, 0_u64, 0_u64);
    let mut keep = 0;
    for (i, pair) in runs.chunks_exact(2).enumerate() {
        let (not_done, done) = (pair[0], pair[1]);
        bytes = bytes
            .saturating_add(super::varint_len(not_done))
            .saturating_add(super::varint_len(done));
        span = span.saturating_add(not_done).saturating_add(done);
        pending = pending.saturating_add(not_done);
        let runs_form = budget::chars(bytes);
        let len = budget::bitset_chars(span).map_or(runs_form, |bitset| bitset.min(runs_form));
        if len > max || pending > positions {
            break;
        }
        keep = 2 * (i + 1);
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A progress from its done ranges past `next`, for the tests.
    fn of(next: u64, done: &[(u64, u64)]) -> Progress {
        let end = done.last().map_or(next, |d| d.1);
        let pending = (next..end).filter(|o| !done.iter().any(|d| (d.0..d.1).contains(o)));
        Progress::from_pending(next, end, pending).unwrap()
    }

    /// The budget's cut (one pass over the runs) is the one the first
    /// version made, dropping the last pair until the rest fits.
    #[test]
    fn the_budget_cut_keeps_the_most_pairs_that_fit() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next_random = |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        for _ in 0..if cfg!(miri) { 10 } else { 300 } {
            let pairs = next_random(40) as usize;
            let runs: Vec<u64> = (0..2 * pairs).map(|_| 1 + next_random(3_000)).collect();
            let progress = Progress {
                next: next_random(1 << 40),
                runs,
            };
            for budget in [0, 4, 16, 64, 200, 4096] {
                let mut linear = progress.clone();
                while !linear.runs.is_empty() && !linear.fits(budget) {
                    let keep = linear.runs.len() - 2;
                    linear.runs.truncate(keep);
                }
                assert_eq!(
                    fitting(&progress.runs, budget),
                    linear.runs.len(),
                    "{progress:?} in {budget}"
                );
            }
        }
    }

    /// `merge` against a brute-force union, offset by offset.
    #[test]
    fn merge_is_the_union() {
        let cases = [
            of(0, &[]),
            of(3, &[]),
            of(3, &[(5, 7)]),
            of(2, &[(4, 5), (8, 12)]),
            of(6, &[(7, 9), (10, 11)]),
            of(10, &[(11, 20)]),
        ];
        for a in &cases {
            for b in &cases {
                let merged = a.merge(b, 4096);
                for offset in 0..25 {
                    assert_eq!(
                        merged.is_done(offset),
                        a.is_done(offset) || b.is_done(offset),
                        "{a:?} + {b:?} = {merged:?} at {offset}"
                    );
                }
                // Canonical: it reads back from its own encoding.
                assert_eq!(
                    Progress::decode(merged.next(), &merged.encode()),
                    Ok(merged)
                );
            }
        }
    }

    #[test]
    fn merge_stays_within_the_budget() {
        // Scattered done offsets on both sides: the union needs more room.
        // (Smaller under Miri, where the checks below take minutes.)
        let n: u64 = if cfg!(miri) { 400 } else { 4_000 };
        let a = Progress::from_pending(0, n, (0..n).step_by(3)).unwrap();
        let b = Progress::from_pending(0, 2 * n, (0..2 * n).step_by(5)).unwrap();
        let union = a.merge(&b, usize::MAX);
        for max in [0, 3, 10, 100, 600, 4096] {
            let merged = a.merge(&b, max);
            assert!(merged.fits(max), "{max}: {}", merged.encoded_len());
            // The longest prefix of the union's runs that fits.
            let kept = merged.runs.len();
            assert_eq!(merged.runs[..], union.runs[..kept], "{max}");
            if kept < union.runs.len() {
                let longer = Progress {
                    next: union.next,
                    runs: union.runs[..kept + 2].to_vec(),
                };
                assert!(
                    !longer.fits(max),
                    "{max}: {kept} runs kept of {}",
                    union.runs.len()
                );
            }
            // Only the last done ranges go: what it still says is the union's.
            for offset in (0..2 * n).step_by(7) {
                if merged.is_done(offset) {
                    assert!(a.is_done(offset) || b.is_done(offset), "{max}: {offset}");
                }
            }
        }
    }

    #[test]
    fn the_positions_a_budget_allows() {
        // A run of pending offsets as long as the bound, then one done.
        let bound = budget::positions(4096);
        let at_bound = Progress::from_pending(0, bound + 1, [0]).unwrap();
        let wide = Progress {
            next: 0,
            runs: vec![bound, 1],
        };
        assert_eq!(wide.pending_positions(), bound);
        assert!(wide.fits(4096));
        let wider = Progress {
            next: 0,
            runs: vec![bound + 1, 1],
        };
        assert!(!wider.fits(4096));
        assert_eq!(
            Progress::decode_within(0, &wider.encode(), 4096),
            Err(DecodeError::OverBudget)
        );
        assert_eq!(Progress::decode_within(0, &wide.encode(), 4096), Ok(wide));
        assert!(at_bound.fits(4096));
    }
}
