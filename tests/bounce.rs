//! A shorter run of the clean-bounce system test (`examples/bounce`): worker
//! processes (this test binary, re-run as a child) are bounced cleanly and
//! hard, then the sink is checked: no sequence number missing, no duplicate
//! caused by a clean bounce.

#[path = "../examples/bounce/harness.rs"]
mod harness;

use harness::{Design, Launcher};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WORKER_ENV: &str = "INFLIGHT_BOUNCE_WORKER";

/// Starts this test binary as a worker: it runs only `worker_process`.
struct TestLauncher;

impl Launcher for TestLauncher {
    fn launch(&self, dir: &Path, design: Design) -> std::io::Result<Child> {
        Command::new(std::env::current_exe()?)
            .args(["--exact", "worker_process", "--ignored", "--nocapture"])
            .env(WORKER_ENV, format!("{}\n{}", design.name(), dir.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
    }
}

/// The worker's entry point when this binary runs as a child process.
#[test]
#[ignore = "entry point of the worker processes that clean_and_hard_bounces_lose_nothing starts"]
fn worker_process() {
    let spec = std::env::var(WORKER_ENV).expect("run by the bounce test only");
    let (design, dir) = spec.split_once('\n').expect("design and directory");
    let design = Design::parse(design).expect("known design");
    if let Err(e) = harness::worker(Path::new(dir), design) {
        eprintln!("worker: I/O error: {e}");
        std::process::exit(1);
    }
}

#[test]
fn clean_and_hard_bounces_lose_nothing() {
    let dir = std::env::temp_dir().join(format!("inflight-bounce-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let report = harness::drive(
        &TestLauncher,
        &dir,
        Design::Inflight,
        5,
        2,
        Duration::from_millis(200),
        0x5eed,
    )
    .expect("the bounce run");
    println!("{}", report.line());
    assert_eq!((report.clean, report.hard), (5, 2));
    assert!(report.records > 0, "the workers produced nothing");
    assert_eq!(report.unknown_acks, 0, "an ack found no record");
    assert_eq!(
        report.failed_final_commits, 0,
        "a clean stop did not commit"
    );
    assert_eq!(report.missing, 0, "sequence numbers missing");
    assert_eq!(report.clean_duplicates, 0, "duplicates after clean bounces");
    assert_eq!(
        report.misplaced_duplicates, 0,
        "duplicates below a committed offset"
    );
    std::fs::remove_dir_all(&dir).expect("remove the test directory");
}
