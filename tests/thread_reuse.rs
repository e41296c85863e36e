//! Short-lived threads: each sends a record and acks the one the thread
//! before it sent. Thread numbers of exited threads are reused, so a new
//! thread often takes over the count word (`src/counts.rs`) its
//! predecessor wrote with plain stores, and acks that predecessor's record
//! through it; flushes in between capture the word across the hand-over.
//! Every flush must see each record once: none lost to the takeover, none
//! counted twice.

use inflight::Tracker;
use std::time::Duration;

#[test]
fn a_thread_that_takes_a_reused_number_carries_on_its_count_word() {
    const THREADS: u64 = if cfg!(miri) { 6 } else { 300 };
    let tracker: Tracker<&str, u64> = Tracker::new();
    let mut previous = None;
    for i in 0..THREADS {
        let flush = (i % 3 == 1).then(|| tracker.begin_flush().unwrap());
        let tracker = &tracker;
        previous = std::thread::scope(|s| {
            s.spawn(move || {
                let ticket = tracker.send("p", i).unwrap();
                if let Some(before) = previous {
                    tracker.ack(before).unwrap();
                }
                ticket
            })
            .join()
            .unwrap()
        })
        .into();
        if let Some(mut flush) = flush {
            // The flush covers record i - 1 (acked by thread i) and no
            // later one: its offset is exactly i - 1.
            let offsets = flush.wait(Duration::ZERO).unwrap();
            assert_eq!(offsets.get("p"), Some(&(i - 1)), "after thread {i}");
            flush.commit().unwrap();
        }
        assert_eq!(tracker.in_flight(), 1);
    }
    tracker.ack(previous.unwrap()).unwrap();
    let mut last = tracker.begin_flush().unwrap();
    assert_eq!(last.wait(Duration::ZERO).unwrap()["p"], THREADS - 1);
    last.commit().unwrap();
    assert_eq!(tracker.in_flight(), 0);
}
