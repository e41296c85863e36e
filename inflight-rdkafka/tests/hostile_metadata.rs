//! Hostile commit metadata (issue 38, item 5): nine characters that claim
//! 2^34 offsets pending before one done, committed to the group, must not
//! make the next owner's first `commit_progress` list those offsets (it
//! allocated 128 GiB and aborted). Whatever the metadata says, reading it
//! back, merging it with the tracker's progress and committing the result
//! cost memory bounded by the metadata budget, and a progress the budget
//! does not allow counts as the committed offset alone.
//!
//! Against librdkafka's in-process mock cluster, in a test binary of its
//! own: its global allocator counts what Rust allocates and refuses any
//! single allocation past [`CAP`] (the process then aborts: "memory
//! allocation of ... bytes failed"), so that the old code fails here
//! instead of taking the machine's memory.

use inflight::{ProgressTracker, Tracker};
use inflight_rdkafka::{commit_progress, HandOffContext, TopicPartition};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The largest single allocation allowed: far above anything the glue
/// needs for a 4,096-character budget, far below what listing a hostile
/// run offset by offset asks for.
const CAP: usize = 64 << 20;

/// Counts the bytes Rust holds, and the most it held since [`reset_peak`].
struct Capped;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to `System`, which upholds `GlobalAlloc`'s contract;
// refusing an allocation (null) is allowed by it.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as `System::alloc` requires.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            // Relaxed, both: counters read after the fact, on one thread.
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // Relaxed: a counter.
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: allocated by `System` with this layout (see `alloc`).
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;

/// Starts measuring the peak from what is held now.
fn reset_peak() -> usize {
    // Relaxed: see `alloc`.
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    live
}

/// A consumer of the group "group" on `cluster`.
fn consumer(
    cluster: &MockCluster<'static, DefaultProducerContext>,
    context: HandOffContext,
) -> BaseConsumer<HandOffContext> {
    ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("group.id", "group")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .create_with_context(context)
        .unwrap()
}

/// Offset 0 of `source`'s partition 0, committed with `metadata` by a
/// first owner; then a new owner reads it back, does offset 0, and
/// commits: returns the offset and metadata committed, and the most bytes
/// the commit held beyond what was held before it.
fn commit_after(metadata: &str) -> (Offset, String, usize) {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("source", 1, 1).unwrap();
    let partition = TopicPartition::new("source", 0);
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset("source", 0, Offset::Beginning)
        .unwrap();
    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let first = consumer(
        &cluster,
        HandOffContext::new(tracker, Duration::from_secs(5)),
    );
    first.assign(&assignment).unwrap();
    let mut hostile = TopicPartitionList::new();
    hostile
        .add_partition_offset("source", 0, Offset::Offset(0))
        .unwrap();
    hostile
        .find_partition("source", 0)
        .unwrap()
        .set_metadata(metadata);
    first.commit(&hostile, CommitMode::Sync).unwrap();
    drop(first);

    let tracker: Arc<ProgressTracker<TopicPartition, i64>> =
        Arc::new(Tracker::builder().progress(4096).build());
    let second = consumer(
        &cluster,
        HandOffContext::new(tracker.clone(), Duration::from_secs(5)),
    );
    second.assign(&assignment).unwrap();
    second.context().read_committed(&second, &assignment);
    assert_eq!(second.context().errors(), Vec::<String>::new());
    let ticket = tracker.send(partition, 0).unwrap();
    tracker.ack(ticket).unwrap();
    let before = reset_peak();
    assert_eq!(commit_progress(&second, CommitMode::Sync).unwrap(), 1);
    // Relaxed: see `alloc`.
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    let committed = second
        .committed_offsets(assignment, Duration::from_secs(10))
        .unwrap();
    let element = committed.find_partition("source", 0).unwrap();
    (element.offset(), element.metadata().to_owned(), peak)
}

/// The nine characters: 2^34 offsets pending from 0, then one
/// done. The new owner commits offset 1 (it did 0) and nothing past it.
#[test]
fn nine_characters_of_metadata_cost_a_bounded_commit() {
    let (offset, metadata, peak) = commit_after("RgICAgEAB");
    assert_eq!((offset, metadata.as_str()), (Offset::Offset(1), ""));
    assert!(peak < 1 << 20, "the commit held {peak} bytes more");
}

/// Crafted metadata that decodes (fewer than 2^20 positions pending) but
/// describes more than a 4,096-character budget allows: 500,000 pending,
/// then one done. Not trusted either: the committed offset alone.
#[test]
fn metadata_past_the_budget_counts_as_the_offset_alone() {
    // Runs [500_000, 1] as varints: 0xa0 0xc2 0x1e, 0x01; in base64url.
    let (offset, metadata, peak) = commit_after("RoMIeAQ");
    assert_eq!((offset, metadata.as_str()), (Offset::Offset(1), ""));
    assert!(peak < 1 << 20, "the commit held {peak} bytes more");
}
