//! The verdict, from the raw log: every sink partition read with
//! read_uncommitted ([`wire`](super::wire)), read_committed applied by
//! [`filter`](super::filter), then counted per source record; the last
//! stable offset must equal the high watermark (no transaction left
//! open), and the group's committed offsets must be the source's end.

use super::filter::read_committed;
use super::wire::read_partition;
use crate::kafka::client_config;
use crate::Error;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::Duration;

/// What the log says.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Committed sink records (read_committed, applied here).
    pub records: usize,
    /// Copies of a source record past its first, among committed records.
    pub duplicates: usize,
    /// Source records with no committed copy.
    pub missing: usize,
    /// Aborted data records in the raw log.
    pub aborted: usize,
    pub commits: usize,
    pub aborts: usize,
    /// Everything else that is wrong, in words.
    pub problems: Vec<String>,
}

/// Reads the sink and the group's offsets back and judges them. `ends`:
/// the source's end offset per partition (its records are `p 0`, `p 1`,
/// …). A transaction left open in the log is an error, as the filter
/// fails closed.
pub fn verify(
    brokers: &str,
    source: &str,
    sink: &str,
    group: &str,
    ends: &[i64],
    within: Duration,
) -> Result<Verdict, Error> {
    let address = brokers.split(',').next().unwrap_or(brokers);
    let mut verdict = Verdict::default();
    for (p, &end) in ends.iter().enumerate() {
        let p = p as i32;
        let raw = read_partition(address, sink, p, within)?;
        if raw.last_stable_offset != raw.high_watermark {
            verdict.problems.push(format!(
                "sink [{p}]: last stable offset {} below the high watermark {}: a transaction is open",
                raw.last_stable_offset, raw.high_watermark
            ));
        }
        let committed =
            read_committed(&raw.batches).map_err(|e| Error::Other(format!("sink [{p}]: {e}")))?;
        verdict.aborted += committed.aborted;
        verdict.commits += committed.commits;
        verdict.aborts += committed.aborts;
        verdict.records += committed.records.len();
        let mut copies: HashMap<i64, usize> = HashMap::new();
        for record in &committed.records {
            let parsed = record
                .value
                .as_deref()
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| {
                    let (q, seq) = v.split_once(' ')?;
                    Some((q.parse::<i32>().ok()?, seq.parse::<i64>().ok()?))
                });
            match parsed {
                Some((q, seq)) if q == p && (0..end).contains(&seq) => {
                    *copies.entry(seq).or_default() += 1;
                }
                _ => verdict.problems.push(format!(
                    "sink [{p}] offset {}: unexpected record {:?}",
                    record.offset, record.value
                )),
            }
        }
        verdict.duplicates += copies.values().map(|&n| n - 1).sum::<usize>();
        verdict.missing += (0..end).filter(|seq| !copies.contains_key(seq)).count();
    }

    let consumer: BaseConsumer = client_config(brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| Error::kafka("creating a consumer", e))?;
    let mut wanted = TopicPartitionList::new();
    for p in 0..ends.len() as i32 {
        wanted.add_partition(source, p);
    }
    let committed = consumer
        .committed_offsets(wanted, within)
        .map_err(|e| Error::kafka(format!("the committed offsets of {group}"), e))?;
    for (p, &end) in ends.iter().enumerate() {
        let got = committed
            .find_partition(source, p as i32)
            .map(|e| e.offset());
        if got != Some(Offset::Offset(end)) {
            verdict.problems.push(format!(
                "group {group}: committed {got:?} for source [{p}], its end is {end}"
            ));
        }
    }
    Ok(verdict)
}
