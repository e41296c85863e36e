//! The transactional producers' context: a [`TrackingContext`] for the
//! records (their tickets as opaques), plus the deliveries of the offsets
//! records that a commit to an offsets topic writes into the transaction
//! (their opaque is [`TicketOpaque::NONE`], which no ticket is).

use crate::producer::{TicketOpaque, TrackingContext};
use inflight::Tracker;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::ClientContext;
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

/// The context of each transactional producer.
pub(crate) struct TxnContext<P, O> {
    pub(crate) tracking: TrackingContext<P, O>,
    offsets: Mutex<OffsetsBatch>,
    /// Notified at each delivery report of an offsets record.
    reported: Condvar,
}

/// The offsets records of the commit in progress.
#[derive(Default)]
struct OffsetsBatch {
    delivered: usize,
    failed: Option<KafkaError>,
}

/// How an offsets batch's deliveries ended.
pub(crate) enum OffsetsDelivered {
    All,
    Failed(KafkaError),
    TimedOut,
}

impl<P, O> TxnContext<P, O> {
    pub(crate) fn new(tracker: Arc<Tracker<P, O>>) -> Self {
        Self {
            tracking: TrackingContext::new(tracker),
            offsets: Mutex::new(OffsetsBatch::default()),
            reported: Condvar::new(),
        }
    }

    /// Starts counting a new batch of offsets records. Commits are
    /// serialized, and a batch either waits for all its reports or is
    /// aborted (librdkafka's `abort_transaction` returns once the purged
    /// records' reports are out), so no report of an older batch comes in.
    pub(crate) fn begin_offsets(&self) {
        *self.offsets.lock().unwrap_or_else(PoisonError::into_inner) = OffsetsBatch::default();
    }

    /// Waits until `sent` offsets records are delivered, one failed, or
    /// `deadline` passes.
    pub(crate) fn wait_offsets(&self, sent: usize, deadline: Instant) -> OffsetsDelivered {
        let mut batch = self.offsets.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(error) = batch.failed.take() {
                return OffsetsDelivered::Failed(error);
            }
            if batch.delivered >= sent {
                return OffsetsDelivered::All;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return OffsetsDelivered::TimedOut;
            }
            batch = self
                .reported
                .wait_timeout(batch, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl<P: Send + Sync, O: Send + Sync> ClientContext for TxnContext<P, O> {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = false;

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.tracking.log(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.tracking.error(error, reason);
    }
}

impl<P, O> ProducerContext for TxnContext<P, O>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    type DeliveryOpaque = TicketOpaque;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: TicketOpaque) {
        if opaque != TicketOpaque::NONE {
            self.tracking.delivery(result, opaque);
            return;
        }
        let mut batch = self.offsets.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(_) => batch.delivered += 1,
            Err((error, _)) => {
                if batch.failed.is_none() {
                    batch.failed = Some(error.clone());
                }
            }
        }
        drop(batch);
        self.reported.notify_all();
    }
}
