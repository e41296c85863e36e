//! Loom mutants, for the model-checking suite only (`loom-tests/`): under
//! `--cfg loom`, `INFLIGHT_MUTANT=name` compiles the crate with
//! `cfg(inflight_mutant = "name")`, a deliberately broken variant that a
//! loom model must catch (`loom-tests/check-mutants`). Through an
//! environment variable rather than `RUSTFLAGS`, so that switching mutants
//! rebuilds this crate and not every dependency. Outside `--cfg loom` this
//! does nothing: no build of the crate can pick up a mutant by accident.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=INFLIGHT_MUTANT");
    if std::env::var_os("CARGO_CFG_LOOM").is_none() {
        return;
    }
    match std::env::var("INFLIGHT_MUTANT") {
        Ok(mutant) if !mutant.is_empty() => {
            println!("cargo:rustc-cfg=inflight_mutant=\"{mutant}\"");
        }
        _ => {}
    }
}
