//! Guarantees 6 to 8: exactly-once resolution, aborts that merge, and one
//! flush at a time.

use super::*;

// ---------------------------------------------------------------------------
// Guarantee 6: exactly-once resolution. A forged, stale, foreign or already
// resolved ticket (any u64) is an error and changes nothing.
// ---------------------------------------------------------------------------

#[test]
fn g6_double_resolution_via_raw_is_already_resolved() {
    let tracker = Tracker::<&str, u64>::new();
    let keep = tracker.send("p", 0).unwrap();
    let a = tracker.send("p", 1).unwrap().into_raw();
    let b = tracker.send("p", 2).unwrap().into_raw();
    tracker.ack_raw(a).unwrap();
    tracker.fail_raw(b).unwrap();
    for raw in [a, b] {
        assert_eq!(tracker.ack_raw(raw), Err(ResolveError::AlreadyResolved));
        assert_eq!(tracker.fail_raw(raw), Err(ResolveError::AlreadyResolved));
    }
    assert_eq!(tracker.in_flight(), 1);
    let mut flush = tracker.begin_flush().unwrap();
    tracker.ack(keep).unwrap();
    // Still exactly one failure: the second fail_raw of `b` changed nothing.
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Failed { failed: 1 }));
}

#[test]
fn g6_double_ack_of_acked_record_does_not_fail_it() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap().into_raw();
    tracker.ack_raw(a).unwrap();
    // The record is retained (latest of its partition): a late fail_raw must
    // not turn it into a failure.
    assert_eq!(tracker.fail_raw(a), Err(ResolveError::AlreadyResolved));
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(map([("p", 1)])));
    flush.commit().unwrap();
    // And after the commit released the slot.
    assert!(tracker.fail_raw(a).is_err());
    assert!(tracker.ack_raw(a).is_err());
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(HashMap::new()));
}

#[test]
fn g6_stale_raw_ticket_of_a_reused_slot_changes_nothing() {
    let tracker = Tracker::<&str, u64>::new();
    // Send and ack records until a slot has been reused by a live record.
    // Each record is followed by a newer one of the same partition, so its
    // slot is not retained and returns to the free list when acked.
    let mut stale: Vec<u64> = Vec::new();
    let mut reused: Option<(u64, u64, u64)> = None;
    for o in 0..1_000_u64 {
        let raw = tracker.send("p", o).unwrap().into_raw();
        if let Some(old) = stale
            .iter()
            .copied()
            .find(|&s| raw_slot(s) == raw_slot(raw))
        {
            assert_ne!(old, raw, "a reused slot issues a new tag");
            reused = Some((old, o, raw));
            break;
        }
        // A newer record displaces this one from its partition cell.
        let next = tracker.send("p", o + 1_000_000).unwrap().into_raw();
        tracker.ack_raw(raw).unwrap();
        stale.push(raw);
        tracker.ack_raw(next).unwrap();
        stale.push(next);
    }
    let (old, offset, live) = reused.expect("no slot was reused in 1000 sends");
    let mut flush = tracker.begin_flush().unwrap();
    let in_flight = tracker.in_flight();
    assert_eq!(in_flight, 1);
    assert_eq!(flush.pending(), 1);
    assert_eq!(tracker.ack_raw(old), Err(ResolveError::AlreadyResolved));
    assert_eq!(tracker.fail_raw(old), Err(ResolveError::AlreadyResolved));
    assert_eq!(tracker.in_flight(), in_flight);
    assert_eq!(flush.pending(), 1);
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    // The new record is still pending and un-acked: its own ticket resolves
    // it, and it was neither acked nor failed by the stale one.
    tracker.ack_raw(live).unwrap();
    assert_eq!(tracker.ack_raw(old), Err(ResolveError::AlreadyResolved));
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", offset)])));
    flush.commit().unwrap();
}

#[test]
fn g6_foreign_tracker_ticket_is_rejected() {
    let first = Tracker::<&str, u64>::new();
    let mut second = Tracker::<&str, u64>::new();
    // Tracker ids are 8 bits of a global counter; trackers created by tests
    // running in parallel could make these two collide, so make sure not.
    while tracker_id(&first, "id", 0) == tracker_id(&second, "id", 0) {
        second = Tracker::new();
    }
    let raw = first.send("p", 1).unwrap().into_raw();
    let theirs = second.send("p", 2).unwrap();
    let mut flush = second.begin_flush().unwrap();
    assert_eq!(second.ack_raw(raw), Err(ResolveError::ForeignTracker));
    assert_eq!(second.fail_raw(raw), Err(ResolveError::ForeignTracker));
    assert_eq!(second.in_flight(), 1);
    assert_eq!(flush.pending(), 1);
    assert_eq!(first.in_flight(), 1);
    // A typed ticket too.
    let typed = first.send("p", 3).unwrap();
    assert_eq!(second.ack(typed), Err(ResolveError::ForeignTracker));
    assert_eq!(second.in_flight(), 1);
    assert_eq!(
        first.in_flight(),
        2,
        "the record stays pending in its tracker"
    );
    // The raw ticket still works where it belongs.
    first.ack_raw(raw).unwrap();
    assert_eq!(first.in_flight(), 1);
    second.ack(theirs).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("id", 0), ("p", 2)])));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "creates up to 256 trackers until an id repeats: minutes under Miri"
)]
fn g6_ticket_of_a_tracker_whose_id_collides_is_rejected() {
    // Tracker ids are 8 bits, so the 256th tracker created after this one
    // shares its id. The scenario: a source task's tracker is replaced (a
    // bounce) and a late producer callback of the old tracker acks on the
    // new one. Slot and tag must still tell the two apart.
    let old = Tracker::<u8, u64>::new();
    let raw = old.send(0, 1).unwrap().into_raw();
    let mut collider = None;
    for _ in 0..100_000 {
        let candidate = Tracker::<u8, u64>::new();
        let own = candidate.send(0, 100).unwrap().into_raw();
        if raw_tracker(own) == raw_tracker(raw) {
            collider = Some((candidate, own));
            break;
        }
    }
    let (new, own) = collider.expect("tracker ids repeat every 256 trackers");
    assert_eq!(new.in_flight(), 1);
    // The old tracker's ticket must not resolve the new tracker's record.
    assert!(
        new.ack_raw(raw).is_err(),
        "a ticket of another tracker ({raw:#x}) acked this tracker's record ({own:#x})"
    );
    assert_eq!(new.in_flight(), 1);
    new.ack_raw(own).unwrap();
    old.ack_raw(raw).unwrap();
}

#[test]
fn g6_arbitrary_u64_values_never_resolve_anything() {
    let tracker = Tracker::<u32, u64>::new();
    let id = tracker_id(&tracker, 99, 0);
    let mut all: Vec<u64> = Vec::new();
    let mut live: HashSet<u64> = HashSet::new();
    let mut rng = Rng::new(6);
    let mut covered_expected: HashMap<u32, u64> = HashMap::new();
    covered_expected.insert(99, 0);
    // Covered records, some resolved (a few retained as their partition's
    // latest, a few freed), some live.
    for o in 1..=60_u64 {
        let p = (o % 5) as u32;
        let raw = tracker.send(p, o).unwrap().into_raw();
        covered_expected.insert(p, o);
        all.push(raw);
        if rng.below(3) == 0 {
            tracker.ack_raw(raw).unwrap();
        } else {
            live.insert(raw);
        }
    }
    let mut flush = tracker.begin_flush().unwrap();
    // Uncovered records in the open generation.
    let mut open_expected: HashMap<u32, u64> = HashMap::new();
    for o in 100..130_u64 {
        let p = (o % 4) as u32;
        let raw = tracker.send(p, o).unwrap().into_raw();
        open_expected.insert(p, o);
        all.push(raw);
        if rng.below(3) == 0 {
            tracker.ack_raw(raw).unwrap();
        } else {
            live.insert(raw);
        }
    }
    let in_flight = tracker.in_flight();
    let pending = flush.pending();
    assert_eq!(in_flight, live.len());

    let mut values: Vec<u64> = vec![0, 1, u64::MAX, u64::MAX - 1, 1 << 32, u64::MAX >> 8];
    for bit in 0..64 {
        values.push(1 << bit);
        values.push(!(1 << bit));
    }
    for _ in 0..scaled(40_000) {
        values.push(rng.next());
    }
    // Near misses of every ticket the tracker issued (under Miri, of every
    // thirtieth: two covered ones and the first of the open generation):
    // each bit flipped, tags one off, this tracker's id on random slots and
    // tags.
    for &raw in all.iter().step_by(if cfg!(miri) { 30 } else { 1 }) {
        for bit in 0..64 {
            values.push(raw ^ (1 << bit));
        }
        values.push(raw.wrapping_add(1));
        values.push(raw.wrapping_sub(1));
        values.push(raw & !0xFFFF_FFFF);
        values.push(raw | 0xFFFF_FFFF);
        values.push(raw ^ (1 << 56) ^ (1 << 63));
    }
    for _ in 0..scaled(20_000) {
        let slot = rng.below(300);
        let tag = rng.below(4);
        values.push((u64::from(id) << 56) | (slot << 32) | tag);
    }
    for _ in 0..scaled(2_000) {
        values.push((u64::from(id) << 56) | (rng.next() >> 8));
    }

    for (i, &value) in values.iter().enumerate() {
        if live.contains(&value) {
            continue; // a genuine ticket
        }
        let ack = tracker.ack_raw(value);
        let fail = tracker.fail_raw(value);
        assert!(ack.is_err(), "ack_raw({value:#x}) resolved something");
        assert!(fail.is_err(), "fail_raw({value:#x}) resolved something");
        if raw_tracker(value) != id {
            assert_eq!(ack, Err(ResolveError::ForeignTracker));
            assert_eq!(fail, Err(ResolveError::ForeignTracker));
        } else {
            assert_ne!(ack, Err(ResolveError::ForeignTracker));
        }
        if i % 7 == 0 || raw_tracker(value) == id {
            assert_eq!(tracker.in_flight(), in_flight, "after {value:#x}");
            assert_eq!(flush.pending(), pending, "after {value:#x}");
        }
    }
    assert_eq!(tracker.in_flight(), in_flight);
    assert_eq!(flush.pending(), pending);

    // Every genuine ticket still resolves, nothing was failed, and the
    // retained offsets are intact.
    for raw in live {
        tracker.ack_raw(raw).unwrap();
    }
    assert_eq!(tracker.in_flight(), 0);
    assert_eq!(flush.wait(GENEROUS), Ok(covered_expected));
    flush.commit().unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(open_expected));
    flush.commit().unwrap();
}

// ---------------------------------------------------------------------------
// Guarantee 7: abort merges. After abort (or drop) the next flush covers the
// aborted records and newer ones; later sends win.
// ---------------------------------------------------------------------------

#[test]
fn g7_abort_merges_into_the_next_flush_and_later_sends_win() {
    let tracker = Tracker::<&str, u64>::new();
    let p1 = tracker.send("p", 10).unwrap();
    let q1 = tracker.send("q", 20).unwrap();
    let flush = tracker.begin_flush().unwrap();
    flush.abort();
    // Lower values, later sends: they must win over the aborted ones.
    let p2 = tracker.send("p", 5).unwrap();
    let r2 = tracker.send("r", 30).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 4);
    // Ack the newest first, the oldest last.
    for t in [r2, p2, q1] {
        tracker.ack(t).unwrap();
    }
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    tracker.ack(p1).unwrap();
    assert_eq!(
        flush.wait(GENEROUS),
        Ok(map([("p", 5), ("q", 20), ("r", 30)]))
    );
    flush.commit().unwrap();
}

#[test]
fn g7_dropping_a_flush_aborts_it() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    {
        let _flush = tracker.begin_flush().unwrap();
    }
    let b = tracker.send("q", 2).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 2);
    tracker.ack(b).unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    tracker.ack(a).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1), ("q", 2)])));
}

#[test]
fn g7_timeout_then_abort_then_more_acks() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    let b = tracker.send("p", 2).unwrap();
    let c = tracker.send("q", 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 2 })
    );
    flush.abort();
    // Acks between flushes, and newer records.
    tracker.ack(b).unwrap();
    let d = tracker.send("p", 3).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 2);
    tracker.ack(d).unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    flush.abort();
    tracker.ack(c).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 0);
    assert_eq!(flush.wait(Duration::ZERO), Ok(map([("p", 3), ("q", 1)])));
    flush.commit().unwrap();
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn g7_abort_after_ok_keeps_the_offsets_for_the_next_flush() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    let b = tracker.send("q", 1).unwrap();
    tracker.ack(a).unwrap();
    tracker.ack(b).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1), ("q", 1)])));
    // Storing the offsets failed: abort.
    flush.abort();
    // Nothing new: the same offsets again.
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1), ("q", 1)])));
    drop(flush);
    // Something new in one partition: it wins there, the other stays.
    let c = tracker.send("q", 2).unwrap();
    tracker.ack(c).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1), ("q", 2)])));
    flush.commit().unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(HashMap::new()));
}

#[test]
fn g7_many_aborts_accumulate_into_one_flush() {
    let tracker = Tracker::<u64, u64>::new();
    let mut tickets = Vec::new();
    let mut expected = HashMap::new();
    // Under Miri, 8 rounds: still every skip pattern, both ways of ending
    // a flush, and 8 flushes abandoned into one.
    for round in 0..if cfg!(miri) { 8 } else { 50_u64 } {
        for p in 0..3 {
            if (round + p) % 4 != 0 {
                tickets.push(tracker.send(p, round).unwrap());
                expected.insert(p, round);
            }
        }
        let mut flush = tracker.begin_flush().unwrap();
        assert_eq!(flush.pending(), tickets.len());
        assert!(flush.wait(Duration::ZERO).is_err());
        if round % 2 == 0 {
            flush.abort();
        } else {
            drop(flush);
        }
    }
    let mut flush = tracker.begin_flush().unwrap();
    for t in tickets {
        tracker.ack(t).unwrap();
    }
    assert_eq!(flush.wait(GENEROUS), Ok(expected));
    flush.commit().unwrap();
}

// ---------------------------------------------------------------------------
// Guarantee 8: one flush at a time; commit without an Ok wait is NotReady
// and releases (aborts) the flush.
// ---------------------------------------------------------------------------

#[test]
fn g8_begin_flush_while_a_flush_is_alive_is_in_progress() {
    let tracker = Tracker::<&str, u64>::new();
    let t = tracker.send("p", 1).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(
        tracker.begin_flush().err(),
        Some(BeginFlushError::InProgress)
    );
    // Also from another thread.
    thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(
                tracker.begin_flush().err(),
                Some(BeginFlushError::InProgress)
            );
        });
    });
    // The refused begin_flush sealed nothing: a send now is still uncovered.
    let late = tracker.send("p", 2).unwrap();
    tracker.ack(late).unwrap();
    tracker.ack(t).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 1)])));
    assert_eq!(
        tracker.begin_flush().err(),
        Some(BeginFlushError::InProgress)
    );
    flush.commit().unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 2)])));
}

#[test]
fn g8_commit_without_an_ok_wait_is_not_ready_and_releases_the_flush() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();

    // Never waited.
    let flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // Waited, timed out.
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(
        flush.wait(Duration::ZERO),
        Err(FlushError::Timeout { pending: 1 })
    );
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // Waited, interrupted.
    let mut flush = tracker.begin_flush().unwrap();
    tracker.interrupt();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Interrupted));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // Not ready even if everything is acked by now, as long as wait did not
    // say Ok.
    let flush = tracker.begin_flush().unwrap();
    tracker.ack(a).unwrap();
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    // The NotReady commits aborted: the records are still covered.
    let b = tracker.send("p", 2).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 1);
    tracker.ack(b).unwrap();
    assert_eq!(flush.wait(GENEROUS), Ok(map([("p", 2)])));
    flush.commit().unwrap();
}

#[test]
fn g8_commit_after_failed_wait_is_not_ready() {
    let tracker = Tracker::<&str, u64>::new();
    let a = tracker.send("p", 1).unwrap();
    tracker.fail(a).unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS), Err(FlushError::Failed { failed: 1 }));
    assert_eq!(flush.commit(), Err(FlushError::NotReady));
    assert!(tracker.begin_flush().is_ok());
}

#[test]
fn g8_commit_after_ok_starts_the_next_flush_fresh() {
    let tracker = Tracker::<&str, u64>::new();
    for round in 0..20_u64 {
        let t = tracker.send("p", round).unwrap();
        let mut flush = tracker.begin_flush().unwrap();
        tracker.ack(t).unwrap();
        assert_eq!(flush.wait(GENEROUS), Ok(map([("p", round)])));
        flush.commit().unwrap();
        let mut empty = tracker.begin_flush().unwrap();
        assert_eq!(empty.pending(), 0);
        assert_eq!(empty.wait(Duration::ZERO), Ok(HashMap::new()));
        empty.commit().unwrap();
    }
}
