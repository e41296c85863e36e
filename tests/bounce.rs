//! A shorter run of the clean-bounce system test (`examples/bounce`): worker
//! processes (this test binary, re-run as a child) are bounced cleanly and
//! hard, then the sink is checked: no sequence number missing, no duplicate
//! caused by a clean bounce. Its workers keep their offsets in
//! `store::FileStore` (the `serde` feature; the README's test command turns
//! every feature on).
#![cfg(feature = "serde")]

#[path = "../examples/bounce/harness.rs"]
mod harness;

use harness::{Design, Launcher};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WORKER_ENV: &str = "INFLIGHT_BOUNCE_WORKER";

/// Delays a worker's start (milliseconds), as a loaded machine does.
const DELAY_ENV: &str = "INFLIGHT_BOUNCE_START_DELAY_MS";

/// Starts this test binary as a worker: it runs only `worker_process`. The
/// `slow`-th launch (from 0), if any, starts `delay` late.
#[derive(Default)]
struct TestLauncher {
    slow: Option<(usize, Duration)>,
    launched: std::cell::Cell<usize>,
}

impl Launcher for TestLauncher {
    fn launch(&self, dir: &Path, design: Design) -> std::io::Result<Child> {
        let n = self.launched.replace(self.launched.get() + 1);
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args(["--exact", "worker_process", "--ignored", "--nocapture"])
            .env(WORKER_ENV, format!("{}\n{}", design.name(), dir.display()))
            .env_remove(DELAY_ENV)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some((_, delay)) = self.slow.filter(|&(slow, _)| slow == n) {
            command.env(DELAY_ENV, delay.as_millis().to_string());
        }
        command.spawn()
    }
}

/// The worker's entry point when this binary runs as a child process.
#[test]
#[ignore = "entry point of the worker processes that clean_and_hard_bounces_lose_nothing starts"]
fn worker_process() {
    let spec = std::env::var(WORKER_ENV).expect("run by the bounce test only");
    let (design, dir) = spec.split_once('\n').expect("design and directory");
    let design = Design::parse(design).expect("known design");
    if let Ok(ms) = std::env::var(DELAY_ENV) {
        std::thread::sleep(Duration::from_millis(ms.parse().expect("a delay")));
    }
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
        &TestLauncher::default(),
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
    assert_eq!(
        report.uncommitted_clean, 0,
        "records of a clean stop above the final commit"
    );
    std::fs::remove_dir_all(&dir).expect("remove the test directory");
}

/// Seed 0x5eed plans clean, clean, HARD, clean, clean, HARD, clean. The
/// worker after the first hard kill starts after its stop message (100 ms
/// in), so it produces (almost) nothing, and the killed run's records past
/// its last commit are produced again by the run after it: duplicates of a
/// hard bounce, not of the clean one before them (as under ASan on a loaded
/// machine, where workers are slow to start).
#[test]
fn slow_start_after_a_hard_bounce() {
    let dir = std::env::temp_dir().join(format!("inflight-bounce-slow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let launcher = TestLauncher {
        slow: Some((3, Duration::from_millis(250))),
        ..TestLauncher::default()
    };
    let report = harness::drive(
        &launcher,
        &dir,
        Design::Inflight,
        5,
        2,
        Duration::from_millis(200),
        0x5eed,
    )
    .expect("the bounce run");
    println!("{}", report.line());
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
    assert_eq!(
        report.uncommitted_clean, 0,
        "records of a clean stop above the final commit"
    );
    std::fs::remove_dir_all(&dir).expect("remove the test directory");
}
