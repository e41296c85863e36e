//! What the fuzz replay tests share: building op lists and reading what
//! they returned, and the corpus replay. Included by `fuzz_replay.rs`,
//! `fuzz_lifecycle.rs` and `fuzz_metadata.rs` (each includes the harness
//! as `harness`).
#![allow(dead_code)] // each test file uses a part

use super::harness::{self, Act, Fired, Op, ResolveAll, SendBatch, Which};

pub fn send(partition: u8, offset: u8) -> Op {
    Op::Send { partition, offset }
}

pub fn ack(which: Which) -> Op {
    Op::Resolve { which, fail: false }
}

pub fn fail(which: Which) -> Op {
    Op::Resolve { which, fail: true }
}

pub fn arm(act: Act, value: u8) -> Op {
    Op::Arm {
        act,
        value,
        chance: 0,
    }
}

/// The planned panics that escaped: (step, call, act, value).
pub fn fired(fired: Vec<Fired>) -> Vec<(usize, &'static str, Act, u64)> {
    (fired.into_iter())
        .map(|f| (f.step, f.call, f.act, f.value))
        .collect()
}

/// Checks that each `(step, what)` is what that step returned.
pub fn returned(traced: &harness::Traced, expected: &[(usize, &str)]) {
    for &(step, what) in expected {
        assert_eq!(traced.at(step), what, "step {step}: {:#?}", traced.trace);
    }
}

pub fn traced(capacity: Option<usize>, watermarks: bool, ops: &[Op]) -> harness::Traced {
    harness::run_op_list_traced(capacity, watermarks, false, ops)
}

/// Every `Act`, in the order of its declaration (the order `arbitrary`
/// decodes them in).
pub const ACTS: [Act; 7] = [
    Act::PartitionHash,
    Act::PartitionEq,
    Act::PartitionClone,
    Act::PartitionDrop,
    Act::OffsetClone,
    Act::OffsetDrop,
    Act::OffsetSeq,
];

/// The bytes of an `ops` input that `arbitrary` decodes as `setup` (the
/// setup byte: see `pick_ops_setup`) and then `ops`: per op a byte with
/// bit 0 set, the variant as a little-endian `u32` whose product with the
/// number of variants, shifted right by 32, is its index, then its fields
/// in order; a 0 byte ends the list. For corpus files written from op
/// lists (see `fuzz/README.md`); `encoded_ops_decode_back` checks it.
pub fn encode_ops(setup: u8, ops: &[Op]) -> Vec<u8> {
    let mut out = vec![setup];
    for op in ops {
        out.push(1);
        encode_op(&mut out, op);
    }
    out.push(0);
    out
}

/// The `u32` that `arbitrary` reads as variant `index` of `count`.
fn variant(out: &mut Vec<u8>, index: u64, count: u64) {
    let tag = (index << 32).div_ceil(count);
    out.extend_from_slice(&(tag as u32).to_le_bytes());
}

fn encode_op(out: &mut Vec<u8>, op: &Op) {
    const OPS: u64 = 18;
    match op {
        Op::Send { partition, offset } => {
            variant(out, 0, OPS);
            out.extend([*partition, *offset]);
        }
        Op::Resolve { which, fail } => {
            variant(out, 1, OPS);
            encode_which(out, which);
            out.push(u8::from(*fail));
        }
        Op::IntoRaw(i) => {
            variant(out, 2, OPS);
            out.push(*i);
        }
        Op::Forget(i) => {
            variant(out, 3, OPS);
            out.push(*i);
        }
        Op::BeginFlush => variant(out, 4, OPS),
        Op::Wait => variant(out, 5, OPS),
        Op::Commit => variant(out, 6, OPS),
        Op::Abort => variant(out, 7, OPS),
        Op::Interrupt => variant(out, 8, OPS),
        Op::Close => variant(out, 9, OPS),
        Op::Committable { stats } => {
            variant(out, 10, OPS);
            out.push(u8::from(*stats));
        }
        Op::Drain => variant(out, 11, OPS),
        Op::Revoke(p) => {
            variant(out, 12, OPS);
            out.push(*p);
        }
        Op::DrainPartition(p) => {
            variant(out, 13, OPS);
            out.push(*p);
        }
        Op::Arm { act, value, chance } => {
            variant(out, 14, OPS);
            let index = ACTS.iter().position(|a| a == act).expect("an Act");
            variant(out, index as u64, ACTS.len() as u64);
            out.extend([*value, *chance]);
        }
        Op::Progress => variant(out, 15, OPS),
        Op::SendBatch(SendBatch {
            partition,
            first,
            count,
            repeat,
        }) => {
            variant(out, 16, OPS);
            out.extend([*partition, *first, *count, *repeat]);
        }
        Op::ResolveAll(ResolveAll {
            from,
            count,
            fail,
            reverse,
            foreign,
        }) => {
            variant(out, 17, OPS);
            out.extend([*from, *count, u8::from(*fail), u8::from(*reverse), *foreign]);
        }
    }
}

fn encode_which(out: &mut Vec<u8>, which: &Which) {
    const WHICH: u64 = 7;
    match which {
        Which::Ticket(i) => {
            variant(out, 0, WHICH);
            out.push(*i);
        }
        Which::Raw(i) => {
            variant(out, 1, WHICH);
            out.push(*i);
        }
        Which::Stale(i) => {
            variant(out, 2, WHICH);
            out.push(*i);
        }
        Which::Any(raw) => {
            variant(out, 3, WHICH);
            out.extend_from_slice(&raw.to_le_bytes());
        }
        Which::Near {
            base,
            index_xor,
            tag_delta,
        } => {
            variant(out, 4, WHICH);
            out.extend([*base, *index_xor, *tag_delta as u8]);
        }
        Which::Forged { index, tag } => {
            variant(out, 5, WHICH);
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&tag.to_le_bytes());
        }
        Which::Foreign => variant(out, 6, WHICH),
    }
}

/// Runs `run` on every file of `fuzz/corpus/<target>/`, naming the inputs
/// that panic.
pub fn replay(target: &str, run: impl Fn(&[u8])) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    let mut failed = Vec::new();
    for file in &files {
        let data = std::fs::read(file).expect("corpus file");
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&data))).is_err() {
            failed.push(file.display().to_string());
        }
    }
    assert!(failed.is_empty(), "corpus inputs that fail: {failed:#?}");
}
