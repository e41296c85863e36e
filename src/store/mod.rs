//! Keeping the offsets a source task commits: an [`OffsetStore`], the
//! commit cycle [`Tracker::flush_to`] (wait → save → commit), and two
//! stores: [`MemoryStore`] (tests, and a model of the contract) and, with
//! the `serde` feature, `FileStore` (one JSON file per task, written
//! atomically, locked against a second writer), the embedded default, as
//! Kafka Connect's `FileOffsetBackingStore` is. `inflight-rdkafka` adds a
//! store in a compacted Kafka topic.
//!
//! A store keeps, per source partition, the last offset committed. A save
//! is a *merge*: a flush returns only the partitions whose offsets moved,
//! and a partition absent from a save keeps what was stored. A partition
//! that ended (a file deleted, a table dropped) is removed explicitly.
//!
//! ```
//! use std::time::Duration;
//! use inflight::store::{MemoryStore, OffsetStore};
//! use inflight::Tracker;
//!
//! let tracker = Tracker::new();
//! let mut store = MemoryStore::new();
//! let a = tracker.send("orders.csv", 41_u64).unwrap();
//! let b = tracker.send("users.csv", 7_u64).unwrap();
//! tracker.ack(a).unwrap();
//! tracker.ack(b).unwrap();
//! // Wait for what was sent, save it (durably), then commit the flush.
//! tracker.flush_to(&mut store, Duration::from_secs(10)).unwrap();
//! let c = tracker.send("orders.csv", 42).unwrap();
//! tracker.ack(c).unwrap();
//! tracker.flush_to(&mut store, Duration::from_secs(10)).unwrap();
//! // users.csv did not move, and kept its offset.
//! let stored = store.load().unwrap();
//! assert_eq!((stored["orders.csv"], stored["users.csv"]), (42, 7));
//! ```

#[cfg(feature = "serde")]
mod file;

#[cfg(feature = "serde")]
pub use file::FileStore;

use crate::mode::Mode;
use crate::{BeginFlushError, FlushError, Tracker};
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::path::PathBuf;
use std::time::Duration;

/// Where a source task keeps the offsets it committed, by source
/// partition: what it reads back when it starts, to resume after them.
///
/// The contract, which `FileStore` (the `serde` feature) and
/// `inflight-rdkafka`'s topic store
/// keep and [`MemoryStore`] models:
/// - [`save`](Self::save) merges: the partitions given take their new
///   offsets, every other partition keeps its own. It returns `Ok` only
///   once the merged offsets are durable (a later [`load`](Self::load),
///   in this process or after a crash, returns them). On `Err` each
///   partition holds either its old offset or its new one, never a mix of
///   the two (a `FileStore` holds all old or all new; a store that writes
///   a record per partition, as the Kafka topic store does, may hold some
///   partitions at their old offsets and others at their new ones): each is
///   a safe place to resume.
/// - [`remove`](Self::remove) forgets partitions (a source partition that
///   ended), durably, as `save` does.
/// - [`load`](Self::load) returns what was stored; nothing (an empty map)
///   only when nothing was ever saved, never because what was stored
///   could not be read.
///
/// Use it with [`Tracker::flush_to`] (a barrier flush per commit), or
/// save what [`committable`](crate::WatermarkTracker::committable) returns
/// on a watermark tracker.
pub trait OffsetStore<P, O> {
    /// The offsets stored, by partition (empty before the first save).
    fn load(&mut self) -> Result<HashMap<P, O>, StoreError>;

    /// Merges `offsets` into what is stored, and returns once it is
    /// durable.
    fn save(&mut self, offsets: &HashMap<P, O>) -> Result<(), StoreError>;

    /// Forgets `partitions`, durably.
    fn remove(&mut self, partitions: &[P]) -> Result<(), StoreError>;
}

/// An [`OffsetStore`] in memory: durable for as long as the process runs.
/// For tests, and as the contract's model.
#[derive(Debug, Clone)]
pub struct MemoryStore<P, O> {
    offsets: HashMap<P, O>,
}

impl<P, O> MemoryStore<P, O> {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            offsets: HashMap::new(),
        }
    }
}

impl<P, O> Default for MemoryStore<P, O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Hash + Eq + Clone, O: Clone> OffsetStore<P, O> for MemoryStore<P, O> {
    fn load(&mut self) -> Result<HashMap<P, O>, StoreError> {
        Ok(self.offsets.clone())
    }

    fn save(&mut self, offsets: &HashMap<P, O>) -> Result<(), StoreError> {
        // User code (`Clone`, `Hash`, `Eq`) before the store changes: a
        // panic leaves it as it was.
        let merged = merged(&self.offsets, offsets);
        self.offsets = merged;
        Ok(())
    }

    fn remove(&mut self, partitions: &[P]) -> Result<(), StoreError> {
        let kept = without(&self.offsets, partitions);
        self.offsets = kept;
        Ok(())
    }
}

/// `stored` with `offsets` merged in (a new map: `stored` is untouched if
/// user code panics).
pub(crate) fn merged<P: Hash + Eq + Clone, O: Clone>(
    stored: &HashMap<P, O>,
    offsets: &HashMap<P, O>,
) -> HashMap<P, O> {
    let mut merged = stored.clone();
    for (partition, offset) in offsets {
        merged.insert(partition.clone(), offset.clone());
    }
    merged
}

/// `stored` without `partitions` (a new map, as for [`merged`]).
pub(crate) fn without<P: Hash + Eq + Clone, O: Clone>(
    stored: &HashMap<P, O>,
    partitions: &[P],
) -> HashMap<P, O> {
    let mut kept = stored.clone();
    for partition in partitions {
        kept.remove(partition);
    }
    kept
}

/// Why a store could not load, save or remove offsets. Each names the
/// store's file (or topic) where it has one.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// Reading or writing failed.
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Another process (or another store in this one) holds the store:
    /// two writers would lose each other's saves.
    Locked {
        /// The store's file.
        path: PathBuf,
        /// The process id the holder wrote in the lock file, if readable.
        holder: Option<u32>,
    },
    /// What is stored cannot be read as offsets: an empty or truncated
    /// file, bad JSON, a missing field, a partition or offset of another
    /// type. Never read as "no offsets": that would restart the source
    /// from its beginning (duplicates) or its end (loss).
    Corrupt {
        /// The file (or topic).
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is JSON, but not an offset store of this crate.
    Foreign {
        /// The file.
        path: PathBuf,
    },
    /// The store was written by a newer version of this crate, in a
    /// format this one does not know.
    Newer {
        /// The file.
        path: PathBuf,
        /// Its format version.
        version: u64,
        /// The newest this crate reads.
        supported: u64,
    },
    /// A partition or offset could not be encoded (its `Serialize` failed).
    Encode {
        /// The file (or topic).
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// A store of another kind (`inflight-rdkafka`'s topic store) failed.
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => {
                write!(f, "offset store {}: {source}", path.display())
            }
            Self::Locked { path, holder: Some(pid) } => write!(
                f,
                "offset store {} is held by process {pid}: one task, one store",
                path.display()
            ),
            Self::Locked { path, holder: None } => write!(
                f,
                "offset store {} is held by another process: one task, one store",
                path.display()
            ),
            Self::Corrupt { path, reason } => write!(
                f,
                "offset store {} is corrupt ({reason}); not read as empty: restore it or remove it on purpose",
                path.display()
            ),
            Self::Foreign { path } => write!(
                f,
                "{} is not an inflight offset store (no \"format\": \"{}\")",
                path.display(),
                FORMAT
            ),
            Self::Newer {
                path,
                version,
                supported,
            } => write!(
                f,
                "offset store {} has format version {version}; this inflight reads up to {supported}",
                path.display()
            ),
            Self::Encode { path, reason } => {
                write!(f, "offset store {}: cannot encode: {reason}", path.display())
            }
            Self::Other(error) => write!(f, "offset store: {error}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Other(error) => Some(&**error),
            _ => None,
        }
    }
}

/// The `"format"` of a store's JSON document.
pub const FORMAT: &str = "inflight-offsets";

/// The format version this crate writes, and the newest it reads.
pub const VERSION: u64 = 1;

/// Why [`Tracker::flush_to`] did not commit. The flush was aborted: its
/// records are covered by the next one, as after any aborted flush.
#[derive(Debug)]
#[non_exhaustive]
pub enum CommitError {
    /// Another flush is in progress.
    Busy(BeginFlushError),
    /// The flush did not produce offsets: a covered record failed, the
    /// wait timed out, or it was interrupted.
    Flush(FlushError),
    /// The store refused the offsets: nothing was committed.
    Store(StoreError),
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Busy(e) => write!(f, "commit: {e}"),
            Self::Flush(e) => write!(f, "commit: {e}"),
            Self::Store(e) => write!(f, "commit: {e}"),
        }
    }
}

impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Busy(e) => Some(e),
            Self::Flush(e) => Some(e),
            Self::Store(e) => Some(e),
        }
    }
}

impl<P, O, M: Mode> Tracker<P, O, M>
where
    P: Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    /// One commit of a source task: a barrier flush of everything sent so
    /// far ([`begin_flush`](Self::begin_flush)), its offsets waited for
    /// (at most `timeout`), saved into `store` (which returns once they are
    /// durable), and only then the flush committed. Returns the offsets
    /// saved: the partitions that moved since the last commit.
    ///
    /// On any error nothing is committed and the flush is aborted (its
    /// records are covered by the next one); a store that failed holds,
    /// for each partition, its old offset or its new one (see
    /// [`OffsetStore`]), either a safe place to restart from.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::store::{CommitError, MemoryStore, OffsetStore};
    /// use inflight::{FlushError, Tracker};
    ///
    /// let tracker = Tracker::new();
    /// let mut store = MemoryStore::new();
    /// let stuck = tracker.send("p", 1_u64).unwrap();
    /// let err = tracker.flush_to(&mut store, Duration::from_millis(1)).unwrap_err();
    /// assert!(matches!(err, CommitError::Flush(FlushError::Timeout { .. })));
    /// assert!(store.load().unwrap().is_empty()); // nothing saved
    /// tracker.ack(stuck).unwrap();
    /// let saved = tracker.flush_to(&mut store, Duration::from_secs(10)).unwrap();
    /// assert_eq!(saved["p"], 1);
    /// ```
    pub fn flush_to<S>(
        &self,
        store: &mut S,
        timeout: Duration,
    ) -> Result<HashMap<P, O>, CommitError>
    where
        S: OffsetStore<P, O> + ?Sized,
    {
        let mut flush = self.begin_flush().map_err(CommitError::Busy)?;
        let offsets = flush.wait(timeout).map_err(CommitError::Flush)?;
        // The flush is dropped (aborted) if the save fails or panics.
        store.save(&offsets).map_err(CommitError::Store)?;
        flush.commit().map_err(CommitError::Flush)?;
        Ok(offsets)
    }
}
