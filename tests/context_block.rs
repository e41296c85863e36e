//! A thread's context block (issue 41): the partition hint and generation
//! pointer a count shard's owner keeps between its sends. Loom checks them
//! against revokes and seals (`loom-tests/tests/context_models.rs`); these
//! tests cover what loom does not model: thread numbers reused by later
//! threads, which inherit the block with the number, and many partitions
//! across the partition index's growth, sent in turn from one thread.

use inflight::Tracker;
use std::collections::HashMap;
use std::time::Duration;

/// Threads one after another (each takes the number the last one gave
/// back, and its context block with it): each sends to a partition of its
/// own and to one shared with all, acks, and a flush after each thread
/// reports what that thread sent, under the right partitions.
#[test]
fn threads_reusing_a_number_send_to_their_own_partitions() {
    let tracker: Tracker<String, u64> = Tracker::new();
    for thread in 0..if cfg!(miri) { 4 } else { 20_u64 } {
        std::thread::scope(|s| {
            s.spawn(|| {
                let mine = format!("own-{thread}");
                let a = tracker.send(mine, thread * 10).unwrap();
                let b = tracker.send("shared".to_string(), thread).unwrap();
                let c = tracker
                    .send(format!("own-{thread}"), thread * 10 + 1)
                    .unwrap();
                tracker.ack(a).unwrap();
                tracker.ack(b).unwrap();
                tracker.ack(c).unwrap();
            });
        });
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
