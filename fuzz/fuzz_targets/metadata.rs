#![no_main]

// Counts what the harness holds, and refuses any one allocation past
// `inflight_fuzz::CAP` (see `harness/capped.rs`).
#[global_allocator]
static ALLOCATOR: inflight_fuzz::Capped = inflight_fuzz::Capped;

libfuzzer_sys::fuzz_target!(|data: &[u8]| inflight_fuzz::run_metadata(data));
