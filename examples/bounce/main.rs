//! The clean-bounce system test: bounce worker processes that produce a
//! verifiable source through a tracker, then check the sink.
//!
//! ```text
//! cargo run --release --example bounce                                # inflight
//! cargo run --release --example bounce -- --design kafka_2015_unfixed # the 2015 bug
//! ```
//!
//! Each run starts a worker as a child process (this same binary with
//! `--worker`), lets it produce for a moment, and stops it: cleanly (a stop
//! message: final flush, commit, exit) or hard (SIGKILL at a random moment).
//! After 10 clean and 3 hard bounces it reads the sink file and checks that
//! no sequence number is missing and that clean bounces caused no
//! duplicate. The last line is the summary scripts read. See `harness.rs`.

mod harness;

#[path = "../common/mod.rs"]
mod common;
use harness::{Design, Launcher};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

struct SelfLauncher;

impl Launcher for SelfLauncher {
    fn launch(&self, dir: &Path, design: Design) -> std::io::Result<Child> {
        Command::new(std::env::current_exe()?)
            .arg("--worker")
            .arg(dir)
            .arg(design.name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: bounce [--design inflight|kafka_2015_unfixed] [--clean N] [--hard N]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    common::exit_when_stdout_closes();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        let (Some(dir), Some(design)) = (args.get(1), args.get(2).and_then(|d| Design::parse(d)))
        else {
            return usage();
        };
        return match harness::worker(Path::new(dir), design) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("worker: I/O error: {e}");
                ExitCode::FAILURE
            }
        };
    }

    let mut design = Design::Inflight;
    let (mut clean, mut hard) = (10, 3);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let value = rest.next();
        match (arg.as_str(), value) {
            ("--design", Some(v)) => match Design::parse(v) {
                Some(d) => design = d,
                None => return usage(),
            },
            ("--clean", Some(v)) => match v.parse() {
                Ok(n) if n >= 1 => clean = n,
                _ => return usage(),
            },
            ("--hard", Some(v)) => match v.parse() {
                Ok(n) => hard = n,
                _ => return usage(),
            },
            _ => return usage(),
        }
    }

    let dir = std::env::temp_dir().join(format!("inflight-bounce-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "bouncing {} workers ({clean} clean, {hard} hard stops) with the {} tracker in {}",
        clean + hard,
        design.name(),
        dir.display()
    );
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let report = match harness::drive(
        &SelfLauncher,
        &dir,
        design,
        clean,
        hard,
        Duration::from_millis(300),
        seed,
    ) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("bounce: I/O error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "callbacks for records not in the outstanding set (Kafka's CRITICAL log): {}",
        report.unknown_acks
    );
    println!(
        "clean stops whose final commit failed: {} of {}",
        report.failed_final_commits, report.clean
    );
    if report.after_interrupt.is_zero() {
        println!("final flushes that needed interrupt(): none");
    } else {
        println!(
            "longest a final flush went on after interrupt(): {:?}",
            report.after_interrupt
        );
    }
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
    if report.uncommitted_clean > 0 {
        println!(
            "records of clean stops above the final commit: {}",
            report.uncommitted_clean
        );
    }
    let passed = report.passed();
    if passed {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("FAILED: files kept in {}", dir.display());
    }
    println!("{}", report.line());
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
