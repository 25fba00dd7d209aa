//! A guided tour: a real server and a scripted client talk over an in-process pipe, and every
//! message is printed.
//!
//! ```text
//! cargo run --example tour            # the transcript
//! cargo run --example tour -- --stdio # serve the tour's tools on stdin/stdout instead
//! ```

use mcp_tasks::model::{CallToolResult, Content};
use mcp_tasks::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

fn server() -> anyhow::Result<Server> {
    let greet = Tool::typed("greet", |_cx, args: GreetArgs| async move {
        format!("Hello, {}!", args.name)
    })
    .description("Greet someone by name.");
    let countdown = Tool::typed(
        "countdown",
        |cx: TaskContext, args: CountdownArgs| async move {
            let progress = cx.progress();
            for i in 0..args.from {
                progress.report_with_message(
                    f64::from(i + 1),
                    Some(f64::from(args.from)),
                    format!("{} left", args.from - i - 1),
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Ok::<_, ToolError>(CallToolResult::success(vec![Content::text("liftoff")]))
        },
    )
    .description("Count down, reporting progress on the way.");
    let confirm = Tool::typed("confirm", |cx: TaskContext, args: ConfirmArgs| async move {
        let answer = cx
            .client()
            .elicit(
                format!("Really delete {}?", args.file),
                json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
            )
            .await?;
        let yes = answer.content.and_then(|c| c.get("confirm").and_then(Value::as_bool));
        Ok::<_, ToolError>(if yes == Some(true) {
            format!("deleted {}", args.file)
        } else {
            format!("kept {}", args.file)
        })
    })
    .description("Ask before deleting a file.");
    Ok(Server::builder()
        .name("tour")
        .version(env!("CARGO_PKG_VERSION"))
        .instructions("A tour of mcp-tasks.")
        .tool(greet)
        .tool(countdown)
        .tool(confirm)
        .build()?)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct CountdownArgs {
    /// Where to start.
    from: u32,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ConfirmArgs {
    /// The file to delete.
    file: String,
}

/// A scripted client that prints every message it sends and receives.
struct Client {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
    next: u64,
}

impl Client {
    async fn send(&mut self, message: Value) -> anyhow::Result<()> {
        println!("  → {}", compact(&message));
        self.writer
            .write_all(format!("{message}\n").as_bytes())
            .await?;
        Ok(())
    }

    /// Sends a request and prints everything until its response arrives. Server requests are
    /// answered by `answer`.
    async fn call(
        &mut self,
        method: &str,
        params: Value,
        mut answer: impl FnMut(&Value) -> Value,
    ) -> anyhow::Result<Value> {
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
}

fn compact(message: &Value) -> String {
    let mut text = message.to_string();
    if text.len() > 220 {
        text.truncate(217);
        text.push_str("...");
    }
    text
}

fn meta(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

fn no_requests(_: &Value) -> Value {
    json!({})
}

async fn connect(server: &Server) -> Client {
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_end);
    let server = server.clone();
    tokio::spawn(
        async move { mcp_tasks::transport::serve_io(server, server_read, server_write).await },
    );
    let (read, writer) = tokio::io::split(client_end);
    Client {
        lines: BufReader::new(read).lines(),
        writer,
        next: 0,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = server()?;
    if std::env::args().any(|a| a == "--stdio") {
        server.serve_stdio().await?;
        return Ok(());
    }

    println!("mcp-tasks tour: one server, two protocol eras.\n");
    println!("1. A 2025-11-25 client: initialize, list tools, call them.");
    let mut c = connect(&server).await;
    c.call(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
               "clientInfo": {"name": "tour", "version": "1"}}),
        no_requests,
    )
    .await?;
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await?;
    c.call("tools/list", json!({}), no_requests).await?;
    c.call(
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "World"}}),
        no_requests,
    )
    .await?;
    println!("\n   Progress arrives as notifications on the caller's token:");
    c.call(
        "tools/call",
        json!({"name": "countdown", "arguments": {"from": 3}, "_meta": {"progressToken": "cd"}}),
        no_requests,
    )
    .await?;
    println!("\n   A tool asks the user a question: the server sends elicitation/create.");
    c.call(
        "tools/call",
        json!({"name": "confirm", "arguments": {"file": "notes.txt"}}),
        |_| json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await?;
    println!("\n   Bad input gets a clear answer and the session goes on:");
    c.call(
        "tools/call",
        json!({"name": "greet", "arguments": {"name": 7}}),
        no_requests,
    )
    .await?;
    c.call("tools/call", json!({"name": "nope"}), no_requests)
        .await?;

    println!("\n2. A 2026-07-28 client: stateless, every request carries its own _meta.");
    let mut c = connect(&server).await;
    c.call(
        "server/discover",
        json!({"_meta": meta(json!({}))}),
        no_requests,
    )
    .await?;
    c.call(
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "World"}, "_meta": meta(json!({}))}),
        no_requests,
    )
    .await?;
    println!("\n   The same question becomes an InputRequiredResult round (MRTR):");
    let caps = json!({"elicitation": {}});
    let first = c
        .call(
            "tools/call",
            json!({"name": "confirm", "arguments": {"file": "notes.txt"}, "_meta": meta(caps.clone())}),
            no_requests,
        )
        .await?;
    let key = first["result"]["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_default();
    c.call(
        "tools/call",
        json!({"name": "confirm", "arguments": {"file": "notes.txt"}, "_meta": meta(caps),
               "requestState": first["result"]["requestState"],
               "inputResponses": {key: {"action": "accept", "content": {"confirm": false}}}}),
        no_requests,
    )
    .await?;
    println!("\n   Removed methods answer -32601; unknown versions -32022:");
    c.call("ping", json!({"_meta": meta(json!({}))}), no_requests)
        .await?;
    c.call(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                         "io.modelcontextprotocol/clientCapabilities": {}}}),
        no_requests,
    )
    .await?;
    println!("\nDone.");
    Ok(())
}
