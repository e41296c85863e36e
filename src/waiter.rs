//! Where waiting calls wait: a flush's `wait` and `drain`.
//!
//! A waiting call registers a handle here and parks; whoever resolves the
//! last record of a sealed generation (or calls `interrupt`) wakes every
//! registered handle, and each waiter re-checks its own condition. Several
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

use crate::sync::epoch::{self, Atomic, Owned, Shared};
use crate::sync::{fence, parker, AtomicU64, Ordering, Parker, Unparker};

/// One registration: an id (to remove it by) and the handle to wake.
type Entry = (u64, Unparker);

pub(crate) struct Waiter {
    /// The registered handles; null when nobody waits.
    list: Atomic<Vec<Entry>>,
    /// Registration ids, so that a waiter removes only its own entry.
    next_id: AtomicU64,
}

/// A registration, returned by [`Waiter::register`]: park on it, and hand it
/// back to [`Waiter::unregister`] when done.
pub(crate) struct Registration {
    id: u64,
    parker: Parker,
}

impl Registration {
    /// Parks for at most `timeout`, or until woken (or spuriously).
    pub(crate) fn park_timeout(&self, timeout: std::time::Duration) {
        self.parker.park_timeout(timeout);
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
    pub(crate) fn register(&self) -> Registration {
        let (parker, unparker) = parker();
        // Relaxed: ids only need to be distinct.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.update(|list| list.push((id, unparker.clone())));
        // SeqCst fence: the waiter's half of the Dekker pair (module docs);
        // orders the registration above before the caller's re-check.
        fence(Ordering::SeqCst);
        Registration { id, parker }
    }

    /// Stops waking `registration`'s thread.
    pub(crate) fn unregister(&self, registration: Registration) {
        self.update(|list| list.retain(|(id, _)| *id != registration.id));
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
                        // hold guards, and it is destroyed after they unpin.
                        unsafe { guard.defer_destroy(current) };
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

    /// Wakes every registered thread.
    pub(crate) fn wake(&self) {
        // SeqCst fence: the waker's half of the Dekker pair (module docs);
        // orders the caller's count update (or interrupt) before the load.
        fence(Ordering::SeqCst);
        let guard = epoch::pin();
        // Acquire: pairs with the Release CAS in `update`.
        let list = self.list.load(Ordering::Acquire, &guard);
        // SAFETY: a non-null list is valid until it is unlinked and the guard
        // we hold is released.
        if let Some(list) = unsafe { list.as_ref() } {
            for (_, thread) in list {
                thread.unpark();
            }
        }
    }
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
