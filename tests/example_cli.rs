//! The example binaries' command lines: `--help` prints every option and exits 0.

use std::path::PathBuf;
use std::process::{Command, Output};

fn example(name: &str) -> PathBuf {
    // Integration tests live in target/<profile>/deps; `cargo test` builds examples next door.
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test --workspace`, which builds the examples",
        path.display()
    );
    path
}

fn run(name: &str, args: &[&str]) -> (Output, String) {
    let output = Command::new(example(name))
        .args(args)
        .output()
        .expect("run the example");
    let stdout = String::from_utf8(output.stdout.clone()).expect("utf-8 stdout");
    (output, stdout)
}

#[test]
fn conformance_server_help_lists_every_option_and_exits_zero() {
    for flag in ["--help", "-h"] {
        let (output, stdout) = run("conformance-server", &[flag]);
        assert!(output.status.success(), "{flag}: {:?}", output.status);
        assert!(output.stderr.is_empty(), "{flag} printed an error");
        for option in [
            "--stdio",
            "--http ADDR",
            "--store memory",
            "--store sqlite:PATH",
            "--help",
        ] {
            assert!(stdout.contains(option), "{option} missing from:\n{stdout}");
        }
    }
}

#[test]
fn conformance_server_refuses_an_unknown_argument_with_the_usage() {
    let (output, _) = run("conformance-server", &["--bogus"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unexpected argument \"--bogus\""),
        "{stderr}"
    );
    assert!(stderr.contains("usage: conformance-server"), "{stderr}");
}
