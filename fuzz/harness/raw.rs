//! The `raw_tickets` target: live records (as `Ticket` and raw), acked and
//! failed ones, a pending flush and uncovered records, then a flood of raw
//! tickets, mostly hostile: only genuine ones may change anything. It
//! drives the `ops` simulator (`ops.rs`), so every step is checked against
//! the model; its partitions and offsets are the user types of `user.rs`,
//! never armed.

use super::ops::{with_sim, Op};
use super::resolve::Which;
use super::{Setup, MAX_OPS};
use arbitrary::{Arbitrary, Unstructured};

/// A hostile (or, for `Live`, genuine) raw ticket for `run_raw_tickets`.
#[derive(Arbitrary, Debug, Clone)]
pub enum Probe {
    /// Any `u64`.
    Any(u64),
    /// A near miss of a known ticket.
    Near {
        /// Which record.
        base: u8,
        /// Xored into the slot index.
        index_xor: u8,
        /// Added to the tag.
        tag_delta: i8,
    },
    /// This tracker's id, any slot and tag.
    Forged {
        /// The slot index.
        index: u16,
        /// The tag.
        tag: u32,
    },
    /// A resolved record's ticket.
    Stale(u8),
    /// Another tracker's live ticket.
    Foreign,
    /// A genuine live raw ticket.
    Live(u8),
}

/// What `run_raw_tickets` sets up before the flood.
#[derive(Arbitrary, Debug)]
struct RawSetup {
    /// Records sent before the flush: partition, offset, and what becomes of
    /// the ticket (0: kept as `Ticket`, 1: raw, 2: acked, 3: failed).
    covered: Vec<(u8, u8, u8)>,
    /// Records sent after `begin_flush` (kept raw).
    uncovered: Vec<(u8, u8)>,
    /// The flood.
    probes: Vec<(Probe, bool)>,
}

/// The `raw_tickets` target.
pub fn run_raw_tickets(data: &[u8]) {
    let Ok(setup) = RawSetup::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    with_sim(Setup::default(), |sim| {
        for &(partition, offset, fate) in setup.covered.iter().take(256) {
            sim.step(&Op::Send { partition, offset });
            let last = (sim.tickets.len() - 1) as u8;
            let which = match fate % 4 {
                0 => continue,
                1 => {
                    sim.step(&Op::IntoRaw(last));
                    continue;
                }
                _ => Which::Ticket(last),
            };
            sim.step(&Op::Resolve {
                which,
                fail: fate % 4 == 3,
            });
        }
        sim.step(&Op::BeginFlush);
        for &(partition, offset) in setup.uncovered.iter().take(64) {
            sim.step(&Op::Send { partition, offset });
            let last = (sim.tickets.len() - 1) as u8;
            sim.step(&Op::IntoRaw(last));
        }
        // The flood must not change pending offsets: look before and after.
        sim.step(&Op::Wait);
        for (probe, fail) in setup.probes.iter().take(MAX_OPS) {
            let which = match probe.clone() {
                Probe::Any(raw) => Which::Any(raw),
                Probe::Near {
                    base,
                    index_xor,
                    tag_delta,
                } => Which::Near {
                    base,
                    index_xor,
                    tag_delta,
                },
                Probe::Forged { index, tag } => Which::Forged { index, tag },
                Probe::Stale(i) => Which::Stale(i),
                Probe::Foreign => Which::Foreign,
                Probe::Live(i) => Which::Raw(i),
            };
            sim.step(&Op::Resolve { which, fail: *fail });
        }
        sim.step(&Op::Wait);
    });
}
