//! The word of a partition cell: which record, or which offset, is the
//! partition's latest in a generation, and of which life of the partition.
//!
//! Two formats, chosen by the tracker's mode (a constant, so each tracker
//! compiles to one):
//!
//! - **Held** (the plain modes): `life:32 | slot+1:32`. The cell holds the
//!   slot (`HELD`), whose offset the flush reads once the generation has
//!   drained; a send that displaces it hands the hold back.
//! - **Inline** ([`Inline`](crate::mode::Inline) modes):
//!   `life:16 | kind:1 | value:47`. With `kind` 0, `value` is the offset's
//!   bits plus one: the offset itself, so no slot is held and nothing is
//!   released. With `kind` 1, `value` is a held slot, as above: an offset
//!   whose bits do not fit in 47 (see [`INLINE_MAX`]) takes the held path.
//!
//! An empty cell is 0 in both formats (in the inline one, any word whose
//! low 48 bits are 0: an inline word's value is at least 1, a slot word has
//! its kind bit).
//!
//! The life rides in the word so that an install can refuse, in the same
//! CAS, to displace a record of a newer life (a send that raced a revoke,
//! see "A send of an ended life" in `revoke`): the cell never holds an
//! ended life's offset where a newer life's was. The inline format keeps
//! the life's low 16 bits, compared as serial numbers: an install that
//! finds a word "newer" looks at the partition's life again, and displaces
//! the word if the life has not moved (its bits alias an older life's; see
//! `Generation::install`). Every [`CLEAR_EVERY`] lives a revoke clears
//! its partition's inline offsets of lives older than the one it began
//! ([`older_bits`]) from every generation not yet folded
//! (`Generation::forget_ended`), so no cell is 2^15 lives
//! behind its partition's, however long a generation stays unflushed, and
//! a flush widens the bits against the partition's life ([`widen`])
//! exactly. Exact short of a send that straddles 2^14 revokes of its own
//! partition.

/// The partition's latest record of a generation, as a cell names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Latest {
    /// A held slot: its offset is read from the slot.
    Slot(usize),
    /// An inline offset's bits (see `inline::bits_of`).
    Bits(u64),
}

/// The largest offset bits an inline cell keeps (2^47 - 2): `value` is
/// the bits plus one, and must not reach the kind bit.
pub(crate) const INLINE_MAX: u64 = (1 << 47) - 2;

const VALUE: u64 = (1 << 47) - 1;
const KIND_SLOT: u64 = 1 << 47;
const LOW48: u64 = (1 << 48) - 1;

/// The word for `latest` of life `life`, in the format `inline` names.
#[inline(always)]
pub(crate) fn word(latest: Latest, life: u32, inline: bool) -> u64 {
    match (inline, latest) {
        (false, Latest::Slot(slot)) => (u64::from(life) << 32) | (slot as u64 + 1),
        (false, Latest::Bits(_)) => unreachable!("a held cell keeps no offset"),
        (true, Latest::Slot(slot)) => life16(life) | KIND_SLOT | slot as u64,
        (true, Latest::Bits(bits)) => {
            debug_assert!(bits <= INLINE_MAX);
            life16(life) | (bits + 1)
        }
    }
}

#[inline(always)]
fn life16(life: u32) -> u64 {
    // Mutant `inline_life_dropped` (loom suite only): the inline word keeps
    // no life, so an ended life's send displaces the new life's offset.
    #[cfg(inflight_mutant = "inline_life_dropped")]
    let life = {
        let _ = life;
        0
    };
    u64::from(life as u16) << 48
}

/// What `word` names, if anything.
#[inline(always)]
pub(crate) fn latest(word: u64, inline: bool) -> Option<Latest> {
    if inline {
        if word & LOW48 == 0 {
            None
        } else if word & KIND_SLOT != 0 {
            Some(Latest::Slot((word & VALUE) as usize))
        } else {
            Some(Latest::Bits((word & VALUE) - 1))
        }
    } else {
        ((word & 0xffff_ffff) as usize)
            .checked_sub(1)
            .map(Latest::Slot)
    }
}

/// Whether the record in `word` (not empty) is of a newer life than
/// `life`, as serial numbers: modulo 2^32 in the held format, 2^16 in the
/// inline one.
#[inline(always)]
pub(crate) fn newer_than(word: u64, life: u32, inline: bool) -> bool {
    if inline {
        (((word >> 48) as u16).wrapping_sub(life as u16) as i16) > 0
    } else {
        crate::watermark::newer((word >> 32) as u32, life)
    }
}

/// The life stored in `word`: whole in the held format, its low 16 bits
/// in the inline one (see [`widen`]).
#[inline(always)]
pub(crate) fn life_of(word: u64, inline: bool) -> u32 {
    if inline {
        (word >> 48) as u32
    } else {
        (word >> 32) as u32
    }
}

/// The whole life whose low 16 bits are `low`: the latest at or before
/// `current` (the partition's life now); a record's life never passes its
/// partition's.
pub(crate) fn widen(low: u32, current: u32) -> u32 {
    let behind = (current as u16).wrapping_sub(low as u16);
    current.wrapping_sub(u32::from(behind))
}

/// How often a revoke clears its partition's inline cells of ended lives
/// (see `Generation::forget_ended`): every 2^14 lives, so that a cell's
/// life is never as much as 2^15 behind its partition's, and its 16 bits
/// never alias another life's. Every other life under loom, so that the
/// models reach a clearing revoke (`inline_models.rs`, I5): clearing more
/// often only clears sooner.
#[cfg(not(loom))]
pub(crate) const CLEAR_EVERY: u32 = 1 << 14;
#[cfg(loom)]
pub(crate) const CLEAR_EVERY: u32 = 2;

/// Whether an inline word holds an offset (not a slot) of a life older
/// than `life`, by its 16 bits compared as serial numbers: what
/// `forget_ended` clears. Not "other than `life`": a revoke clears with the
/// life it began, and another revoke of the partition may have begun a
/// newer one since, whose sends' offsets are current (review 4: a slower
/// of two overlapping revokes erased the newer life's acked offset).
/// Lives newer than `life` are at most the revokes running beside this
/// one ahead of it, far below 2^15.
pub(crate) fn older_bits(word: u64, life: u32) -> bool {
    let older = ((life as u16).wrapping_sub(life_of(word, true) as u16) as i16) > 0;
    matches!(latest(word, true), Some(Latest::Bits(_))) && older
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_round_trip_and_read_empty_as_nothing() {
        for inline in [false, true] {
            assert_eq!(latest(0, inline), None);
            let w = word(Latest::Slot(7), 9, inline);
            assert_eq!(latest(w, inline), Some(Latest::Slot(7)));
            assert_eq!(life_of(w, inline), 9);
        }
        for bits in [0, 1, 42, INLINE_MAX] {
            let w = word(Latest::Bits(bits), 0x1_0003, true);
            assert_eq!(latest(w, true), Some(Latest::Bits(bits)));
            assert_eq!(life_of(w, true), 3, "low 16 bits of the life");
        }
        // A life whose low 16 bits are 0 and offset bits 0 is not empty.
        assert_eq!(
            latest(word(Latest::Bits(0), 0, true), true),
            Some(Latest::Bits(0))
        );
        assert_eq!(
            latest(word(Latest::Slot(0), 0x1_0000, true), true),
            Some(Latest::Slot(0))
        );
    }

    #[test]
    fn lives_compare_as_serial_numbers_in_both_formats() {
        for inline in [false, true] {
            let w = word(Latest::Slot(1), 5, inline);
            assert!(newer_than(w, 4, inline));
            assert!(!newer_than(w, 5, inline));
            assert!(!newer_than(w, 6, inline));
            let wrapped = word(Latest::Slot(1), 0, inline);
            assert!(newer_than(wrapped, u32::MAX, inline));
        }
        // The inline format sees 16 bits: 2^16 revokes look like none.
        assert!(!newer_than(word(Latest::Bits(1), 1 << 16, true), 0, true));
    }

    #[test]
    fn widen_recovers_lives_up_to_2_pow_16_behind_and_never_ahead() {
        for current in [0_u32, 1, 5, 0xffff, 0x1_0000, 0x1_0005, u32::MAX] {
            for behind in [0_u32, 1, 3, (1 << 15) - 1, 1 << 15, (1 << 16) - 1] {
                let life = current.wrapping_sub(behind);
                assert_eq!(widen(life & 0xffff, current), life, "{current} {behind}");
            }
        }
    }

    #[test]
    fn only_offsets_of_older_lives_are_forgotten() {
        assert!(older_bits(word(Latest::Bits(1), 3, true), 4));
        assert!(
            !older_bits(word(Latest::Bits(1), 4, true), 4),
            "the current life"
        );
        assert!(
            !older_bits(word(Latest::Bits(1), 5, true), 4),
            "a newer life, begun by a revoke beside this one"
        );
        assert!(
            !older_bits(word(Latest::Bits(1), 0x1_0000, true), 0xffff),
            "a newer life across the 16-bit wrap"
        );
        assert!(
            older_bits(word(Latest::Bits(1), 0xffff, true), 0x1_0000),
            "an older life across the 16-bit wrap"
        );
        assert!(
            older_bits(word(Latest::Bits(1), 0x1_0000 - (1 << 14), true), 0x1_0000),
            "2^14 lives behind, what a clearing revoke finds at most"
        );
        assert!(
            !older_bits(word(Latest::Slot(1), 3, true), 4),
            "a held slot"
        );
        assert!(!older_bits(0, 4), "empty");
    }
}
