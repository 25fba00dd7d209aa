//! The example binaries' command lines: `--help` prints every option and exits 0, and the tour
//! prints a transcript in which the interesting fields of each message show.

mod support;

use std::process::{Command, Output};
use support::example;

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
            "--worker",
            "--no-execute",
            "--lease-ms N",
            "--no-quotas",
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

#[test]
fn tour_help_lists_every_option_and_exits_zero() {
    let (output, stdout) = run("tour", &["--help"]);
    assert!(output.status.success(), "{:?}", output.status);
    for option in [
        "--full",
        "--store memory",
        "--store sqlite:PATH",
        "--stdio",
        "--help",
    ] {
        assert!(stdout.contains(option), "{option} missing from:\n{stdout}");
    }
}

/// The client's lines (`→`) of the 2026-07-28 half of a transcript.
fn stateless_requests(transcript: &str) -> Vec<&str> {
    let half = transcript
        .split_once("\n2. ")
        .expect("the transcript has a second part")
        .1;
    half.lines()
        .filter(|l| l.trim_start().starts_with('→'))
        .collect()
}

#[test]
fn the_tour_shows_arguments_and_results_and_ends_with_next_steps() {
    let (output, stdout) = run("tour", &["--store", "memory"]);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("Why tasks:"), "{stdout}");
    assert!(stdout.contains("cargo xtask new"), "{stdout}");
    let requests = stateless_requests(&stdout);
    assert!(!requests.is_empty());
    for line in &requests {
        assert!(
            !line.contains("io.modelcontextprotocol/protocolVersion"),
            "the envelope is printed once, not on {line}"
        );
    }
    assert!(
        requests
            .iter()
            .any(|l| l.contains(r#""arguments":{"from":2}"#)),
        "the arguments show: {requests:#?}"
    );
    assert!(stdout.contains(r#""text":"kept draft.md""#), "{stdout}");
}

#[test]
fn the_full_tour_prints_every_message_whole() {
    let (output, stdout) = run("tour", &["--store", "memory", "--full"]);
    assert!(output.status.success(), "{stdout}");
    assert!(!stdout.contains("(cut;"), "{stdout}");
    for line in stateless_requests(&stdout) {
        assert!(
            line.contains("io.modelcontextprotocol/protocolVersion"),
            "--full shows the envelope on {line}"
        );
    }
}
