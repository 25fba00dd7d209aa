//! A guided tour: a real server and a scripted client talk over an in-process pipe, and every
//! message is printed.
//!
//! ```text
//! cargo run --example tour                        # the transcript, tasks kept in ./data/tour.db
//! cargo run --example tour -- --store memory      # the same, tasks kept in memory
//! cargo run --example tour -- --store sqlite:PATH # the same, tasks kept in PATH
//! cargo run --example tour -- --stdio             # serve the tour's tools on stdin/stdout instead
//! ```

use mcp_tasks::model::ElicitAction;
use mcp_tasks::prelude::*;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

/// Greet someone by name.
#[task_tool(mode = "forbidden")]
async fn greet(#[arg(description = "Who to greet.")] name: String) -> String {
    format!("Hello, {name}!")
}

/// Count down from `from`, reporting progress on the way.
#[task_tool(mode = "optional", poll_interval = "100ms")]
async fn countdown(
    #[arg(description = "Where to start.")] from: u32,
    progress: Progress,
) -> String {
    for i in 0..from {
        progress.report_with_message(
            f64::from(i + 1),
            Some(f64::from(from)),
            format!("{} left", from - i - 1),
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    "liftoff".to_owned()
}

/// Ask before deleting a file.
#[task_tool(mode = "optional", poll_interval = "100ms", destructive)]
async fn delete_file(
    #[arg(description = "The file to delete.")] file: String,
    client: Client,
) -> Result<String, ToolError> {
    let answer = client
        .elicit(
            format!("Really delete {file}?"),
            json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
        )
        .await?;
    let yes = answer.action == ElicitAction::Accept
        && answer
            .content
            .and_then(|c| c.get("confirm").and_then(Value::as_bool))
            == Some(true);
    Ok(if yes {
        format!("deleted {file}")
    } else {
        format!("kept {file}")
    })
}

/// Crunch numbers for a long time (until cancelled).
#[task_tool(mode = "required", poll_interval = "100ms")]
async fn crunch(cancel: CancellationToken, progress: Progress) -> Result<String, ToolError> {
    let mut n = 0.0;
    loop {
        n += 1.0;
        progress.report(n, None);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            () = cancel.cancelled() => return Err(ToolError::cancelled()),
        }
    }
}

/// A scripted client that prints every message it sends and receives.
struct Script {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
    next: u64,
    meta: Option<Value>,
}

impl Script {
    async fn send(&mut self, message: Value) -> anyhow::Result<()> {
        println!("  → {}", compact(&message));
        self.writer
            .write_all(format!("{message}\n").as_bytes())
            .await?;
        Ok(())
    }

    /// Sends a request and prints everything until its response arrives. Server requests
    /// (elicitation) are answered by `answer`.
    async fn call_with(
        &mut self,
        method: &str,
        mut params: Value,
        mut answer: impl FnMut(&Value) -> Value,
    ) -> anyhow::Result<Value> {
        if let Some(meta) = &self.meta
            && let Some(p) = params.as_object_mut()
        {
            let m = p.entry("_meta").or_insert_with(|| json!({}));
            if let (Some(m), Some(meta)) = (m.as_object_mut(), meta.as_object()) {
                for (k, v) in meta {
                    m.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
        self.next += 1;
        let id = self.next;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        loop {
            let line = self
                .lines
                .next_line()
                .await?
                .ok_or_else(|| anyhow::anyhow!("the server closed the pipe"))?;
            let message: Value = serde_json::from_str(&line)?;
            println!("  ← {}", compact(&message));
            if message["id"] == json!(id) && message.get("method").is_none() {
                return Ok(message);
            }
            if message.get("method").is_some() && message.get("id").is_some() {
                let result = answer(&message);
                self.send(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
                    .await?;
            }
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.call_with(method, params, |_| json!({})).await
    }

    /// Polls `tasks/get` at the task's poll interval until its status is one of `want`.
    async fn poll(&mut self, id: &str, want: &[&str]) -> anyhow::Result<Value> {
        loop {
            let r = self.call("tasks/get", json!({"taskId": id})).await?;
            let status = r["result"]["status"].as_str().unwrap_or_default();
            if want.contains(&status) {
                return Ok(r);
            }
            let wait = r["result"]["pollIntervalMs"]
                .as_u64()
                .or_else(|| r["result"]["pollInterval"].as_u64())
                .unwrap_or(200);
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
    }
}

fn compact(message: &Value) -> String {
    let mut message = message.clone();
    // The server's identity rides on every 2026-07-28 result; once is enough to read.
    if let Some(meta) = message
        .pointer_mut("/result/_meta")
        .and_then(Value::as_object_mut)
    {
        meta.remove("io.modelcontextprotocol/serverInfo");
        if meta.is_empty() {
            message["result"].as_object_mut().map(|r| r.remove("_meta"));
        }
    }
    let mut text = message.to_string();
    if text.chars().count() > 230 {
        text = text.chars().take(227).collect::<String>() + "...";
    }
    text
}

async fn connect(server: &Server, meta: Option<Value>) -> Script {
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_end);
    let server = server.clone();
    tokio::spawn(
        async move { mcp_tasks::transport::serve_io(server, server_read, server_write).await },
    );
    let (read, writer) = tokio::io::split(client_end);
    Script {
        lines: BufReader::new(read).lines(),
        writer,
        next: 0,
        meta,
    }
}

fn heading(text: &str) {
    println!("\n{text}");
}

fn task_id(r: &Value) -> String {
    r["result"]["taskId"]
        .as_str()
        .or_else(|| r["result"]["task"]["taskId"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Where tasks are kept: `--store memory`, `--store sqlite:PATH`, or by default a SQLite
/// file in `./data` (or `$MCP_TASKS_DATA_DIR`).
fn store_choice(args: &[String]) -> anyhow::Result<Option<std::path::PathBuf>> {
    let choice = args
        .iter()
        .position(|a| a == "--store")
        .map(|i| {
            args.get(i + 1)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("--store needs `memory` or `sqlite:PATH`"))
        })
        .transpose()?;
    match choice.as_deref() {
        Some("memory") => Ok(None),
        Some(other) => match other.strip_prefix("sqlite:") {
            Some(path) => Ok(Some(path.into())),
            None => anyhow::bail!("--store takes `memory` or `sqlite:PATH`, not {other:?}"),
        },
        None => {
            let dir = std::env::var_os("MCP_TASKS_DATA_DIR").map_or_else(
                || std::path::PathBuf::from("data"),
                std::path::PathBuf::from,
            );
            Ok(Some(dir.join("tour.db")))
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut builder = Server::builder()
        .name("tour")
        .version(env!("CARGO_PKG_VERSION"))
        .instructions("A tour of mcp-tasks.")
        .registry_tools();
    let store = store_choice(&args)?;
    if let Some(path) = &store {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        builder = builder.store(mcp_tasks::store::SqliteTaskStore::open(path)?);
    }
    let server = builder.build()?;
    if args.iter().any(|a| a == "--stdio") {
        server.serve_stdio().await?;
        return Ok(());
    }

    println!("mcp-tasks tour: four #[task_tool] functions, one server, two protocol eras.");
    match &store {
        Some(path) => println!("Tasks are kept in the SQLite file {}.", path.display()),
        None => println!("Tasks are kept in memory."),
    }
    let recovered = server.recover().await?;
    if recovered.rerun + recovered.failed > 0 {
        println!(
            "Settled {} task(s) an earlier run left unfinished.",
            recovered.rerun + recovered.failed
        );
    }

    heading("1. A 2025-11-25 client (stateful): initialize, list the tools, call one.");
    let mut c = connect(&server, None).await;
    c.call(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
               "clientInfo": {"name": "tour", "version": "1"}}),
    )
    .await?;
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await?;
    c.call("tools/list", json!({})).await?;
    c.call(
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "World"}}),
    )
    .await?;

    heading(
        "   A task: `params.task` turns the call into a handle; progress keeps the caller's token.",
    );
    let r = c
        .call(
            "tools/call",
            json!({"name": "countdown", "arguments": {"from": 3}, "task": {"ttl": 600000},
                   "_meta": {"progressToken": "cd"}}),
        )
        .await?;
    let id = task_id(&r);
    c.call("tasks/get", json!({"taskId": id})).await?;
    println!("   tasks/result blocks until the task ends, then answers with the tool's result:");
    c.call("tasks/result", json!({"taskId": id})).await?;

    heading(
        "   input_required: the task asks a question; the server sends elicitation/create tagged with the task.",
    );
    let r = c
        .call(
            "tools/call",
            json!({"name": "delete_file", "arguments": {"file": "notes.txt"}, "task": {}}),
        )
        .await?;
    let id = task_id(&r);
    c.call_with(
        "tasks/result",
        json!({"taskId": id}),
        |_| json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await?;

    heading("   Cancellation: tasks/cancel stops the work; a second cancel is refused.");
    let r = c
        .call("tools/call", json!({"name": "crunch", "task": {}}))
        .await?;
    let id = task_id(&r);
    tokio::time::sleep(Duration::from_millis(250)).await;
    c.call("tasks/cancel", json!({"taskId": id})).await?;
    c.call("tasks/cancel", json!({"taskId": id})).await?;

    heading("   Bad input gets a clear answer and the session goes on.");
    c.call(
        "tools/call",
        json!({"name": "greet", "arguments": {"name": 7}}),
    )
    .await?;
    c.call("tools/call", json!({"name": "crunch"})).await?;

    heading(
        "2. A 2026-07-28 client (stateless): each request carries its version and capabilities.",
    );
    let caps = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let mut c = connect(
        &server,
        Some(json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps,
        })),
    )
    .await;
    c.call("server/discover", json!({})).await?;

    heading("   The server decides: with the tasks extension declared, countdown becomes a task.");
    let r = c
        .call(
            "tools/call",
            json!({"name": "countdown", "arguments": {"from": 2}}),
        )
        .await?;
    let id = task_id(&r);
    c.poll(&id, &["completed"]).await?;

    heading("   input_required: the question waits in tasks/get; tasks/update answers it.");
    let r = c
        .call(
            "tools/call",
            json!({"name": "delete_file", "arguments": {"file": "draft.md"}}),
        )
        .await?;
    let id = task_id(&r);
    let r = c.poll(&id, &["input_required"]).await?;
    let key = r["result"]["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_default();
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"confirm": false}}}}),
    )
    .await?;
    c.poll(&id, &["completed"]).await?;

    heading("   Cancellation is an empty acknowledgement; the task then settles.");
    let r = c.call("tools/call", json!({"name": "crunch"})).await?;
    let id = task_id(&r);
    c.call("tasks/cancel", json!({"taskId": id})).await?;
    c.poll(&id, &["cancelled"]).await?;

    heading(
        "   Without the extension, the same tool runs inline and asks through an InputRequiredResult round.",
    );
    let mut plain = connect(
        &server,
        Some(json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        })),
    )
    .await;
    let first = plain
        .call(
            "tools/call",
            json!({"name": "delete_file", "arguments": {"file": "old.log"}}),
        )
        .await?;
    let key = first["result"]["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_default();
    plain
        .call(
            "tools/call",
            json!({"name": "delete_file", "arguments": {"file": "old.log"},
                   "requestState": first["result"]["requestState"],
                   "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}}),
        )
        .await?;
    println!("   A task-only tool tells such a client what it is missing (-32021):");
    plain.call("tools/call", json!({"name": "crunch"})).await?;

    println!("\nDone.");
    Ok(())
}
