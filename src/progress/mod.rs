//! Progress beyond the first gap: which offsets of a partition are done,
//! past the committable one, and how that fits into a commit's metadata.
//!
//! A watermark commits the acked prefix only; when one record is slow,
//! every record acked behind it is redone after a restart. A [`Progress`]
//! says exactly which offsets are done: every offset below [`next`]
//! (Kafka's committed offset), and, from `next` on, those not listed as
//! pending, up to the end of what was sent. [`Progress::encode`] writes it
//! as printable ASCII for Kafka's commit metadata, and
//! [`Progress::decode`] reads it back on restart, so a consumer skips what
//! was done (`is_done`).
//!
//! # The encoding
//!
//! A version tag, then the offsets from `next` to the end of what was sent
//! in one of two forms, whichever is shorter:
//!
//! - `R` (runs): the lengths of alternating runs, starting with a run of
//!   offsets not done (`next` itself is never done), as LEB128 varints,
//!   in base64url without padding. A single stuck record followed by fifty
//!   thousand done offsets is a handful of bytes.
//! - `B` (bitset): the number of offsets as a varint, then one bit per
//!   offset from `next` on, 1 for done, least significant bit first, in
//!   base64url. Scattered completions cost a bit each.
//!
//! The empty string means nothing is done beyond `next`. Decoding any
//! string is safe: it returns an error or a progress, never panics, and
//! keeps runs, not offsets, so it takes memory and time in proportion to
//! the string's length however many offsets a run claims; and the
//! positions not done it may describe are bounded (2^20, or the tracker's
//! budget with [`Progress::decode_within`]), so that no consumer of it,
//! [`Progress::merge`] included, lists more (see `decode`).
//!
//! [`next`]: Progress::next

mod bounded;
pub(crate) mod budget;
mod track;

pub(crate) use track::{key_of, ProgressConfig};

use std::fmt;

/// Offsets that are positions in a sequence, as Kafka's are: what a
/// progress tracker needs to tell which offsets lie between two others.
///
/// Implemented for `u64`, `u32`, `usize` and `i64`. A negative `i64` is not
/// a position: its `seq` is [`NO_POSITION`] (`u64::MAX`), which no record
/// can have (nothing could follow it), and a progress tracker refuses a
/// send of one with the record handed back, never a panic.
///
/// ```
/// use inflight::{SeqOffset, NO_POSITION};
/// assert_eq!(7_i64.seq(), 7);
/// assert_eq!((-1_i64).seq(), NO_POSITION);
/// assert_eq!(u32::MAX.seq(), u64::from(u32::MAX));
/// ```
pub trait SeqOffset {
    /// The offset's position in its partition.
    fn seq(self) -> u64;
}

/// What [`SeqOffset::seq`] gives an offset that is no position (a negative
/// `i64`): `u64::MAX`.
pub const NO_POSITION: u64 = u64::MAX;

impl SeqOffset for u64 {
    fn seq(self) -> u64 {
        self
    }
}

impl SeqOffset for u32 {
    fn seq(self) -> u64 {
        u64::from(self)
    }
}

impl SeqOffset for usize {
    fn seq(self) -> u64 {
        u64::try_from(self).unwrap_or(NO_POSITION)
    }
}

impl SeqOffset for i64 {
    fn seq(self) -> u64 {
        u64::try_from(self).unwrap_or(NO_POSITION)
    }
}

/// Which offsets of one partition are done: all below [`next`](Self::next),
/// and, from there to the end of what was sent, all but the pending ones.
///
/// ```
/// use inflight::Progress;
/// // Offsets 100..=105 were sent; 100 and 103 are still in flight.
/// let progress = Progress::from_pending(100, 106, [100, 103]).unwrap();
/// assert_eq!(progress.next(), 100);                 // commit this
/// assert!(progress.is_done(99));
/// assert!(!progress.is_done(100) && progress.is_done(101) && progress.is_done(102));
/// assert!(!progress.is_done(103) && progress.is_done(105) && !progress.is_done(106));
/// let metadata = progress.encode();                 // commit this beside it
/// assert_eq!(Progress::decode(progress.next(), &metadata), Ok(progress));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Progress {
    next: u64,
    /// Alternating run lengths from `next` on, starting with a run of
    /// offsets not done: `[pending, done, pending, done, ...]`. Every
    /// length is non-zero, and the last run is not a pending one (a
    /// trailing pending run is dropped: offsets past the last done one
    /// count as not done anyway), so equal progress has one form.
    runs: Vec<u64>,
}

/// Why [`Progress::decode`] refused a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecodeError {
    /// The first character is not a version tag this crate writes.
    UnknownVersion,
    /// A character outside base64url.
    BadCharacter,
    /// The bytes end in the middle of a number, or hold one too large.
    Truncated,
    /// The offsets it describes run past `u64::MAX`.
    Overflow,
    /// Well-formed but not in the canonical form `encode` writes (a run of
    /// length 0, say).
    NotCanonical,
    /// Longer than the metadata budget, or describing more positions not
    /// done than it allows (see [`Progress::decode_within`]; `decode`
    /// allows what the largest budget does, 2^20).
    OverBudget,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DecodeError::UnknownVersion => "unknown progress encoding version",
            DecodeError::BadCharacter => "a character outside base64url",
            DecodeError::Truncated => "the encoding ends in the middle of a number",
            DecodeError::Overflow => "the offsets run past u64::MAX",
            DecodeError::NotCanonical => "not the form the encoder writes",
            DecodeError::OverBudget => "more positions than the metadata budget allows",
        })
    }
}

impl std::error::Error for DecodeError {}

const RUNS: u8 = b'R';
/// The widest span the bitset form is written for: past it the bits alone
/// are 128 KiB, far over any commit's metadata, and the run form is
/// written instead.
const BITSET_MAX_SPAN: u64 = 1 << 20;
const BITSET: u8 = b'B';

impl Progress {
    /// The progress of a partition whose offsets below `next` are done and
    /// which was sent up to (not including) `end`, with `pending` the
    /// offsets in `next..end` not done (unacked or failed); every other
    /// offset there is done. `None` if a pending offset lies outside
    /// `next..end` or `next` itself is not pending while `next < end` (then
    /// `next` would not be the first offset not done).
    pub fn from_pending(
        next: u64,
        end: u64,
        pending: impl IntoIterator<Item = u64>,
    ) -> Option<Progress> {
        let mut pending: Vec<u64> = pending.into_iter().collect();
        pending.sort_unstable();
        pending.dedup();
        if next > end
            || pending.iter().any(|&o| o < next || o >= end)
            || (next < end && pending.first() != Some(&next))
        {
            return None;
        }
        let mut runs = Vec::new();
        let mut at = next;
        let mut i = 0;
        while i < pending.len() {
            // A run of pending offsets from `pending[i]`.
            let start = pending[i];
            let mut stop = start + 1;
            i += 1;
            while i < pending.len() && pending[i] == stop {
                stop += 1;
                i += 1;
            }
            if start > at {
                runs.push(start - at); // done, before it
            }
            runs.push(stop - start);
            at = stop;
        }
        if end > at {
            runs.push(end - at);
        }
        Some(Self::canonical(next, runs))
    }

    /// Nothing done beyond `next`.
    pub fn at(next: u64) -> Progress {
        Progress {
            next,
            runs: Vec::new(),
        }
    }

    /// The **next to read**: the first offset not known done, which is the
    /// offset to commit in Kafka's sense as it is (no + 1), and where to
    /// resume. After a failure it stays at the failed offset (or below it,
    /// at the first record not acked).
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Whether `offset` is done: below [`next`](Self::next), or past it and
    /// neither pending nor beyond the last done offset. Skip it on resume.
    /// A failed record is pending for good (never done); the records acked
    /// past it, and the offsets never sent between records, are done.
    pub fn is_done(&self, offset: u64) -> bool {
        if offset < self.next {
            return true;
        }
        let mut at = self.next;
        for (i, &len) in self.runs.iter().enumerate() {
            let end = at.saturating_add(len);
            if offset < end {
                return i % 2 == 1;
            }
            at = end;
        }
        false
    }

    /// The offsets done past `next`, as half-open ranges in order.
    pub fn done_ranges(&self) -> impl Iterator<Item = std::ops::Range<u64>> + '_ {
        let mut at = self.next;
        self.runs.iter().enumerate().filter_map(move |(i, &len)| {
            let start = at;
            at = at.saturating_add(len);
            (i % 2 == 1).then_some(start..at)
        })
    }

    /// The progress as printable ASCII for a commit's metadata: a version
    /// tag and the shorter of two forms (see the module docs). Empty when
    /// nothing is done beyond `next`.
    pub fn encode(&self) -> String {
        if self.runs.is_empty() {
            return String::new();
        }
        // Sized first, so that only the shorter form is built (a run of
        // 50,000 done offsets is three bytes, and 50,000 bits).
        let runs = 1 + base64_len(self.runs_bytes());
        let bitset = self.bitset_bytes().map(|bytes| 1 + base64_len(bytes));
        match bitset {
            Some(bitset) if bitset < runs => {
                self.encode_bitset().unwrap_or_else(|| self.encode_runs())
            }
            _ => self.encode_runs(),
        }
    }

    /// The run form's byte count.
    fn runs_bytes(&self) -> usize {
        self.runs.iter().map(|&n| varint_len(n)).sum()
    }

    /// The length [`encode`](Self::encode) would return, without building
    /// it.
    pub fn encoded_len(&self) -> usize {
        if self.runs.is_empty() {
            return 0;
        }
        let runs = 1 + base64_len(self.runs_bytes());
        match self.bitset_bytes() {
            Some(bytes) => runs.min(1 + base64_len(bytes)),
            None => runs,
        }
    }

    fn encode_runs(&self) -> String {
        let mut bytes = Vec::new();
        for &len in &self.runs {
            put_varint(&mut bytes, len);
        }
        tagged(RUNS, &bytes)
    }

    /// The bitset form's byte count, if its offsets are few enough to list.
    fn bitset_bytes(&self) -> Option<usize> {
        let span: u64 = self.runs.iter().sum();
        let span = usize::try_from(span)
            .ok()
            .filter(|&s| s as u64 <= BITSET_MAX_SPAN)?;
        Some(varint_len(span as u64) + span.div_ceil(8))
    }

    fn encode_bitset(&self) -> Option<String> {
        self.bitset_bytes()?;
        let span: u64 = self.runs.iter().sum();
        let mut bytes = Vec::new();
        put_varint(&mut bytes, span);
        let mut bits = vec![0_u8; (span as usize).div_ceil(8)];
        let mut at = 0_usize;
        for (i, &len) in self.runs.iter().enumerate() {
            if i % 2 == 1 {
                for bit in at..at + len as usize {
                    bits[bit / 8] |= 1 << (bit % 8);
                }
            }
            at += len as usize;
        }
        bytes.extend_from_slice(&bits);
        Some(tagged(BITSET, &bytes))
    }

    /// Reads back what [`encode`](Self::encode) wrote for a progress whose
    /// [`next`](Self::next) is `next`: `decode(p.next(), &p.encode()) == p`.
    /// Any other string gives an error or a progress, never a panic, in
    /// time and memory proportional to its length. The empty string is
    /// "nothing done beyond `next`".
    ///
    /// **The bound.** Metadata is input anyone who can commit to the group
    /// writes, and the run form spends a varint per run however long: nine
    /// characters can claim 2^34 offsets pending before one done. The
    /// progress returned keeps runs, not offsets, and describes at most
    /// 2^20 positions not done (between `next` and its last done offset:
    /// as many as the widest bitset the encoder writes, more than any
    /// tracker's budget lets it report); a string that describes more is
    /// refused with [`DecodeError::OverBudget`]. So listing its pending
    /// offsets one by one costs at most 2^20 of them. Use
    /// [`decode_within`](Self::decode_within) to hold it to the tracker's
    /// own budget (length and positions), and [`merge`](Self::merge) to
    /// join it to what a tracker did since, within that budget; on any
    /// error, start from the committed offset alone
    /// ([`Progress::at`]`(next)`: records redone, never skipped).
    ///
    /// What the bound does not limit is how far the done ranges reach:
    /// well-formed metadata can say every offset up to `u64::MAX` is done,
    /// as a commit of a high offset can. A group's commits are trusted
    /// input either way; the metadata only makes it less visible, since
    /// the committed offset looks ordinary.
    ///
    /// ```
    /// use inflight::{DecodeError, Progress};
    /// assert_eq!(Progress::decode(42, ""), Ok(Progress::at(42)));
    /// assert_eq!(Progress::decode(42, "X1"), Err(DecodeError::UnknownVersion));
    /// assert!(Progress::decode(42, "R!!").is_err());
    /// // 2^34 offsets pending, then one done: refused.
    /// assert_eq!(Progress::decode(42, "RgICAgEAB"), Err(DecodeError::OverBudget));
    /// ```
    pub fn decode(next: u64, metadata: &str) -> Result<Progress, DecodeError> {
        let Some((&tag, body)) = metadata.as_bytes().split_first() else {
            return Ok(Progress::at(next));
        };
        if tag != RUNS && tag != BITSET {
            return Err(DecodeError::UnknownVersion);
        }
        let bytes = from_base64(body)?;
        let runs = match tag {
            RUNS => {
                let mut runs = Vec::new();
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    let (len, after) = take_varint(rest)?;
                    if len == 0 {
                        return Err(DecodeError::NotCanonical);
                    }
                    runs.push(len);
                    rest = after;
                }
                runs
            }
            BITSET => {
                let (span, bits) = take_varint(&bytes)?;
                if bits.len() as u64 != span.div_ceil(8) {
                    return Err(DecodeError::Truncated);
                }
                // Runs of equal bits, from bit 0, which must be 0 (not done).
                let mut runs: Vec<u64> = Vec::new();
                let mut current = false;
                for bit in 0..span {
                    let done = bits[(bit / 8) as usize] & (1 << (bit % 8)) != 0;
                    if bit == 0 || done != current {
                        if bit == 0 && done {
                            return Err(DecodeError::NotCanonical);
                        }
                        runs.push(0);
                        current = done;
                    }
                    *runs.last_mut().expect("pushed above") += 1;
                }
                if span % 8 != 0 && bits.last().is_some_and(|&b| b >> (span % 8) != 0) {
                    return Err(DecodeError::NotCanonical);
                }
                runs
            }
            _ => return Err(DecodeError::UnknownVersion),
        };
        if runs.is_empty() {
            // Nothing done beyond `next` is the empty string, not a tag.
            return Err(DecodeError::NotCanonical);
        }
        let mut total = next;
        for &len in &runs {
            total = total.checked_add(len).ok_or(DecodeError::Overflow)?;
        }
        let progress = Self::canonical(next, runs.clone());
        if progress.runs != runs {
            return Err(DecodeError::NotCanonical);
        }
        if progress.pending_positions() > budget::positions(usize::MAX) {
            return Err(DecodeError::OverBudget);
        }
        Ok(progress)
    }

    /// Drops empty runs and a trailing pending run, merging neighbours.
    fn canonical(next: u64, runs: Vec<u64>) -> Progress {
        let mut out: Vec<u64> = Vec::with_capacity(runs.len());
        // Parity of the run being built: even = pending, odd = done.
        for (i, len) in runs.into_iter().enumerate() {
            if len == 0 {
                continue;
            }
            let parity = i % 2;
            if out.len() % 2 == parity {
                out.push(len);
            } else if let Some(last) = out.last_mut() {
                *last += len;
            } else {
                // A done run first: `next` would be done. Cannot happen from
                // `from_pending`, and `decode` rejects it as not canonical.
                out.push(0);
                out.push(len);
            }
        }
        if out.len() % 2 == 1 {
            out.pop(); // a trailing pending run says nothing
        }
        Progress { next, runs: out }
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Progress")
            .field("next", &self.next)
            .field("done", &self.done_ranges().collect::<Vec<_>>())
            .finish()
    }
}

/// Bytes of `n` as a LEB128 varint.
fn varint_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A LEB128 varint from the front of `bytes`, and what follows it.
fn take_varint(bytes: &[u8]) -> Result<(u64, &[u8]), DecodeError> {
    let mut n: u64 = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let shift = 7 * i as u32;
        let part = u64::from(byte & 0x7f);
        if shift >= 64 || (shift > 0 && part >> (64 - shift) != 0) {
            return Err(DecodeError::Overflow);
        }
        n |= part << shift;
        if byte & 0x80 == 0 {
            if i > 0 && byte == 0 {
                return Err(DecodeError::NotCanonical); // a padded varint
            }
            return Ok((n, &bytes[i + 1..]));
        }
    }
    Err(DecodeError::Truncated)
}

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Characters of `bytes` bytes in base64url without padding.
fn base64_len(bytes: usize) -> usize {
    (bytes * 8).div_ceil(6)
}

fn tagged(tag: u8, bytes: &[u8]) -> String {
    let mut out = String::with_capacity(1 + base64_len(bytes.len()));
    out.push(tag as char);
    for chunk in bytes.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0_u32, |w, (i, &b)| w | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(BASE64URL[(word >> (18 - 6 * i) & 0x3f) as usize] as char);
        }
    }
    out
}

fn from_base64(text: &[u8]) -> Result<Vec<u8>, DecodeError> {
    if !text
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    {
        return Err(DecodeError::BadCharacter);
    }
    if text.len() % 4 == 1 {
        return Err(DecodeError::Truncated);
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.chunks(4) {
        let mut word = 0_u32;
        for (i, &c) in chunk.iter().enumerate() {
            let value = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'-' => 62,
                b'_' => 63,
                _ => return Err(DecodeError::BadCharacter),
            };
            word |= u32::from(value) << (18 - 6 * i);
        }
        let bytes = chunk.len() - 1;
        for i in 0..bytes {
            out.push((word >> (16 - 8 * i)) as u8);
        }
        // Bits past the last byte must be zero: one string per encoding.
        if word & ((1 << (24 - 8 * bytes)) - 1) != 0 {
            return Err(DecodeError::NotCanonical);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length() {
        for len in 0..40_usize {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let text = tagged(b'x', &bytes);
            assert_eq!(text.len(), 1 + base64_len(len));
            assert_eq!(from_base64(&text.as_bytes()[1..]).unwrap(), bytes);
        }
    }

    #[test]
    fn varints_round_trip_and_refuse_overflow() {
        for n in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut bytes = Vec::new();
            put_varint(&mut bytes, n);
            assert_eq!(bytes.len(), varint_len(n));
            assert_eq!(take_varint(&bytes).unwrap(), (n, &[][..]));
        }
        assert_eq!(take_varint(&[0xff; 11]), Err(DecodeError::Overflow));
        assert_eq!(take_varint(&[0x80]), Err(DecodeError::Truncated));
        assert_eq!(take_varint(&[0x80, 0x00]), Err(DecodeError::NotCanonical));
    }

    #[test]
    fn encoded_len_is_what_encode_writes() {
        for pending in [
            vec![0],
            vec![0, 5],
            vec![0, 1, 2, 40],
            (0..100).step_by(3).collect(),
        ] {
            let p =
                Progress::from_pending(1_000, 1_200, pending.iter().map(|o| o + 1_000)).unwrap();
            assert_eq!(p.encoded_len(), p.encode().len(), "{p:?}");
        }
    }
}
