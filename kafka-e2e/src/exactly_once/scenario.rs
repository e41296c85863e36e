//! `kafka-e2e exactly-once`: the whole scenario, from the topics to the
//! last line.

use super::driver::{Driver, Launch, Schedule};
use super::verify::verify;
use super::worker::{Api, Commit, Phases, TxnConfig};
use crate::group::verify::Filler;
use crate::group::Rng;
use crate::kafka::{self, client_config};
use crate::Error;
use rdkafka::producer::{BaseProducer, Producer};
use std::time::{Duration, Instant};

/// The scenario's size.
#[derive(Debug, Clone)]
pub struct Plan {
    pub brokers: String,
    pub partitions: i32,
    pub tasks: i32,
    /// Records in the source, in all.
    pub records: u64,
    pub schedule: Schedule,
    pub txn_interval: Duration,
    pub max_per_txn: usize,
    pub api: Api,
}

/// Initialises every transactional id once more: whatever a killed
/// worker left open is aborted (this broker has no transaction timeout).
fn init_again(brokers: &str, group: &str, tasks: i32, within: Duration) -> Result<(), Error> {
    for task in 0..tasks {
        let id = TxnConfig::transactional_id(group, task);
        // `ExactlyOnce` uses the id itself (`overlapping` is off here).
        let producer: BaseProducer = client_config(brokers)
            .set("transactional.id", &id)
            .create()
            .map_err(|e| Error::kafka("creating a producer", e))?;
        producer
            .init_transactions(within)
            .map_err(|e| Error::kafka(format!("init_transactions of {id}"), e))?;
    }
    Ok(())
}

/// Runs the scenario; `Ok(true)` if it passed. Its last line:
/// `exactly-once: K kills, Z zombies, N records, D duplicates, M missing
/// (A aborted copies in the raw log)`.
pub fn run(plan: &Plan, launch: &Launch<'_>) -> Result<bool, Error> {
    let started = Instant::now();
    let prefix = format!(
        "kafka-e2e-eo-{}-{}",
        std::process::id(),
        plan.schedule.seed % 1_000_000
    );
    let (source, sink, group) = (
        format!("{prefix}-source"),
        format!("{prefix}-sink"),
        format!("{prefix}-group"),
    );
    kafka::create_topics(
        &plan.brokers,
        &[
            (&source, plan.partitions, &[]),
            (&sink, plan.partitions, &[]),
        ],
    )?;
    let counts = Filler::start(
        &plan.brokers,
        &source,
        plan.partitions,
        0,
        Some(plan.records),
    )?
    .join()?;
    let ends: Vec<i64> = counts.iter().map(|&n| n as i64).collect();
    let actions = plan.schedule.actions();
    println!(
        "exactly-once scenario: {} tasks over {} partitions ({} records in {source}), transactions of at most {:?} or {} records; {} actions, seed {}",
        plan.tasks,
        plan.partitions,
        plan.records,
        plan.txn_interval,
        plan.max_per_txn,
        actions.len(),
        plan.schedule.seed
    );
    let config = TxnConfig {
        brokers: plan.brokers.clone(),
        source: source.clone(),
        sink: sink.clone(),
        group: group.clone(),
        task: 0,
        tasks: plan.tasks,
        ends: ends.clone(),
        txn_interval: plan.txn_interval,
        max_per_txn: plan.max_per_txn,
        phases: Phases::Gate,
        api: plan.api,
        commit: Commit::AfterWait,
        call_timeout: Duration::from_secs(5),
    };
    let mut driver = Driver::new(config, launch, Duration::from_secs(300));
    for task in 0..plan.tasks {
        driver.start(task)?;
    }
    let mut rng = Rng::new(plan.schedule.seed ^ 0x5eed);
    for action in actions {
        let open = driver.open_tasks();
        let Some(&task) = open.get(rng.below(open.len() as u64) as usize) else {
            break; // every task done: the schedule falls short (checked below)
        };
        let skip = 1 + rng.below(6);
        driver.act(action, task, skip)?;
    }
    let schedule_took = started.elapsed();
    driver.finish()?;
    let tally = std::mem::take(&mut driver.tally);
    drop(driver);
    init_again(&plan.brokers, &group, plan.tasks, Duration::from_secs(10))?;
    let verdict = verify(
        &plan.brokers,
        &source,
        &sink,
        &group,
        &ends,
        Duration::from_secs(60),
    )?;
    let points: Vec<String> = plan
        .api
        .points()
        .iter()
        .map(|p| format!("{} at {p}", tally.by_point.get(p).copied().unwrap_or(0)))
        .collect();
    println!(
        "kills: {}, {} at random; {} zombies fenced; {} transactions committed, {} rewinds, {} workers restarted after an error; schedule {schedule_took:.1?}, in all {:.1?}",
        points.join(", "),
        tally.random_kills,
        tally.zombies,
        tally.transactions,
        tally.rewinds,
        tally.restarts,
        started.elapsed()
    );
    println!(
        "raw log of {sink}: {} COMMIT and {} ABORT markers, {} aborted data records; read_committed (applied by the verifier) keeps {}",
        verdict.commits, verdict.aborts, verdict.aborted, verdict.records
    );
    let mut failures = verdict.problems.clone();
    if tally.zombie_commits > 0 {
        failures.push(format!("{} zombie commits", tally.zombie_commits));
    }
    if verdict.duplicates > 0 || verdict.missing > 0 {
        failures.push(format!(
            "{} duplicates, {} missing",
            verdict.duplicates, verdict.missing
        ));
    }
    if tally.kills < 20 || tally.zombies < 2 {
        failures.push(format!(
            "the schedule fell short: {} kills (20 wanted), {} zombies (2 wanted)",
            tally.kills, tally.zombies
        ));
    }
    if verdict.aborted == 0 {
        failures
            .push("no aborted copy in the raw log: no kill landed in an open transaction".into());
    }
    for failure in &failures {
        println!("FAILED: {failure}");
    }
    println!(
        "exactly-once: {} kills, {} zombies, {} records, {} duplicates, {} missing ({} aborted copies in the raw log)",
        tally.kills, tally.zombies, verdict.records, verdict.duplicates, verdict.missing, verdict.aborted
    );
    Ok(failures.is_empty())
}
