//! Failures name their records (issue 39, item 5): `Tracker::failed_records`
//! lists the failed records not yet let go, with partition, offset and
//! cause, on every kind of tracker; the recovery the docs give (revoke each
//! named partition, rewind the source to its committed offset, redo) makes
//! flushes succeed again, and nothing past a failure is committed before it
//! is redone. Bounded, and consistent when user code panics.

#[macro_use]
mod modes;
mod panicky;

use inflight::{FailedBy, FailedRecord, FlushError, Tracker, NAMED_FAILURES, PER_LIFE};
use std::collections::HashMap;
use std::time::Duration;

/// The (partition, offset, cause) of a report.
fn named<P: Clone, O: Clone>(report: &[FailedRecord<P, O>]) -> Vec<(P, Option<O>, FailedBy)> {
    report
        .iter()
        .map(|f| (f.partition.clone(), f.offset.clone(), f.failed_by))
        .collect()
}

#[test]
fn a_failure_names_its_record_on_every_kind_of_tracker() {
    every_kind!(tracker => {
        assert!(tracker.failed_records(8).is_empty());
        let first = tracker.send("a", 1_u64).unwrap();
        let bad = tracker.send("a", 2_u64).unwrap();
        let good = tracker.send("b", 1_u64).unwrap();
        let also_bad = tracker.send("b", 2_u64).unwrap();
        tracker.ack(good).unwrap();
        // Failed behind an unresolved record: named at once, before any
        // watermark reaches it.
        tracker.fail(bad).unwrap();
        assert_eq!(named(&tracker.failed_records(8)), vec![("a", Some(2), FailedBy::Fail)]);
        tracker.fail_raw(also_bad.into_raw()).unwrap();
        tracker.ack(first).unwrap();
        let report = tracker.failed_records(8);
        assert_eq!(
            named(&report),
            vec![("a", Some(2), FailedBy::Fail), ("b", Some(2), FailedBy::Fail)]
        );
        // Bounded like `oldest_unresolved`: the first failed first.
        assert_eq!(named(&tracker.failed_records(1)), vec![("a", Some(2), FailedBy::Fail)]);
        assert!(tracker.failed_records(0).is_empty());
        // Let go with the partition's life, and not named again.
        let _ = tracker.revoke("a");
        assert_eq!(named(&tracker.failed_records(8)), vec![("b", Some(2), FailedBy::Fail)]);
        let _ = tracker.revoke("b");
        assert!(tracker.failed_records(8).is_empty());
        // A new life's failure is named; the old entries are reused.
        let again = tracker.send("a", 2_u64).unwrap();
        tracker.fail(again).unwrap();
        assert_eq!(named(&tracker.failed_records(8)), vec![("a", Some(2), FailedBy::Fail)]);
    });
}

#[test]
fn fail_all_names_each_record_and_refused_tickets_are_not_named() {
    each_mode!(tracker = [
        Tracker::new(),
        Tracker::builder().watermarks().build(),
        Tracker::builder().progress(64).build(),
    ] {
        let mut tickets = Vec::new();
        tracker.send_batch(&"p", 1_u64..=3, &mut tickets).unwrap();
        let other = Tracker::<&str, u64>::new();
        tickets.push(other.send("p", 99).unwrap()); // refused: not ours
        let err = tracker.fail_all(tickets).unwrap_err();
        assert_eq!((err.resolved, err.refused), (3, 1));
        let report = named(&tracker.failed_records(8));
        assert_eq!(
            report,
            (1..=3).map(|o| ("p", Some(o), FailedBy::Fail)).collect::<Vec<_>>()
        );
        // A duplicate raw failure of a record already failed names nothing
        // new.
        let raw = tracker.send("q", 5).unwrap().into_raw();
        tracker.ack_raw(raw).unwrap();
        assert!(tracker.fail_raw(raw).is_err());
        assert_eq!(tracker.failed_records(8).len(), 3);
    });
}

/// The source task of the README's recovery section, on every kind of
/// tracker: two partitions, one record the sink cannot deliver the first
/// time. The failure names it; the task revokes its partition, rewinds the
/// source to the committed offset, and redoes it. Flushes then succeed, and
/// no offset past the failure was committed before it was redone.
#[test]
fn the_recovery_redoes_the_named_records_and_flushes_succeed_again() {
    every_kind!(tracker => {
        const LAST: u64 = 6;
        // The source's committed offsets, and every commit made.
        let mut committed: HashMap<&str, u64> = HashMap::new();
        let mut commits: Vec<(&str, u64)> = Vec::new();
        // Whether the failed record (b, 4) was delivered since.
        let mut redone = false;
        // The sink: delivers every record but (b, 4), the first time.
        let mut failed_once = false;
        let mut deliver = |partition: &str, offset: u64| {
            let fails = (partition, offset) == ("b", 4) && !failed_once;
            failed_once |= fails;
            !fails
        };
        // One commit: the flush's offsets (watermark trackers: what is
        // committable too), checked against the failure.
        let mut commit = |committed: &mut HashMap<&str, u64>, redone: bool| {
            let mut flush = tracker.begin_flush().unwrap();
            let result = flush.wait(Duration::ZERO);
            let mut offsets: Vec<(&str, u64)> = match &result {
                Ok(offsets) => offsets.iter().map(|(&p, &o)| (p, o)).collect(),
                Err(_) => Vec::new(),
            };
            if result.is_ok() {
                flush.commit().unwrap();
            }
            offsets.extend(tracker.committable().into_iter());
            for (partition, offset) in offsets {
                assert!(
                    partition != "b" || offset < 4 || redone,
                    "b's {offset} committed before its failed record was redone"
                );
                commits.push((partition, offset));
                let at = committed.entry(partition).or_insert(0);
                *at = (*at).max(offset);
            }
            result.map(|_| ())
        };
        // Sends `from..=LAST` of `partition` and resolves each as the sink
        // does.
        let mut run = |partition: &'static str, from: u64, redone: &mut bool| {
            for offset in from..=LAST {
                let ticket = tracker.send(partition, offset).unwrap();
                if deliver(partition, offset) {
                    tracker.ack(ticket).unwrap();
                    *redone |= (partition, offset) == ("b", 4);
                } else {
                    tracker.fail(ticket).unwrap();
                }
            }
        };
        run("a", 1, &mut redone);
        run("b", 1, &mut redone);
        assert_eq!(
            commit(&mut committed, redone),
            Err(FlushError::Failed { failed: 1 })
        );
        let message = FlushError::Failed { failed: 1 }.to_string();
        assert!(message.contains("Tracker::failed_records"), "{message}");
        // Every flush fails until the recovery; the failure names itself.
        assert!(commit(&mut committed, redone).is_err());
        let report = tracker.failed_records(16);
        assert_eq!(named(&report), vec![("b", Some(4), FailedBy::Fail)]);
        // The recovery: revoke each named partition, rewind the source to
        // its committed offset, redo from there.
        let mut partitions: Vec<&str> = report.iter().map(|f| f.partition).collect();
        partitions.dedup();
        for partition in partitions {
            let revoked = tracker.revoke(partition);
            if let Some(offset) = revoked.committable {
                // A watermark's last advance before the failure.
                assert!(offset < 4);
                let at = committed.entry(partition).or_insert(0);
                *at = (*at).max(offset);
            }
            let from = committed.get(partition).map_or(1, |c| c + 1);
            assert!(from <= 4, "the rewind reaches the failed record");
            run(partition, from, &mut redone);
        }
        assert!(redone);
        assert!(tracker.failed_records(16).is_empty());
        assert!(tracker.stats().stopped.is_empty());
        commit(&mut committed, redone).unwrap();
        assert_eq!((committed["a"], committed["b"]), (LAST, LAST), "{commits:?}");
        // And later flushes succeed as usual.
        run("a", LAST + 1, &mut redone);
        commit(&mut committed, redone).unwrap();
    });
}

#[test]
fn the_names_are_bounded_and_every_stopped_partition_is_listed() {
    each_mode!(tracker = [
        Tracker::new(),
        Tracker::builder().watermarks().build(),
        Tracker::builder().progress(64).build(),
    ] {
        // One partition that fails every record: PER_LIFE named, the
        // first failed.
        for offset in 1..=PER_LIFE as u64 + 4 {
            let ticket = tracker.send(0_u32, offset).unwrap();
            tracker.fail(ticket).unwrap();
        }
        let report = named(&tracker.failed_records(100));
        let expected: Vec<_> = (1..=PER_LIFE as u64).map(|o| (0, Some(o), FailedBy::Fail)).collect();
        assert_eq!(report, expected);
        // More partitions failing than the log names: the rest are listed
        // once each, with no offset.
        let partitions = NAMED_FAILURES as u32 + 5;
        for partition in 1..partitions {
            let ticket = tracker.send(partition, 7_u64).unwrap();
            tracker.fail(ticket).unwrap();
        }
        let report = tracker.failed_records(1000);
        let mut listed: Vec<u32> = report.iter().map(|f| f.partition).collect();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(listed, (0..partitions).collect::<Vec<_>>());
        let with_offsets = report.iter().filter(|f| f.offset.is_some()).count();
        assert_eq!(with_offsets, NAMED_FAILURES);
        assert!(report
            .iter()
            .filter(|f| f.offset.is_none())
            .all(|f| f.failed_by == FailedBy::Unknown));
        assert_eq!(tracker.failed_records(3).len(), 3);
        // Revoked partitions' entries are reused by new failures.
        for partition in 0..partitions {
            let _ = tracker.revoke(&partition);
        }
        assert!(tracker.failed_records(1000).is_empty());
        for partition in 100..100 + NAMED_FAILURES as u32 {
            let ticket = tracker.send(partition, 9_u64).unwrap();
            tracker.fail(ticket).unwrap();
        }
        let report = tracker.failed_records(1000);
        assert_eq!(report.len(), NAMED_FAILURES);
        assert!(report.iter().all(|f| f.offset == Some(9)));
    });
}

/// The hold a failure takes to name its record is let go: failing record
/// after record reuses the same few slots.
#[test]
fn naming_a_failure_keeps_no_slot() {
    each_mode!(tracker = [
        Tracker::new(),
        Tracker::builder().watermarks().build(),
        Tracker::builder().progress(64).build(),
        Tracker::builder().inline_offsets().build(),
    ] {
        // Checked natively; under Miri the loop is too short to fail.
        for offset in 0..if cfg!(miri) { 20 } else { 5_000_u64 } {
            let ticket = tracker.send("p", offset).unwrap();
            tracker.fail(ticket).unwrap();
            let mut tickets = Vec::new();
            tracker.send_batch(&"q", [offset], &mut tickets).unwrap();
            tracker.fail_all(tickets).unwrap();
        }
        let slots = tracker.stats().slots;
        assert!(slots <= 1_024, "{slots} slots for 2 records at a time");
    });
}

/// Failures, reports and revokes on several threads: every record a
/// report names was given to `fail` (never an acked one, never an offset
/// of another partition), no report names more than the bounds allow, and
/// once the threads are joined the report is exact.
#[test]
fn reports_beside_failures_and_revokes_name_only_failed_records() {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    let rounds: u64 = if cfg!(miri) { 20 } else { 2_000 };
    let tracker = Arc::new(Tracker::builder().watermarks().build());
    // (partition, offset) handed to `fail`, before the call.
    let failing: Arc<Mutex<HashSet<(u32, u64)>>> = Arc::default();
    std::thread::scope(|s| {
        for partition in 0..2_u32 {
            let (tracker, failing) = (&tracker, &failing);
            s.spawn(move || {
                for offset in 0..rounds {
                    let ticket = tracker.send(partition, offset).unwrap();
                    if offset % 3 == 0 {
                        failing.lock().unwrap().insert((partition, offset));
                        let _ = tracker.fail(ticket);
                    } else {
                        let _ = tracker.ack(ticket);
                    }
                }
            });
        }
        let (tracker, failing) = (&tracker, &failing);
        s.spawn(move || {
            for round in 0..rounds {
                let report = tracker.failed_records(usize::MAX);
                assert!(report.len() <= NAMED_FAILURES + 2, "{}", report.len());
                for failed in &report {
                    if let Some(offset) = failed.offset {
                        assert_eq!(failed.failed_by, FailedBy::Fail);
                        let named = (failed.partition, offset);
                        assert!(failing.lock().unwrap().contains(&named), "{named:?}");
                    }
                }
                if round % 16 == 0 {
                    let _ = tracker.revoke(&((round / 16 % 2) as u32));
                }
            }
        });
    });
    // Joined: each partition's current life has its first failures named.
    let report = tracker.failed_records(usize::MAX);
    for partition in 0..2_u32 {
        let named: Vec<u64> = report
            .iter()
            .filter(|f| f.partition == partition)
            .filter_map(|f| f.offset)
            .collect();
        assert!(named.len() <= PER_LIFE);
        assert!(named.iter().all(|&o| o % 3 == 0));
    }
    assert_eq!(tracker.in_flight(), 0);
}

mod panics {
    use super::panicky::*;
    use inflight::{FailedBy, FlushError, ProgressTracker, Tracker};
    use std::time::Duration;

    /// A `Clone` of the offset or the key that panics in `failed_records`
    /// leaves the tracker as it was: the same report afterwards, the
    /// recovery works, and every value is dropped once.
    #[test]
    fn a_clone_that_panics_in_the_report_changes_nothing() {
        let tracker: T = Tracker::new();
        let bad = send(&tracker, 1, 5);
        tracker.fail(bad).unwrap();
        for act in [(Act::Clone, 5), (Act::Clone, K + 1)] {
            arm(act.0, act.1);
            expect_planned_panic("failed_records", || tracker.failed_records(8));
            let report = tracker.failed_records(8);
            assert_eq!(report.len(), 1);
            assert_eq!(report[0].partition.id, K + 1);
            assert_eq!(report[0].offset.as_ref().map(|o| o.id), Some(5));
        }
        let _ = tracker.revoke(&Key::new(K + 1));
        assert!(tracker.failed_records(8).is_empty());
        assert_usable(&tracker, 6);
        // The report left its entries: every one is reused.
        let keys = 10..10 + inflight::NAMED_FAILURES as u64;
        for key in keys.clone() {
            let ticket = send(&tracker, key, 7);
            tracker.fail(ticket).unwrap();
        }
        let report = tracker.failed_records(100);
        assert!(report
            .iter()
            .all(|f| f.offset.as_ref().map(|o| o.id) == Some(7)));
        assert_eq!(report.len(), inflight::NAMED_FAILURES);
        drop(report);
        for key in keys {
            let _ = tracker.revoke(&Key::new(K + key));
        }
        assert_all_dropped(tracker);
    }

    /// A `Clone` that panics as `fail` names the record: the record is
    /// failed all the same (the flush fails, nothing is in flight), its
    /// partition is still listed (without an offset), and the slot is let
    /// go.
    #[test]
    fn a_clone_that_panics_in_fail_leaves_the_record_failed() {
        let tracker: T = Tracker::new();
        let bad = send(&tracker, 1, 5);
        arm(Act::Clone, 5);
        expect_planned_panic("fail", || tracker.fail(bad));
        assert_eq!(tracker.in_flight(), 0);
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(
            flush.wait(FOREVER).unwrap_err(),
            FlushError::Failed { failed: 1 }
        );
        drop(flush);
        let report = tracker.failed_records(8);
        assert_eq!(report.len(), 1);
        assert_eq!(report[0].partition.id, K + 1);
        assert_eq!(
            (report[0].offset.is_none(), report[0].failed_by),
            (true, FailedBy::Unknown)
        );
        drop(report);
        let _ = tracker.revoke(&Key::new(K + 1));
        assert_usable(&tracker, 6);
        assert_all_dropped(tracker);
    }

    /// The same on a watermark tracker, with `fail_all`.
    #[test]
    fn a_clone_that_panics_in_fail_all_leaves_the_records_failed() {
        let tracker: W = Tracker::builder().watermarks().build();
        let tickets = vec![send(&tracker, 1, 5), send(&tracker, 1, 6)];
        arm(Act::Clone, 5);
        expect_planned_panic("fail_all", || tracker.fail_all(tickets));
        assert_eq!(tracker.in_flight(), 0);
        let report = tracker.failed_records(8);
        assert_eq!(report.len(), 1, "the partition, unnamed");
        drop(report);
        let _ = tracker.revoke(&Key::new(K + 1));
        assert!(tracker.failed_records(8).is_empty());
        tracker.drain(Duration::ZERO).unwrap();
        assert_all_dropped(tracker);
    }

    /// A send that fails its own record as it unwinds (a progress
    /// tracker's partition key whose `Drop` panics) names its partition,
    /// and what failed it.
    #[test]
    fn a_record_failed_by_an_unwinding_send_names_its_partition() {
        let tracker: ProgressTracker<Key, u64> = Tracker::builder().progress(64).build();
        let first = tracker.send(Key::new(K + 1), 1).unwrap();
        tracker.ack(first).unwrap();
        arm(Act::Drop, K + 1);
        expect_planned_panic("send", || tracker.send(Key::new(K + 1), 2));
        let report = tracker.failed_records(8);
        assert_eq!(report.len(), 1);
        assert_eq!(report[0].partition.id, K + 1);
        assert_eq!(
            (report[0].offset, report[0].failed_by),
            (None, FailedBy::SendUnwound)
        );
        drop(report);
        let _ = tracker.revoke(&Key::new(K + 1));
        assert!(tracker.failed_records(8).is_empty());
        drop(tracker);
        assert_eq!(live(), 0);
    }
}
