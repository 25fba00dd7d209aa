//! Compile-time behaviour of `#[task_tool]`: every case in `fail/` must fail to compile with
//! the message in its `.stderr`, and every case in `pass/` must build and run.
//!
//! Regenerate the snapshots with `TRYBUILD=overwrite cargo test -p mcp-tasks-ui-tests`, then
//! read the diff. One case: `cargo test -p mcp-tasks-ui-tests -- trybuild=not-async.rs`.

use std::io::Write as _;
use std::process::Command;

/// The flags trybuild gives rustc when it builds the cases, `\x1f`-separated.
///
/// trybuild builds the dependencies first without `--diagnostic-width=140` and the cases with
/// it, and because the flags differ cargo builds every dependency a second time for the first
/// case. Cargo prefers `CARGO_ENCODED_RUSTFLAGS` to the flags trybuild passes as `--config`,
/// so with these in it both steps use the same flags and the dependencies are built once.
const RUSTFLAGS: &str =
    "--cfg\x1ftrybuild\x1f--verbose\x1f-A\x1fdead_code\x1f--diagnostic-width=140";

#[test]
fn ui() {
    if std::env::var("CARGO_ENCODED_RUSTFLAGS").as_deref() != Ok(RUSTFLAGS) {
        // Setting the variable in this process would take `unsafe` (`set_var`), so the test
        // runs again in a child process that has it, printing straight to the terminal.
        let filters = std::env::args().filter(|a| a.starts_with("trybuild="));
        let status = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["ui", "--exact", "--nocapture"])
            .args(filters)
            .env("CARGO_ENCODED_RUSTFLAGS", RUSTFLAGS)
            .status()
            .expect("run the UI cases");
        assert!(status.success(), "UI cases failed: see the output above");
        return;
    }
    // trybuild prints nothing until its first case is built, and a cold build directory means
    // building every dependency first; say so on stderr, which the test harness does not hold.
    let _ = writeln!(
        std::io::stderr(),
        "ui: building the #[task_tool] cases with trybuild in target/tests/trybuild \
         (a cold run builds the dependencies there first: minutes)"
    );
    let t = trybuild::TestCases::new();
    t.compile_fail("fail/*.rs");
    t.pass("pass/*.rs");
}
