//! # mcp-tasks
//!
//! Write MCP servers whose tools run as durable background tasks, served to clients of both
//! MCP task protocols (2025-11-25 and the 2026-07-28 `io.modelcontextprotocol/tasks`
//! extension) from one declaration.
//!
//! ```no_run
//! use mcp_tasks::prelude::*;
//!
//! /// Render a report.
//! #[task_tool(mode = "optional", poll_interval = "2s")]
//! async fn render_report(pages: u32, progress: Progress) -> Result<String, ToolError> {
//!     for page in 1..=pages {
//!         progress.report(page as f64, Some(pages as f64));
//!     }
//!     Ok(format!("rendered {pages} pages"))
//! }
//!
//! #[tokio::main]
//! async fn main() -> anyhow::Result<()> {
//!     Server::from_registry()?.serve_stdio().await?;
//!     Ok(())
//! }
//! ```
//!
//! Start with [`task_tool`], the manual: its arguments, the parameters it injects
//! ([`Progress`], [`Steps`], [`TaskContext`], [`Client`], [`CancellationToken`]), the return
//! types it accepts and the mistakes it reports. [`Server`] serves the tools; [`Tool`] declares
//! one without the macro. Then [serve it](#serve-it) and [watch it](#logs-and-metrics).
//!
//! # Cargo features
//!
//! Every item that needs a feature says so in its documentation. `cargo doc -p mcp-tasks
//! --all-features --open` builds this manual with all of them.
//!
//! | feature | what it adds |
//! | --- | --- |
//! | (none) | `#[task_tool]`, the [`Tool`] builder, both protocol eras, [`transport::serve_io`] and stdio, tasks in memory ([`store::MemoryTaskStore`]) |
//! | `http` | the Streamable HTTP transport (`transport::http`: `Server::serve_http`, `Server::http_router`, the `Authenticator` and `Principal`), and `mcp_tasks::axum`, the axum it is built on |
//! | `sqlite` | the durable SQLite task store (`store::SqliteTaskStore`) |
//! | `postgres` | the PostgreSQL task store (`store::PostgresTaskStore`), for many servers and workers on one database |
//! | `redis` | the Redis / Valkey task store (`store::RedisTaskStore`), for many servers and workers on one Redis |
//! | `client` | the MCP client (`client`): both eras over stdio, Streamable HTTP (TLS with the system's roots) or in-process, task handles, a durable handle store, and OAuth 2.1 for protected servers |
//! | `admin` | with `http`: the operator's console (`admin`): an admin API, its OpenAPI document, a feed of changes and a web page, mounted beside the MCP endpoint behind an admin token |
//! | `cli` | the `mcp-tasks` command line (`cargo install --path . --features cli`); implies `client` |
//! | `testing` | the shared test suite for task stores (`store::testing`) |
//!
//! # Serve it
//!
//! One [`Server`] serves every transport; each serving call first settles the tasks an
//! earlier run left unfinished ([`Server::recover`], once per server).
//!
//! **stdio** (no feature): one client on stdin and stdout, until stdin closes. stdout carries
//! MCP only, so logs go to stderr. [`transport::serve_io`] does the same over any
//! `AsyncRead` / `AsyncWrite` pair (a socket, a pipe, an in-memory duplex in a test).
//!
//! ```no_run
//! # use mcp_tasks::prelude::*;
//! # async fn run() -> anyhow::Result<()> {
//! Server::from_registry()?.serve_stdio().await?;
//! # Ok(()) }
//! ```
//!
//! **Streamable HTTP** (feature `http`): both eras on one endpoint, with sessions, SSE,
//! timeouts, connection and session caps and DNS-rebinding protection. `HttpConfig` binds
//! `127.0.0.1` unless told otherwise; `HttpConfig::authenticator` names the principal that
//! owns a request's tasks.
//!
//! ```no_run
//! # use mcp_tasks::prelude::*;
//! use mcp_tasks::transport::http::{AuthError, HttpConfig};
//! # async fn run() -> anyhow::Result<()> {
//! let config = HttpConfig::new()
//!     .bind(([127, 0, 0, 1], 3000))
//!     .authenticator(|headers| match headers.get("authorization") {
//!         Some(token) if token == "Bearer let-me-in" => Ok(Some("alice".into())),
//!         _ => Err(AuthError::unauthorized("a bearer token is needed")),
//!     });
//! let handle = Server::from_registry()?.serve_http(config).await?;
//! eprintln!("serving on {}", handle.url("/mcp"));
//! handle.wait().await?;
//! # Ok(()) }
//! ```
//!
//! **Stores.** Tasks live in memory unless [`ServerBuilder::store`] says otherwise:
//! `store::SqliteTaskStore` (feature `sqlite`) keeps them in a file, so a client's task
//! handle still answers after a restart; `store::PostgresTaskStore` (feature `postgres`) and
//! `store::RedisTaskStore` (feature `redis`) share them between many servers and
//! [`Worker`]s, any of which may run a task another one created.
//!
//! ```no_run
//! # use mcp_tasks::prelude::*;
//! # async fn run() -> anyhow::Result<()> {
//! let store = mcp_tasks::store::SqliteTaskStore::open("data/tasks.db")?;
//! let server = Server::builder().registry_tools().store(store).build()?;
//! server.serve_stdio().await?;
//! # Ok(()) }
//! ```
//!
//! **Mounted in an existing axum app** (feature `http`): `Server::http_router` is an axum
//! `Router` to merge with the app's own routes, behind its own layers. Use the axum this
//! crate re-exports (`mcp_tasks::axum`), so the versions match. The app's authentication
//! layer names who makes each request with a `transport::http::Principal` request extension,
//! which the endpoint takes before any authenticator: the tasks a request creates belong to
//! that principal, and no other can read, answer or cancel them. The router settles an
//! earlier run's tasks before it answers its first request.
//!
//! ```no_run
//! use mcp_tasks::axum::{self, Router, extract::Request, middleware, response::Response};
//! use mcp_tasks::prelude::*;
//! use mcp_tasks::transport::http::{HttpConfig, Principal};
//!
//! /// The app's own login: a session cookie, a bearer token, ... Here, a trusted header.
//! async fn login(mut request: Request, next: middleware::Next) -> Response {
//!     let user = request.headers().get("x-user").and_then(|v| v.to_str().ok());
//!     if let Some(user) = user.map(str::to_owned) {
//!         request.extensions_mut().insert(Principal::new(user));
//!     }
//!     next.run(request).await
//! }
//!
//! # async fn run() -> anyhow::Result<()> {
//! let server = Server::from_registry()?;
//! let app = Router::new()
//!     .route("/health", axum::routing::get(|| async { "ok" }))
//!     .merge(server.http_router(HttpConfig::new().path("/mcp")))
//!     .layer(middleware::from_fn(login));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // The peer address counts anonymous sessions per client.
//! let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! A request without the extension goes to `HttpConfig::authenticator` (or is anonymous when
//! there is none). The connection limits of `serve_http` (header and idle timeouts, the
//! connection cap) are the app's to set when it serves the router itself.
//!
//! # Calls that must not run twice
//!
//! A client that never got the answer to a `tools/call` (a proxy cut the connection, the
//! server died between storing the task and answering, a timeout) cannot tell whether the
//! call ran. Three things make a retry safe:
//!
//! - **Idempotency keys.** A call carrying `_meta["io.github.mcp-tasks/idempotencyKey"]`
//!   ([`IDEMPOTENCY_KEY_META`], both eras) or the
//!   `Idempotency-Key` HTTP header is stored under an id derived from its caller, tool and
//!   key, in the same atomic create as the task. A repeat with the same arguments gets the
//!   same task back and starts nothing, in any process sharing the store; a synchronous
//!   call's outcome is kept for [`EngineConfig::idempotency_retention`] (24 h by default)
//!   for the same purpose. The same key with other arguments is refused with `-32602`. A
//!   repeat that arrives while the first call is still being created waits for it, and a
//!   create whose outcome the store left unknown is answered as retryable (`-32000`, or
//!   `503` on the 2026-07-28 HTTP wire), never as a plain failure. Keys are 1 to 255
//!   visible ASCII characters, scoped to the caller (its principal, or every anonymous
//!   caller, whose task ids are bearer handles anyway) and the tool. The client
//!   (`client::McpClient`) sends a fresh key with every call that may become a task,
//!   records it in its durable handle store before sending, and resends with the same key
//!   after a connection error or a retryable answer; `mcp-tasks call --idempotency-key KEY`
//!   does the same from the command line.
//! - **Unique tasks.** `#[task_tool(unique)]` (or `unique = ["index"]`, with
//!   `unique_window = "1h"`) makes a call equal to an unfinished task of the same tool and
//!   caller get that task back, as River's unique jobs and BullMQ's deduplication do; the
//!   store keeps the key unique among unfinished tasks, so two servers racing start one.
//! - **Durable steps.** A tool that takes [`Steps`] runs its side effects
//!   in named steps (`steps.run("charge", || async { … }).await?`); each finished step's
//!   output is stored in the task record, fenced by the lease, and a rerun after its process
//!   died returns the stored output instead of running the step again. Such a tool may
//!   declare `on_restart = "rerun"` without being idempotent.
//!
//! # Logs and metrics
//!
//! The runtime logs through [`tracing`](https://docs.rs/tracing) and counts through
//! [`metrics`](https://docs.rs/metrics); it installs neither a subscriber nor a recorder.
//! Install a subscriber that writes to stderr (stdout carries MCP on stdio):
//!
//! ```no_run
//! // tracing-subscriber = { version = "0.3", features = ["env-filter"] }
//! tracing_subscriber::fmt()
//!     .with_writer(std::io::stderr)
//!     .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
//!     .init();
//! ```
//!
//! What `RUST_LOG` shows:
//!
//! | level | what |
//! | --- | --- |
//! | `info` | the server starting (address, task store, protocol eras); each task created and finished (tool, status, duration); tasks taken over from a process that stopped; a worker starting and stopping |
//! | `warn` | a tool's error or panic, with its message; a store that cannot be reached, a lease lost, a client that stopped reading |
//! | `debug` | every request (method, id, tool), session, claim, lease renewal and status change, and a client closing its connection |
//!
//! At `info` and `warn` a task appears by the first 8 characters of its id: a task without
//! a principal is reached with its id alone, so a whole id in a log would let whoever reads
//! the log reach the task. `debug` shows whole ids. Nothing logs the arguments of a call, the
//! answers a client gives to a tool's questions, or request headers such as `Authorization`.
//! Each request runs in a `request` span and each task run in a `task` span, with fields
//! named after the OpenTelemetry semantic conventions for MCP (`mcp.method.name`,
//! `jsonrpc.request.id`, `gen_ai.tool.name`, `mcp.task.id`, and the run's epoch and final
//! status). A `request` span is at `debug` level under the target `mcp_tasks::request`
//! (`RUST_LOG=info,mcp_tasks::request=debug` adds it to the `info` logs), so that logging
//! at `info` makes no span per request; a `task` span is at `info`.
//! `RUST_LOG=mcp_tasks_runtime=debug` is the runtime alone in detail.
//!
//! With the `otel` feature those spans become OpenTelemetry traces that follow a task
//! across processes, with metrics after the same conventions, exported over OTLP as the
//! standard `OTEL_*` variables say: `let _otel = mcp_tasks::otel::init_from_env()?;` in
//! `main` logs as above and exports when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (see the
//! `otel` module).
//!
//! The metrics, for any `metrics` recorder (`cargo run --example metrics` shows them with a
//! Prometheus exporter, and serves `/metrics` beside `/mcp` with `--serve`):
//!
//! | name | kind | labels |
//! | --- | --- | --- |
//! | `mcp_tasks_created_total` | counter | `tool` |
//! | `mcp_tasks_claimed_total` | counter | `tool` (tasks this process took from the queue) |
//! | `mcp_tasks_finished_total` | counter | `tool`, `status` |
//! | `mcp_tasks_lapsed_total` | counter | `tool`, `policy` (`fail` or `rerun`) |
//! | `mcp_tasks_run_seconds` | histogram | `tool` |
//! | `mcp_tasks_running` | gauge | |
//! | `mcp_tasks_queued` | gauge | (tasks this process created that wait for a slot) |

#![cfg_attr(docsrs, feature(doc_cfg))]

// The manual lives in the macro crate; the link definitions below make its links intra-doc
// links here, where the items it names are in scope.
/// [`Progress`]: crate::Progress
/// [`Steps`]: crate::Steps
/// [`Unique`]: crate::Unique
/// [`TaskContext`]: crate::TaskContext
/// [`TaskContext::detach`]: crate::TaskContext::detach
/// [`Client`]: crate::Client
/// [`State<T>`]: crate::State
/// [`ServerBuilder::parked_call_timeout`]: crate::ServerBuilder::parked_call_timeout
/// [`ServerBuilder::max_parked_calls`]: crate::ServerBuilder::max_parked_calls
/// [`CancellationToken`]: crate::CancellationToken
/// [`FromTaskContext`]: crate::FromTaskContext
/// [`IntoToolResult`]: crate::IntoToolResult
/// [`ToolError`]: crate::ToolError
/// [`ToolError::new`]: crate::ToolError::new
/// [`TaskSupport`]: crate::model::TaskSupport
/// [`is_valid_tool_name`]: crate::tool::is_valid_tool_name
/// [`Server::from_registry`]: crate::Server::from_registry
/// [Json]: crate::Json
/// [Serve it]: crate#serve-it
/// [Logs and metrics]: crate#logs-and-metrics
#[doc(inline)]
pub use mcp_tasks_macros::task_tool;
pub use mcp_tasks_runtime::*;

/// Everything a server with task tools usually needs.
pub mod prelude {
    pub use crate::task_tool;
    pub use mcp_tasks_runtime::model::{CallToolResult, Content, TaskSupport};
    pub use mcp_tasks_runtime::{
        CancellationToken, Client, Json, Principal, Progress, ProtocolError, Server, State, Steps,
        TaskContext, Tool, ToolError, Worker,
    };
}
