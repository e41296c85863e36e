//! Offset stores (issue 40), criterion: what one save costs, the price of
//! a commit of a source task that keeps its offsets with the crate.
//!
//! ```text
//! cargo bench --features serde --bench store
//! ```
//!
//! - `file_save/{P}`: one `FileStore::save` of P partitions (`String`
//!   keys, `u64` offsets) into a store that holds 1,000 partitions, in the
//!   system's temporary directory: encode the merged map as JSON, write a
//!   temporary file, fsync it, rename it, fsync the directory. The fsyncs
//!   dominate, and depend on the disk.
//! - `memory_save/{P}`: the same merge into a `MemoryStore`, for scale.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use inflight::store::{FileStore, MemoryStore, OffsetStore};
use std::collections::HashMap;

fn partitions(n: u64, value: u64) -> HashMap<String, u64> {
    (0..n).map(|p| (format!("table-{p}"), value + p)).collect()
}

/// Times saves of `n` partitions, each with new offsets, into `store`
/// (filled with 1,000 partitions first).
fn bench_saves<S, M>(group: &mut criterion::BenchmarkGroup<'_, M>, n: u64, store: &mut S)
where
    S: OffsetStore<String, u64>,
    M: criterion::measurement::Measurement,
{
    store.save(&partitions(1_000, 0)).unwrap();
    let mut value = 0;
    group.bench_function(BenchmarkId::from_parameter(n), |b| {
        b.iter(|| {
            value += 1;
            store.save(&partitions(n, value)).unwrap();
        })
    });
}

fn saves(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("inflight-bench-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut group = c.benchmark_group("file_save");
    for n in [1_u64, 64] {
        let path = dir.join(format!("offsets-{n}.json"));
        let mut store: FileStore<String, u64> = FileStore::open(&path).unwrap();
        bench_saves(&mut group, n, &mut store);
    }
    group.finish();
    let mut group = c.benchmark_group("memory_save");
    for n in [1_u64, 64] {
        bench_saves(&mut group, n, &mut MemoryStore::new());
    }
    group.finish();
    std::fs::remove_dir_all(&dir).unwrap();
}

criterion_group!(benches, saves);
criterion_main!(benches);
