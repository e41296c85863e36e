//! A progress tracker (`Builder::progress`): progress beyond the first gap
//! per partition, the send order it requires, the metadata budget it keeps,
//! and how failures and revokes shape it.

use inflight::{Progress, ResolveError, SendError, Ticket, Tracker};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

mod common;
use common::{scaled, Rng};

type T = inflight::ProgressTracker<&'static str, u64>;

fn progress_tracker(max: usize) -> T {
    Tracker::builder().progress(max).build()
}

#[test]
fn progress_past_the_first_gap_round_trips() {
    let tracker = progress_tracker(4096);
    let tickets: Vec<Ticket> = (10..20).map(|o| tracker.send("p", o).unwrap()).collect();
    for (offset, ticket) in (10..20).zip(tickets) {
        if offset % 3 != 1 {
            tracker.ack(ticket).unwrap(); // 10, 13, 16, 19 stay in flight
        }
    }
    let all = tracker.progress();
    let p = &all["p"];
    assert_eq!(p.next(), 10);
    let done: Vec<u64> = (0..25).filter(|&o| p.is_done(o)).collect();
    let expected: Vec<u64> = (0..10).chain([11, 12, 14, 15, 17, 18]).collect();
    assert_eq!(done, expected);
    assert_eq!(Progress::decode(p.next(), &p.encode()).as_ref(), Ok(p));
    assert!(p.encode().len() <= 4096);
}

#[test]
fn next_is_one_past_the_last_sent_once_all_are_acked() {
    let tracker = progress_tracker(4096);
    for o in [5, 6, 9] {
        let t = tracker.send("p", o).unwrap();
        tracker.ack(t).unwrap();
    }
    let p = &tracker.progress()["p"];
    assert_eq!((p.next(), p.encode().as_str()), (10, ""));
    assert!(p.is_done(7) && p.is_done(9) && !p.is_done(10));
}

#[test]
fn skipped_offsets_are_done_unacked_and_later_ones_are_not() {
    let tracker = progress_tracker(4096);
    let one = tracker.send("p", 1).unwrap();
    let five = tracker.send("p", 5).unwrap();
    let _nine = tracker.send("p", 9).unwrap();
    tracker.ack(five).unwrap();
    let p = tracker.progress().remove("p").unwrap();
    assert_eq!(p.next(), 1);
    assert!(!p.is_done(1));
    assert!((2..=8).all(|o| p.is_done(o)), "{p:?}"); // skipped, or acked
    assert!(!p.is_done(9) && !p.is_done(10) && !p.is_done(1_000));
    tracker.ack(one).unwrap();
    assert_eq!(tracker.progress()["p"].next(), 9);
}

#[test]
fn only_changed_partitions_are_reported() {
    let tracker = progress_tracker(4096);
    let a = tracker.send("a", 1).unwrap();
    let b = tracker.send("b", 1).unwrap();
    assert_eq!(tracker.progress().len(), 2);
    assert!(tracker.progress().is_empty());
    tracker.ack(a).unwrap();
    let now = tracker.progress();
    assert_eq!(now.keys().collect::<Vec<_>>(), vec![&"a"]);
    assert_eq!(now["a"].next(), 2);
    tracker.ack(b).unwrap();
    assert_eq!(tracker.progress()["b"].next(), 2);
}

#[test]
fn a_watermark_tracker_takes_offsets_in_any_order() {
    // It has no `progress()` (that does not compile), so no order to keep.
    let tracker: inflight::WatermarkTracker<&str, u64> = Tracker::builder().watermarks().build();
    let t = tracker.send("p", 1).unwrap();
    tracker.ack(t).unwrap();
    let t = tracker.send("p", 0).unwrap();
    tracker.ack(t).unwrap();
}

#[test]
fn sends_must_rise_within_a_partition() {
    let tracker = progress_tracker(4096);
    let _a = tracker.send("p", 10).unwrap();
    assert!(matches!(
        tracker.send("p", 10),
        Err(SendError::OutOfOrder("p", 10))
    ));
    assert!(matches!(
        tracker.send("p", 3),
        Err(SendError::OutOfOrder("p", 3))
    ));
    // Other partitions have their own order.
    let _b = tracker.send("q", 3).unwrap();
    let _c = tracker.send("p", 11).unwrap();
    assert_eq!(tracker.in_flight(), 3);
}

#[test]
fn a_negative_offset_is_refused_not_a_panic() {
    let tracker: inflight::ProgressTracker<&str, i64> = Tracker::builder().progress(4096).build();
    let err = tracker.send("p", -1).unwrap_err();
    assert!(matches!(err, SendError::OutOfOrder("p", -1)));
    assert_eq!(tracker.in_flight(), 0);
    let t = tracker.send("p", 0).unwrap();
    tracker.ack(t).unwrap();
    assert_eq!(tracker.progress()["p"].next(), 1);
}

#[test]
fn a_failure_keeps_what_was_acked_past_it_until_a_revoke() {
    let tracker = progress_tracker(4096);
    let t: Vec<Ticket> = (0..5).map(|o| tracker.send("p", o).unwrap()).collect();
    let mut t = t.into_iter();
    tracker.ack(t.next().unwrap()).unwrap(); // 0
    tracker.fail(t.next().unwrap()).unwrap(); // 1
    for rest in t {
        tracker.ack(rest).unwrap();
    }
    let p = &tracker.progress()["p"];
    assert_eq!(p.next(), 1, "the failed record must be redone");
    assert!(!p.is_done(1) && (2..5).all(|o| p.is_done(o)) && !p.is_done(5));
    // Later sends are added as they are acked; the watermark stays below
    // the failure.
    let late = tracker.send("p", 5).unwrap();
    tracker.ack(late).unwrap();
    let p = &tracker.progress()["p"];
    assert_eq!(p.next(), 1);
    assert!(!p.is_done(1) && p.is_done(5) && !p.is_done(6));
    assert_eq!(
        tracker.committable()["p"],
        0,
        "the watermark stops below the failure"
    );
    let revoked = tracker.revoke("p");
    assert_eq!(revoked.released, 0);
    // The restart re-sends from the committed offset: lower than before.
    let again = tracker.send("p", 1).unwrap();
    tracker.ack(again).unwrap();
    assert_eq!(tracker.progress()["p"].next(), 2);
}

#[test]
fn a_revoke_starts_the_partition_afresh() {
    let tracker = progress_tracker(4096);
    let stuck = tracker.send("p", 100).unwrap();
    let acked = tracker.send("p", 101).unwrap();
    tracker.ack(acked).unwrap();
    assert_eq!(tracker.progress()["p"].next(), 100);
    let revoked = tracker.revoke("p");
    assert_eq!(revoked.released, 1);
    assert_eq!(tracker.ack(stuck), Err(ResolveError::Revoked));
    // Nothing of the ended life is reported.
    assert!(tracker.progress().is_empty());
    let t = tracker.send("p", 50).unwrap();
    assert_eq!(tracker.progress()["p"].next(), 50);
    tracker.ack(t).unwrap();
    assert_eq!(tracker.progress()["p"].next(), 51);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "over 20,000 sends until the budget is full: its point is the count, hours under Miri"
)]
fn the_budget_takes_twenty_thousand_in_flight_behind_one_stuck_record() {
    let tracker = progress_tracker(4096);
    let mut tickets = Vec::new();
    let mut offset = 0;
    let refused = loop {
        match tracker.send("p", offset) {
            Ok(t) => tickets.push(t),
            Err(SendError::Full(_, o, _)) => break o,
            Err(e) => panic!("{e:?}"),
        }
        offset += 1;
    };
    assert!(refused > 20_000, "refused at {refused}");
    // Other partitions are unaffected.
    let other = tracker.send("q", 0).unwrap();
    tracker.ack(other).unwrap();
    // The worst case is reachable: every other record acked, the last one
    // too, and the encoding still fits.
    let last = tickets.len() - 1;
    for (i, t) in tickets.drain(..).enumerate().skip(1) {
        if i % 2 == 0 || i == last {
            tracker.ack(t).unwrap(); // the others stay in flight
        }
    }
    let p = &tracker.progress()["p"];
    let encoded = p.encode();
    assert!(encoded.len() <= 4096);
    assert!(
        encoded.len() > 4000,
        "the budget was used: {}",
        encoded.len()
    );
    assert_eq!(Progress::decode(p.next(), &encoded).as_ref(), Ok(p));
    assert!(matches!(
        tracker.send("p", refused),
        Err(SendError::Full(..))
    ));
}

#[test]
fn acked_records_behind_a_stuck_one_never_fill_the_budget() {
    let tracker = progress_tracker(64);
    // Offsets sent, the stuck one included. Under Miri, still more acked
    // records (399) than 64 characters would hold as a bitset (fewer than
    // 384 bits: 64 base64 characters, tag and span included).
    const SENT: u64 = if cfg!(miri) { 400 } else { 20_000 };
    let stuck = tracker.send("p", 0).unwrap();
    for o in 1..SENT {
        let t = tracker.send("p", o).unwrap();
        tracker.ack(t).unwrap();
    }
    let p = &tracker.progress()["p"];
    assert_eq!(p.next(), 0);
    assert!(p.is_done(SENT - 1) && !p.is_done(SENT));
    assert!(p.encode().len() < 12);
    // In flight behind it, the budget binds; once the stuck record is acked
    // the partition accepts again.
    let mut pending = Vec::new();
    let mut offset = SENT;
    while let Ok(t) = tracker.send("p", offset) {
        pending.push(t);
        offset += 1;
    }
    assert!(pending.len() > 20, "{}", pending.len());
    tracker.ack(stuck).unwrap();
    for t in pending {
        tracker.ack(t).unwrap();
    }
    let t = tracker.send("p", offset).unwrap();
    tracker.ack(t).unwrap();
    assert_eq!(tracker.progress()["p"].next(), offset + 1);
}

/// What a sequential model says a partition's progress is.
#[derive(Default)]
struct Model {
    /// Offset -> state: 0 in flight, 1 acked, 2 failed.
    records: BTreeMap<u64, u8>,
}

impl Model {
    fn expected(&self) -> Option<Progress> {
        let (&last, _) = self.records.iter().next_back()?;
        // A failed record is never done, and what lies past it still is.
        let pending: Vec<u64> = self
            .records
            .iter()
            .filter(|(_, &s)| s != 1)
            .map(|(&o, _)| o)
            .collect();
        let next = pending.first().copied().unwrap_or(last + 1);
        Progress::from_pending(next, last + 1, pending)
    }
}

#[test]
fn random_sends_and_acks_match_a_sequential_model() {
    let mut rng = Rng::new(0x5eed_0f9e);
    for round in 0..if cfg!(miri) { 3 } else { 300 } {
        let tracker = progress_tracker(1 << 20);
        let mut model: HashMap<&'static str, Model> = HashMap::new();
        let mut open: Vec<(&'static str, u64, Ticket)> = Vec::new();
        let mut next_offset: HashMap<&'static str, u64> = HashMap::new();
        let mut reported: HashMap<&'static str, Progress> = HashMap::new();
        for _ in 0..rng.below(200) {
            let partition = ["a", "b", "c"][rng.below(3) as usize];
            match rng.below(10) {
                0..=4 => {
                    let at = next_offset.entry(partition).or_insert(rng.below(5));
                    *at += match rng.below(4) {
                        0 => rng.below(20), // a gap
                        _ => 0,
                    };
                    let t = tracker.send(partition, *at).unwrap();
                    model.entry(partition).or_default().records.insert(*at, 0);
                    open.push((partition, *at, t));
                    *at += 1;
                }
                5..=8 if !open.is_empty() => {
                    let (p, o, t) = open.swap_remove(rng.below(open.len() as u64) as usize);
                    let fail = rng.below(12) == 0;
                    if fail {
                        tracker.fail(t).unwrap();
                    } else {
                        tracker.ack(t).unwrap();
                    }
                    model
                        .get_mut(p)
                        .unwrap()
                        .records
                        .insert(o, if fail { 2 } else { 1 });
                }
                _ => {
                    for (p, progress) in tracker.progress() {
                        reported.insert(p, progress);
                    }
                    for (p, m) in &model {
                        assert_eq!(
                            reported.get(p),
                            m.expected().as_ref(),
                            "round {round}, partition {p}"
                        );
                    }
                }
            }
        }
        for (_, _, t) in open {
            tracker.ack(t).unwrap();
        }
    }
}

#[test]
fn the_budget_holds_under_random_patterns() {
    let mut rng = Rng::new(77);
    for round in 0..if cfg!(miri) { 4 } else { 24 } {
        let max = [16, 40, 100, 300][round % 4];
        let tracker = progress_tracker(max);
        let mut open: Vec<Ticket> = Vec::new();
        let mut offset = 0;
        // A refused offset is owed: it is retried before any later one.
        let mut owed = None;
        for step in 0..if cfg!(miri) { 80 } else { 2_000 } {
            if rng.below(3) != 0 {
                let next = owed.take().unwrap_or_else(|| {
                    offset += 1 + rng.below(3);
                    offset
                });
                match tracker.send("p", next) {
                    Ok(t) => open.push(t),
                    Err(SendError::Full(_, refused, _)) => owed = Some(refused),
                    Err(e) => panic!("{e:?}"),
                }
            } else if !open.is_empty() {
                // Mostly not the oldest: a stuck head with acks behind it.
                let i = 1
                    .max(rng.below(open.len() as u64) as usize)
                    .min(open.len() - 1);
                tracker.ack(open.swap_remove(i)).unwrap();
            }
            if step % 8 == 0 {
                for p in tracker.progress().values() {
                    assert!(p.encode().len() <= max, "{} > {max}", p.encode().len());
                }
            }
        }
    }
}

#[test]
fn concurrent_senders_of_one_partition_are_decided_in_order() {
    let tracker = progress_tracker(1 << 20);
    let counter = AtomicU64::new(0);
    let accepted = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..scaled(5_000) {
                    let o = counter.fetch_add(1, Ordering::Relaxed);
                    match tracker.send("p", o) {
                        Ok(t) => {
                            tracker.ack(t).unwrap();
                            accepted.lock().unwrap().push(o);
                        }
                        Err(SendError::OutOfOrder(..)) => {}
                        Err(e) => panic!("{e:?}"),
                    }
                }
            });
        }
    });
    let accepted = accepted.into_inner().unwrap();
    let max = *accepted.iter().max().unwrap();
    assert_eq!(tracker.progress()["p"].next(), max + 1);
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn progress_beside_sends_and_acks_reports_only_acked_offsets() {
    // Offsets per writer.
    const PER: usize = if cfg!(miri) { 100 } else { 20_000 };
    let tracker = progress_tracker(4096);
    let acked: Vec<AtomicBool> = (0..3 * PER).map(|_| AtomicBool::new(false)).collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for (w, partition) in ["a", "b", "c"].into_iter().enumerate() {
            let (tracker, acked) = (&tracker, &acked);
            writers.push(s.spawn(move || {
                let mut rng = Rng::new(w as u64 + 1);
                let mut open: Vec<(u64, Ticket)> = Vec::new();
                for o in 0..PER as u64 {
                    loop {
                        match tracker.send(partition, o) {
                            Ok(t) => break open.push((o, t)),
                            Err(SendError::Full(..)) => {
                                let (o, t) = open.swap_remove(0);
                                acked[w * PER + o as usize].store(true, Ordering::SeqCst);
                                tracker.ack(t).unwrap();
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                    if open.len() > 64 || rng.below(3) == 0 {
                        let i = rng.below(open.len() as u64) as usize;
                        let (o, t) = open.swap_remove(i);
                        // Marked before the ack: a report after the ack sees it.
                        acked[w * PER + o as usize].store(true, Ordering::SeqCst);
                        tracker.ack(t).unwrap();
                    }
                }
                for (o, t) in open {
                    acked[w * PER + o as usize].store(true, Ordering::SeqCst);
                    tracker.ack(t).unwrap();
                }
            }));
        }
        let reader = s.spawn(|| {
            let mut last_next: HashMap<&str, u64> = HashMap::new();
            while !done.load(Ordering::SeqCst) {
                for (p, progress) in tracker.progress() {
                    let w = ["a", "b", "c"].iter().position(|&q| q == p).unwrap();
                    let before = last_next.insert(p, progress.next()).unwrap_or(0);
                    assert!(progress.next() >= before, "next moved back");
                    for o in 0..progress.next().min(PER as u64) {
                        assert!(acked[w * PER + o as usize].load(Ordering::SeqCst));
                    }
                    for range in progress.done_ranges() {
                        for o in range.start..range.end.min(PER as u64) {
                            assert!(acked[w * PER + o as usize].load(Ordering::SeqCst));
                        }
                    }
                }
            }
            last_next
        });
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
        let mut last_next = reader.join().unwrap();
        // What changed since the reader's last call, on top of what it saw.
        for (p, progress) in tracker.progress() {
            last_next.insert(p, progress.next());
        }
        for p in ["a", "b", "c"] {
            assert_eq!(last_next[p], PER as u64);
        }
    });
}

/// An offset whose position panics for one value.
#[derive(Clone, Debug, PartialEq)]
struct Touchy(u64);

impl inflight::SeqOffset for Touchy {
    fn seq(self) -> u64 {
        assert_ne!(self.0, 13, "planned panic: the position of 13");
        self.0
    }
}

#[test]
fn a_panicking_position_sends_nothing() {
    let tracker: inflight::ProgressTracker<&str, Touchy> =
        Tracker::builder().capacity(1).progress(4096).build();
    let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tracker.send("p", Touchy(13))
    }));
    assert!(sent.is_err());
    assert_eq!(tracker.in_flight(), 0);
    // Nothing was taken: the permit is there, the partition's order too.
    let t = tracker.send("p", Touchy(12)).unwrap();
    tracker.ack(t).unwrap();
    assert_eq!(tracker.progress()["p"].next(), 13);
}

std::thread_local! {
    static KEY_DROP_PANICS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A key whose `Drop` panics once, when armed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Bomb(u8);

impl Drop for Bomb {
    fn drop(&mut self) {
        if KEY_DROP_PANICS.with(|armed| armed.replace(false)) {
            panic!("planned panic: a key's drop");
        }
    }
}

#[test]
fn a_key_drop_panicking_after_the_publish_fails_the_record() {
    let tracker: inflight::ProgressTracker<Bomb, u64> =
        Tracker::builder().capacity(2).progress(4096).build();
    let first = tracker.send(Bomb(1), 4).unwrap();
    tracker.ack(first).unwrap();
    KEY_DROP_PANICS.with(|armed| armed.set(true));
    let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tracker.send(Bomb(1), 5)));
    assert!(sent.is_err(), "the key's drop panicked");
    // The record was failed, not stranded: nothing in flight, the permit
    // back, and the partition's progress stops at it (to be redone).
    assert_eq!(tracker.in_flight(), 0);
    assert_eq!(tracker.progress()[&Bomb(1)].next(), 5);
    let _ = tracker.revoke(&Bomb(1));
    let again = tracker.send(Bomb(1), 5).unwrap();
    let other = tracker.send(Bomb(2), 0).unwrap();
    tracker.ack(again).unwrap();
    tracker.ack(other).unwrap();
    let now = tracker.progress();
    assert_eq!(now[&Bomb(1)].next(), 6);
    assert_eq!(now[&Bomb(2)].next(), 1);
}

/// On a tracker used through `progress()`, `committable_records` counts
/// what `progress()` has not handed out yet, and settles at 0 once it has
/// (it used to grow for ever: 100,000 after everything was committed).
#[test]
fn committable_records_settle_once_progress_hands_them_out() {
    let tracker = progress_tracker(4096);
    let sends = if cfg!(miri) { 20 } else { 1_000 };
    for offset in 0..sends {
        let ticket = tracker.send("p", offset).unwrap();
        tracker.ack(ticket).unwrap();
    }
    assert_eq!(tracker.stats().committable_records, sends);
    assert_eq!(tracker.progress()["p"].next(), sends);
    assert_eq!(tracker.stats().committable_records, 0, "handed out");
    let ticket = tracker.send("p", sends).unwrap();
    tracker.ack(ticket).unwrap();
    assert_eq!(tracker.stats().committable_records, 1);
    assert!(tracker.committable().contains_key("p"));
    assert_eq!(tracker.stats().committable_records, 0, "taken");
    assert!(tracker.progress().contains_key("p"), "progress moved on");
    assert_eq!(tracker.stats().committable_records, 0);
}
