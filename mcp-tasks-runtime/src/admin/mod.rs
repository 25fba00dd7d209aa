//! The operator's console (cargo feature `admin`): a JSON API over every owner's tasks,
//! the OpenAPI document that describes it, a server-sent-events feed of changes and a web
//! page, as an axum router to mount beside [`Server::http_router`].
//!
//! ```no_run
//! use mcp_tasks_runtime::admin::AdminToken;
//! use mcp_tasks_runtime::transport::http::HttpConfig;
//! # async fn run(server: mcp_tasks_runtime::Server) -> Result<(), Box<dyn std::error::Error>> {
//! let admin = server.admin_router(AdminToken::new(std::env::var("ADMIN_TOKEN")?)?);
//! let app = server
//!     .http_router(HttpConfig::new())
//!     .nest("/admin", admin.into_router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! mcp_tasks_runtime::axum::serve(
//!     listener,
//!     app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
//! )
//! .await?;
//! # Ok(()) }
//! ```
//!
//! The page is at the router's root (`/admin` above); the API under `api/` (`/admin/api`),
//! described by `api/openapi.json`. The page has no build step and loads nothing from
//! elsewhere: its HTML, script and style are compiled into the binary.
//!
//! # Security
//!
//! The console is never open: [`AdminRouter`] needs an [`AdminAuth`] ([`AdminToken`], a
//! bearer token compared through SHA-256 digests; or, with the `oauth` feature,
//! `AdminScope`, the OAuth access tokens a resource server accepts that carry a scope of
//! your choosing, the operator named by the token's subject), and every API request
//! without a valid one gets `401` (`403` with `error="insufficient_scope"` for a valid
//! token without the scope) and reads or changes nothing. Only the page's static files are
//! served without it; the page asks for the token (or reads it from the URL fragment,
//! `#token=...`, which never reaches a server) and keeps it in the tab's session storage.
//!
//! Every request must name an allowed `Host` (loopback names unless
//! [`AdminRouter::allow_host`] adds more) and, when it carries an `Origin`, come from the
//! console's own origin or one [`AdminRouter::allow_origin`] names (`403` otherwise).
//! A request that changes anything (every `POST`) must also carry the header
//! `X-Mcp-Tasks-Admin: 1` and a JSON body type, which no cross-site form can send, and
//! is refused when the browser says it came from another site (`Sec-Fetch-Site`). The
//! token travels in the `Authorization` header only, never in a cookie, so a page of
//! another site cannot make a browser send it.
//!
//! # What a task's history holds
//!
//! Every store keeps a task's status changes with the task
//! ([`TaskRecord::history`](crate::task::TaskRecord::history)), each written in the same
//! write as the change: a task's detail lists its creation, then each change with its time,
//! status message, lease epoch and the process that made it, whichever process that was.
//! A task that asks many questions keeps its first change and its latest
//! ([`TaskRecord::MAX_HISTORY`](crate::task::TaskRecord::MAX_HISTORY)).
//!
//! # Pausing tools and draining
//!
//! The console does not stop task creation by itself: it asks the [`Controls`] it is given.
//! [`Server::admin_router`] gives it the server's own kill switch
//! ([`Server::creation`]), so pausing a tool or draining acts on the process that serves
//! the console (each process has its own switch); [`AdminRouter::with_controls`] gives it
//! others. A console with none ([`AdminRouter::new`] over a read-only task face) answers
//! the pause, resume and drain endpoints with `501`.

mod api;
mod auth;
mod feed;
mod query;
mod view;

#[cfg(feature = "oauth")]
pub use auth::AdminScope;
pub use auth::{AdminAuth, AdminAuthError, AdminToken, AdminTokenError};

use crate::server::Server;
use crate::tasks::Tasks;
use axum::Router;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The switches that stop new work: pause a tool (no new task of it starts) and drain a
/// process (it starts no new task and finishes what it runs). The console only asks; the
/// mechanism is the server's.
pub trait Controls: Send + Sync {
    /// Stops new tasks of `tool` from starting.
    fn pause_tool(&self, tool: &str);
    /// Lets new tasks of `tool` start again.
    fn resume_tool(&self, tool: &str);
    /// The tools paused now.
    fn paused_tools(&self) -> Vec<String>;
    /// Stops this process from starting new tasks; it finishes those it runs.
    fn drain(&self);
    /// Lets this process start new tasks again.
    fn undrain(&self);
    /// `true` while this process drains.
    fn draining(&self) -> bool;
}

/// How often the feed reads the store for changes unless told otherwise.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The operator's console for one server's tasks, before it is made a router: who may use
/// it, from which hosts and origins, and what pauses tools. From [`Server::admin_router`]
/// or [`AdminRouter::new`] (for a read-only [`Tasks`] over a store).
pub struct AdminRouter {
    tasks: Tasks,
    auth: Arc<dyn AdminAuth>,
    controls: Option<Arc<dyn Controls>>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    any_host: bool,
    poll: Duration,
}

impl fmt::Debug for AdminRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminRouter")
            .field("tasks", &self.tasks)
            .field("controls", &self.controls.is_some())
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("any_host", &self.any_host)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// The operator's console over this server's tasks, admitting whoever `auth` admits
    /// (cargo feature `admin`); its pause, resume and drain switch this process's task
    /// creation ([`Server::creation`]). Serve [`AdminRouter::into_router`] beside the MCP
    /// endpoint; see [`admin`](crate::admin).
    pub fn admin_router(&self, auth: impl AdminAuth + 'static) -> AdminRouter {
        AdminRouter::new(self.tasks(), auth).with_controls(Arc::new(self.creation()))
    }
}

impl AdminRouter {
    /// A console over `tasks`, admitting whoever `auth` admits.
    pub fn new(tasks: Tasks, auth: impl AdminAuth + 'static) -> Self {
        Self {
            tasks,
            auth: Arc::new(auth),
            controls: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            any_host: false,
            poll: DEFAULT_POLL_INTERVAL,
        }
    }

    /// Pauses tools and drains the process through `controls`.
    pub fn with_controls(mut self, controls: Arc<dyn Controls>) -> Self {
        self.controls = Some(controls);
        self
    }

    /// Also accepts requests for `host` (a name, or `name:port`), beside the loopback names.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into().to_ascii_lowercase());
        self
    }

    /// Accepts any `Host` (behind a proxy that checks it).
    pub fn any_host(mut self) -> Self {
        self.any_host = true;
        self
    }

    /// Also accepts requests from pages of `origin` (`https://ops.example.com`), beside
    /// the console's own.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// How often the feed reads the store for changes (default
    /// [`DEFAULT_POLL_INTERVAL`]): the most a change waits before the page shows it.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(10));
        self
    }

    /// The router: the page at its root, the API under `api/`.
    pub fn into_router(self) -> Router {
        let shared = Arc::new(Shared {
            feed: feed::Feed::new(self.poll),
            tasks: self.tasks,
            auth: self.auth,
            controls: self.controls,
            guard: auth::Guard {
                allowed_hosts: self.allowed_hosts,
                allowed_origins: self.allowed_origins,
                any_host: self.any_host,
            },
        });
        api::router(shared)
    }
}

/// What every handler of the console shares.
pub(crate) struct Shared {
    tasks: Tasks,
    auth: Arc<dyn AdminAuth>,
    controls: Option<Arc<dyn Controls>>,
    guard: auth::Guard,
    feed: feed::Feed,
}

/// The console's pause, resume and drain switch the kill switch of task creation (what
/// [`Server::admin_router`] gives the console).
impl Controls for crate::creation::TaskCreation {
    fn pause_tool(&self, tool: &str) {
        crate::creation::TaskCreation::pause_tool(self, tool);
    }
    fn resume_tool(&self, tool: &str) {
        crate::creation::TaskCreation::resume_tool(self, tool);
    }
    fn paused_tools(&self) -> Vec<String> {
        crate::creation::TaskCreation::paused_tools(self)
    }
    fn drain(&self) {
        crate::creation::TaskCreation::drain(self);
    }
    fn undrain(&self) {
        crate::creation::TaskCreation::undrain(self);
    }
    fn draining(&self) -> bool {
        self.is_draining()
    }
}
