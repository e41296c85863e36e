//! The consumer-group system test (issue #19): worker processes in one
//! consumer group consume a source topic, process each record on a pool of
//! threads (random delays, so acks come out of order), produce the result
//! to a sink topic with the record's ticket as the delivery opaque, and
//! commit progress every 100 ms; a driver adds, stops and kills them, then
//! reads the sink back.
//!
//! - [`worker`]: one worker (the `group-worker` process, or in-process for
//!   the throughput run) on `inflight_rdkafka`'s `HandOffContext` (commits,
//!   the hand-off, the read-back) with a `TopicStore` for its progress:
//!   tansu 0.6.0 returns no commit metadata; [`saves`], that store
//!   reporting each save; [`events`], what a worker reports.
//! - [`ledger`] and [`claims`]: tansu 0.6.0 has no join barrier and fences
//!   no commit, so the workers' rebalance hooks (`OnRebalance`) *claim* a
//!   partition in a one-partition ledger topic and wait for its previous
//!   owner's *release* (written after the hand-off) before the context
//!   reads its progress back.
//! - [`driver`]: the seeded schedule of joins, clean stops and kills, run
//!   with progress metadata and without (plain watermark commits).
//! - [`verify`]: the source filler and the sink's check.

pub mod claims;
pub mod driver;
pub mod events;
pub mod ledger;
pub mod saves;
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
