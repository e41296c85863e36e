//! The error classes of the transactional calls, the retry of retriable
//! ones, and what a commit hands back.

use rdkafka::error::KafkaError;
use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

/// Why an [`ExactlyOnce`](super::ExactlyOnce) call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TxnError {
    /// A fatal error (librdkafka's `is_fatal`; a producer fenced by a newer
    /// instance with the same transactional id included), or one of no
    /// class: the pipeline stopped. Start a new one (its
    /// `init_transactions` aborts what this one left open).
    Fatal {
        /// The call that failed.
        doing: &'static str,
        /// What librdkafka reported.
        error: KafkaError,
    },
    /// A retriable error did not clear within the timeout: the pipeline
    /// stopped (a commit whose outcome is unknown cannot be rewound).
    /// Start a new one.
    TimedOut {
        /// The call that kept failing.
        doing: &'static str,
        /// Its last error.
        error: KafkaError,
    },
    /// The pipeline stopped earlier (see the error that stopped it).
    Stopped,
    /// A rewind is pending: seek the source back, then
    /// [`resume`](super::ExactlyOnce::resume).
    Rewinding,
    /// The producer refused the record at once (too large, unknown
    /// topic...): its ticket was failed, and the next commit rewinds.
    Refused(KafkaError),
    /// The tracker refused the record (still full at the timeout, closed)
    /// or the flush.
    Tracker(String),
    /// An offset or partition could not be encoded for the offsets topic:
    /// the pipeline stopped.
    Encode {
        /// The offsets topic.
        topic: String,
        /// Why.
        reason: String,
    },
    /// A producer could not be created (the configuration).
    Config(KafkaError),
    /// A step that cannot be rewound failed with an abortable error
    /// (`init_transactions`, `abort_transaction` itself): the pipeline
    /// stopped. Start a new one.
    Unrecoverable(String),
}

impl fmt::Display for TxnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fatal { doing, error } => write!(
                f,
                "{doing} failed fatally ({error}): the transactional pipeline stopped; start a \
                 new one, whose init_transactions aborts what was open"
            ),
            Self::TimedOut { doing, error } => write!(
                f,
                "{doing} kept failing with a retriable error until the timeout ({error}): the \
                 transactional pipeline stopped; start a new one"
            ),
            Self::Stopped => f.write_str("the transactional pipeline stopped after an error"),
            Self::Rewinding => f.write_str(
                "a rewind is pending: seek the source back to the committed offsets, then resume",
            ),
            Self::Refused(error) => write!(
                f,
                "the producer refused the record ({error}): the next commit rewinds"
            ),
            Self::Tracker(reason) => write!(f, "the tracker refused: {reason}"),
            Self::Encode { topic, reason } => {
                write!(
                    f,
                    "offsets topic {topic}: cannot encode an offset: {reason}"
                )
            }
            Self::Config(error) => write!(f, "creating a transactional producer: {error}"),
            Self::Unrecoverable(reason) => write!(
                f,
                "{reason}: the transactional pipeline stopped; start a new one"
            ),
        }
    }
}

impl std::error::Error for TxnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Fatal { error, .. }
            | Self::TimedOut { error, .. }
            | Self::Refused(error)
            | Self::Config(error) => Some(error),
            _ => None,
        }
    }
}

/// What an aborted transaction leaves to do: seek the source back, then
/// [`resume`](super::ExactlyOnce::resume).
#[derive(Debug, Clone)]
pub struct Rewind<P, O> {
    pub(super) partitions: Vec<P>,
    pub(super) committed: HashMap<P, O>,
    pub(super) cause: String,
}

impl<P, O> Rewind<P, O> {
    /// Every source partition revoked (all this pipeline had sent to):
    /// each must be sought back, to its offset in
    /// [`committed`](Self::committed) `+ 1`, or, if it has none there, to
    /// where it started (its offset committed before this pipeline ran).
    pub fn partitions(&self) -> &[P] {
        &self.partitions
    }

    /// The **last done** offset committed by this pipeline for the
    /// revoked partitions that have one.
    pub fn committed(&self) -> &HashMap<P, O> {
        &self.committed
    }

    /// Why the transaction was aborted.
    pub fn cause(&self) -> &str {
        &self.cause
    }
}

/// How a step of a commit ended, if not well.
pub(super) enum Step {
    /// Abort and rewind, for this reason.
    Abort(String),
    /// Stop with this error.
    Stop(TxnError),
}

impl Step {
    pub(super) fn into_error(self) -> TxnError {
        match self {
            Step::Stop(error) => error,
            Step::Abort(reason) => TxnError::Unrecoverable(reason),
        }
    }
}

/// librdkafka's class of a transactional call's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    Retriable,
    Abortable,
    Fatal,
}

/// The class of `error`, as librdkafka sets it: fatal first (a fenced
/// producer), then abortable, then retriable; an error of no class is
/// treated as fatal (nothing says retrying or aborting is safe). A flush
/// timing out (rust-rdkafka's, before `commit_transaction`) is retriable.
pub(super) fn classify(error: &KafkaError) -> Class {
    match error {
        KafkaError::Transaction(error) if error.is_fatal() => Class::Fatal,
        KafkaError::Transaction(error) if error.txn_requires_abort() => Class::Abortable,
        KafkaError::Transaction(error) if error.is_retriable() => Class::Retriable,
        KafkaError::Flush(_) => Class::Retriable,
        _ => Class::Fatal,
    }
}

/// Runs `call` (given the time left) until it succeeds, a non-retriable
/// error, or `deadline`. `Ok` carries the number of retries.
pub(super) fn retrying(
    doing: &'static str,
    deadline: Instant,
    mut call: impl FnMut(Duration) -> Result<(), KafkaError>,
) -> Result<u64, Step> {
    let mut retries = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let error = match call(left) {
            Ok(()) => return Ok(retries),
            Err(error) => error,
        };
        match classify(&error) {
            Class::Retriable if Instant::now() < deadline => {
                retries += 1;
                // A retriable error can come back at once (a coordinator
                // not yet known): back off a little before the next try.
                std::thread::sleep(Duration::from_millis(10).min(left));
            }
            Class::Retriable => return Err(Step::Stop(TxnError::TimedOut { doing, error })),
            Class::Abortable => return Err(Step::Abort(format!("{doing}: {error}"))),
            Class::Fatal => return Err(Step::Stop(TxnError::Fatal { doing, error })),
        }
    }
}
