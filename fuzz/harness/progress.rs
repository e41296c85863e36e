//! The progress side of the `ops` target, on a progress tracker
//! (`Builder::progress(BUDGET)`, which the setup byte picks for a quarter
//! of the inputs; see `pick_ops_setup` in `mod.rs`).
//!
//! # Offsets
//!
//! A progress tracker refuses a send whose offset is not above every
//! earlier one of its partition's current life (`OutOfOrder`), so an
//! arbitrary `u8` would mostly be refused once a few were sent. There,
//! `Op::Send`'s offset byte is a code ([`offset_of`]) read against the
//! partition's *anchor*: the offset of its last record, of any life. Of
//! the 256 codes, 224 rise above it (128 by one, 96 skipping one to six
//! offsets, which are then done), 30 are at or up to three below it
//! (refused, unless the partition's life has no record yet: after a
//! `revoke`, a lower offset is accepted again), and 2 are `u64::MAX`, no
//! position (refused before anything else). The first send of a life
//! after a revoke *resumes* instead, with the 128 codes that would rise by
//! one: it sends the `next` last reported for the partition (what a
//! consumer would have committed, and restarts from), so that a new life
//! often reaches the very progress its ended life last reported, which
//! must be reported again. On the other trackers the byte is the offset,
//! as before.
//!
//! The budget is [`BUDGET`], 1 MiB: far more than 4,096 ops can fill (a
//! record costs at most a few bytes of either form), so `Full` never comes
//! from the budget here, only from the capacity. The budget check itself is
//! `tests/progress_tracker.rs`'s and the loom models'.
//!
//! # What `progress()` must report
//!
//! A partition's expected progress ([`Model::expected_progress`]) is of its
//! current life's records, in offset order: none if it has none (a revoke
//! ends the reporting of the older lives' records); else `next` is the
//! first record not acked (or one past the last, when all are), and from
//! there the offsets not pending (acked, or skipped between two records) up
//! to the last record are done. A failed record is pending for good: it is
//! never done, and what was acked past it still is (issue 26, item 6: the
//! tracker used to report only `Progress::at(o)` once the watermark
//! stopped at a failure at `o`, so a restart redid everything acked past
//! it).
//!
//! A call reports exactly the partitions whose expected progress, with its
//! life, differs from what the tracker last reported for them ([`Reports`]
//! keeps that), each with its expected progress; so, after every call, the
//! latest progress reported for each partition with a record in its
//! current life is its expected one. Every progress reported encodes
//! within the budget, as printable ASCII, in `encoded_len()` characters,
//! and decodes back to itself.
//!
//! # Panics in `progress()`
//!
//! `progress()` runs user code: the `Clone` of each partition it reports
//! (before it marks the change as reported), and the `Hash` (and, on a
//! collision, `Eq`) of the partitions in the map it builds. A planned panic
//! must come from one of those, of a partition it may report. The contract
//! is that a panicked call reports nothing and marks nothing reported: the
//! next call reports every change.
//!
//! **A deviation, fixed** ([`PROGRESS_PANIC_LOSES_REPORTS`], now `false`):
//! the tracker used to mark each partition reported (swap its fingerprint)
//! as it went, so a panic in the `Clone` of a later partition (or in the
//! `Hash` of any, inserting into the map) lost the changes of the
//! partitions already marked. It now builds the whole map first and moves
//! the fingerprints only after every key is in it, and the harness checks
//! the exact contract. With the constant `true`, the harness would accept
//! the old behaviour (after a panicked call, each partition it may have
//! reported may or may not be reported by the next call).

use super::model::Model;
use super::ops::Sim;
use super::user::{self, Act};
use super::State;
use inflight::{Progress, NO_POSITION};
use std::collections::BTreeMap;

/// The metadata budget of `ops`'s progress trackers: 1 MiB, so that the
/// budget never refuses a send there (see the module docs).
pub const BUDGET: usize = 1 << 20;

/// Whether the harness expects the tracker's old deviation (see the
/// module docs): a `progress()` call that panics in user code loses the
/// changes of the partitions it had marked reported before the panic.
/// `false` since the fix; `progress_panic_loses_no_report` in
/// `fuzz-replay/tests/fuzz_lifecycle.rs` fails if it disagrees with the tracker.
pub const PROGRESS_PANIC_LOSES_REPORTS: bool = false;

/// The offset `Op::Send` sends on a progress tracker, from its offset byte
/// `code`, the partition's `anchor`, the offset of its last record of any
/// life, and, for the first send of a life after a revoke, `resume`, the
/// `next` last reported for it (see the module docs):
///
/// - `0..=127`: `resume` if any, else `anchor + 1`;
/// - `128..=223`: `anchor + 1 + skip`, skipping 1 to 6 offsets
///   (`(code - 128) / 16 + 1`);
/// - `224..=253`: `anchor - (code - 224) % 4`: equal or lower;
/// - `254`, `255`: `u64::MAX`, no position.
///
/// Without an anchor (nothing sent yet): `code % 16` for the first two,
/// `code - 224` for the third. A partition that owes an offset (refused
/// `Full` before) is sent that offset for codes `0..=159` instead (see
/// `Sim::progress_offset`).
pub fn offset_of(code: u8, anchor: Option<u64>, resume: Option<u64>) -> u64 {
    if let (0..=127, Some(resume)) = (code, resume) {
        return resume;
    }
    match code {
        0..=223 => {
            let skip = match code {
                0..=127 => 0,
                _ => u64::from(code - 128) / 16 + 1,
            };
            anchor.map_or(u64::from(code % 16), |a| a + 1 + skip)
        }
        224..=253 => {
            let back = u64::from(code - 224);
            anchor.map_or(back, |a| a.saturating_sub(back % 4))
        }
        254..=255 => NO_POSITION,
    }
}

impl Model {
    /// The offset of `partition`'s last record, of any life (what
    /// [`offset_of`] reads codes against).
    pub(super) fn anchor(&self, partition: u8) -> Option<u64> {
        (self.records.iter().rev())
            .find(|r| r.partition == partition)
            .map(|r| r.offset)
    }

    /// What `progress()` should report for `partition` (see the module
    /// docs): `None` while its current life has no record.
    pub(super) fn expected_progress(&self, partition: u8) -> Option<Progress> {
        let records: Vec<(u64, State)> = (self.records.iter())
            .filter(|r| r.partition == partition && self.current(r))
            .map(|r| (r.offset, r.state))
            .collect();
        let &(last, _) = records.last()?;
        assert!(
            records.windows(2).all(|w| w[0].0 < w[1].0),
            "model: a life's offsets rise: {records:?}"
        );
        assert!(
            records.iter().all(|&(_, state)| state != State::Released),
            "model: a released record in a current life"
        );
        let pending: Vec<u64> = (records.iter())
            .filter(|&&(_, state)| state != State::Acked)
            .map(|&(offset, _)| offset)
            .collect();
        let next = pending.first().copied().unwrap_or(last + 1);
        let progress = Progress::from_pending(next, last + 1, pending.iter().copied());
        Some(progress.unwrap_or_else(|| panic!("model: from_pending({next}, {pending:?})")))
    }
}

/// A partition's expected progress, with its life: a change of either is
/// reported.
type Key = (u32, Progress);

/// What `progress()` reported, per partition (see the module docs).
#[derive(Debug)]
pub(super) struct Reports {
    by: BTreeMap<u8, Reported>,
    /// Expect the tracker's known deviation.
    deviation: bool,
}

impl Default for Reports {
    fn default() -> Self {
        Self {
            by: BTreeMap::new(),
            deviation: PROGRESS_PANIC_LOSES_REPORTS,
        }
    }
}

/// What was reported of one partition.
#[derive(Debug)]
struct Reported {
    /// What the tracker may hold as the last reported (it reports a
    /// partition whose progress differs; `None`: nothing yet): one, or,
    /// after a panicked call under the deviation, several.
    seen: Vec<Option<Key>>,
    /// The latest progress reported.
    latest: Option<Progress>,
    /// A panicked call may have lost a change (the deviation): `latest`
    /// may lag until the next report.
    lost: bool,
}

impl Default for Reported {
    fn default() -> Self {
        Self {
            seen: vec![None],
            latest: None,
            lost: false,
        }
    }
}

impl Reported {
    /// The tracker must report `key`: it differs from all it may hold.
    fn must(&self, key: &Key) -> bool {
        !self.seen.contains(&Some(key.clone()))
    }

    /// The tracker may report `key`.
    fn may(&self, key: &Key) -> bool {
        self.must(key) || self.seen.len() > 1
    }
}

impl Reports {
    /// The `next` of the progress last reported for `partition`.
    fn latest_next(&self, partition: u8) -> Option<u64> {
        let reported = self.of(partition)?;
        reported.latest.as_ref().map(Progress::next)
    }

    /// Expect the contract exactly, or the tracker's known deviation (see
    /// [`PROGRESS_PANIC_LOSES_REPORTS`]).
    pub(super) fn expect_deviation(&mut self, deviation: bool) {
        self.deviation = deviation;
    }

    fn of(&self, partition: u8) -> Option<&Reported> {
        self.by.get(&partition)
    }

    /// Whether a call may report `key` for `partition`.
    fn may(&self, partition: u8, key: &Key) -> bool {
        self.of(partition).is_none_or(|r| r.may(key))
    }

    /// Checks what a call that returned reported against `expected` (each
    /// partition with a record in its current life), and notes it.
    fn returned(&mut self, real: &BTreeMap<u8, Progress>, expected: &BTreeMap<u8, Key>) {
        for (partition, progress) in real {
            let Some(key) = expected.get(partition) else {
                panic!("progress() reported {partition} ({progress:?}), which has no record in its life");
            };
            assert_eq!(progress, &key.1, "progress() of {partition}");
            assert!(
                self.may(*partition, key),
                "progress() reported {partition} unchanged: {progress:?}, reported before {:?}",
                self.of(*partition)
            );
        }
        for (&partition, key) in expected {
            let reported = self.by.entry(partition).or_default();
            assert!(
                !reported.must(key) || real.contains_key(&partition),
                "progress() did not report {partition}: {:?} (life {}), reported before {reported:?}",
                key.1,
                key.0
            );
            reported.seen = vec![Some(key.clone())];
            if let Some(progress) = real.get(&partition) {
                reported.latest = Some(progress.clone());
                reported.lost = false;
            }
            if !reported.lost {
                assert_eq!(
                    reported.latest.as_ref(),
                    Some(&key.1),
                    "the latest progress reported of {partition}"
                );
            }
        }
    }

    /// Notes a call that panicked in user code, having been able to report
    /// `may` (see the module docs): nothing changes; under the deviation,
    /// each of those may have been marked reported, and lost.
    fn panicked(&mut self, may: &BTreeMap<u8, Key>) {
        if !self.deviation {
            return;
        }
        for (&partition, key) in may {
            let reported = self.by.entry(partition).or_default();
            if reported.must(key) {
                reported.seen.push(Some(key.clone()));
            }
            reported.lost = true;
        }
    }
}

impl Sim<'_> {
    /// The offset `Op::Send` with `code` sends to `partition` on a progress
    /// tracker ([`offset_of`]).
    pub(super) fn progress_offset(&self, partition: u8, code: u8) -> u64 {
        let model = &self.model;
        // A partition that owes an offset is sent it again, most of the
        // time, as a source retrying a refused record does.
        if let (0..=159, Some(owed)) = (code, model.owed_now(partition)) {
            return owed;
        }
        let restart = model.life(partition) > 0 && model.last_in_life(partition).is_none();
        let resume = restart.then(|| self.reports.latest_next(partition));
        offset_of(code, model.anchor(partition), resume.flatten())
    }

    /// The offset `Op::Send` with `code` sends to `partition` on a tracker
    /// without progress: `code` itself, or on a watermark tracker whose
    /// partition owes an offset, that offset for codes `0..=159`, as
    /// [`progress_offset`](Self::progress_offset) does.
    pub(super) fn plain_offset(&self, partition: u8, code: u8) -> u64 {
        match (code, self.model.owed_now(partition)) {
            (0..=159, Some(owed)) => owed,
            _ => u64::from(code),
        }
    }

    /// `progress()`, checked against the model (see the module docs).
    pub(super) fn progress(&mut self) {
        let tracker = self.tracker;
        if !self.model.progress {
            let real = user::no_user_code("progress", || tracker.progress());
            assert!(real.is_empty(), "progress() without Builder::progress");
            self.note(|| "progress = {}".to_string());
            return;
        }
        let expected: BTreeMap<u8, Key> = (self.model.numbers.iter())
            .filter_map(|&p| {
                let progress = self.model.expected_progress(p)?;
                Some((p, (self.model.life(p), progress)))
            })
            .collect();
        match user::call(|| tracker.progress()) {
            Ok(real) => {
                let real: BTreeMap<u8, Progress> = (real.into_iter())
                    .map(|(p, progress)| (p.get(), progress))
                    .collect();
                for (partition, progress) in &real {
                    check_reported(*partition, progress);
                }
                self.reports.returned(&real, &expected);
                self.note(|| format!("progress = {real:?}"));
            }
            Err(fired) => {
                let (act, value) = fired;
                let may: BTreeMap<u8, Key> = (expected.into_iter())
                    .filter(|(p, key)| self.reports.may(*p, key))
                    .collect();
                let code = matches!(
                    act,
                    Act::PartitionClone | Act::PartitionHash | Act::PartitionEq
                );
                assert!(
                    code && may.keys().any(|&p| u64::from(p) == value),
                    "progress() ran the planned {fired:?} panic, may report {may:?}"
                );
                self.reports.panicked(&may);
                self.fired("progress", fired);
            }
        }
    }
}

/// What holds of every progress reported: within the budget, printable
/// ASCII of `encoded_len()` characters, decoding back to itself.
fn check_reported(partition: u8, progress: &Progress) {
    let encoded = super::decode::check_encoding(progress);
    assert!(
        encoded.len() <= BUDGET,
        "progress of {partition} over the budget: {} characters",
        encoded.len()
    );
}
