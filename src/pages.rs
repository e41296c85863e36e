//! A growable array that never moves its elements: doubling pages allocated
//! on first use and kept until the array drops.
//!
//! Page `k` holds `FIRST << k` elements, so `COUNT` pages hold
//! `FIRST * (2^COUNT - 1)`. An element's address is stable for the life of
//! the array, so a reference needs no guard, and any index can be looked up
//! safely (a missing page is `None`). Slots, partition cells and partition
//! keys all live in one of these.

use crate::sync::{AtomicPtr, Ordering};

pub(crate) struct Pages<T, const FIRST: usize, const COUNT: usize> {
    pages: [AtomicPtr<T>; COUNT],
}

impl<T, const FIRST: usize, const COUNT: usize> Pages<T, FIRST, COUNT> {
    /// How many elements the pages can hold in all.
    pub(crate) const CAPACITY: usize = FIRST * ((1 << COUNT) - 1);

    pub(crate) fn new() -> Self {
        debug_assert!(FIRST.is_power_of_two());
        Self {
            pages: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// Page number and offset in the page of an element index.
    #[inline]
    fn locate(index: usize) -> (usize, usize) {
        let x = index + FIRST;
        let page = (usize::BITS - 1 - x.leading_zeros() - FIRST.trailing_zeros()) as usize;
        (page, x - (FIRST << page))
    }

    /// The element at `index`, if its page exists. Any index is safe.
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        if index >= Self::CAPACITY {
            return None;
        }
        let (page, offset) = Self::locate(index);
        // Acquire: pairs with the Release CAS that installed the page, so
        // its initialised elements are visible.
        let base = self.pages[page].load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: a non-null page pointer came from a leaked boxed slice of
        // `FIRST << page` elements that lives as long as `self`, and
        // `offset` is below that length by construction of `locate`.
        Some(unsafe { &*base.add(offset) })
    }

    /// The element at `index` (below [`CAPACITY`](Self::CAPACITY)),
    /// allocating its page with `init` for every element if needed.
    #[inline]
    pub(crate) fn get_or_alloc(&self, index: usize, init: impl Fn() -> T) -> &T {
        debug_assert!(index < Self::CAPACITY);
        match self.get(index) {
            Some(element) => element,
            None => self.alloc(index, init),
        }
    }

    /// [`get_or_alloc`](Self::get_or_alloc)'s slow path, once `get` saw the
    /// page missing: allocate it, unless another thread installs it first.
    #[cold]
    fn alloc(&self, index: usize, init: impl Fn() -> T) -> &T {
        let (page, offset) = Self::locate(index);
        let len = FIRST << page;
        let fresh: Box<[T]> = (0..len).map(|_| init()).collect();
        let fresh = Box::into_raw(fresh) as *mut T;
        // AcqRel: Release publishes the initialised elements with the
        // pointer; Acquire (on failure) sees the winner's.
        let base = match self.pages[page].compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            Err(winner) => {
                // SAFETY: `fresh` is our own unshared allocation of `len`
                // elements, from `Box::into_raw` just above.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(fresh, len)) });
                winner
            }
        };
        // SAFETY: as in `get`; the page now exists.
        unsafe { &*base.add(offset) }
    }

    /// Calls `f(index, element)` for every element of every allocated page.
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, &T)) {
        for (page, base) in self.pages.iter().enumerate() {
            // Acquire: as in `get`.
            let base = base.load(Ordering::Acquire);
            if base.is_null() {
                continue;
            }
            let first = FIRST * ((1 << page) - 1);
            for offset in 0..FIRST << page {
                // SAFETY: as in `get`.
                f(first + offset, unsafe { &*base.add(offset) });
            }
        }
    }
}

impl<T, const FIRST: usize, const COUNT: usize> Drop for Pages<T, FIRST, COUNT> {
    fn drop(&mut self) {
        for (page, base) in self.pages.iter_mut().enumerate() {
            // Relaxed: `&mut self`, so every other thread is done with us.
            let base = base.load(Ordering::Relaxed);
            if !base.is_null() {
                let len = FIRST << page;
                // SAFETY: installed from `Box::into_raw` of a `len`-element
                // slice, owned by these pages, which are being dropped.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, len)) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_contiguous_and_stable() {
        type P = Pages<u32, 4, 3>;
        assert_eq!(P::CAPACITY, 28);
        assert_eq!(P::locate(0), (0, 0));
        assert_eq!(P::locate(3), (0, 3));
        assert_eq!(P::locate(4), (1, 0));
        assert_eq!(P::locate(11), (1, 7));
        assert_eq!(P::locate(12), (2, 0));
        assert_eq!(P::locate(27), (2, 15));
        let pages = P::new();
        assert!(pages.get(5).is_none());
        let five: *const u32 = pages.get_or_alloc(5, || 7);
        assert_eq!(pages.get(5).map(|r| r as *const u32), Some(five));
        assert!(pages.get(28).is_none() && pages.get(usize::MAX).is_none());
        let mut seen = Vec::new();
        pages.for_each(|i, &v| seen.push((i, v)));
        assert_eq!(seen, (4..12).map(|i| (i, 7)).collect::<Vec<_>>());
    }
}
