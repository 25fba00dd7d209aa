//! Spawns the tour example as a real process and speaks to it over its stdin and stdout.

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

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
