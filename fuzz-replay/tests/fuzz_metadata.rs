//! Replays the `metadata` fuzz corpus (`fuzz/corpus/metadata/`) and crafted
//! hostile metadata (issue 38, item 5) through the harness's
//! `run_metadata`, under its allocation cap: this binary's global
//! allocator is the harness's `Capped`, so that decode, merge and the
//! first commit's encode are measured, and an allocation past the cap
//! aborts.

mod fuzz_support;
#[allow(dead_code)]
#[path = "../../fuzz/harness/mod.rs"]
mod harness;

use inflight::Progress;

#[global_allocator]
static ALLOCATOR: harness::Capped = harness::Capped;

/// Runs every file of `fuzz/corpus/metadata/` (a failure panics with the
/// file's name).
#[test]
fn corpus_metadata() {
    fuzz_support::replay("metadata", harness::run_metadata);
}

/// Base64url (no padding) of LEB128 `runs`, after the run form's tag.
fn runs_form(runs: &[u64]) -> String {
    let mut bytes = Vec::new();
    for &run in runs {
        let mut n = run;
        while n >= 0x80 {
            bytes.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        bytes.push(n as u8);
    }
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::from("R");
    for chunk in bytes.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0_u32, |w, (i, &b)| w | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(word >> (18 - 6 * i) & 0x3f) as usize] as char);
        }
    }
    out
}

/// The nine characters, and crafted runs like them: huge pending
/// runs, many of them, runs that reach `u64::MAX`, merged with a tracker's
/// progress from `next` on (in flight, acked, nothing). The measured
/// bytes stay within `bytes_allowed`; the old glue's merge asked for
/// 128 GiB on the first.
#[test]
fn crafted_metadata_costs_what_the_budget_allows() {
    assert_eq!(runs_form(&[1 << 34, 1]), "RgICAgEAB");
    let mut crafted = vec![
        runs_form(&[1 << 34, 1]),
        runs_form(&[u64::MAX >> 1, 1]),
        runs_form(&[(1 << 20) + 1, 1]),
        runs_form(&[1 << 20, 1]),
        runs_form(&[500_000, 1]),
        runs_form(&[1, 1 << 40, 1 << 40, 1]),
        runs_form(&[u64::MAX, 1]),
    ];
    // Many pending runs of 2^20 each, a budget's worth of characters.
    let many: Vec<u64> = (0..1500).flat_map(|_| [1 << 20, 1]).collect();
    crafted.push(runs_form(&many));
    let small: Vec<u64> = (0..1500).flat_map(|_| [3, 1]).collect();
    crafted.push(runs_form(&small));
    for metadata in &crafted {
        for max in harness::BUDGETS {
            for next in [0, 1_000, u64::MAX - 10] {
                let tracked = [
                    Progress::at(next),
                    Progress::at(next.saturating_add(1)),
                    Progress::from_pending(next, next.saturating_add(3), [next]).unwrap(),
                ];
                for tracked in &tracked {
                    harness::run_metadata_str(max, next, tracked, metadata);
                }
            }
        }
    }
    // The first: refused, whatever the budget, by plain `decode` too.
    assert!(Progress::decode(0, &crafted[0]).is_err());
}
