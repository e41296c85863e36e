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
//! - **Consumer side** ([`consumer`]): partitions are [`TopicPartition`]s
//!   and offsets Kafka's `i64`s, on a progress tracker
//!   ([`inflight::Builder::progress`]). [`commit_progress`] commits what
//!   changed, each partition's offset `next()` with its progress
//!   `encode()`d as the commit's metadata; [`committed_progress`] reads
//!   both back on assignment, so a restart skips what was done
//!   ([`Resume::is_done`]); and [`HandOffContext`] runs the clean hand-off
//!   when a rebalance revokes partitions: a bounded `drain_partition`,
//!   then the final commit, then `revoke`, before the partitions are given
//!   up.
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
//!   `partition.assignment.strategy=range` or `roundrobin` (eager); the
//!   hand-off runs in the revocation callback.
//! - Producer: leave `delivery.report.only.error` off (every delivery must
//!   be reported, or tickets stay in flight), and set `acks=all` for what
//!   "delivered" should mean.
//!
//! [`Progress::next`]: inflight::Progress::next
//! [`TicketOpaque`]: producer::TicketOpaque
//! [`TrackingContext`]: producer::TrackingContext
//! [`resolve_delivery`]: producer::resolve_delivery
//! [`TopicPartition`]: consumer::TopicPartition
//! [`commit_progress`]: consumer::commit_progress
//! [`committed_progress`]: consumer::committed_progress
//! [`Resume::is_done`]: consumer::Resume::is_done
//! [`HandOffContext`]: consumer::HandOffContext

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(not(target_pointer_width = "64"))]
compile_error!(
    "inflight-rdkafka carries a ticket's 64-bit raw value in rdkafka's pointer-sized \
     delivery opaque, which needs a 64-bit target"
);

pub mod consumer;
pub mod producer;

pub use consumer::{commit_progress, committed_progress, HandOffContext, Resume, TopicPartition};
pub use producer::{resolve_delivery, TicketOpaque, TrackingContext};
