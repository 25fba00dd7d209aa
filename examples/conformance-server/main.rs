//! The fixture server of the official MCP conformance suite: the "everything" tools and the
//! tasks-extension fixtures, all written with `#[task_tool]`.
//!
//! ```text
//! cargo run -p mcp-tasks-e2e --example conformance-server -- --stdio   # tasks in data/conformance.db
//! cargo run -p mcp-tasks-e2e --example conformance-server -- --stdio --store memory
//! cargo run -p mcp-tasks-e2e --example conformance-server -- --stdio --store postgres://postgres@127.0.0.1:5432/tasks
//! cargo run -p mcp-tasks-e2e --example conformance-server -- --stdio --store redis://127.0.0.1:6379/0
//! cargo run -p mcp-tasks-e2e --example conformance-server -- --http 127.0.0.1:3000
//! cargo run -p mcp-tasks-e2e --example conformance-server -- --worker            # runs tasks, serves nobody
//! ```
//!
//! Several processes may share one store: `--no-execute` serves without running tools,
//! `--worker` runs tools without serving, and `--lease-ms N` sets the lease length.
//! `RUST_LOG` (e.g. `RUST_LOG=mcp_tasks_runtime=debug`) turns on logging to stderr.
//!
//! Over HTTP the endpoint is `/mcp`; `cargo xtask conformance` runs the official suite
//! against it.

use mcp_tasks::model::{CallToolResult, Content, ElicitAction};
use mcp_tasks::prelude::*;
use serde_json::json;
use std::time::Duration;

mod everything;
mod prompts;
mod resources;

/// A 1×1 transparent PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// A short silent WAV file.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

// ---- The "everything" tools ----

/// Returns a simple text response.
#[task_tool(mode = "forbidden")]
async fn test_simple_text() -> &'static str {
    "This is a simple text response for testing."
}

/// Returns an image.
#[task_tool(mode = "forbidden")]
async fn test_image_content() -> Content {
    Content::image(PNG, "image/png")
}

/// Returns audio.
#[task_tool(mode = "forbidden")]
async fn test_audio_content() -> Content {
    Content::audio(WAV, "audio/wav")
}

/// Returns an embedded resource.
#[task_tool(mode = "forbidden")]
async fn test_embedded_resource() -> Content {
    Content::embedded_text(
        "test://embedded-resource",
        "text/plain",
        "This is an embedded resource content.",
    )
}

/// Returns text, an image and a resource.
#[task_tool(mode = "forbidden")]
async fn test_multiple_content_types() -> Vec<Content> {
    vec![
        Content::text("Multiple content types test:"),
        Content::image(PNG, "image/png"),
        Content::embedded_text(
            "test://mixed-content-resource",
            "application/json",
            json!({"test": "data", "value": 123}).to_string(),
        ),
    ]
}

/// Logs three messages while it runs.
#[task_tool(mode = "forbidden")]
async fn test_tool_with_logging(cx: TaskContext) -> &'static str {
    for (i, message) in [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        cx.info(message);
    }
    "Logging test completed"
}

/// Always fails.
#[task_tool(mode = "forbidden")]
async fn test_error_handling() -> Result<String, ToolError> {
    Err(ToolError::new(
        "This tool intentionally returns an error for testing",
    ))
}

/// Reports progress 0, 50 and 100 out of 100.
#[task_tool(mode = "forbidden")]
async fn test_tool_with_progress(progress: Progress) -> &'static str {
    for (i, done) in [0.0, 50.0, 100.0].into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        progress.report(done, Some(100.0));
    }
    "Progress test completed"
}

/// Asks the client's model to answer a prompt.
#[task_tool(mode = "forbidden")]
async fn test_sampling(
    #[arg(description = "The prompt to send to the model.")] prompt: String,
    client: Client,
) -> Result<String, ToolError> {
    let answer = client.sample_text(prompt, 100).await?;
    Ok(format!("LLM response: {answer}"))
}

/// Asks the user for a username and an email address.
#[task_tool(mode = "forbidden")]
async fn test_elicitation(
    #[arg(description = "The message to show the user.")] message: String,
    client: Client,
) -> Result<String, ToolError> {
    let result = client
        .elicit(
            message,
            json!({
                "type": "object",
                "properties": {
                    "username": {"type": "string", "description": "Your username"},
                    "email": {"type": "string", "description": "Your email address"}
                },
                "required": ["username", "email"]
            }),
        )
        .await?;
    Ok(format!(
        "User response: {}",
        serde_json::to_string(&result)?
    ))
}

// ---- The tasks-extension fixtures ----

/// Greets someone.
#[task_tool(mode = "forbidden")]
async fn greet(name: String) -> String {
    format!("Hello, {name}!")
}

/// Sleeps for `seconds`, then answers.
#[task_tool(mode = "optional", poll_interval = "200ms")]
async fn slow_compute(
    #[arg(default = 1)] seconds: u64,
    label: Option<String>,
    progress: Progress,
    cancel: CancellationToken,
) -> Result<String, ToolError> {
    for s in 0..seconds {
        progress.report_with_message(s as f64, Some(seconds as f64), format!("{s}/{seconds} s"));
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = cancel.cancelled() => return Err(ToolError::cancelled()),
        }
    }
    let label = label.unwrap_or_else(|| "compute".into());
    Ok(format!("{label} finished after {seconds} s"))
}

/// Sleeps, then says so. Safe to run again after its process died: it is rerun under the
/// same id by whichever process takes it over.
#[task_tool(
    mode = "optional",
    poll_interval = "200ms",
    idempotent,
    on_restart = "rerun"
)]
async fn durable_sleep(seconds: u64, label: String) -> String {
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    format!("slept {seconds}s: {label}")
}

/// Runs for a moment, then fails with a tool error.
#[task_tool(mode = "required", poll_interval = "200ms")]
async fn failing_job() -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    Err(ToolError::new("the job failed on purpose"))
}

/// Runs for a moment, then fails with a JSON-RPC error.
#[task_tool(mode = "required", poll_interval = "200ms")]
async fn protocol_error_job() -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    Err(ToolError::protocol(-32603, "the job hit an internal error"))
}

/// Asks for confirmation before deleting a file.
#[task_tool(mode = "required", poll_interval = "200ms")]
async fn confirm_delete(
    #[arg(default = String::from("example.txt"))] filename: String,
    client: Client,
) -> Result<String, ToolError> {
    let answer = client
        .elicit(
            format!("Delete {filename}?"),
            json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
        )
        .await?;
    let confirmed = answer.action == ElicitAction::Accept
        && answer
            .content
            .as_ref()
            .and_then(|c| c.get("confirm"))
            .and_then(serde_json::Value::as_bool)
            == Some(true);
    Ok(if confirmed {
        format!("deleted {filename}")
    } else {
        format!("kept {filename}")
    })
}

/// Asks two questions at once.
#[task_tool(mode = "required", poll_interval = "200ms")]
async fn multi_input(client: Client) -> Result<CallToolResult, ToolError> {
    let name = client.elicit(
        "What is your name?",
        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
    );
    let confirm = client.elicit(
        "Shall I go on?",
        json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
    );
    let (name, confirm) = tokio::join!(name, confirm);
    let (name, confirm) = (name?, confirm?);
    Ok(CallToolResult::success(vec![Content::text(format!(
        "name: {}, confirm: {}",
        name.content.unwrap_or_default()["name"],
        confirm.content.unwrap_or_default()["confirm"]
    ))]))
}

/// Asks for a name before it becomes a task, then greets in the background.
#[task_tool(mode = "required", poll_interval = "200ms", prelude)]
async fn test_tool_with_task(cx: TaskContext) -> Result<String, ToolError> {
    let answer = cx
        .client()
        .elicit(
            "What is your name?",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        )
        .await?;
    let name = answer
        .content
        .as_ref()
        .and_then(|c| c.get("name"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("stranger")
        .to_owned();
    cx.detach().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(format!("Hello, {name}! (from a task)"))
}

/// The one place the options are described (`--help` prints it, a bad argument shows it).
const USAGE: &str = "\
usage: conformance-server [--stdio | --http ADDR | --worker]
                          [--store memory | --store sqlite:PATH | --store postgres://USER@HOST:PORT/DB
                           | --store redis://HOST:PORT/DB]
                          [--no-execute] [--lease-ms N] [--no-quotas]

The fixture server of the official MCP conformance suite.

options:
  --stdio               serve on stdin and stdout (the default)
  --http ADDR           serve Streamable HTTP on ADDR (for example 127.0.0.1:3000), endpoint /mcp
  --worker              serve no client: only run tasks from the store
  --store memory        keep tasks in memory
  --store sqlite:PATH   keep tasks in the SQLite file PATH (default: sqlite:data/conformance.db);
                        several processes may share one file
  --store postgres://USER@HOST:PORT/DB
                        keep tasks in PostgreSQL, shared by servers and workers on any host
  --store redis://[USER:PASSWORD@]HOST:PORT/DB[?prefix=NAME]
                        keep tasks in Redis or Valkey, shared by servers and workers on any
                        host, under the key prefix NAME (default mcp-tasks)
  --no-execute          serve, but run no tools (a worker sharing the store runs them)
  --lease-ms N          how long a lease on a running task lasts unless renewed (default 30000)
  --no-quotas           lift the per-requestor task quotas (for load tests from one client)
  -h, --help            print this help and exit

Logs go to stderr; RUST_LOG sets the level (default info).
";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr (stdout carries the protocol on stdio); `RUST_LOG` picks the level.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut transport = None;
    let mut store = None;
    let mut worker = false;
    let mut config = mcp_tasks::EngineConfig::default();
    let mut quotas = mcp_tasks::quota::QuotaConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--stdio" => transport = Some(None),
            "--http" => transport = Some(Some(args.next().unwrap_or_default())),
            "--store" => store = args.next(),
            "--worker" => worker = true,
            "--no-execute" => config.execute = false,
            "--no-quotas" => quotas = mcp_tasks::quota::QuotaConfig::unlimited(),
            "--lease-ms" => match args.next().and_then(|n| n.parse().ok()) {
                Some(ms) => config.lease = Duration::from_millis(ms),
                None => {
                    eprintln!("{USAGE}\n--lease-ms takes a number of milliseconds");
                    std::process::exit(2);
                }
            },
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => {
                eprintln!("unexpected argument {other:?}\n\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    let mut server = Server::builder()
        .name("mcp-tasks-conformance")
        .version(env!("CARGO_PKG_VERSION"))
        .engine_config(config)
        .quotas(quotas)
        .registry_tools();
    let store = store.unwrap_or_else(|| "sqlite:data/conformance.db".into());
    match store.as_str() {
        "memory" => {}
        url if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            let store = match mcp_tasks::store::PostgresTaskStore::connect(url).await {
                Ok(store) => store,
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
            };
            eprintln!("tasks are kept in PostgreSQL: {}", store.database());
            server = server.store(store);
        }
        url if url.starts_with("redis://") => {
            let store = match mcp_tasks::store::RedisTaskStore::connect(url).await {
                Ok(store) => store,
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
            };
            eprintln!("tasks are kept in Redis: {}", store.redis());
            server = server.store(store);
        }
        other => match other.strip_prefix("sqlite:") {
            Some(path) => {
                if let Some(dir) = std::path::Path::new(path)
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                {
                    std::fs::create_dir_all(dir)?;
                }
                eprintln!("tasks are kept in the SQLite file {path}");
                server = server.store(mcp_tasks::store::SqliteTaskStore::open(path)?);
            }
            None => {
                eprintln!(
                    "--store takes `memory`, `sqlite:PATH`, a postgres:// or a redis:// URL, not {other:?}\n\n{USAGE}"
                );
                std::process::exit(2);
            }
        },
    }
    let server = everything::tools()
        .into_iter()
        .fold(server, |server, tool| server.tool(tool));
    let server = prompts::prompts()
        .into_iter()
        .fold(server, |server, prompt| server.prompt(prompt));
    let server = resources::resources()
        .into_iter()
        .fold(server, |server, resource| server.resource(resource));
    let server = resources::templates()
        .into_iter()
        .fold(server, |server, template| {
            server.resource_template(template)
        })
        .build()?;
    if worker {
        let worker = mcp_tasks::Worker::new(server);
        eprintln!("worker {} runs tasks from the store", worker.id());
        worker.run().await?;
        return Ok(());
    }
    match transport.flatten() {
        None => server.serve_stdio().await?,
        Some(addr) => {
            let addr: std::net::SocketAddr = addr.parse()?;
            let handle = server
                .serve_http(mcp_tasks::transport::http::HttpConfig::new().bind(addr))
                .await?;
            eprintln!("listening on {}", handle.url("/mcp"));
            handle.wait().await?;
        }
    }
    Ok(())
}
