//! Unit tests of the count protocol, single-threaded: each steps the
//! owner and the sealer through one order of a race by hand.

use super::*;
use crate::sync::AtomicU64;

/// A chain of generations for the unit tests: `open_id` and a list.
struct TestChain {
    open_id: AtomicU64,
    gens: Vec<Generation>,
}

impl TestChain {
    fn new(n: u64) -> Self {
        Self {
            open_id: AtomicU64::new(0),
            gens: (0..n)
                .map(|id| Generation::new(id, std::ptr::null()))
                .collect(),
        }
    }

    /// Moves `open_id` on and captures every word of `id`.
    fn seal(&self, shards: &Shards, id: u64) -> bool {
        self.open_id.store(id + 1, Ordering::SeqCst);
        Shards::barrier();
        capture_all(shards, self.numbered(id))
    }
}

/// Captures every word for `g`; true if that drained it.
fn capture_all(shards: &Shards, g: &Generation) -> bool {
    let mut wakes = false;
    for s in 0..SHARDS {
        wakes |= shards.capture_remote(s, g);
        wakes |= shards.capture_own(s, g);
    }
    wakes
}

impl Chain for TestChain {
    fn open_id(&self) -> &AtomicU64 {
        &self.open_id
    }
    fn numbered(&self, id: u64) -> &Generation {
        &self.gens[id as usize]
    }
    fn expedited(&self) -> bool {
        false // full fences: always right
    }
}

#[test]
fn words_pack_signed_counts_and_compare_epochs_modulo() {
    for c in [0, 1, -1, (1 << 25), -(1 << 25), ROLLED, NONE] {
        assert_eq!(count(pack(7, c)), c);
        assert!(counts_for(pack(7, c), 7));
    }
    assert_eq!(behind(pack(5, 0), 7), 2);
    assert_eq!(behind(pack(7, 0), 5), -2);
    assert_eq!(behind(pack(EPOCH_MASK, 0), 0), 1, "wraps");
    assert_eq!(behind(pack(EPOCH_MASK, 0), EPOCH_MASK), 0);
}

#[test]
fn owners_and_others_count_capture_and_settle() {
    let chain = TestChain::new(3);
    let shards = Shards::new(chain.numbered(0));
    let mut wakes = false;
    let g0 = chain.numbered(0);
    // Owner 0 sends two; thread SHARDS (no shard of its own, on shard
    // 0's remote word) sends one.
    assert_eq!(shards.enter(0, 0, 1, &chain, &mut wakes), Entry::Entered);
    assert_eq!(shards.enter(0, 0, 1, &chain, &mut wakes), Entry::Entered);
    assert_eq!(
        shards.enter(SHARDS, 0, 1, &chain, &mut wakes),
        Entry::Entered
    );
    assert_eq!(shards.snapshot().uncaptured(0), 3);
    Shards::barrier();
    assert!(!shards.idle(g0));
    // The owner acks one of its own; another thread acks the other.
    assert!(!shards.leave(0, (g0, Route(SHARDS)), 1, &chain));
    assert!(!shards.leave(1, (g0, Route(SHARDS)), 1, &chain));
    assert_eq!(shards.snapshot().uncaptured(0), 1);
    assert!(!chain.seal(&shards, 0));
    assert!(!g0.drained());
    assert_eq!(shards.snapshot().uncaptured(0), 0, "all captured");
    // The remote record's leave settles on `pending` and drains it.
    assert!(shards.leave(SHARDS, (g0, Route(0)), 1, &chain));
    assert!(g0.drained());
    assert!(!wakes);
}

#[test]
fn an_owner_rolls_past_generations_sealed_while_it_was_idle() {
    let chain = TestChain::new(4);
    let shards = Shards::new(chain.numbered(0));
    let mut wakes = false;
    assert_eq!(shards.enter(1, 0, 1, &chain, &mut wakes), Entry::Entered);
    // Generation 0 sealed but only the remote words captured, then
    // generation 1 opened and sealed likewise: the owner's word is
    // still 0's.
    for id in 0..2 {
        chain.open_id.store(id + 1, Ordering::SeqCst);
        for s in 0..SHARDS {
            let _ = shards.capture_remote(s, chain.numbered(id));
            if s != 1 {
                let _ = shards.capture_own(s, chain.numbered(id));
            }
        }
    }
    assert!(!chain.numbered(0).drained());
    // The owner's next send captures 0 (with its record) and 1 (empty)
    // itself before counting in 2.
    assert_eq!(shards.enter(1, 2, 1, &chain, &mut wakes), Entry::Entered);
    assert!(wakes, "the empty generation 1 drained on the way");
    assert!(!chain.numbered(0).drained(), "its record is in flight");
    assert!(chain.numbered(1).drained());
    assert!(shards.leave(1, (chain.numbered(0), Route(SHARDS + 1)), 1, &chain));
    assert_eq!(shards.snapshot().uncaptured(2), 1);
}

#[test]
fn a_write_that_straddles_a_seal_learns_whether_it_was_captured() {
    let chain = TestChain::new(3);
    let shards = Shards::new(chain.numbered(0));
    let mut wakes = false;
    assert_eq!(shards.enter(0, 0, 1, &chain, &mut wakes), Entry::Entered);
    // The seal moves `open_id` after the owner loaded it, and captures
    // the word before its write: the write is out, and the send enters
    // again, in generation 1.
    assert!(!chain.seal(&shards, 0));
    assert_eq!(shards.enter(0, 0, 1, &chain, &mut wakes), Entry::Moved);
    assert_eq!(shards.enter(0, 1, 1, &chain, &mut wakes), Entry::Entered);
    // A seal that moved `open_id` but has not captured the word yet: the
    // owner's leave captures it itself, with the count it wrote.
    chain.open_id.store(2, Ordering::SeqCst);
    let g1 = chain.numbered(1);
    assert_eq!(
        shards.own_write(0, 1, pack(1, 0), &chain, &mut wakes),
        Applied::In,
        "captured by the owner"
    );
    assert!(!shards.capture_own(0, g1), "captured once");
    assert!(capture_all(&shards, g1), "the last capture drains it");
    assert!(g1.drained());
    // Generation 0's record leaves through the sealed path.
    assert!(shards.leave(0, (chain.numbered(0), Route(SHARDS)), 1, &chain));
}

#[test]
fn an_owner_folds_the_leaves_of_its_records_by_others() {
    let chain = TestChain::new(2);
    let shards = Shards::new(chain.numbered(0));
    let mut wakes = false;
    for _ in 0..3 {
        assert_eq!(shards.enter(2, 0, 1, &chain, &mut wakes), Entry::Entered);
    }
    let g0 = chain.numbered(0);
    for _ in 0..2 {
        assert!(!shards.leave(5, (g0, Route(SHARDS + 2)), 1, &chain));
    }
    assert_eq!(
        count(shards.shards[2].shared.remote.load(Ordering::SeqCst)),
        -2
    );
    assert_eq!(shards.enter(2, 0, 1, &chain, &mut wakes), Entry::Entered);
    assert_eq!(
        count(shards.shards[2].shared.remote.load(Ordering::SeqCst)),
        0
    );
    assert_eq!(count(shards.shards[2].own.word.load(Ordering::SeqCst)), 2);
    assert_eq!(shards.snapshot().uncaptured(0), 2);
}

#[test]
fn the_entry_rides_in_the_generation_pointer() {
    let g = Generation::new(7, std::ptr::null());
    for shard in 0..SHARDS {
        for own in [false, true] {
            let (back, route) = entered_from(entered_at(&g, shard, own));
            assert_eq!(back, &g as *const Generation);
            assert_eq!(route.shard(), shard);
            assert_eq!(route.owned_by(shard), own);
            assert!(!route.owned_by(shard + 1));
        }
    }
}

/// Short-lived threads: each sends a record and acks the one the thread
/// before it sent. Numbers of exited threads are reused, so a new thread
/// often takes over the `own` word its predecessor wrote with plain
/// stores, and acks that predecessor's record through it; flushes in
/// between capture the word across the hand-over. Every flush sees each
/// record once, and the takeover does happen.
#[test]
fn a_thread_that_takes_a_reused_number_carries_on_its_count_word() {
    use std::time::Duration;
    const THREADS: u64 = if cfg!(miri) { 6 } else { 300 };
    let tracker: crate::Tracker<&str, u64> = crate::Tracker::new();
    let mut previous: Option<crate::Ticket> = None;
    let mut previous_number = None;
    let mut takeovers = 0;
    for i in 0..THREADS {
        let flush = (i % 3 == 1).then(|| tracker.begin_flush().unwrap());
        let tracker = &tracker;
        let (ticket, number) = std::thread::scope(|s| {
            s.spawn(move || {
                let ticket = tracker.send("p", i).unwrap();
                let number = crate::sync::thread_index();
                if let Some(before) = previous {
                    tracker.ack(before).unwrap();
                }
                (ticket, number)
            })
            .join()
            .unwrap()
        });
        takeovers += usize::from(previous_number == Some(number) && Shards::owns(number));
        (previous, previous_number) = (Some(ticket), Some(number));
        if let Some(mut flush) = flush {
            // The flush covers record i - 1 (acked by thread i) and no
            // later one: its offset is exactly i - 1.
            let offsets = flush.wait(Duration::ZERO).unwrap();
            assert_eq!(offsets.get("p"), Some(&(i - 1)), "after thread {i}");
            flush.commit().unwrap();
        }
        assert_eq!(tracker.in_flight(), 1);
    }
    assert!(takeovers > 0, "no thread took over its predecessor's word");
    tracker.ack(previous.unwrap()).unwrap();
    let mut last = tracker.begin_flush().unwrap();
    assert_eq!(last.wait(Duration::ZERO).unwrap()["p"], THREADS - 1);
    last.commit().unwrap();
    assert_eq!(tracker.in_flight(), 0);
}
