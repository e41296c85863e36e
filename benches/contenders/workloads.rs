//! The workloads every contender runs (see the parent module).

use super::*;

/// How long a workload runs.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// Each worker does this many units (batches of `DEPTH` for `local`,
    /// records for `handoff`).
    Units(u64),
    /// Each worker runs until this much time has passed.
    Elapsed(Duration),
}

/// What a throughput run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Run {
    /// send+ack pairs completed.
    pub pairs: u64,
    /// From the start barrier to the last worker's exit.
    pub elapsed: Duration,
    /// Flushes committed and aborted (timed out) meanwhile.
    pub flushes: u64,
    pub timeouts: u64,
}

impl Run {
    /// Releases the workers (they wait on `start` too), times them until the
    /// last one exits, then stops the flusher and collects its counts.
    fn collect(
        start: &Barrier,
        workers: Vec<std::thread::ScopedJoinHandle<'_, u64>>,
        stop: &AtomicBool,
        flusher: std::thread::ScopedJoinHandle<'_, (u64, u64)>,
    ) -> Run {
        start.wait();
        let began = Instant::now();
        let pairs = workers.into_iter().map(|w| w.join().unwrap()).sum();
        let elapsed = began.elapsed();
        stop.store(true, Ordering::Release);
        let (flushes, timeouts) = flusher.join().unwrap();
        Run {
            pairs,
            elapsed,
            flushes,
            timeouts,
        }
    }
}

impl Run {
    pub fn pairs_per_sec(&self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64()
    }
}

/// A small deterministic PRNG (xorshift64).
#[derive(Clone, Copy)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Shuffled permutations of `0..DEPTH`, so acks come out of send order.
pub(super) fn permutations(seed: u64, count: usize) -> Vec<[u8; DEPTH]> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let mut p = [0u8; DEPTH];
            for (i, v) in p.iter_mut().enumerate() {
                *v = i as u8;
            }
            for i in (1..DEPTH).rev() {
                p.swap(i, rng.below(i + 1));
            }
            p
        })
        .collect()
}

/// The flusher thread's loop: a cycle, then a pause, until `stop`.
fn flusher<C: Contender>(c: &C, stop: &AtomicBool) -> (u64, u64) {
    let (mut flushes, mut timeouts) = (0, 0);
    // Acquire: nothing is published through `stop`; Relaxed would do.
    while !stop.load(Ordering::Acquire) {
        if flush_once(c, FLUSH_TIMEOUT) {
            flushes += 1;
        } else {
            timeouts += 1;
        }
        std::thread::sleep(FLUSH_EVERY);
    }
    (flushes, timeouts)
}

/// A worker's timed loop: waits at `start`, then runs `batch(n)` for
/// n = 0, 1, … until `until` is reached; returns the pairs done (`DEPTH`
/// per batch).
pub fn timed_batches(start: &Barrier, until: Until, mut batch: impl FnMut(u64)) -> u64 {
    start.wait();
    let deadline = match until {
        Until::Elapsed(d) => Some(Instant::now() + d),
        Until::Units(_) => None,
    };
    let mut batches = 0_u64;
    loop {
        match (until, deadline) {
            (Until::Units(n), _) if batches >= n => break,
            (_, Some(d)) if Instant::now() >= d => break,
            _ => {}
        }
        batch(batches);
        batches += 1;
    }
    batches * DEPTH as u64
}

/// Workload 1, local: `threads` workers each send `DEPTH` records of their
/// own partition, then ack them in a shuffled order, repeatedly, while a
/// flusher runs a flush cycle every millisecond. Threads are spawned before
/// the clock starts; the clock covers the workers only.
pub fn local<C: Contender>(c: &C, threads: usize, until: Until) -> Run {
    workload1(c, threads, until, false)
}

/// Workload 1 in batches: as [`local`], but each thread sends its `DEPTH`
/// records with one `send_batch` and acks them, shuffled, with one
/// `ack_batch` (a source that polls batches, a sink that reports them).
pub fn local_batched<C: Contender>(c: &C, threads: usize, until: Until) -> Run {
    workload1(c, threads, until, true)
}

fn workload1<C: Contender>(c: &C, threads: usize, until: Until, batched: bool) -> Run {
    let start = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let flusher = s.spawn(|| flusher(c, &stop));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    let perms = permutations(t as u64 + 1, 16);
                    let mut tokens: Vec<Option<C::Token>> = (0..DEPTH).map(|_| None).collect();
                    let mut sent: Vec<C::Token> = Vec::with_capacity(DEPTH);
                    let mut shuffled: Vec<C::Token> = Vec::with_capacity(DEPTH);
                    let partition = t as u32;
                    let mut offset = 0_u64;
                    timed_batches(start, until, |batch| {
                        let perm = &perms[batch as usize % perms.len()];
                        if batched {
                            c.send_batch(partition, offset..offset + DEPTH as u64, &mut sent);
                            offset += DEPTH as u64;
                            for (token, sent) in tokens.iter_mut().zip(sent.drain(..)) {
                                *token = Some(sent);
                            }
                            shuffled
                                .extend(perm.iter().map(|&i| tokens[i as usize].take().unwrap()));
                            c.ack_batch(&mut shuffled);
                        } else {
                            for token in tokens.iter_mut() {
                                *token = Some(c.send(partition, offset));
                                offset += 1;
                            }
                            for &i in perm {
                                c.ack(tokens[i as usize].take().unwrap());
                            }
                        }
                    })
                })
            })
            .collect();
        Run::collect(&start, workers, &stop, flusher)
    })
}

/// Channel bound between a sender and its acker in the hand-off workload.
pub const HANDOFF_BOUND: usize = 1024;
/// The acker's shuffle buffer: acks come out of order within this window.
pub const HANDOFF_WINDOW: usize = 16;

/// Workload 2, hand-off (the producer-callback pattern): `pairs` sender
/// threads each send records of their own partition and pass the tokens
/// over a bounded `std::sync::mpsc::sync_channel` to their own acker
/// thread, which acks them out of order (a random pick from a window of
/// `HANDOFF_WINDOW`). A flusher runs meanwhile. `Until::Units(n)`: records
/// per sender.
pub fn handoff<C: Contender>(c: &C, pairs: usize, until: Until) -> Run
where
    C::Token: Send,
{
    let start = Barrier::new(2 * pairs + 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let flusher = s.spawn(|| flusher(c, &stop));
        let mut workers = Vec::new();
        for t in 0..pairs {
            let (tx, rx) = mpsc::sync_channel::<C::Token>(HANDOFF_BOUND);
            let start = &start;
            workers.push(s.spawn(move || {
                let partition = t as u32;
                start.wait();
                let deadline = match until {
                    Until::Elapsed(d) => Some(Instant::now() + d),
                    Until::Units(_) => None,
                };
                let mut offset = 0_u64;
                loop {
                    match (until, deadline) {
                        (Until::Units(n), _) if offset >= n => break,
                        (_, Some(d)) if offset.is_multiple_of(64) && Instant::now() >= d => break,
                        _ => {}
                    }
                    tx.send(c.send(partition, offset)).unwrap();
                    offset += 1;
                }
                0
            }));
            workers.push(s.spawn(move || {
                let mut rng = Rng::new(t as u64 + 7);
                let mut window: Vec<C::Token> = Vec::with_capacity(HANDOFF_WINDOW);
                let mut acked = 0_u64;
                start.wait();
                for token in rx {
                    if window.len() == HANDOFF_WINDOW {
                        let i = rng.below(HANDOFF_WINDOW);
                        c.ack(window.swap_remove(i));
                        acked += 1;
                    }
                    window.push(token);
                }
                while !window.is_empty() {
                    let i = rng.below(window.len());
                    c.ack(window.swap_remove(i));
                    acked += 1;
                }
                acked
            }));
        }
        Run::collect(&start, workers, &stop, flusher)
    })
}

/// Workload 3, flush latency: per round, an acker thread sends `records`
/// records; the waiter begins a flush covering them; the acker acks all but
/// one in a shuffled order, busy-waits `delay` (the sink's latency; long
/// enough for the waiter to have gone to sleep), takes `Instant::now()` and
/// acks the last one; the waiter takes `Instant::now()` when `wait`
/// returns. Returns, per round, nanoseconds from the last ack to the
/// return.
pub fn flush_latency<C: Contender>(
    c: &C,
    rounds: usize,
    records: usize,
    delay: Duration,
) -> Vec<u64> {
    let sent = Barrier::new(2);
    let begun = Barrier::new(2);
    let done = Barrier::new(2);
    let last_ack: Mutex<Option<Instant>> = Mutex::new(None);
    let mut latencies = Vec::with_capacity(rounds);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = Rng::new(42);
            let mut tokens: Vec<C::Token> = Vec::with_capacity(records);
            let mut offset = 0;
            for _ in 0..rounds {
                for _ in 0..records {
                    tokens.push(c.send(0, offset));
                    offset += 1;
                }
                sent.wait();
                begun.wait();
                while tokens.len() > 1 {
                    let i = rng.below(tokens.len());
                    c.ack(tokens.swap_remove(i));
                }
                let spin_from = Instant::now();
                while spin_from.elapsed() < delay {
                    std::hint::spin_loop();
                }
                let last = tokens.pop().unwrap();
                let at = Instant::now();
                c.ack(last);
                *last_ack.lock().unwrap() = Some(at);
                done.wait();
            }
        });
        for _ in 0..rounds {
            sent.wait();
            let mut flush = c.begin_flush();
            begun.wait();
            let offsets = flush.wait(Duration::from_secs(10));
            let returned = Instant::now();
            assert!(offsets.is_some(), "{}: flush timed out", C::NAME);
            flush.commit();
            done.wait();
            let at = last_ack.lock().unwrap().take().unwrap();
            latencies.push(returned.saturating_duration_since(at).as_nanos() as u64);
        }
    });
    latencies
}

/// The `q` quantile (0..=1) of sorted values.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> T {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// "N cores, model" for the tables' header.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "?".into());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{cores} cores, {model}")
}
