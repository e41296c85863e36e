//! Loom models of the failure log (`src/failed.rs`, issue 39 item 5):
//! `failed_records` beside the `fail` that names a record, a revoke that
//! ends its life, a failure that reuses an ended life's entry while a
//! report reads it, and two failures reusing ended lives' entries at once.
//! Offsets are loom `Arc`s, so an offset the log leaks or drops twice
//! fails the model, and the offset cell's accesses are checked for races.
//! Under loom the log has 2 entries, so a model reaches reuse.
#![cfg(loom)]

use inflight::{FailedBy, Tracker};
use loom::sync::Arc;
use loom::thread;

mod common;

use common::{off, run_model, watermarked, T};

/// What a report says, as plain data.
fn named(
    report: Vec<inflight::FailedRecord<&'static str, common::Off>>,
) -> Vec<(&'static str, Option<u64>, FailedBy)> {
    report
        .into_iter()
        .map(|f| (f.partition, f.offset.map(|o| *o), f.failed_by))
        .collect()
}

/// F1. A report beside the `fail` that names the record sees nothing, the
/// partition alone (failed, not yet named), or the record; once the fail
/// returned, the record.
#[test]
fn report_beside_fail() {
    run_model("report_beside_fail", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let ticket = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let failer = thread::spawn(move || t2.fail(ticket).unwrap());
        let seen = named(tracker.failed_records(4));
        assert!(
            seen.is_empty()
                || seen == vec![("p", None, FailedBy::Unknown)]
                || seen == vec![("p", Some(1), FailedBy::Fail)],
            "{seen:?}"
        );
        failer.join().unwrap();
        assert_eq!(
            named(tracker.failed_records(4)),
            vec![("p", Some(1), FailedBy::Fail)]
        );
    });
}

/// F2. A revoke racing the `fail`: whichever wins, the life ends, so the
/// report names nothing after both, and the offset is dropped once.
#[test]
fn revoke_beside_fail() {
    run_model("revoke_beside_fail", || {
        let tracker = watermarked();
        let ticket = tracker.send("p", off(1)).unwrap();
        let t2 = tracker.clone();
        let failer = thread::spawn(move || {
            let _ = t2.fail(ticket); // Err(Revoked) if the revoke came first
        });
        let _ = tracker.revoke("p");
        failer.join().unwrap();
        assert!(tracker.failed_records(4).is_empty());
    });
}

/// F3. A failure that needs an entry while a report reads the log: the
/// only free entry is an ended life's, which the report may be reading.
/// The failure reuses it (dropping its offset) or, finding it read, keeps
/// no offset; the report never names the ended life, and reads no offset
/// being overwritten.
#[test]
fn reuse_beside_report() {
    run_model("reuse_beside_report", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        for p in ["p", "q"] {
            let ticket = tracker.send(p, off(1)).unwrap();
            tracker.fail(ticket).unwrap(); // both entries taken
        }
        let _ = tracker.revoke("p"); // p's entry: an ended life
        let ticket = tracker.send("r", off(2)).unwrap();
        let t2 = tracker.clone();
        let failer = thread::spawn(move || t2.fail(ticket).unwrap());
        let seen = named(tracker.failed_records(4));
        assert!(seen.iter().all(|&(p, ..)| p != "p"), "{seen:?}");
        assert!(seen.contains(&("q", Some(1), FailedBy::Fail)), "{seen:?}");
        failer.join().unwrap();
        let after = named(tracker.failed_records(4));
        assert_eq!(after[0], ("q", Some(1), FailedBy::Fail));
        assert!(
            after[1..] == [("r", Some(2), FailedBy::Fail)]
                || after[1..] == [("r", None, FailedBy::Unknown)],
            "{after:?}"
        );
    });
}

/// F4. Two failures at once, both entries of an ended life (reusable,
/// with the same word: `READY`, an offset, `Fail`, no readers): one
/// failure may reuse an entry and publish the word the other read before
/// the other's claim. The claim must then fail (the entry's `reuses`
/// count moved on) and take the other entry, so both records are named;
/// an ABA claim would overwrite the first and drop its offset (review
/// F4).
#[test]
fn two_writers_reusing_entries_name_both() {
    run_model("two_writers_reusing_entries_name_both", || {
        let tracker: Arc<T> = Arc::new(Tracker::new());
        let x = tracker.send("p", off(1)).unwrap();
        tracker.fail(x).unwrap();
        let y = tracker.send("p", off(2)).unwrap();
        tracker.fail(y).unwrap(); // both entries name p's life
        let _ = tracker.revoke(&"p"); // which ends: both reusable
        let a = tracker.send("q", off(10)).unwrap();
        let b = tracker.send("q", off(11)).unwrap();
        let t2 = tracker.clone();
        let h = thread::spawn(move || t2.fail(b).unwrap());
        tracker.fail(a).unwrap();
        h.join().unwrap();
        let mut named: Vec<u64> = tracker
            .failed_records(10)
            .into_iter()
            .filter_map(|f| f.offset.map(|o| *o))
            .collect();
        named.sort_unstable();
        assert_eq!(named, [10, 11]);
    });
}
