//! The ledger: each source partition's progress, and who owns it, as keyed
//! records in a one-partition topic (the last entry per partition tells).
//!
//! tansu 0.6.0 stores a commit's metadata but returns none, so progress
//! beyond the committed offset cannot be read back from the group; and it
//! has no join barrier and no commit fencing, so a partition can have a new
//! owner while its old owner still finishes it. The ledger covers both, the
//! way Kafka Connect's offsets topic keeps a source's offsets:
//!
//! - **Claim** (`C`): written by a member that was assigned the partition,
//!   before it consumes anything of it.
//! - **Progress** (`P`): the owner's progress, every 100 ms when it changed:
//!   the next offset and [`Progress::encode`] (empty without metadata).
//!   Written, and its delivery awaited, before the same offset is committed
//!   to the group (so the group's offsets stay right for other tools).
//! - **Release** (`R`): the owner's last entry for the partition, written
//!   by the hand-off on revocation after `drain_partition`, before
//!   `revoke`.
//!
//! A claimant owns the partition once the first claim after the latest
//! release is its own ([`decide`]); it then resumes from the latest
//! progress or release. A claim made before that release is stale and is
//! made again. A killed owner never releases: the claimant waits for a
//! deadline, then resumes from the killed owner's last progress (its
//! records after it are redone: the duplicates after kills). With a real
//! Kafka broker the join barrier gives the same order; this is a hand-off
//! protocol on top of tansu's group, not a coordinator.
//!
//! Entry: key `<partition>`, value `<kind> <owner> <next> <metadata>`; the
//! owner is `<worker>.<assignment number>`.

use crate::kafka;
use crate::keyed::KeyedWriter;
use crate::Error;
use inflight::Progress;
use std::time::Duration;

/// What an entry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The owner was assigned the partition and asks for it.
    Claim,
    /// The owner's progress.
    Progress,
    /// The owner's final progress: it handed the partition off.
    Release,
}

impl Kind {
    fn tag(self) -> char {
        match self {
            Kind::Claim => 'C',
            Kind::Progress => 'P',
            Kind::Release => 'R',
        }
    }
}

/// One ledger record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The source partition.
    pub partition: i32,
    /// Claim, progress or release.
    pub kind: Kind,
    /// `<worker>.<assignment number>`.
    pub owner: String,
    /// The next offset to read (Kafka's committed offset).
    pub next: u64,
    /// [`Progress::encode`], empty without metadata (and in claims).
    pub metadata: String,
}

impl Entry {
    /// The record's value.
    pub fn value(&self) -> String {
        format!(
            "{} {} {} {}",
            self.kind.tag(),
            self.owner,
            self.next,
            self.metadata
        )
    }

    /// An entry from a record's key and value; `None` if malformed.
    pub fn parse(key: &[u8], value: &[u8]) -> Option<Entry> {
        let partition = std::str::from_utf8(key).ok()?.parse().ok()?;
        let mut fields = std::str::from_utf8(value).ok()?.splitn(4, ' ');
        let kind = match fields.next()? {
            "C" => Kind::Claim,
            "P" => Kind::Progress,
            "R" => Kind::Release,
            _ => return None,
        };
        let owner = fields.next()?.to_string();
        let next = fields.next()?.parse().ok()?;
        let metadata = fields.next()?.to_string();
        Some(Entry {
            partition,
            kind,
            owner,
            next,
            metadata,
        })
    }

    /// The progress this entry records: with `metadata`, decoded (what does
    /// not decode counts as nothing done past `next`); without, `next`
    /// alone.
    pub fn progress(&self, metadata: bool) -> Progress {
        if metadata {
            Progress::decode(self.next, &self.metadata).unwrap_or_else(|_| Progress::at(self.next))
        } else {
            Progress::at(self.next)
        }
    }
}

/// Whether `me` may take `partition` over, from the ledger's entries in
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The first claim after the latest release is `me`'s: resume from
    /// this entry's progress (`None`: the partition never had any).
    Granted(Option<Entry>),
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
        _ => Decision::Granted(latest_progress(entries, partition)),
    }
}

/// The latest progress or release entry of `partition`.
pub fn latest_progress(entries: &[Entry], partition: i32) -> Option<Entry> {
    entries
        .iter()
        .rev()
        .find(|e| e.partition == partition && e.kind != Kind::Claim)
        .cloned()
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

/// `resumed` (read from the ledger on assignment) and `tracked` (the
/// tracker's progress since: its first record is `resumed.next()`) as one:
/// everything either says is done. The tracker skips nothing itself, so
/// offsets `resumed` had done past the tracker's last record would
/// otherwise be forgotten at the next commit.
pub fn merge(resumed: &Progress, tracked: &Progress) -> Progress {
    let end_of = |p: &Progress| p.done_ranges().last().map_or(p.next(), |r| r.end);
    let end = end_of(resumed).max(end_of(tracked));
    let base = resumed.next().max(tracked.next());
    if end_of(resumed) <= tracked.next() {
        return tracked.clone();
    }
    let mut done: Vec<std::ops::Range<u64>> = resumed
        .done_ranges()
        .chain(tracked.done_ranges())
        .chain(std::iter::once(0..base))
        .collect();
    done.sort_by_key(|r| r.start);
    let mut pending = Vec::new();
    let mut at = 0; // everything below `at` is accounted for
    for range in done {
        if range.start > at {
            pending.extend(at..range.start);
        }
        at = at.max(range.end);
    }
    match pending.first() {
        None => Progress::at(end),
        Some(&next) => {
            Progress::from_pending(next, end, pending).unwrap_or_else(|| tracked.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(partition: i32, kind: Kind, owner: &str, next: u64) -> Entry {
        Entry {
            partition,
            kind,
            owner: owner.into(),
            next,
            metadata: String::new(),
        }
    }

    #[test]
    fn an_entry_round_trips() {
        let progress = Progress::from_pending(10, 20, [10, 15]).unwrap();
        let e = Entry {
            partition: 3,
            kind: Kind::Release,
            owner: "w2.4".into(),
            next: 10,
            metadata: progress.encode(),
        };
        let back = Entry::parse(b"3", e.value().as_bytes()).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.progress(true), progress);
        assert_eq!(back.progress(false), Progress::at(10));
        let claim = entry(0, Kind::Claim, "w1.1", 0);
        assert_eq!(Entry::parse(b"0", claim.value().as_bytes()), Some(claim));
        assert_eq!(Entry::parse(b"0", b"X w1.1 0 "), None);
    }

    #[test]
    fn the_first_claim_after_the_latest_release_owns_the_partition() {
        use Kind::*;
        let mut log = vec![];
        assert_eq!(decide(&log, 0, "a.1"), Decision::Claim);
        log.push(entry(0, Claim, "a.1", 0));
        assert_eq!(decide(&log, 0, "a.1"), Decision::Granted(None));
        log.push(entry(0, Progress, "a.1", 50));
        // b is assigned while a still works: its claim waits for a.
        log.push(entry(0, Claim, "b.1", 0));
        let wait = Decision::Wait {
            holder: "a.1".into(),
        };
        assert_eq!(decide(&log, 0, "b.1"), wait);
        log.push(entry(0, Progress, "a.1", 60));
        log.push(entry(0, Release, "a.1", 70));
        // b's claim came before the release: claim again.
        assert_eq!(decide(&log, 0, "b.1"), Decision::Claim);
        log.push(entry(0, Claim, "c.1", 0));
        log.push(entry(0, Claim, "b.1", 0));
        assert_eq!(
            decide(&log, 0, "b.1"),
            Decision::Wait {
                holder: "c.1".into()
            }
        );
        let granted = decide(&log, 0, "c.1");
        assert_eq!(
            granted,
            Decision::Granted(Some(entry(0, Release, "a.1", 70)))
        );
        // Another partition is independent.
        assert_eq!(decide(&log, 1, "b.1"), Decision::Claim);
    }

    #[test]
    fn merge_keeps_what_the_resumed_progress_had_done() {
        // Resumed: next 100, 101..150 and 160..170 done.
        let resumed = Progress::from_pending(100, 170, [100].into_iter().chain(150..160)).unwrap();
        // The tracker sent 100 (acked) and 150 (in flight), skipping 101..150.
        let tracked = Progress::from_pending(150, 151, [150]).unwrap();
        let merged = merge(&resumed, &tracked);
        assert_eq!(merged.next(), 150);
        assert!(merged.is_done(149) && !merged.is_done(150) && !merged.is_done(155));
        assert!(merged.is_done(165) && !merged.is_done(170));
        // All acked up to 159: the resumed ranges join on.
        let tracked = Progress::at(160);
        assert_eq!(merge(&resumed, &tracked), Progress::at(170));
        // Past the resumed ranges: the tracker alone.
        let tracked = Progress::from_pending(180, 190, [180]).unwrap();
        assert_eq!(merge(&resumed, &tracked), tracked);
        // Nothing resumed beyond next.
        let tracked = Progress::from_pending(100, 105, [100, 103]).unwrap();
        assert_eq!(merge(&Progress::at(100), &tracked), tracked);
    }
}
