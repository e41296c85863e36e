//! The `decode` target: [`Progress::decode`] of any string returns an error
//! or a progress, never panics, and what it accepts reads back; a
//! [`Progress`] built by [`Progress::from_pending`] from arbitrary pending
//! offsets round-trips through `encode` and `decode`.
//!
//! The input's first byte picks the mode (its bit 0):
//!
//! - 0, the string mode ([`run_decode_str`]): the next 8 bytes are `next`
//!   (little-endian, zero-padded when the input is shorter), the rest is
//!   the string, read as lossy UTF-8: invalid sequences become U+FFFD, so
//!   every input reaches `decode` (none is thrown away), and non-ASCII
//!   characters, several bytes each, reach it too.
//! - 1, the structured mode ([`run_from_pending`]): `next`, a span and
//!   offsets in it, decoded with `arbitrary`.
//!
//! What `decode(next, s)` must satisfy when it returns `Ok(p)`:
//!
//! - `p.next() == next`;
//! - `p.encode()` is printable ASCII of `p.encoded_len()` characters, and
//!   `decode(p.next(), &p.encode()) == Ok(p)`;
//! - bounded memory: `p` has at most `3 * s.len()` done ranges. (The body
//!   of `s` is at most `3 * (s.len() - 1) / 4` bytes; the run form spends
//!   at least a byte per run, the bitset a bit per offset, and done ranges
//!   alternate with ranges not done, so the bitset, the larger, gives at
//!   most 4 per byte.) The done ranges are in order, non-empty, each after
//!   a non-empty range not done (`next` itself is never done);
//! - `is_done` agrees with `done_ranges` at the boundaries: true at a done
//!   range's first and last offset and below `next`, false at `next`, just
//!   before a done range and just after one (for the first and last 32
//!   ranges: `is_done` walks the runs, so checking all is quadratic);
//! - `s` is canonical: if `p.encode()` has the same form (the same tag),
//!   it is `s` itself; and unless the bitset form is too wide to be written
//!   (over 2^20 offsets), `p.encode()` is no longer than `s` (the encoder
//!   writes the shorter form). A tag alone (`R`) or a bitset of no
//!   offsets (`BAA`) is refused (`NotCanonical`): nothing done beyond
//!   `next` is the empty string.
//!
//! And of `from_pending(next, end, pending)` (arbitrary arguments must give
//! `None` or a progress, never a panic; in range, with `next` pending or
//! `next == end`, a progress): the same encoding checks, and its done
//! ranges are exactly the gaps between the pending offsets and the tail
//! after the last one, up to `end`.

use arbitrary::{Arbitrary, Unstructured};
use inflight::Progress;
use std::ops::Range;

/// Ranges whose boundaries `is_done` is checked at, at each end.
const BOUNDARY_CHECKS: usize = 32;

/// The `decode` target (see the module docs).
pub fn run_decode(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let (head, tail) = rest.split_at(rest.len().min(8));
        let mut next = [0_u8; 8];
        next[..head.len()].copy_from_slice(head);
        run_decode_str(u64::from_le_bytes(next), &String::from_utf8_lossy(tail));
    } else {
        run_from_pending(rest);
    }
}

/// The string mode: `Progress::decode(next, text)` (see the module docs).
pub fn run_decode_str(next: u64, text: &str) {
    let Ok(progress) = Progress::decode(next, text) else {
        return;
    };
    assert_eq!(progress.next(), next, "decode({next}, {text:?})");
    let encoded = check_encoding(&progress);
    let ranges: Vec<Range<u64>> = progress.done_ranges().collect();
    assert!(
        ranges.len() <= 3 * text.len(),
        "decode({next}, {text:?}): {} done ranges",
        ranges.len()
    );
    check_ranges(&progress, &ranges);
    if encoded.as_bytes().first() == text.as_bytes().first() {
        assert_eq!(encoded, text, "decode({next}, {text:?}) = {progress:?}");
    }
    let span = ranges.last().map_or(0, |r| r.end - next);
    if span <= 1 << 20 {
        assert!(
            encoded.len() <= text.len(),
            "decode({next}, {text:?}) = {progress:?}, which encodes longer: {encoded:?}"
        );
    }
}

/// The structured mode's input.
#[derive(Arbitrary, Debug)]
struct Pending {
    next: u64,
    /// The span is `span >> (scale % 40)`: any size, small ones often.
    scale: u8,
    span: u64,
    /// Offsets pending past `next`, modulo the span.
    offsets: Vec<u32>,
    /// Arbitrary arguments, mostly refused: `end` as `next + end`.
    end: u32,
    /// Arbitrary pending offsets for those.
    anywhere: Vec<u64>,
}

/// The structured mode: `Progress::from_pending` of arbitrary arguments,
/// and of consistent ones (see the module docs).
pub fn run_from_pending(data: &[u8]) {
    let Ok(input) = Pending::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let next = input.next;
    // Arbitrary: `None` or a progress, never a panic.
    let end = next.saturating_add(u64::from(input.end));
    let pending: Vec<u64> = input.anywhere.iter().take(64).copied().collect();
    if let Some(progress) = Progress::from_pending(next, end, pending.iter().copied()) {
        check_from_pending(&progress, next, end, pending);
    }
    // In range, with `next` pending: a progress.
    let span = (input.span >> (input.scale % 40)).min(u64::MAX - next);
    let pending: Vec<u64> = match span {
        0 => Vec::new(),
        span => std::iter::once(next)
            .chain((input.offsets.iter()).map(|&o| next + u64::from(o) % span))
            .collect(),
    };
    let end = next + span;
    let progress = Progress::from_pending(next, end, pending.iter().copied())
        .unwrap_or_else(|| panic!("from_pending({next}, {end}, {pending:?}) = None"));
    check_from_pending(&progress, next, end, pending);
}

/// Checks a progress `from_pending(next, end, pending)` returned.
fn check_from_pending(progress: &Progress, next: u64, end: u64, given: Vec<u64>) {
    let what = || format!("from_pending({next}, {end}, {given:?}) = {progress:?}");
    assert_eq!(progress.next(), next, "{}", what());
    check_encoding(progress);
    let mut pending = given.clone();
    pending.sort_unstable();
    pending.dedup();
    // Done: the gaps between pending offsets, and the tail up to `end`.
    let mut expected = Vec::new();
    for (i, &offset) in pending.iter().enumerate() {
        let until = pending.get(i + 1).copied().unwrap_or(end);
        if offset + 1 < until {
            expected.push(offset + 1..until);
        }
    }
    let ranges: Vec<Range<u64>> = progress.done_ranges().collect();
    assert_eq!(ranges, expected, "{}", what());
    check_ranges(progress, &ranges);
    for &offset in pending.iter().take(BOUNDARY_CHECKS) {
        assert!(!progress.is_done(offset), "{offset} pending: {}", what());
    }
    assert!(!progress.is_done(end), "{}", what());
}

/// Checks `progress`'s encoding: printable ASCII of `encoded_len()`
/// characters that decodes back to it. Returns it.
pub(super) fn check_encoding(progress: &Progress) -> String {
    let encoded = progress.encode();
    assert_eq!(encoded.len(), progress.encoded_len(), "{progress:?}");
    assert!(
        encoded.bytes().all(|b| b.is_ascii_graphic()),
        "{progress:?} encodes as {encoded:?}"
    );
    assert_eq!(
        Progress::decode(progress.next(), &encoded).as_ref(),
        Ok(progress),
        "{progress:?} encodes as {encoded:?}"
    );
    encoded
}

/// Checks that `ranges` (`progress.done_ranges()`) are in order, non-empty
/// and apart, each after an offset not done, and that `is_done` agrees at
/// their boundaries (those of the first and last [`BOUNDARY_CHECKS`]).
fn check_ranges(progress: &Progress, ranges: &[Range<u64>]) {
    let next = progress.next();
    assert!(!progress.is_done(next), "{progress:?}: next is done");
    if next > 0 {
        assert!(progress.is_done(next - 1), "{progress:?}: below next");
    }
    // The first done offset is past `next`; every later range starts past
    // the end of the one before (a range not done between).
    let mut after = next;
    for (i, range) in ranges.iter().enumerate() {
        assert!(
            after < range.start && range.start < range.end,
            "{progress:?}: done range {i} is {range:?}"
        );
        after = range.end;
        if i < BOUNDARY_CHECKS || i + BOUNDARY_CHECKS >= ranges.len() {
            let is_done = |offset| progress.is_done(offset);
            assert!(
                is_done(range.start) && is_done(range.end - 1),
                "{progress:?}: done range {range:?} not done"
            );
            assert!(
                !is_done(range.start - 1) && !is_done(range.end),
                "{progress:?}: done around {range:?}"
            );
        }
    }
}
