#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| inflight_fuzz::run_decode(data));
