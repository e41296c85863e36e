//! Modes as types (`Tracker<P, O, M>`, `WatermarkTracker`, `ProgressTracker`)
//! and the limit a `SendError::Full` names. That a call a mode lacks does
//! not compile is checked by the `compile_fail` examples of `inflight::mode`.

use inflight::mode::{Barrier, Mode};
use inflight::{Limit, ProgressTracker, Refused, SendError, Tracker, WatermarkTracker};
use std::collections::HashMap;
use std::time::Duration;

/// The construction expressions of before the modes keep compiling, and
/// give the mode their builder calls name.
#[test]
fn constructors_give_the_mode_their_calls_name() {
    let plain: Tracker<&str, u64> = Tracker::new();
    let bounded: Tracker<&str, u64, Barrier> = Tracker::with_capacity(3);
    let built: Tracker<&str, u64> = Tracker::builder().capacity(3).build();
    let marks: WatermarkTracker<&str, u64> = Tracker::builder().watermarks().build();
    let marks_bounded: WatermarkTracker<&str, u64> =
        Tracker::builder().watermarks().capacity(3).build();
    let resumable: ProgressTracker<&str, u64> = Tracker::builder().progress(64).build();
    // Progress keeps watermarks: asking for them too changes nothing,
    // before or after.
    let both: ProgressTracker<&str, u64> = Tracker::builder()
        .watermarks()
        .progress(64)
        .capacity(3)
        .build();
    let both_again: ProgressTracker<&str, u64> =
        Tracker::builder().progress(64).watermarks().build();
    let default: Tracker<&str, u64> = Tracker::default();

    assert_eq!(bounded.capacity(), Some(3));
    assert_eq!(built.capacity(), Some(3));
    assert_eq!(marks_bounded.capacity(), Some(3));
    assert_eq!(both.capacity(), Some(3));
    for (has, expected) in [
        (plain.has_watermarks(), false),
        (default.has_watermarks(), false),
        (marks.has_watermarks(), true),
        (resumable.has_watermarks(), true),
        (both_again.has_watermarks(), true),
    ] {
        assert_eq!(has, expected);
    }
    // The inferred form needs no annotation once a call fixes the types.
    let inferred = Tracker::builder().watermarks().build();
    let ticket = inferred.send("p", 7_u64).unwrap();
    inferred.ack(ticket).unwrap();
    assert_eq!(inferred.committable(), HashMap::from([("p", 7)]));
}

/// Watermarks on both trackers that keep them, progress on the one that
/// keeps it, and the two conventions side by side: the watermark is the
/// last done offset, progress the next to read.
#[test]
fn committable_and_progress_where_the_mode_keeps_them() {
    let marks: WatermarkTracker<&str, u64> = Tracker::builder().watermarks().build();
    let resumable: ProgressTracker<&str, u64> = Tracker::builder().progress(64).build();
    for offset in 40..42 {
        marks.ack(marks.send("p", offset).unwrap()).unwrap();
        resumable.ack(resumable.send("p", offset).unwrap()).unwrap();
    }
    assert_eq!(marks.committable()["p"], 41);
    let progress = resumable.progress();
    assert_eq!(progress["p"].next(), 42);
    assert_eq!(resumable.committable()["p"], 41);
    let stats = resumable.committable_with_stats();
    assert!(stats.offsets.is_empty(), "taken above");
}

/// What every mode shares: one generic function drives all three.
fn flush_drain_revoke<M: Mode>(tracker: Tracker<&'static str, u64, M>) {
    let a = tracker.send("p", 1).unwrap();
    let b = tracker.send("q", 2).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(flush.pending(), 1);
    assert_eq!(tracker.revoke("q").released, 1);
    assert_eq!(
        flush.wait(Duration::ZERO).unwrap(),
        HashMap::from([("p", 1)])
    );
    flush.commit().unwrap();
    assert!(tracker.ack(b).is_err(), "released by the revoke");
    tracker.drain(Duration::ZERO).unwrap();
    assert_eq!(tracker.stats().in_flight, 0);
}

#[test]
fn flushes_drains_and_revokes_work_in_every_mode() {
    flush_drain_revoke(Tracker::new());
    flush_drain_revoke(Tracker::builder().watermarks().build());
    flush_drain_revoke(Tracker::builder().progress(64).build());
}

// ---- which limit refused --------------------------------------------------------

#[test]
fn a_refusal_at_capacity_names_the_capacity() {
    let tracker = Tracker::with_capacity(1);
    let held = tracker.send("p", 1_u64).unwrap();
    let refused = tracker.send("p", 2).unwrap_err();
    assert!(matches!(refused, SendError::Full("p", 2, Limit::Capacity)));
    assert_eq!(refused.limit(), Some(Limit::Capacity));
    assert!(refused.to_string().contains("capacity"), "{refused}");
    assert_eq!(format!("{refused:?}"), r#"Full("p", 2, Capacity)"#);
    // A wait that gives up says the same.
    let waited = tracker.send_timeout("p", 2, Duration::from_millis(1));
    assert_eq!(waited.unwrap_err().limit(), Some(Limit::Capacity));
    tracker.ack(held).unwrap();
}

#[test]
fn a_refusal_over_the_budget_names_the_metadata_budget() {
    let tracker: ProgressTracker<&str, u64> = Tracker::builder().progress(16).build();
    let mut tickets = vec![tracker.send("p", 0).unwrap()];
    let refused = (2..200_u64)
        .step_by(2)
        .find_map(|offset| match tracker.send("p", offset) {
            Ok(ticket) => {
                tickets.push(ticket);
                None
            }
            Err(refused) => Some(refused),
        })
        .expect("the budget refuses in time");
    let SendError::Full("p", owed, Limit::MetadataBudget) = refused else {
        panic!("expected Full over the budget, got {refused:?}");
    };
    assert!(refused.to_string().contains("metadata budget"), "{refused}");
    assert_eq!(
        format!("{refused:?}"),
        format!(r#"Full("p", {owed}, MetadataBudget)"#)
    );
    // The offset is owed: other offsets are refused as out of order (no
    // limit), the owed one waits for the budget and says so when it gives up.
    let other = tracker.send("p", owed + 1).unwrap_err();
    assert!(matches!(other, SendError::OutOfOrder(..)));
    assert_eq!(other.limit(), None);
    let waited = tracker.send_timeout("p", owed, Duration::from_millis(1));
    assert_eq!(waited.unwrap_err().limit(), Some(Limit::MetadataBudget));
    tracker.ack_all(tickets).unwrap();
    tracker.ack(tracker.send("p", owed).unwrap()).unwrap();
}

#[test]
fn each_limit_displays_what_refused() {
    let shown = |limit| SendError::Full("p", 1_u64, limit).to_string();
    assert_eq!(
        shown(Limit::Capacity),
        "the tracker holds its capacity of records in flight; the record was not sent"
    );
    assert!(shown(Limit::MetadataBudget)
        .starts_with("the partition's progress could outgrow its metadata budget"));
    assert!(shown(Limit::Internal).starts_with("the tracker's internal limit"));
    assert_ne!(shown(Limit::Capacity), shown(Limit::Internal));
    // The other refusals show their record too.
    assert_eq!(
        format!("{:?}", SendError::Closed("p", 1_u64)),
        r#"Closed("p", 1)"#
    );
}

#[test]
fn a_batch_stopped_at_capacity_names_the_capacity() {
    let tracker = Tracker::with_capacity(3);
    let mut tickets = Vec::new();
    let err = tracker
        .send_batch(&"p", 0_u64..10, &mut tickets)
        .unwrap_err();
    assert_eq!(
        (err.reason, err.limit),
        (Refused::Full, Some(Limit::Capacity))
    );
    assert!(err.to_string().contains("capacity"), "{err}");
    tracker.close();
    let closed = tracker
        .send_batch(&"p", 0_u64..1, &mut Vec::new())
        .unwrap_err();
    assert_eq!((closed.reason, closed.limit), (Refused::Closed, None));
    tracker.ack_all(tickets).unwrap();
}
