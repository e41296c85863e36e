//! read_committed, applied to the raw log by the verifier itself.
//!
//! This broker's fetch never lists aborted transactions, so a consumer
//! with `isolation.level=read_committed` (librdkafka's included) delivers
//! aborted records. The filter here needs only the log: per producer id,
//! the data records of a transaction are held until that producer id's
//! next control batch; a COMMIT marker keeps them, an ABORT drops them.
//! It fails closed: a transaction with no marker after it, a producer id
//! whose epoch changes inside one transaction, or a control batch that is
//! not a marker is an error, not a guess.

use super::wire::{Batch, RawRecord};
use crate::Error;
use std::collections::BTreeMap;

/// A control record's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

/// What a control batch says: its one record's key is `version: i16,
/// type: i16` (0 ABORT, 1 COMMIT).
pub fn marker(batch: &Batch) -> Result<Marker, Error> {
    let at = batch.base_offset;
    let [record] = batch.records.as_slice() else {
        return Err(Error::Other(format!(
            "raw log: control batch at {at} holds {} records, not one",
            batch.records.len()
        )));
    };
    match record.key.as_deref() {
        Some([_, _, 0, 0, ..]) => Ok(Marker::Abort),
        Some([_, _, 0, 1, ..]) => Ok(Marker::Commit),
        key => Err(Error::Other(format!(
            "raw log: control record at {at}: key {key:?} is neither ABORT nor COMMIT"
        ))),
    }
}

/// One partition seen through read_committed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The records a read_committed consumer must see, in offset order.
    pub records: Vec<RawRecord>,
    /// Data records dropped because their transaction ended in ABORT.
    pub aborted: usize,
    /// Markers seen.
    pub commits: usize,
    pub aborts: usize,
}

/// A transaction's records, held until its marker.
struct Open {
    epoch: i16,
    first: i64,
    records: Vec<RawRecord>,
}

/// Applies read_committed to one partition's batches (in log order).
pub fn read_committed(batches: &[Batch]) -> Result<Committed, Error> {
    let mut out = Committed::default();
    // BTreeMap: the error names the open producers in a stable order.
    let mut open: BTreeMap<i64, Open> = BTreeMap::new();
    for batch in batches {
        let pid = batch.producer_id;
        if batch.control() {
            let ended = open.remove(&pid);
            match marker(batch)? {
                Marker::Commit => {
                    out.commits += 1;
                    if let Some(ended) = ended {
                        out.records.extend(ended.records);
                    }
                }
                Marker::Abort => {
                    out.aborts += 1;
                    out.aborted += ended.map_or(0, |ended| ended.records.len());
                }
            }
        } else if batch.transactional() {
            let entry = open.entry(pid).or_insert_with(|| Open {
                epoch: batch.producer_epoch,
                first: batch.base_offset,
                records: Vec::new(),
            });
            if entry.epoch != batch.producer_epoch {
                return Err(Error::Other(format!(
                    "raw log: producer id {pid}: a batch of epoch {} at {} inside a transaction of epoch {} (from {}) with no marker between",
                    batch.producer_epoch, batch.base_offset, entry.epoch, entry.first
                )));
            }
            entry.records.extend(batch.records.iter().cloned());
        } else {
            out.records.extend(batch.records.iter().cloned());
        }
    }
    if !open.is_empty() {
        let list: Vec<String> = open
            .iter()
            .map(|(pid, o)| {
                format!(
                    "producer id {pid} epoch {}: {} records from offset {}",
                    o.epoch,
                    o.records.len(),
                    o.first
                )
            })
            .collect();
        return Err(Error::Other(format!(
            "raw log: transactions with no COMMIT or ABORT after them (left open): {}",
            list.join("; ")
        )));
    }
    out.records.sort_by_key(|r| r.offset);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::wire::{parse_batches, CONTROL, TRANSACTIONAL};
    use super::*;

    fn varint(out: &mut Vec<u8>, v: i64) {
        let mut raw = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            let byte = (raw & 0x7f) as u8;
            raw >>= 7;
            if raw == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn var_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
        match bytes {
            None => varint(out, -1),
            Some(b) => {
                varint(out, b.len() as i64);
                out.extend(b);
            }
        }
    }

    /// A record's key and value.
    type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

    /// Record batch v2 bytes, as a broker stores them (CRC left 0: the
    /// parser does not check it).
    fn encode(
        base: i64,
        attributes: i16,
        pid: i64,
        epoch: i16,
        records: &[KeyValue<'_>],
    ) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend(0_i32.to_be_bytes()); // leader epoch
        body.push(2); // magic
        body.extend(0_i32.to_be_bytes()); // crc
        body.extend(attributes.to_be_bytes());
        body.extend((records.len() as i32 - 1).to_be_bytes());
        body.extend(1_000_i64.to_be_bytes());
        body.extend(1_000_i64.to_be_bytes());
        body.extend(pid.to_be_bytes());
        body.extend(epoch.to_be_bytes());
        body.extend(0_i32.to_be_bytes()); // base sequence
        body.extend((records.len() as i32).to_be_bytes());
        for (delta, (key, value)) in records.iter().enumerate() {
            let mut record = vec![0]; // attributes
            varint(&mut record, 0); // timestamp delta
            varint(&mut record, delta as i64);
            var_bytes(&mut record, *key);
            var_bytes(&mut record, *value);
            varint(&mut record, 1); // one header, skipped by the parser
            var_bytes(&mut record, Some(b"h"));
            var_bytes(&mut record, None);
            varint(&mut body, record.len() as i64);
            body.extend(record);
        }
        let mut out = base.to_be_bytes().to_vec();
        out.extend((body.len() as i32).to_be_bytes());
        out.extend(body);
        out
    }

    /// A log built batch by batch, offsets assigned in order.
    #[derive(Default)]
    struct Log {
        bytes: Vec<u8>,
        next: i64,
    }

    impl Log {
        fn data(&mut self, pid: i64, epoch: i16, values: &[&str]) -> &mut Self {
            let attributes = if pid < 0 { 0 } else { TRANSACTIONAL };
            let records: Vec<_> = values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
            self.bytes
                .extend(encode(self.next, attributes, pid, epoch, &records));
            self.next += values.len() as i64;
            self
        }

        fn marker(&mut self, pid: i64, epoch: i16, kind: i16) -> &mut Self {
            let mut key = 0_i16.to_be_bytes().to_vec();
            key.extend(kind.to_be_bytes());
            let value = [0_u8; 6];
            self.bytes.extend(encode(
                self.next,
                TRANSACTIONAL | CONTROL,
                pid,
                epoch,
                &[(Some(&key), Some(&value))],
            ));
            self.next += 1;
            self
        }

        fn commit(&mut self, pid: i64, epoch: i16) -> &mut Self {
            self.marker(pid, epoch, 1)
        }

        fn abort(&mut self, pid: i64, epoch: i16) -> &mut Self {
            self.marker(pid, epoch, 0)
        }

        fn read(&self) -> Result<Committed, Error> {
            read_committed(&parse_batches(&self.bytes)?)
        }
    }

    fn values(c: &Committed) -> Vec<(i64, String)> {
        c.records
            .iter()
            .map(|r| {
                let v = r.value.as_deref().unwrap_or_default();
                (r.offset, String::from_utf8_lossy(v).into_owned())
            })
            .collect()
    }

    #[test]
    fn a_committed_transaction_is_kept() {
        let c = Log::default()
            .data(7, 0, &["a", "b"])
            .data(7, 0, &["c"])
            .commit(7, 0)
            .read()
            .unwrap();
        assert_eq!(
            values(&c),
            [(0, "a".into()), (1, "b".into()), (2, "c".into())]
        );
        assert_eq!((c.aborted, c.commits, c.aborts), (0, 1, 0));
    }

    #[test]
    fn an_aborted_transaction_is_dropped_and_counted() {
        let c = Log::default()
            .data(7, 0, &["a", "b"])
            .abort(7, 0)
            .data(7, 0, &["a"])
            .commit(7, 0)
            .read()
            .unwrap();
        assert_eq!(values(&c), [(3, "a".into())]);
        assert_eq!((c.aborted, c.commits, c.aborts), (2, 1, 1));
    }

    #[test]
    fn a_transaction_with_no_marker_fails_the_check() {
        let e = Log::default()
            .data(7, 0, &["a"])
            .commit(7, 0)
            .data(7, 1, &["b", "c"])
            .read()
            .unwrap_err()
            .to_string();
        assert!(e.contains("left open"), "{e}");
        assert!(
            e.contains("producer id 7 epoch 1: 2 records from offset 2"),
            "{e}"
        );
    }

    #[test]
    fn a_new_epoch_inside_an_open_transaction_fails_the_check() {
        let e = Log::default()
            .data(7, 0, &["a"])
            .data(7, 1, &["b"])
            .commit(7, 1)
            .read()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("epoch 1 at 1 inside a transaction of epoch 0"),
            "{e}"
        );
    }

    #[test]
    fn interleaved_producers_end_on_their_own_markers() {
        // pid 1 commits, pid 2 aborts (its marker written by a successor's
        // init: a later epoch), a plain record between them is kept.
        let c = Log::default()
            .data(1, 0, &["1a"])
            .data(2, 3, &["2a", "2b"])
            .data(-1, -1, &["plain"])
            .data(1, 0, &["1b"])
            .data(2, 3, &["2c"])
            .abort(2, 4)
            .data(1, 0, &["1c"])
            .commit(1, 0)
            .data(2, 4, &["2a"])
            .commit(2, 4)
            .read()
            .unwrap();
        assert_eq!(
            values(&c),
            [
                (0, "1a".into()),
                (3, "plain".into()),
                (4, "1b".into()),
                (7, "1c".into()),
                (9, "2a".into()),
            ]
        );
        assert_eq!((c.aborted, c.commits, c.aborts), (3, 2, 1));
    }

    #[test]
    fn a_marker_with_no_records_before_it_is_fine() {
        // The ABORT an init_transactions writes for an empty transaction.
        let c = Log::default()
            .abort(5, 1)
            .data(-1, -1, &["x"])
            .read()
            .unwrap();
        assert_eq!(values(&c), [(1, "x".into())]);
        assert_eq!((c.aborted, c.aborts), (0, 1));
    }

    #[test]
    fn a_compressed_batch_is_a_clear_error() {
        let bytes = encode(0, 1, -1, -1, &[(None, Some(b"x"))]);
        let e = parse_batches(&bytes).unwrap_err().to_string();
        assert!(e.contains("compressed (codec 1)"), "{e}");
    }

    #[test]
    fn a_batch_cut_off_at_the_end_is_left_out() {
        let mut bytes = encode(0, 0, -1, -1, &[(Some(b"k"), None)]);
        let second = encode(1, 0, -1, -1, &[(None, Some(b"v"))]);
        bytes.extend(&second[..second.len() - 3]);
        let batches = parse_batches(&bytes).unwrap();
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].records[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(batches[0].records[0].value, None);
        assert_eq!(batches[0].next_offset(), 1);
    }

    #[test]
    fn a_control_batch_that_is_no_marker_fails_the_check() {
        let mut log = Log::default();
        log.marker(3, 0, 7);
        let e = log.read().unwrap_err().to_string();
        assert!(e.contains("neither ABORT nor COMMIT"), "{e}");
    }
}
