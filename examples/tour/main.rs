//! A guided tour: a real server and a scripted client talk over an in-process pipe, and every
//! message is printed. `cargo run --example tour -- --help` lists the options.

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

/// The one place the options are described (`--help` prints it, a bad argument shows it).
const USAGE: &str = "\
usage: cargo run --example tour -- [--full] [--store memory | --store sqlite:PATH] [--stdio]

A scripted client talks to a real mcp-tasks server in both protocol eras and prints every
message, with a caption saying what each step shows.

options:
  --full                print every message whole; by default long messages are shortened
                        and the per-request `_meta` envelope of 2026-07-28 is shown once
  --store memory        keep tasks in memory
  --store sqlite:PATH   keep tasks in the SQLite file PATH (default: data/tour.db, or
                        tour.db in $MCP_TASKS_DATA_DIR)
  --stdio               serve the tour's tools on stdin and stdout instead of the tour
  -h, --help            print this help and exit
";

/// What the command line asked for.
struct Options {
    /// `None`: tasks in memory.
    store: Option<std::path::PathBuf>,
    stdio: bool,
    full: bool,
    help: bool,
}

impl Options {
    fn parse(args: impl IntoIterator<Item = String>) -> anyhow::Result<Self> {
        let mut options = Options {
            store: Some(default_store()),
            stdio: false,
            full: false,
            help: false,
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--full" => options.full = true,
                "--stdio" => options.stdio = true,
                "-h" | "--help" => options.help = true,
                "--store" => {
                    let choice = args.next().unwrap_or_default();
                    options.store = match choice.as_str() {
                        "memory" => None,
                        other => match other.strip_prefix("sqlite:") {
                            Some(path) => Some(path.into()),
                            None => anyhow::bail!(
                                "--store takes `memory` or `sqlite:PATH`, not {other:?}\n\n{USAGE}"
                            ),
                        },
                    };
                }
                other => anyhow::bail!("unexpected argument {other:?}\n\n{USAGE}"),
            }
        }
        Ok(options)
    }
}

/// `./data/tour.db`, or `tour.db` in `$MCP_TASKS_DATA_DIR`.
fn default_store() -> std::path::PathBuf {
    let dir = std::env::var_os("MCP_TASKS_DATA_DIR").map_or_else(
        || std::path::PathBuf::from("data"),
        std::path::PathBuf::from,
    );
    dir.join("tour.db")
}

/// The `_meta` keys every 2026-07-28 request repeats; printed once unless `--full`.
const ENVELOPE: [&str; 2] = [
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
];

/// Longest message printed whole without `--full`.
const SHORT: usize = 400;

/// A scripted client that prints every message it sends and receives.
struct Script {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
    next: u64,
    meta: Option<Value>,
    full: bool,
}

impl Script {
    async fn send(&mut self, message: Value) -> anyhow::Result<()> {
        println!("  → {}", show(&message, self.full));
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
            println!("  ← {}", show(&message, self.full));
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

/// A message as printed: whole with `--full`; otherwise without the repeated envelope and the
/// server's identity, and cut short when still long.
fn show(message: &Value, full: bool) -> String {
    if full {
        return message.to_string();
    }
    let mut message = message.clone();
    for (pointer, keys) in [
        ("/params/_meta", &ENVELOPE[..]),
        ("/result/_meta", &["io.modelcontextprotocol/serverInfo"][..]),
    ] {
        let Some((parent, _)) = pointer.rsplit_once('/') else {
            continue;
        };
        let Some(meta) = message.pointer_mut(pointer).and_then(Value::as_object_mut) else {
            continue;
        };
        for key in keys {
            meta.remove(*key);
        }
        if meta.is_empty() {
            message
                .pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .map(|p| p.remove("_meta"));
        }
    }
    let text = message.to_string();
    if text.chars().count() > SHORT {
        let cut: String = text.chars().take(SHORT).collect();
        format!("{cut}… (cut; --full prints it whole)")
    } else {
        text
    }
}

async fn connect(server: &Server, meta: Option<Value>, full: bool) -> Script {
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
        full,
    }
}

/// A step's heading, then its caption: the problem the step shows, in plain words.
fn step(heading: &str, caption: &str) {
    println!("\n{heading}");
    for line in caption.lines() {
        println!("   {line}");
    }
}

fn task_id(r: &Value) -> String {
    r["result"]["taskId"]
        .as_str()
        .or_else(|| r["result"]["task"]["taskId"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse(std::env::args().skip(1))?;
    if options.help {
        print!("{USAGE}");
        return Ok(());
    }
    let mut builder = Server::builder()
        .name("tour")
        .version(env!("CARGO_PKG_VERSION"))
        .instructions("A tour of mcp-tasks.")
        .registry_tools();
    let store = options.store;
    if let Some(path) = &store {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        builder = builder.store(mcp_tasks::store::SqliteTaskStore::open(path)?);
    }
    let server = builder.build()?;
    if options.stdio {
        server.serve_stdio().await?;
        return Ok(());
    }

    let full = options.full;
    println!("mcp-tasks tour: four #[task_tool] functions, one server, two protocol eras.");
    println!(
        "The tour's source is {}: the tools, the server and every step below are there.",
        file!()
    );
    println!(
        "\nWhy tasks: a plain tool call holds its request open until the tool is done. Work that
takes minutes (a build, a report, a download) then outlives client timeouts, and its result
is lost if the connection drops. A task turns the call into a handle at once: the client
polls it, answers its questions, cancels it or fetches its result later, and (with a
durable store) the handle still answers after the server restarts."
    );
    println!(
        "\n→ is what the client sends, ← what the server answers.{}",
        if full {
            ""
        } else {
            " Long messages are cut; --full prints them whole."
        }
    );
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

    step(
        "1. A 2025-11-25 client (stateful): initialize, list the tools, call one.",
        "The client learns what the server offers, then calls a quick tool that answers at once.",
    );
    let mut c = connect(&server, None, full).await;
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

    step(
        "   A task: `params.task` turns the call into a handle; progress keeps the caller's token.",
        "The problem: a slow tool would block this request. Asking for a task returns a handle\n\
         at once, and progress still reaches the caller while the work goes on.",
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

    step(
        "   input_required: the task asks a question; the server sends elicitation/create tagged with the task.",
        "The problem: work in the background sometimes needs the user (\"really delete?\").\n\
         The task pauses and the question reaches the client, marked with the task it is for.",
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

    step(
        "   Cancellation: tasks/cancel stops the work; a second cancel is refused.",
        "The problem: the user changed their mind about work that would run forever.",
    );
    let r = c
        .call("tools/call", json!({"name": "crunch", "task": {}}))
        .await?;
    let id = task_id(&r);
    tokio::time::sleep(Duration::from_millis(250)).await;
    c.call("tasks/cancel", json!({"taskId": id})).await?;
    c.call("tasks/cancel", json!({"taskId": id})).await?;

    step(
        "   Bad input gets a clear answer and the session goes on.",
        "The problem: models make mistakes. A wrong argument is an error the model can read\n\
         and fix; calling a task-only tool without a task is refused with a reason.",
    );
    c.call(
        "tools/call",
        json!({"name": "greet", "arguments": {"name": 7}}),
    )
    .await?;
    c.call("tools/call", json!({"name": "crunch"})).await?;

    step(
        "2. A 2026-07-28 client (stateless): each request carries its version and capabilities.",
        "There is no session to set up: any request can go to any server process, which is\n\
         what suits load-balanced servers and tasks that outlive a connection.",
    );
    let caps = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let envelope = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    if !full {
        println!(
            "   Every request below carries this in `params._meta` (left out of the lines below):"
        );
        println!("   {envelope}");
    }
    let mut c = connect(&server, Some(envelope), full).await;
    c.call("server/discover", json!({})).await?;

    step(
        "   The server decides: with the tasks extension declared, countdown becomes a task.",
        "The client only says it understands tasks; a tool that may take long answers with a\n\
         handle, and the client polls it at the interval the server suggests.",
    );
    let r = c
        .call(
            "tools/call",
            json!({"name": "countdown", "arguments": {"from": 2}}),
        )
        .await?;
    let id = task_id(&r);
    c.poll(&id, &["completed"]).await?;

    step(
        "   input_required: the question waits in tasks/get; tasks/update answers it.",
        "Without a connection for the server to push on, the question is part of the task's\n\
         state: the client sees it when it polls and answers whenever it is ready.",
    );
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

    step(
        "   Cancellation is an empty acknowledgement; the task then settles.",
        "Stopping is cooperative: the tool notices, and the task ends `cancelled`.",
    );
    let r = c.call("tools/call", json!({"name": "crunch"})).await?;
    let id = task_id(&r);
    c.call("tasks/cancel", json!({"taskId": id})).await?;
    c.poll(&id, &["cancelled"]).await?;

    step(
        "   Without the extension, the same tool runs inline and asks through an InputRequiredResult round.",
        "One declaration serves old and new clients: a client that does not know tasks still\n\
         gets the tool, asking its question in a round trip of the call itself.",
    );
    let plain_envelope = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    });
    if !full {
        println!("   This client's envelope: {plain_envelope}");
    }
    let mut plain = connect(&server, Some(plain_envelope), full).await;
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

    println!(
        "\nDone. Next steps:
  cargo xtask new my-server      a crate of your own with a task tool, a plain tool and a test
                                 (`--dir ../elsewhere` puts it outside this checkout)
  {:<30} the code of this tour: its tools and its scripted client
  cargo doc -p mcp-tasks --all-features --open
                                 the manual: `#[task_tool]`, `Server`, `TaskContext`, serving
                                 over stdio and HTTP, stores, logs and metrics
  README.md                      how to depend on mcp-tasks from your own project",
        file!()
    );
    Ok(())
}
