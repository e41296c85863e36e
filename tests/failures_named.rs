//! A failure names its partition on every kind of tracker (issue 39, item
//! 5, the partitions): `Stats::stopped` lists the partitions a failed
//! record stops, and the recovery the docs give (revoke each, redo it from
//! its committed offset) lets the other partitions commit again, as a
//! source task does it.

#[macro_use]
mod modes;

use inflight::{FlushError, Tracker};
use std::collections::HashMap;
use std::time::Duration;

#[test]
fn a_failure_names_its_partition_on_a_barrier_tracker() {
    each_mode!(tracker = [Tracker::new(), Tracker::builder().inline_offsets().build()] {
        // A source task's partitions, and the source's committed offsets.
        let mut committed: HashMap<&str, u64> = HashMap::new();
        let a1 = tracker.send("a", 1_u64).unwrap();
        let b1 = tracker.send("b", 1).unwrap();
        let b2 = tracker.send("b", 2).unwrap();
        tracker.ack(a1).unwrap();
        tracker.ack(b1).unwrap();
        tracker.fail(b2).unwrap(); // can never be delivered
        assert_eq!(tracker.stats().stopped, vec!["b"]);
        for _ in 0..2 {
            // Every flush fails while "b" is stopped, and says so.
            let mut flush = tracker.begin_flush().unwrap();
            let failed = flush.wait(Duration::ZERO).unwrap_err();
            assert_eq!(failed, FlushError::Failed { failed: 1 });
            assert!(failed.to_string().contains("Stats::stopped"), "{failed}");
        }
        // The recovery: revoke what is stopped, rewind it to its committed
        // offset (none yet: from the start) and send it again.
        for partition in tracker.stats().stopped {
            let _ = tracker.revoke(&partition);
            let from = committed.get(partition).map_or(1, |c| c + 1);
            for offset in from..=2 {
                let ticket = tracker.send(partition, offset).unwrap();
                tracker.ack(ticket).unwrap();
            }
        }
        assert!(tracker.stats().stopped.is_empty(), "its life ended");
        let mut flush = tracker.begin_flush().unwrap();
        let offsets = flush.wait(Duration::ZERO).unwrap();
        committed.extend(offsets.iter().map(|(&p, &o)| (p, o)));
        flush.commit().unwrap();
        assert_eq!((committed["a"], committed["b"]), (1, 2));
    });
}

#[test]
fn stopped_names_failed_partitions_on_every_kind_of_tracker() {
    every_kind!(tracker => {
        let ok = tracker.send("a", 1_u64).unwrap();
        let bad = tracker.send("b", 1_u64).unwrap();
        let also_bad = tracker.send("c", 1_u64).unwrap();
        assert!(tracker.stats().stopped.is_empty());
        tracker.ack(ok).unwrap();
        tracker.fail_all([bad, also_bad]).unwrap();
        let mut stopped = tracker.stats().stopped;
        stopped.sort_unstable();
        assert_eq!(stopped, vec!["b", "c"]);
        let _ = tracker.revoke("b");
        assert_eq!(tracker.stats().stopped, vec!["c"]);
    });
}
