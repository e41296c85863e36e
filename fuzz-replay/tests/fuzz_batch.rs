//! The fuzz harness's model rules for batches (`send_batch`, `ack_all`,
//! `fail_all`; see `fuzz/harness/batch.rs`), as hand-written op lists
//! through the same harness the cargo-fuzz `ops` target runs, on the
//! stable toolchain. Each test pins what the calls returned (tracker and
//! model agreeing), by step.

// Each test binary uses a part of the harness.
mod fuzz_support;
#[allow(dead_code)]
#[path = "../../fuzz/harness/mod.rs"]
mod harness;

use arbitrary::Unstructured;
use fuzz_support::*;
use harness::{Act, Op, ResolveAll, SendBatch, Setup, Which};
use std::path::PathBuf;

fn batch(partition: u8, first: u8, count: u8) -> Op {
    Op::SendBatch(SendBatch {
        partition,
        first,
        count,
        repeat: 0,
    })
}

fn all(from: u8, count: u8, fail: bool) -> Op {
    Op::ResolveAll(ResolveAll {
        from,
        count,
        fail,
        reverse: false,
        foreign: 255,
    })
}

fn batch_with(partition: u8, first: u8, count: u8, repeat: u8) -> Op {
    Op::SendBatch(SendBatch {
        partition,
        first,
        count,
        repeat,
    })
}

/// `ack_all` / `fail_all` of the held tickets `from..from + count`, with a
/// foreign ticket at `foreign` if below 64.
fn all_with(from: u8, count: u8, fail: bool, reverse: bool, foreign: u8) -> Op {
    Op::ResolveAll(ResolveAll {
        from,
        count,
        fail,
        reverse,
        foreign,
    })
}

fn kinds() -> [Setup; 3] {
    [
        Setup::new(None, false),
        Setup::new(None, true),
        Setup::progress(None),
    ]
}

/// A batch across three chunks is sent whole; resolution batches resolve
/// every live ticket, in any order, and refuse a foreign one (counted, with
/// its reason) while resolving the others; the watermark passes it all.
#[test]
fn model_batches_across_chunks() {
    for setup in kinds() {
        let ops = [
            batch(0, 1, 130),                    // 0: 3 chunks
            batch(1, 7, 0),                      // 1: empty
            all_with(10, 100, false, true, 3),   // 2: 100 and a foreign one
            all_with(0, 255, false, false, 255), // 3: the other 30
            all(0, 255, false),                  // 4: nothing held
            Op::Committable { stats: true },     // 5
            batch(2, 0, 65),                     // 6: 2 chunks
            all_with(0, 255, true, false, 255),  // 7: fail them all
            Op::Committable { stats: true },     // 8
        ];
        let traced = harness::run_setup_ops(setup, false, &ops);
        let (committable, stopped) = if setup.watermarks {
            (
                "committable = {0: 130}, 130 records, stopped []",
                "committable = {}, 0 records, stopped [2]",
            )
        } else {
            (
                "committable = {}, 0 records, stopped []",
                "committable = {}, 0 records, stopped []",
            )
        };
        returned(
            &traced,
            &[
                (0, "send_batch = Ok(130)"),
                (1, "send_batch = Ok(0)"),
                (
                    2,
                    "ack_all = Err(ResolveBatchError { resolved: 100, refused: 1, \
                     first: ForeignTracker })",
                ),
                (3, "ack_all = Ok(30)"),
                (4, "ack_all = Ok(0)"),
                (5, committable),
                (6, "send_batch = Ok(65)"),
                (7, "fail_all = Ok(65)"),
                (8, stopped),
            ],
        );
    }
}

/// A batch stops at the first refusal, having sent what came before it:
/// `Full` at capacity, `Closed` once closed (an empty batch is still
/// `Ok(0)`), and on a progress tracker `OutOfOrder` at an offset that does
/// not rise; the harness checks that every offset not sent comes back.
#[test]
fn model_batches_stop_at_the_first_refusal() {
    for watermarks in [false, true] {
        let ops = [
            batch(0, 1, 8),   // 0: 5 sent
            batch(1, 1, 3),   // 1: Full at once
            all(1, 2, false), // 2
            batch(1, 1, 3),   // 3: 2 sent (with watermarks, none)
            Op::Close,        // 4
            batch(2, 1, 3),   // 5
            batch(2, 1, 0),   // 6
        ];
        // With watermarks, the two acked records wait behind the first,
        // unacked: they still count against the capacity.
        let step3 = if watermarks {
            "send_batch = Full after 0"
        } else {
            "send_batch = Full after 2"
        };
        let setups = [Setup::new(Some(5), watermarks), Setup::progress(Some(5))];
        for setup in setups.into_iter().filter(|s| watermarks || !s.progress) {
            let traced = harness::run_setup_ops(setup, false, &ops);
            returned(
                &traced,
                &[
                    (0, "send_batch = Full after 5"),
                    (1, "send_batch = Full after 0"),
                    (2, "ack_all = Ok(2)"),
                    (3, step3),
                    (5, "send_batch = Closed after 0"),
                    (6, "send_batch = Ok(0)"),
                ],
            );
        }
    }
    // Offsets 0, 1, 2, 2: the repeat is out of order; then a batch whose
    // first offset is no position (code 254), and one below the last.
    let ops = [
        batch_with(0, 0, 6, 3),   // 0
        batch_with(0, 254, 2, 0), // 1
        batch_with(0, 224, 2, 0), // 2: the last again
        batch_with(0, 0, 2, 0),   // 3: 3 and 4
        Op::Progress,             // 4
    ];
    let traced = harness::run_setup_ops(Setup::progress(None), false, &ops);
    returned(
        &traced,
        &[
            (0, "send_batch = OutOfOrder after 3"),
            (1, "send_batch = OutOfOrder after 0"),
            (2, "send_batch = OutOfOrder after 0"),
            (3, "send_batch = Ok(2)"),
            (4, "progress = {0: Progress { next: 0, done: [] }}"),
        ],
    );
}

/// Tickets of records a revoke released answer `Revoked` (or
/// `AlreadyResolved`) in a resolution batch and change nothing.
#[test]
fn model_resolution_batches_of_released_records() {
    for setup in kinds() {
        let ops = [
            batch(0, 1, 3),                    // 0: #0..#2
            batch(1, 5, 2),                    // 1: #3, #4
            Op::Revoke(0),                     // 2
            all_with(0, 5, false, false, 255), // 3
            Op::DrainPartition(1),             // 4
        ];
        let traced = harness::run_setup_ops(setup, false, &ops);
        assert!(
            traced.at(3).starts_with(
                "ack_all = Err(ResolveBatchError { resolved: 2, refused: 3, first: Revoked"
            ),
            "{:#?}",
            traced.trace
        );
        returned(
            &traced,
            &[
                (2, "revoke(0) = (3, None)"),
                (4, "drain_partition(1) = Ok(())"),
            ],
        );
    }
}

/// A capacity of 4: two records live, 200's slot freed, then 10's on
/// top of it. A batch of two takes 10's slot, then 200's, whose `Drop`
/// panics: the chunk backs out with its permit, so the next batch sends
/// two before `Full`.
fn panic_at_capacity() -> Vec<Op> {
    vec![
        batch(1, 200, 1),          // 0: #0
        batch(2, 10, 1),           // 1: #1
        batch(1, 0, 1),            // 2: #2 displaces #0
        batch(2, 11, 1),           // 3: #3 displaces #1
        all(0, 1, false),          // 4: #0 freed
        all(0, 1, false),          // 5: #1 freed
        arm(Act::OffsetDrop, 200), // 6
        batch(3, 0, 2),            // 7: panics at its second record
        batch(3, 0, 3),            // 8
    ]
}

/// A batch that panics after taking a slot and a permit gives the permit
/// back (with the slot order as today; wherever the panic lands, the
/// harness checks the capacity after it).
#[test]
fn model_panic_in_a_batch_at_capacity() {
    let traced = harness::run_setup_ops(Setup::new(Some(4), false), false, &panic_at_capacity());
    returned(
        &traced,
        &[
            (7, "send_batch panicked after 0"),
            (8, "send_batch = Full after 2"),
        ],
    );
    assert_eq!(
        fired(traced.fired),
        vec![(7, "send_batch", Act::OffsetDrop, 200)]
    );
}

/// Planned panics in a batch: a panic in the lookup of a chunk, or in the
/// `Drop` of an old offset a slot held, backs that whole chunk out (the
/// whole chunks before it were sent); on a progress tracker, a batch is a
/// loop of sends, so a panic stops it at the record whose user code ran.
#[test]
fn model_panics_in_batches() {
    // Offset 200's record is freed first, then 70 others: a batch reuses
    // those 70 slots first (the free lists are LIFO), then 200's, in its
    // second chunk. (Slot order is the tracker's business: if it changes,
    // the panic moves, and the harness still checks wherever it lands.)
    let ops = [
        batch(3, 10, 70),                // 0: #0..#69
        batch(1, 200, 1),                // 1: #70
        batch(1, 0, 1),                  // 2: #71 displaces #70
        all(70, 1, false),               // 3: #70 freed
        all(0, 70, false),               // 4: #0..#68 freed
        arm(Act::OffsetDrop, 200),       // 5
        batch(2, 0, 130),                // 6: panics in its second chunk
        Op::Committable { stats: true }, // 7
        batch(2, 0, 130),                // 8
        arm(Act::PartitionHash, 0),      // 9
        batch(0, 0, 10),                 // 10: nothing sent nor numbered
        arm(Act::PartitionEq, 2),        // 11
        batch(2, 0, 3),                  // 12
        arm(Act::PartitionClone, 0),     // 13
        batch(0, 0, 10),                 // 14
        batch(0, 0, 10),                 // 15
    ];
    let traced = harness::run_setup_ops(Setup::new(None, false), false, &ops);
    returned(
        &traced,
        &[
            (8, "send_batch = Ok(130)"),
            (10, "send_batch panicked after 0"),
            (12, "send_batch panicked after 0"),
            (14, "send_batch panicked after 0"),
            (15, "send_batch = Ok(10)"),
        ],
    );
    // The second chunk backed out, the first sent (64 today; 0 if the
    // slab's order changes so that 200's slot comes first).
    assert!(
        matches!(
            traced.at(6),
            "send_batch panicked after 64" | "send_batch panicked after 0"
        ),
        "{:#?}",
        traced.trace
    );
    assert_eq!(
        fired(traced.fired),
        vec![
            (6, "send_batch", Act::OffsetDrop, 200),
            (10, "send_batch", Act::PartitionHash, 0),
            (12, "send_batch", Act::PartitionEq, 2),
            (14, "send_batch", Act::PartitionClone, 0),
        ]
    );
    // A progress tracker: the batch's `Clone` of its partition, before the
    // first send; the `Clone` of the sixth offset, in its send.
    let ops = [
        arm(Act::PartitionClone, 0), // 0
        batch(0, 0, 10),             // 1
        arm(Act::OffsetClone, 5),    // 2
        batch(0, 0, 10),             // 3: 0..=4 sent
        arm(Act::OffsetSeq, 7),      // 4
        batch(0, 0, 10),             // 5: 5, 6 sent
        Op::Progress,                // 6
    ];
    let traced = harness::run_setup_ops(Setup::progress(None), false, &ops);
    returned(
        &traced,
        &[
            (1, "send_batch panicked after 0"),
            (3, "send_batch panicked after 5"),
            (5, "send_batch panicked after 2"),
            (6, "progress = {0: Progress { next: 0, done: [] }}"),
        ],
    );
    assert_eq!(
        fired(traced.fired),
        vec![
            (1, "send_batch", Act::PartitionClone, 0),
            (3, "send_batch", Act::OffsetClone, 5),
            (5, "send_batch", Act::OffsetSeq, 7),
        ]
    );
}

// ---------------------------------------------------------------------------
// Corpus files written from op lists (see `fuzz/README.md`): adding
// `Op::SendBatch` and `Op::ResolveAll` changed how every input decodes, so
// the kinds of planned panics `corpus_ops` (in `fuzz_replay.rs`) expects
// are reached again by these, and batches by the last three.
// ---------------------------------------------------------------------------

/// The corpus files `fuzz/corpus/ops/seed-<name>`: a setup byte (`0x40` a
/// plain tracker, `0x02` and `0x04` of capacity 2 and 4, `0xa0` watermarks, `0x85`
/// watermarks and capacity 5, `0xd0` a progress tracker) and an op list.
fn corpus_seeds() -> Vec<(&'static str, u8, Vec<Op>)> {
    let stats = |stats| Op::Committable { stats };
    vec![
        (
            "send-partition",
            0x40,
            vec![
                send(0, 1),
                arm(Act::PartitionHash, 1),
                send(1, 2),
                arm(Act::PartitionClone, 2),
                send(2, 3),
                arm(Act::PartitionDrop, 3),
                send(3, 4),
                send(2, 5),
                arm(Act::PartitionEq, 2),
                send(2, 7),
                ack(Which::Ticket(0)),
                stats(true),
            ],
        ),
        (
            "send-offset-drop",
            0x02,
            vec![
                send(0, 1),
                ack(Which::Ticket(0)),
                send(0, 9),
                ack(Which::Ticket(0)),
                arm(Act::OffsetDrop, 1),
                send(1, 2),
                send(2, 3),
            ],
        ),
        (
            "committable",
            0xa0,
            vec![
                send(0, 1),
                ack(Which::Ticket(0)),
                arm(Act::PartitionHash, 0),
                stats(false),
                arm(Act::OffsetClone, 1),
                stats(false),
                arm(Act::PartitionHash, 0),
                stats(true),
                arm(Act::PartitionClone, 0),
                stats(true),
                arm(Act::OffsetClone, 1),
                stats(true),
            ],
        ),
        (
            "wait",
            0x40,
            vec![
                send(0, 1),
                ack(Which::Ticket(0)),
                Op::BeginFlush,
                arm(Act::PartitionHash, 0),
                Op::Wait,
                arm(Act::PartitionClone, 0),
                Op::Wait,
                arm(Act::OffsetClone, 1),
                Op::Wait,
                Op::Wait,
                Op::Commit,
            ],
        ),
        (
            "revoke",
            0xa0,
            vec![
                send(0, 1),
                ack(Which::Ticket(0)),
                arm(Act::PartitionHash, 0),
                Op::Revoke(0),
                arm(Act::PartitionEq, 0),
                Op::Revoke(0),
                arm(Act::OffsetClone, 1),
                Op::Revoke(0),
                arm(Act::PartitionHash, 0),
                Op::DrainPartition(0),
                stats(true),
            ],
        ),
        (
            "progress",
            0xd0,
            vec![
                send(0, 0), // 0
                arm(Act::OffsetClone, 1),
                send(0, 0), // 1: its Clone panics
                arm(Act::OffsetSeq, 1),
                send(0, 0),   // 1: its seq panics
                send(0, 224), // 0 again: out of order
                send(0, 0),   // 1
                Op::Progress,
                ack(Which::Ticket(0)),
                arm(Act::PartitionClone, 0),
                Op::Progress,
                arm(Act::PartitionHash, 0),
                Op::Progress,
                Op::Progress,
            ],
        ),
        (
            "batch-panics",
            0x40,
            vec![
                batch(3, 10, 70),
                batch(1, 200, 1),
                batch(1, 0, 1),
                all(70, 1, false),
                all(0, 70, false),
                arm(Act::OffsetDrop, 200),
                batch(2, 0, 130),
                arm(Act::PartitionHash, 0),
                batch(0, 0, 10),
                arm(Act::PartitionEq, 2),
                batch(2, 0, 3),
                arm(Act::PartitionClone, 0),
                batch(0, 0, 10),
                all_with(3, 100, true, true, 5),
                stats(true),
            ],
        ),
        ("batch-panic-at-capacity", 0x04, panic_at_capacity()),
        (
            "batch-progress",
            0xd0,
            vec![
                arm(Act::PartitionClone, 0),
                batch(0, 0, 10),
                arm(Act::OffsetClone, 5),
                batch(0, 0, 10),
                arm(Act::OffsetSeq, 7),
                batch(0, 0, 10),
                batch_with(0, 0, 6, 3),
                batch_with(1, 0, 70, 66),
                all_with(1, 40, false, true, 7),
                Op::Progress,
                Op::Revoke(1),
                batch(1, 0, 3),
                all(0, 255, false),
                Op::Progress,
            ],
        ),
        (
            "batch-refusals",
            0x85,
            vec![
                batch(0, 1, 8),
                batch(1, 1, 3),
                all(1, 2, false),
                batch(1, 1, 3),
                Op::Revoke(0),
                all_with(0, 9, false, false, 2),
                Op::BeginFlush,
                Op::Wait,
                Op::Close,
                batch(2, 1, 3),
                stats(true),
            ],
        ),
    ]
}

/// The checked-in seed files are what the op lists encode.
#[test]
fn corpus_seeds_are_checked_in() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/ops");
    for (name, setup, ops) in corpus_seeds() {
        let path = dir.join(format!("seed-{name}"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (cargo test -p inflight-fuzz-replay --test fuzz_batch -- --ignored write_corpus_seeds)",
                path.display()
            )
        });
        assert_eq!(bytes, encode_ops(setup, &ops), "{}", path.display());
        harness::run_ops(&bytes);
    }
}

/// Writes the seed files (`--ignored`): after a change to `Op`.
#[test]
#[ignore]
fn write_corpus_seeds() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/ops");
    for (name, setup, ops) in corpus_seeds() {
        std::fs::write(dir.join(format!("seed-{name}")), encode_ops(setup, &ops)).unwrap();
    }
}

/// `encode_ops` writes what `arbitrary` decodes back, for every variant.
#[test]
fn encoded_ops_decode_back() {
    let which = [
        Which::Ticket(3),
        Which::Raw(4),
        Which::Stale(5),
        Which::Any(0x0102_0304_0506_0708),
        Which::Near {
            base: 1,
            index_xor: 2,
            tag_delta: -3,
        },
        Which::Forged {
            index: 0x1234,
            tag: 0x5678_9abc,
        },
        Which::Foreign,
    ];
    let mut ops: Vec<Op> = which.into_iter().map(fail).collect();
    ops.extend([
        send(1, 2),
        Op::IntoRaw(7),
        Op::Forget(8),
        Op::BeginFlush,
        Op::Wait,
        Op::Commit,
        Op::Abort,
        Op::Interrupt,
        Op::Close,
        Op::Committable { stats: true },
        Op::Drain,
        Op::Revoke(9),
        Op::DrainPartition(10),
        Op::Progress,
        batch_with(1, 2, 3, 4),
        all_with(5, 6, true, false, 7),
    ]);
    for act in ACTS {
        ops.push(arm(act, 11));
    }
    let bytes = encode_ops(0x40, &ops);
    let mut u = Unstructured::new(&bytes[1..]);
    let decoded: Vec<Op> = (u.arbitrary_iter::<Op>().unwrap())
        .map(Result::unwrap)
        .collect();
    assert_eq!(format!("{decoded:?}"), format!("{ops:?}"));
}
