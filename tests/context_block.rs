//! A thread's context block (issue 41): the partition hint and generation
//! pointer a count shard's owner keeps between its sends. Loom checks them
//! against revokes and seals (`loom-tests/tests/context_models.rs`); these
//! tests cover what loom does not model: thread numbers reused by later
//! threads, which inherit the block with the number, and many partitions
//! across the partition index's growth, sent in turn from one thread.

use inflight::{Ticket, Tracker};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

/// Threads one after another (each takes the number the last one gave
/// back, and its context block with it: a thread gives its number back
/// as its thread-locals are destroyed, before `join` returns): each sends
/// to a partition of its own and to one shared with all, acks, and a
/// flush after each thread reports what that thread sent, under the right
/// partitions.
#[test]
fn threads_reusing_a_number_send_to_their_own_partitions() {
    let tracker: Arc<Tracker<String, u64>> = Arc::new(Tracker::new());
    for thread in 0..if cfg!(miri) { 4 } else { 20_u64 } {
        {
            let tracker = Arc::clone(&tracker);
            // `spawn` and `join`, not a scope: a scoped thread's end is
            // seen before its thread-locals (and its number) are gone.
            std::thread::spawn(move || {
                let mine = format!("own-{thread}");
                let a = tracker.send(mine, thread * 10).unwrap();
                let b = tracker.send("shared".to_string(), thread).unwrap();
                let c = tracker
                    .send(format!("own-{thread}"), thread * 10 + 1)
                    .unwrap();
                tracker.ack(a).unwrap();
                tracker.ack(b).unwrap();
                tracker.ack(c).unwrap();
            })
            .join()
            .unwrap();
        }
        let mut flush = tracker.begin_flush().unwrap();
        let offsets = flush.wait(Duration::ZERO).unwrap().clone();
        flush.commit().unwrap();
        let mut wanted = HashMap::new();
        wanted.insert(format!("own-{thread}"), thread * 10 + 1);
        wanted.insert("shared".to_string(), thread);
        assert_eq!(offsets, wanted, "thread {thread}");
    }
    assert_eq!(tracker.in_flight(), 0);
}

/// One thread sends to 2,000 partitions (100 under Miri) in turn, twice round, each send
/// missing the hint (the last partition is another), across every growth
/// of the partition index: each partition's flush offset is its own.
#[test]
fn partitions_in_turn_across_index_growth_keep_their_offsets() {
    // Fewer under Miri, still past three growths of the index (8 entries
    // to begin with, doubled at half full).
    const PARTITIONS: u32 = if cfg!(miri) { 100 } else { 2_000 };
    let tracker: Tracker<u32, u64> = Tracker::new();
    let mut tickets = Vec::new();
    for round in 0..2_u64 {
        for p in 0..PARTITIONS {
            tickets.push(tracker.send(p, u64::from(p) * 2 + round).unwrap());
        }
    }
    tracker.ack_all(tickets).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = flush.wait(Duration::ZERO).unwrap().clone();
    flush.commit().unwrap();
    assert_eq!(offsets.len(), PARTITIONS as usize);
    for (p, offset) in offsets {
        assert_eq!(offset, u64::from(p) * 2 + 1, "partition {p}");
    }
}

/// A partition key whose `Eq`, once armed, sends to another partition of
/// the same tracker from inside the comparison (user code calling back on
/// the same thread).
#[derive(Debug, Clone)]
struct Reentrant(u32);

thread_local! {
    static TRACKER: RefCell<Option<Arc<Tracker<Reentrant, u64>>>> = const { RefCell::new(None) };
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static INNER: RefCell<Vec<Ticket>> = const { RefCell::new(Vec::new()) };
}

impl Hash for Reentrant {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialEq for Reentrant {
    fn eq(&self, other: &Self) -> bool {
        if ARMED.with(|armed| armed.replace(false)) {
            let tracker = TRACKER.with(|t| t.borrow().clone()).expect("set");
            let ticket = tracker.send(Reentrant(2), 100).unwrap();
            INNER.with(|inner| inner.borrow_mut().push(ticket));
        }
        self.0 == other.0
    }
}

impl Eq for Reentrant {}

/// A send whose partition is the thread's hinted one runs `Eq` on the
/// hinted key; an `Eq` that sends to another partition moves the hint
/// meanwhile. The outer send still counts in its own partition, with its
/// own number (review of issue 41: it took the moved hint's number, so
/// partition 2 reported partition 1's offset).
#[test]
fn an_eq_that_sends_to_another_partition_leaves_the_outer_send_its_own() {
    let tracker = Arc::new(Tracker::<Reentrant, u64>::new());
    TRACKER.with(|t| *t.borrow_mut() = Some(Arc::clone(&tracker)));
    let first = tracker.send(Reentrant(1), 1).unwrap(); // the hint: 1
    ARMED.with(|armed| armed.set(true));
    let second = tracker.send(Reentrant(1), 500).unwrap(); // Eq sends to 2
    tracker.ack(first).unwrap();
    tracker.ack(second).unwrap();
    for ticket in INNER.with(|inner| inner.take()) {
        tracker.ack(ticket).unwrap();
    }
    let mut flush = tracker.begin_flush().unwrap();
    let mut offsets: Vec<_> = flush
        .wait(Duration::ZERO)
        .unwrap()
        .iter()
        .map(|(p, o)| (p.0, *o))
        .collect();
    flush.commit().unwrap();
    offsets.sort_unstable();
    assert_eq!(offsets, vec![(1, 500), (2, 100)]);
    TRACKER.with(|t| t.borrow_mut().take());
}
