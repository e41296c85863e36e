//! User types whose code can panic on demand, for guarantee 14: the
//! partition type [`Part`] (a `u8`) and the offset type [`Off`] (a `u64`)
//! that the `ops` and `raw_tickets` targets run the tracker with.
//!
//! One planned panic at a time is *armed* ([`arm`]): an [`Act`] (the
//! `Hash`, `Eq`, `Clone` or `Drop` of a partition, or the `Clone`, `Drop`
//! or [`SeqOffset::seq`] of an offset) on a value. The next such call on a
//! value equal to it panics, once, and disarms. Only the values the harness
//! passes to `send` (*originals*) panic in `Drop`: the clones the tracker
//! hands out are dropped by the harness itself, and so are the originals a
//! refused send hands back ([`Part::defuse`], [`Off::defuse`]).
//!
//! This module also keeps, per thread:
//!
//! - the values alive (made or cloned, not yet dropped): once the tracker
//!   is dropped, [`live`] must be 0 (below: a double drop; above: a leak);
//! - every call of the instrumented methods ([`calls`]), so that the
//!   harness can assert that a call ran no user code at all;
//! - the planned panic that fired, so that [`call`] can tell it from any
//!   other panic (which it passes on: a crash).
//!
//! An offset's canary lives on the heap: `Drop` poisons it, `Clone`, `seq`
//! and [`Off::get`] check it, so a use after drop is caught (by the assertion,
//! or, freed, by AddressSanitizer in the fuzz build).

use arbitrary::Arbitrary;
use inflight::SeqOffset;
use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Once;

/// Which user code a planned panic hits.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// `Hash` of a partition.
    PartitionHash,
    /// `Eq` of a partition (either side of the comparison).
    PartitionEq,
    /// `Clone` of a partition.
    PartitionClone,
    /// `Drop` of a partition passed to `send`.
    PartitionDrop,
    /// `Clone` of an offset.
    OffsetClone,
    /// `Drop` of an offset passed to `send`.
    OffsetDrop,
    /// `SeqOffset::seq` of an offset (a progress tracker's send reads its
    /// offset's position from a clone).
    OffsetSeq,
}

impl Act {
    /// Whether it hits a partition (else an offset).
    pub fn on_partition(self) -> bool {
        matches!(
            self,
            Act::PartitionHash | Act::PartitionEq | Act::PartitionClone | Act::PartitionDrop
        )
    }
}

thread_local! {
    /// The next `(act, value)` that panics, once.
    static ARMED: Cell<Option<(Act, u64)>> = const { Cell::new(None) };
    /// The planned panic that fired and was not yet collected by `call`.
    static FIRED: Cell<Option<(Act, u64)>> = const { Cell::new(None) };
    /// Values alive: made or cloned, not yet dropped.
    static LIVE: Cell<i64> = const { Cell::new(0) };
    /// Calls of the instrumented methods (`Drop` of any value included).
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

/// How every planned panic's message begins.
const PLANNED: &str = "planned panic";

/// Keeps the previous panic hook (the default one, or libFuzzer's, which
/// aborts) for every panic but the planned ones, which must unwind quietly.
fn quiet_planned_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !is_planned(info.payload()) {
                previous(info);
            }
        }));
    });
}

fn is_planned(payload: &(dyn Any + Send)) -> bool {
    payload
        .downcast_ref::<String>()
        .is_some_and(|m| m.starts_with(PLANNED))
}

/// Starts a run: nothing armed or fired, no value alive. Values of an
/// earlier run on this thread that panicked were dropped by its unwinding.
pub(super) fn reset() {
    quiet_planned_panics();
    ARMED.with(|a| a.set(None));
    FIRED.with(|f| f.set(None));
    LIVE.with(|l| l.set(0));
}

/// Arms `act` on `value` (replacing what was armed).
pub fn arm(act: Act, value: u64) {
    quiet_planned_panics();
    ARMED.with(|a| a.set(Some((act, value))));
}

/// Disarms.
pub fn disarm() {
    ARMED.with(|a| a.set(None));
}

/// Values alive (see the module docs).
pub fn live() -> i64 {
    LIVE.with(Cell::get)
}

/// Calls of the instrumented methods so far.
pub fn calls() -> u64 {
    CALLS.with(Cell::get)
}

fn count(delta: i64) {
    LIVE.with(|l| l.set(l.get() + delta));
}

/// Counts a call of user code, and panics if it is the armed one.
fn hit(act: Act, value: u64) {
    CALLS.with(|c| c.set(c.get() + 1));
    if ARMED.with(Cell::get) == Some((act, value)) {
        ARMED.with(|a| a.set(None));
        FIRED.with(|f| {
            assert_eq!(f.get(), None, "a planned panic fired twice in one call");
            f.set(Some((act, value)));
        });
        panic!("{PLANNED}: {act:?} of {value}");
    }
}

/// Counts a call of user code that never panics (the `Drop` of a clone).
fn note() {
    CALLS.with(|c| c.set(c.get() + 1));
}

/// Runs `f` (one call into the tracker): its result, or the planned panic
/// that escaped it. Any other panic goes on (a crash); so does a planned
/// panic that fired but did not escape (the tracker swallowed user code's
/// panic), and an escaping panic that is not the one that fired.
pub fn call<R>(f: impl FnOnce() -> R) -> Result<R, (Act, u64)> {
    let result = catch_unwind(AssertUnwindSafe(f));
    let fired = FIRED.with(Cell::take);
    match result {
        Ok(value) => {
            assert_eq!(fired, None, "a planned panic fired and was swallowed");
            Ok(value)
        }
        Err(payload) => match fired {
            Some(fired) if is_planned(&*payload) => {
                let message = payload.downcast_ref::<String>().expect("planned");
                assert!(
                    message.ends_with(&format!(": {:?} of {}", fired.0, fired.1)),
                    "escaped: {message}, fired: {fired:?}"
                );
                Err(fired)
            }
            _ => resume_unwind(payload),
        },
    }
}

/// Runs `f`, which must run no user code of the partition or offset type.
pub fn no_user_code<R>(what: &str, f: impl FnOnce() -> R) -> R {
    let before = calls();
    match call(f) {
        Ok(value) => {
            assert_eq!(calls(), before, "{what} ran user code");
            value
        }
        Err(fired) => panic!("{what} ran user code: the planned {fired:?} panic"),
    }
}

/// Runs a resolution call `f`. An `ack` runs no user code. A `fail`
/// (`fail`, `fail_raw`, `fail_all`) names the records it failed
/// (`Tracker::failed_records`): it clones their offsets once they are
/// failed, and drops the clone an entry it reuses held; a planned panic
/// in that `Clone` comes out of the call after the failure is recorded.
/// `None` then (the call's result is lost; the record or batch resolved
/// as the model expects).
pub fn resolving<R>(what: &str, fail: bool, f: impl FnOnce() -> R) -> Option<R> {
    if !fail {
        return Some(no_user_code(what, f));
    }
    match call(f) {
        Ok(value) => Some(value),
        Err((Act::OffsetClone, _)) => None,
        Err(fired) => panic!("{what}: the planned {fired:?} panic, not a naming Clone"),
    }
}

/// A partition: a `u8` whose `Hash`, `Eq`, `Clone` and (for an original)
/// `Drop` may panic.
pub struct Part {
    value: u8,
    original: bool,
}

impl Part {
    /// An original: the harness passes it to `send`.
    pub fn new(value: u8) -> Self {
        count(1);
        Self {
            value,
            original: true,
        }
    }

    /// The value.
    pub fn get(&self) -> u8 {
        self.value
    }

    /// Drops an original the tracker handed back, without a planned panic.
    pub fn defuse(mut self) {
        self.original = false;
    }
}

impl Clone for Part {
    fn clone(&self) -> Self {
        hit(Act::PartitionClone, self.value.into());
        count(1);
        Self {
            value: self.value,
            original: false,
        }
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        count(-1);
        if self.original {
            hit(Act::PartitionDrop, self.value.into());
        } else {
            note();
        }
    }
}

impl Hash for Part {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hit(Act::PartitionHash, self.value.into());
        self.value.hash(state);
    }
}

impl PartialEq for Part {
    fn eq(&self, other: &Self) -> bool {
        hit(Act::PartitionEq, self.value.into());
        if other.value != self.value {
            hit(Act::PartitionEq, other.value.into());
        }
        self.value == other.value
    }
}

impl Eq for Part {}

impl fmt::Debug for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Part({})", self.value)
    }
}

const CANARY: u64 = 0x5afe_c0de;
const POISON: u64 = 0xdead_dead;

/// An offset: a `u64` whose `Clone`, `SeqOffset::seq` and (for an
/// original) `Drop` may panic, with a heap canary that `Drop` poisons. Its
/// position is its value (`u64::MAX` is `NO_POSITION`).
pub struct Off {
    value: u64,
    canary: Box<u64>,
    original: bool,
}

impl Off {
    /// An original: the harness passes it to `send`.
    pub fn new(value: u64) -> Self {
        count(1);
        Self {
            value,
            canary: Box::new(CANARY),
            original: true,
        }
    }

    fn check(&self, what: &str) {
        assert_eq!(
            *self.canary, CANARY,
            "{what} of dropped offset {}",
            self.value
        );
    }

    /// The value (checking that it was not dropped).
    pub fn get(&self) -> u64 {
        self.check("use");
        self.value
    }

    /// Drops an original the tracker handed back, without a planned panic.
    pub fn defuse(mut self) {
        self.original = false;
    }
}

impl Clone for Off {
    fn clone(&self) -> Self {
        self.check("clone");
        hit(Act::OffsetClone, self.value);
        let mut clone = Self::new(self.value);
        clone.original = false;
        clone
    }
}

impl Drop for Off {
    fn drop(&mut self) {
        self.check("drop");
        *self.canary = POISON;
        count(-1);
        if self.original {
            hit(Act::OffsetDrop, self.value);
        } else {
            note();
        }
    }
}

/// What a watermark tracker hashes to tell an owed offset when it is sent
/// again; never planned to panic (the panics the harness plans are those
/// `Act` lists).
impl Hash for Off {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.check("hash");
        self.value.hash(state);
    }
}

impl SeqOffset for Off {
    fn seq(self) -> u64 {
        self.check("seq");
        hit(Act::OffsetSeq, self.value);
        self.value
    }
}

impl fmt::Debug for Off {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Off({})", self.value)
    }
}
