//! The flusher's parking spot.
//!
//! A waiting flush stores its thread handle here and parks; whoever resolves
//! the last covered record (or calls `interrupt`) unparks it. The handle is an
//! epoch-protected pointer, so a waker never reads a handle the waiter is
//! freeing. The protocol against lost wake-ups is a Dekker pair, ordered by
//! two SeqCst fences:
//!
//! - waiter: store its handle; fence; read the counts (and the interrupt);
//! - waker: take a count to zero (or set the interrupt); fence; read the
//!   handle.
//!
//! The two fences are ordered one way or the other in the single SeqCst
//! order. If the waiter's comes first, the waker's read sees the handle and
//! unparks it (an unpark before the park makes the park return at once); if
//! the waker's comes first, the waiter's read sees the zero (or interrupt)
//! and does not park. Fences, not SeqCst accesses, so that loom (which models
//! SeqCst fences but treats SeqCst accesses as AcqRel) checks the argument.

use crate::sync::epoch::{self, Atomic, Owned, Shared};
use crate::sync::{fence, parker, Ordering, Parker, Unparker};

pub(crate) struct Waiter {
    thread: Atomic<Unparker>,
}

impl Waiter {
    pub(crate) fn new() -> Self {
        Self {
            thread: Atomic::null(),
        }
    }

    /// Makes the calling thread the one to wake, and returns what it parks
    /// on. Re-check the condition after this and before parking.
    pub(crate) fn register(&self) -> Parker {
        let (parker, unparker) = parker();
        let guard = epoch::pin();
        // Release: publishes the handle to the waker's Acquire load.
        let old = self
            .thread
            .swap(Owned::new(unparker), Ordering::Release, &guard);
        if !old.is_null() {
            // SAFETY: `old` was unlinked by the swap; wakers that loaded it
            // hold guards, and it is destroyed only after they unpin.
            unsafe { guard.defer_destroy(old) };
        }
        // SeqCst fence: the waiter's half of the Dekker pair (module docs);
        // orders the store above before the caller's re-check.
        fence(Ordering::SeqCst);
        parker
    }

    /// Stops being woken.
    pub(crate) fn unregister(&self) {
        let guard = epoch::pin();
        // Relaxed: only this thread stores handles while it waits, so the
        // swap returns our own handle; wakers reach it under their guards.
        let old = self.thread.swap(Shared::null(), Ordering::Relaxed, &guard);
        if !old.is_null() {
            // SAFETY: as in `register`.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// Unparks the registered thread, if any.
    pub(crate) fn wake(&self) {
        // SeqCst fence: the waker's half of the Dekker pair (module docs);
        // orders the caller's count update (or interrupt) before the load.
        fence(Ordering::SeqCst);
        let guard = epoch::pin();
        // Acquire: pairs with the Release swap in `register`.
        let thread = self.thread.load(Ordering::Acquire, &guard);
        // SAFETY: a non-null handle is valid until it is unlinked and the
        // guard we hold is released.
        if let Some(thread) = unsafe { thread.as_ref() } {
            thread.unpark();
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no thread can load the pointer any more.
        let guard = unsafe { epoch::unprotected() };
        // Relaxed: exclusive access.
        let old = self.thread.swap(Shared::null(), Ordering::Relaxed, guard);
        if !old.is_null() {
            // SAFETY: unlinked above and unreachable by anyone else.
            drop(unsafe { old.into_owned() });
        }
    }
}
