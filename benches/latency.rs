//! Latency, workloads 3 and 4 of issue 4. A custom harness (`harness =
//! false`) rather than criterion: criterion estimates a mean time per
//! iteration and has no notion of tail percentiles of individual calls, nor
//! of a latency measured across two threads, so this prints its own tables.
//!
//! ```text
//! cargo bench --bench latency
//! ```
//!
//! 3. Flush latency: the time from the last covered ack (`Instant` taken by
//!    the acking thread just before it) to `wait` returning (`Instant` taken
//!    by the waiter). The acker busy-waits 200 µs before that last ack, as a
//!    sink would, so the waiter has finished spinning and is asleep: this
//!    measures the wake-up path. Median and p99 over 2,000 rounds.
//! 4. Send latency during a flush vs outside one: 8 threads (on however many
//!    cores the machine has; on 2 cores that is oversubscribed, and a lock
//!    holder can be preempted) each send and ack their own records at depth
//!    64, timing every `send` with two `Instant`s into preallocated vectors,
//!    one for sends that overlapped a flush (begin_flush through
//!    commit/abort), one for the others. The flusher begins a flush, waits
//!    (10 ms at most), holds it 200 µs more (writing the offsets
//!    somewhere), commits or aborts, then pauses 800 µs.

#[path = "contenders/mod.rs"]
mod contenders;

use contenders::{quantile, Contender, DashTracker, Floor, FlushCycle, Inflight, Kafka2015};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const FLUSH_ROUNDS: usize = 2_000;
const FLUSH_RECORDS: usize = 64;
const SINK_DELAY: Duration = Duration::from_micros(200);

const SEND_THREADS: usize = 8;
const BATCHES_PER_THREAD: usize = 4_000;

fn flush_latency_row<C: Contender>() {
    let c = C::new();
    // Warm-up: pages, thread-locals, the first generations.
    contenders::flush_latency(&c, 50, FLUSH_RECORDS, SINK_DELAY);
    let mut ns = contenders::flush_latency(&c, FLUSH_ROUNDS, FLUSH_RECORDS, SINK_DELAY);
    ns.sort_unstable();
    println!(
        "{:<12} {:>10.1} {:>10.1} {:>10.1}",
        C::NAME,
        quantile(&ns, 0.5) as f64 / 1e3,
        quantile(&ns, 0.99) as f64 / 1e3,
        *ns.last().unwrap() as f64 / 1e3,
    );
}

struct SendLatency {
    during: Vec<u32>,
    outside: Vec<u32>,
    flushes: u64,
}

fn send_latency<C: Contender>() -> SendLatency {
    let c = C::new();
    let flushing = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    // The workers, the flusher and this thread.
    let start = Barrier::new(SEND_THREADS + 2);
    let sends = BATCHES_PER_THREAD * contenders::DEPTH;
    std::thread::scope(|s| {
        let flusher = s.spawn(|| {
            start.wait();
            let mut flushes = 0;
            // Relaxed: a stop request, nothing published through it.
            while !stop.load(Ordering::Relaxed) {
                // Relaxed: the flag only labels samples; a send racing the
                // edge is labelled "during" if it saw the flag either side.
                flushing.store(true, Ordering::Relaxed);
                let mut flush = c.begin_flush();
                let ok = flush.wait(Duration::from_millis(10)).is_some();
                std::thread::sleep(Duration::from_micros(200));
                if ok {
                    flush.commit();
                } else {
                    flush.abort();
                }
                flushing.store(false, Ordering::Relaxed);
                flushes += 1;
                std::thread::sleep(Duration::from_micros(800));
            }
            flushes
        });
        let workers: Vec<_> = (0..SEND_THREADS)
            .map(|t| {
                let (c, flushing, start) = (&c, &flushing, &start);
                s.spawn(move || {
                    let mut during = Vec::with_capacity(sends);
                    let mut outside = Vec::with_capacity(sends);
                    let mut tokens: Vec<C::Token> = Vec::with_capacity(contenders::DEPTH);
                    let mut rng = contenders::Rng::new(t as u64 + 1);
                    let mut offset = 0;
                    start.wait();
                    for _ in 0..BATCHES_PER_THREAD {
                        for _ in 0..contenders::DEPTH {
                            let before = flushing.load(Ordering::Relaxed);
                            let t0 = Instant::now();
                            let token = c.send(t as u32, offset);
                            let ns = t0.elapsed().as_nanos().min(u32::MAX as u128) as u32;
                            let after = flushing.load(Ordering::Relaxed);
                            if before || after {
                                during.push(ns);
                            } else {
                                outside.push(ns);
                            }
                            tokens.push(token);
                            offset += 1;
                        }
                        while !tokens.is_empty() {
                            let i = rng.below(tokens.len());
                            c.ack(tokens.swap_remove(i));
                        }
                    }
                    (during, outside)
                })
            })
            .collect();
        start.wait();
        let mut result = SendLatency {
            during: Vec::with_capacity(sends * SEND_THREADS),
            outside: Vec::with_capacity(sends * SEND_THREADS),
            flushes: 0,
        };
        for w in workers {
            let (during, outside) = w.join().unwrap();
            result.during.extend(during);
            result.outside.extend(outside);
        }
        stop.store(true, Ordering::Relaxed);
        result.flushes = flusher.join().unwrap();
        result.during.sort_unstable();
        result.outside.sort_unstable();
        result
    })
}

fn send_latency_row<C: Contender>() {
    let r = send_latency::<C>();
    let q = |v: &[u32], q: f64| if v.is_empty() { 0 } else { quantile(v, q) };
    let (d, o) = (&r.during, &r.outside);
    println!(
        "{:<12} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>8.2} {:>9} {:>9} {:>7}",
        C::NAME,
        q(o, 0.5),
        q(o, 0.99),
        q(o, 0.999),
        q(d, 0.5),
        q(d, 0.99),
        q(d, 0.999),
        q(d, 0.999) as f64 / q(o, 0.999).max(1) as f64,
        o.len(),
        d.len(),
        r.flushes,
    );
}

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to configure.
    println!("machine: {}", contenders::machine());
    println!();
    println!(
        "workload 3: flush latency, last covered ack -> wait returns \
         ({FLUSH_ROUNDS} rounds, {FLUSH_RECORDS} records, sink delay {} us), microseconds",
        SINK_DELAY.as_micros()
    );
    println!(
        "{:<12} {:>10} {:>10} {:>10}",
        "contender", "median", "p99", "max"
    );
    flush_latency_row::<Inflight>();
    flush_latency_row::<Kafka2015>();
    flush_latency_row::<DashTracker>();
    println!("(floor has no wake-up: its flush polls; not measured)");
    println!();
    println!(
        "workload 4: send latency, {SEND_THREADS} threads, depth {}, {} sends per thread, nanoseconds",
        contenders::DEPTH,
        BATCHES_PER_THREAD * contenders::DEPTH
    );
    println!(
        "{:<12} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9} {:>7}",
        "contender",
        "out p50",
        "out p99",
        "out p99.9",
        "fl p50",
        "fl p99",
        "fl p99.9",
        "fl/out",
        "n out",
        "n flush",
        "flushes"
    );
    send_latency_row::<Inflight>();
    send_latency_row::<Kafka2015>();
    send_latency_row::<DashTracker>();
    send_latency_row::<Floor>();
    println!("(out: outside a flush; fl: during one; fl/out: p99.9 ratio)");
}
