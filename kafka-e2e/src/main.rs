//! `kafka-e2e`: the worker, the bounce driver, the throughput run and the
//! readiness wait that `kafka-e2e/run` calls.
//!
//! ```text
//! kafka-e2e wait-ready --brokers 127.0.0.1:19092 [--within-secs 60]
//! kafka-e2e bounce     --brokers 127.0.0.1:19092 [--clean 5] [--hard 2] [--rate 20000]
//! kafka-e2e throughput --brokers 127.0.0.1:19092 [--records 200000]
//! kafka-e2e worker     --brokers … --prefix … --name … [--rate …]   (started by bounce)
//! ```

use kafka_e2e::worker::{Config, Event, Worker};
use kafka_e2e::{bounce, kafka, Error};
use std::collections::HashMap;
use std::io::BufRead;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const USAGE: &str =
    "usage: kafka-e2e (wait-ready|bounce|throughput|worker) --brokers HOST:PORT [options]";

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
