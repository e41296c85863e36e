//! Multi-threaded stress test of the barrier flush.
//!
//! Three sender threads send increasing offsets, each to partitions of its
//! own and to one partition they all share, and pass the tickets over
//! channels to two acker threads that ack them out of order (buffered and
//! shuffled). A committer thread loops `begin_flush` / `wait` (short
//! timeouts) / `commit` or `abort` (aborting at random, also after `Ok`) and
//! checks every `Ok` against what the ackers recorded *before* acking:
//!
//! - no offset is returned before every record of its partition up to it
//!   was acked (guarantee 3);
//! - the offset lies between the last send that returned before
//!   `begin_flush` and the last one that began before it returned
//!   (guarantee 2);
//! - offsets never go backwards, and a committed record never comes back
//!   (guarantees 2 and 7).
//!
//! At the end nothing is in flight (guarantee 1) and a final flush returns
//! the last offset of every partition written since the last commit.
//!
//! The harness uses locks to record what it did; the tracker does not.

use inflight::mode::Mode;
use inflight::{FlushError, SendError, Ticket, Tracker};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::thread;
use std::time::Duration;

const SENDERS: usize = 3;
/// Partitions of each sender's own, numbered `sender * 10 + k`.
const OWN: usize = 3;
/// The partition every sender writes to. Its offsets are
/// `counter * SENDERS + sender`, so each sender's are distinct and increasing.
const SHARED: u32 = 1_000;
const ACKERS: usize = 2;
/// How many tickets an acker holds back and shuffles.
const ACK_BUFFER: usize = 16;

mod common;
use common::Rng;

/// A stream is one sender's sequence of records to one partition: its own
/// partitions (`k < OWN`) and its share of the shared one (`k == OWN`).
fn stream(sender: usize, k: usize) -> usize {
    sender * (OWN + 1) + k
}

fn own_partition(sender: usize, k: usize) -> u32 {
    (sender * 10 + k) as u32
}

/// Which stream, and which counter in it, an offset of `partition` is.
fn decode(partition: u32, offset: u64) -> (usize, u64) {
    if partition == SHARED {
        let sender = (offset % SENDERS as u64) as usize;
        (stream(sender, OWN), offset / SENDERS as u64)
    } else {
        let (sender, k) = ((partition / 10) as usize, (partition % 10) as usize);
        assert!(sender < SENDERS && k < OWN, "unknown partition {partition}");
        (stream(sender, k), offset)
    }
}

/// The acked counters of one stream: every counter `<= prefix` was acked,
/// plus those in `above`.
#[derive(Default)]
struct Acked {
    prefix: u64,
    above: BTreeSet<u64>,
}

impl Acked {
    fn insert(&mut self, counter: u64) {
        assert!(
            counter > self.prefix && self.above.insert(counter),
            "counter {counter} acked twice"
        );
        while self.above.remove(&(self.prefix + 1)) {
            self.prefix += 1;
        }
    }
}

struct Record {
    stream: usize,
    counter: u64,
    ticket: Ticket,
}

/// What every thread shares, apart from the tracker.
struct Shared {
    /// Per stream: the counter of the latest send that began / returned Ok.
    started: Vec<AtomicU64>,
    returned: Vec<AtomicU64>,
    /// Per stream: acked counters, recorded *before* `ack` is called.
    acked: Mutex<Vec<Acked>>,
    acks: AtomicUsize,
    stop: AtomicBool,
}

/// The committer's view at the end.
#[derive(Default)]
struct Committed {
    /// Per own partition stream: the last committed counter (0: none).
    own: HashMap<usize, u64>,
    /// Per shared stream: the highest counter known to be committed.
    shared: HashMap<usize, u64>,
    commits: usize,
    /// Ok flushes while records were still being sent and acked.
    oks_under_load: usize,
    aborted_oks: usize,
    timeouts: usize,
}

fn sender<M: Mode>(
    tracker: &Tracker<u32, u64, M>,
    shared: &Shared,
    me: usize,
    records: u64,
    ackers: Vec<mpsc::SyncSender<Record>>,
) -> Vec<u64> {
    let mut rng = Rng::new(me as u64 + 1);
    let mut counters = vec![0_u64; OWN + 1];
    for _ in 0..records {
        let k = rng.below(OWN as u64 + 1) as usize;
        counters[k] += 1;
        let counter = counters[k];
        let (partition, offset) = if k == OWN {
            (SHARED, counter * SENDERS as u64 + me as u64)
        } else {
            (own_partition(me, k), counter)
        };
        let s = stream(me, k);
        shared.started[s].store(counter, Ordering::SeqCst);
        let ticket = loop {
            match tracker.send(partition, offset) {
                Ok(ticket) => break ticket,
                Err(SendError::Full(p, o, _)) => {
                    // Bounded tracker: the record comes back intact; retry
                    // once the ackers made room.
                    assert_eq!((p, o), (partition, offset));
                    thread::yield_now();
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
        };
        shared.returned[s].store(counter, Ordering::SeqCst);
        let acker = rng.below(ackers.len() as u64) as usize;
        ackers[acker]
            .send(Record {
                stream: s,
                counter,
                ticket,
            })
            .unwrap();
    }
    counters
}

fn acker<M: Mode>(
    tracker: &Tracker<u32, u64, M>,
    shared: &Shared,
    me: usize,
    rx: mpsc::Receiver<Record>,
) {
    let mut rng = Rng::new(100 + me as u64);
    let mut buffer: Vec<Record> = Vec::new();
    let ack_one = |buffer: &mut Vec<Record>, rng: &mut Rng| {
        let record = buffer.swap_remove(rng.below(buffer.len() as u64) as usize);
        // Recorded before the ack: if the tracker saw the ack, so did we.
        shared.acked.lock().unwrap()[record.stream].insert(record.counter);
        shared.acks.fetch_add(1, Ordering::SeqCst);
        if rng.below(4) == 0 {
            tracker.ack_raw(record.ticket.into_raw()).unwrap();
        } else {
            tracker.ack(record.ticket).unwrap();
        }
    };
    while let Ok(record) = rx.recv() {
        buffer.push(record);
        let mut drained = false;
        while buffer.len() < ACK_BUFFER {
            match rx.try_recv() {
                Ok(record) => buffer.push(record),
                Err(_) => {
                    drained = true;
                    break;
                }
            }
        }
        // With the channel momentarily empty, ack everything (a bounded
        // tracker's senders may be waiting for room); otherwise keep half
        // back so acks stay out of order across batches.
        let keep = if drained { 0 } else { ACK_BUFFER / 2 };
        while buffer.len() > keep {
            ack_one(&mut buffer, &mut rng);
        }
    }
    while !buffer.is_empty() {
        ack_one(&mut buffer, &mut rng);
    }
}

fn committer<M: Mode>(tracker: &Tracker<u32, u64, M>, shared: &Shared) -> Committed {
    let mut rng = Rng::new(7);
    let mut state = Committed::default();
    // Per stream: the highest counter returned by any Ok (committed or not).
    let mut seen: HashMap<usize, u64> = HashMap::new();
    let streams = SENDERS * (OWN + 1);
    let mut oks = 0;
    while !(shared.stop.load(Ordering::SeqCst) && oks >= 10) {
        let lo: Vec<u64> = shared
            .returned
            .iter()
            .map(|r| r.load(Ordering::SeqCst))
            .collect();
        let mut flush = tracker
            .begin_flush()
            .expect("only the committer begins flushes");
        let hi: Vec<u64> = shared
            .started
            .iter()
            .map(|s| s.load(Ordering::SeqCst))
            .collect();
        let mut result = flush.wait(Duration::from_micros(rng.below(5_000)));
        while matches!(result, Err(FlushError::Timeout { .. })) && rng.below(2) == 0 {
            result = flush.wait(Duration::from_micros(rng.below(5_000)));
        }
        let offsets = match result {
            Ok(offsets) => offsets,
            Err(FlushError::Timeout { pending }) => {
                assert!(pending > 0);
                state.timeouts += 1;
                flush.abort();
                continue;
            }
            Err(e) => panic!("unexpected {e:?}"),
        };
        oks += 1;
        if !shared.stop.load(Ordering::SeqCst) {
            state.oks_under_load += 1;
        }
        {
            let acked = shared.acked.lock().unwrap();
            for (&partition, &offset) in &offsets {
                let (s, counter) = decode(partition, offset);
                assert!(counter >= 1, "offset {offset} of {partition} never sent");
                assert!(
                    acked[s].prefix >= counter,
                    "partition {partition}: offset {offset} returned, but only its \
                     stream's prefix up to {} was acked",
                    acked[s].prefix
                );
                assert!(
                    counter <= hi[s],
                    "partition {partition}: offset {offset} was sent after the seal"
                );
                let seen = seen.entry(s).or_insert(0);
                assert!(
                    counter >= *seen,
                    "partition {partition}: offset went back from {} to {counter}",
                    *seen
                );
                *seen = counter;
                let committed = if partition == SHARED {
                    state.shared.get(&s)
                } else {
                    state.own.get(&s)
                };
                let committed = committed.copied().unwrap_or(0);
                assert!(
                    counter > committed,
                    "partition {partition}: {offset} returned again after its commit"
                );
            }
        }
        // Coverage of the own partitions: every send that returned before
        // begin_flush is covered, so its partition is present and at least
        // as far.
        for sender in 0..SENDERS {
            for k in 0..OWN {
                let s = stream(sender, k);
                let committed = state.own.get(&s).copied().unwrap_or(0);
                if lo[s] > committed {
                    let offset = offsets.get(&own_partition(sender, k)).copied();
                    assert!(
                        offset.is_some_and(|o| o >= lo[s]),
                        "stream {s}: send {} returned before the seal, flush gave {offset:?}",
                        lo[s]
                    );
                }
            }
        }
        assert!(offsets.len() <= streams);
        if rng.below(4) == 0 {
            state.aborted_oks += 1;
            flush.abort();
        } else {
            flush.commit().unwrap();
            state.commits += 1;
            for (&partition, &offset) in &offsets {
                let (s, counter) = decode(partition, offset);
                if partition == SHARED {
                    state.shared.insert(s, counter);
                } else {
                    state.own.insert(s, counter);
                }
            }
        }
    }
    state
}

fn run<M: Mode>(tracker: Tracker<u32, u64, M>, records_per_sender: u64) {
    let streams = SENDERS * (OWN + 1);
    let shared = Shared {
        started: (0..streams).map(|_| AtomicU64::new(0)).collect(),
        returned: (0..streams).map(|_| AtomicU64::new(0)).collect(),
        acked: Mutex::new((0..streams).map(|_| Acked::default()).collect()),
        acks: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    };
    let (sent, committed) = thread::scope(|s| {
        let (tracker, shared) = (&tracker, &shared);
        let committer = s.spawn(move || committer(tracker, shared));
        let mut txs = Vec::new();
        let mut ackers = Vec::new();
        for me in 0..ACKERS {
            // Bounded, so that a covered record is acked soon after its send
            // and flushes complete while the senders are still running.
            let (tx, rx) = mpsc::sync_channel(256);
            txs.push(tx);
            ackers.push(s.spawn(move || acker(tracker, shared, me, rx)));
        }
        let senders: Vec<_> = (0..SENDERS)
            .map(|me| {
                let txs = txs.clone();
                s.spawn(move || sender(tracker, shared, me, records_per_sender, txs))
            })
            .collect();
        drop(txs);
        let sent: Vec<Vec<u64>> = senders.into_iter().map(|h| h.join().unwrap()).collect();
        for a in ackers {
            a.join().unwrap();
        }
        shared.stop.store(true, Ordering::SeqCst);
        (sent, committer.join().unwrap())
    });

    let total = SENDERS as u64 * records_per_sender;
    assert_eq!(shared.acks.load(Ordering::SeqCst) as u64, total);
    assert_eq!(tracker.in_flight(), 0);
    assert!(committed.commits > 0);
    let acked = shared.acked.into_inner().unwrap();
    for (sender, counters) in sent.iter().enumerate() {
        for (k, &last) in counters.iter().enumerate() {
            let s = stream(sender, k);
            assert_eq!(acked[s].prefix, last, "stream {s}");
            assert!(acked[s].above.is_empty());
        }
    }

    // Everything is acked: the final flush is ready at once.
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.pending(), 0);
    let offsets = flush
        .wait(Duration::ZERO)
        .expect("everything was acked before the final flush");
    for (sender, counters) in sent.iter().enumerate() {
        for (k, &last) in counters.iter().enumerate().take(OWN) {
            let s = stream(sender, k);
            let partition = own_partition(sender, k);
            let committed = committed.own.get(&s).copied().unwrap_or(0);
            if last > committed {
                assert_eq!(
                    offsets.get(&partition),
                    Some(&last),
                    "partition {partition}"
                );
            } else {
                assert_eq!(committed, last);
                assert_eq!(offsets.get(&partition), None, "partition {partition}");
            }
        }
    }
    if let Some(&offset) = offsets.get(&SHARED) {
        // The latest shared record in send order is some sender's last one,
        // and not one that was already committed.
        let (s, counter) = decode(SHARED, offset);
        let sender = s / (OWN + 1);
        assert_eq!(counter, sent[sender][OWN], "shared offset {offset}");
        assert!(counter > committed.shared.get(&s).copied().unwrap_or(0));
    }
    for (&partition, &offset) in &offsets {
        decode(partition, offset); // panics on an unknown partition
    }
    flush.commit().unwrap();
    let mut flush = tracker.begin_flush().unwrap();
    assert_eq!(flush.wait(Duration::ZERO), Ok(HashMap::new()));
    flush.commit().unwrap();
    assert_eq!(tracker.in_flight(), 0);
    eprintln!(
        "stress: {total} records, {} commits, {} aborted Ok flushes, {} Ok under load, {} timeouts",
        committed.commits, committed.aborted_oks, committed.oks_under_load, committed.timeouts
    );
}

#[test]
fn stress_unbounded_tracker_out_of_order_acks_random_aborts() {
    run(Tracker::new(), 100_000);
}

#[test]
fn stress_bounded_tracker_out_of_order_acks_random_aborts() {
    run(Tracker::with_capacity(64), 30_000);
}

/// The unbounded run with offsets inline (`Builder::inline_offsets`): the
/// partition cells keep the offsets, and slots are freed at resolution.
#[test]
fn stress_inline_tracker_out_of_order_acks_random_aborts() {
    run(Tracker::builder().inline_offsets().build(), 100_000);
}

/// Many threads send to one partition and ack their own records at once,
/// while a committer keeps sealing generations. Every record is its
/// partition's latest when sent (so its slot is held) and is displaced by
/// another thread's send moments later, so a held slot is freed and reused,
/// often in a newer generation, right as its resolver finishes. A resolver
/// that read its record's generation after its slot could be reused would
/// leave the wrong generation: a count underflow, or a flush that never
/// drains (caught here as a hang of `wait`, or `in_flight() != 0`).
#[test]
fn stress_resolutions_race_slot_reuse_across_seals() {
    const THREADS: u64 = 6;
    const RECORDS: u64 = 100_000;
    let tracker = Tracker::<u8, u64>::new();
    // Per thread: every counter <= acked[t] was acked (stored before ack).
    let acked: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let flushes = thread::scope(|s| {
        let committer = s.spawn(|| {
            let mut rng = Rng::new(99);
            let mut oks = 0_u64;
            while !stop.load(Ordering::SeqCst) {
                let mut flush = tracker.begin_flush().unwrap();
                match flush.wait(Duration::from_micros(rng.below(200))) {
                    Ok(offsets) => {
                        if let Some(&offset) = offsets.get(&0) {
                            let (t, counter) = (offset % THREADS, offset / THREADS);
                            assert!((1..=RECORDS).contains(&counter));
                            assert!(
                                counter <= acked[t as usize].load(Ordering::SeqCst),
                                "offset {offset} returned before it was acked"
                            );
                        }
                        oks += 1;
                        if rng.below(3) == 0 {
                            flush.abort();
                        } else {
                            flush.commit().unwrap();
                        }
                    }
                    Err(FlushError::Timeout { .. }) => flush.abort(),
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
            oks
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (tracker, acked) = (&tracker, &acked[t as usize]);
                s.spawn(move || {
                    for counter in 1..=RECORDS {
                        let ticket = tracker.send(0, counter * THREADS + t).unwrap();
                        acked.store(counter, Ordering::SeqCst);
                        if counter % 2 == 0 {
                            tracker.ack(ticket).unwrap();
                        } else {
                            tracker.ack_raw(ticket.into_raw()).unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        committer.join().unwrap()
    });
    assert_eq!(tracker.in_flight(), 0);
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = flush
        .wait(Duration::from_secs(30))
        .expect("every record was acked");
    if let Some(&offset) = offsets.get(&0) {
        assert_eq!(offset / THREADS, RECORDS, "the last record of some thread");
    }
    flush.commit().unwrap();
    eprintln!("stress: slot reuse across seals, {flushes} Ok flushes");
}
