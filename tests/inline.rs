//! Offsets kept inline in the partition cells (`Builder::inline_offsets`):
//! the same offsets are committed as by the held path, for every value of
//! the integer types (those too wide for a cell take the held path, record
//! by record), across revokes, and a resolved record's slot is free at once.

use inflight::mode::{Inline, Progress, Watermarks};
use inflight::{Flush, Tracker};
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

const GENEROUS: Duration = Duration::from_secs(30);

fn flushed<P, O, M>(tracker: &Tracker<P, O, M>) -> HashMap<P, O>
where
    P: Hash + Eq + Clone + Send + Sync + std::fmt::Debug,
    O: Clone + Send + Sync + std::fmt::Debug,
    M: inflight::mode::Mode,
{
    let mut flush: Flush<'_, P, O, M> = tracker.begin_flush().unwrap();
    let offsets = flush.wait(GENEROUS).unwrap();
    flush.commit().unwrap();
    offsets
}

fn inline<O: inflight::InlineOffset + Send + Sync>() -> Tracker<&'static str, O, Inline> {
    Tracker::builder().inline_offsets().build()
}

/// Sends `offset` of `partition` and acks it.
fn done<O, M>(tracker: &Tracker<&'static str, O, M>, partition: &'static str, offset: O)
where
    O: Clone + Send + Sync,
    M: inflight::mode::Mode,
{
    let ticket = tracker
        .send(partition, offset)
        .unwrap_or_else(|_| panic!("refused"));
    tracker.ack(ticket).unwrap();
}

#[test]
fn every_value_is_committed_whether_it_fits_the_cell_or_not() {
    let tracker = inline::<i64>();
    let wide = 1_i64 << 47; // one past the largest kept inline, 2^47 - 2, plus one
    let cases: &[&[i64]] = &[
        &[5],                        // inline
        &[-1],                       // held: negative
        &[wide - 2],                 // inline: the largest
        &[wide - 1],                 // held: the smallest too wide
        &[3, wide, 9],               // inline, held, inline: the held one is released
        &[wide, 4, i64::MAX],        // held, inline, held
        &[0, i64::MIN, -7, 1 << 40], // mixed
    ];
    for (round, offsets) in cases.iter().enumerate() {
        for &offset in offsets.iter() {
            done(&tracker, "p", offset);
            done(&tracker, "q", offset.wrapping_add(1));
        }
        let last = *offsets.last().unwrap();
        let expect = HashMap::from([("p", last), ("q", last.wrapping_add(1))]);
        assert_eq!(flushed(&tracker), expect, "round {round}: {offsets:?}");
    }
    // What a commit committed is not reported again.
    let u = inline::<u64>();
    done(&u, "p", u64::MAX);
    done(&u, "p", 17);
    assert_eq!(flushed(&u), HashMap::from([("p", 17)]));
    assert!(flushed(&u).is_empty());
    for offset in [0_u8, 255] {
        let small = inline::<u8>();
        done(&small, "p", offset);
        assert_eq!(flushed(&small)["p"], offset);
    }
}

#[test]
fn an_aborted_flush_keeps_inline_and_held_offsets_for_the_next() {
    let tracker = inline::<i64>();
    done(&tracker, "p", 10);
    done(&tracker, "q", -10);
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS).unwrap().len(), 2);
    flush.abort();
    done(&tracker, "q", 11);
    assert_eq!(flushed(&tracker), HashMap::from([("p", 10), ("q", 11)]));
}

#[test]
fn a_resolved_record_frees_its_slot_at_once() {
    // The held path keeps each partition's latest slot for the flush; the
    // inline path keeps the offset in the cell, so one slot serves all.
    let held: Tracker<u32, u64> = Tracker::new();
    let kept: Tracker<u32, u64, Inline> = Tracker::builder().inline_offsets().build();
    // Fewer under Miri, still past the 128 slots a thread claims at once.
    let partitions = if cfg!(miri) { 200 } else { 1_000 };
    for partition in 0..partitions {
        let ticket = held.send(partition, 7).unwrap();
        held.ack(ticket).unwrap();
        let ticket = kept.send(partition, 7).unwrap();
        kept.ack(ticket).unwrap();
    }
    assert!(
        held.stats().slots >= partitions as usize,
        "{}",
        held.stats().slots
    );
    // Slots are claimed 128 at a time.
    assert!(kept.stats().slots <= 128, "{}", kept.stats().slots);
    let mut flush = kept.begin_flush().unwrap();
    let offsets = flush.wait(GENEROUS).unwrap();
    assert_eq!(offsets.len(), partitions as usize);
    assert!(offsets.values().all(|&o| o == 7));
}

#[test]
fn a_revoke_ends_an_inline_offset_and_the_new_life_is_committed() {
    let tracker = inline::<i64>();
    done(&tracker, "p", 1);
    done(&tracker, "q", 1);
    assert_eq!(tracker.revoke("p").released, 0);
    assert_eq!(
        flushed(&tracker),
        HashMap::from([("q", 1)]),
        "p's life ended"
    );
    done(&tracker, "p", 2);
    // A commit's offsets are not reported again: only what is new.
    assert_eq!(flushed(&tracker), HashMap::from([("p", 2)]));
}

/// The cell keeps a life's low 16 bits; the flush widens them against
/// the partition's life, and the carry keeps the whole life: an offset
/// kept across 2^16 revokes of its partition is still known as ended.
#[test]
#[cfg_attr(miri, ignore = "65,536 revokes: minutes under Miri")]
fn lives_past_2_pow_16_revokes_are_told_apart() {
    let tracker = inline::<u64>();
    done(&tracker, "p", 1);
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(GENEROUS).unwrap()["p"], 1);
    flush.abort(); // the carry keeps p's offset, of life 0
    for _ in 0..(1 << 16) {
        assert_eq!(tracker.revoke("p").released, 0);
    }
    // Life 2^16: the same low 16 bits as the carry's.
    assert!(flushed(&tracker).is_empty(), "life 0 ended");
    done(&tracker, "p", 2);
    assert_eq!(flushed(&tracker)["p"], 2, "a record of life 2^16");
    assert_eq!(tracker.revoke("p").released, 0);
    done(&tracker, "p", 3);
    assert_eq!(flushed(&tracker)["p"], 3, "a record of life 2^16 + 1");
}

#[test]
fn batches_keep_their_last_offset_inline_or_held() {
    let tracker = inline::<i64>();
    let mut tickets = Vec::new();
    tracker.send_batch(&"p", 0..100, &mut tickets).unwrap();
    tracker.send_batch(&"q", [5, 6, -1], &mut tickets).unwrap();
    tracker.ack_all(tickets.drain(..)).unwrap();
    assert_eq!(flushed(&tracker), HashMap::from([("p", 99), ("q", -1)]));
    tracker.send_batch(&"q", [7, 8], &mut tickets).unwrap();
    tracker.ack_all(tickets.drain(..)).unwrap();
    assert_eq!(flushed(&tracker), HashMap::from([("q", 8)]));
}

#[test]
fn every_mode_comes_inline() {
    let marks: Tracker<&str, u64, Inline<Watermarks>> =
        Tracker::builder().inline_offsets().watermarks().build();
    let resumable: Tracker<&str, u64, Inline<Progress>> =
        Tracker::builder().inline_offsets().progress(4096).build();
    // The builder's calls compose in either order.
    let _: Tracker<&str, u64, Inline<Progress>> =
        Tracker::builder().progress(64).inline_offsets().build();
    for offset in 0..10 {
        done(&marks, "p", offset);
        done(&resumable, "p", offset);
    }
    let stuck = resumable.send("p", 10).unwrap();
    done(&resumable, "p", 11);
    assert_eq!(marks.committable()["p"], 9);
    assert_eq!(resumable.committable()["p"], 9);
    let progress = &resumable.progress()["p"];
    assert_eq!(progress.next(), 10);
    assert!(!progress.encode().is_empty(), "11 is done past the gap");
    assert_eq!(flushed(&marks)["p"], 9);
    resumable.ack(stuck).unwrap();
    assert_eq!(flushed(&resumable)["p"], 11);
}

/// A cell keeps its life's low 16 bits, and a generation may stay
/// unflushed across any number of revokes of its partitions: the cell of an
/// ended life is never reported, whatever its bits alias, and never keeps
/// a current life's offset out (a review's cases).
#[test]
#[cfg_attr(miri, ignore = "65,536 revokes: minutes under Miri")]
fn an_unflushed_cell_survives_any_number_of_revokes() {
    let revokes = |tracker: &Tracker<&'static str, u64, Inline>, n: u32| {
        for _ in 0..n {
            assert_eq!(tracker.revoke("p").released, 0);
        }
    };
    // 2^16 revokes: the cell's bits read as the current life's.
    let tracker = inline::<u64>();
    done(&tracker, "p", 1);
    done(&tracker, "q", 1);
    revokes(&tracker, 1 << 16);
    assert_eq!(
        flushed(&tracker),
        HashMap::from([("q", 1)]),
        "p's life 0 ended"
    );
    // Between 2^15 and 2^16: the cell's bits read as a newer life's.
    for abort_first in [false, true] {
        let tracker = inline::<u64>();
        done(&tracker, "p", 1);
        revokes(&tracker, 40_000);
        if abort_first {
            let mut flush = tracker.begin_flush().unwrap();
            assert!(flush.wait(GENEROUS).unwrap().is_empty(), "life 0 ended");
            flush.abort();
        }
        done(&tracker, "p", 2);
        assert_eq!(
            flushed(&tracker),
            HashMap::from([("p", 2)]),
            "abort: {abort_first}"
        );
        done(&tracker, "p", 3);
        assert_eq!(flushed(&tracker), HashMap::from([("p", 3)]));
    }
}
