//! The clean-bounce scenario against a broker.
//!
//! The driver starts worker processes one after the other (run 0, 1, …)
//! and stops each one cleanly (a stop line on its stdin: final flush,
//! commit, exit) or hard (SIGKILL), at a moment chosen by counting the
//! commits the worker reports on its stdout, never by sleeping. Before each
//! start it reads the committed offsets back. Each record carries the
//! number of the run that produced it. At the end the driver reads the
//! whole data topic back and checks, per source partition: no sequence
//! number missing (including any committed one); a record produced again by
//! a later run only if the run before ended hard (a clean stop commits
//! everything it sent), and then only past the offsets committed before
//! the later run started.

use crate::kafka;
use crate::offsets::{self, Offsets};
use crate::worker::Config;
use crate::Error;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::Child;
use std::time::{Duration, Instant};

/// What the driver found.
#[derive(Debug, Default)]
pub struct Report {
    pub clean: usize,
    pub hard: usize,
    pub records: usize,
    pub clean_duplicates: usize,
    pub hard_duplicates: usize,
    pub missing: usize,
    /// Hard-bounce duplicates at or before the offsets committed before the
    /// bounce: something was committed that should not have been.
    pub misplaced_duplicates: usize,
    /// Records produced twice by the same run (a producer retry).
    pub retry_duplicates: usize,
    /// Records that are not `<partition> <seq> <run>` on the partition
    /// they name.
    pub malformed: usize,
    pub failed_final_commits: usize,
    pub commits: usize,
    /// Time the workers ran, start to exit.
    pub worker_time: Duration,
}

impl Report {
    /// The summary line scripts read (the `bounce` example's, prefixed).
    pub fn line(&self) -> String {
        format!(
            "kafka-bounce: {} clean bounces, {} hard bounces, {} records, {} duplicates after clean bounces, {} missing",
            self.clean, self.hard, self.records, self.clean_duplicates, self.missing
        )
    }

    pub fn passed(&self) -> bool {
        self.clean_duplicates == 0
            && self.missing == 0
            && self.misplaced_duplicates == 0
            && self.malformed == 0
            && self.failed_final_commits == 0
    }
}

/// A run: the offsets committed when it started, and how it ended.
struct Run {
    committed: Offsets,
    hard_stop: bool,
}

/// Bounces `clean + hard` workers (hard ones at shuffled places, the last
/// one always clean) and verifies the data topic.
pub fn drive(
    config: &Config,
    clean: usize,
    hard: usize,
    seed: u64,
    launch: &dyn Fn(&Config) -> std::io::Result<Child>,
) -> Result<Report, Error> {
    config.create_topics()?;
    let mut rng = seed | 1;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
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
    let mut runs = Vec::new();
    for (i, &hard_stop) in plan.iter().enumerate() {
        runs.push(Run {
            committed: offsets::read(
                &config.brokers,
                &config.offsets_topic,
                &config.name,
                Duration::from_secs(30),
            )?,
            hard_stop,
        });
        // Stop after this many commits: a hard stop at a random one.
        let commits = if hard_stop { 1 + next(6) } else { 3 } as usize;
        let started = Instant::now();
        let mut config = config.clone();
        config.run = i as u32;
        let mut child = launch(&config)?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Other("no stdout".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = 0;
        while seen < commits {
            match lines.next() {
                Some(Ok(line)) if line.starts_with("committed ") => seen += 1,
                Some(Ok(line)) if line.starts_with("commit_failed ") => {
                    eprintln!("run {i}: worker: {line}");
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => {
                    let status = child.wait()?;
                    return Err(Error::Other(format!(
                        "run {i}: the worker exited ({status}) after {seen} commits"
                    )));
                }
            }
        }
        report.commits += seen;
        if hard_stop {
            child.kill()?; // SIGKILL
            child.wait()?;
            report.hard += 1;
        } else {
            if let Some(mut stdin) = child.stdin.take() {
                writeln!(stdin, "stop")?;
            }
            let mut final_commit = None;
            for line in lines {
                let line = line?;
                if line.starts_with("committed ") {
                    report.commits += 1;
                }
                if let Some(outcome) = line.strip_prefix("final_commit ") {
                    final_commit = Some(outcome.to_string());
                }
            }
            let status = child.wait()?;
            if !status.success() || final_commit.as_deref() != Some("ok") {
                report.failed_final_commits += 1;
                eprintln!("run {i}: clean stop: {status}, final commit {final_commit:?}");
            }
            report.clean += 1;
        }
        report.worker_time += started.elapsed();
    }
    let committed = offsets::read(
        &config.brokers,
        &config.offsets_topic,
        &config.name,
        Duration::from_secs(30),
    )?;
    verify(config, &runs, &committed, &mut report)?;
    Ok(report)
}

/// Reads the data topic and fills in records, duplicates and missing.
fn verify(
    config: &Config,
    runs: &[Run],
    committed: &Offsets,
    report: &mut Report,
) -> Result<(), Error> {
    let records = kafka::read_topic(
        &config.brokers,
        &config.data_topic,
        config.partitions as i32,
        Duration::from_secs(120),
    )?;
    // Per source partition and sequence number: the runs that produced it.
    let mut producers: HashMap<u32, Vec<Vec<u32>>> = HashMap::new();
    for record in &records {
        let text = record.payload.as_deref().map(String::from_utf8_lossy);
        let parsed = text.as_deref().and_then(|t| {
            let mut fields = t.split(' ');
            let p = fields.next()?.parse::<u32>().ok()?;
            let seq = fields.next()?.parse::<u64>().ok()?;
            let run = fields.next()?.parse::<u32>().ok()?;
            Some((p, seq, run)).filter(|_| fields.next().is_none())
        });
        let Some((p, seq, run)) = parsed
            .filter(|&(p, _, run)| p as i32 == record.partition && (run as usize) < runs.len())
        else {
            report.malformed += 1;
            continue;
        };
        report.records += 1;
        let seqs = producers.entry(p).or_default();
        if seqs.len() <= seq as usize {
            seqs.resize(seq as usize + 1, Vec::new());
        }
        seqs[seq as usize].push(run);
    }
    // Every committed record must be there too.
    for (&p, &c) in committed {
        let seqs = producers.entry(p).or_default();
        if seqs.len() <= c as usize {
            seqs.resize(c as usize + 1, Vec::new());
        }
    }
    for (&p, seqs) in &producers {
        for (seq, by) in (0_u64..).zip(seqs) {
            let mut by = by.clone();
            by.sort_unstable();
            if by.is_empty() {
                report.missing += 1;
            }
            for pair in by.windows(2) {
                let (earlier, later) = (pair[0] as usize, pair[1] as usize);
                if earlier == later {
                    report.retry_duplicates += 1;
                } else if !runs[earlier].hard_stop {
                    // The earlier run's final commit covered it, or its
                    // stop failed (counted on its own).
                    report.clean_duplicates += 1;
                } else {
                    report.hard_duplicates += 1;
                    if runs[later].committed.get(&p).is_some_and(|&c| seq <= c) {
                        report.misplaced_duplicates += 1;
                    }
                }
            }
        }
    }
    Ok(())
}
