//! Offsets kept in the partition cells: the types that may be, and the
//! copying of their bits in and out (see `cell` and [`Inline`]).
//!
//! [`Inline`]: crate::mode::Inline

/// An offset type whose values a tracker may keep inline, in its partition
/// cells: the primitive integers (Kafka's `i64` offsets, `u64` sequence
/// numbers and the rest). Sealed: copying their bits is a clone, and every
/// bit pattern of their size is a value, which is what the tracker relies
/// on. Choose it with
/// [`Builder::inline_offsets`](crate::Builder::inline_offsets).
pub trait InlineOffset: Copy + sealed::Sealed {}

macro_rules! inline_offsets {
    ($($t:ty),*) => {
        $(
            impl InlineOffset for $t {}
            impl sealed::Sealed for $t {}
        )*
    };
}

inline_offsets!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

mod sealed {
    pub trait Sealed {}
}

/// The bits of `offset`: its bytes, in memory order, in the low bytes of
/// a `u64` (zeroes above).
///
/// # Safety
///
/// SAFETY: `O` must be an [`InlineOffset`] type: the tracker's mode is
/// [`Inline`](crate::mode::Inline), which only
/// [`Builder::inline_offsets`](crate::Builder::inline_offsets) makes,
/// and only for such an `O`.
#[inline(always)]
pub(crate) unsafe fn bits_of<O>(offset: &O) -> u64 {
    // Not a `const` assertion: callers name wider types in branches the
    // mode's constant removes. Folded away for the integer types.
    assert!(std::mem::size_of::<O>() <= 8);
    let mut bits = 0_u64;
    // SAFETY: `O` is a primitive integer (the caller's contract): its
    // `size_of` bytes are all initialised, and fit in `bits`; the two do
    // not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (offset as *const O).cast::<u8>(),
            (&mut bits as *mut u64).cast::<u8>(),
            std::mem::size_of::<O>(),
        );
    }
    bits
}

/// The offset whose [`bits_of`] are `bits`.
///
/// # Safety
///
/// SAFETY: as [`bits_of`], `O` must be an [`InlineOffset`] type.
#[inline]
pub(crate) unsafe fn from_bits<O>(bits: u64) -> O {
    // Not a `const` assertion: callers name wider types in branches the
    // mode's constant removes. Folded away for the integer types.
    assert!(std::mem::size_of::<O>() <= 8);
    let mut offset = std::mem::MaybeUninit::<O>::uninit();
    // SAFETY: as in `bits_of`; every bit pattern of a primitive integer's
    // size is one of its values, so the copy initialises `offset`.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&bits as *const u64).cast::<u8>(),
            offset.as_mut_ptr().cast::<u8>(),
            std::mem::size_of::<O>(),
        );
        offset.assume_init()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<O: InlineOffset + PartialEq + std::fmt::Debug>(offset: O) {
        // SAFETY: `O` is an `InlineOffset`.
        unsafe { assert_eq!(from_bits::<O>(bits_of(&offset)), offset) };
    }

    #[test]
    fn every_integer_type_round_trips() {
        round_trip(0_u8);
        round_trip(u16::MAX);
        round_trip(-1_i32);
        round_trip(i64::MIN);
        round_trip(u64::MAX);
        round_trip(12_345_usize);
        round_trip(-7_isize);
        // SAFETY: `u64` and `i64` are `InlineOffset`s.
        #[cfg(target_endian = "little")]
        unsafe {
            assert_eq!(bits_of(&42_u64), 42);
            assert_eq!(bits_of(&42_i64), 42, "non-negative offsets are their value");
        }
    }
}
