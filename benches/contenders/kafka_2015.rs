//! The `kafka_2015` contender: Kafka Connect's 2015 `WorkerSourceTask`
//! bookkeeping, with the KAFKA-2867 fix (see the parent module).

use super::*;

/// Kafka Connect's `WorkerSourceTask` offset tracking, 0.9 era, with the
/// KAFKA-2867 fix (both `finish*Flush` run under the lock).
///
/// Java (`WorkerSourceTask`, `OffsetStorageWriter`)     | here
/// -----------------------------------------------------|-------------------------
/// `synchronized (this)` monitor                        | `state: Mutex<State>`
/// `this.wait(ms)` / `this.notifyAll()`                 | `drained: Condvar`
/// `outstandingMessages` (`IdentityHashMap`)            | `outstanding`
/// `outstandingMessagesBacklog`                         | `backlog`
/// `flushing`                                           | `flushing`
/// `offsetWriter.offset(p, o)` → writer's `data` map    | `data`
/// `offsetWriter.beginFlush()` → `toFlush = data`       | `to_flush`
/// `offsetWriter.cancelFlush()`: `toFlush.putAll(data)` | in `abort`
///
/// The record's identity (an `IdentityHashMap` key) becomes a `u64` id drawn
/// under the lock. Kafka's `OffsetStorageWriter` has a monitor of its own,
/// taken inside the task's; here both are the one mutex, which only makes
/// the port cheaper than the original. A callback for a record found in
/// neither map (Kafka logs "CRITICAL Saw callback for record that was not
/// present") is counted in `critical`; with the fix it stays zero.
pub struct Kafka2015 {
    state: Mutex<KafkaState>,
    drained: Condvar,
}

struct KafkaState {
    next_id: u64,
    outstanding: FxMap<u64, (u32, u64)>,
    backlog: FxMap<u64, (u32, u64)>,
    flushing: bool,
    data: FxMap<u32, u64>,
    to_flush: Option<FxMap<u32, u64>>,
    critical: u64,
}

impl Kafka2015 {
    /// Callbacks for records in neither map (zero unless the port is wrong).
    pub fn critical(&self) -> u64 {
        self.state.lock().unwrap().critical
    }
}

/// A Kafka flush in progress (the body of `commitOffsets`).
pub struct KafkaFlush<'a> {
    task: &'a Kafka2015,
}

impl Contender for Kafka2015 {
    const NAME: &'static str = "kafka_2015";
    type Token = u64;
    type Flush<'a> = KafkaFlush<'a>;

    fn new() -> Self {
        Self {
            state: Mutex::new(KafkaState {
                next_id: 0,
                outstanding: FxMap::default(),
                backlog: FxMap::default(),
                flushing: false,
                data: FxMap::default(),
                to_flush: None,
                critical: 0,
            }),
            drained: Condvar::new(),
        }
    }

    /// `sendRecords`: under the monitor, put the record into `outstanding`,
    /// or into the backlog while a flush runs, and record its offset.
    #[inline]
    fn send(&self, partition: u32, offset: u64) -> u64 {
        let mut s = self.state.lock().unwrap();
        let id = s.next_id;
        s.next_id += 1;
        if !s.flushing {
            s.outstanding.insert(id, (partition, offset));
        } else {
            s.backlog.insert(id, (partition, offset));
        }
        s.data.insert(partition, offset);
        id
    }

    /// `recordSent` (synchronized): remove from `outstanding`, or from the
    /// backlog while flushing; wake the flusher when `outstanding` empties.
    #[inline]
    fn ack(&self, id: u64) {
        let mut s = self.state.lock().unwrap();
        let mut removed = s.outstanding.remove(&id);
        if removed.is_none() && s.flushing {
            removed = s.backlog.remove(&id);
        }
        if removed.is_none() {
            s.critical += 1;
        } else if s.flushing && s.outstanding.is_empty() {
            // Java calls notifyAll holding the monitor; so does the port.
            self.drained.notify_all();
        }
    }

    /// `sendRecords` for a whole poll: the loop of `send` above under one
    /// lock (Kafka's takes the monitor per record; one lock per batch is
    /// the port at its best).
    #[inline]
    fn send_batch(&self, partition: u32, offsets: Range<u64>, tokens: &mut Vec<u64>) {
        let mut s = self.state.lock().unwrap();
        let mut last = None;
        for offset in offsets {
            let id = s.next_id;
            s.next_id += 1;
            if !s.flushing {
                s.outstanding.insert(id, (partition, offset));
            } else {
                s.backlog.insert(id, (partition, offset));
            }
            last = Some(offset);
            tokens.push(id);
        }
        if let Some(offset) = last {
            s.data.insert(partition, offset);
        }
    }

    /// `recordSent` for a batch of callbacks, under one lock.
    #[inline]
    fn ack_batch(&self, tokens: &mut Vec<u64>) {
        let mut s = self.state.lock().unwrap();
        let mut drained = false;
        for id in tokens.drain(..) {
            let mut removed = s.outstanding.remove(&id);
            if removed.is_none() && s.flushing {
                removed = s.backlog.remove(&id);
            }
            if removed.is_none() {
                s.critical += 1;
            } else if s.flushing && s.outstanding.is_empty() {
                drained = true;
            }
        }
        if drained {
            self.drained.notify_all();
        }
    }

    /// `commitOffsets`, first synchronized part: set `flushing` and snapshot
    /// the offsets (`offsetWriter.beginFlush()`).
    fn begin_flush(&self) -> KafkaFlush<'_> {
        let mut s = self.state.lock().unwrap();
        s.flushing = true;
        if !s.data.is_empty() {
            let data = std::mem::take(&mut s.data);
            s.to_flush = Some(data);
        }
        KafkaFlush { task: self }
    }
}

impl FlushCycle for KafkaFlush<'_> {
    /// `commitOffsets`' loop: `while (!outstandingMessages.isEmpty())
    /// this.wait(timeoutMs)`, failing at the deadline. The offsets are the
    /// snapshot (`doFlush` serialises `toFlush`; here it is cloned).
    fn wait(&mut self, timeout: Duration) -> Option<HashMap<u32, u64>> {
        let deadline = Instant::now() + timeout;
        let mut s = self.task.state.lock().unwrap();
        while !s.outstanding.is_empty() {
            let remaining = deadline.checked_duration_since(Instant::now())?;
            if remaining.is_zero() {
                return None;
            }
            s = self.task.drained.wait_timeout(s, remaining).unwrap().0;
        }
        Some(
            s.to_flush
                .as_ref()
                .map(|m| m.iter().map(|(&p, &o)| (p, o)).collect())
                .unwrap_or_default(),
        )
    }

    /// `finishSuccessfulFlush` (synchronized: the KAFKA-2867 fix): swap the
    /// maps; the writer's flush completes (`toFlush = null`).
    fn commit(self) {
        let mut s = self.task.state.lock().unwrap();
        let s = &mut *s;
        std::mem::swap(&mut s.outstanding, &mut s.backlog);
        s.flushing = false;
        s.to_flush = None;
    }

    /// `finishFailedFlush` (synchronized): `offsetWriter.cancelFlush()`
    /// merges newer offsets into the snapshot and makes it current again;
    /// the backlog goes back into `outstanding`.
    fn abort(self) {
        let mut s = self.task.state.lock().unwrap();
        let s = &mut *s;
        if let Some(mut to_flush) = s.to_flush.take() {
            to_flush.extend(s.data.drain());
            s.data = to_flush;
        }
        let backlog = std::mem::take(&mut s.backlog);
        s.outstanding.extend(backlog);
        s.flushing = false;
    }
}
