//! Loom models of the findings of issue #25 fixed on the review branch. See
//! `models.rs` for how the models are written.
#![cfg(loom)]

use inflight::ResolveError;
use loom::thread;

mod common;

use common::{off, plain, run_model, watermarked};

/// R8. A revoke and an ack race for the same record on a watermark
/// tracker. If the ack wins, its advance marks the record with the
/// partition's count of acked records passed (3 here), which `committable`
/// or the revoke that takes the mark reports; the revoke that lost its CAS
/// must have written nothing to the slot (it wrote the record's tag into
/// the count's word, `covered`, before its CAS: mutant
/// `covered_before_cas`). Two records acked and taken first make the count
/// differ from any tag the record's slot can have (1 or 2). Once every
/// advance is taken, nothing is committable; a record of the new life then
/// counts one.
#[test]
fn revoke_losing_to_an_ack_keeps_the_mark_count() {
    run_model("revoke_losing_to_an_ack_keeps_the_mark_count", || {
        let tracker = watermarked();
        for n in 0..2 {
            let ticket = tracker.send("p", off(n)).unwrap();
            tracker.ack(ticket).unwrap();
        }
        assert_eq!(plain(tracker.committable()), vec![("p", 1)]);
        let ticket = tracker.send("p", off(2)).unwrap();
        let t2 = tracker.clone();
        let acker = thread::spawn(move || t2.ack(ticket));
        let revoked = tracker.revoke("p");
        let acked = acker.join().unwrap();
        match acked {
            Ok(()) => assert_eq!(revoked.released, 0, "delivered and released"),
            Err(ResolveError::Revoked) => assert_eq!(revoked.released, 1),
            Err(e) => panic!("unexpected {e:?}"),
        }
        // A mark the advance published after the revoke took the marks is
        // of the ended life: dropped here, its count reported.
        let late = tracker.committable();
        assert!(late.is_empty(), "an advance of the ended life");
        assert_eq!(
            tracker.stats().committable_records,
            0,
            "every mark taken (ack {acked:?}, revoked {:?})",
            revoked.committable.as_deref()
        );
        let ticket = tracker.send("p", off(0)).unwrap();
        tracker.ack(ticket).unwrap();
        let now = tracker.committable_with_stats();
        assert_eq!(plain(now.offsets), vec![("p", 0)]);
        assert_eq!(now.committable_records, 1, "the new life's one record");
    });
}
