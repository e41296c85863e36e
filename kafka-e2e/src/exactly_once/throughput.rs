//! `kafka-e2e exactly-once-throughput`: the transactional pipeline's
//! records per second at a few transaction intervals (issue 42, item 6).
//!
//! One in-process worker ([`worker::run`], phases
//! quiet) owns every partition of a pre-filled source and runs
//! transactions of `interval` each (no record limit): consume → produce to
//! the sink → `begin_flush`, `wait` → offsets into the transaction →
//! `commit_transaction`. Timed from the call (the producer's
//! `init_transactions` and the offsets read-back included, tens of
//! milliseconds) to the last commit. `commit_transaction` is called only
//! after `wait`, so it has no records of its own to flush (which
//! rust-rdkafka does with 100 ms polls). `--commit` (`--api direct` only)
//! measures the alternatives, everything else the same:
//! [`Commit::WithoutWait`], the offsets in and `commit_transaction` right
//! after the seal; [`Commit::AfterDrain`], after `wait` also until
//! librdkafka counts nothing in flight (it still counts a delivered record
//! for a moment after its delivery callback, and then the commit's flush
//! polls 100 ms).

use super::worker::{self, Api, Commit, Ended, Phases, TxnConfig};
use crate::group::verify::Filler;
use crate::kafka;
use crate::Error;
use std::time::{Duration, Instant};

/// One measurement.
#[derive(Debug, Clone)]
pub struct Measured {
    pub interval: Duration,
    pub records: u64,
    pub took: Duration,
    pub transactions: u64,
    /// Summed over the transactions: from the seal to the commit's return.
    pub ending: Duration,
    /// Summed over the transactions: in the commit call.
    pub committing: Duration,
    /// The commit calls that took [`worker::SLOW_COMMIT`] or more.
    pub slow_commits: u64,
}

impl Measured {
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.took.as_secs_f64()
    }

    /// The mean of `total` over the transactions.
    pub fn per_transaction(&self, total: Duration) -> Duration {
        total.div_f64(self.transactions.max(1) as f64)
    }
}

/// Runs the pipeline once at `interval` over fresh topics.
pub fn measure(
    brokers: &str,
    prefix: &str,
    partitions: i32,
    records: u64,
    interval: Duration,
    api: Api,
    commit: Commit,
) -> Result<Measured, Error> {
    let (source, sink) = (format!("{prefix}-source"), format!("{prefix}-sink"));
    kafka::create_topics(
        brokers,
        &[(&source, partitions, &[]), (&sink, partitions, &[])],
    )?;
    let counts = Filler::start(brokers, &source, partitions, 0, Some(records))?.join()?;
    let config = TxnConfig {
        brokers: brokers.into(),
        source,
        sink,
        group: format!("{prefix}-group"),
        task: 0,
        tasks: 1,
        ends: counts.iter().map(|&n| n as i64).collect(),
        txn_interval: interval,
        max_per_txn: usize::MAX,
        phases: Phases::Quiet,
        api,
        commit,
        call_timeout: Duration::from_secs(30),
    };
    let started = Instant::now();
    match worker::run(&config)? {
        Ended::Done {
            transactions,
            rewinds: 0,
            ending,
            committing,
            slow_commits,
        } => Ok(Measured {
            interval,
            records,
            took: started.elapsed(),
            transactions,
            ending,
            committing,
            slow_commits,
        }),
        Ended::Done { rewinds, .. } => Err(Error::Other(format!(
            "exactly-once-throughput: {rewinds} rewinds in a run with no faults"
        ))),
        Ended::Closed => Err(Error::Other("exactly-once-throughput: closed".into())),
    }
}
