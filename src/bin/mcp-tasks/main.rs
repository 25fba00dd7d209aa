//! `mcp-tasks`: call MCP tools from the command line, in either protocol era, and follow the
//! tasks they start: a live progress bar, questions asked in the terminal, Ctrl-C to cancel or
//! detach, and every task remembered so `mcp-tasks tasks resume` can pick it up again.
//!
//! Exit codes: 0 completed, 1 failed (a tool error or a failed task), 2 bad usage,
//! 3 cancelled, 4 input needed, 5 connection error, 6 still running (detached or past the
//! deadline), 7 task unknown or expired, 8 not authorized (log in).

mod admin;
mod args;
mod auth;
mod terminal;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use mcp_tasks::IdempotencyKey;
use mcp_tasks::client::{
    Called, ClientError, Era, Handle, HandleStore, InputHandler, McpClient, TaskEvent, TaskHandle,
    TaskOutcome,
};
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use terminal::{Bar, Interrupts, TerminalHandler};

const COMPLETED: u8 = 0;
const FAILED: u8 = 1;
const USAGE: u8 = 2;
const CANCELLED: u8 = 3;
const INPUT_NEEDED: u8 = 4;
const CONNECTION: u8 = 5;
const RUNNING: u8 = 6;
const UNKNOWN_TASK: u8 = 7;
const UNAUTHORIZED: u8 = 8;

/// Call MCP tools and follow their tasks, on MCP 2026-07-28 or 2025-11-25.
#[derive(Debug, Parser)]
#[command(name = "mcp-tasks", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(flatten)]
    server: ServerArgs,
    /// Print machine-readable JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// The handle store (default: $MCP_TASKS_HOME/handles.db or ~/.local/state/mcp-tasks).
    #[arg(long, global = true, value_name = "PATH")]
    store: Option<std::path::PathBuf>,
    /// Stop waiting after this many seconds (the task keeps running).
    #[arg(long, global = true, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Never ask questions, even in a terminal: when the task asks one, exit with code 4 and
    /// leave it waiting for `mcp-tasks tasks watch` to answer.
    #[arg(long, global = true)]
    no_input: bool,
    #[command(subcommand)]
    command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 completed, 1 failed, 2 bad usage, 3 cancelled, \
    4 input needed, 5 connection error, 6 still running, 7 task unknown or expired, \
    8 not authorized (log in)";

#[derive(Debug, Args)]
struct ServerArgs {
    /// Spawn this server command and talk to it over stdio.
    #[arg(long, global = true, value_name = "CMD", conflicts_with = "url")]
    stdio: Option<String>,
    /// Talk Streamable HTTP to this endpoint.
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,
    /// Use this protocol version only (2026-07-28 or 2025-11-25) instead of the best.
    #[arg(long, global = true, value_name = "VERSION", value_parser = parse_era)]
    era: Option<Era>,
    #[command(flatten)]
    auth: auth::AuthArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Call a tool: `key=value` arguments (read by the tool's input schema) or one JSON object.
    Call {
        /// The tool.
        tool: String,
        /// `key=value` pairs, or a single JSON object.
        arguments: Vec<String>,
        /// The arguments as a JSON object (instead of `key=value`).
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        /// Send the call with this idempotency key (1 to 255 visible ASCII characters): a call
        /// repeated with the key of an earlier one gets its task or result and starts nothing
        /// new. Without it, a call to a tool that may become a task gets a fresh key. Either
        /// way a call whose answer is lost is sent again with its key (4 sends at most).
        #[arg(long, value_name = "KEY", value_parser = parse_key)]
        idempotency_key: Option<IdempotencyKey>,
    },
    /// List the server's tools and their task support.
    Tools,
    /// Work on tasks: known handles, or ids given by hand.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// An operator's commands, for every owner's tasks: against a server's admin API
    /// (`--url` of its console and an admin token), or read-only against a task store.
    Admin(admin::AdminArgs),
    /// Sign in to a protected server and keep its tokens (beside the handle store, readable
    /// by you only): in a browser (the address to open is printed), or by client
    /// credentials with --client-id and --client-secret.
    Login {
        /// The server's MCP endpoint (else --url).
        url: Option<String>,
    },
    /// Forget a server's tokens, revoking them where its authorization server allows.
    Logout {
        /// The server's MCP endpoint (else --url).
        url: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum TasksCommand {
    /// List the known handles (of the given server, or all); with a 2025-11-25 server and
    /// `--remote`, the server's own list.
    List {
        /// Ask the server (2025-11-25 only) instead of the handle store.
        #[arg(long)]
        remote: bool,
    },
    /// Show a task's status.
    Get {
        /// The task id.
        id: String,
    },
    /// Cancel a task.
    Cancel {
        /// The task id.
        id: String,
    },
    /// Follow a task to its end and print its result.
    Watch {
        /// The task id.
        id: String,
    },
    /// Follow every known unfinished task (of the given server, or of all servers) to its
    /// end, without calling any tool again.
    Resume,
}

fn parse_era(s: &str) -> Result<Era, String> {
    Era::parse(s).ok_or_else(|| format!("`{s}` is not 2026-07-28 or 2025-11-25"))
}

fn parse_key(s: &str) -> Result<IdempotencyKey, String> {
    IdempotencyKey::new(s).map_err(|e| e.to_string())
}

/// A failure, with the exit code it means.
struct Failure(u8, String);

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        let code = match &e {
            ClientError::Spawn { .. }
            | ClientError::Connect { .. }
            | ClientError::Http { .. }
            | ClientError::Closed(_)
            | ClientError::Protocol(_)
            | ClientError::Negotiation(_) => CONNECTION,
            ClientError::TaskNotFound(_) => UNKNOWN_TASK,
            ClientError::Deadline(_) => RUNNING,
            ClientError::InputNeeded { .. } | ClientError::MissingCapability { .. } => INPUT_NEEDED,
            ClientError::BadCommand(_)
            | ClientError::Arguments(_)
            | ClientError::UnknownTool(_) => USAGE,
            ClientError::Auth(_) => UNAUTHORIZED,
            _ => FAILED,
        };
        let text = match &e {
            ClientError::MissingCapability { method, required } => {
                missing_capability(Some(required), &format!("`{method}`"))
            }
            // Questions of a task wait for their answer; those of a plain call end with it.
            ClientError::InputNeeded { task, method } if task != "(the call)" => format!(
                "task {task} asks a question ({method}) and waits for the answer: \
                 answer it in a terminal with `mcp-tasks tasks watch {task}`"
            ),
            ClientError::InputNeeded { method, .. } => format!(
                "the call asks a question ({method}): run it in a terminal, without --no-input"
            ),
            _ => e.to_string(),
        };
        Failure(code, text)
    }
}

/// What a `-32021` error says, in either era: the capabilities the server wanted (its
/// `requiredCapabilities`, or the whole error data) and for what.
fn missing_capability(required: Option<&Value>, what: &str) -> String {
    match required.map(|r| r.get("requiredCapabilities").unwrap_or(r)) {
        Some(required) if !required.is_null() => format!(
            "the server needs the client capability {required} for {what}, which this client \
             did not declare"
        ),
        _ => format!(
            "the server needs a client capability for {what} that this client did not declare"
        ),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // With OTEL_EXPORTER_OTLP_ENDPOINT set, every request is a span exported over OTLP, and
    // the servers' spans join its trace (the standard OTEL_* variables apply).
    let otel = match mcp_tasks::otel::init_export_from_env() {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("warning: no OpenTelemetry export: {e}");
            None
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let code = runtime
        .block_on(run(cli))
        .unwrap_or_else(|Failure(code, message)| {
            eprintln!("error: {message}");
            code
        });
    // Spawned servers end when their stdin closes; don't wait for stray readers.
    runtime.shutdown_timeout(Duration::from_millis(200));
    // Sends the spans still queued.
    drop(otel);
    ExitCode::from(code)
}

struct Context {
    cli: Cli,
    store: Arc<HandleStore>,
    /// Where the handle store is: the tokens are kept beside it.
    store_path: std::path::PathBuf,
    bar: Bar,
    /// Every connection made, closed when the command is done.
    clients: std::sync::Mutex<Vec<McpClient>>,
}

/// How long a spawned server gets to exit once its stdin closed.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

async fn run(cli: Cli) -> Result<u8, Failure> {
    let path = cli.store.clone().unwrap_or_else(HandleStore::default_path);
    let store = Arc::new(HandleStore::open(&path).map_err(|e| {
        Failure(
            USAGE,
            format!("cannot open the handle store {}: {e}", path.display()),
        )
    })?);
    let cx = Context {
        cli,
        store,
        store_path: path,
        bar: Bar::default(),
        clients: std::sync::Mutex::default(),
    };
    let code = command(&cx).await;
    let clients = std::mem::take(&mut *cx.clients.lock().unwrap());
    for client in clients {
        client.close(CLOSE_GRACE).await;
    }
    code
}

async fn command(cx: &Context) -> Result<u8, Failure> {
    match &cx.cli.command {
        Command::Call {
            tool,
            arguments,
            args,
            idempotency_key,
        } => {
            call(
                cx,
                tool,
                arguments,
                args.as_deref(),
                idempotency_key.clone(),
            )
            .await
        }
        Command::Tools => tools(cx).await,
        Command::Tasks(TasksCommand::List { remote }) => list(cx, *remote).await,
        Command::Tasks(TasksCommand::Get { id }) => get(cx, id).await,
        Command::Tasks(TasksCommand::Cancel { id }) => cancel(cx, id).await,
        Command::Tasks(TasksCommand::Watch { id }) => {
            let client = connect_for(cx, Some(id)).await?;
            let handle = client.task(id.clone());
            follow(cx, &handle, Interrupts::listen()).await
        }
        Command::Tasks(TasksCommand::Resume) => resume(cx).await,
        Command::Admin(args) => admin::run(cx, args).await,
        Command::Login { url } => auth::login(cx, url.as_deref()).await,
        Command::Logout { url } => auth::logout(cx, url.as_deref()).await,
    }
}

pub(crate) fn interactive(cx: &Context) -> bool {
    !cx.cli.no_input && std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Connects to the server the flags name.
async fn connect(
    cx: &Context,
    server_key: Option<&str>,
    era: Option<Era>,
) -> Result<McpClient, Failure> {
    let mut builder = McpClient::builder()
        .client_info("mcp-tasks", env!("CARGO_PKG_VERSION"))
        .store(cx.store.clone());
    builder = match (&cx.cli.server.stdio, &cx.cli.server.url, server_key) {
        (Some(cmd), _, _) => builder.stdio(cmd),
        (None, Some(url), _) => auth::authorize(cx, builder.http(url), url)?,
        (None, None, Some(key)) => match key.split_once(':') {
            Some(("stdio", cmd)) => builder.stdio(cmd),
            Some(("http", url)) => auth::authorize(cx, builder.http(url), url)?,
            _ => {
                return Err(Failure(
                    USAGE,
                    format!(
                        "the handle's server `{key}` cannot be reached from here; pass --stdio or --url"
                    ),
                ));
            }
        },
        (None, None, None) => {
            return Err(Failure(
                USAGE,
                "no server: pass --stdio \"COMMAND\" or --url URL".into(),
            ));
        }
    };
    if let Some(era) = cx.cli.server.era.or(era) {
        builder = builder.era(era);
    }
    let terminal = TerminalHandler::new(cx.bar.clone());
    builder = if interactive(cx) {
        builder.handler(terminal)
    } else {
        // The same capabilities with nobody to answer: the server asks, and a task's question
        // waits for `mcp-tasks tasks watch` in a terminal instead of failing the task.
        builder.capabilities(terminal.capabilities())
    };
    let client = builder.connect().await?;
    eprintln!("connected: {}", client.negotiated());
    cx.clients.lock().unwrap().push(client.clone());
    Ok(client)
}

/// Connects to the server of a known task: the flags' server, else the one its handle names.
async fn connect_for(cx: &Context, id: Option<&str>) -> Result<McpClient, Failure> {
    if cx.cli.server.stdio.is_some() || cx.cli.server.url.is_some() {
        return connect(cx, None, None).await;
    }
    let known: Vec<Handle> = cx
        .store
        .list(None, false)
        .map_err(|e| Failure(FAILED, e.to_string()))?
        .into_iter()
        .filter(|h| Some(h.task_id.as_str()) == id)
        .collect();
    match known.as_slice() {
        [h] => connect(cx, Some(&h.server), Some(h.era)).await,
        [] => Err(Failure(
            USAGE,
            "no known handle has this id; pass --stdio or --url to name its server".into(),
        )),
        _ => Err(Failure(
            USAGE,
            "several servers have a task with this id; pass --stdio or --url".into(),
        )),
    }
}

fn deadline(cx: &Context) -> Option<tokio::time::Instant> {
    cx.cli
        .timeout
        .map(|s| tokio::time::Instant::now() + Duration::from_secs_f64(s.max(0.0)))
}

async fn call(
    cx: &Context,
    tool: &str,
    words: &[String],
    json_args: Option<&str>,
    key: Option<IdempotencyKey>,
) -> Result<u8, Failure> {
    let client = connect(cx, None, None).await?;
    let info = client.tool(tool).await?;
    let arguments = match json_args {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) if words.is_empty() => v,
            Ok(Value::Object(_)) => {
                return Err(Failure(
                    USAGE,
                    "give --args or key=value arguments, not both".into(),
                ));
            }
            _ => {
                return Err(Failure(
                    USAGE,
                    format!("--args `{text}` is not a JSON object"),
                ));
            }
        },
        None => args::parse(tool, &info.input_schema, words).map_err(|e| Failure(USAGE, e))?,
    };
    let (bar, on_progress) = progress_bar(cx, tool);
    cx.bar.set_message("calling…");
    let called = client
        .call_tool_keyed(tool, arguments.clone(), key, on_progress)
        .await;
    bar.finish_and_clear();
    cx.bar.gone();
    if called.is_err() {
        explain_pending(&client, tool, &arguments);
    }
    match called? {
        Called::Done(output) => Ok(print_result(cx, None, &TaskOutcome::Completed(output))),
        Called::Task(handle) => {
            let interrupts = Interrupts::listen();
            eprintln!(
                "task {} started; `mcp-tasks tasks watch {}` follows it from anywhere",
                handle.id(),
                handle.id()
            );
            follow(cx, &handle, interrupts).await
        }
    }
}

/// After a failed call: when its outcome stayed unknown (its pending call is still in the
/// handle store), how to repeat it safely.
fn explain_pending(client: &McpClient, tool: &str, arguments: &Value) {
    let pending = client.pending_calls().unwrap_or_default();
    if let Some(call) = pending
        .iter()
        .rev()
        .find(|p| p.tool == tool && p.arguments == *arguments)
    {
        eprintln!(
            "the outcome of the call is unknown: the same command with `--idempotency-key {}` \
             repeats it safely (it gets the first call's task or result if the server took it)",
            call.key
        );
    }
}

/// Follows a task with a progress bar; Ctrl-C asks whether to cancel it or detach.
///
/// `interrupts` is made before anything about the task is printed, so that a Ctrl-C
/// pressed after it always asks.
async fn follow(
    cx: &Context,
    handle: &TaskHandle,
    mut interrupts: Interrupts,
) -> Result<u8, Failure> {
    let (bar, mut on_progress) = progress_bar(cx, handle.tool().unwrap_or("task"));
    let deadline = deadline(cx);
    let mut cancelled = false;
    let outcome = loop {
        let watch = handle.watch(deadline, |event| match event {
            TaskEvent::Status { status, message } => {
                cx.bar.set_message(match message {
                    Some(m) => format!("{status}: {m}"),
                    None => status,
                });
            }
            progress @ TaskEvent::Progress { .. } => on_progress(progress),
            _ => {}
        });
        tokio::select! {
            outcome = watch => break outcome,
            () = interrupts.next() => {
                // A second Ctrl-C while the cancel takes effect stops waiting for it.
                let choice = if cancelled { Choice::Detach } else { ask_cancel_or_detach(cx).await };
                match choice {
                    Choice::Cancel => {
                        cancelled = true;
                        cx.bar.set_message("cancelling…");
                        handle.cancel().await?;
                    }
                    Choice::Detach => {
                        bar.finish_and_clear();
                        eprintln!(
                            "detached: task {} keeps running; `mcp-tasks tasks watch {}` picks it up",
                            handle.id(),
                            handle.id()
                        );
                        if cx.cli.server.stdio.is_some() {
                            eprintln!(
                                "note: this command started the server, which ends with it; \
                                 the task lives on only if the server keeps tasks in a durable store"
                            );
                        }
                        return Ok(RUNNING);
                    }
                }
            }
        }
    };
    bar.finish_and_clear();
    cx.bar.gone();
    match outcome {
        Ok(outcome) => Ok(print_result(cx, Some(handle.id()), &outcome)),
        Err(e) => Err(e.into()),
    }
}

/// A progress bar on stderr (hidden with `--json`), registered so that questions hide it,
/// and what to do with a progress event: a count once the work reports a total.
fn progress_bar(cx: &Context, prefix: &str) -> (ProgressBar, impl FnMut(TaskEvent) + Send) {
    let bar = if cx.cli.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr())
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix} [{elapsed}] {msg}")
            .expect("a valid template"),
    );
    let with_total =
        ProgressStyle::with_template("{spinner} {prefix} [{elapsed}] {bar:30} {pos}/{len} {msg}")
            .expect("a valid template");
    bar.set_prefix(prefix.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    cx.bar.show(bar.clone());
    let mut measured = false;
    let shown = cx.bar.clone();
    let on_progress = move |event| {
        if let TaskEvent::Progress {
            progress,
            total,
            message,
        } = event
        {
            if let Some(total) = total {
                let style = (!measured).then(|| with_total.clone());
                measured = true;
                shown.set_length(total as u64, style);
            }
            shown.set_position(progress as u64);
            if let Some(m) = message {
                shown.set_message(m);
            }
        }
    };
    (bar, on_progress)
}

enum Choice {
    Cancel,
    Detach,
}

async fn ask_cancel_or_detach(cx: &Context) -> Choice {
    if !interactive(cx) {
        return Choice::Cancel;
    }
    let bar = cx.bar.clone();
    let asked = tokio::task::spawn_blocking(move || {
        bar.asking(|| {
            dialoguer::Select::new()
                .with_prompt("Interrupted: cancel the task, or detach and leave it running?")
                .items(["cancel", "detach"])
                .default(0)
                .interact()
        })
    })
    .await;
    match asked {
        Ok(Ok(0)) => Choice::Cancel,
        Ok(Ok(_)) => Choice::Detach,
        Ok(Err(e)) => {
            eprintln!("cannot ask whether to cancel ({e}); detaching");
            Choice::Detach
        }
        Err(e) => {
            eprintln!("cannot ask whether to cancel ({e}); detaching");
            Choice::Detach
        }
    }
}

/// Prints how a call ended and returns its exit code.
fn print_result(cx: &Context, task: Option<&str>, outcome: &TaskOutcome) -> u8 {
    let (status, code) = match outcome {
        TaskOutcome::Completed(o) if o.is_error() => ("completed", FAILED),
        TaskOutcome::Completed(_) => ("completed", COMPLETED),
        TaskOutcome::Failed { code, .. }
            if *code == i64::from(mcp_tasks::jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY) =>
        {
            ("failed", INPUT_NEEDED)
        }
        TaskOutcome::Failed { .. } => ("failed", FAILED),
        TaskOutcome::Cancelled => ("cancelled", CANCELLED),
    };
    if cx.cli.json {
        let mut out = json!({ "status": status });
        if let Some(id) = task {
            out["taskId"] = id.into();
        }
        match outcome {
            TaskOutcome::Completed(o) => out["result"] = o.raw.clone(),
            TaskOutcome::Failed {
                code,
                message,
                data,
            } => {
                out["error"] = json!({"code": code, "message": message});
                if let Some(data) = data {
                    out["error"]["data"] = data.clone();
                }
            }
            TaskOutcome::Cancelled => {}
        }
        println!("{out}");
        return code;
    }
    match outcome {
        TaskOutcome::Completed(o) => {
            let text = o.text();
            if !text.is_empty() {
                println!("{text}");
            }
            for block in o.raw["content"].as_array().into_iter().flatten() {
                if block["type"] != "text" {
                    println!("[{} content]", block["type"].as_str().unwrap_or("other"));
                }
            }
            if o.is_error() {
                eprintln!("the tool reported an error");
            }
        }
        TaskOutcome::Failed {
            code: c,
            message,
            data,
        } => {
            eprintln!("task failed: {message} (code {c})");
            if code == INPUT_NEEDED {
                let what = task.map_or_else(|| "the call".to_owned(), |t| format!("task {t}"));
                eprintln!("{}", missing_capability(data.as_ref(), &what));
            }
        }
        TaskOutcome::Cancelled => eprintln!("task cancelled"),
    }
    code
}

async fn tools(cx: &Context) -> Result<u8, Failure> {
    let client = connect(cx, None, None).await?;
    let tools = client.list_tools().await?;
    let era = client.negotiated().era;
    let support = |t: &mcp_tasks::client::ToolInfo| match (&t.task_support, era) {
        (Some(s), _) => s.clone(),
        (None, Era::V2025_11_25) => "forbidden".into(),
        (None, _) => "server decides".into(),
    };
    if cx.cli.json {
        let list: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description, "taskSupport": support(t),
                       "inputSchema": t.input_schema})
            })
            .collect();
        println!("{}", Value::Array(list));
        return Ok(COMPLETED);
    }
    let width = tools.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    println!("{:width$}  {:14}  DESCRIPTION", "TOOL", "TASKS");
    for t in &tools {
        let description = t
            .description
            .as_deref()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("");
        println!("{:width$}  {:14}  {description}", t.name, support(t));
    }
    Ok(COMPLETED)
}

async fn list(cx: &Context, remote: bool) -> Result<u8, Failure> {
    if remote {
        let client = connect(cx, None, None).await?;
        let tasks = client.list_tasks().await?;
        if cx.cli.json {
            let raw: Vec<Value> = tasks.iter().map(|t| t.raw.clone()).collect();
            println!("{}", Value::Array(raw));
        } else {
            for t in tasks {
                println!(
                    "{}  {}  {}",
                    t.task_id,
                    t.status,
                    t.status_message.unwrap_or_default()
                );
            }
        }
        return Ok(COMPLETED);
    }
    let server = server_key(cx);
    let handles = cx
        .store
        .list(server.as_deref(), false)
        .map_err(|e| Failure(FAILED, e.to_string()))?;
    if cx.cli.json {
        let list: Vec<Value> = handles
            .iter()
            .map(|h| {
                json!({"server": h.server, "era": h.era.as_str(), "taskId": h.task_id,
                       "tool": h.tool, "argsDigest": h.args_digest, "createdAtMs": h.created_at_ms,
                       "status": h.status, "finished": h.finished})
            })
            .collect();
        println!("{}", Value::Array(list));
    } else {
        for h in handles {
            println!(
                "{}  {:14}  {:16}  {}  {}",
                h.task_id, h.status, h.tool, h.era, h.server
            );
        }
    }
    Ok(COMPLETED)
}

/// The handle-store name of the server the flags give.
fn server_key(cx: &Context) -> Option<String> {
    match (&cx.cli.server.stdio, &cx.cli.server.url) {
        (Some(cmd), _) => Some(format!("stdio:{cmd}")),
        (None, Some(url)) => Some(format!("http:{url}")),
        _ => None,
    }
}

async fn get(cx: &Context, id: &str) -> Result<u8, Failure> {
    let client = connect_for(cx, Some(id)).await?;
    let state = client.task(id).status().await?;
    if cx.cli.json {
        println!("{}", state.raw);
    } else {
        println!(
            "{}  {}  {}",
            state.task_id,
            state.status,
            state.status_message.unwrap_or_default()
        );
    }
    Ok(COMPLETED)
}

async fn cancel(cx: &Context, id: &str) -> Result<u8, Failure> {
    let client = connect_for(cx, Some(id)).await?;
    client.task(id).cancel().await?;
    eprintln!("asked the server to cancel task {id}");
    Ok(COMPLETED)
}

async fn resume(cx: &Context) -> Result<u8, Failure> {
    let server = server_key(cx);
    let handles = cx
        .store
        .list(server.as_deref(), true)
        .map_err(|e| Failure(FAILED, e.to_string()))?;
    if handles.is_empty() {
        eprintln!("no unfinished tasks are known");
        return Ok(COMPLETED);
    }
    let mut worst = COMPLETED;
    for h in handles {
        eprintln!("resuming task {} ({}) on {}", h.task_id, h.tool, h.server);
        let code = match connect(cx, Some(&h.server), Some(h.era)).await {
            Ok(client) => {
                let mut handle = None;
                for known in client.resume()? {
                    if known.id() == h.task_id {
                        handle = Some(known);
                    }
                }
                let handle = handle.unwrap_or_else(|| client.task(h.task_id.clone()));
                follow(cx, &handle, Interrupts::listen())
                    .await
                    .unwrap_or_else(|Failure(code, message)| {
                        eprintln!("error: {message}");
                        code
                    })
            }
            Err(Failure(code, message)) => {
                eprintln!("error: {message}");
                code
            }
        };
        worst = worst.max(code);
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_capability_is_named_in_either_era() {
        // 2026-07-28 refuses the call: `MissingCapability` carries the required ones.
        let refused: Failure = ClientError::MissingCapability {
            method: "tools/call".into(),
            required: json!({"elicitation": {}}),
        }
        .into();
        assert_eq!(refused.0, INPUT_NEEDED);
        assert!(
            refused
                .1
                .contains(r#"capability {"elicitation":{}} for `tools/call`"#),
            "{}",
            refused.1
        );
        // A failed task (2025-11-25, or 2026-07-28 once the tool asked) carries the error data.
        let data = json!({"requiredCapabilities": {"sampling": {}}});
        let text = missing_capability(Some(&data), "task t1");
        assert!(
            text.contains(r#"capability {"sampling":{}} for task t1"#),
            "{text}"
        );
        let text = missing_capability(None, "task t1");
        assert!(text.contains("a client capability for task t1"), "{text}");
    }

    #[test]
    fn a_deferred_question_says_how_to_answer_it_later() {
        let waiting: Failure = ClientError::InputNeeded {
            task: "t1".into(),
            method: "elicitation/create".into(),
        }
        .into();
        assert_eq!(waiting.0, INPUT_NEEDED);
        assert!(
            waiting.1.contains("`mcp-tasks tasks watch t1`"),
            "{}",
            waiting.1
        );
    }
}
