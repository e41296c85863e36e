//! The receipt of a send, and how it packs into a `u64`.
//!
//! ```text
//!  63        56 55                    32 31                              0
//! +------------+------------------------+---------------------------------+
//! | tracker id |       slot index       |               tag               |
//! |   8 bits   |        24 bits         |             32 bits             |
//! +------------+------------------------+---------------------------------+
//! ```
//!
//! - **tracker id**: which tracker issued the ticket (the low 8 bits of a
//!   process-wide counter). A ticket handed to another tracker fails with
//!   [`ResolveError::ForeignTracker`](crate::ResolveError::ForeignTracker)
//!   unless the two ids are equal, which happens when 256 trackers were
//!   created in between. Then the tag check below still rejects it: each
//!   tracker starts its slots' tags at its own random value, so a foreign
//!   ticket matches a live record only if its 32-bit tag happens to equal
//!   that slot's, about one chance in four billion.
//! - **slot index**: where the record lives; at most 2^24 − 1 slots exist per
//!   tracker.
//! - **tag**: the slot's use count when the record was sent, counted from
//!   the tracker's random starting tag. Every reuse of a slot takes the next
//!   tag (skipping 0, so no ticket has tag 0 and the raw value 0 is never
//!   valid).
//!
//! ABA bound: a ticket that was already resolved is rejected as long as its
//! slot has been reused fewer than 2^32 − 1 times since. Only a ticket kept
//! across four billion reuses of one slot could match a newer record.

/// How many bits of a raw ticket hold the tag.
pub(crate) const TAG_BITS: u32 = 32;
/// How many bits hold the slot index.
pub(crate) const INDEX_BITS: u32 = 24;
/// The largest number of slots one tracker can hold.
pub(crate) const MAX_SLOTS: usize = (1 << INDEX_BITS) - 1;

const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// The receipt for one record handed to the sink.
///
/// A ticket is resolved exactly once, by [`Tracker::ack`](crate::Tracker::ack)
/// or [`Tracker::fail`](crate::Tracker::fail). It is not `Clone`, so the type
/// system rules out resolving it twice. It borrows nothing and is
/// `Send + Sync + 'static`, so it can travel into a producer callback; when
/// the callback can only carry an integer, [`Ticket::into_raw`] turns it into
/// a `u64` for [`Tracker::ack_raw`](crate::Tracker::ack_raw).
///
/// Dropping a ticket without resolving it leaves its record pending: it stays
/// counted in [`Tracker::in_flight`](crate::Tracker::in_flight) and holds back
/// every flush that covers it. Nothing is ever silently forgotten.
///
/// # The raw form, and its ABA bound
///
/// [`into_raw`](Ticket::into_raw) packs a ticket into a `u64`:
///
/// ```text
///  63        56 55                    32 31                              0
/// +------------+------------------------+---------------------------------+
/// | tracker id |       slot index       |               tag               |
/// |   8 bits   |        24 bits         |             32 bits             |
/// +------------+------------------------+---------------------------------+
/// ```
///
/// The tag is the slot's use count, from a random value per tracker; each
/// reuse of the slot takes the next tag (skipping 0). Any `u64` is safe to
/// pass to [`Tracker::ack_raw`](crate::Tracker::ack_raw): resolution is one
/// compare-and-swap from "live with this tag", so a forged, stale, foreign
/// or duplicate value is an error and changes nothing.
///
/// **ABA bound:** a resolved ticket is rejected as long as its slot has been
/// reused fewer than 2^32 − 1 times since; only a ticket kept across four
/// billion reuses of one slot could match a newer record. A ticket of
/// another tracker is rejected by its id byte, and when 256 trackers were
/// created in between (ids repeat), by the tag: each tracker starts its tags
/// at its own random value, so it matches a live record about one time in
/// four billion.
///
/// ```
/// let tracker = inflight::Tracker::new();
/// let ticket = tracker.send("orders-0", 41_u64).unwrap();
/// tracker.ack(ticket).unwrap();
/// assert_eq!(tracker.in_flight(), 0);
/// ```
#[must_use = "a record stays in flight until its ticket is acked or failed"]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    raw: u64,
}

impl Ticket {
    pub(crate) fn new(tracker: u8, index: usize, tag: u32) -> Self {
        debug_assert!(index <= MAX_SLOTS && tag != 0);
        Self {
            raw: (u64::from(tracker) << (INDEX_BITS + TAG_BITS))
                | ((index as u64) << TAG_BITS)
                | u64::from(tag),
        }
    }

    /// The raw value, without giving the ticket up.
    pub(crate) fn raw(&self) -> u64 {
        self.raw
    }

    /// Turns the ticket into an integer, for callbacks that can only carry
    /// one (a librdkafka opaque, a field in a C struct, a column).
    ///
    /// Resolve it with [`Tracker::ack_raw`](crate::Tracker::ack_raw) or
    /// [`Tracker::fail_raw`](crate::Tracker::fail_raw). Any `u64` is safe to
    /// pass there: a forged or stale value is rejected, never trusted.
    ///
    /// ```
    /// let tracker = inflight::Tracker::new();
    /// let raw: u64 = tracker.send(0_u32, 7_u64).unwrap().into_raw();
    /// tracker.ack_raw(raw).unwrap();
    /// assert!(tracker.ack_raw(raw).is_err()); // exactly once
    /// ```
    #[must_use = "the record stays in flight until this value is passed to ack_raw or fail_raw"]
    pub fn into_raw(self) -> u64 {
        self.raw
    }
}

/// A raw ticket taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawTicket {
    pub(crate) tracker: u8,
    pub(crate) index: usize,
    pub(crate) tag: u32,
}

impl RawTicket {
    pub(crate) fn decode(raw: u64) -> Self {
        Self {
            tracker: (raw >> (INDEX_BITS + TAG_BITS)) as u8,
            index: ((raw >> TAG_BITS) & INDEX_MASK) as usize,
            tag: (raw & TAG_MASK) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_field() {
        for (tracker, index, tag) in [(0, 0, 1), (255, MAX_SLOTS, u32::MAX), (17, 12345, 99)] {
            let raw = Ticket::new(tracker, index, tag).into_raw();
            assert_eq!(
                RawTicket::decode(raw),
                RawTicket {
                    tracker,
                    index,
                    tag
                }
            );
        }
    }

    #[test]
    fn zero_is_never_a_ticket() {
        assert_eq!(RawTicket::decode(0).tag, 0);
    }
}
