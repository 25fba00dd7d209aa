//! Drives the server the way an MCP client does, over an in-memory pipe: the plain tool, a
//! task from its creation to its result in both protocol eras, and a graceful shutdown.

use mcp_tasks::Server;
use mcp_tasks::store::SqliteTaskStore;
use mcp_tasks::transport::serve_io;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

/// The `_meta` a 2026-07-28 client that supports tasks sends with every request.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        },
    })
}

/// A fresh, empty task database, under cargo's scratch directory for tests.
fn store() -> SqliteTaskStore {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lifecycle-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    let store = hello_tasks::open_store(&dir);
    store.expect("the task database opens")
}

/// The server under test, with a fresh store.
fn server() -> Server {
    let server = hello_tasks::server(store());
    server.expect("the server builds")
}

/// A minimal MCP client on one end of a pipe; the server serves the other end.
struct Client {
    /// The server it speaks to.
    server: Server,
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
    next_id: u64,
    /// The notifications received so far.
    notifications: Vec<Value>,
}

impl Client {
    /// Starts a server with a fresh store and connects to it.
    fn connect() -> Self {
        let (client_end, server_end) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(server_end);
        let server = server();
        tokio::spawn(serve_io(server.clone(), read, write));
        let (read, writer) = tokio::io::split(client_end);
        Self {
            server,
            lines: BufReader::new(read).lines(),
            writer,
            next_id: 0,
            notifications: Vec::new(),
        }
    }

    /// Sends a message without waiting for an answer.
    async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.writer.write_all(line.as_bytes()).await.expect("send");
    }

    /// Sends a request and returns its response, keeping the notifications that come first.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = self.lines.next_line().await.expect("receive");
            let message: Value = serde_json::from_str(&line.expect("the server hung up"))
                .expect("the server sends JSON");
            if message["id"] == id && message.get("method").is_none() {
                return message;
            }
            self.notifications.push(message);
        }
    }

    /// Polls `tasks/get` at the interval the server suggests until the task is no longer
    /// working, and returns the task.
    async fn wait_for_task(&mut self, id: &Value) -> Value {
        for _ in 0..100 {
            let response = self
                .request("tasks/get", json!({"taskId": id, "_meta": meta()}))
                .await;
            let task = &response["result"];
            if task["status"] != "working" {
                return task.clone();
            }
            let wait = task["pollIntervalMs"].as_u64().unwrap_or(100);
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        panic!("task {id} is still working after 100 polls");
    }
}

#[tokio::test]
async fn every_tool_has_object_schemas() {
    let mut client = Client::connect();
    let response = client.request("tools/list", json!({"_meta": meta()})).await;
    let tools = response["result"]["tools"].as_array().expect("the tools");
    assert!(!tools.is_empty(), "{response}");
    // MCP requires both schemas to be objects at the root: return `Json<T>` of a struct.
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        if let Some(output) = tool.get("outputSchema") {
            assert_eq!(output["type"], "object", "{tool}");
        }
    }
}

#[tokio::test]
async fn greet_answers_at_once() {
    let mut client = Client::connect();
    let response = client
        .request(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "Ada"}, "_meta": meta()}),
        )
        .await;
    assert_eq!(response["result"]["content"][0]["text"], "Hello, Ada!");
}

#[tokio::test]
async fn count_runs_as_a_task_from_creation_to_result() {
    let mut client = Client::connect();

    // A client that supports tasks gets a task at once.
    let created = client
        .request(
            "tools/call",
            json!({"name": "count", "arguments": {"to": 3}, "_meta": meta()}),
        )
        .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    assert_eq!(created["result"]["status"], "working", "{created}");
    let id = created["result"]["taskId"].clone();

    // It polls `tasks/get` until the task ends; the result comes with the last answer.
    let task = client.wait_for_task(&id).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["result"]["content"][0]["text"], "counted to 3");
}

#[tokio::test]
async fn count_reports_progress_to_a_2025_11_25_client() {
    let mut client = Client::connect();
    client
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "lifecycle", "version": "1"}}),
        )
        .await;
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    // `params.task` asks for a task; the progress token names the progress notifications.
    let created = client
        .request(
            "tools/call",
            json!({"name": "count", "arguments": {"to": 2}, "task": {},
                   "_meta": {"progressToken": "count"}}),
        )
        .await;
    let id = created["result"]["task"]["taskId"].clone();
    assert!(id.is_string(), "{created}");

    // `tasks/result` waits for the task to end, then answers with the tool's result.
    let result = client.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["result"]["content"][0]["text"], "counted to 2");
    let progress: Vec<_> = client
        .notifications
        .iter()
        .filter(|n| n["params"]["progressToken"] == "count")
        .map(|n| n["params"]["progress"].as_f64())
        .collect();
    assert_eq!(progress, [Some(1.0), Some(2.0)]);
}

#[tokio::test]
async fn count_stops_when_its_task_is_cancelled() {
    let mut client = Client::connect();
    let created = client
        .request(
            "tools/call",
            json!({"name": "count", "arguments": {"to": 600}, "_meta": meta()}),
        )
        .await;
    let id = created["result"]["taskId"].clone();

    client
        .request("tasks/cancel", json!({"taskId": id, "_meta": meta()}))
        .await;
    let task = client.wait_for_task(&id).await;
    assert_eq!(task["status"], "cancelled", "{task}");
}

#[tokio::test]
async fn a_shutdown_refuses_new_tasks_and_hands_off_the_running_one() {
    let mut client = Client::connect();
    let created = client
        .request(
            "tools/call",
            json!({"name": "count", "arguments": {"to": 600}, "_meta": meta()}),
        )
        .await;
    let id = created["result"]["taskId"].clone();

    // What SIGTERM does in `src/main.rs`, with no grace: the running task is handed off
    // (`count` is not declared `on_restart = "rerun"`, so it ends failed), and calls that
    // would make a task are refused with a retryable error while the process stops.
    let handed_off = client.server.shutdown(Duration::ZERO).await;
    assert_eq!(handed_off.failed, 1, "{handed_off:?}");
    let refused = client
        .request(
            "tools/call",
            json!({"name": "count", "arguments": {"to": 1}, "_meta": meta()}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    assert_eq!(
        refused["error"]["data"]["creation"], "draining",
        "{refused}"
    );
    let task = client.wait_for_task(&id).await;
    assert_eq!(task["status"], "failed", "{task}");
}
