//! The `dashmap` contender: a `DashMap` of records plus an atomic counter
//! per generation (see the parent module).

use super::*;

/// Generations a [`DashTracker`] can have uncommitted at once (ring size).
const RING: usize = 64;

/// The tracker a Rust user would hand-roll: a `DashMap` from record id to
/// `(partition, offset, generation)`, an epoch number bumped by
/// `begin_flush`, and a ring of per-generation counters and offset maps.
///
/// - send: enter the open generation (read the epoch, bump its counter,
///   re-read the epoch and back out if it moved), insert the record and its
///   offset into the generation's offset map.
/// - ack: remove the record, decrement its generation's counter; if that
///   reaches zero in a sealed generation, notify the flusher (mutex +
///   condvar, taken only then).
/// - flush: bump the epoch (the seal), wait until every uncommitted sealed
///   generation's counter is zero, merge their offset maps.
///
/// Where it is weaker than `inflight` (deliberately, as a hand-roll):
/// - "latest offset" of a partition is the last *insert* into the
///   generation's map, not the last send in linearization order: two sends
///   of one partition racing in one generation may leave the older offset.
/// - at most `RING - 1` uncommitted generations: when that many flushes
///   in a row were aborted, `begin_flush` seals nothing new, so records sent
///   just before it are not covered (they wait for a later flush).
/// - ids are never recycled and carry no tag: an ack of an unknown id is
///   silently ignored; there is no capacity bound, no close, no interrupt.
/// - entering a generation is two SeqCst loads and one RMW on a shared
///   counter plus two `DashMap` inserts (each a shard lock).
pub struct DashTracker {
    records: DashMap<u64, (u32, u64, u64), FxBuild>,
    /// The open generation's number.
    epoch: CachePadded<AtomicU64>,
    /// The oldest uncommitted generation. Written by the flusher only.
    committed: AtomicU64,
    counts: Box<[CachePadded<AtomicI64>]>,
    offsets: Box<[DashMap<u32, u64, FxBuild>]>,
    lock: Mutex<()>,
    drained: Condvar,
}

static THREAD_IDS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Record ids: a per-thread prefix and a per-thread sequence, so ids are
    /// unique without a shared counter on the hot path.
    static NEXT_ID: Cell<u64> = Cell::new(THREAD_IDS.fetch_add(1, Ordering::Relaxed) << 40);
}

impl DashTracker {
    #[inline]
    fn leave(&self, generation: u64) {
        let slot = &self.counts[(generation % RING as u64) as usize];
        // SeqCst: the flusher bumps the epoch, then reads the counters; an
        // acker decrements, then reads the epoch. One of them sees the other.
        if slot.fetch_sub(1, Ordering::SeqCst) == 1
            && generation < self.epoch.load(Ordering::SeqCst)
        {
            // Take the lock so the notify cannot fall between the flusher's
            // check and its wait.
            let _guard = self.lock.lock().unwrap();
            self.drained.notify_all();
        }
    }

    fn drained(&self, from: u64, upto: u64) -> bool {
        (from..=upto).all(|g| self.counts[(g % RING as u64) as usize].load(Ordering::SeqCst) == 0)
    }
}

/// A dashmap flush covering generations `from..=upto` (empty if `upto <
/// from`).
pub struct DashFlush<'a> {
    t: &'a DashTracker,
    from: u64,
    upto: u64,
}

impl Contender for DashTracker {
    const NAME: &'static str = "dashmap";
    type Token = u64;
    type Flush<'a> = DashFlush<'a>;

    fn new() -> Self {
        Self {
            records: DashMap::with_hasher(FxBuild),
            epoch: CachePadded::new(AtomicU64::new(0)),
            committed: AtomicU64::new(0),
            counts: (0..RING)
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
            offsets: (0..RING).map(|_| DashMap::with_hasher(FxBuild)).collect(),
            lock: Mutex::new(()),
            drained: Condvar::new(),
        }
    }

    #[inline]
    fn send(&self, partition: u32, offset: u64) -> u64 {
        let generation = loop {
            let g = self.epoch.load(Ordering::SeqCst);
            self.counts[(g % RING as u64) as usize].fetch_add(1, Ordering::SeqCst);
            if self.epoch.load(Ordering::SeqCst) == g {
                break g;
            }
            // Sealed between the two loads: back out, try the new one.
            self.leave(g);
        };
        let id = NEXT_ID.with(|n| {
            let id = n.get();
            n.set(id + 1);
            id
        });
        self.records.insert(id, (partition, offset, generation));
        self.offsets[(generation % RING as u64) as usize].insert(partition, offset);
        id
    }

    #[inline]
    fn ack(&self, id: u64) {
        if let Some((_, (_, _, generation))) = self.records.remove(&id) {
            self.leave(generation);
        }
    }

    fn begin_flush(&self) -> DashFlush<'_> {
        let from = self.committed.load(Ordering::Acquire);
        let open = self.epoch.load(Ordering::SeqCst);
        let upto = if open - from < RING as u64 - 1 {
            // The seal: sends that read `open` after this back out.
            self.epoch.fetch_add(1, Ordering::SeqCst)
        } else {
            // Ring full: cover only what is already sealed.
            open - 1
        };
        DashFlush {
            t: self,
            from,
            upto,
        }
    }
}

impl FlushCycle for DashFlush<'_> {
    fn wait(&mut self, timeout: Duration) -> Option<HashMap<u32, u64>> {
        let (t, from, upto) = (self.t, self.from, self.upto);
        let deadline = Instant::now() + timeout;
        let mut spins = 0;
        while !t.drained(from, upto) {
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let mut guard = t.lock.lock().unwrap();
            while !t.drained(from, upto) {
                let remaining = deadline.checked_duration_since(Instant::now())?;
                if remaining.is_zero() {
                    return None;
                }
                guard = t.drained.wait_timeout(guard, remaining).unwrap().0;
            }
        }
        let mut offsets = HashMap::new();
        for g in from..=upto {
            for cell in t.offsets[(g % RING as u64) as usize].iter() {
                offsets.insert(*cell.key(), *cell.value());
            }
        }
        Some(offsets)
    }

    fn commit(self) {
        for g in self.from..=self.upto {
            self.t.offsets[(g % RING as u64) as usize].clear();
        }
        self.t.committed.store(self.upto + 1, Ordering::Release);
    }

    fn abort(self) {}
}
