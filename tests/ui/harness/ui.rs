//! Compile-time behaviour of `#[task_tool]`: every case in `fail/` must fail to compile with
//! the message in its `.stderr`. (Every case in `pass/` must build and run: each is a test
//! target of this package, `cargo test -p mcp-tasks-ui-tests --test pass-nested-module`.)
//!
//! Regenerate the snapshots with `TRYBUILD=overwrite cargo test -p mcp-tasks-ui-tests --test ui`,
//! then read the diff. One case: `cargo test -p mcp-tasks-ui-tests --test ui -- trybuild=not-async.rs`.

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
    // trybuild prints nothing until its first case is checked, and a cold build directory
    // means checking every dependency first; say so on stderr, which the harness does not hold.
    let cases = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/fail"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
                .count()
        })
        .unwrap_or(0);
    let _ = writeln!(
        std::io::stderr(),
        "ui: `cargo check` of {cases} #[task_tool] cases that must fail, with trybuild in \
         target/tests/trybuild (a cold run checks the dependencies there first)"
    );
    let started = std::time::Instant::now();
    {
        let t = trybuild::TestCases::new();
        t.compile_fail("fail/*.rs");
        // The cases run when `t` is dropped.
    }
    let _ = writeln!(
        std::io::stderr(),
        "ui: the cases took {:.0?}",
        started.elapsed()
    );
}
