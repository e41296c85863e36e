//! The packed words of a partition's queue: a record as a node (its slot
//! plus one), a tail word (node, tag, budget credit or the owed flag with
//! its epoch) and a mark word (node and life). Each is one atomic word of
//! [`Queue`](super::Queue), so that one CAS moves all its parts together.

/// A queued record: its slot + 1. Never 0, which stands for the stub (as
/// `head`/`tail`), for "no link yet" (as a link) or "no mark". The slot
/// alone names the record: a queued or marked slot is held, so it cannot be
/// reused while anything points at it.
pub(super) fn node(index: usize) -> u32 {
    // Slot indices are below MAX_SLOTS < 2^24.
    index as u32 + 1
}

pub(super) fn index_of(node: u32) -> usize {
    node as usize - 1
}

/// A record as `tail` and `last` hold it: its node in the low 24 bits, and
/// on a progress tracker its tag (bits 32..64, so that a CAS fails if the
/// slot moved on to another record), the queue's budget credit (bits
/// 24..31, at most [`MAX_CREDIT`]) and, clear here, the [`OWED`] flag (bit
/// 31).
pub(super) fn tail_word(node: u32, tag: u32, credit: u64) -> u64 {
    debug_assert!(node < 1 << 24 && credit <= MAX_CREDIT);
    u64::from(tag) << 32 | credit << 24 | u64::from(node)
}

/// The most budget credit a tail word carries (see `order`).
pub(crate) const MAX_CREDIT: u64 = 0x7f;

/// The flag of a queue's tail word that says the partition owes an
/// offset (see "Owed offsets" in `order`). While it is set, the credit
/// bits carry the debt's epoch instead of a credit.
pub(super) const OWED: u64 = 1 << 31;

/// A tail word with [`OWED`] set: the partition owes an offset, recorded
/// while `node` (with `tag`) was its last record; `epoch` tells apart the
/// debts recorded at one record (see "Owed offsets" in `order`).
pub(super) fn owed_word(node: u32, tag: u32, epoch: u64) -> u64 {
    tail_word(node, tag, epoch & MAX_CREDIT) | OWED
}

/// The node's bits of a tail word.
pub(super) const NODE_BITS: u64 = 0xff_ffff;

/// A tail word's debt: the [`OWED`] flag and, while it is set, the debt's
/// epoch (the credit bits).
pub(super) const DEBT_BITS: u64 = OWED | MAX_CREDIT << 24;

pub(super) fn tail_node(word: u64) -> u32 {
    (word & NODE_BITS) as u32
}

pub(super) fn tail_tag(word: u64) -> u32 {
    (word >> 32) as u32
}

/// The credit a tail word carries: none while it carries a debt.
pub(super) fn tail_credit(word: u64) -> u64 {
    if word & OWED != 0 {
        0
    } else {
        (word >> 24) & MAX_CREDIT
    }
}

/// The epoch of an [`owed_word`].
pub(super) fn owed_epoch(word: u64) -> u64 {
    (word >> 24) & MAX_CREDIT
}

/// A mark as `mark` and `ended_mark` hold it: the record's node and the
/// life it was sent in, so that comparing lives needs no slot lookup.
pub(super) fn mark_word(node: u32, life: u32) -> u64 {
    u64::from(life) << 32 | u64::from(node)
}

/// The slot of a [`mark_word`].
pub(super) fn mark_index(word: u64) -> usize {
    index_of(word as u32)
}

/// The life of a [`mark_word`].
pub(super) fn mark_life(word: u64) -> u32 {
    (word >> 32) as u32
}
