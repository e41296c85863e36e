//! Resolutions in the `ops` target: [`Which`] ticket an `Op::Resolve`
//! uses (a live `Ticket` or raw ticket, or a stale, near-miss, forged,
//! foreign or arbitrary raw one), and how the simulator checks what the
//! tracker answered against the model (`Model::expect_raw`): only a
//! genuine live ticket resolves anything, and no resolution runs user code.

use super::model::{Expect, NO_TICKET};
use super::ops::Sim;
use super::{peek_raw, user, State};
use arbitrary::Arbitrary;
use inflight::ResolveError;

/// Which ticket a resolution uses.
#[derive(Arbitrary, Debug, Clone)]
pub enum Which {
    /// The i-th live `Ticket` (modulo their number), by `ack` / `fail`.
    Ticket(u8),
    /// The i-th live raw ticket (from `Ticket::into_raw`).
    Raw(u8),
    /// The raw ticket of the i-th resolved record: stale.
    Stale(u8),
    /// Any `u64`.
    Any(u64),
    /// The raw ticket of the i-th record ever sent, its slot index xored
    /// and its tag moved: a near miss (or a hit).
    Near {
        /// Which record (modulo the number sent).
        base: u8,
        /// Xored into the slot index.
        index_xor: u8,
        /// Added to the tag.
        tag_delta: i8,
    },
    /// This tracker's id with a chosen slot and tag.
    Forged {
        /// The slot index.
        index: u16,
        /// The tag.
        tag: u32,
    },
    /// A live ticket of another tracker, by `ack` / `fail`.
    Foreign,
}

impl Sim<'_> {
    /// Bookkeeping once record `id` was resolved in both.
    fn resolved(&mut self, id: usize, fail: bool) {
        self.model.resolve(id, fail);
        self.tickets.retain(|(_, r)| *r != id);
        self.raws.retain(|r| *r != id);
    }

    fn resolve_raw(&mut self, raw: u64, fail: bool) {
        let expect = self.model.expect_raw(raw);
        let result = user::resolving("ack_raw / fail_raw", fail, || {
            if fail {
                self.tracker.fail_raw(raw)
            } else {
                self.tracker.ack_raw(raw)
            }
        });
        // A naming `Clone` panicked: the record was failed.
        self.judge(raw, expect, result.unwrap_or(Ok(())), fail);
    }

    fn judge(&mut self, raw: u64, expect: Expect, result: Result<(), ResolveError>, fail: bool) {
        if self.trace.is_some() {
            let verb = if fail { "fail" } else { "ack" };
            let what = match self.model.record_of(raw) {
                Some(id) => format!("{verb} #{id} = {result:?}"),
                None => format!("{verb} {raw:#x} = {result:?}"),
            };
            self.note(|| what);
        }
        match expect {
            Expect::Resolves(id) => {
                assert_eq!(result, Ok(()), "raw {raw:#x} of live record {id}");
                self.resolved(id, fail);
            }
            Expect::Error(error) => assert_eq!(result, Err(error), "raw {raw:#x}"),
            Expect::AnyError => assert!(result.is_err(), "forged raw {raw:#x} resolved"),
            Expect::Released => assert!(
                matches!(
                    result,
                    Err(ResolveError::Revoked | ResolveError::AlreadyResolved)
                ),
                "raw {raw:#x} of a released record: {result:?}"
            ),
        }
    }

    pub(super) fn resolve(&mut self, which: &Which, fail: bool) {
        match which {
            Which::Ticket(i) => {
                if self.tickets.is_empty() {
                    return;
                }
                let (ticket, id) = self.tickets.swap_remove(*i as usize % self.tickets.len());
                let raw = self.model.records[id].raw;
                let expect = self.model.expect_raw(raw);
                let result = user::resolving("ack / fail", fail, || {
                    if fail {
                        self.tracker.fail(ticket)
                    } else {
                        self.tracker.ack(ticket)
                    }
                });
                // A naming `Clone` panicked: the record was failed.
                let result = result.unwrap_or(Ok(()));
                match expect {
                    Expect::Resolves(_) | Expect::Released => {}
                    other => panic!("model: ticket of record {id} expects {other:?}"),
                }
                self.judge(raw, expect, result, fail);
            }
            Which::Raw(i) => {
                if let Some(&id) = self.raws.get(*i as usize % self.raws.len().max(1)) {
                    self.resolve_raw(self.model.records[id].raw, fail);
                }
            }
            Which::Stale(i) => {
                let stale: Vec<u64> = (self.model.records.iter())
                    .filter(|r| r.state != State::Live && r.raw != NO_TICKET)
                    .map(|r| r.raw)
                    .collect();
                if let Some(&raw) = stale.get(*i as usize % stale.len().max(1)) {
                    let expect = self.model.expect_raw(raw);
                    assert!(
                        matches!(
                            expect,
                            Expect::Error(ResolveError::AlreadyResolved) | Expect::Released
                        ),
                        "model: stale {raw:#x} expects {expect:?}"
                    );
                    self.resolve_raw(raw, fail);
                }
            }
            Which::Any(raw) => self.resolve_raw(*raw, fail),
            Which::Near {
                base,
                index_xor,
                tag_delta,
            } => {
                let records = &self.model.records;
                if let Some(record) = records.get(*base as usize % records.len().max(1)) {
                    let raw = record.raw ^ (u64::from(*index_xor) << 32);
                    let tag = (raw as u32).wrapping_add(*tag_delta as i32 as u32);
                    self.resolve_raw((raw & !0xffff_ffff) | u64::from(tag), fail);
                }
            }
            Which::Forged { index, tag } => {
                let id = u64::from(self.model.id().unwrap_or(0));
                self.resolve_raw(id << 56 | u64::from(*index) << 32 | u64::from(*tag), fail);
            }
            Which::Foreign => {
                let offset = self.foreign_sent as u64;
                let ticket = self.foreign.send(0, offset).expect("foreign send");
                self.foreign_sent += 1;
                let raw = peek_raw(&ticket);
                let expect = self.model.expect_raw(raw);
                let result = user::no_user_code("ack / fail of a foreign ticket", || {
                    if fail {
                        self.tracker.fail(ticket)
                    } else {
                        self.tracker.ack(ticket)
                    }
                });
                self.judge(raw, expect, result, fail);
            }
        }
    }
}
