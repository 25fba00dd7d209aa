//! Compile-time behaviour of `#[task_tool]`: every error case in `tests/ui/*.rs` must fail
//! with the message in its `.stderr`, and every case in `tests/ui/pass/` must build and run.
//!
//! Regenerate the snapshots with `TRYBUILD=overwrite cargo test --test ui`, then read them.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
