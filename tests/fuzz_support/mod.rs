//! What the fuzz replay tests share: building op lists and reading what
//! they returned. Included by `fuzz_replay.rs` and `fuzz_lifecycle.rs`
//! (each includes the harness as `harness`).
#![allow(dead_code)] // each test file uses a part

use super::harness::{self, Act, Fired, Op, Which};

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
