//! `Progress`: which offsets past the committable one are done, its
//! encoding for a commit's metadata, and a decoder that takes any string.

use inflight::{DecodeError, Progress};
use std::collections::BTreeSet;

mod common;
use common::{scaled, Rng};

/// A random progress: `next`, the end of what was sent, and the pending
/// offsets (always including `next` when anything was sent past it).
fn random_progress(rng: &mut Rng) -> (u64, u64, BTreeSet<u64>) {
    let next = match rng.below(4) {
        0 => 0,
        1 => rng.below(1_000),
        2 => rng.next() >> 2,
        _ => u64::MAX - 10_000,
    };
    let span = match rng.below(4) {
        0 => 0,
        1 => rng.below(16),
        2 => rng.below(3_000),
        _ => rng.below(60_000),
    };
    let span = span.min(u64::MAX - 2 - next);
    let mut pending = BTreeSet::new();
    if span > 0 {
        pending.insert(next);
        let density = 1 + rng.below(100);
        let shape = rng.below(3);
        for offset in next + 1..next + span {
            let pick = match shape {
                0 => rng.below(100) < density, // scattered
                1 => (offset / 37) % 5 == 0,   // runs
                _ => false,                    // one stuck record
            };
            if pick {
                pending.insert(offset);
            }
        }
    }
    (next, next + span, pending)
}

#[test]
fn encode_then_decode_returns_the_same_progress() {
    let mut rng = Rng::new(7);
    for _ in 0..scaled(400) {
        let (next, end, pending) = random_progress(&mut rng);
        let progress = Progress::from_pending(next, end, pending.iter().copied()).unwrap();
        let metadata = progress.encode();
        assert!(metadata.bytes().all(|b| b.is_ascii_graphic()), "{metadata}");
        assert_eq!(metadata.len(), progress.encoded_len());
        assert_eq!(Progress::decode(next, &metadata), Ok(progress.clone()));
        // is_done agrees with the definition, around every boundary.
        let last_done = (next..end).rev().find(|o| !pending.contains(o));
        for probe in [
            next.saturating_sub(1),
            next,
            next + 1,
            end.saturating_sub(1),
            end,
            end + 1,
        ]
        .into_iter()
        .chain(pending.iter().take(50).copied())
        {
            let expected = probe < next
                || (probe < end && !pending.contains(&probe) && Some(probe) <= last_done);
            assert_eq!(
                progress.is_done(probe),
                expected,
                "offset {probe} of {progress:?}"
            );
        }
    }
}

/// The shapes parallel-consumer documents (about 250 bytes for 2,000
/// random completions; a single failure followed by 50,000 done offsets in
/// a few bytes): the shorter of the two forms is chosen.
#[test]
fn the_encoding_is_small_where_it_should_be() {
    let one_stuck = Progress::from_pending(1_000, 51_001, [1_000]).unwrap();
    assert!(one_stuck.encode().len() <= 8, "{}", one_stuck.encode());
    let mut rng = Rng::new(3);
    let scattered: Vec<u64> = std::iter::once(0)
        .chain((1..2_000).filter(|_| rng.below(2) == 0))
        .collect();
    let random = Progress::from_pending(0, 2_000, scattered).unwrap();
    let len = random.encode().len();
    assert!(len <= 1 + 2 + 2_000_usize.div_ceil(6), "bitset: {len}");
    assert!(random.encode().starts_with('B'));
    assert!(one_stuck.encode().starts_with('R'));
}

#[test]
fn decode_takes_any_string_without_panicking() {
    let alphabet: Vec<char> = (0x20_u8..0x7f).map(char::from).chain(['é', '\0']).collect();
    let mut rng = Rng::new(11);
    for _ in 0..scaled(20_000) {
        let len = rng.below(24) as usize;
        let mut text: String = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
            .collect();
        if rng.below(2) == 0 {
            text.insert(0, if rng.below(2) == 0 { 'R' } else { 'B' });
        }
        let next = if rng.below(2) == 0 {
            rng.below(100)
        } else {
            u64::MAX - rng.below(100)
        };
        if let Ok(progress) = Progress::decode(next, &text) {
            // What decodes re-encodes to something that decodes the same.
            let again = Progress::decode(next, &progress.encode());
            assert_eq!(again, Ok(progress), "{text:?}");
        }
    }
}

#[test]
fn decode_refuses_what_encode_never_writes() {
    assert_eq!(Progress::decode(5, ""), Ok(Progress::at(5)));
    assert_eq!(Progress::decode(5, "Q"), Err(DecodeError::UnknownVersion));
    assert_eq!(Progress::decode(5, "R*"), Err(DecodeError::BadCharacter));
    assert_eq!(Progress::decode(5, "RA"), Err(DecodeError::Truncated));
    // A run of length 0; a trailing run of pending offsets.
    assert_eq!(Progress::decode(5, "RAA"), Err(DecodeError::NotCanonical));
    assert_eq!(Progress::decode(5, "RAQ"), Err(DecodeError::NotCanonical));
    // Runs past u64::MAX.
    let p = Progress::from_pending(0, 1 << 62, [0]).unwrap();
    assert_eq!(
        Progress::decode(u64::MAX - 5, &p.encode()),
        Err(DecodeError::Overflow)
    );
}

/// A run claiming 2^62 offsets is kept as a run, not expanded.
#[test]
fn huge_runs_decode_compactly() {
    let p = Progress::from_pending(10, (1 << 62) + 11, [10]).unwrap();
    let metadata = p.encode();
    assert!(metadata.len() < 16, "{metadata}");
    let back = Progress::decode(10, &metadata).unwrap();
    assert!(!back.is_done(10) && back.is_done(11) && back.is_done(1 << 62));
    assert!(!back.is_done((1 << 62) + 11));
}

#[test]
fn from_pending_checks_its_arguments() {
    assert!(Progress::from_pending(5, 10, [5, 7]).is_some());
    assert!(
        Progress::from_pending(5, 10, [6]).is_none(),
        "next must be pending"
    );
    assert!(
        Progress::from_pending(5, 10, [5, 10]).is_none(),
        "beyond the end"
    );
    assert!(Progress::from_pending(5, 4, []).is_none());
    assert_eq!(Progress::from_pending(5, 5, []), Some(Progress::at(5)));
}

#[test]
fn a_tag_alone_is_not_the_empty_progress() {
    // Nothing done beyond `next` is the empty string; a tag with nothing
    // after it (or a bitset of no offsets) is not what the encoder writes.
    assert_eq!(Progress::decode(7, ""), Ok(Progress::at(7)));
    assert_eq!(Progress::decode(7, "R"), Err(DecodeError::NotCanonical));
    assert_eq!(Progress::decode(7, "BAA"), Err(DecodeError::NotCanonical));
}
