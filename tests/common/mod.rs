//! Helpers shared by the integration tests.

#![allow(dead_code)] // each test file uses a different part

/// A loop count: `n`, or under Miri, which runs a test some ten thousand
/// times slower, `n / 400` (at least 1). For loops whose length only adds
/// repetitions; a loop whose length is what the test checks (a bound, a
/// wrap-around) keeps its count or sets its own under `cfg!(miri)`.
pub fn scaled<T>(n: T) -> T
where
    T: Copy + PartialOrd + From<u8> + std::ops::Div<Output = T>,
{
    if cfg!(miri) {
        let cut = n / T::from(200) / T::from(2);
        if cut < T::from(1) {
            T::from(1)
        } else {
            cut
        }
    } else {
        n
    }
}

/// A tiny deterministic PRNG (xorshift64*), so tests need no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One barrier flush now (`wait(Duration::ZERO)`), committed if it
/// succeeds: its offsets, or why it did not.
pub fn flush_now<P, O, M: inflight::mode::Mode>(
    tracker: &inflight::Tracker<P, O, M>,
) -> Result<std::collections::HashMap<P, O>, inflight::FlushError>
where
    P: std::hash::Hash + Eq + Clone + Send + Sync,
    O: Clone + Send + Sync,
{
    let mut flush = tracker.begin_flush().unwrap();
    let offsets = flush.wait(std::time::Duration::ZERO)?;
    flush.commit().unwrap();
    Ok(offsets)
}
