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
//! cargo run -p mcp-tasks-e2e --example conformance-server -- --http 127.0.0.1:3000 --admin-token TOKEN
//!     # and the operator's console at /admin, its API under /admin/api
//! cargo run -p mcp-tasks-e2e --example conformance-server -- --http 127.0.0.1:3000 \
//!     --oauth-issuer https://id.example.com --resource http://127.0.0.1:3000/mcp
//! ```
//!
//! With `--oauth-issuer` the HTTP endpoint is an OAuth resource server: every request needs
//! an access token of that issuer for `--resource`. Its tools stay public unless they name a
//! scope; `scoped_echo` needs `echo:write`.
//!
//! Several processes may share one store: `--no-execute` serves without running tools,
//! `--worker` runs tools without serving, and `--lease-ms N` sets the lease length.
//!
//! `SIGTERM` or `SIGINT` stops the process gracefully (end of stdin too): no new tasks, the
//! running ones may finish for `--shutdown-grace-ms N`, then the rest are handed off to the
//! other processes; a second signal cuts the grace short. Task creation is turned off with
//! `--pause` / `--pause-tool NAME`, with `SIGUSR1` (and back on with `SIGUSR2`), or while the
//! file of `--pause-file PATH` exists (it lists the tools, or none for every tool).
//! `RUST_LOG` (e.g. `RUST_LOG=mcp_tasks_runtime=debug`) turns on logging to stderr.
//!
//! Over HTTP the endpoint is `/mcp`; `cargo xtask conformance` runs the official suite
//! against it.

use mcp_tasks::model::{CallToolResult, Content, ElicitAction};
use mcp_tasks::prelude::*;
use serde_json::json;
use std::time::Duration;

mod durable;
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

/// Echoes `text`, for callers whose token holds the scope `echo:write`.
#[task_tool(mode = "optional", scopes = ["echo:write"])]
async fn scoped_echo(text: String) -> String {
    text
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
                          [--no-execute] [--lease-ms N] [--no-quotas] [--admin-token TOKEN]
                          [--oauth-issuer URL [--resource URI]]
                          [--shutdown-grace-ms N] [--pause] [--pause-tool NAME]... [--pause-file PATH]

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
  --admin-token TOKEN   with --http: serve the operator's console at /admin and its API under
                        /admin/api, for requests with `Authorization: Bearer TOKEN`; its pause,
                        resume and drain switch this process's task creation
  --oauth-issuer URL    with --http: accept only access tokens this authorization server
                        issued for the resource (an OAuth 2.1 resource server, with its
                        RFC 9728 metadata); tools stay public unless they name a scope
                        (scoped_echo needs echo:write)
  --resource URI        the resource tokens must be issued for (default: http://ADDR/mcp)
  --shutdown-grace-ms N how long running tasks may finish after SIGTERM, SIGINT or the end of
                        stdin before they are handed off to other processes (default 30000)
  --pause               start with task creation off for every tool (SIGUSR2 turns it on)
  --pause-tool NAME     start with task creation off for the tool NAME (repeatable)
  --pause-file PATH     task creation is off while PATH exists: for the tools it lists, one a
                        line, or for every tool when it lists none (read every second)
  -h, --help            print this help and exit

signals: SIGTERM, SIGINT stop gracefully (a second one at once); SIGUSR1 pauses task
creation, SIGUSR2 resumes it.

Logs go to stderr; RUST_LOG sets the level (default info). With OTEL_EXPORTER_OTLP_ENDPOINT
set, traces and metrics are exported over OTLP (the standard OTEL_* variables apply).
";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr (stdout carries the protocol on stdio); `RUST_LOG` picks the level.
    // With OTEL_EXPORTER_OTLP_ENDPOINT set, spans and metrics go there too (OTLP); the guard
    // sends what is still queued when the server ends.
    let _otel = mcp_tasks::otel::init_from_env()?;
    let mut transport = None;
    let mut store = None;
    let mut worker = false;
    let mut admin_token = None;
    let mut config = mcp_tasks::EngineConfig::default();
    let mut quotas = mcp_tasks::quota::QuotaConfig::default();
    let mut issuer = None;
    let mut resource = None;
    let mut grace = None;
    let mut pause_all = false;
    let mut pause_tools = Vec::new();
    let mut pause_file = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--stdio" => transport = Some(None),
            "--http" => transport = Some(Some(args.next().unwrap_or_default())),
            "--store" => store = args.next(),
            "--worker" => worker = true,
            "--admin-token" => admin_token = args.next(),
            "--oauth-issuer" => issuer = args.next(),
            "--resource" => resource = args.next(),
            "--no-execute" => config.execute = false,
            "--no-quotas" => quotas = mcp_tasks::quota::QuotaConfig::unlimited(),
            "--lease-ms" => match args.next().and_then(|n| n.parse().ok()) {
                Some(ms) => config.lease = Duration::from_millis(ms),
                None => {
                    eprintln!("{USAGE}\n--lease-ms takes a number of milliseconds");
                    std::process::exit(2);
                }
            },
            "--shutdown-grace-ms" => match args.next().and_then(|n| n.parse().ok()) {
                Some(ms) => grace = Some(Duration::from_millis(ms)),
                None => {
                    eprintln!("{USAGE}\n--shutdown-grace-ms takes a number of milliseconds");
                    std::process::exit(2);
                }
            },
            "--pause" => pause_all = true,
            "--pause-tool" => match args.next() {
                Some(name) => pause_tools.push(name),
                None => {
                    eprintln!("{USAGE}\n--pause-tool takes a tool name");
                    std::process::exit(2);
                }
            },
            "--pause-file" => match args.next() {
                Some(path) => pause_file = Some(path),
                None => {
                    eprintln!("{USAGE}\n--pause-file takes a path");
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
    if let Some(grace) = grace {
        server = server.shutdown_grace(grace);
    }
    if let Some(path) = pause_file {
        server = server.pause_file(path);
    }
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
    if admin_token.is_some() && (worker || !matches!(transport, Some(Some(_)))) {
        eprintln!("{USAGE}\n--admin-token serves the console over HTTP: it needs --http ADDR");
        std::process::exit(2);
    }
    let creation = server.creation();
    if pause_all {
        creation.pause();
    }
    for tool in &pause_tools {
        creation.pause_tool(tool);
    }
    if worker {
        let worker = mcp_tasks::Worker::new(server);
        eprintln!("worker {} runs tasks from the store", worker.id());
        worker.run().await?;
        return Ok(());
    }
    if (issuer.is_some() || resource.is_some()) && !matches!(transport, Some(Some(_))) {
        eprintln!("--oauth-issuer and --resource go with --http\n\n{USAGE}");
        std::process::exit(2);
    }
    if resource.is_some() && issuer.is_none() {
        eprintln!("--resource goes with --oauth-issuer\n\n{USAGE}");
        std::process::exit(2);
    }
    match transport.flatten() {
        None => server.serve_stdio().await?,
        Some(addr) => {
            let addr: std::net::SocketAddr = addr.parse()?;
            let mut config = mcp_tasks::transport::http::HttpConfig::new().bind(addr);
            if let Some(issuer) = issuer {
                use mcp_tasks::oauth::{OAuthConfig, ResourceServer};
                let resource = resource.unwrap_or_else(|| format!("http://{addr}/mcp"));
                let oauth = OAuthConfig::new(resource, issuer).scopes_supported(["echo:write"]);
                let rs = match ResourceServer::new(oauth) {
                    Ok(rs) => rs,
                    Err(e) => {
                        eprintln!("{e}");
                        std::process::exit(2);
                    }
                };
                eprintln!("tokens of {:?} are required", rs.config().issuers());
                config = config.authenticate(rs);
            }
            if let Some(token) = &admin_token {
                config = config.serve_beside(console(&server, token));
            }
            let handle = server.serve_http(config).await?;
            eprintln!("listening on {}", handle.url("/mcp"));
            if admin_token.is_some() {
                eprintln!("the console is at {}", handle.url("/admin"));
            }
            handle.run_until_signal().await?;
        }
    }
    Ok(())
}

/// The operator's console at `/admin`, its API under `/admin/api`, for `token`.
fn console(server: &Server, token: &str) -> mcp_tasks::axum::Router {
    let token = match mcp_tasks::admin::AdminToken::new(token) {
        Ok(token) => token,
        Err(e) => {
            eprintln!("--admin-token: {e}");
            std::process::exit(2);
        }
    };
    mcp_tasks::axum::Router::new().nest("/admin", server.admin_router(token).into_router())
}
