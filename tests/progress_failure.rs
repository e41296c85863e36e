//! Progress survives a failure (issue 26, item 6): after a record fails,
//! `next()` stays at its offset, what was acked (or never sent) beyond it
//! stays done, and what is acked later is added; the watermark
//! (`committable()`) stays below the failure.

use inflight::{Progress, SendError, Ticket, Tracker};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

mod common;
use common::{scaled, Rng};

type T = inflight::ProgressTracker<&'static str, u64>;

fn progress_tracker(max: usize) -> T {
    Tracker::builder().progress(max).build()
}

/// Folds a `progress()` call into the latest progress of each partition.
fn fold(latest: &mut HashMap<&'static str, Progress>, tracker: &T) {
    latest.extend(tracker.progress());
}

/// Checks `p` against what the restart needs: `next` at the failure, the
/// failed and unacked offsets not done, the acked and never-sent ones
/// beyond it done, nothing past the last sent; and that its encoding (the
/// commit's metadata) decodes back to it.
fn check(p: &Progress, next: u64, not_done: &[u64], done: &[u64], last: u64) {
    assert_eq!(p.next(), next, "{p:?}");
    for &o in not_done {
        assert!(!p.is_done(o), "{o} reported done: {p:?}");
    }
    for &o in done {
        assert!(p.is_done(o), "{o} not reported done: {p:?}");
    }
    assert!(!p.is_done(last + 1), "{p:?}");
    let metadata = p.encode();
    assert_eq!(&Progress::decode(p.next(), &metadata).unwrap(), p);
}

/// The acceptance case: offsets 1..=10 sent, 4 failed, the rest acked in
/// any order, some before the failure and some after it.
#[test]
fn a_failure_keeps_every_offset_acked_past_it_in_any_order() {
    let mut rng = Rng::new(266);
    for round in 0..scaled(200) {
        let tracker = progress_tracker(4096);
        let mut tickets: BTreeMap<u64, Ticket> = (1..=10)
            .map(|o| (o, tracker.send("p", o).unwrap()))
            .collect();
        let failed = tickets.remove(&4).unwrap();
        let mut rest: Vec<(u64, Ticket)> = tickets.into_iter().collect();
        // A random order, with the failure somewhere in it.
        for i in (1..rest.len()).rev() {
            rest.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let fail_at = rng.below(rest.len() as u64 + 1) as usize;
        let mut latest = HashMap::new();
        let mut failed = Some(failed);
        for (i, (_, ticket)) in rest.into_iter().enumerate() {
            if i == fail_at {
                tracker.fail(failed.take().unwrap()).unwrap();
            }
            tracker.ack(ticket).unwrap();
            if rng.below(2) == 0 {
                fold(&mut latest, &tracker);
            }
        }
        if let Some(failed) = failed {
            tracker.fail(failed).unwrap();
        }
        fold(&mut latest, &tracker);
        let done: Vec<u64> = (5..=10).collect();
        check(&latest["p"], 4, &[4], &done, 10);
        assert!(
            tracker.progress().is_empty(),
            "round {round}: nothing changed"
        );
        // The watermark stops below the failure, and nothing moves it past.
        assert_eq!(tracker.committable()["p"], 3, "round {round}");
        assert!(tracker.committable().is_empty());
    }
}

#[test]
fn acks_after_the_failure_are_added_as_they_come() {
    let tracker = progress_tracker(4096);
    let mut t: BTreeMap<u64, Ticket> = (1..=10)
        .map(|o| (o, tracker.send("p", o).unwrap()))
        .collect();
    for o in 1..=3 {
        tracker.ack(t.remove(&o).unwrap()).unwrap();
    }
    tracker.fail(t.remove(&4).unwrap()).unwrap();
    let p = tracker.progress().remove("p").unwrap();
    check(&p, 4, &[4, 5, 6, 7, 8, 9, 10], &[1, 2, 3], 10);
    let mut acked = vec![];
    // Out of order: the last first, then one in the middle, then the rest.
    for o in [10, 7, 5, 6, 9, 8] {
        tracker.ack(t.remove(&o).unwrap()).unwrap();
        acked.push(o);
        let p = tracker
            .progress()
            .remove("p")
            .expect("each ack is a change");
        let open: Vec<u64> = (5..=10).filter(|o| !acked.contains(o)).collect();
        check(&p, 4, &[&[4][..], &open].concat(), &acked, 10);
    }
    // A record sent after the failure, acked: added too.
    let late = tracker.send("p", 12).unwrap();
    let p = tracker.progress().remove("p").unwrap();
    check(&p, 4, &[4, 12], &[5, 10, 11], 12);
    tracker.ack(late).unwrap();
    let p = tracker.progress().remove("p").unwrap();
    check(&p, 4, &[4], &[5, 10, 11, 12], 12);
    assert_eq!(tracker.committable()["p"], 3);
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn offsets_never_sent_beyond_a_failure_are_done() {
    let tracker = progress_tracker(4096);
    let sent = [1, 2, 4, 6, 9, 10];
    let mut t: BTreeMap<u64, Ticket> = sent
        .iter()
        .map(|&o| (o, tracker.send("p", o).unwrap()))
        .collect();
    tracker.ack(t.remove(&9).unwrap()).unwrap();
    tracker.fail(t.remove(&2).unwrap()).unwrap();
    tracker.ack(t.remove(&1).unwrap()).unwrap();
    tracker.ack(t.remove(&4).unwrap()).unwrap();
    // 6 and 10 stay unacked.
    let p = tracker.progress().remove("p").unwrap();
    check(&p, 2, &[2, 6, 10], &[1, 3, 4, 5, 7, 8, 9], 10);
    assert_eq!(tracker.committable()["p"], 1);
    drop(t);
}

#[test]
fn a_second_failure_is_not_done_either() {
    let tracker = progress_tracker(4096);
    let mut t: BTreeMap<u64, Ticket> = (0..8).map(|o| (o, tracker.send("p", o).unwrap())).collect();
    tracker.fail(t.remove(&5).unwrap()).unwrap();
    tracker.fail(t.remove(&2).unwrap()).unwrap();
    for (_, ticket) in t {
        tracker.ack(ticket).unwrap();
    }
    let p = tracker.progress().remove("p").unwrap();
    check(&p, 2, &[2, 5], &[0, 1, 3, 4, 6, 7], 7);
}

#[test]
fn a_revoke_after_a_failure_starts_afresh() {
    let tracker = progress_tracker(4096);
    let t: Vec<Ticket> = (0..6).map(|o| tracker.send("p", o).unwrap()).collect();
    let mut t = t.into_iter();
    tracker.ack(t.next().unwrap()).unwrap(); // 0
    tracker.fail(t.next().unwrap()).unwrap(); // 1
    let stuck = t.next().unwrap(); // 2
    for rest in t {
        tracker.ack(rest).unwrap(); // 3, 4, 5
    }
    let p = tracker.progress().remove("p").unwrap();
    check(&p, 1, &[1, 2], &[3, 4, 5], 5);
    let revoked = tracker.revoke("p");
    assert_eq!(revoked.released, 1);
    drop(stuck);
    assert!(tracker.progress().is_empty(), "nothing of the ended life");
    // The restart redoes the failed and unacked records only.
    for o in [1, 2] {
        let ticket = tracker.send("p", o).unwrap();
        tracker.ack(ticket).unwrap();
    }
    let p = tracker.progress().remove("p").unwrap();
    assert_eq!(p.next(), 3);
    assert!(tracker.committable().contains_key("p"));
}

/// The metadata budget holds beyond a failure as before one: acked records
/// behind the failed one cost a few bytes and are never refused; records
/// in flight behind it fill the budget, and then `Full`; whatever is
/// reported encodes within it. (A 16-character budget's bitset form
/// encodes 80 positions: the failure keeps up to 80 records, see
/// `tests/progress_kept_bound.rs` for what happens past them.)
#[test]
fn the_budget_holds_beyond_a_failure() {
    const MAX: usize = 16;
    let tracker = progress_tracker(MAX);
    let failed = tracker.send("p", 0).unwrap();
    tracker.fail(failed).unwrap();
    for o in 1..20 {
        let ticket = tracker.send("p", o).unwrap();
        tracker.ack(ticket).unwrap();
    }
    let p = tracker.progress().remove("p").unwrap();
    assert_eq!(p.next(), 0);
    assert!(p.is_done(1) && p.is_done(19));
    assert!(p.encode().len() <= MAX);
    let base = 20_u64;
    let mut open = Vec::new();
    let refused = loop {
        let o = base + open.len() as u64;
        match tracker.send("p", o) {
            Ok(ticket) => open.push(ticket),
            Err(SendError::Full("p", o, _)) => break o,
            Err(e) => panic!("{e:?}"),
        }
        assert!(open.len() < 1_000, "the budget never refused");
    };
    assert!(!open.is_empty());
    // As the records in flight are acked, in any order, the progress fits.
    let mut rng = Rng::new(16);
    while !open.is_empty() {
        let ticket = open.swap_remove(rng.below(open.len() as u64) as usize);
        tracker.ack(ticket).unwrap();
        let p = tracker.progress().remove("p").unwrap();
        assert_eq!(p.next(), 0);
        assert!(p.encode().len() <= MAX, "{p:?}");
    }
    // The refused offset is owed, and now fits. It is the 81st record
    // the failure would keep, one past the 80 positions the budget's
    // bitset form encodes: the partition falls back to the failed offset
    // alone.
    let ticket = tracker.send("p", refused).unwrap();
    tracker.ack(ticket).unwrap();
    let p = tracker.progress().remove("p").unwrap();
    assert_eq!(p.next(), 0);
    assert!(!p.is_done(0) && !p.is_done(refused), "{p:?}");
}

/// Senders and ackers race failures: three partitions, each with its own
/// sender (offsets rising, some skipped), and two resolvers taking
/// records in random order, failing some and leaving some unacked, while
/// another thread reads `progress()`. Each report has `next` never moving
/// back and at or below the first failed offset, no failed or unacked
/// offset done, and every done offset acked before the report or never
/// sent. Once everything settles, `next` is the smallest failed or unacked
/// offset, and every acked offset past it is done. (Each partition sends
/// fewer records than the 4,096 a failure keeps at most.)
#[test]
fn failures_racing_sends_and_acks_keep_what_was_acked() {
    const PARTITIONS: [&str; 3] = ["a", "b", "c"];
    const FAILED: u8 = 1;
    const LEFT: u8 = 2;
    let per = scaled(4_000_u64).min(4_000);
    let mut rng = Rng::new(0x00fa_11ed);
    // Per partition: the offsets sent, and what becomes of each.
    let plans: Vec<Vec<(u64, u8)>> = (0..PARTITIONS.len())
        .map(|_| {
            let mut offset = rng.below(4);
            let mut plan = Vec::new();
            while plan.len() < per as usize {
                let fate = match rng.below(1_000) {
                    0..=2 => FAILED,
                    3 => LEFT,
                    _ => 0,
                };
                plan.push((offset, fate));
                offset += 1 + if rng.below(8) == 0 { rng.below(3) } else { 0 };
            }
            // At least one failure, early enough for much to be acked past it.
            plan[per as usize / 10].1 = FAILED;
            plan
        })
        .collect();
    let span = plans.iter().map(|p| p.last().unwrap().0 + 1).max().unwrap() as usize;
    // Per partition and offset: 1 once acked (set before the ack).
    let acked: Vec<Vec<AtomicU8>> = (0..PARTITIONS.len())
        .map(|_| (0..span).map(|_| AtomicU8::new(0)).collect())
        .collect();
    let tracker = progress_tracker(1 << 20);
    let pool: Mutex<Vec<(usize, u64, u8, Ticket)>> = Mutex::new(Vec::new());
    let sending = AtomicUsize::new(PARTITIONS.len());
    let settled = AtomicBool::new(false);
    let left: Mutex<Vec<Ticket>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (w, plan) in plans.iter().enumerate() {
            let (tracker, pool, sending) = (&tracker, &pool, &sending);
            s.spawn(move || {
                for &(offset, fate) in plan {
                    let ticket = tracker.send(PARTITIONS[w], offset).unwrap();
                    pool.lock().unwrap().push((w, offset, fate, ticket));
                }
                sending.fetch_sub(1, Ordering::SeqCst);
            });
        }
        let mut resolvers = Vec::new();
        for r in 0..2_u64 {
            let (tracker, pool, sending, acked, left) = (&tracker, &pool, &sending, &acked, &left);
            resolvers.push(s.spawn(move || {
                let mut rng = Rng::new(r + 7);
                loop {
                    let taken = {
                        let mut pool = pool.lock().unwrap();
                        let n = pool.len() as u64;
                        (n > 0).then(|| pool.swap_remove(rng.below(n.min(64)) as usize))
                    };
                    let Some((w, offset, fate, ticket)) = taken else {
                        if sending.load(Ordering::SeqCst) == 0 && pool.lock().unwrap().is_empty() {
                            return;
                        }
                        std::thread::yield_now();
                        continue;
                    };
                    match fate {
                        FAILED => tracker.fail(ticket).unwrap(),
                        LEFT => left.lock().unwrap().push(ticket),
                        _ => {
                            acked[w][offset as usize].store(1, Ordering::SeqCst);
                            tracker.ack(ticket).unwrap();
                        }
                    }
                }
            }));
        }
        let reader = s.spawn(|| {
            let mut latest: HashMap<&'static str, Progress> = HashMap::new();
            loop {
                // Read before the call: a last call after it sees everything.
                let last_round = settled.load(Ordering::SeqCst);
                for (p, progress) in tracker.progress() {
                    let w = PARTITIONS.iter().position(|&q| q == p).unwrap();
                    let plan = &plans[w];
                    if let Some(before) = latest.get(p) {
                        assert!(progress.next() >= before.next(), "next moved back");
                    }
                    let first_failed = plan.iter().find(|&&(_, f)| f == FAILED).unwrap().0;
                    assert!(progress.next() <= first_failed, "{p}: past a failure");
                    for &(offset, fate) in plan {
                        if progress.is_done(offset) {
                            assert_eq!(fate, 0, "{p}: {offset} failed or unacked, done");
                            assert_eq!(acked[w][offset as usize].load(Ordering::SeqCst), 1);
                        }
                    }
                    latest.insert(p, progress);
                }
                if last_round {
                    return latest;
                }
            }
        });
        for resolver in resolvers {
            resolver.join().unwrap();
        }
        settled.store(true, Ordering::SeqCst);
        let latest = reader.join().unwrap();
        for (w, plan) in plans.iter().enumerate() {
            let p = &latest[PARTITIONS[w]];
            let first = plan.iter().find(|&&(_, f)| f != 0).unwrap().0;
            assert_eq!(p.next(), first, "{}", PARTITIONS[w]);
            let sent: HashMap<u64, u8> = plan.iter().copied().collect();
            let last = plan.last().unwrap().0;
            for offset in first..=last + 1 {
                let done = match sent.get(&offset) {
                    Some(&fate) => fate == 0,
                    None => offset <= last, // a gap below the last sent
                };
                assert_eq!(p.is_done(offset), done, "{}: {offset}", PARTITIONS[w]);
            }
            assert_eq!(&Progress::decode(p.next(), &p.encode()).unwrap(), p);
        }
    });
    // The records left unacked, acked at last: added, and `next` is now
    // the first failure.
    for ticket in left.into_inner().unwrap() {
        tracker.ack(ticket).unwrap();
    }
    assert_eq!(tracker.in_flight(), 0);
    let mut latest = tracker.progress();
    for (w, plan) in plans.iter().enumerate() {
        let first_failed = plan.iter().find(|&&(_, f)| f == FAILED).unwrap().0;
        let p = latest
            .remove(PARTITIONS[w])
            .unwrap_or_else(|| panic!("{w}"));
        assert_eq!(p.next(), first_failed);
        for &(offset, fate) in plan {
            assert_eq!(p.is_done(offset), fate != FAILED, "{offset}");
        }
    }
}
