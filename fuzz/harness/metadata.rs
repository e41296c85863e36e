//! The `metadata` target: hostile commit metadata through what a consumer
//! does with it on assignment (issue 38, item 5). A string is read back
//! with [`Progress::decode_within`] (the committed offset alone on any
//! error), merged with a real progress tracker's progress since
//! ([`Progress::merge`]) and encoded for the first commit, all within the
//! tracker's metadata budget. Under the [`Capped`](super::Capped)
//! allocator (the target's and `fuzz-replay/tests/fuzz_metadata.rs`'s),
//! no allocation may pass its cap, and the three together may hold at
//! most [`bytes_allowed`] at once.
//!
//! The input: byte 0 picks the budget ([`BUDGETS`]); bytes 1..9 are `next`
//! (little-endian); byte 9 is how many records the tracker is sent (up to
//! 31, from `next` on), byte 10 the gaps between them (bit `i`: skip one
//! offset before record `i`), bytes 11..15 which are acked (bit `i`: acked,
//! else left in flight); the rest is the metadata, as lossy UTF-8.
//!
//! What must hold:
//!
//! - what `decode_within` accepts [`fits`](Progress::fits) the budget, and
//!   plain `decode` never describes more than 2^20 positions not done;
//! - the merge fits the budget; its encoding is `encoded_len()` long, at
//!   most the budget, and reads back (`decode_within`) as the merge;
//! - the merge starts at or past both `next`s, and says done only what one
//!   of the two says done (checked at the boundaries of its done ranges);
//! - bounded memory (see above).

use inflight::{Progress, ProgressTracker, Tracker};

/// The budgets an input picks from (byte 0, modulo their number): Kafka's
/// default, and small ones that inputs fill.
pub const BUDGETS: [usize; 4] = [4096, 512, 64, 16];

/// Ranges whose boundaries are checked, at each end of the merge.
const BOUNDARY_CHECKS: usize = 32;

/// The most bytes decode, merge and encode may hold at once for a budget
/// of `max` characters: a few dozen per character (the body's bytes, a
/// run per byte and its copy, two ranges per run) and a fixed allowance.
pub fn bytes_allowed(max: usize) -> usize {
    64 * max + (64 << 10)
}

/// The `metadata` target (see the module docs).
pub fn run_metadata(data: &[u8]) {
    let mut head = [0_u8; 15];
    let split = data.len().min(head.len());
    head[..split].copy_from_slice(&data[..split]);
    let max = BUDGETS[usize::from(head[0]) % BUDGETS.len()];
    let next = u64::from_le_bytes(head[1..9].try_into().expect("8 bytes"));
    let records = head[9] % 32;
    let gaps = head[10];
    let acked = u32::from_le_bytes(head[11..15].try_into().expect("4 bytes"));
    let text = String::from_utf8_lossy(&data[split..]);
    let tracked = tracked(max, next, records, gaps, acked);
    run_metadata_str(max, next, &tracked, &text);
}

/// A progress tracker's progress for one partition after `records` sends
/// from `next` on (see the module docs), or `Progress::at(next)` if it has
/// none to report.
fn tracked(max: usize, next: u64, records: u8, gaps: u8, acked: u32) -> Progress {
    let tracker: ProgressTracker<u8, u64> = Tracker::builder().progress(max).build();
    let mut offset = next;
    let mut open = Vec::new();
    for i in 0..records {
        if i < 8 && gaps >> i & 1 == 1 {
            offset = offset.saturating_add(1);
        }
        let Ok(ticket) = tracker.send(0, offset) else {
            break; // the budget, or past the last position
        };
        if acked >> i & 1 == 1 {
            tracker.ack(ticket).expect("a live ticket");
        } else {
            open.push(ticket);
        }
        offset = offset.saturating_add(1);
    }
    let progress = tracker.progress().remove(&0);
    // Tickets dropped unresolved stay in flight: nothing else happens.
    drop(open);
    progress.unwrap_or_else(|| Progress::at(next))
}

/// `metadata` read back for a commit at `next`, merged with `tracked`
/// (a tracker's progress from `next` on) within `max` characters, and the
/// checks of the module docs.
pub fn run_metadata_str(max: usize, next: u64, tracked: &Progress, metadata: &str) {
    let what = || format!("max {max}, next {next}, {metadata:?}, tracked {tracked:?}");
    if let Ok(plain) = Progress::decode(next, metadata) {
        assert!(
            not_done(&plain) <= 1 << 20,
            "{}: decode describes {} positions not done",
            what(),
            not_done(&plain)
        );
    }
    let ((resumed, merged, encoded), bytes) = super::capped::measure(|| {
        let resumed =
            Progress::decode_within(next, metadata, max).unwrap_or_else(|_| Progress::at(next));
        let merged = resumed.merge(tracked, max);
        let encoded = merged.encode();
        (resumed, merged, encoded)
    });
    if let Some(bytes) = bytes {
        assert!(
            bytes <= bytes_allowed(max),
            "{}: held {bytes} bytes at once",
            what()
        );
    }
    assert!(resumed.fits(max), "{}: decoded {resumed:?}", what());
    assert!(merged.fits(max), "{}: merged {merged:?}", what());
    assert_eq!(encoded.len(), merged.encoded_len(), "{}", what());
    assert!(encoded.len() <= max, "{}: {encoded:?}", what());
    assert_eq!(
        Progress::decode_within(merged.next(), &encoded, max).as_ref(),
        Ok(&merged),
        "{}: {encoded:?}",
        what()
    );
    assert!(
        merged.next() >= resumed.next().max(tracked.next()),
        "{}: merged {merged:?}",
        what()
    );
    let either = |offset| resumed.is_done(offset) || tracked.is_done(offset);
    if merged.next() > 0 {
        assert!(either(merged.next() - 1), "{}: merged {merged:?}", what());
    }
    let ranges: Vec<_> = merged.done_ranges().collect();
    for (i, range) in ranges.iter().enumerate() {
        if i < BOUNDARY_CHECKS || i + BOUNDARY_CHECKS >= ranges.len() {
            assert!(
                either(range.start) && either(range.end - 1),
                "{}: merged {merged:?} says {range:?} is done",
                what()
            );
        }
    }
}

/// Positions not done from `next` to the end of the last done range.
fn not_done(progress: &Progress) -> u64 {
    let Some(end) = progress.done_ranges().last().map(|r| r.end) else {
        return 0;
    };
    let done: u64 = progress.done_ranges().map(|r| r.end - r.start).sum();
    end - progress.next() - done
}
