//! The `floor` contender: one cache-padded atomic counter, tracking nothing
//! per record (see the parent module).

use super::*;

/// One cache-padded counter: +1 on send, −1 on ack. Tracks nothing per
/// record, returns no offsets; its flush only waits for the counter to read
/// zero at some instant. The cost limit of any tracker.
pub struct Floor(CachePadded<AtomicU64>);

pub struct FloorFlush<'a>(&'a Floor);

impl Contender for Floor {
    const NAME: &'static str = "floor";
    type Token = ();
    type Flush<'a> = FloorFlush<'a>;

    fn new() -> Self {
        Self(CachePadded::new(AtomicU64::new(0)))
    }

    #[inline]
    fn send(&self, _partition: u32, _offset: u64) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    #[inline]
    fn ack(&self, _token: ()) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }

    fn begin_flush(&self) -> FloorFlush<'_> {
        FloorFlush(self)
    }
}

impl FlushCycle for FloorFlush<'_> {
    /// Polls: a short spin, then every 20 µs (a polling interval, not a
    /// synchronisation: the floor has no way to be woken, and polling keeps
    /// its flusher from eating the workers' cores).
    fn wait(&mut self, timeout: Duration) -> Option<HashMap<u32, u64>> {
        let deadline = Instant::now() + timeout;
        let mut spins = 0;
        loop {
            if self.0 .0.load(Ordering::Acquire) == 0 {
                return Some(HashMap::new());
            }
            if Instant::now() >= deadline {
                return None;
            }
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    fn commit(self) {}

    fn abort(self) {}
}
