//! The metadata budget: how large a partition's encoded progress could
//! grow, over every way its unresolved records may still end.
//!
//! The encoding is the shorter of two forms (see the parent module), so a
//! partition fits if either form fits in its worst case:
//!
//! - The bitset costs a bit per position from `next` to the last done one.
//!   Its worst case is the widest span: `next` as low as it can stay (the
//!   first record not yet acked stays unacked) and the newest record acked.
//! - The run form costs a varint per run. Its worst case is bounded by
//!   counting each unresolved record as a run of its own (one byte: a
//!   varint of 1) and each block of positions whose state is fixed (acked
//!   records and the offsets skipped between records are done, failed
//!   records are not) as one run, `varint_len(block)` bytes. Any way the
//!   records end merges these into runs no larger: a run made of blocks
//!   and records costs at most the sum of their varints
//!   (`varint_len(a + b) <= varint_len(a) + varint_len(b)`).
//!
//! One assignment reaches both worst cases at once (leave the first record
//! pending, the newest acked, and the rest to maximise the runs: acking the
//! newest never shortens the run form), so the larger of the two bounds is
//! what the partition could need, up to the run form's block bound; and
//! where the records are all unresolved (one stuck record and everything
//! behind it in flight) both bounds are exact.

use super::{base64_len, varint_len, BITSET_MAX_SPAN};
use crate::watermark::{Seen, MAX_CREDIT};

/// Characters of a tagged form of `bytes` bytes.
pub(crate) fn chars(bytes: usize) -> usize {
    1 + base64_len(bytes)
}

/// Characters of the bitset form of `span` positions, if it is written at
/// all (past [`BITSET_MAX_SPAN`] only the run form is).
pub(crate) fn bitset_chars(span: u64) -> Option<usize> {
    (span <= BITSET_MAX_SPAN).then(|| chars(varint_len(span) + (span as usize).div_ceil(8)))
}

/// The most run-form bytes that fit in `max` characters: 6 bits a
/// character after the tag, `floor((max - 1) * 6 / 8)`, computed without
/// the product, which overflows for any `max` above `usize::MAX / 6`.
fn runs_capacity(max: usize) -> usize {
    let chars = max.saturating_sub(1);
    chars / 4 * 3 + chars % 4 * 3 / 4
}

/// The widest bitset span that fits in `max` characters.
pub(crate) fn bitset_capacity(max: usize) -> u64 {
    // `bitset_chars` grows with the span: the largest span it allows.
    let (mut low, mut high) = (0_u64, BITSET_MAX_SPAN + 1);
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if bitset_chars(mid).is_some_and(|c| c <= max) {
            low = mid;
        } else {
            high = mid;
        }
    }
    low
}

/// The most positions not done (from `next` to the end of its last done
/// range) that a progress held to a budget of `max` characters describes:
/// as many as the budget's bitset form holds, at most [`BITSET_MAX_SPAN`].
/// A tracker's unresolved records are held to it by [`check`] (each one a
/// run-form byte, or a bitset position), and the records a failure keeps
/// to `keep_max`, no more (see `watermark`).
pub(crate) fn positions(max: usize) -> u64 {
    bitset_capacity(max)
}

/// The worst case of a partition whose queued records of the current life
/// are `records` (position order, each done, failed or open), if a new open
/// record at `seq` joins them: `None` if it could outgrow `max` characters,
/// else the credit left, in units of positions (see `watermark::order`),
/// at most [`MAX_CREDIT`] (127: the tail word's credit bits).
pub(crate) fn check(records: &[(u64, Seen)], seq: u64, max: usize) -> Option<u64> {
    // The worst case keeps the first record not acked pending: `next`.
    let first = records
        .iter()
        .position(|&(_, seen)| seen != Seen::Done)
        .unwrap_or(records.len());
    let rest = records[first..]
        .iter()
        .copied()
        .chain(std::iter::once((seq, Seen::Open)));
    let next = records.get(first).map_or(seq, |&(s, _)| s);
    // Saturating, here and below: the caller passes positions in order,
    // below `seq`, and `seq` below `NO_POSITION`, so nothing saturates;
    // but no budget sum may wrap, whatever it is given (a wrapped sum
    // would accept what it must refuse).
    let span = seq.saturating_sub(next).saturating_add(1);
    let runs = runs_bound(rest);
    let runs_room = runs_capacity(max).checked_sub(runs);
    let bitset_room = bitset_chars(span)
        .filter(|&c| c <= max)
        .map(|_| bitset_capacity(max).saturating_sub(span));
    let room = match (runs_room, bitset_room) {
        (None, None) => return None,
        (r, b) => u64::try_from(r.unwrap_or(0))
            .unwrap_or(u64::MAX)
            .max(b.unwrap_or(0)),
    };
    Some(room.min(MAX_CREDIT))
}

/// The run-form bound of the module docs, in bytes, for records in
/// position order from `next` on.
fn runs_bound(records: impl Iterator<Item = (u64, Seen)>) -> usize {
    let mut bytes = 0;
    // The block of fixed positions being counted: done or not, and length.
    let mut block: Option<(bool, u64)> = None;
    let close = |block: &mut Option<(bool, u64)>, bytes: &mut usize| {
        if let Some((_, len)) = block.take() {
            *bytes = bytes.saturating_add(varint_len(len));
        }
    };
    let mut previous: Option<u64> = None;
    for (seq, seen) in records {
        let skipped = previous.map_or(0, |p| seq.saturating_sub(p).saturating_sub(1));
        let fixed = |done: bool, len: u64, block: &mut Option<(bool, u64)>, bytes: &mut usize| {
            match block {
                Some((d, n)) if *d == done => *n = n.saturating_add(len),
                _ => {
                    close(block, bytes);
                    *block = Some((done, len));
                }
            }
        };
        if skipped > 0 {
            fixed(true, skipped, &mut block, &mut bytes);
        }
        match seen {
            Seen::Done => fixed(true, 1, &mut block, &mut bytes),
            Seen::Failed => fixed(false, 1, &mut block, &mut bytes),
            Seen::Open => {
                close(&mut block, &mut bytes);
                bytes = bytes.saturating_add(1);
            }
        }
        previous = Some(seq);
    }
    close(&mut block, &mut bytes);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Progress;

    /// The largest encoding over every way the open records may end, by
    /// brute force.
    fn worst(records: &[(u64, Seen)]) -> usize {
        let open: Vec<usize> = (0..records.len())
            .filter(|&i| records[i].1 == Seen::Open)
            .collect();
        let end = records.last().map_or(0, |r| r.0 + 1);
        let mut worst = 0;
        for mask in 0..1_u32 << open.len() {
            let mut pending = Vec::new();
            for (i, &(seq, seen)) in records.iter().enumerate() {
                let acked = match seen {
                    Seen::Done => true,
                    Seen::Failed => false,
                    Seen::Open => mask >> open.iter().position(|&o| o == i).unwrap() & 1 == 1,
                };
                if !acked {
                    pending.push(seq);
                }
            }
            let next = pending.first().copied().unwrap_or(end);
            let p = Progress::from_pending(next, end, pending.iter().copied()).unwrap();
            worst = worst.max(p.encoded_len());
        }
        worst
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "arithmetic on plain vectors, no unsafe or atomics: nothing for Miri to check, minutes under it"
    )]
    fn the_bound_covers_every_ending() {
        // Small patterns: every check that says "fits" is right.
        let patterns: Vec<Vec<(u64, Seen)>> = vec![
            vec![(0, Seen::Open)],
            vec![(0, Seen::Open), (1, Seen::Done), (2, Seen::Done)],
            vec![(0, Seen::Failed), (5, Seen::Open), (6, Seen::Done)],
            vec![
                (3, Seen::Open),
                (4, Seen::Open),
                (9, Seen::Open),
                (10, Seen::Done),
            ],
            (0..12)
                .map(|i| {
                    (
                        i * 2,
                        [Seen::Open, Seen::Done, Seen::Failed][i as usize % 3],
                    )
                })
                .collect(),
        ];
        for records in patterns {
            let seq = records.last().unwrap().0 + 3;
            let mut all = records.clone();
            all.push((seq, Seen::Open));
            let worst = worst(&all);
            for max in 1..40 {
                if check(&records, seq, max).is_some() {
                    assert!(worst <= max, "{records:?} max {max}: worst {worst}");
                }
            }
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "arithmetic on plain vectors, no unsafe or atomics: nothing for Miri to check, minutes under it"
    )]
    fn one_stuck_record_and_everything_in_flight_is_exact() {
        // All open: the bitset bound is reached, so the check is exact.
        let records: Vec<(u64, Seen)> = (0..20_000).map(|s| (s, Seen::Open)).collect();
        assert!(check(&records, 20_000, 4096).is_some());
        let span = bitset_capacity(4096);
        assert_eq!(bitset_chars(span), Some(4096));
        let records: Vec<(u64, Seen)> = (0..span).map(|s| (s, Seen::Open)).collect();
        assert!(check(&records[..span as usize - 1], span - 1, 4096).is_some());
        assert!(check(&records, span, 4096).is_none());
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "arithmetic on plain vectors, no unsafe or atomics: nothing for Miri to check, minutes under it"
    )]
    fn acked_records_behind_a_stuck_one_cost_a_few_bytes() {
        let mut records = vec![(0, Seen::Open)];
        records.extend((1..100_000).map(|s| (s, Seen::Done)));
        assert_eq!(check(&records, 100_000, 4096), Some(MAX_CREDIT));
        assert!(check(&records, 100_000, 12).is_some());
    }
}
