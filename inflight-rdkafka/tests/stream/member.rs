//! One member of the group "group": the async pipeline of
//! `examples/async_pipeline.rs` (a `StreamConsumer`, workers as tokio
//! tasks that ask `is_current` before they produce with a
//! `FutureProducer`, the clean stop), with a log of what its workers did
//! and a gate that holds them until the test opens it. Its commit points
//! are kept in a `TopicStore` (`progress-store`) too: the mock cluster
//! refuses a commit while the group rebalances, the hand-off's final one
//! included, and the store keeps what the next owner must skip.

use inflight::mode::Progress;
use inflight::{ProgressTracker, Tracker};
use inflight_rdkafka::{
    commit_progress, continue_hand_off, finish_hand_off, resolve_delivery, HandOffContext,
    HandedOff, OnRebalance, Resumable, TopicPartition, TopicStore,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientContext, Message};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub type Pipeline = ProgressTracker<TopicPartition, i64>;
pub type Context = HandOffContext<Progress, Recorder>;

/// The member's own context: keeps what each hand-off did, as its
/// `post_rebalance` sees it.
#[derive(Default)]
pub struct Recorder {
    hand_offs: Mutex<Vec<HandedOff>>,
}

impl ClientContext for Recorder {}
impl ConsumerContext for Recorder {}

impl OnRebalance for Recorder {
    fn post_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        consumer: &K,
        rebalance: &Rebalance<'_>,
    ) {
        if let Rebalance::Revoke(_) = rebalance {
            let done = consumer.context().last_hand_off().expect("set before");
            self.hand_offs.lock().unwrap().push(done);
        }
    }
}

/// What a member's workers did with the records they were handed.
#[derive(Default, Debug)]
pub struct Log {
    /// Produced to `sink` (delivered), as (source partition, offset).
    pub produced: Vec<(i32, i64)>,
    /// Not produced: their ticket was no longer current (released by a
    /// hand-off).
    pub dropped: Vec<(i32, i64)>,
}

pub struct Member {
    pub context: Arc<Context>,
    pub tracker: Arc<Pipeline>,
    pub log: Arc<Mutex<Log>>,
    /// How many partitions the member has (at its last tick).
    pub assigned: Arc<Mutex<usize>>,
    committing: Arc<Mutex<bool>>,
    gate: watch::Sender<bool>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

type Job = (i32, i64, inflight::Ticket);
/// What the loop shares with the test: the log, the partitions it has,
/// whether it commits.
type Shared = (Arc<Mutex<Log>>, Arc<Mutex<usize>>, Arc<Mutex<bool>>);

/// How a member runs.
pub struct Setup {
    pub drain_timeout: Duration,
    /// Whether its workers go on at once (else at [`Member::open`]).
    pub open: bool,
    /// Its `partition.assignment.strategy`.
    pub strategy: &'static str,
    /// Whether its loop commits (else only at
    /// [`Member::commit`](Member::commit)`(true)`; a hand-off still makes
    /// its final commit).
    pub committing: bool,
}

impl Member {
    /// Joins the group (subscribed to `source`, `cooperative-sticky`), its
    /// workers held until [`open`](Self::open) unless `open`.
    pub fn start(brokers: &str, drain_timeout: Duration, open: bool) -> Self {
        Self::start_with(
            brokers,
            Setup {
                drain_timeout,
                open,
                strategy: "cooperative-sticky",
                committing: true,
            },
        )
    }

    /// Joins the group (subscribed to `source`) as `setup` says.
    pub fn start_with(brokers: &str, setup: Setup) -> Self {
        let Setup {
            drain_timeout,
            open,
            strategy,
            committing,
        } = setup;
        let tracker: Arc<Pipeline> =
            Arc::new(Tracker::builder().capacity(1_024).progress(4096).build());
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers);
        let store =
            TopicStore::new(&config, "progress-store", "group", Duration::from_secs(10)).unwrap();
        let context = HandOffContext::wrap(Recorder::default(), tracker.clone(), drain_timeout)
            .store(store)
            .read_timeout(Duration::from_secs(10))
            .defer_hand_off();
        let consumer: StreamConsumer<Context> = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", "group")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("partition.assignment.strategy", strategy)
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "500")
            .create_with_context(context)
            .unwrap();
        consumer.subscribe(&["source"]).unwrap();
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("acks", "all")
            .create()
            .unwrap();
        let (gate, gate_rx) = watch::channel(open);
        let (stop, stop_rx) = watch::channel(false);
        let committing = Arc::new(Mutex::new(committing));
        let log = Arc::new(Mutex::new(Log::default()));
        let assigned = Arc::new(Mutex::new(0));
        let context = consumer.context().clone();
        let task = tokio::spawn(run(
            consumer,
            producer,
            tracker.clone(),
            (log.clone(), assigned.clone(), committing.clone()),
            gate_rx,
            stop_rx,
        ));
        Self {
            context,
            tracker,
            log,
            assigned,
            committing,
            gate,
            stop,
            task,
        }
    }

    /// What each hand-off of the member did, as its `post_rebalance` saw
    /// it, oldest first.
    pub fn hand_offs(&self) -> Vec<HandedOff> {
        self.context.inner().hand_offs.lock().unwrap().clone()
    }

    /// Whether the loop commits from now on.
    pub fn commit(&self, committing: bool) {
        *self.committing.lock().unwrap() = committing;
    }

    /// Lets the workers go on.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }

    /// The clean stop; returns the log.
    pub async fn stop(self) -> Log {
        self.stop.send_replace(true);
        self.task.await.unwrap();
        Arc::try_unwrap(self.log).unwrap().into_inner().unwrap()
    }

    pub fn produced(&self) -> usize {
        self.log.lock().unwrap().produced.len()
    }

    pub fn dropped(&self) -> usize {
        self.log.lock().unwrap().dropped.len()
    }

    /// What the member did so far, for a test that hangs.
    pub fn state(&self) -> String {
        format!(
            "assigned {}, produced {}, dropped {}, in flight {}, handing off {}, last hand-off \
             {:?}, commit failures {}, unconfirmed {}, read back {:?}, errors {:?}",
            self.assigned(),
            self.produced(),
            self.dropped(),
            self.tracker.in_flight(),
            self.context.is_handing_off(),
            self.hand_offs(),
            self.context.commit_failures(),
            self.context.commits().unconfirmed(),
            self.context.resume(),
            self.context.errors()
        )
    }

    pub fn assigned(&self) -> usize {
        *self.assigned.lock().unwrap()
    }
}

async fn run(
    consumer: StreamConsumer<Context>,
    producer: FutureProducer,
    tracker: Arc<Pipeline>,
    (log, assigned, committing): Shared,
    gate: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let (jobs, queue) = mpsc::unbounded_channel::<Job>();
    let queue = Arc::new(tokio::sync::Mutex::new(queue));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(work(
                queue.clone(),
                producer.clone(),
                tracker.clone(),
                log.clone(),
                gate.clone(),
            ))
        })
        .collect();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            message = consumer.recv() => {
                let Ok(message) = message else { continue };
                let partition = TopicPartition::new(message.topic(), message.partition());
                if consumer.context().skip(&partition, message.offset()) {
                    continue;
                }
                match tracker.send_async(partition, message.offset()).await {
                    Ok(ticket) => jobs
                        .send((message.partition(), message.offset(), ticket))
                        .unwrap(),
                    Err(inflight::SendError::OutOfOrder(..)) => {} // on its way already
                    Err(e) => panic!("tracker: {e}"),
                }
            }
            _ = tick.tick() => {
                // Also finishes a deferred hand-off (and runs its post_rebalance).
                if *committing.lock().unwrap() {
                    let _ = commit_progress(&consumer, CommitMode::Async);
                } else {
                    continue_hand_off(&consumer);
                }
                *assigned.lock().unwrap() = consumer.assignment().map_or(0, |a| a.count());
            }
        }
    }
    // The clean stop (the same recipe as the examples').
    drop(jobs);
    tokio::task::block_in_place(|| finish_hand_off(&consumer));
    for worker in workers {
        worker.await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(120), tracker.drain_async())
        .await
        .expect("drained in 120 s")
        .unwrap();
    tokio::task::block_in_place(|| commit_progress(&consumer, CommitMode::Sync)).unwrap();
    consumer.unsubscribe();
    let deadline = Instant::now() + Duration::from_secs(120);
    while consumer.assignment().unwrap().count() > 0 {
        assert!(Instant::now() < deadline, "not unassigned in 120 s");
        // The revocation's hand-off runs in a poll.
        let _ = tokio::time::timeout(Duration::from_millis(20), consumer.recv()).await;
    }
}

async fn work(
    queue: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>>,
    producer: FutureProducer,
    tracker: Arc<Pipeline>,
    log: Arc<Mutex<Log>>,
    mut gate: watch::Receiver<bool>,
) {
    loop {
        let job = queue.lock().await.recv().await;
        let Some((partition, offset, ticket)) = job else {
            return;
        };
        // "Processing" (held until the test opens the gate).
        gate.wait_for(|open| *open).await.unwrap();
        if !tracker.is_current(&ticket) {
            // Released by a hand-off: its next owner produces it.
            let _ = tracker.fail(ticket);
            log.lock().unwrap().dropped.push((partition, offset));
            continue;
        }
        let key = format!("{partition}/{offset}");
        let delivery = producer
            .send(
                FutureRecord::to("sink").key(&key).payload(&key),
                Duration::from_secs(30),
            )
            .await;
        assert!(delivery.is_ok(), "delivery of {key}: {delivery:?}");
        // Logged before the ack: a commit that covers it finds it logged.
        log.lock().unwrap().produced.push((partition, offset));
        let _ = resolve_delivery(&tracker, ticket, &delivery);
    }
}
