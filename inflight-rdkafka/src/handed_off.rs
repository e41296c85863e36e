//! What a revocation's hand-off did ([`HandedOff`]).

use crate::consumer::TopicPartition;
use rdkafka::error::KafkaError;
use std::fmt;

/// What a revocation's hand-off did, kept by its context
/// ([`HandOffContext::last_hand_off`](crate::HandOffContext::last_hand_off)):
/// your `post_rebalance` of the revocation reads it, and so may your loop
/// after it.
///
/// ```
/// use inflight_rdkafka::HandedOff;
/// fn looks_at(done: &HandedOff) {
///     if done.released > 0 {
///         // The drain bound passed with records in flight (or the
///         // assignment was lost): the next owner redoes them. A capacity
///         // that the sink drains within the bound avoids it.
///         eprintln!("{done}");
///     }
///     if let Some(Err(e)) = &done.final_commit {
///         eprintln!("final commit refused: {e}");
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandedOff {
    /// The partitions handed off.
    pub partitions: Vec<TopicPartition>,
    /// Their records still in flight when they were revoked, **released**:
    /// their tickets answer `Revoked` (and `is_current` is false), nothing
    /// of theirs is committed, and the next owner redoes them. Not 0 when
    /// the drain bound passed first (size the tracker's capacity so that
    /// the records in flight drain within it at the sink's rate), or the
    /// assignment was lost, or the consumer closed first.
    pub released: usize,
    /// The final commit: `None` when none was made (a lost assignment, a
    /// closed consumer, nothing due), `Some(Ok(()))` when the group
    /// confirmed it, `Some(Err(e))` when it failed (also reported to your
    /// `commit_callback` and in `errors()`): the next owner then starts
    /// from the group's last commit, or from what the store kept.
    pub final_commit: Option<Result<(), KafkaError>>,
    /// How many times the final commit was made: more than once when the
    /// group refused it for a reason that may pass (a rebalance in
    /// progress, a coordinator moving), made again within the drain bound
    /// while the partitions were still owned.
    pub commit_attempts: u32,
}

impl fmt::Display for HandedOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} handed off: {} record{} in flight released, final commit ",
            self.partitions,
            self.released,
            if self.released == 1 { "" } else { "s" }
        )?;
        match &self.final_commit {
            None => write!(f, "none")?,
            Some(Ok(())) => write!(f, "confirmed")?,
            Some(Err(e)) => write!(f, "failed ({e})")?,
        }
        if self.commit_attempts > 1 {
            write!(f, " after {} attempts", self.commit_attempts)?;
        }
        Ok(())
    }
}
