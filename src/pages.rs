//! A growable array that never moves its elements: doubling pages allocated
//! on first use and kept until the array drops.
//!
//! Page `k` holds `FIRST << k` elements, so `COUNT` pages hold
//! `FIRST * (2^COUNT - 1)`. An element's address is stable for the life of
//! the array, so a reference needs no guard, and any index can be looked up
//! safely (a missing page is `None`). Slots, partition cells and partition
//! keys all live in one of these.
//!
//! Each page's pointer is kept biased: page `k`'s base minus `FIRST << k`
//! elements (a pointer below the allocation, never dereferenced as such),
//! so that element `i` is at that pointer plus `i + FIRST`, the very value
//! whose highest bit gives the page. A lookup is then an add, a bit scan,
//! one load and an address computation, with no offset within the page to
//! work out.

use crate::sync::{AtomicPtr, Ordering};

pub(crate) struct Pages<T, const FIRST: usize, const COUNT: usize> {
    /// Page `k`'s base, biased down by `FIRST << k` elements (see the
    /// module docs); null while the page is missing (a biased pointer is
    /// never null, see `alloc`).
    pages: [AtomicPtr<T>; COUNT],
    /// Page `k`'s base as allocated, unbiased: what `Drop` frees, and a
    /// pointer into the page for a leak checker. LeakSanitizer counts
    /// memory as reachable only through a pointer into it, and a biased
    /// pointer points below it: pages of a tracker whose generations wait
    /// in the epoch collector's garbage at exit would read as leaked.
    /// Written once, when the page is installed; never read on a lookup.
    bases: [AtomicPtr<T>; COUNT],
}

impl<T, const FIRST: usize, const COUNT: usize> Pages<T, FIRST, COUNT> {
    /// How many elements the pages can hold in all.
    pub(crate) const CAPACITY: usize = FIRST * ((1 << COUNT) - 1);

    pub(crate) fn new() -> Self {
        debug_assert!(FIRST.is_power_of_two());
        Self {
            pages: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            bases: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// Page number and offset in the page of an element index.
    #[inline]
    fn locate(index: usize) -> (usize, usize) {
        let x = index + FIRST;
        let page = Self::page(x);
        (page, x - (FIRST << page))
    }

    /// The page of the element whose index plus `FIRST` is `x`: the
    /// position of `x`'s highest bit, less `FIRST`'s.
    #[inline]
    fn page(x: usize) -> usize {
        (usize::BITS - 1 - x.leading_zeros() - FIRST.trailing_zeros()) as usize
    }

    /// The element at `index`, if its page exists. Any index is safe.
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        if index >= Self::CAPACITY {
            return None;
        }
        let x = index + FIRST;
        // Acquire: pairs with the Release CAS that installed the page, so
        // its initialised elements are visible.
        let biased = self.pages[Self::page(x)].load(Ordering::Acquire);
        if biased.is_null() {
            return None;
        }
        // SAFETY: a non-null page pointer is the base of a leaked boxed
        // slice of `FIRST << page` elements that lives as long as `self`,
        // biased down by `FIRST << page` elements; `x` is `FIRST << page`
        // plus `index`'s offset in the page, which is below that length
        // (see `locate`), so the element is in that slice.
        Some(unsafe { &*biased.wrapping_add(x) })
    }

    /// The element at `index` (below [`CAPACITY`](Self::CAPACITY)),
    /// allocating its page with `init` for every element if needed.
    #[inline]
    pub(crate) fn get_or_alloc(&self, index: usize, init: impl Fn() -> T) -> &T {
        debug_assert!(index < Self::CAPACITY);
        // Not through `get`: the test of its `Option` would stay, as the
        // compiler cannot tell that an element's address is never null.
        let x = index + FIRST;
        // Acquire: as in `get`.
        let biased = self.pages[Self::page(x)].load(Ordering::Acquire);
        if biased.is_null() {
            return self.alloc(index, init);
        }
        // SAFETY: as in `get`.
        unsafe { &*biased.wrapping_add(x) }
    }

    /// The element at `index` (below [`CAPACITY`](Self::CAPACITY)), whose
    /// page the caller knows to exist: it was handed the index. Panics if
    /// the page is missing. As [`get_or_alloc`](Self::get_or_alloc), with
    /// no `Option` to test.
    #[inline]
    pub(crate) fn existing(&self, index: usize) -> &T {
        debug_assert!(index < Self::CAPACITY);
        let x = index + FIRST;
        // Acquire: as in `get`.
        let biased = self.pages[Self::page(x)].load(Ordering::Acquire);
        assert!(
            !biased.is_null(),
            "element {index} was handed out, so its page exists"
        );
        // SAFETY: as in `get`.
        unsafe { &*biased.wrapping_add(x) }
    }

    /// [`get_or_alloc`](Self::get_or_alloc) of the element that `place`
    /// puts in `index`'s stead, in the same page: `place(len, offset)`
    /// maps an offset in a page of `len` elements to another offset in it
    /// (a permutation of the page, for callers that spread neighbours
    /// apart; taken modulo `len`). One lookup of the page, for the two
    /// steps of working out the placed index and looking it up.
    #[inline]
    pub(crate) fn get_or_alloc_placed(
        &self,
        index: usize,
        place: impl FnOnce(usize, usize) -> usize,
        init: impl Fn() -> T,
    ) -> &T {
        debug_assert!(index < Self::CAPACITY);
        let x = index + FIRST;
        let page = Self::page(x);
        let len = FIRST << page;
        // The placed element's index plus `FIRST`, in the same page.
        let placed = len + (place(len, x - len) & (len - 1));
        // Acquire: as in `get`.
        let biased = self.pages[page].load(Ordering::Acquire);
        if biased.is_null() {
            return self.alloc(placed - FIRST, init);
        }
        // SAFETY: as in `get`: `placed` is `len` plus an offset below
        // `len`, in the page `biased` points below.
        unsafe { &*biased.wrapping_add(placed) }
    }

    /// [`get_or_alloc`](Self::get_or_alloc)'s slow path, once `get` saw the
    /// page missing: allocate it, unless another thread installs it first.
    #[cold]
    fn alloc(&self, index: usize, init: impl Fn() -> T) -> &T {
        let (page, offset) = Self::locate(index);
        let len = FIRST << page;
        let mut fresh = Box::into_raw((0..len).map(|_| init()).collect::<Box<[T]>>()) as *mut T;
        // A page whose biased pointer would be null (its base `len`
        // elements above address 0) could not be told from a missing one:
        // take another allocation (the first is still held, so it differs)
        // and give the first back. Never seen in practice.
        while fresh.wrapping_sub(len).is_null() {
            let other = Box::into_raw((0..len).map(|_| init()).collect::<Box<[T]>>()) as *mut T;
            // SAFETY: `fresh` is our own unshared allocation of `len`
            // elements, from `Box::into_raw` above.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(fresh, len)) });
            fresh = other;
        }
        // AcqRel: Release publishes the initialised elements with the
        // pointer; Acquire (on failure) sees the winner's.
        let biased = fresh.wrapping_sub(len);
        let biased = match self.pages[page].compare_exchange(
            std::ptr::null_mut(),
            biased,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // Relaxed: read only by `Drop`, which has `&mut self` (every
                // thread that installed a page is done with us by then).
                self.bases[page].store(fresh, Ordering::Relaxed);
                biased
            }
            Err(winner) => {
                // SAFETY: `fresh` is our own unshared allocation of `len`
                // elements, from `Box::into_raw` just above.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(fresh, len)) });
                winner
            }
        };
        // SAFETY: as in `get`; the page now exists, and `len + offset` is
        // `index + FIRST`.
        unsafe { &*biased.wrapping_add(len + offset) }
    }

    /// Calls `f(index, element)` for every element of every allocated page.
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, &T)) {
        for (page, base) in self.pages.iter().enumerate() {
            // Acquire: as in `get`.
            let biased = base.load(Ordering::Acquire);
            if biased.is_null() {
                continue;
            }
            let len = FIRST << page;
            let first = len - FIRST;
            for offset in 0..len {
                let element = biased.wrapping_add(len + offset);
                // SAFETY: as in `get`; `len + offset` is the element's
                // index plus `FIRST`.
                f(first + offset, unsafe { &*element });
            }
        }
    }
}

impl<T, const FIRST: usize, const COUNT: usize> Drop for Pages<T, FIRST, COUNT> {
    fn drop(&mut self) {
        for (page, base) in self.bases.iter_mut().enumerate() {
            // Relaxed: `&mut self`, so every other thread is done with us.
            let base = base.load(Ordering::Relaxed);
            if !base.is_null() {
                let len = FIRST << page;
                // SAFETY: `base` came from `Box::into_raw` of a
                // `len`-element slice installed as page `page` (its biased
                // pointer won the CAS), owned by these pages, which are
                // being dropped.
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
