//! The user types of the panic-safety tests: a key and an offset whose
//! `Hash`, `Eq`, `Clone` and `Drop` panic on a chosen value, a waker that
//! panics, and the checks every such test ends with. Shared by
//! `panic_safety.rs` and `panic_safety_batch.rs`.
#![allow(dead_code)] // each test file uses a different part

use inflight::mode::Mode;
use inflight::{Ticket, Tracker};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::time::Duration;
/// Long enough that reaching it means a wake-up was lost.
pub const FOREVER: Duration = Duration::from_secs(3600);

/// What a planned panic hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Drop,
    Clone,
    Hash,
    Eq,
}

thread_local! {
    /// The next `(act, id)` that panics, once.
    static ARMED: Cell<Option<(Act, u64)>> = const { Cell::new(None) };
    /// Offsets and keys alive (made or cloned, not yet dropped).
    static LIVE: Cell<i64> = const { Cell::new(0) };
    /// Calls of the instrumented methods, to prove where none run.
    static CALLS: Cell<u64> = const { Cell::new(0) };
    /// Every planned panic that fired.
    static FIRED: RefCell<Vec<(Act, u64)>> = const { RefCell::new(Vec::new()) };
}

pub const PLANNED: &str = "planned panic";

/// Keeps the default panic hook's report for every panic but ours.
pub fn quiet_planned_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let planned = info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|m| m.starts_with(PLANNED));
            if !planned {
                default(info);
            }
        }));
    });
}

pub fn arm(act: Act, id: u64) {
    quiet_planned_panics();
    ARMED.with(|a| a.set(Some((act, id))));
}

/// Counts a call of `act` on `id` and panics if it was armed.
pub fn hit(act: Act, id: u64) {
    CALLS.with(|c| c.set(c.get() + 1));
    if ARMED.with(|a| a.get()) == Some((act, id)) {
        ARMED.with(|a| a.set(None));
        FIRED.with(|f| f.borrow_mut().push((act, id)));
        panic!("{PLANNED}: {act:?} of {id}");
    }
}

pub fn live() -> i64 {
    LIVE.with(Cell::get)
}

pub fn calls() -> u64 {
    CALLS.with(Cell::get)
}

/// Disarms a planned panic that did not fire.
pub fn disarm() {
    ARMED.with(|a| a.set(None));
}

pub fn fired() -> Vec<(Act, u64)> {
    FIRED.with(|f| std::mem::take(&mut *f.borrow_mut()))
}

/// Runs `f`, which must panic with the armed panic.
pub fn expect_planned_panic<R>(what: &str, f: impl FnOnce() -> R) {
    let armed = ARMED.with(Cell::get).expect("armed");
    assert!(
        catch_unwind(AssertUnwindSafe(f)).is_err(),
        "{what}: expected the planned {armed:?} panic"
    );
    assert_eq!(fired(), vec![armed], "{what}: the planned panic fired");
}

/// Runs `f`, in which no instrumented method may run (no user code of `P`
/// or `O`).
pub fn no_user_code<R>(what: &str, f: impl FnOnce() -> R) -> R {
    let before = calls();
    let result = f();
    assert_eq!(calls(), before, "{what} ran user code");
    result
}

pub const CANARY: u64 = 0x5afe_c0de;
pub const POISON: u64 = 0xdead_dead;

/// An offset whose `Clone`, `Hash` and `Drop` may panic (the `Drop` of the value
/// given to `send` only, not of the clones the tracker hands out). Its
/// canary lives on the heap, so a clone of a dropped value reads freed
/// memory (AddressSanitizer reports it) or the poison (the assertion does).
#[derive(Debug)]
pub struct Off {
    pub id: u64,
    canary: Box<u64>,
    original: bool,
}

impl Off {
    pub fn new(id: u64) -> Self {
        LIVE.with(|l| l.set(l.get() + 1));
        Self {
            id,
            canary: Box::new(CANARY),
            original: true,
        }
    }
}

impl Clone for Off {
    fn clone(&self) -> Self {
        assert_eq!(*self.canary, CANARY, "clone of dropped offset {}", self.id);
        hit(Act::Clone, self.id);
        let mut clone = Self::new(self.id);
        clone.original = false;
        clone
    }
}

impl Drop for Off {
    fn drop(&mut self) {
        assert_eq!(*self.canary, CANARY, "offset {} dropped twice", self.id);
        *self.canary = POISON;
        LIVE.with(|l| l.set(l.get() - 1));
        if self.original {
            hit(Act::Drop, self.id);
        }
    }
}

/// The `Hash` a watermark tracker runs on an owed offset (on a refusal,
/// and on a send that finds its partition owing).
impl Hash for Off {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hit(Act::Hash, self.id);
        self.id.hash(state);
    }
}

/// A partition key whose `Hash`, `Eq`, `Clone` and `Drop` may panic (the
/// `Drop` of a key given to `send` only, as for [`Off`]).
#[derive(Debug)]
pub struct Key {
    pub id: u64,
    original: bool,
}

impl Key {
    pub fn new(id: u64) -> Self {
        LIVE.with(|l| l.set(l.get() + 1));
        Self { id, original: true }
    }
}

impl Clone for Key {
    fn clone(&self) -> Self {
        hit(Act::Clone, self.id);
        let mut clone = Self::new(self.id);
        clone.original = false;
        clone
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        LIVE.with(|l| l.set(l.get() - 1));
        if self.original {
            hit(Act::Drop, self.id);
        }
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hit(Act::Hash, self.id);
        self.id.hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        hit(Act::Eq, self.id);
        self.id == other.id
    }
}

impl Eq for Key {}

/// Key ids from 1000 on, offset ids below: one id names one value.
pub const K: u64 = 1000;

pub type T = Tracker<Key, Off>;
/// A watermark tracker of the panicking types.
pub type W = inflight::WatermarkTracker<Key, Off>;

pub fn send<M: Mode>(tracker: &Tracker<Key, Off, M>, key: u64, offset: u64) -> Ticket {
    tracker.send(Key::new(K + key), Off::new(offset)).unwrap()
}

/// The offsets of a map, by key id.
pub fn ids(offsets: &HashMap<Key, Off>) -> Vec<(u64, u64)> {
    let mut ids: Vec<_> = offsets.iter().map(|(k, o)| (k.id - K, o.id)).collect();
    ids.sort_unstable();
    ids
}

/// One barrier flush that must succeed: its offsets by key id.
pub fn flush<M: Mode>(tracker: &Tracker<Key, Off, M>) -> Vec<(u64, u64)> {
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = flush.wait(FOREVER).unwrap();
    flush.commit().unwrap();
    ids(&offsets)
}

/// The tracker still works: a new record is counted, flushed and drained,
/// and nothing else is in flight (the caller has resolved everything).
pub fn assert_usable<M: Mode>(tracker: &Tracker<Key, Off, M>, fresh_offset: u64) {
    assert_eq!(tracker.in_flight(), 0, "nothing left in flight");
    tracker.drain(Duration::ZERO).unwrap();
    let ticket = send(tracker, 999, fresh_offset);
    assert_eq!(tracker.in_flight(), 1);
    tracker.ack(ticket).unwrap();
    assert!(flush(tracker).contains(&(999, fresh_offset)));
    tracker.drain(Duration::ZERO).unwrap();
}

/// Drops the tracker and checks that every value made was dropped once.
pub fn assert_all_dropped<M: Mode>(tracker: Tracker<Key, Off, M>) {
    drop(tracker);
    assert_eq!(live(), 0, "values leaked (> 0) or dropped twice (< 0)");
}

// ---- Wakers -----------------------------------------------------------------

/// A waker that counts its wakes, and panics on wake, clone or drop when
/// told to. Clones share the counters.
pub struct TestWaker {
    pub woken: AtomicUsize,
    panic_on_wake: bool,
    panic_on_clone: bool,
}

pub fn test_waker(panic_on_wake: bool, panic_on_clone: bool) -> (Arc<TestWaker>, Waker) {
    quiet_planned_panics();
    let state = Arc::new(TestWaker {
        woken: AtomicUsize::new(0),
        panic_on_wake,
        panic_on_clone,
    });
    let raw = RawWaker::new(Arc::into_raw(Arc::clone(&state)).cast(), &VTABLE);
    // SAFETY: the vtable below keeps the `Arc` count right for every clone.
    (state, unsafe { Waker::from_raw(raw) })
}

pub const VTABLE: RawWakerVTable = RawWakerVTable::new(
    |data| {
        // SAFETY: `data` came from `Arc::into_raw`.
        let state = unsafe { &*data.cast::<TestWaker>() };
        if state.panic_on_clone {
            panic!("{PLANNED}: waker clone");
        }
        // SAFETY: as above; one more reference for the clone.
        unsafe { Arc::increment_strong_count(data.cast::<TestWaker>()) };
        RawWaker::new(data, &VTABLE)
    },
    |data| {
        // SAFETY: `data` came from `Arc::into_raw`; this consumes it.
        let state = unsafe { Arc::from_raw(data.cast::<TestWaker>()) };
        state.woken.fetch_add(1, Ordering::SeqCst);
        if state.panic_on_wake {
            panic!("{PLANNED}: wake");
        }
    },
    |data| {
        // SAFETY: `data` came from `Arc::into_raw`.
        let state = unsafe { &*data.cast::<TestWaker>() };
        state.woken.fetch_add(1, Ordering::SeqCst);
        if state.panic_on_wake {
            panic!("{PLANNED}: wake");
        }
    },
    |data| {
        // SAFETY: `data` came from `Arc::into_raw`; this consumes it.
        drop(unsafe { Arc::from_raw(data.cast::<TestWaker>()) });
    },
);

pub fn poll_with<F: Future>(future: std::pin::Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(waker))
}
