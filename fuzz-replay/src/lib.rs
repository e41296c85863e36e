//! Nothing here: the fuzz replay tests are in `tests/` (`fuzz_replay`,
//! `fuzz_lifecycle`, `fuzz_batch`). See `fuzz/README.md`.
