//! The server: its identity, its tools and its settings, shared by every connection.

use crate::engine::{Controls, Engine, EngineConfig, Recovery};
use crate::prompt::{PromptDefError, Prompts};
use crate::resource::{Resource, ResourceDefError, ResourceTemplate, Resources};
use crate::store::{ClaimStore, MemoryTaskStore};
use crate::tool::{Registry, Tool, ToolDefError};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Who the server is, as told to clients (`serverInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Implementation {
    /// A machine name.
    pub name: String,
    /// The version.
    pub version: String,
    /// A display title.
    pub title: Option<String>,
}

impl Implementation {
    pub(crate) fn to_value(&self) -> Value {
        let mut v = json!({ "name": self.name, "version": self.version });
        if let Some(title) = &self.title {
            v["title"] = title.clone().into();
        }
        v
    }
}

/// Why a server could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A tool is malformed or two tools share a name.
    #[error(transparent)]
    Tool(#[from] ToolDefError),
    /// Two prompts share a name.
    #[error(transparent)]
    Prompt(#[from] PromptDefError),
    /// A resource template is malformed, or two resources or templates share a URI.
    #[error(transparent)]
    Resource(#[from] ResourceDefError),
    /// The operating system's random number generator failed.
    #[error("cannot read random bytes for the request-state key: {0}")]
    Random(String),
    /// A tool takes application state that nobody registered.
    #[error(
        "the tool {tool:?} takes state of type `{type_name}`, which is not registered: call \
         `ServerBuilder::state` with a value of that type"
    )]
    MissingState {
        /// The tool.
        tool: String,
        /// The state's type.
        type_name: &'static str,
    },
}

pub(crate) struct ServerInner {
    pub(crate) info: Implementation,
    pub(crate) info_value: Value,
    /// [`info_value`](Self::info_value) as JSON text, written as it is into every result of
    /// the 2026-07-28 era.
    pub(crate) info_json: Box<serde_json::value::RawValue>,
    pub(crate) instructions: Option<String>,
    pub(crate) registry: Registry,
    pub(crate) prompts: Prompts,
    pub(crate) resources: Resources,
    pub(crate) page_size: usize,
    /// `tools/list` shows a caller only the tools it may call.
    pub(crate) hide_out_of_scope: bool,
    /// How many unread messages each outbound channel holds.
    pub(crate) outbound_capacity: usize,
    /// Request streams kept for the next request over HTTP.
    #[cfg(feature = "http")]
    pub(crate) spare_streams: Arc<crate::session::SpareStreams>,
    /// The keys that sign and check `requestState`, newest first; never empty.
    pub(crate) state_keys: Box<[[u8; 32]]>,
    pub(crate) request_state_ttl: Duration,
    pub(crate) list_ttl: Duration,
    pub(crate) parking: Arc<crate::suspended::Parking>,
    pub(crate) engine: Arc<Engine>,
    pub(crate) state: crate::state::StateMap,
    pub(crate) quotas: crate::quota::Quotas,
    /// The task store's type, for the log line that says the server started.
    pub(crate) store_kind: &'static str,
    /// Set once the tasks of an earlier run have been settled (or that failed).
    recovered: tokio::sync::OnceCell<()>,
    /// How long running tools may go on at shutdown before they are handed off.
    pub(crate) shutdown_grace: Duration,
    /// The first and the second stop signal, once the stock signal handling runs (the
    /// `lifecycle` module).
    pub(crate) signals: std::sync::OnceLock<(
        tokio_util::sync::CancellationToken,
        tokio_util::sync::CancellationToken,
    )>,
}

/// An MCP server. Cheap to clone; every clone serves the same tools.
///
/// ```
/// use mcp_tasks_runtime::{Server, Tool, model::CallToolResult};
/// let server = Server::builder()
///     .name("demo")
///     .tool(Tool::new("noop", |_, _| async { Ok(CallToolResult::default()) }))
///     .build()
///     .unwrap();
/// assert_eq!(server.tools().len(), 1);
/// ```
#[derive(Clone)]
pub struct Server {
    pub(crate) inner: Arc<ServerInner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("info", &self.inner.info)
            .field("tools", &self.inner.registry.len())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts building a server.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// A server with every `#[task_tool]` function of this binary and default settings.
    pub fn from_registry() -> Result<Self, BuildError> {
        Self::builder().registry_tools().build()
    }

    /// The server's tools.
    pub fn tools(&self) -> &Registry {
        &self.inner.registry
    }

    /// The server's identity.
    pub fn info(&self) -> &Implementation {
        &self.inner.info
    }

    /// How many unread messages each outbound channel holds, set with
    /// [`ServerBuilder::outbound_capacity`].
    pub fn outbound_capacity(&self) -> usize {
        self.inner.outbound_capacity
    }

    /// The public face of the server's tasks, for everything that is not the protocol: an
    /// operator console, an admin command, user code. See [`Tasks`](crate::Tasks).
    pub fn tasks(&self) -> crate::Tasks {
        crate::Tasks::new(Arc::clone(&self.inner.engine))
    }

    /// The per-requestor task quotas, configured with [`ServerBuilder::quotas`].
    pub fn quotas(&self) -> &crate::quota::Quotas {
        &self.inner.quotas
    }

    /// Settles tasks that an earlier run of the server left unfinished in the store (see
    /// `on_restart`). Runs once per server: [`serve_stdio`](Self::serve_stdio),
    /// `transport::serve_io`, `serve_http` and `http_router` start it
    /// themselves, and the HTTP router answers its first requests after it. Call it yourself
    /// to see what it did, or when you drive sessions directly. Later calls (and calls while
    /// it runs, which wait for it) return an empty [`Recovery`].
    pub async fn recover(&self) -> Result<Recovery, crate::Error> {
        let mut outcome = Ok(Recovery::default());
        self.inner
            .recovered
            .get_or_init(|| async {
                outcome = self.inner.engine.recover().await;
            })
            .await;
        outcome
    }

    /// [`recover`](Self::recover) for a transport: a failure is logged, not returned.
    pub(crate) async fn recover_logged(&self) {
        if self.inner.recovered.initialized() {
            return;
        }
        // Boxed: the recovery's future is large, and every request's future holds this one.
        if let Err(e) = Box::pin(self.recover()).await {
            tracing::error!(error = %e, "cannot settle the tasks of an earlier run");
        }
    }

    /// The kill switch of task creation in this process: for every tool or for one, from
    /// code. See [`creation`](crate::creation) for what it does and for the signal and the
    /// file that turn it too.
    pub fn creation(&self) -> crate::creation::TaskCreation {
        self.inner.engine.creation.clone()
    }

    /// How long running tools may go on at shutdown, set with
    /// [`ServerBuilder::shutdown_grace`].
    pub fn shutdown_grace(&self) -> Duration {
        self.inner.shutdown_grace
    }

    /// Stops this process's part in the tasks, for a deploy (the transports' signal handling
    /// calls it; call it yourself when you stop the server in code):
    ///
    /// 1. Task creation drains: a call that would make a task gets a retryable error
    ///    ([`Error::CreationOff`](crate::Error::CreationOff), a 503 with `Retry-After` on the
    ///    2026-07-28 HTTP wire), and no queued task is claimed here.
    /// 2. The tools running here may finish for up to `grace`, while everything else is
    ///    served as before (`tasks/get`, `tasks/result`, `tasks/update`, `tasks/cancel`,
    ///    questions and answers), as long as the transport runs.
    /// 3. The tasks still running are handed off at once: each tool is stopped and its lease
    ///    released, fenced by its epoch, so that no process waits for it to lapse. A `rerun`
    ///    tool's task goes back to the queue, where another process claims it; any other
    ///    ends `failed`, interrupted by the shutdown.
    ///
    /// The transport is stopped by its caller afterwards. Returns what was handed off.
    pub async fn shutdown(&self, grace: Duration) -> crate::engine::HandOff {
        self.shutdown_until(grace, &tokio_util::sync::CancellationToken::new())
            .await
    }

    /// [`shutdown`](Self::shutdown), with the grace cut short when `force` fires (the
    /// stock signal handling fires it at a second `SIGTERM` or `SIGINT`).
    pub async fn shutdown_until(
        &self,
        grace: Duration,
        force: &tokio_util::sync::CancellationToken,
    ) -> crate::engine::HandOff {
        tracing::info!(grace = ?grace, "shutting down: no new tasks; running tasks may finish");
        let report = self.inner.engine.shutdown(grace, force).await;
        tracing::info!(
            requeued = report.requeued,
            failed = report.failed,
            unreleased = report.unreleased,
            "shut down: the tasks still running were handed off"
        );
        report
    }

    /// The task store's type name (`SqliteTaskStore`, ...), for logs.
    pub(crate) fn store_kind(&self) -> &'static str {
        self.inner.store_kind
    }
}

type MakeEngine = Box<
    dyn FnOnce(
            EngineConfig,
            Registry,
            crate::quota::Quotas,
            crate::state::StateMap,
            Controls,
        ) -> Arc<Engine>
        + Send,
>;

/// Builds a [`Server`].
pub struct ServerBuilder {
    make_engine: MakeEngine,
    store_kind: &'static str,
    engine_config: EngineConfig,
    quota_config: crate::quota::QuotaConfig,
    info: Implementation,
    instructions: Option<String>,
    tools: Vec<Tool>,
    prompts: Vec<crate::prompt::Prompt>,
    resources: Vec<Resource>,
    resource_templates: Vec<ResourceTemplate>,
    from_registry: bool,
    page_size: usize,
    hide_out_of_scope: bool,
    outbound_capacity: usize,
    state_keys: Vec<[u8; 32]>,
    request_state_ttl: Duration,
    list_ttl: Duration,
    max_parked_calls: usize,
    parked_call_timeout: Duration,
    state: std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
    shutdown_grace: Duration,
    pause_file: Option<std::path::PathBuf>,
    pause_file_interval: Duration,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("info", &self.info)
            .field("tools", &self.tools.len())
            .field("engine_config", &self.engine_config)
            .finish_non_exhaustive()
    }
}

impl Default for ServerBuilder {
    fn default() -> Self {
        Self {
            make_engine: Box::new(|config, registry, quotas, state, controls| {
                Engine::new(
                    MemoryTaskStore::new(),
                    config,
                    registry,
                    quotas,
                    state,
                    controls,
                )
            }),
            store_kind: "MemoryTaskStore",
            engine_config: EngineConfig::default(),
            quota_config: crate::quota::QuotaConfig::default(),
            info: Implementation {
                name: "mcp-tasks-server".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                title: None,
            },
            instructions: None,
            tools: Vec::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            resource_templates: Vec::new(),
            from_registry: false,
            page_size: 100,
            hide_out_of_scope: false,
            outbound_capacity: crate::OUTBOUND_CAPACITY,
            state_keys: Vec::new(),
            request_state_ttl: Duration::from_secs(10 * 60),
            list_ttl: Duration::from_secs(60),
            max_parked_calls: 1024,
            parked_call_timeout: Duration::from_secs(5 * 60),
            state: Default::default(),
            shutdown_grace: Duration::from_secs(30),
            pause_file: None,
            pause_file_interval: Duration::from_secs(1),
        }
    }
}

impl ServerBuilder {
    /// Registers application state: tools take it as a [`State<T>`](crate::State) parameter
    /// (or from [`TaskContext::state`](crate::TaskContext::state)). One value per type; a
    /// second value of the same type replaces the first. Register the same state on every
    /// process that runs tools (servers and [`Worker`](crate::Worker)s).
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state
            .insert(std::any::TypeId::of::<T>(), Arc::new(value));
        self
    }

    /// Sets the server's name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.info.name = name.into();
        self
    }

    /// Sets the server's version.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.info.version = version.into();
        self
    }

    /// Sets the server's display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.info.title = Some(title.into());
        self
    }

    /// Sets the instructions clients may give their model.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a prompt.
    pub fn prompt(mut self, prompt: crate::prompt::Prompt) -> Self {
        self.prompts.push(prompt);
        self
    }

    /// Adds a resource at a fixed URI.
    pub fn resource(mut self, resource: Resource) -> Self {
        self.resources.push(resource);
        self
    }

    /// Adds a resource template.
    pub fn resource_template(mut self, template: ResourceTemplate) -> Self {
        self.resource_templates.push(template);
        self
    }

    /// Adds every `#[task_tool]` function linked into this binary.
    pub fn registry_tools(mut self) -> Self {
        self.from_registry = true;
        self
    }

    /// Sets how many tools a `tools/list` page holds (at least 1).
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// Has `tools/list` show each caller only the tools it may call: those that need no
    /// scope, and those whose scopes ([`Tool::scopes`](crate::Tool::scopes)) its principal
    /// holds (off by default: every tool is listed, and a call without the scopes is
    /// refused). The 2026-07-28 list is then `cacheScope: "private"`.
    pub fn hide_tools_out_of_scope(mut self, hide: bool) -> Self {
        self.hide_out_of_scope = hide;
        self
    }

    /// Sets how many messages each connection, and each response stream, holds for a client
    /// that has not read them yet (default [`OUTBOUND_CAPACITY`](crate::OUTBOUND_CAPACITY),
    /// 1024; at least 1). Past it, messages that must not be lost wait for room, progress and
    /// task status are coalesced to the latest of each token and task, and log lines are
    /// dropped. A larger one lets a slow client lose less in bursts; a smaller one bounds the
    /// memory of many idle sessions more tightly.
    ///
    /// ```
    /// # use mcp_tasks_runtime::Server;
    /// let server = Server::builder().outbound_capacity(64).build().unwrap();
    /// assert_eq!(server.outbound_capacity(), 64);
    /// ```
    pub fn outbound_capacity(mut self, n: usize) -> Self {
        self.outbound_capacity = n.max(1);
        self
    }

    /// Sets the key that signs 2026-07-28 `requestState` (default: random per process).
    /// Give every process behind one load balancer the same key. The same as
    /// [`request_state_keys`](Self::request_state_keys) with this one key.
    pub fn request_state_key(mut self, key: [u8; 32]) -> Self {
        self.state_keys = vec![key];
        self
    }

    /// Sets the keyring of 2026-07-28 `requestState`, newest key first: a new state is signed
    /// with the first key, and a state signed with any of them is accepted.
    ///
    /// To rotate the key without failing the calls suspended at the time, put the new key
    /// first and keep the old one after it for at least the
    /// [`request_state_ttl`](Self::request_state_ttl), then drop it: a state signed with a
    /// key that left the ring is refused (`-32602`). Every process behind one load balancer
    /// needs the same ring (at least the same keys; the first one signs). An empty ring is
    /// the default: a random key per process.
    ///
    /// ```
    /// # use mcp_tasks_runtime::Server;
    /// let (new, old) = ([2u8; 32], [1u8; 32]);
    /// let server = Server::builder().request_state_keys([new, old]).build().unwrap();
    /// # drop(server);
    /// ```
    pub fn request_state_keys(mut self, keys: impl IntoIterator<Item = [u8; 32]>) -> Self {
        self.state_keys = keys.into_iter().collect();
        self
    }

    /// Sets how long a signed `requestState` stays valid.
    pub fn request_state_ttl(mut self, ttl: Duration) -> Self {
        self.request_state_ttl = ttl;
        self
    }

    /// Sets how many suspended 2026-07-28 calls may wait for the answers to their questions
    /// at once (default 1024, at least 1). A call that asks when the server already holds
    /// that many is cancelled: a tool that may rerun (`ResumePolicy::Rerun`) then asks its
    /// questions as if its call had been lost, any other answers `-32000` (server busy).
    pub fn max_parked_calls(mut self, n: usize) -> Self {
        self.max_parked_calls = n.max(1);
        self
    }

    /// Sets how long a suspended 2026-07-28 call waits for the client's retry (default five
    /// minutes). Past it the call is cancelled as a cancelled request is, and a late retry is
    /// answered by the tool's `ResumePolicy`. Keep it shorter than
    /// [`request_state_ttl`](Self::request_state_ttl).
    pub fn parked_call_timeout(mut self, timeout: Duration) -> Self {
        self.parked_call_timeout = timeout;
        self
    }

    /// Keeps tasks in `store` (default: in memory). A store that several processes share
    /// (SQLite on one host, PostgreSQL, Redis) lets them serve and run the same tasks.
    pub fn store<S: ClaimStore>(mut self, store: S) -> Self {
        let name = std::any::type_name::<S>();
        let name = name.split('<').next().unwrap_or(name);
        self.store_kind = name.rsplit("::").next().unwrap_or(name);
        self.make_engine = Box::new(move |config, registry, quotas, state, controls| {
            Engine::new(store, config, registry, quotas, state, controls)
        });
        self
    }

    /// Serves only: this process accepts, answers and settles tasks but runs no tools; a
    /// [`Worker`](crate::Worker) sharing the store runs them.
    pub fn serve_only(mut self) -> Self {
        self.engine_config.execute = false;
        self
    }

    /// Sets the task engine's limits and timings.
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.engine_config = config;
        self
    }

    /// Sets the per-requestor limits on live tasks, retained tasks and task creation rate
    /// (default [`QuotaConfig::default`](crate::quota::QuotaConfig)).
    ///
    /// A requestor is the principal of the request, in either era. An anonymous one is
    /// what its transport names: over HTTP the client's address (see
    /// `HttpConfig::anonymous_requestor` and `HttpConfig::trusted_proxies`), shared by all
    /// its 2026-07-28 requests and 2025-11-25 sessions; over stdio (or a
    /// [`Server::session`] of one's own) the connection.
    pub fn quotas(mut self, config: crate::quota::QuotaConfig) -> Self {
        self.quota_config = config;
        self
    }

    /// Sets how long the tools running at shutdown may go on before they are handed off
    /// (default 30 s; see [`Server::shutdown`]). The stock signal handling
    /// ([`Server::serve_stdio`], `HttpHandle::run_until_signal`, [`Worker::run`](crate::Worker::run))
    /// uses it; a second `SIGTERM` or `SIGINT` cuts it short.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Turns task creation off while the file at `path` exists: for the tools it lists (one
    /// name a line, `#` starts a comment), or for every tool when it lists none (see
    /// [`creation`](crate::creation)). The file is read every
    /// [`pause_file_interval`](Self::pause_file_interval) once the server runs.
    pub fn pause_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.pause_file = Some(path.into());
        self
    }

    /// Sets how often the [`pause_file`](Self::pause_file) is read (default 1 s, at least
    /// 10 ms).
    pub fn pause_file_interval(mut self, every: Duration) -> Self {
        self.pause_file_interval = every.max(Duration::from_millis(10));
        self
    }

    /// Builds the server. Fails on a malformed tool or resource template, or on a duplicate
    /// tool name, prompt name, resource URI or resource template.
    pub fn build(self) -> Result<Server, BuildError> {
        let mut registry = if self.from_registry {
            Registry::from_inventory()?
        } else {
            Registry::default()
        };
        for tool in self.tools {
            registry.insert(tool)?;
        }
        let mut prompts = Prompts::default();
        for prompt in self.prompts {
            prompts.insert(prompt)?;
        }
        let mut resources = Resources::default();
        for resource in self.resources {
            resources.insert(resource)?;
        }
        for template in self.resource_templates {
            resources.insert_template(template)?;
        }
        let mut state_keys = self.state_keys;
        if state_keys.is_empty() {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key).map_err(|e| BuildError::Random(e.to_string()))?;
            state_keys.push(key);
        }
        let state = crate::state::StateMap::new(self.state);
        for tool in registry.iter() {
            if let Some(missing) = tool.state.iter().find(|r| !state.has(r)) {
                return Err(BuildError::MissingState {
                    tool: tool.name.to_string(),
                    type_name: missing.type_name,
                });
            }
        }
        let quotas = crate::quota::Quotas::new(self.quota_config);
        let controls = Controls {
            creation: crate::creation::TaskCreation::default(),
            pause_file: self.pause_file.map(|path| (path, self.pause_file_interval)),
        };
        let engine = (self.make_engine)(
            self.engine_config,
            registry.clone(),
            quotas.clone(),
            state.clone(),
            controls,
        );
        let info_value = self.info.to_value();
        Ok(Server {
            inner: Arc::new(ServerInner {
                engine,
                quotas,
                state,
                store_kind: self.store_kind,
                recovered: tokio::sync::OnceCell::new(),
                shutdown_grace: self.shutdown_grace,
                signals: std::sync::OnceLock::new(),
                info_json: serde_json::value::to_raw_value(&info_value)
                    .expect("a JSON value serialises"),
                info_value,
                info: self.info,
                instructions: self.instructions,
                registry,
                prompts,
                resources,
                page_size: self.page_size,
                hide_out_of_scope: self.hide_out_of_scope,
                outbound_capacity: self.outbound_capacity,
                #[cfg(feature = "http")]
                spare_streams: crate::session::SpareStreams::new(self.outbound_capacity),
                state_keys: state_keys.into(),
                request_state_ttl: self.request_state_ttl,
                list_ttl: self.list_ttl,
                parking: crate::suspended::Parking::new(
                    self.max_parked_calls,
                    self.parked_call_timeout,
                    self.request_state_ttl,
                ),
            }),
        })
    }
}
