//! Loom models of `inflight`. The models are in `tests/models.rs`; run them
//! with `./run` (or `./run MUTANT` to check that a mutant is caught).
