//! The flusher's parking spot.
//!
//! A waiting flush stores its thread handle here and parks; whoever resolves
//! the last covered record (or calls `interrupt`) unparks it. The handle is an
//! epoch-protected pointer, so a waker never reads a handle the waiter is
//! freeing. The protocol against lost wake-ups is a Dekker pair:
//!
//! - waiter: store its handle (SeqCst), then read the counts (SeqCst);
//! - waker: take a count to zero (SeqCst RMW), then read the handle (SeqCst).
//!
//! In the single total order of SeqCst operations one of the two reads sees
//! the other side's write, so either the waiter sees zero and does not park,
//! or the waker sees the handle and unparks it (an unpark before the park
//! makes the park return at once).

use crate::sync::epoch::{self, Atomic, Owned, Shared};
use crate::sync::{current_thread, Ordering, Thread};

pub(crate) struct Waiter {
    thread: Atomic<Thread>,
}

impl Waiter {
    pub(crate) fn new() -> Self {
        Self {
            thread: Atomic::null(),
        }
    }

    /// Makes the calling thread the one to wake. Re-check the condition
    /// after this and before parking.
    pub(crate) fn register(&self) {
        let guard = epoch::pin();
        // SeqCst: the waiter's store of the Dekker pair (module docs).
        let old = self
            .thread
            .swap(Owned::new(current_thread()), Ordering::SeqCst, &guard);
        if !old.is_null() {
            // SAFETY: `old` was unlinked by the swap; wakers that loaded it
            // hold guards, and it is destroyed only after they unpin.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// Stops being woken.
    pub(crate) fn unregister(&self) {
        let guard = epoch::pin();
        // AcqRel: nothing is published through the handle itself.
        let old = self.thread.swap(Shared::null(), Ordering::AcqRel, &guard);
        if !old.is_null() {
            // SAFETY: as in `register`.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// Unparks the registered thread, if any.
    pub(crate) fn wake(&self) {
        let guard = epoch::pin();
        // SeqCst: the waker's read of the Dekker pair (module docs).
        let thread = self.thread.load(Ordering::SeqCst, &guard);
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
