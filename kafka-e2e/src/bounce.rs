//! The clean-bounce scenario against a broker.
//!
//! The driver starts worker processes one after the other and stops each
//! one cleanly (a stop line on its stdin: final flush, commit, exit) or
//! hard (SIGKILL), at a moment chosen by counting the commits the worker
//! reports on its stdout, never by sleeping. Before each start it notes the
//! data topic's high watermarks and the committed offsets. At the end it
//! reads the whole data topic back and checks, per source partition: no
//! sequence number missing (including any committed one), no duplicate in
//! a run that followed a clean stop, and after a hard stop duplicates only
//! past the offsets committed before it.

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
    /// Records that are not `<partition> <seq>` on the partition they name.
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

/// Where a run started: the data topic's end per partition, the committed
/// offsets, and whether the run before it ended hard.
struct RunStart {
    watermarks: Vec<i64>,
    committed: Offsets,
    after_hard: bool,
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

    let partitions = config.partitions as i32;
    let mut report = Report::default();
    let mut runs = Vec::new();
    let mut after_hard = false;
    for (i, &hard_stop) in plan.iter().enumerate() {
        runs.push(RunStart {
            watermarks: kafka::high_watermarks(&config.brokers, &config.data_topic, partitions)?,
            committed: offsets::read(
                &config.brokers,
                &config.offsets_topic,
                &config.name,
                Duration::from_secs(30),
            )?,
            after_hard,
        });
        // Stop after this many commits: a hard stop at a random one.
        let commits = if hard_stop { 1 + next(6) } else { 3 } as usize;
        let started = Instant::now();
        let mut child = launch(config)?;
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
        after_hard = hard_stop;
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
    runs: &[RunStart],
    committed: &Offsets,
    report: &mut Report,
) -> Result<(), Error> {
    let partitions = config.partitions as i32;
    let records = kafka::read_topic(
        &config.brokers,
        &config.data_topic,
        partitions,
        Duration::from_secs(120),
    )?;
    let mut seen: HashMap<u32, Vec<bool>> = HashMap::new();
    for record in &records {
        let text = record.payload.as_deref().map(String::from_utf8_lossy);
        let parsed = text.as_deref().and_then(|t| {
            let (p, seq) = t.split_once(' ')?;
            Some((p.parse::<u32>().ok()?, seq.parse::<u64>().ok()?))
        });
        let Some((p, seq)) = parsed.filter(|&(p, _)| p as i32 == record.partition) else {
            report.malformed += 1;
            continue;
        };
        report.records += 1;
        // The run that wrote it: the last one that started below its offset.
        let run = runs
            .iter()
            .rposition(|r| r.watermarks[record.partition as usize] <= record.offset)
            .unwrap_or(0);
        let flags = seen.entry(p).or_default();
        if flags.len() <= seq as usize {
            flags.resize(seq as usize + 1, false);
        }
        if std::mem::replace(&mut flags[seq as usize], true) {
            let start = &runs[run];
            if !start.after_hard {
                report.clean_duplicates += 1;
            } else {
                report.hard_duplicates += 1;
                if start.committed.get(&p).is_some_and(|&c| seq <= c) {
                    report.misplaced_duplicates += 1;
                }
            }
        }
    }
    // Every committed record must be there too.
    for (&p, &c) in committed {
        let flags = seen.entry(p).or_default();
        if flags.len() <= c as usize {
            flags.resize(c as usize + 1, false);
        }
    }
    report.missing = seen
        .values()
        .map(|flags| flags.iter().filter(|&&f| !f).count())
        .sum();
    Ok(())
}
