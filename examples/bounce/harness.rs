//! The clean-bounce system test, shared by `examples/bounce` and
//! `tests/bounce.rs`.
//!
//! A *worker* process runs a verifiable source (partitions whose records are
//! sequence numbers 0, 1, 2, …), a producer that appends records to a sink
//! file from a pool of I/O threads and acks them, out of order, once its
//! write is durable, and a committer that flushes every few milliseconds and
//! stores the committed offsets atomically on disk. On start it resumes
//! after the stored offsets. A *driver* starts workers as child processes and
//! bounces them, cleanly (a stop message on stdin: stop the source, final
//! flush with a deadline, `interrupt()` if it passes) or hard (SIGKILL at a
//! random moment), then reads the sink and checks: no sequence number
//! missing, no duplicate caused by a clean bounce, and duplicates after a
//! hard bounce only past the offsets committed before it.
//!
//! Two trackers can run in the worker: `inflight`, and a port of Kafka
//! Connect's 2015 `WorkerSourceTask` bookkeeping *before* the KAFKA-2867
//! fix (the map swap that ends a flush is not atomic with respect to sends,
//! and an interrupt does not end the flush wait).

#![allow(dead_code)] // each includer uses a different part

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use inflight::store::{FileStore, OffsetStore};

/// How many source partitions a worker reads.
pub const PARTITIONS: u32 = 4;
/// Records an I/O thread writes (and fsyncs) at once.
const BATCH: usize = 64;
/// I/O threads of the simulated producer.
const IO_THREADS: usize = 3;
/// Records per millisecond the source emits at most (paces the load).
const RECORDS_PER_MS: u64 = 200;
/// Between two commits.
const COMMIT_EVERY: Duration = Duration::from_millis(5);
/// How long a regular flush may wait.
const FLUSH_TIMEOUT: Duration = Duration::from_millis(500);
/// How long the final flush of a graceful stop may take before `interrupt`.
const STOP_DEADLINE: Duration = Duration::from_secs(2);

/// Which tracker the worker uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    Inflight,
    Kafka2015Unfixed,
}

impl Design {
    pub fn parse(name: &str) -> Option<Design> {
        match name {
            "inflight" => Some(Design::Inflight),
            "kafka_2015_unfixed" => Some(Design::Kafka2015Unfixed),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Design::Inflight => "inflight",
            Design::Kafka2015Unfixed => "kafka_2015_unfixed",
        }
    }
}

// ---------------------------------------------------------------------------
// The two trackers, behind one small interface.
// ---------------------------------------------------------------------------

/// What the worker needs from a tracker.
trait Bookkeeping: Send + Sync {
    /// Records a sent record; returns the token to ack with, or `None` once
    /// closed.
    fn send(&self, partition: u32, seq: u64) -> Option<u64>;
    fn ack(&self, token: u64);
    /// One commit cycle: flush, `store` the offsets, then commit (or abort
    /// on any error). Returns what was stored.
    fn commit_cycle(
        &self,
        timeout: Duration,
        store: &mut dyn FnMut(&HashMap<u32, u64>) -> io::Result<()>,
    ) -> Result<HashMap<u32, u64>, String>;
    fn interrupt(&self);
    fn close(&self);
    /// Acks that found no record (Kafka's "CRITICAL Saw callback for record
    /// that was not present in the outstanding message set").
    fn unknown_acks(&self) -> u64 {
        0
    }
}

impl Bookkeeping for inflight::Tracker<u32, u64> {
    fn send(&self, partition: u32, seq: u64) -> Option<u64> {
        match inflight::Tracker::send(self, partition, seq) {
            Ok(ticket) => Some(ticket.into_raw()),
            Err(inflight::SendError::Closed(..)) => None,
            Err(e) => panic!("unbounded tracker refused a record: {e}"),
        }
    }

    fn ack(&self, token: u64) {
        if let Err(e) = self.ack_raw(token) {
            panic!("ack of a genuine ticket failed: {e}");
        }
    }

    fn commit_cycle(
        &self,
        timeout: Duration,
        store: &mut dyn FnMut(&HashMap<u32, u64>) -> io::Result<()>,
    ) -> Result<HashMap<u32, u64>, String> {
        let mut flush = self.begin_flush().map_err(|e| e.to_string())?;
        let offsets = flush.wait(timeout).map_err(|e| e.to_string())?;
        store(&offsets).map_err(|e| format!("storing offsets: {e}"))?;
        flush.commit().map_err(|e| e.to_string())?;
        Ok(offsets)
    }

    fn interrupt(&self) {
        inflight::Tracker::interrupt(self);
    }

    fn close(&self) {
        inflight::Tracker::close(self);
    }
}

/// Kafka Connect's 2015 bookkeeping, before the KAFKA-2867 fix.
///
/// One lock over an `outstanding` and a `backlog` map and a `flushing` flag;
/// a send goes to `backlog` while a flush runs; an ack removes the record
/// from `outstanding`, or from `backlog` while flushing. A successful flush
/// ends by swapping the two maps, and in the unfixed code that swap
/// (`finishSuccessfulFlush`) ran *outside* the task's lock: its statements
/// interleave with sends and acks. Here each statement of the swap takes
/// the lock on its own, which is exactly the freedom the unfixed Java code
/// gave the other threads. The flush wait also ignores interrupts (Java
/// swallowed the `InterruptedException`).
#[derive(Default)]
pub struct Kafka2015Unfixed {
    state: Mutex<KafkaState>,
    drained: Condvar,
    next_id: AtomicU64,
    unknown_acks: AtomicU64,
    closed: AtomicBool,
}

#[derive(Default)]
struct KafkaState {
    /// Indices into `maps`: which map plays `outstanding`, which `backlog`.
    outstanding: usize,
    backlog: usize,
    maps: [HashMap<u64, (u32, u64)>; 2],
    flushing: bool,
    /// Latest offset per partition of every record sent (Kafka's
    /// `OffsetStorageWriter`), snapshotted when a flush begins.
    offsets: HashMap<u32, u64>,
    /// The swap's temporary (`temp = outstandingMessages`).
    temp: usize,
}

impl Kafka2015Unfixed {
    pub fn new() -> Self {
        let tracker = Self::default();
        tracker.state.lock().unwrap().backlog = 1;
        tracker
    }

    /// `finishSuccessfulFlush`, unsynchronized: each statement on its own.
    ///
    /// A send that lands between the last two statements goes into the map
    /// that just became the backlog while `flushing` is about to turn false,
    /// so its ack finds nothing. In production a preemption opened that
    /// window; here a 100 µs pause stands in for it, so that the demo shows
    /// the failure on every run rather than now and then.
    fn finish_successful_flush(&self) {
        {
            let mut s = self.state.lock().unwrap();
            s.temp = s.outstanding; // temp = outstandingMessages
        }
        {
            let mut s = self.state.lock().unwrap();
            s.outstanding = s.backlog; // outstandingMessages = backlog
        }
        {
            let mut s = self.state.lock().unwrap();
            s.backlog = s.temp; // outstandingMessagesBacklog = temp
        }
        thread::sleep(Duration::from_micros(100)); // the preemption
        self.state.lock().unwrap().flushing = false; // flushing = false
    }

    /// `finishFailedFlush`: merge the backlog back (this one was locked).
    fn finish_failed_flush(s: &mut KafkaState) {
        let (o, b) = (s.outstanding, s.backlog);
        let backlog = std::mem::take(&mut s.maps[b]);
        s.maps[o].extend(backlog);
        s.flushing = false;
    }
}

impl Bookkeeping for Kafka2015Unfixed {
    fn send(&self, partition: u32, seq: u64) -> Option<u64> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut s = self.state.lock().unwrap();
        let map = if s.flushing { s.backlog } else { s.outstanding };
        s.maps[map].insert(id, (partition, seq));
        s.offsets.insert(partition, seq);
        Some(id)
    }

    fn ack(&self, token: u64) {
        let mut s = self.state.lock().unwrap();
        let (o, b) = (s.outstanding, s.backlog);
        let mut removed = s.maps[o].remove(&token).is_some();
        if !removed && s.flushing {
            removed = s.maps[b].remove(&token).is_some();
        }
        if !removed {
            // "CRITICAL Saw callback for record that was not present in the
            // outstanding message set"
            self.unknown_acks.fetch_add(1, Ordering::Relaxed);
        } else if s.flushing && s.maps[o].is_empty() {
            self.drained.notify_all();
        }
    }

    fn commit_cycle(
        &self,
        timeout: Duration,
        store: &mut dyn FnMut(&HashMap<u32, u64>) -> io::Result<()>,
    ) -> Result<HashMap<u32, u64>, String> {
        let deadline = Instant::now() + timeout;
        let snapshot = {
            let mut s = self.state.lock().unwrap();
            if s.flushing {
                return Err("a flush is already in progress".into());
            }
            s.flushing = true;
            let snapshot = s.offsets.clone();
            loop {
                let o = s.outstanding;
                if s.maps[o].is_empty() {
                    break snapshot;
                }
                let now = Instant::now();
                if now >= deadline {
                    Self::finish_failed_flush(&mut s);
                    return Err("flush timed out".into());
                }
                // The 2015 code caught and ignored InterruptedException
                // here, so `interrupt()` has nothing to end.
                s = self.drained.wait_timeout(s, deadline - now).unwrap().0;
            }
        };
        if let Err(e) = store(&snapshot) {
            Self::finish_failed_flush(&mut self.state.lock().unwrap());
            return Err(format!("storing offsets: {e}"));
        }
        self.finish_successful_flush();
        Ok(snapshot)
    }

    fn interrupt(&self) {} // ignored, as in 2015

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    fn unknown_acks(&self) -> u64 {
        self.unknown_acks.load(Ordering::Relaxed)
    }
}

// ---------------------------------------------------------------------------
// Files: the offset store and the sink.
// ---------------------------------------------------------------------------

/// Where a worker keeps its files.
pub struct Files {
    pub dir: PathBuf,
}

impl Files {
    pub fn sink(&self) -> PathBuf {
        self.dir.join("sink.log")
    }

    pub fn offsets(&self) -> PathBuf {
        self.dir.join("offsets.json")
    }

    /// The crate's offset store in this directory, locked for this
    /// process while it lives: a save is durable (and atomic) when it
    /// returns.
    pub fn open_store(&self) -> io::Result<FileStore<u32, u64>> {
        FileStore::open(self.offsets()).map_err(io::Error::other)
    }

    /// The committed offsets, or none before the first commit (no worker
    /// may hold the store meanwhile).
    pub fn read_offsets(&self) -> io::Result<BTreeMap<u32, u64>> {
        let offsets = self.open_store()?.load().map_err(io::Error::other)?;
        Ok(offsets.into_iter().collect())
    }
}

/// A sink line: `partition sequence`.
fn parse_pair(line: &str) -> Option<(u32, u64)> {
    let (p, o) = line.split_once(' ')?;
    Some((p.parse().ok()?, o.parse().ok()?))
}

fn bad_data(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

// ---------------------------------------------------------------------------
// The worker.
// ---------------------------------------------------------------------------

/// Runs one worker until a stop message (a line on stdin, or its end).
/// Returns an error for any I/O failure; the process then exits non-zero.
pub fn worker(dir: &Path, design: Design) -> io::Result<()> {
    let files = Files { dir: dir.into() };
    // Held by this worker until it exits (a second worker is refused).
    let mut offset_store = files.open_store()?;
    let committed: BTreeMap<u32, u64> = (offset_store.load().map_err(io::Error::other)?)
        .into_iter()
        .collect();
    let tracker: Arc<dyn Bookkeeping> = match design {
        Design::Inflight => Arc::new(inflight::Tracker::<u32, u64>::new()),
        Design::Kafka2015Unfixed => Arc::new(Kafka2015Unfixed::new()),
    };
    let sink = OpenOptions::new()
        .create(true)
        .append(true)
        .open(files.sink())?;
    let sink = Arc::new(sink);
    let stop = Arc::new(AtomicBool::new(false));
    let failure: Arc<Mutex<Option<io::Error>>> = Arc::default();

    // The producer's I/O threads: write a batch, fsync, then ack it out of
    // order.
    let (to_io, from_source) = mpsc::sync_channel::<(u64, u32, u64)>(4 * BATCH);
    let from_source = Arc::new(Mutex::new(from_source));
    let io_threads: Vec<_> = (0..IO_THREADS)
        .map(|i| {
            let (tracker, sink, rx, failure) = (
                tracker.clone(),
                sink.clone(),
                from_source.clone(),
                failure.clone(),
            );
            thread::spawn(move || {
                let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ i as u64;
                let mut batch = Vec::with_capacity(BATCH);
                let mut text = String::with_capacity(BATCH * 16);
                loop {
                    {
                        let rx = rx.lock().unwrap();
                        match rx.recv() {
                            Ok(record) => batch.push(record),
                            Err(_) => break, // source done and drained
                        }
                        while batch.len() < BATCH {
                            match rx.try_recv() {
                                Ok(record) => batch.push(record),
                                Err(_) => break,
                            }
                        }
                    }
                    text.clear();
                    for (_, p, seq) in &batch {
                        text.push_str(&format!("{p} {seq}\n"));
                    }
                    // One write per batch: O_APPEND makes it land whole.
                    let written = (&*sink)
                        .write_all(text.as_bytes())
                        .and_then(|()| sink.sync_data());
                    if let Err(e) = written {
                        failure.lock().unwrap().get_or_insert(e);
                        return; // its records stay unacked: never committed
                    }
                    while !batch.is_empty() {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let (token, _, _) = batch.swap_remove((rng % batch.len() as u64) as usize);
                        tracker.ack(token);
                    }
                }
            })
        })
        .collect();

    // The source: sequence numbers per partition, from the committed offsets.
    let source = {
        let (tracker, stop) = (tracker.clone(), stop.clone());
        thread::spawn(move || {
            let mut next: Vec<u64> = (0..PARTITIONS)
                .map(|p| committed.get(&p).map_or(0, |&o| o + 1))
                .collect();
            let started = Instant::now();
            let mut sent = 0_u64;
            while !stop.load(Ordering::Acquire) {
                for (p, seq) in next.iter_mut().enumerate() {
                    let Some(token) = tracker.send(p as u32, *seq) else {
                        return;
                    };
                    if to_io.send((token, p as u32, *seq)).is_err() {
                        return; // every I/O thread failed; reported below
                    }
                    *seq += 1;
                    sent += 1;
                }
                // Pace the load (correctness never depends on this sleep).
                let due = Duration::from_millis(sent / RECORDS_PER_MS);
                if let Some(ahead) = due.checked_sub(started.elapsed()) {
                    thread::sleep(ahead);
                }
            }
            // Dropping `to_io` lets the I/O threads drain and finish.
        })
    };

    // The committer: flush, store, commit, every few milliseconds.
    let (final_tx, final_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<Result<(), String>>();
    let committer = {
        let (tracker, failure) = (tracker.clone(), failure.clone());
        thread::spawn(move || {
            // A save merges the flush's partitions into what is stored.
            let mut store = |offsets: &HashMap<u32, u64>| -> io::Result<()> {
                offset_store.save(offsets).map_err(io::Error::other)
            };
            loop {
                match final_rx.recv_timeout(COMMIT_EVERY) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        match tracker.commit_cycle(FLUSH_TIMEOUT, &mut store) {
                            Err(e) if e.starts_with("storing offsets") => {
                                failure.lock().unwrap().get_or_insert(io::Error::other(e));
                                let _ = done_tx.send(Err("offset store failed".into()));
                                return;
                            }
                            _ => {} // a failed flush is retried next cycle
                        }
                    }
                    _ => {
                        // Final flush: everything the source sent is covered.
                        let result = tracker.commit_cycle(STOP_DEADLINE * 2, &mut store);
                        let _ = done_tx.send(result.map(|_| ()));
                        return;
                    }
                }
            }
        })
    };

    // Wait for the stop message (or the end of stdin).
    let mut line = String::new();
    let _ = io::stdin().lock().read_line(&mut line);

    // Graceful stop: stop the source, let the producer drain, final flush.
    stop.store(true, Ordering::Release);
    source.join().expect("source thread");
    tracker.close();
    for handle in io_threads {
        handle.join().expect("I/O thread");
    }
    let _ = final_tx.send(());
    let mut after_interrupt = Duration::ZERO;
    let outcome = match done_rx.recv_timeout(STOP_DEADLINE) {
        Ok(result) => result,
        Err(_) => {
            // The deadline passed: interrupt the flush so the commit fails
            // and we exit promptly without committing.
            tracker.interrupt();
            let interrupted = Instant::now();
            let result = done_rx
                .recv()
                .unwrap_or_else(|_| Err("committer vanished".into()));
            after_interrupt = interrupted.elapsed();
            result
        }
    };
    let _ = committer.join();
    let unknown = tracker.unknown_acks();
    if unknown > 0 {
        eprintln!("worker: CRITICAL {unknown} callbacks for records not in the outstanding set");
    }
    if let Some(e) = failure.lock().unwrap().take() {
        return Err(e);
    }
    if let Err(e) = &outcome {
        eprintln!("worker: final flush did not commit: {e}");
    }
    // Tell the driver how this run ended (stdout is its report channel).
    println!("unknown_acks {unknown}");
    println!("after_interrupt_ms {}", after_interrupt.as_millis());
    println!("final_commit {}", outcome_word(&outcome));
    Ok(())
}

fn outcome_word(outcome: &Result<(), String>) -> &'static str {
    if outcome.is_ok() {
        "ok"
    } else {
        "failed"
    }
}

// ---------------------------------------------------------------------------
// The driver.
// ---------------------------------------------------------------------------

/// How a driver starts one worker process.
pub trait Launcher {
    fn launch(&self, dir: &Path, design: Design) -> io::Result<Child>;
}

/// What the driver found.
#[derive(Debug, Default)]
pub struct Report {
    pub clean: usize,
    pub hard: usize,
    pub records: usize,
    pub clean_duplicates: usize,
    pub hard_duplicates: usize,
    pub missing: usize,
    /// Hard-bounce duplicates at or before the offsets committed when the
    /// killed run died: the bookkeeping committed something it should not
    /// have.
    pub misplaced_duplicates: usize,
    /// Records a cleanly stopped run wrote above the offsets committed at the
    /// end: its final commit did not cover them.
    pub uncommitted_clean: usize,
    pub unknown_acks: u64,
    pub failed_final_commits: usize,
    /// The longest a final flush went on after `interrupt()`.
    pub after_interrupt: Duration,
    pub commits_stalled: bool,
}

impl Report {
    /// The summary line scripts read.
    pub fn line(&self) -> String {
        format!(
            "bounce: {} clean bounces, {} hard bounces, {} records, {} duplicates after clean bounces, {} missing",
            self.clean, self.hard, self.records, self.clean_duplicates, self.missing
        )
    }

    pub fn passed(&self) -> bool {
        self.clean_duplicates == 0
            && self.missing == 0
            && self.misplaced_duplicates == 0
            && self.uncommitted_clean == 0
    }
}

/// Bounces workers `clean + hard` times (in a shuffled order, then one
/// final clean stop) and verifies the sink.
pub fn drive(
    launcher: &dyn Launcher,
    dir: &Path,
    design: Design,
    clean: usize,
    hard: usize,
    run_for: Duration,
    seed: u64,
) -> io::Result<Report> {
    fs::create_dir_all(dir)?;
    let files = Files { dir: dir.into() };
    let mut rng = seed | 1;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    // The bounce plan: `true` for a hard one. The last run always ends
    // cleanly, so that everything it produced is committed.
    let mut plan: Vec<bool> = (0..clean.saturating_sub(1))
        .map(|_| false)
        .chain((0..hard).map(|_| true))
        .collect();
    for i in (1..plan.len()).rev() {
        let j = next(i as u64 + 1) as usize;
        plan.swap(i, j);
    }
    if clean > 0 {
        plan.push(false);
    }

    let mut report = Report::default();
    // For each run: the sink length and the committed offsets at its start,
    // and whether the run before it ended hard.
    let mut runs: Vec<(u64, BTreeMap<u32, u64>, bool)> = Vec::new();
    let mut previous_hard = false;
    let mut last_committed = BTreeMap::new();
    let mut stalled_runs = 0;
    for &hard_stop in &plan {
        let sink_len = fs::metadata(files.sink()).map_or(0, |m| m.len());
        let committed = files.read_offsets()?;
        if !runs.is_empty() && committed == last_committed {
            stalled_runs += 1;
        }
        last_committed = committed.clone();
        runs.push((sink_len, committed, previous_hard));
        let mut child = launcher.launch(dir, design)?;
        // Let it work (pacing only: the checks never depend on timing).
        let jitter = if hard_stop {
            next(run_for.as_millis() as u64 + 1)
        } else {
            0
        };
        thread::sleep(run_for / 2 + Duration::from_millis(jitter));
        if hard_stop {
            child.kill()?; // SIGKILL
            child.wait()?;
            report.hard += 1;
        } else {
            if let Some(mut stdin) = child.stdin.take() {
                writeln!(stdin, "stop")?;
            }
            let mut out = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                stdout.read_to_string(&mut out)?;
            }
            let status = child.wait()?;
            if !status.success() {
                return Err(io::Error::other(format!(
                    "worker failed on a clean stop ({status}); its output: {out}"
                )));
            }
            for line in out.lines() {
                if let Some(n) = line.strip_prefix("unknown_acks ") {
                    report.unknown_acks += n.trim().parse::<u64>().unwrap_or(0);
                }
                if let Some(ms) = line.strip_prefix("after_interrupt_ms ") {
                    let ms = Duration::from_millis(ms.trim().parse().unwrap_or(0));
                    report.after_interrupt = report.after_interrupt.max(ms);
                }
                if line.trim() == "final_commit failed" {
                    report.failed_final_commits += 1;
                }
            }
            report.clean += 1;
        }
        previous_hard = hard_stop;
    }
    report.commits_stalled = stalled_runs > 0;
    verify(&files, &runs, &mut report)?;
    Ok(report)
}

/// Reads the sink and fills in records, duplicates and missing.
///
/// A duplicate is blamed on the run that wrote the copy before it, not on
/// the run that wrote it again: the records a hard-killed run wrote past its
/// last commit may be produced again by any later run, not only the next one
/// (on a loaded machine the run after the kill can be stopped before it
/// reaches them). Only a copy written by a cleanly stopped run, whose final
/// commit covered it, must never be written again.
fn verify(
    files: &Files,
    runs: &[(u64, BTreeMap<u32, u64>, bool)],
    report: &mut Report,
) -> io::Result<()> {
    // Run `r` ended hard if the run after it started after a hard stop (the
    // last run always ends cleanly); the offsets committed when it ended are
    // those the next run started from.
    let ended_hard = |r: usize| runs.get(r + 1).is_some_and(|next| next.2);
    let file = File::open(files.sink())?;
    let mut reader = BufReader::new(file);
    // Per partition and sequence number: the run that wrote its latest copy.
    let mut writers: HashMap<u32, Vec<Option<usize>>> = HashMap::new();
    let mut position = 0_u64;
    let mut run = 0;
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        if n == 0 {
            break;
        }
        while run + 1 < runs.len() && position >= runs[run + 1].0 {
            run += 1;
        }
        position += n as u64;
        let Some((p, seq)) = parse_pair(line.trim_end()) else {
            return Err(bad_data(format!("sink line {line:?} at byte {position}")));
        };
        report.records += 1;
        let writer = writers.entry(p).or_default();
        if writer.len() <= seq as usize {
            writer.resize(seq as usize + 1, None);
        }
        if let Some(previous) = writer[seq as usize].replace(run) {
            if !ended_hard(previous) {
                report.clean_duplicates += 1;
            } else {
                report.hard_duplicates += 1;
                let committed = &runs[previous + 1].1;
                if committed.get(&p).is_some_and(|&c| seq <= c) {
                    report.misplaced_duplicates += 1;
                }
            }
        }
    }
    // Every record up to the final commit must be there. Above it lie only
    // the uncommitted tails of hard-killed runs, which no later run may have
    // reached (gaps there are batches the kill cut off); a cleanly stopped
    // run's record above it was not covered by its final commit.
    let committed = files.read_offsets()?;
    for (p, writer) in &writers {
        let upto = committed.get(p).map_or(0, |&c| c as usize + 1);
        report.missing += writer.iter().take(upto).filter(|w| w.is_none()).count();
        report.uncommitted_clean += writer
            .iter()
            .skip(upto)
            .filter(|w| w.is_some_and(|r| !ended_hard(r)))
            .count();
    }
    report.missing += (0..PARTITIONS)
        .filter(|p| !writers.contains_key(p))
        .map(|p| committed.get(&p).map_or(0, |&c| c as usize + 1))
        .sum::<usize>();
    Ok(())
}
