//! Helpers shared by the loom model files (`models.rs`, `async_models.rs`).
#![allow(dead_code)] // each file uses a different part

use inflight::Tracker;
use loom::sync::Arc;
use std::collections::HashMap;
use std::time::Duration;

/// Offsets in the models: reference counted by loom, so leaks and double
/// drops are reported; hashed by value (a watermark tracker hashes the
/// offset it owes).
#[derive(Clone, Debug)]
pub struct Off(Arc<u64>);

impl std::ops::Deref for Off {
    type Target = u64;
    fn deref(&self) -> &u64 {
        &self.0
    }
}

impl std::hash::Hash for Off {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (*self.0).hash(state);
    }
}
pub type T = Tracker<&'static str, Off>;
/// A watermark tracker of the models' types.
pub type W = inflight::WatermarkTracker<&'static str, Off>;

/// Long enough that only a wake-up can end the wait (loom has no clock: a
/// wait that is never woken is reported as a deadlock).
pub const FOREVER: Duration = Duration::from_secs(3600);

pub fn off(n: u64) -> Off {
    Off(Arc::new(n))
}

/// Offsets as plain numbers, for comparisons.
pub fn plain(offsets: HashMap<&'static str, Off>) -> Vec<(&'static str, u64)> {
    let mut v: Vec<_> = offsets.into_iter().map(|(p, o)| (p, *o)).collect();
    v.sort();
    v
}

/// Runs a model under loom with its name, so a failure says which one and how
/// to replay it.
pub fn run_model(name: &'static str, f: impl Fn() + Sync + Send + 'static) {
    run_model_bounded(name, usize::MAX, f);
}

/// [`run_model`] with the preemption bound capped at `cap`, for the few
/// models whose state space is too large for the suite's default bound.
pub fn run_model_bounded(name: &'static str, cap: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(3).min(cap));
    // Not a spin: dropping a generation or a key page touches each of its
    // (loom-tracked) atomics, which loom counts as branches.
    builder.max_branches = 10_000;
    let iterations = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = iterations.clone();
    eprintln!(
        "model {name}: exploring (LOOM_MAX_PREEMPTIONS={:?})",
        builder.preemption_bound
    );
    let started = std::time::Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        builder.check(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            f();
        })
    }));
    let n = iterations.load(std::sync::atomic::Ordering::Relaxed);
    match result {
        Ok(()) => eprintln!("model {name}: {n} executions in {:.1?}", started.elapsed()),
        Err(panic) => {
            // The crate's name is the test binary's (tests/NAME.rs): a
            // replay builds only that one.
            eprintln!(
                "model {name}: FAILED at execution {n}. Replay with \
                 LOOM_CHECKPOINT_FILE=/tmp/{name}.json LOOM_CHECKPOINT_INTERVAL=1, \
                 then LOOM_LOG=trace LOOM_LOCATION=1 loom-tests/run --test {} -- {name}",
                env!("CARGO_CRATE_NAME")
            );
            std::panic::resume_unwind(panic);
        }
    }
}

/// A tracker that keeps watermarks.
pub fn watermarked() -> Arc<W> {
    Arc::new(Tracker::builder().watermarks().build())
}

/// Models 11b and C4: `close` then `drain` racing a send, by loom's thread
/// 1 (an owner of a count shard) or, `without_shard`, thread 2 (none: its
/// entry is a compare-exchange on a remote word). The drain waits for an
/// accepted record, or the send is refused with its record.
#[allow(dead_code)] // not every test binary uses it
pub fn close_then_drain_vs_send(without_shard: bool) {
    use inflight::{DrainError, SendError};
    let tracker: Arc<T> = Arc::new(Tracker::new());
    // Seals generation 0: the open one is now number 1, the only kind
    // `drain` may skip sealing.
    tracker.drain(Duration::ZERO).unwrap();
    if without_shard {
        // Loom's thread 1, so that the sender is thread 2.
        loom::thread::spawn(|| {}).join().unwrap();
    }
    let t2 = tracker.clone();
    let sender = loom::thread::spawn(move || t2.send("p", off(1)));
    tracker.close();
    let drained = tracker.drain(Duration::ZERO);
    match sender.join().unwrap() {
        Ok(ticket) => {
            assert_eq!(
                drained,
                Err(DrainError::Timeout { pending: 1 }),
                "drain after close passed an accepted, unacked record"
            );
            assert_eq!(tracker.in_flight(), 1);
            tracker.ack(ticket).unwrap();
        }
        Err(SendError::Closed(p, o)) => {
            assert_eq!((p, *o), ("p", 1), "the record comes back");
            // The drain may have counted the record before the send backed
            // out.
            assert!(
                matches!(drained, Ok(()) | Err(DrainError::Timeout { pending: 1 })),
                "{drained:?}"
            );
            assert_eq!(tracker.in_flight(), 0);
        }
        Err(e) => panic!("unexpected {e:?}"),
    }
    tracker.drain(Duration::ZERO).unwrap();
}

/// Model 25's race (and I1's, on an inline tracker): a send of offset 1
/// on another thread against a revoke of its partition, which has one
/// acked record (offset 0). Either the record belongs to the ended life
/// and is released, by the revoke's scan or by its own send (which counts
/// it for this revoke or the next): its ack answers `Revoked`, the two
/// revokes count it exactly once, and no flush reports it. Or it belongs
/// to the new life: delivered, counted by no revoke, and reported. Never
/// both, never neither; nothing is in flight at the end. `value` reads an
/// offset back as a number.
pub fn revoke_vs_send<O, M>(
    tracker: Tracker<&'static str, O, M>,
    off: fn(u64) -> O,
    value: fn(&O) -> u64,
) where
    O: Clone + Send + Sync + std::fmt::Debug + 'static,
    M: inflight::mode::Mode,
{
    let tracker = Arc::new(tracker);
    let zero = tracker.send("p", off(0)).unwrap();
    tracker.ack(zero).unwrap();
    let t2 = tracker.clone();
    let sender = loom::thread::spawn(move || t2.send("p", off(1)).unwrap());
    let first = tracker.revoke("p");
    let ticket = sender.join().unwrap();
    check_revoke_outcome(&tracker, first.released, ticket, 1, value);
}

/// The end of a send racing a revoke (`first` released so many): the
/// record (`ticket`, offset `offset`) was released exactly once and is
/// not reported, or it is of the new life, delivered and reported; nothing
/// is in flight after. Models 25, 25b and I1.
pub fn check_revoke_outcome<O, M>(
    tracker: &Tracker<&'static str, O, M>,
    first: usize,
    ticket: inflight::Ticket,
    offset: u64,
    value: fn(&O) -> u64,
) where
    O: Clone + Send + Sync + std::fmt::Debug + 'static,
    M: inflight::mode::Mode,
{
    use inflight::ResolveError;
    let flushed = || {
        let mut flush = tracker.begin_flush().unwrap();
        let offsets: Vec<_> = flush
            .wait(Duration::ZERO)
            .unwrap()
            .iter()
            .map(|(&p, o)| (p, value(o)))
            .collect();
        flush.commit().unwrap();
        offsets
    };
    match tracker.ack(ticket) {
        Err(ResolveError::Revoked) => {
            let second = tracker.revoke("p").released;
            assert_eq!(
                (first, second),
                if first == 1 { (1, 0) } else { (0, 1) },
                "the released send is counted exactly once"
            );
            assert_eq!(flushed(), vec![], "an offset of the ended life");
        }
        Ok(()) => {
            assert_eq!(first, 0, "delivered and released");
            assert_eq!(
                flushed(),
                vec![("p", offset)],
                "a record of the new life is reported"
            );
            let second = tracker.revoke("p");
            assert_eq!(second.released, 0, "delivered and released late");
        }
        Err(e) => panic!("unexpected {e:?}"),
    }
    assert_eq!(tracker.in_flight(), 0);
}
