//! The asymmetric barrier: a light side on the hot path that costs a
//! compiler fence, and a heavy side, paid by the rare caller (a revoke),
//! that makes every thread of the process execute a full fence.
//!
//! Together they order like a pair of `SeqCst` fences: for a light barrier
//! `L` and a heavy barrier `H`, either everything before `L` is visible to
//! what follows `H`, or everything before `H` is visible to what follows
//! `L`. That resolves the store-buffering pattern (each side writes one
//! word, then reads the other's), which acquire and release cannot order,
//! without a locked instruction on the light side.
//!
//! On Linux the heavy side is `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`
//! (through `rustix`; registered once per process, when the first tracker
//! is made): the kernel interrupts every core running a thread of the
//! process and has it execute a full barrier, and a thread not running
//! passed one when it was switched out. The light side then needs only to
//! keep the compiler from moving accesses across it.
//!
//! Where the call is unavailable (another OS, a kernel before 4.14, a
//! seccomp filter that forbids it, Miri) or switched off with the
//! environment variable `INFLIGHT_NO_MEMBARRIER` (any value but `0`), both
//! sides are full fences (`fence(SeqCst)`): one locked instruction on the
//! light side, which is what the read-modify-writes it replaced cost.
//!
//! Under `--cfg loom` both sides are `fence(SeqCst)`, which loom checks
//! exactly; the kernel call itself is what loom cannot see, and a stress
//! test on real threads covers it (`tests/stress_fences.rs`).

#[cfg(not(loom))]
mod imp {
    use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering};

    /// Not decided yet: the first `heavy` or `register` decides.
    const UNKNOWN: u8 = 0;
    /// Registered for `MEMBARRIER_CMD_PRIVATE_EXPEDITED`: the light side is
    /// a compiler fence. Once set, never changes.
    const EXPEDITED: u8 = 1;
    /// No system call: both sides are full fences. Once set, never changes.
    const FENCES: u8 = 2;

    static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// The light side, on the hot path: one load of a read-shared byte and
    /// a compiler fence (a full fence where the heavy side cannot help).
    #[inline(always)]
    pub(crate) fn light() {
        // Relaxed: reading `EXPEDITED` means a registration succeeded (it is
        // stored only after), and it never changes back, so every heavy
        // barrier makes the call (a heavy side that reads a stale `UNKNOWN`
        // registers, and its CAS reads `EXPEDITED`).
        light_as(MODE.load(Ordering::Relaxed) == EXPEDITED);
    }

    /// [`light`] for a caller that kept the mode: `expedited` is what
    /// [`register`] returned to it (a tracker keeps it from its
    /// constructor, so its sends read a field of their own rather than a
    /// global through the GOT). The mode never changes once decided, so
    /// the kept answer stays right; a `false` is always safe (a full
    /// fence).
    #[inline(always)]
    pub(crate) fn light_as(expedited: bool) {
        if expedited {
            // The kernel supplies the fence, at the heavy side's moment;
            // this keeps the compiler from moving an access across it.
            compiler_fence(Ordering::SeqCst);
        } else {
            // SeqCst fence: pairs with the heavy side's.
            fence(Ordering::SeqCst);
        }
    }

    /// The heavy side: every thread of the process executes a full fence
    /// (or, in the fallback, this one does).
    pub(crate) fn heavy() {
        if register() {
            // SeqCst fence: our own side of the barrier (the call's IPIs
            // order other cores; this orders this thread).
            fence(Ordering::SeqCst);
            barrier_or_abort();
            // SeqCst fence: as above, after the call.
            fence(Ordering::SeqCst);
        } else {
            // SeqCst fence: pairs with the light side's full fence.
            fence(Ordering::SeqCst);
        }
    }

    /// The expedited barrier, retried, then the global one, which needs no
    /// registration; if the kernel refuses both (out of memory for its CPU
    /// mask, or a seccomp filter installed after the first tracker was
    /// made), the process aborts: sends have already skipped their fences,
    /// so no fence on this side alone would order them, and going on would
    /// let a record of a revoked life through.
    #[cold]
    fn barrier_or_abort() {
        for _ in 0..3 {
            if call(Command::Barrier).is_ok() {
                return;
            }
            std::thread::yield_now();
        }
        if call(Command::Global).is_ok() {
            return;
        }
        eprintln!(
            "inflight: the membarrier system call failed after it was registered \
             (see inflight::uses_membarrier); aborting rather than let a revoke \
             miss a send. Set INFLIGHT_NO_MEMBARRIER=1 where a sandbox forbids it."
        );
        std::process::abort();
    }

    /// Decides, once per process, whether the system call is used, and
    /// registers for it; true if it is. Cheap after the first call.
    pub(crate) fn register() -> bool {
        // Acquire: a heavy barrier that reads `EXPEDITED` comes after the
        // registration the deciding thread made (its Release CAS below).
        match MODE.load(Ordering::Acquire) {
            EXPEDITED => return true,
            FENCES => return false,
            _ => {}
        }
        let mode = if switched_off() || !supported() {
            FENCES
        } else {
            EXPEDITED
        };
        // Release: our registration before the decision; Acquire (on
        // failure): the decider's. Whoever decided first decides for
        // everyone (the CAS reads the latest value); registering twice is
        // harmless.
        match MODE.compare_exchange(UNKNOWN, mode, Ordering::Release, Ordering::Acquire) {
            Ok(_) => mode == EXPEDITED,
            Err(decided) => decided == EXPEDITED,
        }
    }

    /// `INFLIGHT_NO_MEMBARRIER` is set (to anything but `0` or nothing).
    fn switched_off() -> bool {
        std::env::var_os("INFLIGHT_NO_MEMBARRIER").is_some_and(|v| !v.is_empty() && v != "0")
    }

    enum Command {
        Register,
        Barrier,
        /// `MEMBARRIER_CMD_GLOBAL`: every thread of every process, slower
        /// (it waits for an RCU grace period), no registration needed.
        Global,
    }

    /// Whether the kernel offers the expedited private barrier, and we
    /// registered for it.
    fn supported() -> bool {
        call(Command::Register).is_ok()
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    fn call(command: Command) -> Result<(), ()> {
        use rustix::thread::{membarrier, membarrier_query, MembarrierCommand as C};
        match command {
            Command::Register => {
                let offered = membarrier_query();
                if !offered.contains_command(C::PrivateExpedited)
                    || !offered.contains_command(C::RegisterPrivateExpedited)
                {
                    return Err(());
                }
                membarrier(C::RegisterPrivateExpedited).map_err(drop)
            }
            Command::Barrier => membarrier(C::PrivateExpedited).map_err(drop),
            Command::Global => membarrier(C::Global).map_err(drop),
        }
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    fn call(_: Command) -> Result<(), ()> {
        Err(())
    }
}

#[cfg(loom)]
mod imp {
    use loom::sync::atomic::{fence, Ordering};

    /// The light side under loom: a `SeqCst` fence, checked exactly.
    #[inline(always)]
    pub(crate) fn light() {
        fence(Ordering::SeqCst);
    }

    /// [`light`] for a caller that kept the mode: the same fence.
    #[inline(always)]
    pub(crate) fn light_as(_expedited: bool) {
        fence(Ordering::SeqCst);
    }

    /// The heavy side under loom: a `SeqCst` fence.
    pub(crate) fn heavy() {
        fence(Ordering::SeqCst);
    }

    /// Under loom there is no system call to register for.
    pub(crate) fn register() -> bool {
        false
    }
}

pub(crate) use imp::{heavy, light, light_as, register};
