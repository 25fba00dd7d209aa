//! Spawns the examples as real processes and speaks to them over their stdin and stdout.

mod support;

use serde_json::{Value, json};
use std::process::Stdio;
use support::example;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn the_tour_binary_serves_both_eras_over_stdio_and_exits_on_eof() {
    let mut child = Command::new(example("tour"))
        .args(["--stdio", "--store", "memory"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the tour");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();

    let mut ask = async |message: Value| -> Value {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
        let line = lines.next_line().await.unwrap().expect("a response line");
        serde_json::from_str(&line).expect("stdout carries only JSON-RPC")
    };

    let r = ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}}),
    )
    .await;
    assert_eq!(r["result"]["supportedVersions"], json!(["2026-07-28"]));

    let r = ask(
        json!({"jsonrpc": "2.0", "id": "two", "method": "tools/call", "params": {
        "name": "greet", "arguments": {"name": "pipe"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}}),
    )
    .await;
    assert_eq!(r["id"], "two");
    assert_eq!(r["result"]["content"][0]["text"], "Hello, pipe!");

    let r = ask(json!("not a message")).await;
    assert_eq!(r["error"]["code"], -32600);

    drop(stdin);
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .expect("the server exits after stdin closes")
        .unwrap();
    assert!(status.success());
}

/// The conformance fixture on stdio, tasks in memory.
fn fixture() -> tokio::process::Child {
    Command::new(example("conformance-server"))
        .args(["--stdio", "--store", "memory"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the conformance server")
}

/// Reads the next line of `lines` as JSON, waiting at most 20 s.
async fn next_message(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> Option<Value> {
    let line = tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
        .await
        .expect("a line within 20 s")
        .unwrap()?;
    Some(serde_json::from_str(&line).expect("stdout carries only JSON-RPC"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_pipelined_after_initialize_are_served_by_the_process() {
    // The first four messages of an eager client, written at once.
    let pipelined = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "eager", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "greet", "arguments": {"name": "pipe"}}}),
    ]
    .map(|m| format!("{m}\n"))
    .concat();
    for run in 0..50 {
        let mut child = fixture();
        let mut stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        stdin.write_all(pipelined.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
        let mut answers = std::collections::BTreeMap::new();
        while answers.len() < 3 {
            let m = next_message(&mut lines).await.expect("the server is alive");
            if let Some(id) = m["id"].as_u64() {
                answers.insert(id, m);
            }
        }
        assert_eq!(
            answers[&1]["result"]["protocolVersion"], "2025-11-25",
            "run {run}: {}",
            answers[&1]
        );
        assert!(
            answers[&2]["result"]["tools"].is_array(),
            "run {run}: {}",
            answers[&2]
        );
        assert_eq!(
            answers[&3]["result"]["content"][0]["text"], "Hello, pipe!",
            "run {run}: {}",
            answers[&3]
        );
        drop(stdin);
        let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
            .await
            .expect("the server exits after stdin closes")
            .unwrap();
        assert!(status.success(), "run {run}: {status}");
    }
}

#[tokio::test]
async fn the_process_exits_at_eof_while_a_2025_task_runs() {
    // The end of stdin stops the server as a signal does: the task may run on for the
    // shutdown grace, then it is handed off and the process exits.
    let mut child = Command::new(example("conformance-server"))
        .args([
            "--stdio",
            "--store",
            "memory",
            "--shutdown-grace-ms",
            "1000",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the conformance server");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |message: Value| {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "leaving", "version": "1"}}}),
    )
    .await;
    assert_eq!(
        next_message(&mut lines).await.unwrap()["result"]["protocolVersion"],
        "2025-11-25"
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "slow_compute", "arguments": {"seconds": 3600}, "task": {"ttl": 600_000},
        "_meta": {"progressToken": "p"}}}),
    )
    .await;
    let task_id = loop {
        let m = next_message(&mut lines).await.expect("the server is alive");
        if m["id"] == 2 {
            break m["result"]["task"]["taskId"]
                .as_str()
                .unwrap_or_else(|| panic!("not a task: {m}"))
                .to_owned();
        }
    };
    // A blocking `tasks/result` is in flight when stdin closes.
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result",
        "params": {"taskId": task_id}}))
    .await;
    drop(stdin);
    let status = tokio::time::timeout(std::time::Duration::from_secs(15), child.wait())
        .await
        .expect(
            "the server exits within 15 s of stdin closing, though its task would run for an hour",
        )
        .unwrap();
    assert!(status.success(), "{status}");
    // Whatever it still wrote is well-formed, and the blocking `tasks/result` was not
    // answered with a made-up result.
    while let Some(m) = next_message(&mut lines).await {
        assert_ne!(m["id"], 3, "{m}");
    }
}
