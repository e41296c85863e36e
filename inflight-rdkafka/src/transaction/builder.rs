//! [`ExactlyOnceBuilder`]: the producers, their ids, `init_transactions`.

use super::context::TxnContext;
use super::steps::{self, Step};
use super::{deadline_after, Books, ExactlyOnce, Gate, State, TxnError, TxnStats};
use inflight::Tracker;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{Producer, ThreadedProducer};
use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// How [`ExactlyOnce::builder`] builds one.
pub struct ExactlyOnceBuilder<P, O> {
    pub(super) config: ClientConfig,
    pub(super) id: String,
    pub(super) timeout: Duration,
    pub(super) capacity: Option<usize>,
    pub(super) overlapping: bool,
    pub(super) _types: std::marker::PhantomData<fn() -> (P, O)>,
}

impl<P, O> fmt::Debug for ExactlyOnceBuilder<P, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExactlyOnceBuilder")
            .field("id", &self.id)
            .field("timeout", &self.timeout)
            .field("capacity", &self.capacity)
            .field("overlapping", &self.overlapping)
            .finish_non_exhaustive()
    }
}

impl<P, O> ExactlyOnceBuilder<P, O>
where
    P: Hash + Eq + Clone + Send + Sync + 'static,
    O: Clone + Send + Sync + 'static,
{
    /// How long a step may retry a retriable error, and wait for
    /// deliveries (30 s by default): past it, a flush waiting for
    /// deliveries rewinds, a retriable error stops the pipeline.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most records in flight (the tracker's capacity; its default
    /// otherwise): `send` waits for room, at most the timeout.
    pub fn capacity(mut self, max_in_flight: usize) -> Self {
        self.capacity = Some(max_in_flight);
        self
    }

    /// Whether records sent while a commit waits go into the next
    /// transaction at once (`true`: two transactional producers,
    /// `<id>-a` and `<id>-b`, alternating), or wait for the commit
    /// (`false`, the default: one producer, `<id>`; `send` blocks from
    /// the seal until the commit is done).
    ///
    /// Overlapping keeps the sink flowing across the boundary, but gives
    /// up the order **between** the two transactions within a sink
    /// partition: a record sent just after the seal can land before one
    /// sent just before it (two producers, two connections). Within a
    /// transaction, and for each source partition's offsets, the order
    /// holds. Use it when the sink's consumers do not depend on the order
    /// of records sent close together (no compacted sink keyed by
    /// something two records near a boundary share). Both ids are
    /// initialised at build, so a restart fences both of a zombie's
    /// producers. See IMPLEMENTATION.md, "Exactly-once".
    pub fn overlapping(mut self, overlapping: bool) -> Self {
        self.overlapping = overlapping;
        self
    }

    /// Creates the producers (transactional, `acks=all`, idempotent), runs
    /// `init_transactions` on each (which fences the previous instance
    /// with the same id and aborts what it left open), and begins the
    /// first transaction.
    pub fn build(self) -> Result<ExactlyOnce<P, O>, TxnError> {
        let tracker = Arc::new(match self.capacity {
            Some(capacity) => Tracker::with_capacity(capacity),
            None => Tracker::new(),
        });
        let ids = if self.overlapping {
            vec![format!("{}-a", self.id), format!("{}-b", self.id)]
        } else {
            vec![self.id.clone()]
        };
        let mut producers = Vec::with_capacity(ids.len());
        for id in &ids {
            let producer: ThreadedProducer<TxnContext<P, O>> = self
                .config
                .clone()
                .set("transactional.id", id)
                .set("enable.idempotence", "true")
                .set("acks", "all")
                .create_with_context(TxnContext::new(tracker.clone()))
                .map_err(TxnError::Config)?;
            let deadline = deadline_after(self.timeout);
            steps::retrying("init_transactions", deadline, |left| {
                producer.init_transactions(left)
            })
            .map_err(Step::into_error)?;
            producers.push(producer);
        }
        producers[0]
            .begin_transaction()
            .map_err(|error| TxnError::Fatal {
                doing: "begin_transaction",
                error,
            })?;
        Ok(ExactlyOnce {
            tracker,
            producers,
            ids,
            timeout: self.timeout,
            gate: RwLock::new(Gate {
                open: 0,
                state: State::Open,
            }),
            books: Mutex::new(Books::default()),
            pending: Mutex::new(None),
            stats: Mutex::new(TxnStats::default()),
            seen: Mutex::new(HashSet::new()),
            dropped: AtomicBool::new(false),
        })
    }
}
