//! The consumer-group system test (issue #19): worker processes in one
//! consumer group consume a source topic, process each record on a pool of
//! threads (random delays, so acks come out of order), produce the result
//! to a sink topic with the record's ticket as the delivery opaque, and
//! commit progress every 100 ms; a driver adds, stops and kills them, then
//! reads the sink back.
//!
//! - [`ledger`]: where progress is kept. tansu 0.6.0 returns no commit
//!   metadata and fences no commit, so each partition's progress (next
//!   offset and [`Progress::encode`]) also goes to a one-partition *ledger*
//!   topic, like Kafka Connect's offsets topic, with the hand-off markers
//!   that stand in for the join barrier a real Kafka broker has: an owner
//!   *claims* a partition, writes its *progress*, and *releases* it when a
//!   rebalance takes it away; a new owner starts only once the previous
//!   one released (or after a deadline: a killed owner never does).
//! - [`worker`]: one worker (the `group-worker` process, or in-process for
//!   the throughput run); [`context`], its consumer's context (commits and
//!   the hand-off); [`events`], what it reports.
//! - [`driver`]: the seeded schedule of joins, clean stops and kills, run
//!   with progress metadata and without (plain watermark commits).
//! - [`verify`]: the source filler and the sink's check.
//!
//! [`Progress::encode`]: inflight::Progress::encode

pub mod context;
pub mod driver;
pub mod events;
pub mod ledger;
pub mod verify;
pub mod worker;

/// A small xorshift generator: seeded schedules and processing delays.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}
