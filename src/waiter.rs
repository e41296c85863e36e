//! Where waiting calls wait: a flush's `wait` and `drain`, blocking or async.
//!
//! A waiting call registers a handle here and parks (a thread) or returns
//! `Pending` (a task); whoever resolves the last record of a sealed
//! generation (or calls `interrupt`) wakes every registered handle, thread
//! or task alike, and each waiter re-checks its own condition. Several
//! calls may wait at once (a flush and a `drain`, say), so the registry is an
//! immutable list behind an epoch-protected pointer, replaced by
//! compare-and-swap with a copy on every registration and removal. Those are
//! the slow path (once per park, not per record); a waker only loads the
//! pointer, so a waker never reads a list a waiter is freeing.
//!
//! The protocol against lost wake-ups is a Dekker pair, ordered by two
//! SeqCst fences:
//!
//! - waiter: register its handle; fence; read the counts (and the interrupt);
//! - waker: take a count to zero (or set the interrupt); fence; read the
//!   list.
//!
//! The two fences are ordered one way or the other in the single SeqCst
//! order. If the waiter's comes first, the waker's read sees the handle and
//! unparks it (an unpark before the park makes the park return at once); if
//! the waker's comes first, the waiter's read sees the zero (or interrupt)
//! and does not park. Fences, not SeqCst accesses, so that loom (which models
//! SeqCst fences but treats SeqCst accesses as AcqRel) checks the argument.
//!
//! A task registers a [`Waker`] the same way ([`Waiter::register_waker`]).
//! Polled again with a waker that [`will_wake`](Waker::will_wake) the same
//! task, it changes nothing: its entry still wakes it. Polled with another
//! waker, it replaces its entry's waker ([`Waiter::replace_waker`]): one
//! copy-and-swap of the list followed by the same fence, then the same
//! re-check. A waker that loaded the old list in between wakes the old waker
//! (a spurious wake-up, harmless); one whose fence follows ours sees the new
//! waker; one whose fence precedes ours made its write visible to our
//! re-check.
//!
//! # User code
//!
//! A [`Waker`] is the executor's code: cloning, waking and dropping it may
//! panic. So the list holds each waker behind an `Arc`, cloned once when it
//! is registered (before the list changes): copying the list, or dropping
//! a copy of it, runs no waker code, except the drop of the last `Arc`.
//! That may come in the epoch collector, inside any thread's `pin`, so
//! lists are freed under [`quietly`], which swallows such a panic rather than
//! let it surface in an unrelated call. [`Waiter::wake`] wakes every entry
//! even if one waker panics, then passes the first panic on to its caller,
//! which calls it last, after its own bookkeeping.

use crate::sync::epoch::{self, Atomic, Guard, Owned, Shared};
use crate::sync::{fence, parker, Arc, AtomicU64, Ordering, Parker, Unparker};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::Waker;

/// What a registration wakes: a parked thread or a task.
#[derive(Clone)]
enum Handle {
    Thread(Unparker),
    /// Behind an `Arc`, so that copying the list runs no waker code.
    Task(Arc<Waker>),
}

/// Runs `f`, swallowing a panic: for user code that runs where no caller
/// could be told (the epoch collector, a guard backing out a send that is
/// already unwinding). The panic hook has reported it already.
pub(crate) fn quietly(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// One registration: an id (to remove it by) and the handle to wake.
type Entry = (u64, Handle);

pub(crate) struct Waiter {
    /// The registered handles; null when nobody waits.
    list: Atomic<Vec<Entry>>,
    /// Registration ids, so that a waiter removes only its own entry.
    next_id: AtomicU64,
}

/// A registration, returned by [`Waiter::register`]: park on it. Dropping
/// it unregisters, on every way out of the waiting call, a panic in user
/// code included (a registration left behind would be woken for ever).
pub(crate) struct Registration<'w> {
    waiter: &'w Waiter,
    id: u64,
    parker: Parker,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.waiter.remove(self.id);
    }
}

impl Registration<'_> {
    /// Parks for at most `timeout`, or until woken (or spuriously).
    pub(crate) fn park_timeout(&self, timeout: std::time::Duration) {
        self.parker.park_timeout(timeout);
    }
}

/// A task's registration, returned by [`Waiter::register_waker`]: hand it
/// back to [`Waiter::unregister_waker`] when the task stops waiting.
pub(crate) struct WakerRegistration {
    id: u64,
    /// The waker the entry holds, to compare the next poll's against.
    waker: Waker,
}

impl WakerRegistration {
    /// Whether the entry already wakes the task that `waker` wakes.
    pub(crate) fn wakes(&self, waker: &Waker) -> bool {
        self.waker.will_wake(waker)
    }
}

impl Waiter {
    pub(crate) fn new() -> Self {
        Self {
            list: Atomic::null(),
            next_id: AtomicU64::new(0),
        }
    }

    /// Adds the calling thread to those to wake, and returns what it parks
    /// on. Re-check the condition after this and before parking.
    pub(crate) fn register(&self) -> Registration<'_> {
        let (parker, unparker) = parker();
        // Relaxed: ids only need to be distinct.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.update(|list| list.push((id, Handle::Thread(unparker.clone()))));
        // SeqCst fence: the waiter's half of the Dekker pair (module docs);
        // orders the registration above before the caller's re-check.
        fence(Ordering::SeqCst);
        Registration {
            waiter: self,
            id,
            parker,
        }
    }

    /// Adds a task, woken through `waker`, to those to wake. Re-check the
    /// condition after this and before returning `Pending`.
    pub(crate) fn register_waker(&self, waker: &Waker) -> WakerRegistration {
        // The clones (user code) before anything changes.
        let (shared, kept) = (Arc::new(waker.clone()), waker.clone());
        // Relaxed: ids only need to be distinct.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.update(|list| list.push((id, Handle::Task(shared.clone()))));
        // SeqCst fence: the waiter's half of the Dekker pair (module docs);
        // orders the registration above before the caller's re-check.
        fence(Ordering::SeqCst);
        WakerRegistration { id, waker: kept }
    }

    /// Makes `registration`'s entry wake through `waker` from now on. Re-check
    /// the condition after this and before returning `Pending`.
    pub(crate) fn replace_waker(&self, registration: &mut WakerRegistration, waker: &Waker) {
        // The clones (user code) before anything changes.
        let (shared, kept) = (Arc::new(waker.clone()), waker.clone());
        self.update(|list| {
            for (id, handle) in list.iter_mut() {
                if *id == registration.id {
                    *handle = Handle::Task(shared.clone());
                }
            }
        });
        // SeqCst fence: as in `register_waker`; orders the new waker's
        // publication before the caller's re-check.
        fence(Ordering::SeqCst);
        // The old waker's drop (user code) after the list changed.
        registration.waker = kept;
    }

    /// Stops waking `registration`'s task.
    pub(crate) fn unregister_waker(&self, registration: WakerRegistration) {
        self.remove(registration.id);
    }

    /// Removes the entry numbered `id`.
    fn remove(&self, id: u64) {
        self.update(|list| list.retain(|(entry, _)| *entry != id));
    }

    /// How many calls are registered now (a snapshot).
    pub(crate) fn len(&self) -> usize {
        let guard = epoch::pin();
        // Acquire: pairs with the Release CAS in `update`.
        let list = self.list.load(Ordering::Acquire, &guard);
        // SAFETY: as in `wake`.
        unsafe { list.as_ref() }.map_or(0, Vec::len)
    }

    /// Replaces the list with a changed copy (null if it ends up empty).
    fn update(&self, change: impl Fn(&mut Vec<Entry>)) {
        let guard = epoch::pin();
        // Acquire: see the entries of the list we copy.
        let mut current = self.list.load(Ordering::Acquire, &guard);
        loop {
            // SAFETY: a list reachable from `list` under a guard is freed only
            // through `defer_destroy`, after the guard is released.
            let mut copy = unsafe { current.as_ref() }.cloned().unwrap_or_default();
            change(&mut copy);
            let new = if copy.is_empty() {
                Shared::null()
            } else {
                Owned::new(copy).into_shared(&guard)
            };
            // AcqRel: Release publishes the new list to wakers' Acquire load;
            // Acquire (on failure) sees the list that beat us.
            match self.list.compare_exchange(
                current,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
                &guard,
            ) {
                Ok(_) => {
                    if !current.is_null() {
                        // SAFETY: unlinked by the CAS; wakers that loaded it
                        // hold guards, and it is freed after they unpin.
                        unsafe { retire(current, &guard) };
                    }
                    return;
                }
                Err(lost) => {
                    if !new.is_null() {
                        // SAFETY: `new` was never published.
                        drop(unsafe { new.into_owned() });
                    }
                    current = lost.current;
                }
            }
        }
    }

    /// Wakes every registered thread and task. Wakers are user code: if
    /// one panics, the others are still woken, and then the first panic
    /// goes on to the caller, which must have finished its bookkeeping.
    pub(crate) fn wake(&self) {
        if let Err(panic) = self.wake_catching() {
            std::panic::resume_unwind(panic);
        }
    }

    /// [`wake`](Self::wake), handing a waker's panic (the first) back
    /// instead of passing it on: for a caller with more to wake.
    pub(crate) fn wake_catching(&self) -> Result<(), Box<dyn Any + Send>> {
        // SeqCst fence: the waker's half of the Dekker pair (module docs);
        // orders the caller's count update (or interrupt) before the load.
        fence(Ordering::SeqCst);
        let guard = epoch::pin();
        // Acquire: pairs with the Release CAS in `update`.
        let list = self.list.load(Ordering::Acquire, &guard);
        let mut result = Ok(());
        // SAFETY: a non-null list is valid until it is unlinked and the guard
        // we hold is released.
        if let Some(list) = unsafe { list.as_ref() } {
            for (_, handle) in list {
                match handle {
                    Handle::Thread(thread) => thread.unpark(),
                    // The executor's code, run under our guard: it only
                    // delays the list's reclamation, and a waker that calls
                    // back into the tracker pins again (pins nest).
                    Handle::Task(waker) => {
                        let woken = catch_unwind(AssertUnwindSafe(|| waker.wake_by_ref()));
                        if let (Err(panic), Ok(())) = (woken, &result) {
                            result = Err(panic);
                        }
                    }
                }
            }
        }
        result
    }
}

/// Hands an unlinked list to the epoch collector, to be freed once every
/// guard that may still read it is released. Dropping it may drop the last
/// `Arc` of a waker (user code) inside some other thread's `pin`, so it is
/// dropped [`quietly`].
///
/// # Safety
///
/// SAFETY: `list` was unlinked from `Waiter::list` under `guard`, and is
/// retired once.
unsafe fn retire(list: Shared<'_, Vec<Entry>>, guard: &Guard) {
    // SAFETY: by the contract above, nobody reaches the list once the
    // guards alive now are released, which is when the closure runs.
    let owned = unsafe { list.into_owned() };
    // SAFETY: the closure owns the list and touches nothing else; it does
    // not outlive anything it borrows (it borrows nothing).
    unsafe { guard.defer_unchecked(move || quietly(move || drop(owned))) };
}

impl Drop for Waiter {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no thread can load the pointer any more.
        let guard = unsafe { epoch::unprotected() };
        // Relaxed: exclusive access.
        let old = self.list.swap(Shared::null(), Ordering::Relaxed, guard);
        if !old.is_null() {
            // SAFETY: unlinked above and unreachable by anyone else.
            drop(unsafe { old.into_owned() });
        }
    }
}
