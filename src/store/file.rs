//! [`FileStore`]: one JSON file per task, replaced atomically on every
//! save, held by an advisory lock.

use super::{merged, without, OffsetStore, StoreError, FORMAT, VERSION};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::hash::Hash;
use std::io::{self, Read, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// An [`OffsetStore`] in one file, the embedded default (Kafka Connect's
/// standalone `FileOffsetBackingStore` keeps its offsets so too). With the
/// `serde` feature.
///
/// - **Atomic.** A save writes the merged offsets to `<file>.tmp`, syncs
///   it, renames it over the file and syncs the directory: after a crash at
///   any point the file holds the old offsets or the new ones, never a
///   torn mix.
/// - **One writer.** [`open`](Self::open) takes an advisory lock on
///   `<file>.lock` (and writes its process id there) for as long as the
///   store lives: a second store of the same file, in this process or
///   another, gets [`StoreError::Locked`] naming the holder. (The lock
///   goes with the store when it is dropped, or, if another thread of the
///   process is starting a child process at that moment, once the child
///   has started its program: it holds a copy of the lock file until
///   then.)
/// - **Readable.** The file is JSON: `{"format": "inflight-offsets",
///   "version": 1, "offsets": [{"partition": …, "offset": …}, …]}`, each
///   partition and offset as its `Serialize` writes it (a struct, a
///   string, a number), sorted by partition.
/// - **Never read as empty by mistake.** A missing file is "no offsets
///   yet"; an empty, truncated or corrupt file, one of another format, or
///   one written by a newer version is an error naming the file.
///
/// ```
/// use std::collections::HashMap;
/// use inflight::store::{FileStore, OffsetStore};
///
/// let dir = std::env::temp_dir().join(format!("inflight-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("offsets.json");
/// # let _ = std::fs::remove_file(&path);
/// let mut store: FileStore<String, (u64, u64)> = FileStore::open(&path).unwrap();
/// assert!(store.load().unwrap().is_empty()); // a first start
/// store.save(&HashMap::from([("orders.csv".to_string(), (12, 4_096))])).unwrap();
/// // A second store of the same file is refused while this one lives.
/// assert!(FileStore::<String, (u64, u64)>::open(&path).is_err());
/// drop(store);
/// let mut store: FileStore<String, (u64, u64)> = FileStore::open(&path).unwrap();
/// assert_eq!(store.load().unwrap()["orders.csv"], (12, 4_096));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct FileStore<P, O> {
    path: PathBuf,
    temp: PathBuf,
    /// Holds the advisory lock until the store is dropped.
    _lock: File,
    /// What the file holds (read at `open`, written by each save).
    stored: HashMap<P, O>,
    _types: PhantomData<fn() -> (P, O)>,
}

impl<P, O> FileStore<P, O>
where
    P: Serialize + DeserializeOwned + Hash + Eq + Clone,
    O: Serialize + DeserializeOwned + Clone,
{
    /// Opens the store kept in `path` (created by the first save; its
    /// directory must exist), taking its lock, and reads it.
    ///
    /// Errors: [`StoreError::Locked`] if another store holds it, and the
    /// errors of [`load`](OffsetStore::load) if the file cannot be read as
    /// offsets.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let lock_path = beside(&path, "lock");
        let io = |source| StoreError::Io {
            path: lock_path.clone(),
            source,
        };
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                // The holder's process id, if it got to write it.
                let _ = lock.read_to_string(&mut holder);
                return Err(StoreError::Locked {
                    path,
                    holder: holder.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(source)) => return Err(io(source)),
        }
        lock.set_len(0).map_err(io)?;
        write!(lock, "{}", std::process::id()).map_err(io)?;
        let stored = read(&path)?;
        Ok(Self {
            temp: beside(&path, "tmp"),
            path,
            _lock: lock,
            stored,
            _types: PhantomData,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `offsets` as the whole store, atomically (see the type's
    /// docs), then keeps them as what is stored.
    fn replace(&mut self, offsets: HashMap<P, O>) -> Result<(), StoreError> {
        let text = encode(&self.path, &offsets)?;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        let mut temp = File::create(&self.temp).map_err(io(&self.temp))?;
        temp.write_all(&text).map_err(io(&self.temp))?;
        temp.sync_all().map_err(io(&self.temp))?;
        drop(temp);
        fs::rename(&self.temp, &self.path).map_err(io(&self.path))?;
        // The file holds the new offsets from here on, whatever follows: a
        // later save merges into them (review 5: keeping the old map after
        // a failed directory sync would write older offsets back).
        self.stored = offsets;
        sync_dir(&self.path).map_err(io(&self.path))
    }
}

/// Makes a rename in `path`'s directory durable (Unix: a sync of the
/// directory; elsewhere the rename is left to the file system).
fn sync_dir(path: &Path) -> io::Result<()> {
    if cfg!(unix) {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

impl<P, O> OffsetStore<P, O> for FileStore<P, O>
where
    P: Serialize + DeserializeOwned + Hash + Eq + Clone,
    O: Serialize + DeserializeOwned + Clone,
{
    /// Reads the file again: what a restart would read.
    fn load(&mut self) -> Result<HashMap<P, O>, StoreError> {
        let stored = read(&self.path)?;
        self.stored = stored;
        Ok(self.stored.clone())
    }

    fn save(&mut self, offsets: &HashMap<P, O>) -> Result<(), StoreError> {
        if offsets.is_empty() {
            return Ok(()); // nothing moved: what is stored is durable
        }
        // User code (`Clone`, `Hash`, `Eq`, `Serialize`) runs before the
        // store changes: a panic leaves the file and `stored` as they were.
        let merged = merged(&self.stored, offsets);
        self.replace(merged)
    }

    fn remove(&mut self, partitions: &[P]) -> Result<(), StoreError> {
        let kept = without(&self.stored, partitions);
        if kept.len() == self.stored.len() {
            return Ok(());
        }
        self.replace(kept)
    }
}

/// `path` with `.suffix` added to its file name.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

/// The store's document for `offsets`, sorted by partition.
fn encode<P: Serialize, O: Serialize>(
    path: &Path,
    offsets: &HashMap<P, O>,
) -> Result<Vec<u8>, StoreError> {
    let encode_error = |e: serde_json::Error| StoreError::Encode {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut entries = Vec::with_capacity(offsets.len());
    for (partition, offset) in offsets {
        let partition = serde_json::to_value(partition).map_err(encode_error)?;
        let offset = serde_json::to_value(offset).map_err(encode_error)?;
        // Sorted by the partition's JSON: a stable, readable file.
        entries.push((partition.to_string(), partition, offset));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let entries = entries
        .into_iter()
        .map(|(_, partition, offset)| {
            let mut entry = Map::new();
            entry.insert("partition".into(), partition);
            entry.insert("offset".into(), offset);
            Value::Object(entry)
        })
        .collect();
    let mut document = Map::new();
    document.insert("format".into(), FORMAT.into());
    document.insert("version".into(), VERSION.into());
    document.insert("offsets".into(), Value::Array(entries));
    let mut text = serde_json::to_vec_pretty(&Value::Object(document)).map_err(encode_error)?;
    text.push(b'\n');
    Ok(text)
}

/// What the file at `path` stores: nothing if it does not exist, else its
/// offsets, or the error that says why they cannot be read.
fn read<P, O>(path: &Path) -> Result<HashMap<P, O>, StoreError>
where
    P: DeserializeOwned + Hash + Eq,
    O: DeserializeOwned,
{
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(source) => {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    decode(path, &bytes)
}

/// The offsets of a store's document (see [`read`]).
pub(crate) fn decode<P, O>(path: &Path, bytes: &[u8]) -> Result<HashMap<P, O>, StoreError>
where
    P: DeserializeOwned + Hash + Eq,
    O: DeserializeOwned,
{
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.is_empty() {
        return Err(corrupt("the file is empty".into()));
    }
    let document: Value =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    let Some(document) = document.as_object() else {
        return Err(StoreError::Foreign {
            path: path.to_path_buf(),
        });
    };
    if document.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(StoreError::Foreign {
            path: path.to_path_buf(),
        });
    }
    let version = document
        .get("version")
        .and_then(Value::as_u64)
        .ok_or_else(|| corrupt("no format version".into()))?;
    if version > VERSION {
        return Err(StoreError::Newer {
            path: path.to_path_buf(),
            version,
            supported: VERSION,
        });
    }
    if version == 0 {
        return Err(corrupt("format version 0".into()));
    }
    let entries = document
        .get("offsets")
        .and_then(Value::as_array)
        .ok_or_else(|| corrupt("no \"offsets\" list".into()))?;
    let mut offsets = HashMap::with_capacity(entries.len());
    let mut seen = HashSet::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let field = |name: &str| {
            entry
                .get(name)
                .cloned()
                .ok_or_else(|| corrupt(format!("entry {i} has no \"{name}\"")))
        };
        let (partition, offset) = (field("partition")?, field("offset")?);
        if !seen.insert(partition.to_string()) {
            return Err(corrupt(format!("partition {partition} is listed twice")));
        }
        let partition = serde_json::from_value(partition)
            .map_err(|e| corrupt(format!("the partition of entry {i}: {e}")))?;
        let offset = serde_json::from_value(offset)
            .map_err(|e| corrupt(format!("the offset of entry {i}: {e}")))?;
        offsets.insert(partition, offset);
    }
    Ok(offsets)
}
