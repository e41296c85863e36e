//! [`inflight`] with [rdkafka](https://docs.rs/rdkafka): the glue a Kafka
//! pipeline needs, so that it commits exactly what was delivered.
//!
//! - **Producer side** ([`producer`]): a record's ticket travels as its
//!   delivery opaque ([`TicketOpaque`], the raw `u64` in the pointer: no
//!   allocation per record), and [`TrackingContext`]'s delivery callback
//!   acks it when the broker has the record and fails it when the delivery
//!   failed for good. For `ThreadedProducer` and `BaseProducer`; with a
//!   `FutureProducer`, [`resolve_delivery`] resolves the ticket from the
//!   delivery's result.
//! - **Consumer side** ([`hand_off`], [`consumer`], [`commits`]):
//!   partitions are [`TopicPartition`]s and offsets Kafka's `i64`s, on a
//!   progress tracker ([`inflight::Builder::progress`]) or a watermark
//!   tracker. [`HandOffContext`] is the consumer's context:
//!   [`commit_progress`] commits what changed (a progress tracker's
//!   `next()` with its progress `encode()`d as the commit's metadata; a
//!   watermark tracker's `committable() + 1`) and keeps each commit point
//!   until the broker confirms it, so a failed commit is made again
//!   ([`Commits`]); on assignment it reads the committed progress back, so
//!   a restart skips what was done ([`HandOffContext::is_done`]); and when
//!   a rebalance revokes partitions it runs the clean hand-off: a bounded
//!   wait for their records (which takes no `interrupt()` of yours), the
//!   final commit of every point not yet confirmed, then `revoke`, before
//!   the partitions are given up (in rdkafka's rebalance callback, or, with
//!   [`HandOffContext::defer_hand_off`], outside it: the partitions are
//!   paused and the hand-off finishes in a later [`commit_progress`]).
//!   Progress is kept in the group commit's
//!   metadata or, for brokers that return none, in a compacted topic
//!   ([`store`]). [`store_watermarks`] serves the
//!   `store_offsets` + auto-commit pattern instead.
//! - **Any consumer**: the consumer-side calls and your [`OnRebalance`]
//!   callbacks take any rdkafka consumer with the context: a
//!   `BaseConsumer`, or tokio's `StreamConsumer` (`examples/async_pipeline.rs`;
//!   see [`HandOffContext`] for what it needs).
//! - **Source offsets in a topic** ([`KafkaOffsetStore`]): a source
//!   task's offsets, of any serde type, in a compacted topic as Kafka
//!   Connect keeps them (`connect-offsets`), an
//!   [`inflight::store::OffsetStore`] for [`inflight::Tracker::flush_to`].
//! - **Exactly-once** ([`transaction`]): [`ExactlyOnce`] makes each
//!   commit a Kafka transaction holding the records produced and the
//!   source offsets (in the consumer group, or an offsets topic); a
//!   failed transaction rewinds the source to what was committed.
//! - **Your contexts stay**: [`TrackingContext`] and [`HandOffContext`]
//!   wrap a context of yours (`wrap`) and pass it every callback they do
//!   not own; [`OnRebalance`] takes your rebalance callbacks.
//!
//! A consume → process → produce pipeline uses both on one tracker: each
//! consumed record is sent to the tracker under its source partition and
//! offset, its result is produced with the ticket as the opaque, the
//! delivery acks it, and the committer commits the source offsets
//! (`examples/pipeline.rs`).
//!
//! # What to set in rdkafka
//!
//! - Consumer: `enable.auto.commit=false` (the tracker decides what to
//!   commit) and `enable.auto.offset.store=false` (rdkafka's own store
//!   would commit the last *polled* offset). Kafka's committed offset is
//!   the next one to read, "last processed + 1": [`Progress::next`] is
//!   exactly that, so commit it as it is, never `+ 1`. A watermark
//!   tracker's `committable()`, a flush's offsets and `Revoked::committable`
//!   are the last done offset (Connect's convention): commit those `+ 1`.
//!   Any `partition.assignment.strategy`: eager (`range`, `roundrobin`:
//!   every partition is revoked and handed off at each rebalance) or
//!   `cooperative-sticky` (only the partitions that move are; with a
//!   deferred hand-off the others flow on while it waits).
//! - Producer: leave `delivery.report.only.error` off (every delivery must
//!   be reported, or tickets stay in flight), and set `acks=all` for what
//!   "delivered" should mean.
//!
//! [`Progress::next`]: inflight::Progress::next
//! [`TicketOpaque`]: producer::TicketOpaque
//! [`TrackingContext`]: producer::TrackingContext
//! [`resolve_delivery`]: producer::resolve_delivery
//! [`TopicPartition`]: consumer::TopicPartition
//! [`commit_progress`]: hand_off::commit_progress
//! [`store_watermarks`]: consumer::store_watermarks
//! [`Commits`]: commits::Commits
//! [`HandOffContext`]: hand_off::HandOffContext
//! [`HandOffContext::is_done`]: hand_off::HandOffContext::is_done
//! [`HandOffContext::defer_hand_off`]: hand_off::HandOffContext::defer_hand_off
//! [`OnRebalance`]: hand_off::OnRebalance

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(not(target_pointer_width = "64"))]
compile_error!(
    "inflight-rdkafka carries a ticket's 64-bit raw value in rdkafka's pointer-sized \
     delivery opaque, which needs a 64-bit target"
);

/// Inside an `impl ClientContext` for a context that wraps a user's
/// context of type `$inner` in its field `inner`: every callback the glue
/// does not own goes to the user's (the producer's and the consumer's
/// contexts both wrap one).
macro_rules! delegate_client_context {
    ($inner:ident) => {
        const ENABLE_REFRESH_OAUTH_TOKEN: bool = $inner::ENABLE_REFRESH_OAUTH_TOKEN;

        fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
            self.inner.log(level, fac, log_message);
        }

        fn stats(&self, statistics: rdkafka::statistics::Statistics) {
            self.inner.stats(statistics);
        }

        fn stats_raw(&self, statistics: &[u8]) {
            self.inner.stats_raw(statistics);
        }

        fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
            self.inner.error(error, reason);
        }

        fn generate_oauth_token(
            &self,
            oauthbearer_config: Option<&str>,
        ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
            self.inner.generate_oauth_token(oauthbearer_config)
        }
    };
}
pub(crate) use delegate_client_context;

pub mod commits;
pub mod consumer;
mod drive;
pub mod hand_off;
mod handed_off;
mod offset_topic;
mod on_rebalance;
pub mod produce;
pub mod producer;
mod revocation;
pub mod store;
pub mod transaction;

pub use commits::Commits;
pub use consumer::{committed_progress, store_watermarks, Resumable, Resume, TopicPartition};
pub use hand_off::{
    commit_progress, continue_hand_off, finish_hand_off, HandOffContext, OnRebalance,
};
pub use handed_off::HandedOff;
pub use offset_topic::{KafkaOffsetStore, KafkaOffsetStoreBuilder, OffsetTopicError};
pub use produce::SendTracked;
pub use producer::{resolve_delivery, TicketOpaque, TrackingContext};
pub use store::{GroupCommitStore, ProgressStore, TopicStore};
pub use transaction::{transactional_id, ExactlyOnce, Outcome, Rewind, TxnError};

/// The README's code blocks, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
