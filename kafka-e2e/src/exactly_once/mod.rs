//! Exactly-once across kills (issue 42): transactional consume → transform
//! → produce workers, killed and fenced by a driver, then checked from the
//! raw log.
//!
//! - [`worker`]: one transactional worker (a task: some source partitions
//!   under a stable transactional id), its transaction loop in one
//!   function, its phases reported and gated for the driver.
//! - [`crate_worker`]: the same worker on the crate's `ExactlyOnce`.
//! - [`driver`]: the schedule of chosen and random SIGKILLs and zombies.
//! - [`wire`]: a minimal Kafka client (Fetch v4, read_uncommitted) over a
//!   `TcpStream` and a parser of record batch v2.
//! - [`filter`]: read_committed applied to that raw log by the verifier
//!   itself (this broker's fetch lists no aborted transactions, so no
//!   off-the-shelf read_committed consumer can be the judge); fails closed.
//! - [`verify`]: the verdict: duplicates, missing, open transactions, the
//!   group's offsets.
//! - [`scenario`]: `kafka-e2e exactly-once`, all of it in order.
//! - [`throughput`]: the transactional pipeline's records per second at a
//!   given transaction interval.

pub mod crate_worker;
pub mod driver;
pub mod filter;
pub mod scenario;
pub mod throughput;
pub mod verify;
pub mod wire;
pub mod worker;
