//! The kill schedule: transactional workers (one process per task, see
//! [`worker`](super::worker)) over a pre-filled source, SIGKILLed at
//! chosen points and at random, zombies fenced, a final run to the end,
//! every transactional id initialised again, then the raw-log verdict.
//!
//! Every worker stops at each phase until the driver answers (`go`), so a
//! chosen point is hit exactly, by counting lines: a kill *at* `sent`
//! lands mid-transaction (records sent, not all delivered), at `flushed`
//! before the offsets (every record delivered), at `offsets` after the
//! offsets and before the commit, at `committed` right after the commit.
//! A random kill answers `go` and kills at once: it lands wherever the
//! worker got to. A zombie is stopped (SIGSTOP) at `offsets`, its
//! successor (same transactional id) started and let commit twice, then
//! the zombie continued (SIGCONT) and told to commit: it must not.
//! While a successor starts, the other workers wait at their gates, so
//! that the schedule, not the machine's speed, decides how far they get.

#[cfg(doc)]
use super::worker::Api;
use super::worker::TxnConfig;
use crate::group::Rng;
use crate::Error;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

/// Where a chosen kill lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL at the gate after this phase.
    KillAt(&'static str),
    /// `go`, then SIGKILL at once.
    RandomKill,
    Zombie,
}

/// How many of each action (shuffled by the seed).
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Where chosen kills land ([`Api::points`]).
    pub points: &'static [&'static str],
    pub per_point: usize,
    pub random: usize,
    pub zombies: usize,
    pub seed: u64,
}

impl Schedule {
    pub fn actions(&self) -> Vec<Action> {
        let mut actions = Vec::new();
        for &point in self.points {
            actions.extend(std::iter::repeat_n(Action::KillAt(point), self.per_point));
        }
        actions.extend(std::iter::repeat_n(Action::RandomKill, self.random));
        actions.extend(std::iter::repeat_n(Action::Zombie, self.zombies));
        let mut rng = Rng::new(self.seed);
        for i in (1..actions.len()).rev() {
            actions.swap(i, rng.below(i as u64 + 1) as usize);
        }
        actions
    }
}

/// Starts a worker process for a task.
pub type Launch<'a> = dyn Fn(&TxnConfig) -> std::io::Result<Child> + 'a;

struct Process {
    child: Child,
    stdin: ChildStdin,
    task: i32,
    /// Its phase lines so far (`phase NAME N …`: NAME).
    committed: usize,
}

/// What the schedule did.
#[derive(Debug, Default)]
pub struct Tally {
    pub kills: usize,
    pub by_point: HashMap<&'static str, usize>,
    pub random_kills: usize,
    pub zombies: usize,
    /// Zombies that committed after their successor started: a failure.
    pub zombie_commits: usize,
    /// Workers that ended on their own with an error (restarted).
    pub restarts: usize,
    pub transactions: usize,
    pub rewinds: usize,
}

/// A line from a worker, or its end (`None`).
type Line = (u64, Option<String>);

/// The driver's view of the workers.
pub struct Driver<'a> {
    config: TxnConfig,
    launch: &'a Launch<'a>,
    lines: Receiver<Line>,
    sender: Sender<Line>,
    live: HashMap<u64, Process>,
    next_id: u64,
    pub tally: Tally,
    /// Tasks whose worker reported `done`.
    done: Vec<bool>,
    deadline: Instant,
    /// While set, gate lines of workers not watched wait here unanswered.
    holding: bool,
    held: Vec<Line>,
}

impl<'a> Driver<'a> {
    pub fn new(config: TxnConfig, launch: &'a Launch<'a>, within: Duration) -> Driver<'a> {
        let (sender, lines) = mpsc::channel();
        let done = vec![false; config.tasks as usize];
        Driver {
            config,
            launch,
            lines,
            sender,
            live: HashMap::new(),
            next_id: 0,
            tally: Tally::default(),
            done,
            deadline: Instant::now() + within,
            holding: false,
            held: Vec::new(),
        }
    }

    /// Starts a worker for `task`; its lines arrive on the driver's channel.
    pub fn start(&mut self, task: i32) -> Result<u64, Error> {
        let mut config = self.config.clone();
        config.task = task;
        let mut child = (self.launch)(&config)?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| Error::Other("no stdin".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Other("no stdout".into()))?;
        let id = self.next_id;
        self.next_id += 1;
        let sender = self.sender.clone();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send((id, Some(line))).is_err() {
                    return;
                }
            }
            let _ = sender.send((id, None));
        });
        self.live.insert(
            id,
            Process {
                child,
                stdin,
                task,
                committed: 0,
            },
        );
        Ok(id)
    }

    fn go(&mut self, id: u64) {
        if let Some(process) = self.live.get_mut(&id) {
            // A worker that died meanwhile: its end arrives as a line.
            let _ = process.stdin.write_all(b"go\n");
            let _ = process.stdin.flush();
        }
    }

    fn signal(&self, id: u64, name: &str) -> Result<(), Error> {
        let pid = self
            .live
            .get(&id)
            .map(|p| p.child.id())
            .ok_or_else(|| Error::Other(format!("worker {id} is gone before SIG{name}")))?;
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()?;
        if !status.success() {
            return Err(Error::Other(format!("kill -{name} {pid}: {status}")));
        }
        Ok(())
    }

    fn kill(&mut self, id: u64) -> Result<i32, Error> {
        let mut process = self
            .live
            .remove(&id)
            .ok_or_else(|| Error::Other(format!("worker {id} is gone before its kill")))?;
        process.child.kill()?;
        process.child.wait()?;
        self.tally.kills += 1;
        Ok(process.task)
    }

    /// The next line of any worker. A gate line of a worker in `hold` is
    /// returned unanswered; so is every line of `watch`; any other gate
    /// line is answered `go`. A worker's end is handled here: `done`
    /// marks its task, any other end restarts the task.
    fn next(&mut self, watch: &[u64]) -> Result<(u64, Option<String>), Error> {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let (id, line) = self.lines.recv_timeout(left).map_err(|_| {
                Error::Other("exactly-once: the schedule ran past its deadline".into())
            })?;
            if !self.live.contains_key(&id) {
                continue; // a killed worker's last lines
            }
            if watch.contains(&id) {
                return Ok((id, line));
            }
            if self.holding && line.as_deref().is_some_and(is_gate) {
                self.held.push((id, line));
                continue;
            }
            self.handle(id, line)?;
        }
    }

    /// What every line not watched gets.
    fn handle(&mut self, id: u64, line: Option<String>) -> Result<(), Error> {
        match line {
            Some(line) if line.starts_with("phase ") || line.starts_with("ready ") => {
                if line.starts_with("phase committed") {
                    self.note_commit(id);
                }
                self.go(id);
            }
            Some(line) if line.starts_with("done ") => {
                self.note_done(id, &line);
            }
            Some(line) if line.starts_with("rewind ") => {
                self.tally.rewinds += 1;
                println!("  worker {id}: {line}");
            }
            Some(line) => println!("  worker {id}: {line}"),
            None => self.ended(id)?,
        }
        Ok(())
    }

    fn note_commit(&mut self, id: u64) {
        if let Some(p) = self.live.get_mut(&id) {
            p.committed += 1;
        }
        self.tally.transactions += 1;
    }

    fn note_done(&mut self, id: u64, line: &str) {
        if let Some(p) = self.live.get(&id) {
            self.done[p.task as usize] = true;
            println!("  task {} (worker {id}): {line}", p.task);
        }
    }

    /// A worker's stdout ended: reaped; restarted unless its task is done.
    fn ended(&mut self, id: u64) -> Result<(), Error> {
        let Some(mut process) = self.live.remove(&id) else {
            return Ok(());
        };
        let status = process.child.wait()?;
        if !self.done[process.task as usize] {
            self.tally.restarts += 1;
            println!(
                "  worker {id} (task {}) ended on its own ({status}): restarting the task",
                process.task
            );
            self.start(process.task)?;
        }
        Ok(())
    }

    /// The tasks not done yet.
    pub fn open_tasks(&self) -> Vec<i32> {
        (0..self.config.tasks)
            .filter(|&t| !self.done[t as usize])
            .collect()
    }

    /// The live worker of `task` (the newest).
    fn worker_of(&self, task: i32) -> Option<u64> {
        self.live
            .iter()
            .filter(|(_, p)| p.task == task)
            .map(|(&id, _)| id)
            .max()
    }

    /// Waits for `id`'s next gate line, answering others; returns it (not
    /// answered). `None` if the worker ended.
    fn gate_of(&mut self, id: u64) -> Result<Option<String>, Error> {
        loop {
            let (_, line) = self.next(&[id])?;
            match line {
                Some(l) if l.starts_with("phase ") || l.starts_with("ready ") => {
                    if l.starts_with("phase committed") {
                        self.note_commit(id);
                    }
                    return Ok(Some(l));
                }
                None => {
                    self.ended(id)?;
                    return Ok(None);
                }
                Some(l) => self.handle(id, Some(l))?,
            }
        }
    }

    /// Holds every other worker at its gate (see [`next`](Self::next)).
    fn hold(&mut self) {
        self.holding = true;
    }

    /// Answers the held gate lines.
    fn release(&mut self) -> Result<(), Error> {
        self.holding = false;
        for (id, line) in std::mem::take(&mut self.held) {
            if self.live.contains_key(&id) {
                self.handle(id, line)?;
            }
        }
        Ok(())
    }

    /// Starts a successor for `task` and waits for its `ready` while every
    /// other worker waits at its gate.
    fn restart(&mut self, task: i32) -> Result<u64, Error> {
        let holding = self.holding;
        self.hold();
        let id = self.start(task)?;
        let ready = self.gate_of(id);
        if !holding {
            self.release()?;
        }
        match ready? {
            Some(_) => {
                self.go(id);
                Ok(id)
            }
            // Ended before it was ready (`gate_of` restarted the task).
            None => self
                .worker_of(task)
                .ok_or_else(|| Error::Other(format!("task {task} has no worker"))),
        }
    }

    /// Runs one action on `task`'s worker after `skip` of its gate lines.
    pub fn act(&mut self, action: Action, task: i32, skip: u64) -> Result<(), Error> {
        let Some(victim) = self.worker_of(task) else {
            return Ok(());
        };
        if self.done[task as usize] {
            return Ok(());
        }
        for _ in 0..skip {
            match self.gate_of(victim)? {
                Some(_) => self.go(victim),
                None => return Ok(()),
            }
        }
        match action {
            Action::RandomKill => {
                self.go(victim);
                self.kill(victim)?;
                self.tally.random_kills += 1;
                self.restart(task)?;
            }
            Action::KillAt(point) => {
                let prefix = format!("phase {point} ");
                loop {
                    match self.gate_of(victim)? {
                        Some(l) if l.starts_with(&prefix) => break,
                        Some(_) => self.go(victim),
                        None => return Ok(()),
                    }
                }
                self.kill(victim)?;
                *self.tally.by_point.entry(point).or_default() += 1;
                self.restart(task)?;
            }
            Action::Zombie => self.zombie(victim, task)?,
        }
        Ok(())
    }

    fn zombie(&mut self, zombie: u64, task: i32) -> Result<(), Error> {
        let stop_at = format!("phase {} ", self.config.api.zombie_point());
        let open = loop {
            match self.gate_of(zombie)? {
                Some(l) if l.starts_with(&stop_at) => break l,
                Some(_) => self.go(zombie),
                None => return Ok(()),
            }
        };
        self.signal(zombie, "STOP")?;
        // The others wait until the zombie is done with: its commit may
        // take the whole call deadline, and the schedule must not run out
        // of records meanwhile.
        self.hold();
        let successor = self.restart(task)?;
        // The successor's init fenced the zombie; let it commit twice.
        let mut commits = 0;
        while commits < 2 {
            match self.gate_of(successor)? {
                Some(l) => {
                    commits += usize::from(l.starts_with("phase committed"));
                    self.go(successor);
                }
                None => break,
            }
        }
        self.signal(zombie, "CONT")?;
        self.go(zombie);
        // Until the zombie ends: its commit must fail (fenced) or get no
        // answer within its deadline; either way it exits.
        loop {
            let (id, line) = self.next(&[zombie])?;
            debug_assert_eq!(id, zombie);
            match line {
                Some(l) if l.starts_with("phase committed") => {
                    self.tally.zombie_commits += 1;
                    println!("  ZOMBIE COMMITTED: worker {zombie} after {open}: {l}");
                    self.go(zombie);
                }
                Some(l) if l.starts_with("phase ") || l.starts_with("ready ") => self.go(zombie),
                Some(l) => println!("  zombie {zombie}: {l}"),
                None => {
                    let mut process = self
                        .live
                        .remove(&zombie)
                        .ok_or_else(|| Error::Other("the zombie is gone".into()))?;
                    let status = process.child.wait()?;
                    println!("  zombie worker {zombie} (task {task}, stopped at `{open}`) fenced: exited {status}");
                    self.tally.zombies += 1;
                    return self.release();
                }
            }
        }
    }

    /// Lets every worker run until each task reported `done` and every
    /// worker exited.
    pub fn finish(&mut self) -> Result<(), Error> {
        while self.done.contains(&false) || !self.live.is_empty() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let (id, line) = self.lines.recv_timeout(left).map_err(|_| {
                Error::Other(format!(
                    "exactly-once: the final run ran past its deadline (tasks done: {:?})",
                    self.done
                ))
            })?;
            if self.live.contains_key(&id) {
                self.handle(id, line)?;
            }
        }
        Ok(())
    }
}

fn is_gate(line: &str) -> bool {
    line.starts_with("phase ") || line.starts_with("ready ")
}

impl Drop for Driver<'_> {
    fn drop(&mut self) {
        for process in self.live.values_mut() {
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
    }
}
