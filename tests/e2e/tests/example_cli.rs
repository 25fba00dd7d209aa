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
    // The tour names its own source, at the start and among the next steps.
    let source = "examples/tour/main.rs";
    assert!(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join(source)
            .is_file()
    );
    assert_eq!(stdout.matches(source).count(), 2, "{stdout}");
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

#[test]
fn the_metrics_example_says_what_it_counted_and_how_to_serve_it() {
    let (output, stdout) = run("metrics", &[]);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("Five `nap` calls became tasks"), "{stdout}");
    for line in [
        r#"mcp_tasks_created_total{tool="nap"} 5"#,
        r#"mcp_tasks_finished_total{tool="nap",status="completed"} 5"#,
        "mcp_tasks_running 0",
    ] {
        assert!(stdout.lines().any(|l| l == line), "{line} in:\n{stdout}");
    }
    assert!(stdout.contains("--serve 127.0.0.1:3000"), "{stdout}");
    assert!(stdout.contains("examples/metrics.rs"), "{stdout}");
}

#[tokio::test]
async fn the_metrics_example_serves_metrics_beside_mcp() {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(example("metrics"))
        .args(["--serve", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("run the metrics example");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let base = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("MCP on ") {
                return rest.split("/mcp").next().unwrap().to_owned();
            }
        }
        panic!("the example ended before it served");
    })
    .await
    .expect("the example serves within 30 s");
    let client = reqwest::Client::new();
    let metrics = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"mcp_tasks_created_total{tool="nap"} 5"#),
        "{metrics}"
    );
    let list = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let tools = support::http::stateless(
        &format!("{base}/mcp"),
        1,
        "tools/list",
        list["params"].clone(),
        &[],
    )
    .send()
    .await
    .unwrap();
    let tools = support::http::answer(tools).await;
    assert_eq!(tools["result"]["tools"][0]["name"], "nap", "{tools}");
    child.kill().await.unwrap();
}
