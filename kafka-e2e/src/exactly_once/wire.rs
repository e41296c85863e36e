//! The raw log: a minimal Kafka protocol client over a `TcpStream` (one
//! request, Fetch v4 with `isolation_level` 0, that is read_uncommitted)
//! and a parser of record batch v2.
//!
//! Fetch v4 is the first version that answers with record batch v2, the
//! partition's high watermark and its last stable offset; it is not a
//! flexible version, so no tagged fields. The verifier talks to the one
//! broker it is given (the scenario's single-node tansu answers for every
//! partition); any error code in the answer is an error here.
//!
//! Nothing is decompressed: a batch whose attributes name a compression
//! codec is a clear error (the scenario's producers set
//! `compression.type=none`).

use crate::Error;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Attributes bit 4: the batch belongs to a transaction.
pub const TRANSACTIONAL: i16 = 1 << 4;
/// Attributes bit 5: a control batch (its one record is a marker).
pub const CONTROL: i16 = 1 << 5;
/// Attributes bits 0-2: the compression codec (0: none).
const COMPRESSION: i16 = 0b111;

/// One record of a batch, at its absolute offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// One record batch (v2), as written in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub base_offset: i64,
    pub last_offset_delta: i32,
    pub attributes: i16,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub records: Vec<RawRecord>,
}

impl Batch {
    /// The offset after the batch's last record.
    pub fn next_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta) + 1
    }

    pub fn transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL != 0
    }

    pub fn control(&self) -> bool {
        self.attributes & CONTROL != 0
    }
}

/// A cursor over bytes that fails with the field it could not read.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Error> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(Error::Other(format!(
                "raw log: {what}: {n} bytes wanted at {}, {} there",
                self.at,
                self.bytes.len() - self.at
            )));
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], Error> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn i8(&mut self, what: &str) -> Result<i8, Error> {
        Ok(i8::from_be_bytes(self.array(what)?))
    }
    fn i16(&mut self, what: &str) -> Result<i16, Error> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }
    fn i32(&mut self, what: &str) -> Result<i32, Error> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }
    fn i64(&mut self, what: &str) -> Result<i64, Error> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// A zigzag varint (Kafka's `varint` and `varlong`).
    fn varlong(&mut self, what: &str) -> Result<i64, Error> {
        let mut raw = 0_u64;
        for shift in (0..70).step_by(7) {
            let [byte] = self.array::<1>(what)?;
            if shift == 63 && byte > 1 {
                break;
            }
            raw |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        Err(Error::Other(format!("raw log: {what}: varint too long")))
    }

    /// Length-prefixed (varint) bytes; a negative length is null.
    fn var_bytes(&mut self, what: &str) -> Result<Option<Vec<u8>>, Error> {
        let len = self.varlong(what)?;
        if len < 0 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| Error::Other(format!("raw log: {what}")))?;
        Ok(Some(self.take(len, what)?.to_vec()))
    }

    fn string(&mut self, what: &str) -> Result<String, Error> {
        let len = self.i16(what)?;
        let len =
            usize::try_from(len).map_err(|_| Error::Other(format!("raw log: {what}: null")))?;
        String::from_utf8(self.take(len, what)?.to_vec())
            .map_err(|_| Error::Other(format!("raw log: {what}: not UTF-8")))
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }
}

/// Parses the record batches in `bytes` (a fetch answer's `records`).
/// A batch cut off at the end (the broker may stop inside one) is left
/// out; any other malformed batch, a magic other than 2 or a compressed
/// batch is an error.
pub fn parse_batches(bytes: &[u8]) -> Result<Vec<Batch>, Error> {
    let mut batches = Vec::new();
    let mut reader = Reader::new(bytes);
    while reader.left() >= 12 {
        let base_offset = reader.i64("base offset")?;
        let length = reader.i32("batch length")?;
        let length = usize::try_from(length).map_err(|_| {
            Error::Other(format!("raw log: batch at {base_offset}: length {length}"))
        })?;
        if reader.left() < length {
            break; // cut off
        }
        let mut batch = Reader::new(reader.take(length, "batch")?);
        let _leader_epoch = batch.i32("partition leader epoch")?;
        let magic = batch.i8("magic")?;
        if magic != 2 {
            return Err(Error::Other(format!(
                "raw log: batch at {base_offset}: magic {magic}, only record batch v2 is read"
            )));
        }
        let _crc = batch.i32("crc")?;
        let attributes = batch.i16("attributes")?;
        if attributes & COMPRESSION != 0 {
            return Err(Error::Other(format!(
                "raw log: batch at {base_offset} is compressed (codec {}): the verifier reads plain batches only; produce with compression.type=none",
                attributes & COMPRESSION
            )));
        }
        let last_offset_delta = batch.i32("last offset delta")?;
        let _base_timestamp = batch.i64("base timestamp")?;
        let _max_timestamp = batch.i64("max timestamp")?;
        let producer_id = batch.i64("producer id")?;
        let producer_epoch = batch.i16("producer epoch")?;
        let _base_sequence = batch.i32("base sequence")?;
        let count = batch.i32("record count")?;
        let mut records = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(100_000));
        for _ in 0..count {
            let len = batch.varlong("record length")?;
            let len = usize::try_from(len).map_err(|_| {
                Error::Other(format!(
                    "raw log: batch at {base_offset}: record length {len}"
                ))
            })?;
            let mut record = Reader::new(batch.take(len, "record")?);
            let _attributes = record.i8("record attributes")?;
            let _timestamp_delta = record.varlong("timestamp delta")?;
            let offset_delta = record.varlong("offset delta")?;
            let key = record.var_bytes("key")?;
            let value = record.var_bytes("value")?;
            let headers = record.varlong("header count")?;
            for _ in 0..headers.max(0) {
                let _key = record.var_bytes("header key")?;
                let _value = record.var_bytes("header value")?;
            }
            records.push(RawRecord {
                offset: base_offset + offset_delta,
                key,
                value,
            });
        }
        batches.push(Batch {
            base_offset,
            last_offset_delta,
            attributes,
            producer_id,
            producer_epoch,
            records,
        });
    }
    Ok(batches)
}

/// One partition's answer to a fetch.
#[derive(Debug)]
pub struct Fetched {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub batches: Vec<Batch>,
    /// The size of the `records` bytes (to tell a cut-off batch).
    pub bytes: usize,
}

/// A connection to one broker.
pub struct Connection {
    stream: TcpStream,
    correlation: i32,
}

const FETCH: i16 = 1;
const FETCH_VERSION: i16 = 4;
const CLIENT_ID: &str = "kafka-e2e-raw-log";

impl Connection {
    /// Connects to `address` (`host:port`); every read and write is bound
    /// by `timeout`.
    pub fn connect(address: &str, timeout: Duration) -> Result<Connection, Error> {
        let addr = address
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| Error::Other(format!("raw log: {address}: no address")))?;
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            correlation: 0,
        })
    }

    /// Fetch v4 of one partition from `offset`, read_uncommitted.
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<Fetched, Error> {
        self.correlation += 1;
        let mut body = Vec::with_capacity(64 + topic.len());
        body.extend(FETCH.to_be_bytes());
        body.extend(FETCH_VERSION.to_be_bytes());
        body.extend(self.correlation.to_be_bytes());
        put_string(&mut body, CLIENT_ID);
        body.extend((-1_i32).to_be_bytes()); // replica id: a consumer
        body.extend(100_i32.to_be_bytes()); // max wait ms
        body.extend(0_i32.to_be_bytes()); // min bytes
        body.extend(max_bytes.to_be_bytes());
        body.push(0); // isolation level: read_uncommitted, the raw log
        body.extend(1_i32.to_be_bytes()); // topics
        put_string(&mut body, topic);
        body.extend(1_i32.to_be_bytes()); // partitions
        body.extend(partition.to_be_bytes());
        body.extend(offset.to_be_bytes());
        body.extend(max_bytes.to_be_bytes());
        let size =
            i32::try_from(body.len()).map_err(|_| Error::Other("raw log: request".into()))?;
        self.stream.write_all(&size.to_be_bytes())?;
        self.stream.write_all(&body)?;

        let mut size = [0; 4];
        self.stream.read_exact(&mut size)?;
        let size = usize::try_from(i32::from_be_bytes(size))
            .map_err(|_| Error::Other("raw log: negative response size".into()))?;
        let mut answer = vec![0; size];
        self.stream.read_exact(&mut answer)?;
        let mut r = Reader::new(&answer);
        let correlation = r.i32("correlation id")?;
        if correlation != self.correlation {
            return Err(Error::Other(format!(
                "raw log: answer to request {correlation}, expected {}",
                self.correlation
            )));
        }
        let _throttle = r.i32("throttle time")?;
        let mut found = None;
        for _ in 0..r.i32("topics")? {
            let name = r.string("topic")?;
            for _ in 0..r.i32("partitions")? {
                let index = r.i32("partition")?;
                let error = r.i16("error code")?;
                let high_watermark = r.i64("high watermark")?;
                let last_stable_offset = r.i64("last stable offset")?;
                let aborted = r.i32("aborted transactions")?;
                for _ in 0..aborted.max(0) {
                    let _producer = r.i64("aborted producer id")?;
                    let _first = r.i64("aborted first offset")?;
                }
                let len = r.i32("records size")?;
                let records = match usize::try_from(len) {
                    Ok(len) => r.take(len, "records")?,
                    Err(_) => &[], // null
                };
                if error != 0 {
                    return Err(Error::kafka(
                        format!("raw fetch of {name} [{index}] at {offset}"),
                        format!("error code {error}"),
                    ));
                }
                if name == topic && index == partition {
                    found = Some(Fetched {
                        high_watermark,
                        last_stable_offset,
                        batches: parse_batches(records)?,
                        bytes: records.len(),
                    });
                }
            }
        }
        found.ok_or_else(|| {
            Error::Other(format!(
                "raw log: the fetch answer has no {topic} [{partition}]"
            ))
        })
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as i16).to_be_bytes());
    out.extend(s.as_bytes());
}

/// A whole partition, as the log holds it.
#[derive(Debug)]
pub struct RawPartition {
    pub batches: Vec<Batch>,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
}

/// Reads partition `partition` of `topic` from offset 0 to its high watermark (as the
/// last fetch answered it), every batch, control batches and aborted
/// records included. Fails if that takes longer than `within`.
pub fn read_partition(
    address: &str,
    topic: &str,
    partition: i32,
    within: Duration,
) -> Result<RawPartition, Error> {
    let started = Instant::now();
    let mut connection = Connection::connect(address, Duration::from_secs(5))?;
    let mut batches: Vec<Batch> = Vec::new();
    let mut next = 0_i64;
    let mut max_bytes = 1 << 20;
    loop {
        let fetched = connection.fetch(topic, partition, next, max_bytes)?;
        let mut progressed = false;
        for batch in fetched.batches {
            // A broker may answer from the start of the batch holding
            // `next`; batches are only fetched whole here, so skip repeats.
            if batch.base_offset < next {
                continue;
            }
            next = batch.next_offset();
            progressed = true;
            batches.push(batch);
        }
        if next >= fetched.high_watermark {
            return Ok(RawPartition {
                batches,
                high_watermark: fetched.high_watermark,
                last_stable_offset: fetched.last_stable_offset,
            });
        }
        if !progressed && fetched.bytes >= max_bytes as usize / 2 {
            max_bytes = max_bytes.saturating_mul(2); // a batch larger than asked
        }
        if started.elapsed() > within {
            return Err(Error::Other(format!(
                "raw log: {topic} [{partition}]: at offset {next} of {} after {within:?}",
                fetched.high_watermark
            )));
        }
    }
}
