//! Drives the conformance fixture as a real process over stdio, on the 2026-07-28 wire.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The lease the tests give fixture processes: short, so takeovers happen quickly.
pub const LEASE_MS: u64 = 1000;

pub fn example(name: &str) -> PathBuf {
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

pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}}},
    })
}

/// A fixture process serving stdio.
pub struct Server {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    next: u64,
}

impl Server {
    /// Serves stdio on the SQLite file `db`, with a short lease.
    pub fn start(db: &Path) -> Self {
        Self::start_with(db, &[])
    }

    /// [`Server::start`] with more arguments.
    pub fn start_with(db: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(example("conformance-server"))
            .args(["--stdio", "--store"])
            .arg(format!("sqlite:{}", db.display()))
            .args(["--lease-ms", &LEASE_MS.to_string()])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the conformance server");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            child,
            stdin,
            lines,
            next: 0,
        }
    }

    pub async fn send(&mut self, method: &str, mut params: Value) -> u64 {
        self.next += 1;
        params["_meta"] = meta();
        let msg = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        self.stdin
            .as_mut()
            .expect("stdin is open")
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
        self.next
    }

    /// Writes one JSON-RPC message as a line.
    pub async fn write(&mut self, message: &Value) {
        self.stdin
            .as_mut()
            .expect("stdin is open")
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }

    /// A request without the 2026-07-28 `_meta` (a 2025-11-25 session), answered.
    pub async fn raw_request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let m = self.recv().await.expect("the server is alive");
            if m["id"] == id && m.get("method").is_none() {
                return m;
            }
        }
    }

    /// A notification without parameters.
    pub async fn notify(&mut self, method: &str) {
        self.write(&json!({"jsonrpc": "2.0", "method": method}))
            .await;
    }

    /// Answers a server-to-client request.
    pub async fn respond(&mut self, id: &Value, result: Value) {
        self.write(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    pub async fn recv(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("an answer within 30 s")
            .ok()??;
        Some(serde_json::from_str(&line).unwrap())
    }

    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        loop {
            let m = self.recv().await.expect("the server is alive");
            if m["id"] == id {
                return m;
            }
        }
    }

    pub async fn get(&mut self, id: &str) -> Value {
        self.request("tasks/get", json!({"taskId": id})).await
    }

    /// Polls the task until its status is one of `want`, for at most `within`.
    pub async fn wait_for(&mut self, id: &str, want: &[&str], within: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let r = self.get(id).await;
            if r["result"]["status"]
                .as_str()
                .is_some_and(|s| want.contains(&s))
            {
                return r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {id} did not reach {want:?} within {within:?}: {r}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts a tool call as a task and returns its id.
    pub async fn start_task(&mut self, tool: &str, arguments: Value) -> String {
        let r = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        task_id(&r)
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    /// Sends a signal (`kill -STOP`, `kill -CONT`, …) to the process.
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// `kill -9`.
    pub async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

pub fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tasks.db")
}

pub fn task_id(r: &Value) -> String {
    r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {r}"))
        .to_owned()
}

/// The text of a terminal task's result.
pub fn result_text(r: &Value) -> String {
    r["result"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result: {r}"))
        .to_owned()
}
