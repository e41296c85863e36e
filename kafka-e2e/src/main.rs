//! `kafka-e2e`: the worker, the bounce driver, the throughput run and the
//! readiness wait that `kafka-e2e/run` calls.
//!
//! ```text
//! kafka-e2e wait-ready --brokers 127.0.0.1:19092 [--within-secs 60]
//! kafka-e2e bounce     --brokers 127.0.0.1:19092 [--clean 5] [--hard 2] [--rate 20000]
//! kafka-e2e throughput --brokers 127.0.0.1:19092 [--records 200000]
//! kafka-e2e worker     --brokers … --prefix … --name … [--rate …]   (started by bounce)
//! kafka-e2e consumer-group      --brokers 127.0.0.1:19092 [--stops 4] [--kills 2] [--rate 3000] [--seed …]
//! kafka-e2e pipeline-throughput --brokers 127.0.0.1:19092 [--records 300000] [--runs 3]
//! kafka-e2e group-worker        --brokers … --prefix … --name … --metadata on|off   (started by consumer-group)
//! kafka-e2e exactly-once        --brokers 127.0.0.1:19092 [--records 40000] [--per-point 3] [--random 10] [--zombies 2] [--txn-ms 20] [--api direct|crate] [--seed …]
//! kafka-e2e exactly-once-throughput --brokers 127.0.0.1:19092 [--records 500000] [--intervals 10,100,1000] [--runs 1] [--api direct|crate] [--commit after-wait|after-drain|without-wait]
//! kafka-e2e exactly-once-worker --brokers … --source … --sink … --group … --task K --tasks T --ends E0,E1,…   (started by exactly-once)
//! ```

use kafka_e2e::exactly_once::driver::Schedule;
use kafka_e2e::exactly_once::worker::{self as txn_worker, Api, Commit, Phases, TxnConfig};
use kafka_e2e::exactly_once::{scenario, throughput as txn_throughput, worker::Ended};
use kafka_e2e::group::driver::{self, ModeReport, Plan};
use kafka_e2e::group::verify::Filler;
use kafka_e2e::group::worker::{self as group_worker, WorkerConfig, WorkerEvent};
use kafka_e2e::worker::{Config, Event, Worker};
use kafka_e2e::{bounce, kafka, Error};
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const USAGE: &str = "usage: kafka-e2e (wait-ready|bounce|throughput|worker|consumer-group|pipeline-throughput|group-worker|exactly-once|exactly-once-worker|exactly-once-throughput) --brokers HOST:PORT [options]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let mut options = HashMap::new();
    let mut pairs = rest.chunks(2);
    for pair in &mut pairs {
        match pair {
            [key, value] if key.starts_with("--") => {
                options.insert(key[2..].to_string(), value.clone());
            }
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let result = match command.as_str() {
        "wait-ready" => wait_ready(&options),
        "bounce" => run_bounce(&options),
        "throughput" => throughput(&options),
        "worker" => worker(&options),
        "consumer-group" => consumer_group(&options),
        "pipeline-throughput" => pipeline_throughput(&options),
        "group-worker" => group_worker_process(&options),
        "exactly-once" => exactly_once(&options),
        "exactly-once-worker" => exactly_once_worker(&options),
        "exactly-once-throughput" => exactly_once_throughput(&options),
        _ => Err(Error::Other(USAGE.into())),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kafka-e2e {command}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn option<T: std::str::FromStr>(
    options: &HashMap<String, String>,
    name: &str,
    default: Option<T>,
) -> Result<T, Error> {
    match options.get(name) {
        Some(value) => value
            .parse()
            .map_err(|_| Error::Other(format!("--{name} {value}: not a valid value"))),
        None => default.ok_or_else(|| Error::Other(format!("--{name} is required; {USAGE}"))),
    }
}

fn seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

fn wait_ready(options: &HashMap<String, String>) -> Result<bool, Error> {
    let brokers: String = option(options, "brokers", None)?;
    let within = Duration::from_secs(option(options, "within-secs", Some(60))?);
    let took = kafka::wait_ready(&brokers, within)?;
    println!("broker at {brokers} ready after {took:.1?}");
    Ok(true)
}

fn run_bounce(options: &HashMap<String, String>) -> Result<bool, Error> {
    let brokers: String = option(options, "brokers", None)?;
    let clean = option(options, "clean", Some(5))?;
    let hard = option(options, "hard", Some(2))?;
    let rate: u64 = option(options, "rate", Some(20_000))?;
    let seed = option(options, "seed", Some(seed()))?;
    let prefix = format!(
        "kafka-e2e-bounce-{}-{}",
        std::process::id(),
        seed % 1_000_000
    );
    let mut config = Config::new(&brokers, &prefix, "bounce");
    config.records_per_sec = rate;
    println!(
        "bouncing {} workers ({clean} clean, {hard} hard stops) against {brokers}, topics {prefix}-*, seed {seed}",
        clean + hard
    );
    let exe = std::env::current_exe()?;
    let launch = |config: &Config| {
        Command::new(&exe)
            .arg("worker")
            .args(["--brokers", &config.brokers])
            .args(["--data-topic", &config.data_topic])
            .args(["--offsets-topic", &config.offsets_topic])
            .args(["--name", &config.name])
            .args(["--rate", &config.records_per_sec.to_string()])
            .args(["--run", &config.run.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
    };
    let started = Instant::now();
    let report = bounce::drive(&config, clean, hard, seed, &launch)?;
    let seconds = report.worker_time.as_secs_f64();
    println!(
        "{} commits in {:.1?} of worker lifetime (start-up included), {:.0} records/s produced and verified (source paced at {rate}/s); whole scenario {:.1?}",
        report.commits,
        report.worker_time,
        report.records as f64 / seconds.max(f64::MIN_POSITIVE),
        started.elapsed()
    );
    println!(
        "duplicates after hard bounces (allowed: past the last commit): {}",
        report.hard_duplicates
    );
    if report.misplaced_duplicates > 0 {
        println!(
            "duplicates at or before a committed offset: {}",
            report.misplaced_duplicates
        );
    }
    if report.retry_duplicates > 0 {
        println!(
            "records written twice by one run (producer retries): {}",
            report.retry_duplicates
        );
    }
    if report.malformed > 0 {
        println!("malformed records: {}", report.malformed);
    }
    if report.failed_final_commits > 0 {
        println!(
            "clean stops whose final commit failed: {}",
            report.failed_final_commits
        );
    }
    let passed = report.passed();
    if !passed {
        println!("FAILED");
    }
    println!("{}", report.line());
    Ok(passed)
}

fn throughput(options: &HashMap<String, String>) -> Result<bool, Error> {
    let brokers: String = option(options, "brokers", None)?;
    let records: u64 = option(options, "records", Some(200_000))?;
    let prefix = format!(
        "kafka-e2e-throughput-{}-{}",
        std::process::id(),
        seed() % 1_000_000
    );
    let mut config = Config::new(&brokers, &prefix, "throughput");
    config.records_per_sec = 0;
    config.limit = Some(records);
    config.create_topics()?;
    let (worker, events) = Worker::start(config)?;
    let started = Instant::now();
    // The source stops by itself after `records`; wait for it to have sent
    // them all and for them to be acked, through the commits it reports.
    let mut commits = 0;
    let mut failure = None;
    for event in &events {
        match event {
            Event::Committed(offsets) => {
                commits += 1;
                let done: u64 = offsets.values().map(|&seq| seq + 1).sum();
                if done >= records {
                    break;
                }
            }
            Event::DeliveryFailed(e) => {
                failure = Some(e);
                break;
            }
            Event::Started(_) | Event::CommitFailed(_) => {}
        }
    }
    let stop = worker.stop();
    let took = started.elapsed();
    if let Some(e) = failure {
        return Err(Error::Delivery(e));
    }
    let final_commit = stop
        .final_commit
        .map_err(|e| Error::Other(format!("final commit: {e}")))?;
    let committed: u64 = final_commit.values().map(|&seq| seq + 1).sum();
    println!(
        "throughput: {} records sent, {} acked by delivery callbacks, {committed} committed in {commits} commits (flush, offsets written, commit), in {:.2?}: {:.0} records/s",
        stop.sent,
        stop.acked,
        took,
        committed as f64 / took.as_secs_f64()
    );
    Ok(committed == records && stop.acked == records)
}

/// A worker process of the bounce scenario: runs until a line (or the end)
/// on stdin, reporting on stdout.
fn worker(options: &HashMap<String, String>) -> Result<bool, Error> {
    let brokers: String = option(options, "brokers", None)?;
    let mut config = Config::new(
        &brokers,
        "unused",
        &option::<String>(options, "name", None)?,
    );
    config.data_topic = option(options, "data-topic", None)?;
    config.offsets_topic = option(options, "offsets-topic", None)?;
    config.records_per_sec = option(options, "rate", Some(config.records_per_sec))?;
    config.run = option(options, "run", Some(0))?;
    let (worker, events) = Worker::start(config)?;
    let printer = std::thread::spawn(move || {
        let mut commits = 0;
        let mut failures = 0;
        for event in events {
            match event {
                Event::Started(offsets) => println!("started {offsets:?}"),
                Event::Committed(_) => {
                    commits += 1;
                    println!("committed {commits}");
                }
                Event::CommitFailed(e) => println!("commit_failed {e}"),
                Event::DeliveryFailed(e) => {
                    failures += 1;
                    println!("delivery_failed {e}");
                }
            }
        }
        failures
    });
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let stop = worker.stop();
    let failures = printer.join().unwrap_or(1);
    println!(
        "sent {} acked {} failed {}",
        stop.sent, stop.acked, stop.failed
    );
    match &stop.final_commit {
        Ok(_) => println!("final_commit ok"),
        Err(e) => println!("final_commit failed: {e}"),
    }
    Ok(stop.final_commit.is_ok() && failures == 0)
}

/// Runs the consumer-group schedule with progress metadata and without,
/// and prints the `consumer-group:` line last.
fn consumer_group(options: &HashMap<String, String>) -> Result<bool, Error> {
    let brokers: String = option(options, "brokers", None)?;
    let plan = Plan {
        partitions: option(options, "partitions", Some(8))?,
        workers: option(options, "workers", Some(3))?,
        stops: option(options, "stops", Some(4))?,
        kills: option(options, "kills", Some(2))?,
        seed: option(options, "seed", Some(seed()))?,
        rate: option(options, "rate", Some(3_000))?,
    };
    let exe = std::env::current_exe()?;
    let launch = |config: &WorkerConfig| {
        Command::new(&exe)
            .arg("group-worker")
            .args(["--brokers", &config.brokers])
            .args(["--source", &config.source])
            .args(["--sink", &config.sink])
            .args(["--ledger", &config.ledger])
            .args(["--store", &config.store])
            .args(["--group", &config.group])
            .args(["--name", &config.name])
            .args(["--metadata", if config.metadata { "on" } else { "off" }])
            .args(["--seed", &config.seed.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
    };
    println!(
        "consumer group of {} workers on {} partitions against {brokers}: {} clean stops, {} kills, source at {}/s, seed {}",
        plan.workers, plan.partitions, plan.stops, plan.kills, plan.rate, plan.seed
    );
    let started = Instant::now();
    let mut reports: Vec<ModeReport> = Vec::new();
    for metadata in [true, false] {
        let prefix = format!(
            "kafka-e2e-group-{}-{}-{}",
            std::process::id(),
            plan.seed % 1_000_000,
            if metadata { "meta" } else { "plain" }
        );
        println!(
            "\n{} progress metadata (topics {prefix}-*):",
            if metadata { "with" } else { "without" }
        );
        let report = driver::run(&brokers, &prefix, metadata, &plan, &launch)?;
        let s = &report.sink;
        println!(
            "  {}: {} rebalances, {} clean stops, {} kills, {} source records, {} sink records, {} duplicates after clean stops and rebalances, {} after kills, {} missing, {} malformed; {} partitions taken without a release, {} worker errors, {} failed stops, {} stored ends wrong; {:.1?}",
            if metadata { "metadata" } else { "plain" },
            report.rebalances,
            report.clean_stops,
            report.kills,
            report.records,
            s.records,
            s.clean_duplicates,
            s.kill_duplicates,
            s.missing,
            s.malformed,
            report.gave_up,
            report.errors,
            report.bad_stops,
            report.store_mismatches,
            report.took
        );
        for example in &s.examples {
            println!("  {example}");
        }
        reports.push(report);
    }
    let (with, without) = (&reports[0], &reports[1]);
    let clean: usize = reports.iter().map(|r| r.sink.clean_duplicates).sum();
    let missing: usize = reports.iter().map(|r| r.sink.missing).sum();
    let mut failures = Vec::new();
    for r in &reports {
        let mode = if r.metadata {
            "with metadata"
        } else {
            "without metadata"
        };
        if r.rebalances < 6 || r.clean_stops < 4 || r.kills < 2 {
            failures.push(format!("{mode}: the schedule fell short"));
        }
        if r.sink.malformed > 0 || r.bad_stops > 0 || r.store_mismatches > 0 {
            failures.push(format!(
                "{mode}: malformed records, failed stops or wrong stored ends"
            ));
        }
    }
    if clean > 0 {
        failures.push(format!(
            "{clean} duplicates after clean stops and rebalances"
        ));
    }
    if missing > 0 {
        failures.push(format!("{missing} records missing"));
    }
    if with.sink.kill_duplicates >= without.sink.kill_duplicates {
        failures.push("duplicates after kills not lower with progress metadata".into());
    }
    println!(
        "\nduplicates after kills: {} with progress metadata, {} without (plain watermark commits); both schedules in {:.1?}",
        with.sink.kill_duplicates,
        without.sink.kill_duplicates,
        started.elapsed()
    );
    for failure in &failures {
        println!("FAILED: {failure}");
    }
    println!(
        "consumer-group: {} rebalances, {} clean stops, {} kills, {} records, {clean} duplicates after clean stops and rebalances, {} duplicates after kills ({} without progress metadata), {missing} missing",
        with.rebalances,
        with.clean_stops,
        with.kills,
        with.records,
        with.sink.kill_duplicates,
        without.sink.kill_duplicates
    );
    Ok(failures.is_empty())
}

/// A worker process of the consumer-group schedule: runs until a line (or
/// the end) on stdin, reporting its events on stdout.
fn group_worker_process(options: &HashMap<String, String>) -> Result<bool, Error> {
    let brokers: String = option(options, "brokers", None)?;
    let name: String = option(options, "name", None)?;
    let metadata = match option::<String>(options, "metadata", Some("on".into()))?.as_str() {
        "on" => true,
        "off" => false,
        other => return Err(Error::Other(format!("--metadata {other}: on or off"))),
    };
    let mut config = WorkerConfig::new(&brokers, "unused", &name, metadata);
    config.source = option(options, "source", None)?;
    config.sink = option(options, "sink", None)?;
    config.ledger = option(options, "ledger", None)?;
    config.store = option(options, "store", None)?;
    config.group = option(options, "group", None)?;
    config.seed = option(options, "seed", Some(1))?;
    config.threads = option(options, "threads", Some(config.threads))?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
            stop.store(true, Ordering::Release);
        });
    }
    let report = group_worker::run(config, &stop, Arc::new(|event| println!("{event}")))?;
    let ok = report.failed == 0 && report.delivered == report.consumed;
    println!(
        "stopped {} consumed {} skipped {} refetched {} delivered {} failed {} errors {}",
        if ok { "ok" } else { "failed" },
        report.consumed,
        report.skipped,
        report.refetched,
        report.delivered,
        report.failed,
        report.errors
    );
    Ok(ok)
}

/// Records per second through one worker, end to end (consume, produce to
/// the sink, ack on delivery, progress saved in the store and committed to
/// the group every 100 ms), with the tracker's progress and with plain
/// watermarks.
fn pipeline_throughput(options: &HashMap<String, String>) -> Result<bool, Error> {
    let brokers: String = option(options, "brokers", None)?;
    let records: u64 = option(options, "records", Some(300_000))?;
    let runs: usize = option(options, "runs", Some(3))?;
    let partitions: i32 = option(options, "partitions", Some(8))?;
    let threads: usize = option(options, "threads", Some(4))?;
    let mut medians = Vec::new();
    for metadata in [true, false] {
        let mut rates = Vec::new();
        for run in 0..runs {
            let prefix = format!(
                "kafka-e2e-pipeline-{}-{}-{run}-{}",
                std::process::id(),
                seed() % 1_000_000,
                if metadata { "meta" } else { "plain" }
            );
            let mut config = WorkerConfig::new(&brokers, &prefix, "pipeline", metadata);
            config.threads = threads;
            config.slow_per_mille = 0;
            config.fast_max = Duration::ZERO;
            // No group membership (see `static_partitions`).
            config.static_partitions = Some(partitions);
            kafka::create_topics(
                &brokers,
                &[
                    (&config.source, partitions, &[]),
                    (&config.sink, partitions, &[]),
                    (&config.ledger, 1, &[]),
                    (&config.store, 1, &[("cleanup.policy", "compact")]),
                ],
            )?;
            Filler::start(&brokers, &config.source, partitions, 0, Some(records))?.join()?;
            let (tx, rx) = mpsc::channel();
            let tx = Mutex::new(tx);
            let events: group_worker::Events = Arc::new(move |event| {
                let _ = tx.lock().map(|tx| tx.send(event));
            });
            let stop = Arc::new(AtomicBool::new(false));
            let worker = {
                let stop = stop.clone();
                std::thread::spawn(move || group_worker::run(config, &stop, events))
            };
            let mut assigned = None;
            let mut next: BTreeMap<i32, u64> = BTreeMap::new();
            let mut commits = 0;
            let deadline = Instant::now() + Duration::from_secs(120);
            while next.values().sum::<u64>() < records {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(WorkerEvent::Assigned(partitions)) => {
                        if assigned.is_some() {
                            eprintln!("pipeline worker: assigned again: {partitions:?}");
                        }
                        assigned.get_or_insert_with(Instant::now);
                    }
                    Ok(WorkerEvent::Committed { next: n, .. }) => {
                        commits += 1;
                        next.extend(n);
                    }
                    Ok(event) => eprintln!("pipeline worker: {event}"),
                    Err(_) => {
                        stop.store(true, Ordering::Release);
                        let _ = worker.join();
                        return Err(Error::Other(format!(
                            "pipeline: {} of {records} records committed after 120s",
                            next.values().sum::<u64>()
                        )));
                    }
                }
            }
            let took = assigned.map_or(Duration::ZERO, |at| at.elapsed());
            stop.store(true, Ordering::Release);
            let report = worker
                .join()
                .map_err(|_| Error::Other("the pipeline worker panicked".into()))??;
            let rate = records as f64 / took.as_secs_f64();
            println!(
                "pipeline {} run {}: {records} records consumed, produced to the sink, acked on delivery and committed ({commits} commits) in {took:.2?} from assignment: {rate:.0} records/s ({} delivered)",
                if metadata { "with progress" } else { "watermarks only" },
                run + 1,
                report.delivered
            );
            if report.delivered != records || report.failed > 0 {
                return Err(Error::Other(format!(
                    "pipeline: {} delivered, {} failed of {records}",
                    report.delivered, report.failed
                )));
            }
            rates.push(rate);
        }
        rates.sort_by(f64::total_cmp);
        medians.push(rates[rates.len() / 2]);
    }
    println!(
        "pipeline-throughput: {records} records, one worker, {threads} processing threads, median of {runs}: {:.0} records/s with the tracker's progress, {:.0} records/s with watermarks only",
        medians[0], medians[1]
    );
    Ok(true)
}

/// The kill test of issue 42: transactional workers killed and fenced,
/// then the raw log judged. Prints the `exactly-once:` line last.
fn exactly_once(options: &HashMap<String, String>) -> Result<bool, Error> {
    let api = api_option(options)?;
    let plan = scenario::Plan {
        brokers: option(options, "brokers", None)?,
        partitions: option(options, "partitions", Some(4))?,
        tasks: option(options, "tasks", Some(2))?,
        records: option(options, "records", Some(40_000))?,
        schedule: Schedule {
            points: api.points(),
            // At least 12 chosen kills whatever the API's points.
            per_point: option(options, "per-point", Some(12 / api.points().len()))?,
            random: option(options, "random", Some(10))?,
            zombies: option(options, "zombies", Some(2))?,
            seed: option(options, "seed", Some(seed()))?,
        },
        txn_interval: Duration::from_millis(option(options, "txn-ms", Some(20))?),
        max_per_txn: option(options, "max-per-txn", Some(50))?,
        api,
    };
    let exe = std::env::current_exe()?;
    let launch = |config: &TxnConfig| {
        let ends: Vec<String> = config.ends.iter().map(i64::to_string).collect();
        Command::new(&exe)
            .arg("exactly-once-worker")
            .args(["--brokers", &config.brokers])
            .args(["--source", &config.source])
            .args(["--sink", &config.sink])
            .args(["--group", &config.group])
            .args(["--task", &config.task.to_string()])
            .args(["--tasks", &config.tasks.to_string()])
            .args(["--ends", &ends.join(",")])
            .args(["--txn-ms", &config.txn_interval.as_millis().to_string()])
            .args(["--max-per-txn", &config.max_per_txn.to_string()])
            .args([
                "--api",
                match config.api {
                    Api::Direct => "direct",
                    Api::Crate => "crate",
                },
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
    };
    scenario::run(&plan, &launch)
}

/// A worker process of the exactly-once scenario (see
/// `kafka_e2e::exactly_once::worker`).
fn exactly_once_worker(options: &HashMap<String, String>) -> Result<bool, Error> {
    let ends: String = option(options, "ends", None)?;
    let ends = ends
        .split(',')
        .map(|e| e.parse::<i64>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| Error::Other(format!("--ends {ends}: offsets separated by commas")))?;
    let config = TxnConfig {
        brokers: option(options, "brokers", None)?,
        source: option(options, "source", None)?,
        sink: option(options, "sink", None)?,
        group: option(options, "group", None)?,
        task: option(options, "task", None)?,
        tasks: option(options, "tasks", None)?,
        ends,
        txn_interval: Duration::from_millis(option(options, "txn-ms", Some(20))?),
        max_per_txn: option(options, "max-per-txn", Some(50))?,
        phases: Phases::Gate,
        call_timeout: Duration::from_secs(option(options, "call-timeout-secs", Some(5))?),
        api: api_option(options)?,
        commit: Commit::AfterWait,
    };
    match txn_worker::run(&config)? {
        Ended::Done { .. } | Ended::Closed => Ok(true),
    }
}

/// Records per second through the transactional pipeline at each
/// transaction interval (median of `--runs`).
fn exactly_once_throughput(options: &HashMap<String, String>) -> Result<bool, Error> {
    let brokers: String = option(options, "brokers", None)?;
    let records: u64 = option(options, "records", Some(500_000))?;
    let partitions: i32 = option(options, "partitions", Some(8))?;
    let runs: usize = option(options, "runs", Some(1))?;
    let intervals: String = option(options, "intervals", Some("10,100,1000".into()))?;
    let api = api_option(options)?;
    // `after-wait` (what every worker does); `after-drain`: also until
    // librdkafka counts nothing in flight; `without-wait`:
    // `commit_transaction` right after the seal, records still in flight.
    let commit = match option::<String>(options, "commit", Some("after-wait".into()))?.as_str() {
        "after-wait" => Commit::AfterWait,
        "after-drain" => Commit::AfterDrain,
        "without-wait" => Commit::WithoutWait,
        other => {
            return Err(Error::Other(format!(
                "--commit {other}: after-wait, after-drain or without-wait"
            )))
        }
    };
    if commit != Commit::AfterWait && api != Api::Direct {
        return Err(Error::Other(
            "--commit: the direct loop only (--api direct)".into(),
        ));
    }
    let mut summary = Vec::new();
    for interval in intervals.split(',') {
        let ms: u64 = interval
            .parse()
            .map_err(|_| Error::Other(format!("--intervals {intervals}: milliseconds")))?;
        let mut rates = Vec::new();
        for run in 0..runs {
            let prefix = format!(
                "kafka-e2e-eo-throughput-{}-{}-{ms}-{run}",
                std::process::id(),
                seed() % 1_000_000
            );
            let m = txn_throughput::measure(
                &brokers,
                &prefix,
                partitions,
                records,
                Duration::from_millis(ms),
                api,
                commit,
            )?;
            println!(
                "transactions of {ms} ms, run {}: {records} records consumed, produced and committed in {} transactions in {:.2?}: {:.0} records/s; per transaction, seal to committed {:.2?}, in the commit call {:.2?} ({} of the commit calls took {:?} or more)",
                run + 1,
                m.transactions,
                m.took,
                m.rate(),
                m.per_transaction(m.ending),
                m.per_transaction(m.committing),
                m.slow_commits,
                txn_worker::SLOW_COMMIT,
            );
            rates.push(m.rate());
        }
        rates.sort_by(f64::total_cmp);
        summary.push(format!(
            "{:.0} records/s at {ms} ms",
            rates[rates.len() / 2]
        ));
    }
    println!(
        "exactly-once-throughput: {records} records over {partitions} partitions, one worker, {}, median of {runs}: {}",
        match commit {
            Commit::AfterWait => "commit after wait",
            Commit::AfterDrain => "commit after wait and drain",
            Commit::WithoutWait => "commit without wait",
        },
        summary.join(", ")
    );
    Ok(true)
}

/// `--api direct` (the scenario's own transaction loop, the default) or
/// `--api crate` (`inflight_rdkafka::transaction::ExactlyOnce`).
fn api_option(options: &HashMap<String, String>) -> Result<Api, Error> {
    match option::<String>(options, "api", Some("direct".into()))?.as_str() {
        "direct" => Ok(Api::Direct),
        "crate" => Ok(Api::Crate),
        other => Err(Error::Other(format!("--api {other}: direct or crate"))),
    }
}
