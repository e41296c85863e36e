//! The ledger: who owns each source partition, as keyed records in a
//! one-partition topic (the last entries per partition tell).
//!
//! tansu 0.6.0 has no join barrier and no commit fencing, so a partition
//! can have a new owner while its old owner still hands it off. The
//! workers' progress is kept by `inflight_rdkafka`'s [`TopicStore`]; the
//! ledger only orders the owners, as a hand-off protocol on top of tansu's
//! group (not a coordinator):
//!
//! - **Claim** (`C`): written by a member that was assigned the partition,
//!   before the context reads its progress back.
//! - **Release** (`R`): the owner's last entry for the partition, written
//!   after the context's hand-off (`drain_partition`, the final commit,
//!   saved in the store first, then `revoke`).
//!
//! A claimant owns the partition once the first claim after the latest
//! release is its own ([`decide`]); it then reads the progress back, which
//! the release follows. A claim made before that release is stale and is
//! made again. A killed owner never releases: the claimant waits for a
//! deadline, then resumes from the killed owner's last saved progress (its
//! records after it are redone: the duplicates after kills). With a real
//! Kafka broker the join barrier gives the same order.
//!
//! Entry: key `<partition>`, value `<kind> <owner>`; the owner is
//! `<worker>.<assignment number>`.
//!
//! [`TopicStore`]: inflight_rdkafka::TopicStore

use crate::kafka;
use crate::keyed::KeyedWriter;
use crate::Error;
use std::time::Duration;

/// What an entry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The owner was assigned the partition and asks for it.
    Claim,
    /// The owner handed the partition off.
    Release,
}

/// One ledger record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The source partition.
    pub partition: i32,
    /// Claim or release.
    pub kind: Kind,
    /// `<worker>.<assignment number>`.
    pub owner: String,
}

impl Entry {
    /// The record's value.
    pub fn value(&self) -> String {
        let tag = match self.kind {
            Kind::Claim => 'C',
            Kind::Release => 'R',
        };
        format!("{tag} {}", self.owner)
    }

    /// An entry from a record's key and value; `None` if malformed.
    pub fn parse(key: &[u8], value: &[u8]) -> Option<Entry> {
        let partition = std::str::from_utf8(key).ok()?.parse().ok()?;
        let (tag, owner) = std::str::from_utf8(value).ok()?.split_once(' ')?;
        let kind = match tag {
            "C" => Kind::Claim,
            "R" => Kind::Release,
            _ => return None,
        };
        if owner.is_empty() || owner.contains(' ') {
            return None;
        }
        Some(Entry {
            partition,
            kind,
            owner: owner.to_string(),
        })
    }
}

/// Whether `me` may take `partition` over, from the ledger's entries in
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The first claim after the latest release is `me`'s.
    Granted,
    /// Another claim came first; wait for its owner's release.
    Wait { holder: String },
    /// `me` has no claim after the latest release: claim (again).
    Claim,
}

/// See [`Decision`].
pub fn decide(entries: &[Entry], partition: i32, me: &str) -> Decision {
    let mine: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.partition == partition)
        .collect();
    let released = mine.iter().rposition(|e| e.kind == Kind::Release);
    let after = released.map_or(0, |i| i + 1);
    let claims = || mine[after..].iter().filter(|e| e.kind == Kind::Claim);
    if !claims().any(|e| e.owner == me) {
        return Decision::Claim;
    }
    match claims().next() {
        Some(first) if first.owner != me => Decision::Wait {
            holder: first.owner.clone(),
        },
        _ => Decision::Granted,
    }
}

/// Reads the whole ledger, in order.
pub fn read(brokers: &str, topic: &str, deadline: Duration) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::new();
    for record in kafka::read_topic(brokers, topic, 1, deadline)? {
        let entry = record
            .key
            .as_deref()
            .zip(record.payload.as_deref())
            .and_then(|(k, v)| Entry::parse(k, v))
            .ok_or_else(|| {
                Error::Other(format!(
                    "ledger {topic}: unreadable record at offset {}",
                    record.offset
                ))
            })?;
        entries.push(entry);
    }
    Ok(entries)
}

/// Writes ledger entries, each write awaited until the broker has it.
pub struct Writer(KeyedWriter);

impl Writer {
    /// A writer to `topic` (one partition).
    pub fn new(brokers: &str, topic: &str) -> Result<Writer, Error> {
        KeyedWriter::new(brokers, topic, "ledger").map(Writer)
    }

    /// Writes `entries` and returns once the broker has them all, or fails.
    pub fn write(&mut self, entries: &[Entry], timeout: Duration) -> Result<(), Error> {
        let records: Vec<(String, String)> = entries
            .iter()
            .map(|entry| (entry.partition.to_string(), entry.value()))
            .collect();
        self.0.write(&records, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(partition: i32, kind: Kind, owner: &str) -> Entry {
        Entry {
            partition,
            kind,
            owner: owner.into(),
        }
    }

    #[test]
    fn an_entry_round_trips() {
        for e in [
            entry(3, Kind::Release, "w2.4"),
            entry(0, Kind::Claim, "w1.1"),
        ] {
            let key = e.partition.to_string();
            assert_eq!(Entry::parse(key.as_bytes(), e.value().as_bytes()), Some(e));
        }
        assert_eq!(Entry::parse(b"0", b"X w1.1"), None);
        assert_eq!(Entry::parse(b"0", b"C "), None);
    }

    #[test]
    fn the_first_claim_after_the_latest_release_owns_the_partition() {
        use Kind::*;
        let mut log = vec![];
        assert_eq!(decide(&log, 0, "a.1"), Decision::Claim);
        log.push(entry(0, Claim, "a.1"));
        assert_eq!(decide(&log, 0, "a.1"), Decision::Granted);
        // b is assigned while a still works: its claim waits for a.
        log.push(entry(0, Claim, "b.1"));
        let wait = Decision::Wait {
            holder: "a.1".into(),
        };
        assert_eq!(decide(&log, 0, "b.1"), wait);
        log.push(entry(0, Release, "a.1"));
        // b's claim came before the release: claim again.
        assert_eq!(decide(&log, 0, "b.1"), Decision::Claim);
        log.push(entry(0, Claim, "c.1"));
        log.push(entry(0, Claim, "b.1"));
        assert_eq!(
            decide(&log, 0, "b.1"),
            Decision::Wait {
                holder: "c.1".into()
            }
        );
        assert_eq!(decide(&log, 0, "c.1"), Decision::Granted);
        // Another partition is independent.
        assert_eq!(decide(&log, 1, "b.1"), Decision::Claim);
    }
}
