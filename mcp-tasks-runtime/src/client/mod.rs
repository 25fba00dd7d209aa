//! An MCP client for task tools that speaks both eras: 2026-07-28 with the
//! `io.modelcontextprotocol/tasks` extension, and 2025-11-25 with its Tasks utility (cargo
//! feature `client`).
//!
//! [`McpClient`] connects over stdio (spawning a command), over Streamable HTTP, or to a
//! [`Server`] in the same process, and negotiates the best protocol it can:
//! 2026-07-28 with the tasks extension, else 2025-11-25 with tasks, else plain calls.
//! [`McpClient::call_tool`] returns the result or a [`TaskHandle`], whichever the server
//! chose; the handle polls with the server's interval plus jitter until a deadline, reports
//! status and progress, answers questions through the registered [`InputHandler`], and
//! cancels. With a [`HandleStore`], every task is remembered durably, and
//! [`McpClient::resume`] goes back to the unfinished ones after a crash, without calling the
//! tool again.
//!
//! **Protected servers.** Over HTTP (TLS with the system's roots), a client sends a
//! bearer token given as is ([`ClientBuilder::bearer_token`]), or the tokens of an
//! [`OAuth`] session ([`ClientBuilder::oauth`]): on a `401`, it discovers the authorization
//! server from the challenge (RFC 9728, then RFC 8414), gets a token for this server alone
//! (RFC 8707) by client credentials or by the authorization code flow with PKCE and a
//! loopback redirect (registering itself, RFC 7591, where it may), keeps it in a
//! [`TokenStore`] of owner-only files, refreshes it before it expires, and renews a refused
//! one once before it gives up with an [`AuthError`]. No token is ever logged.
//!
//! **Idempotency keys and retries.** A call to a tool that may become a task (2025-11-25: its
//! `execution.taskSupport` is `optional` or `required`; 2026-07-28: unless its listing says
//! `forbidden`) carries a fresh idempotency key in `_meta`
//! ([`IDEMPOTENCY_KEY_META`](crate::IDEMPOTENCY_KEY_META)), and
//! [`McpClient::call_tool_with_key`] sends a key of the caller's own. With a key, the call is
//! recorded in the handle store before it is sent ([`HandleStore::begin_call`]); when the
//! connection fails or drops before the answer, or the server answers HTTP 429, 502, 503 or
//! 504, JSON-RPC `-32000` or an error that says the outcome is unknown, the same call is sent
//! again with the same key, up to [`CALL_ATTEMPTS`] times in all, with a backoff that
//! doubles from a quarter second (or waits what the server asked) plus jitter. A server that
//! took the first send answers a repeat with the same task or result and starts nothing.
//! An answer removes the record; a call whose outcome stays unknown keeps it, and
//! [`McpClient::pending_calls`] lists it for a later [`McpClient::call_tool_with_key`].
//!
//! ```
//! # async fn demo(server: mcp_tasks_runtime::Server) -> Result<(), mcp_tasks_runtime::client::ClientError> {
//! use mcp_tasks_runtime::client::{Called, McpClient, Scripted};
//! use serde_json::json;
//!
//! let client = McpClient::builder()
//!     .in_process(server)
//!     .handler(Scripted::new().accept(json!({"confirm": true})))
//!     .connect()
//!     .await?;
//! match client.call_tool("confirm_delete", json!({"filename": "a.txt"})).await? {
//!     Called::Done(result) => println!("{}", result.text()),
//!     Called::Task(task) => println!("{:?}", task.wait(None).await?),
//! }
//! # Ok(()) }
//! ```

mod auth;
mod call;
mod error;
mod handler;
mod store;
mod task;
mod transport;

pub use auth::{OAuth, TokenInfo, TokenStore};
pub use call::CALL_ATTEMPTS;
pub use error::{AuthError, ClientError, StoreError};
pub use handler::{BoxFuture, FnHandler, InputHandler, Question, Scripted};
pub use store::{Handle, HandleStore, PENDING_CALL_AGE, PendingCall, args_digest};
pub use task::{TaskEvent, TaskHandle, TaskOutcome, TaskState, ToolOutput};

use crate::server::Server;
use crate::sync::LockExt;
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use transport::Wire;

/// The tasks extension's id.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The most input rounds one call may take before the client gives up on it.
const MAX_INPUT_ROUNDS: usize = 32;

/// A protocol era.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Era {
    /// MCP 2025-11-25: stateful, `initialize`, the experimental Tasks utility.
    V2025_11_25,
    /// MCP 2026-07-28: stateless, `server/discover`, the tasks extension.
    V2026_07_28,
}

impl Era {
    /// The protocol version string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// The era of a protocol version string.
    pub fn parse(version: &str) -> Option<Self> {
        match version {
            "2025-11-25" => Some(Self::V2025_11_25),
            "2026-07-28" => Some(Self::V2026_07_28),
            _ => None,
        }
    }
}

impl std::fmt::Display for Era {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the client and the server agreed on.
#[derive(Clone, Debug, PartialEq)]
pub struct Negotiated {
    /// The protocol era.
    pub era: Era,
    /// The exact protocol version (older 2025 versions count as [`Era::V2025_11_25`]
    /// without tasks).
    pub version: String,
    /// Whether the server offers tasks on this era.
    pub tasks: bool,
    /// The server's capabilities.
    pub capabilities: Value,
    /// The server's `Implementation` (`name`, `version`), when it said.
    pub server_info: Value,
}

impl std::fmt::Display for Negotiated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.era, self.tasks) {
            (Era::V2026_07_28, true) => write!(f, "{} with the tasks extension", self.version),
            (Era::V2025_11_25, true) => write!(f, "{} with tasks", self.version),
            (_, false) => write!(f, "{} without tasks (plain calls)", self.version),
        }
    }
}

/// What a tool call gave back: the server chose.
#[derive(Debug)]
pub enum Called {
    /// The tool answered at once.
    Done(ToolOutput),
    /// The tool runs as a task.
    Task(TaskHandle),
}

/// A tool as the server lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolInfo {
    /// The tool's name.
    pub name: String,
    /// The tool's description.
    pub description: Option<String>,
    /// `forbidden`, `optional` or `required` on 2025-11-25; `None` where the era does not
    /// say (2026-07-28 servers decide per call).
    pub task_support: Option<String>,
    /// The input JSON Schema.
    pub input_schema: Value,
}

enum Target {
    Stdio(String),
    Io(Box<dyn FnOnce(mpsc::Sender<Value>) -> Arc<Wire> + Send>),
    Http(String),
    Local(Server),
}

/// Builds an [`McpClient`].
pub struct ClientBuilder {
    target: Option<Target>,
    handler: Option<Arc<dyn InputHandler>>,
    capabilities: Option<Value>,
    era: Option<Era>,
    store: Option<Arc<HandleStore>>,
    auth: Option<auth::Auth>,
    name: String,
    version: String,
    io_name: String,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("era", &self.era)
            .field("handler", &self.handler.is_some())
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Spawns `command` (a program and its arguments, quoted like a shell) and talks to it
    /// over stdio.
    pub fn stdio(mut self, command: impl Into<String>) -> Self {
        self.target = Some(Target::Stdio(command.into()));
        self
    }

    /// Talks newline-delimited JSON-RPC over any byte stream pair: a socket, a pipe to a
    /// process started elsewhere, or `tokio::io::duplex` in tests. Handles of its tasks are
    /// stored under the server name `io:NAME`.
    pub fn io<R, W>(mut self, name: impl Into<String>, reader: R, writer: W) -> Self
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        self.io_name = name.into();
        self.target = Some(Target::Io(Box::new(move |requests| {
            Wire::lines(reader, writer, None, requests)
        })));
        self
    }

    /// Talks Streamable HTTP to the endpoint `url` (`http://127.0.0.1:3000/mcp`).
    pub fn http(mut self, url: impl Into<String>) -> Self {
        self.target = Some(Target::Http(url.into()));
        self
    }

    /// Sends `token` as `Authorization: Bearer` with every HTTP request (other transports
    /// carry no token). A `401` is then an [`AuthError::Rejected`] or
    /// [`AuthError::LoginNeeded`].
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.auth = Some(auth::Auth::Bearer(auth::Secret(token.into())));
        self
    }

    /// Authorizes HTTP requests with the tokens of an [`OAuth`] session: stored ones,
    /// renewed before they expire, and new ones got when the server answers `401`.
    pub fn oauth(mut self, oauth: OAuth) -> Self {
        self.auth = Some(auth::Auth::OAuth(oauth));
        self
    }

    /// Talks to `server` in this process, with no transport: for tests of your own tools.
    pub fn in_process(mut self, server: Server) -> Self {
        self.target = Some(Target::Local(server));
        self
    }

    /// Answers the server's questions with `handler`. Without one the client declares no
    /// elicitation, sampling or roots capability (unless [`ClientBuilder::capabilities`] says
    /// otherwise).
    pub fn handler(mut self, handler: impl InputHandler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// [`ClientBuilder::handler`] with a handler already shared.
    pub fn shared_handler(mut self, handler: Arc<dyn InputHandler>) -> Self {
        self.handler = Some(handler);
        self
    }

    /// Declares these client capabilities (shaped like `ClientCapabilities`, such as
    /// `{"elicitation": {"form": {}}}`) instead of the handler's.
    ///
    /// Without a handler this defers the questions: the server asks them, and a task that
    /// asks one is left waiting for its answer while the wait ends with
    /// [`ClientError::InputNeeded`]; a client with a handler (in another process, later)
    /// answers it by watching the task. Without this, a server fails the task once its tool
    /// asks, for want of the capability.
    pub fn capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = Some(capabilities);
        self
    }

    /// Uses only this era instead of negotiating the best.
    pub fn era(mut self, era: Era) -> Self {
        self.era = Some(era);
        self
    }

    /// Remembers every task in `store`, so that [`McpClient::resume`] finds it again.
    pub fn store(mut self, store: Arc<HandleStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The name and version this client gives the server.
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.name = name.into();
        self.version = version.into();
        self
    }

    /// Connects and negotiates.
    pub async fn connect(self) -> Result<McpClient, ClientError> {
        let (tx, rx) = mpsc::channel(crate::OUTBOUND_CAPACITY);
        let (wire, server_key) = match self.target {
            None => {
                return Err(ClientError::BadCommand(
                    "no server: choose stdio, http or in_process".into(),
                ));
            }
            Some(Target::Stdio(command)) => {
                let key = format!("stdio:{command}");
                (Wire::stdio(&command, tx)?, key)
            }
            Some(Target::Io(make)) => (make(tx), format!("io:{}", self.io_name)),
            Some(Target::Http(url)) => {
                let key = format!("http:{url}");
                (Wire::http(&url, tx, self.auth), key)
            }
            Some(Target::Local(server)) => {
                let key = format!("local:{}", server.info().name);
                (Wire::local(&server, tx), key)
            }
        };
        let dispatcher = tokio::spawn(answer_requests(
            Arc::downgrade(&wire),
            rx,
            self.handler.clone(),
        ));
        let capabilities = match (self.capabilities, &self.handler) {
            (Some(declared), _) => declared,
            (None, Some(handler)) => handler.capabilities(),
            (None, None) => json!({}),
        };
        let info = json!({"name": self.name, "version": self.version});
        let negotiated = negotiate(&wire, self.era, &capabilities, &info).await?;
        Ok(McpClient {
            inner: Arc::new(Inner {
                wire,
                negotiated,
                server_key,
                handler: self.handler,
                store: self.store,
                capabilities,
                info,
                tools: Mutex::new(None),
                dispatcher,
            }),
        })
    }
}

/// A connection to one MCP server. Cheap to clone.
#[derive(Clone, Debug)]
pub struct McpClient {
    inner: Arc<Inner>,
}

struct Inner {
    wire: Arc<Wire>,
    negotiated: Negotiated,
    server_key: String,
    handler: Option<Arc<dyn InputHandler>>,
    store: Option<Arc<HandleStore>>,
    capabilities: Value,
    info: Value,
    tools: Mutex<Option<Vec<ToolInfo>>>,
    dispatcher: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("server", &self.server_key)
            .field("negotiated", &self.negotiated)
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.dispatcher.abort();
    }
}

impl McpClient {
    /// Starts building a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            target: None,
            handler: None,
            capabilities: None,
            era: None,
            store: None,
            auth: None,
            name: "mcp-tasks-client".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            io_name: String::new(),
        }
    }

    /// What was negotiated.
    pub fn negotiated(&self) -> &Negotiated {
        &self.inner.negotiated
    }

    /// The server as handles name it (`stdio:COMMAND`, `http:URL`, `io:NAME`, `local:NAME`).
    pub fn server_key(&self) -> &str {
        &self.inner.server_key
    }

    /// The handle store, if the client has one.
    pub fn store(&self) -> Option<&Arc<HandleStore>> {
        self.inner.store.as_ref()
    }

    /// Sends a request of the negotiated era (with the 2026-07-28 `_meta` when stateless)
    /// and returns its result.
    ///
    /// Every request but `tools/call` (whose span [`McpClient::call_tool`] opens) has a span
    /// of its own (`{method}`, kind client) whose trace context its `_meta` carries.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let send = async {
            let params = self.with_meta(params)?;
            self.inner
                .wire
                .request(method, params)
                .await
                .map_err(|e| refine(e, method))
        };
        if method == "tools/call" {
            return send.await;
        }
        call::spans::traced(method, None, send).await
    }

    /// [`McpClient::request`] under a given id, as a future that owns what it needs.
    pub(crate) fn request_as(
        &self,
        id: Value,
        method: &'static str,
        params: Value,
    ) -> impl std::future::Future<Output = Result<Value, ClientError>> + Send + 'static {
        let client = self.clone();
        async move {
            let params = client.with_meta(params)?;
            client
                .inner
                .wire
                .request_as(id, method, params)
                .await
                .map_err(|e| refine(e, method))
        }
    }

    /// The params of a request of the negotiated era: an object, with the 2026-07-28
    /// `_meta` when stateless.
    fn with_meta(&self, params: Value) -> Result<Value, ClientError> {
        let mut params = match params {
            Value::Null => Value::Object(Map::new()),
            Value::Object(o) => Value::Object(o),
            other => {
                return Err(ClientError::Arguments(format!(
                    "params must be an object, not {other}"
                )));
            }
        };
        #[cfg(feature = "otel")]
        crate::otel::inject(&mut params);
        if self.inner.negotiated.era == Era::V2026_07_28 {
            let meta = stateless_meta(&self.inner.capabilities, &self.inner.info);
            let slot = params
                .as_object_mut()
                .expect("an object")
                .entry("_meta")
                .or_insert_with(|| json!({}));
            if let (Some(slot), Value::Object(meta)) = (slot.as_object_mut(), meta) {
                slot.extend(meta);
            }
        }
        Ok(params)
    }

    /// Ends the connection: deletes a 2025-11-25 HTTP session, or closes a spawned server's
    /// stdin and waits up to `grace` for it to exit (then kills it). Tasks keep running on
    /// servers that outlive the connection; their handles stay in the store.
    pub async fn close(&self, grace: std::time::Duration) {
        self.inner.wire.close(grace).await;
    }

    /// Lists the server's tools (all pages).
    pub async fn list_tools(&self) -> Result<Vec<ToolInfo>, ClientError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request("tools/list", params).await?;
            for t in page["tools"].as_array().into_iter().flatten() {
                tools.push(ToolInfo {
                    name: t["name"].as_str().unwrap_or_default().to_owned(),
                    description: t["description"].as_str().map(str::to_owned),
                    task_support: t["execution"]["taskSupport"].as_str().map(str::to_owned),
                    input_schema: t.get("inputSchema").cloned().unwrap_or_else(|| json!({})),
                });
            }
            match page["nextCursor"].as_str() {
                Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_owned()),
                _ => break,
            }
        }
        *self.inner.tools.locked() = Some(tools.clone());
        Ok(tools)
    }

    /// One tool's listing (from the cached list, fetched once).
    pub async fn tool(&self, name: &str) -> Result<ToolInfo, ClientError> {
        let cached = self.inner.tools.locked().clone();
        let tools = match cached {
            Some(t) => t,
            None => self.list_tools().await?,
        };
        tools
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| ClientError::UnknownTool(name.to_owned()))
    }

    /// A handle on a task known by id (from a store, or given by hand).
    pub fn task(&self, task_id: impl Into<String>) -> TaskHandle {
        TaskHandle::known(self.clone(), task_id.into())
    }

    /// The unfinished tasks of this server in the handle store, to watch again. Nothing is
    /// sent to the server: the original calls are never repeated.
    pub fn resume(&self) -> Result<Vec<TaskHandle>, ClientError> {
        let Some(store) = &self.inner.store else {
            return Ok(Vec::new());
        };
        Ok(store
            .list(Some(&self.inner.server_key), true)?
            .into_iter()
            .map(|h| {
                let mut handle = self.task(h.task_id);
                handle.tool = Some(h.tool);
                handle
            })
            .collect())
    }

    /// Watches every unfinished task of this server in the handle store to its end, all at
    /// once, until `deadline` at most; each handle comes back with how its task ended.
    /// Nothing is called again.
    pub async fn resume_all(
        &self,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Vec<(TaskHandle, Result<TaskOutcome, ClientError>)>, ClientError> {
        let handles = self.resume()?;
        let mut watching = tokio::task::JoinSet::new();
        for (i, handle) in handles.iter().cloned().enumerate() {
            watching.spawn(async move { (i, handle.wait(deadline).await) });
        }
        let mut outcomes: Vec<Option<Result<TaskOutcome, ClientError>>> =
            handles.iter().map(|_| None).collect();
        while let Some(joined) = watching.join_next().await {
            let (i, outcome) =
                joined.map_err(|e| ClientError::Handler(format!("a watch panicked: {e}")))?;
            outcomes[i] = Some(outcome);
        }
        Ok(handles
            .into_iter()
            .zip(outcomes)
            .map(|(h, o)| (h, o.expect("every watch ends")))
            .collect())
    }

    /// Lists the server's tasks (2025-11-25 only: the 2026-07-28 extension has no list).
    pub async fn list_tasks(&self) -> Result<Vec<TaskState>, ClientError> {
        if self.inner.negotiated.era != Era::V2025_11_25 {
            return Err(ClientError::NotOffered("tasks/list", "2026-07-28"));
        }
        if !self.inner.negotiated.tasks {
            return Err(ClientError::NoTasks("2025-11-25"));
        }
        let mut tasks = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request("tasks/list", params).await?;
            for t in page["tasks"].as_array().into_iter().flatten() {
                tasks.push(TaskState::from_value(t)?);
            }
            match page["nextCursor"].as_str() {
                Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_owned()),
                _ => break,
            }
        }
        Ok(tasks)
    }

    /// Asks the handler one question.
    pub(crate) async fn ask(
        &self,
        question: &Question,
        task: Option<&str>,
    ) -> Result<Value, ClientError> {
        let Some(handler) = &self.inner.handler else {
            return Err(ClientError::InputNeeded {
                task: task.unwrap_or("(the call)").to_owned(),
                method: question.method.clone(),
            });
        };
        handler.answer(question).await.map_err(ClientError::Handler)
    }

    pub(crate) fn wire(&self) -> &Arc<Wire> {
        &self.inner.wire
    }

    pub(crate) fn has_handler(&self) -> bool {
        self.inner.handler.is_some()
    }

    pub(crate) fn note(&self, task_id: &str, status: &str, finished: bool) {
        if let Some(store) = &self.inner.store
            && let Err(e) = store.update(&self.inner.server_key, task_id, status, finished)
        {
            tracing::warn!(error = %e, "cannot update the handle store");
        }
    }
}

fn stateless_meta(capabilities: &Value, info: &Value) -> Value {
    let mut caps = capabilities.clone();
    caps["extensions"] = json!({ TASKS_EXTENSION: {} });
    json!({
        transport::META_VERSION: Era::V2026_07_28.as_str(),
        META_CAPABILITIES: caps,
        META_CLIENT_INFO: info,
    })
}

/// Turns the errors that have a known fix into their own variants.
fn refine(error: ClientError, method: &str) -> ClientError {
    match error {
        ClientError::Rpc {
            code: crate::jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY,
            data,
            ..
        } => ClientError::MissingCapability {
            method: method.to_owned(),
            required: data
                .and_then(|d| d.get("requiredCapabilities").cloned())
                .unwrap_or_default(),
        },
        other => other,
    }
}

async fn negotiate(
    wire: &Arc<Wire>,
    era: Option<Era>,
    capabilities: &Value,
    info: &Value,
) -> Result<Negotiated, ClientError> {
    let mut why = String::new();
    if era != Some(Era::V2025_11_25) {
        let discovered = wire
            .request(
                "server/discover",
                json!({ "_meta": stateless_meta(capabilities, info) }),
            )
            .await;
        match discovered {
            Ok(r) => {
                let speaks = r["supportedVersions"]
                    .as_array()
                    .is_some_and(|v| v.iter().any(|v| v == Era::V2026_07_28.as_str()));
                if speaks {
                    return Ok(Negotiated {
                        era: Era::V2026_07_28,
                        version: Era::V2026_07_28.as_str().into(),
                        tasks: r["capabilities"]["extensions"]
                            .get(TASKS_EXTENSION)
                            .is_some(),
                        capabilities: r["capabilities"].clone(),
                        server_info: r["_meta"][META_SERVER_INFO].clone(),
                    });
                }
                why = format!("server/discover lists only {}", r["supportedVersions"]);
            }
            Err(e @ (ClientError::Rpc { .. } | ClientError::Http { .. })) => why = e.to_string(),
            Err(other) => return Err(other),
        }
        if era == Some(Era::V2026_07_28) {
            return Err(ClientError::Negotiation(why));
        }
    }
    let init = wire
        .request(
            "initialize",
            json!({
                "protocolVersion": Era::V2025_11_25.as_str(),
                "capabilities": capabilities,
                "clientInfo": info,
            }),
        )
        .await
        .map_err(|e| match e {
            ClientError::Rpc { .. } | ClientError::Http { .. } if !why.is_empty() => {
                ClientError::Negotiation(format!("{why}; initialize: {e}"))
            }
            e @ (ClientError::Rpc { .. } | ClientError::Http { .. }) => {
                ClientError::Negotiation(e.to_string())
            }
            other => other,
        })?;
    let version = init["protocolVersion"]
        .as_str()
        .ok_or_else(|| {
            ClientError::Protocol(format!("initialize without a protocolVersion: {init}"))
        })?
        .to_owned();
    let known: &'static str = match version.as_str() {
        "2025-11-25" => "2025-11-25",
        "2025-06-18" => "2025-06-18",
        "2025-03-26" => "2025-03-26",
        "2024-11-05" => "2024-11-05",
        other => {
            return Err(ClientError::Negotiation(format!(
                "initialize chose the unknown version {other}"
            )));
        }
    };
    wire.stateful(known);
    wire.notify("notifications/initialized", json!({})).await?;
    let capabilities = init["capabilities"].clone();
    Ok(Negotiated {
        era: Era::V2025_11_25,
        tasks: known == "2025-11-25"
            && capabilities["tasks"]["requests"]["tools"]
                .get("call")
                .is_some(),
        version,
        capabilities,
        server_info: init["serverInfo"].clone(),
    })
}

/// Answers the server-to-client requests of 2025-11-25 (questions, ping) as they come.
async fn answer_requests(
    wire: std::sync::Weak<Wire>,
    mut requests: mpsc::Receiver<Value>,
    handler: Option<Arc<dyn InputHandler>>,
) {
    while let Some(request) = requests.recv().await {
        let Some(w) = wire.upgrade() else { return };
        let handler = handler.clone();
        tokio::spawn(async move {
            let id = request["id"].clone();
            let method = request["method"].as_str().unwrap_or_default().to_owned();
            let params = request.get("params").cloned().unwrap_or_default();
            let task_id = params["_meta"][RELATED_TASK]["taskId"]
                .as_str()
                .map(str::to_owned);
            let outcome = match (method.as_str(), &handler) {
                ("ping", _) => Ok(json!({})),
                ("elicitation/create" | "sampling/createMessage" | "roots/list", Some(h)) => {
                    let question = Question {
                        task_id,
                        method: method.clone(),
                        params,
                    };
                    h.answer(&question).await.map_err(|e| (-32603, e))
                }
                // A task's question with nobody to answer it is left open: the task waits for
                // its answer, which a client with a handler gives later (the wait here ends
                // with `InputNeeded`).
                ("elicitation/create" | "sampling/createMessage" | "roots/list", None)
                    if task_id.is_some() =>
                {
                    return;
                }
                (m, _) => Err((
                    crate::jsonrpc::METHOD_NOT_FOUND,
                    format!("this client does not answer {m}"),
                )),
            };
            w.respond(id, outcome).await;
        });
    }
}
