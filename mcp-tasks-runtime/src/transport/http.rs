//! Streamable HTTP: both protocol eras on one endpoint (feature `http`).
//!
//! ```no_run
//! # async fn run(server: mcp_tasks_runtime::Server) -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_tasks_runtime::transport::http::HttpConfig;
//! let handle = server.serve_http(HttpConfig::new().bind(([127, 0, 0, 1], 8080))).await?;
//! println!("serving on http://{}/mcp", handle.local_addr());
//! handle.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # One endpoint, two eras
//!
//! - **2026-07-28 (stateless).** A POST whose request carries the 2026 `_meta` (or whose
//!   `MCP-Protocol-Version` header names a version that is not a stateful one) runs in a fresh
//!   session on behalf of the request's principal. `MCP-Protocol-Version`, `Mcp-Method`,
//!   `Mcp-Name` and the tool's `Mcp-Param-{Name}` headers must mirror the body (else HTTP 400,
//!   `-32020`); a missing `Mcp-Name` on `tasks/*` is accepted unless
//!   [`HttpConfig::require_task_name_header`]. Errors map to HTTP statuses: `-32601` is 404;
//!   `-32600`, `-32602`, `-32020`, `-32021` and `-32022` are 400; `-32000` is 429 when the
//!   requestor is over a quota and 503 when the server is busy, both with `Retry-After`.
//!   GET and DELETE answer 405. Closing the response stream cancels the request.
//! - **2025-11-25 (stateful).** A POST of `initialize` without `Mcp-Session-Id` opens a
//!   session; the id comes back in the `Mcp-Session-Id` header and must be sent on every later
//!   request (400 when missing, 404 when unknown, ended or owned by another principal).
//!   Notifications and responses answer 202. GET opens the session's stream for messages the
//!   server sends on its own; DELETE ends the session. Closing a stream does not cancel
//!   anything (the spec says so): events stay in a bounded log per stream and a GET with
//!   `Last-Event-ID` replays what followed that event.
//!
//! # JSON or SSE
//!
//! A request's response is `application/json` when the request finishes before it produces
//! any notification or server-to-client request: quick calls cost one plain response and
//! errors keep their HTTP status. The first such message switches the response to
//! `text/event-stream`: the messages, then the response, then the end of the stream. A
//! stateful stream starts with a priming event (an id, `retry:` and empty data) so it can be
//! resumed. SSE responses carry `Cache-Control: no-cache` and `X-Accel-Buffering: no`.
//!
//! # The GET stream
//!
//! One reader at a time per session: a new GET **replaces** the previous one, whose response
//! ends. Replacing (rather than refusing with 409) means a client whose connection died
//! without the server noticing can always reconnect. Messages sent while no GET is open wait
//! in the stream's log and go out on the next GET.
//!
//! # Security
//!
//! [`HttpConfig`] binds 127.0.0.1 unless told otherwise, accepts only `Host` values and
//! `Origin`s on loopback unless more are allowed (403 otherwise: DNS-rebinding protection),
//! limits request bodies (413) and the time they take (408), and can authenticate every
//! request with a hook whose principal owns the tasks it creates and the sessions it opens.
//! Every refusal carries a JSON-RPC error body (id `null` when the request was not read).
//!
//! Nothing a client holds without sending requests is unbounded: [`Server::serve_http`]
//! closes connections slow to send headers or idle between requests and caps how many are
//! open, evicting the longest-idle one for a new client. Each client (principal, or peer
//! address when anonymous) has a share of the session table; sessions that never sent a
//! request expire soon, and a full table ends its least recently used idle session rather
//! than turn a new client away. On the 2026-07-28 wire a busy answer is 503 and a
//! rate-limited one 429, both with `Retry-After`.

mod headers;
mod serve;
mod sessions;
mod sse;

use crate::error::Error;
use crate::jsonrpc::{self, ErrorObject, Message, Request, RequestId, Response};
use crate::router::Session;
use crate::server::Server;
use crate::transport::TransportError;
use crate::wire::classify::{self, Facts, Kind, is_stateful_version};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use serde_json::Value;
use sessions::{Owner, Sessions};
use sse::{CancelOnDrop, EventLog, LiveSse, Out, spawn_request};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The session header of 2025-11-25.
const SESSION_ID: &str = "mcp-session-id";
/// The header a client resumes a stream with.
const LAST_EVENT_ID: &str = "last-event-id";
/// Finished request streams kept per session for resumption, beyond the live ones.
const FINISHED_STREAMS_KEPT: usize = 32;
/// The `Retry-After` of a busy answer that gives no delay of its own.
const BUSY_RETRY_AFTER_MS: u64 = 1000;

/// Decides who makes a request, from its headers (a bearer token, say).
///
/// `Ok(Some(principal))` for an authenticated caller, `Ok(None)` for an anonymous one (allow
/// it only if the server is meant to be open), `Err` to refuse the request. Tasks belong to the
/// principal that created them: no other principal can read, answer or cancel them.
pub type Authenticator = Arc<dyn Fn(&HeaderMap) -> Result<Option<String>, AuthError> + Send + Sync>;

/// Why an [`Authenticator`] refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No or invalid credentials: HTTP 401, with a `WWW-Authenticate` challenge if given.
    #[error("unauthorized: {message}")]
    Unauthorized {
        /// What was wrong, for the client.
        message: String,
        /// The `WWW-Authenticate` header value, e.g. `Bearer realm="mcp"`.
        challenge: Option<String>,
    },
    /// Valid credentials without access: HTTP 403.
    #[error("forbidden: {0}")]
    Forbidden(String),
}

impl AuthError {
    /// A 401 with a `Bearer` challenge.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::Unauthorized {
            message: message.into(),
            challenge: Some("Bearer".into()),
        }
    }
}

/// Settings of the HTTP transport. Every setting has a safe default.
#[derive(Clone)]
pub struct HttpConfig {
    bind: SocketAddr,
    path: String,
    allowed_origins: Vec<String>,
    allowed_hosts: Vec<String>,
    any_host: bool,
    body_limit: usize,
    body_timeout: Duration,
    header_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
    authenticator: Option<Authenticator>,
    event_buffer: usize,
    retry: Duration,
    keep_alive: Option<Duration>,
    max_sessions: usize,
    max_sessions_per_client: usize,
    session_idle: Duration,
    unused_session_idle: Duration,
    strict_task_name: bool,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("bind", &self.bind)
            .field("path", &self.path)
            .field("allowed_origins", &self.allowed_origins)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("any_host", &self.any_host)
            .field("body_limit", &self.body_limit)
            .field("body_timeout", &self.body_timeout)
            .field("header_timeout", &self.header_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_connections", &self.max_connections)
            .field("authenticator", &self.authenticator.is_some())
            .field("event_buffer", &self.event_buffer)
            .field("max_sessions", &self.max_sessions)
            .field("max_sessions_per_client", &self.max_sessions_per_client)
            .field("require_task_name_header", &self.strict_task_name)
            .finish_non_exhaustive()
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            path: "/mcp".into(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            any_host: false,
            body_limit: 4 * 1024 * 1024,
            body_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            authenticator: None,
            event_buffer: 256,
            retry: Duration::from_secs(1),
            keep_alive: Some(Duration::from_secs(15)),
            max_sessions: 10_000,
            max_sessions_per_client: 64,
            session_idle: Duration::from_secs(30 * 60),
            unused_session_idle: Duration::from_secs(30),
            strict_task_name: false,
            shutdown: CancellationToken::new(),
        }
    }
}

impl HttpConfig {
    /// The defaults: `127.0.0.1` on a free port, path `/mcp`, loopback `Host`s and `Origin`s
    /// only, 4 MiB bodies, no authentication, 256 events kept per stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the address [`Server::serve_http`] listens on (port 0 picks a free port).
    pub fn bind(mut self, addr: impl Into<SocketAddr>) -> Self {
        self.bind = addr.into();
        self
    }

    /// Sets the endpoint's path (default `/mcp`).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// Also accepts requests whose `Origin` is exactly `origin` (`https://app.example.com`).
    /// Origins on loopback (`localhost`, `127.0.0.1`, `[::1]`, any port) are always accepted;
    /// requests without `Origin` (not from a browser) too.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// Also accepts requests whose `Host` is `host` (a name, optionally with `:port`).
    /// Loopback hosts are always accepted. Needed when serving on a non-loopback address.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into().to_ascii_lowercase());
        self
    }

    /// Accepts any `Host` (behind a reverse proxy that checks it, say). `Origin` is still checked.
    pub fn allow_any_host(mut self) -> Self {
        self.any_host = true;
        self
    }

    /// Sets the largest request body accepted (default 4 MiB); larger ones get 413 (with a
    /// JSON-RPC error, like every refusal).
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Sets how long a request body may take to arrive once its headers have (default 30 s);
    /// a slower one gets 408 and its connection is closed.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Sets how long a new connection may take to send its first request's headers (default
    /// 10 s); a slower one is closed. Applies to [`Server::serve_http`].
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// Sets how long a kept-alive connection may wait for its next request's headers after a
    /// response (default 60 s); then it is closed. Applies to [`Server::serve_http`].
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets how many connections may be open at once (default 1024). At the cap a new
    /// connection evicts the one that has waited longest without a request in progress;
    /// when every connection is busy it waits. The process running out of file descriptors
    /// evicts the same way. Applies to [`Server::serve_http`].
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Authenticates every request; see [`Authenticator`].
    pub fn authenticator<F>(mut self, f: F) -> Self
    where
        F: Fn(&HeaderMap) -> Result<Option<String>, AuthError> + Send + Sync + 'static,
    {
        self.authenticator = Some(Arc::new(f));
        self
    }

    /// Sets how many events each stateful stream keeps for resumption (default 256).
    pub fn event_buffer(mut self, events: usize) -> Self {
        self.event_buffer = events.max(1);
        self
    }

    /// Sets the reconnection delay announced in `retry:` (default 1 s).
    pub fn sse_retry(mut self, retry: Duration) -> Self {
        self.retry = retry;
        self
    }

    /// Sets how often a quiet SSE stream (a GET stream, or a request that has sent nothing
    /// for a while) sends a keep-alive comment (default 15 s; `None` for never). Besides
    /// keeping proxies from closing the connection, the write is how a client that went away
    /// is noticed, and for 2026-07-28 requests that cancels them.
    pub fn keep_alive(mut self, every: Option<Duration>) -> Self {
        self.keep_alive = every;
        self
    }

    /// Sets how many stateful sessions may exist at once (default 10 000). An `initialize`
    /// beyond that ends the least recently used idle session (one that never sent a request
    /// first); only when every session is busy (a request running, a stream open) does it
    /// get 503.
    pub fn max_sessions(mut self, n: usize) -> Self {
        self.max_sessions = n.max(1);
        self
    }

    /// Sets how many stateful sessions one client may have at once (default 64): one
    /// principal, or for anonymous clients one peer address (an IPv6 /64). Beyond that its
    /// least recently used idle session is ended, or the `initialize` gets 429 when all of
    /// them are busy. Behind a reverse proxy every anonymous client has the proxy's address:
    /// authenticate, or raise this.
    pub fn max_sessions_per_client(mut self, n: usize) -> Self {
        self.max_sessions_per_client = n.max(1);
        self
    }

    /// Sets how long a stateful session with nothing running and no open stream is kept
    /// (default 30 minutes). Idle sessions are ended when a later session opens.
    pub fn session_idle_timeout(mut self, idle: Duration) -> Self {
        self.session_idle = idle;
        self
    }

    /// Sets how long a stateful session that has sent no request since `initialize` is kept
    /// (default 30 s), so that sessions opened and abandoned do not hold the table.
    pub fn unused_session_idle_timeout(mut self, idle: Duration) -> Self {
        self.unused_session_idle = idle;
        self
    }

    /// Refuses 2026-07-28 `tasks/get`, `tasks/update` and `tasks/cancel` requests without an
    /// `Mcp-Name` header (400, `-32020`), for deployments whose load balancer routes tasks by
    /// it. By default a missing header is accepted, since the task id is in the body and some
    /// clients leave the header out; a header that disagrees with the body is always refused.
    pub fn require_task_name_header(mut self, required: bool) -> Self {
        self.strict_task_name = required;
        self
    }

    /// Ends the GET and `subscriptions/listen` streams when `token` is cancelled, so that a
    /// graceful shutdown of a server this router is mounted in does not wait for them.
    /// [`Server::serve_http`] does this itself.
    pub fn shutdown_signal(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }
}

/// A running standalone HTTP server, from [`Server::serve_http`].
#[derive(Debug)]
pub struct HttpHandle {
    local_addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl HttpHandle {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The endpoint's URL on the listening address, e.g. `http://127.0.0.1:4242/mcp`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.local_addr)
    }

    /// Stops accepting connections, ends the GET streams, lets in-flight requests finish
    /// their responses, and returns once every connection is closed.
    pub async fn shutdown(self) -> Result<(), TransportError> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// Waits until the server stops: once the token given to [`HttpConfig::shutdown_signal`]
    /// is cancelled (a signal handler can do that) and the connections are closed, or on an
    /// I/O error.
    pub async fn wait(self) -> Result<(), TransportError> {
        match self.task.await {
            Ok(result) => result.map_err(TransportError::Io),
            Err(e) => Err(TransportError::Io(std::io::Error::other(e))),
        }
    }
}

impl Server {
    /// The MCP endpoint as an axum [`Router`], to serve or to mount in an application.
    ///
    /// Serve it with `TCP_NODELAY` on accepted sockets (as [`Server::serve_http`] does):
    /// SSE events are small writes that must not wait on Nagle's algorithm. Serve it with
    /// the peer's address (`into_make_service_with_connect_info::<SocketAddr>()`) so that
    /// anonymous sessions are counted per peer. The connection limits of [`HttpConfig`]
    /// (header and idle timeouts, the connection cap) are [`Server::serve_http`]'s; the
    /// body limit and the body timeout hold here too.
    pub fn http_router(&self, config: HttpConfig) -> Router {
        let path = config.path.clone();
        let limits = sessions::Limits {
            max_sessions: config.max_sessions,
            per_owner: config.max_sessions_per_client,
            idle: config.session_idle,
            unused_idle: config.unused_session_idle,
        };
        let app = Arc::new(App {
            server: self.clone(),
            config,
            sessions: Mutex::new(Sessions::new(limits)),
            epoch: Instant::now(),
        });
        Router::new()
            .route(
                &path,
                axum::routing::post(post)
                    .get(get)
                    .delete(delete)
                    .fallback(other_method),
            )
            .with_state(app)
    }

    /// Serves the MCP endpoint on `config`'s address until [`HttpHandle::shutdown`].
    ///
    /// Connections are bounded: see [`HttpConfig::header_timeout`],
    /// [`HttpConfig::idle_timeout`], [`HttpConfig::body_timeout`] and
    /// [`HttpConfig::max_connections`].
    pub async fn serve_http(&self, config: HttpConfig) -> Result<HttpHandle, TransportError> {
        if let Err(e) = self.recover().await {
            tracing::error!(error = %e, "cannot settle the tasks of an earlier run");
        }
        let listener = tokio::net::TcpListener::bind(config.bind).await?;
        let local_addr = listener.local_addr()?;
        let shutdown = config.shutdown.clone();
        let limits = serve::Limits {
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            body_timeout: config.body_timeout,
            max_connections: config.max_connections,
        };
        let router = self.http_router(config);
        let task = tokio::spawn(serve::serve(listener, router, limits, shutdown.clone()));
        tracing::debug!(%local_addr, "serving MCP over HTTP");
        Ok(HttpHandle {
            local_addr,
            shutdown,
            task,
        })
    }
}

struct App {
    server: Server,
    config: HttpConfig,
    sessions: Mutex<Sessions<HttpSession>>,
    epoch: Instant,
}

/// A 2025-11-25 session over HTTP.
struct HttpSession {
    session: Session,
    version: &'static str,
    streams: Mutex<Streams>,
    /// Fires when the session ends; stops its GET stream and its outbound pump.
    closed: CancellationToken,
    /// Requests running and streams open; a session with none is idle.
    active: AtomicUsize,
    /// Milliseconds from `epoch` to the last use.
    last_seen: AtomicU64,
    /// The value of [`SESSION_USES`] at the last use.
    recency: AtomicU64,
    epoch: Instant,
}

/// Counts the uses of every session, to order them exactly by their last use.
static SESSION_USES: AtomicU64 = AtomicU64::new(0);

/// The stream logs of a session: number 0 is the GET stream, the others belong to POSTs.
struct Streams {
    next: u64,
    logs: HashMap<u64, Arc<EventLog>>,
    finished: VecDeque<u64>,
}

/// Counts one activity on a session for as long as it lives.
struct Active(Arc<HttpSession>);

impl Active {
    fn new(session: &Arc<HttpSession>) -> Self {
        session.active.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(session))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        sessions::Slot::touch(&*self.0, Instant::now());
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl sessions::Slot for HttpSession {
    fn busy(&self) -> bool {
        self.active.load(Ordering::Relaxed) > 0
    }

    fn last_seen(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_seen.load(Ordering::Relaxed))
    }

    fn recency(&self) -> u64 {
        self.recency.load(Ordering::Relaxed)
    }

    fn touch(&self, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.epoch).as_millis());
        self.last_seen
            .store(ms.unwrap_or(u64::MAX), Ordering::Relaxed);
        self.recency.store(
            SESSION_USES.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }

    fn end(&self) {
        HttpSession::end(self);
    }
}

impl App {
    /// Checks `Host` and `Origin` (DNS-rebinding protection) and authenticates.
    fn admit(&self, headers: &HeaderMap) -> Result<Option<String>, Refused> {
        if !self.config.any_host
            && let Some(host) = headers.get(header::HOST)
        {
            let host = host.to_str().unwrap_or_default().to_ascii_lowercase();
            let ok = is_loopback_host(&host)
                || self
                    .config
                    .allowed_hosts
                    .iter()
                    .any(|a| *a == host || host_name(&host) == a);
            if !ok {
                tracing::debug!(%host, "request refused: Host not allowed");
                return Err(Refused::new(StatusCode::FORBIDDEN, "Host not allowed"));
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            let ok = is_loopback_origin(origin)
                || self.config.allowed_origins.iter().any(|a| a == origin);
            if !ok {
                tracing::debug!(%origin, "request refused: Origin not allowed");
                return Err(Refused::new(StatusCode::FORBIDDEN, "Origin not allowed"));
            }
        }
        match &self.config.authenticator {
            None => Ok(None),
            Some(auth) => auth(headers).map_err(|e| {
                let (status, challenge) = match &e {
                    AuthError::Unauthorized { challenge, .. } => {
                        (StatusCode::UNAUTHORIZED, challenge.clone())
                    }
                    AuthError::Forbidden(_) => (StatusCode::FORBIDDEN, None),
                };
                Refused {
                    status,
                    message: e.to_string(),
                    challenge,
                }
            }),
        }
    }

    /// The session with this id, if it exists and belongs to `principal`; `used` when this
    /// is a request (not a notification or a response).
    fn session(
        &self,
        id: &str,
        principal: &Option<String>,
        used: bool,
    ) -> Option<Arc<HttpSession>> {
        self.sessions
            .lock()
            .expect("sessions lock")
            .get(id, principal, used, Instant::now())
    }

    /// Registers a new session, making room as [`sessions`] says.
    fn register(
        &self,
        session: Arc<HttpSession>,
        principal: Option<String>,
        peer: Option<std::net::IpAddr>,
    ) -> Result<String, sessions::Full> {
        let owner = Owner::of(principal.as_deref(), peer);
        self.sessions.lock().expect("sessions lock").insert(
            session,
            principal,
            owner,
            Instant::now(),
        )
    }

    fn remove(&self, id: &str) -> Option<Arc<HttpSession>> {
        self.sessions.lock().expect("sessions lock").remove(id)
    }
}

impl HttpSession {
    fn end(&self) {
        self.closed.cancel();
        self.session.close();
    }

    fn log(&self, id: u64) -> Option<Arc<EventLog>> {
        self.streams
            .lock()
            .expect("streams lock")
            .logs
            .get(&id)
            .cloned()
    }

    /// Opens the log of a new POST stream.
    fn new_stream(&self, capacity: usize) -> Arc<EventLog> {
        let mut streams = self.streams.lock().expect("streams lock");
        let id = streams.next;
        streams.next += 1;
        let log = Arc::new(EventLog::new(id, capacity));
        streams.logs.insert(id, Arc::clone(&log));
        log
    }

    /// Keeps a finished POST stream for resumption, dropping the oldest finished ones.
    fn stream_finished(&self, id: u64) {
        let mut streams = self.streams.lock().expect("streams lock");
        streams.finished.push_back(id);
        while streams.finished.len() > FINISHED_STREAMS_KEPT {
            if let Some(old) = streams.finished.pop_front() {
                streams.logs.remove(&old);
            }
        }
    }
}

/// A request refused before its body is read.
struct Refused {
    status: StatusCode,
    message: String,
    challenge: Option<String>,
}

impl Refused {
    fn new(status: StatusCode, message: &str) -> Self {
        Self {
            status,
            message: message.to_owned(),
            challenge: None,
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> HttpResponse {
        let mut response = plain_error(self.status, &self.message);
        if let Some(c) = self.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, c);
        }
        response
    }
}

fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    })
}

fn is_loopback_host(host: &str) -> bool {
    let name = host_name(host);
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    !rest.contains('/') && is_loopback_host(&rest.to_ascii_lowercase())
}

/// A JSON-RPC error without id, for refusals before a message is read.
fn plain_error(status: StatusCode, message: &str) -> HttpResponse {
    let response = Response::error(None, ErrorObject::new(jsonrpc::INVALID_REQUEST, message));
    json(status, &response)
}

fn json(status: StatusCode, response: &Response) -> HttpResponse {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        response.to_value().to_string(),
    )
        .into_response()
}

fn error_response(status: StatusCode, id: Option<RequestId>, error: Error) -> HttpResponse {
    json(status, &Response::error(id, error.into()))
}

/// The HTTP status of a 2026-07-28 response, and the `Retry-After` seconds of a refusal to
/// take the request now: 429 when the requestor is over a quota (the error's `data.limit`),
/// 503 when the server is busy.
fn stateless_status(response: &Response) -> (StatusCode, Option<u64>) {
    let status = match &response.outcome {
        Ok(_) => StatusCode::OK,
        Err(e) => match e.code {
            jsonrpc::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            jsonrpc::PARSE_ERROR
            | jsonrpc::INVALID_REQUEST
            | jsonrpc::INVALID_PARAMS
            | jsonrpc::HEADER_MISMATCH
            | jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY
            | jsonrpc::UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
            jsonrpc::SERVER_BUSY => {
                let data = e.data.as_ref();
                let status = if data.and_then(|d| d.get("limit")).is_some() {
                    StatusCode::TOO_MANY_REQUESTS
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                let retry_ms = data
                    .and_then(|d| d.get("retryAfterMs"))
                    .and_then(Value::as_u64)
                    .unwrap_or(BUSY_RETRY_AFTER_MS);
                return (status, Some(retry_ms.div_ceil(1000).max(1)));
            }
            _ => StatusCode::OK,
        },
    };
    (status, None)
}

/// A `text/event-stream` response that no cache or proxy buffers.
fn sse_response(body: Body) -> HttpResponse {
    let mut response = HttpResponse::new(body);
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response
}

async fn post(State(app): State<Arc<App>>, request: axum::extract::Request) -> HttpResponse {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let principal = match app.admit(&headers) {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    if let Some(ct) = headers.get(header::CONTENT_TYPE)
        && !ct
            .to_str()
            .unwrap_or_default()
            .to_ascii_lowercase()
            .starts_with("application/json")
    {
        return plain_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let body = match read_body(&app.config, &headers, body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let message = match std::str::from_utf8(&body)
        .map_err(|_| {
            Response::error(
                None,
                ErrorObject::new(jsonrpc::PARSE_ERROR, "parse error: body is not UTF-8"),
            )
        })
        .and_then(Message::parse)
    {
        Ok(m) => m,
        Err(error) => return json(StatusCode::BAD_REQUEST, &error),
    };
    let version = match headers::text(&headers, headers::PROTOCOL_VERSION) {
        Ok(v) => v.map(str::to_owned),
        Err(e) => return error_response(StatusCode::BAD_REQUEST, None, e),
    };
    let session_id = headers
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match message {
        Message::Request(request) => {
            tracing::debug!(method = %request.method, id = %request.id, "HTTP request");
            let facts = Facts::of(&request).with_version_header(version.as_deref());
            if classify::classify(&facts) == Kind::Stateless {
                return stateless(&app, &headers, principal, request).await;
            }
            let Some(session_id) = session_id else {
                if request.method == "initialize" {
                    return initialize(&app, principal, peer, request).await;
                }
                return error_response(
                    StatusCode::BAD_REQUEST,
                    Some(request.id),
                    Error::InvalidRequest(
                        "missing Mcp-Session-Id header: send `initialize` first, or use the 2026-07-28 `_meta`"
                            .into(),
                    ),
                );
            };
            let Some(session) = app.session(&session_id, &principal, true) else {
                return session_not_found(Some(request.id));
            };
            if let Err(e) = check_session_version(&session, version.as_deref()) {
                return error_response(StatusCode::BAD_REQUEST, Some(request.id), e);
            }
            stateful(&app, session, request).await
        }
        other => {
            let Some(session_id) = session_id else {
                let stateless_client = version.as_deref().is_some_and(|v| !is_stateful_version(v));
                return if stateless_client && matches!(other, Message::Notification(_)) {
                    StatusCode::ACCEPTED.into_response()
                } else {
                    error_response(
                        StatusCode::BAD_REQUEST,
                        None,
                        Error::InvalidRequest("missing Mcp-Session-Id header".into()),
                    )
                };
            };
            let Some(session) = app.session(&session_id, &principal, false) else {
                return session_not_found(None);
            };
            if let Err(e) = check_session_version(&session, version.as_deref()) {
                return error_response(StatusCode::BAD_REQUEST, None, e);
            }
            session.session.handle(other).await;
            StatusCode::ACCEPTED.into_response()
        }
    }
}

/// Reads a request body within the size limit and the body timeout. Refusals are JSON-RPC
/// errors like every other: 413 when too large, 408 when too slow, 400 when malformed (a
/// broken chunked encoding, say); the last two also close the connection, whose framing can
/// no longer be trusted.
async fn read_body(
    config: &HttpConfig,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, HttpResponse> {
    use http_body_util::BodyExt as _;
    let limit = config.body_limit;
    let too_large = || {
        plain_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the request body is larger than {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(closing(too_large()));
    }
    let read = http_body_util::Limited::new(body, limit).collect();
    match tokio::time::timeout(config.body_timeout, read).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(closing(too_large())),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "cannot read a request body");
            Err(closing(plain_error(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {e}"),
            )))
        }
        Err(_) => {
            tracing::debug!(timeout = ?config.body_timeout, "a request body was too slow");
            Err(closing(plain_error(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
            )))
        }
    }
}

/// Asks for the connection to be closed after this response.
fn closing(mut response: HttpResponse) -> HttpResponse {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn session_not_found(id: Option<RequestId>) -> HttpResponse {
    error_response(
        StatusCode::NOT_FOUND,
        id,
        Error::InvalidRequest(
            "session not found: it ended or never existed; initialize again".into(),
        ),
    )
}

/// A request on a session must name the session's version, if it names one (else 400).
fn check_session_version(session: &HttpSession, version: Option<&str>) -> Result<(), Error> {
    match version {
        Some(v) if v != session.version => Err(Error::InvalidRequest(format!(
            "MCP-Protocol-Version {v:?} does not match the session's {:?}",
            session.version
        ))),
        _ => Ok(()),
    }
}

/// A 2026-07-28 request: checked headers, a fresh session, JSON or a cancellable stream.
async fn stateless(
    app: &Arc<App>,
    headers: &HeaderMap,
    principal: Option<String>,
    request: Request,
) -> HttpResponse {
    let strict = app.config.strict_task_name;
    if let Err(e) = headers::check_stateless(&app.server, headers, &request, strict) {
        tracing::debug!(error = %e, "header mismatch");
        return error_response(StatusCode::BAD_REQUEST, Some(request.id), e);
    }
    let listen = request.method == "subscriptions/listen";
    let (session, _outbound) = app.server.open_session(principal, Some(Kind::Stateless));
    let mut guard = CancelOnDrop::new(session.clone(), request.id.clone());
    let mut out = spawn_request(session, request);
    match out.recv().await {
        Some(Out::Done(Some(response))) => {
            guard.disarm();
            let (status, retry_after) = stateless_status(&response);
            let mut http = json(status, &response);
            if let Some(seconds) = retry_after {
                http.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            http
        }
        Some(Out::Done(None)) | None => {
            guard.disarm();
            StatusCode::NO_CONTENT.into_response()
        }
        Some(Out::Message(first)) => {
            let stop = listen.then(|| app.config.shutdown.clone());
            let body = LiveSse::new(first, out, guard, stop, app.config.keep_alive);
            sse_response(Body::new(body))
        }
    }
}

/// `initialize` without a session: opens one if the handshake succeeds.
async fn initialize(
    app: &Arc<App>,
    principal: Option<String>,
    peer: Option<std::net::IpAddr>,
    request: Request,
) -> HttpResponse {
    let id = request.id.clone();
    let (session, outbound) = app.server.session_for(principal.clone());
    let Some(response) = session.handle_request(request).await else {
        return StatusCode::NO_CONTENT.into_response();
    };
    let version = session.protocol_version();
    let (true, Some(version)) = (response.outcome.is_ok(), version) else {
        session.close();
        return json(StatusCode::BAD_REQUEST, &response);
    };
    // Nobody reads the session's own stream until a GET stream opens.
    session.listen(false);
    let closed = app.config.shutdown.child_token();
    let standalone = Arc::new(EventLog::new(0, app.config.event_buffer));
    let http_session = Arc::new(HttpSession {
        session,
        version,
        streams: Mutex::new(Streams {
            next: 1,
            logs: HashMap::from([(0, Arc::clone(&standalone))]),
            finished: VecDeque::new(),
        }),
        closed: closed.clone(),
        active: AtomicUsize::new(0),
        last_seen: AtomicU64::new(0),
        recency: AtomicU64::new(0),
        epoch: app.epoch,
    });
    let session_id = match app.register(Arc::clone(&http_session), principal, peer) {
        Ok(id) => id,
        Err(full) => {
            http_session.end();
            let (status, message) = match full {
                sessions::Full::Owner => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many sessions for this client, all of them busy; end one (DELETE) first",
                ),
                sessions::Full::Table => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many sessions, all of them busy",
                ),
            };
            let mut http = error_response(status, Some(id), Error::Busy(message.into()));
            http.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(BUSY_RETRY_AFTER_MS / 1000),
            );
            return http;
        }
    };
    // Messages the server sends on its own go to the GET stream's log.
    tokio::spawn(async move {
        let mut outbound = outbound;
        loop {
            tokio::select! {
                message = outbound.recv() => match message {
                    Some(m) => standalone.push(&m),
                    None => break,
                },
                () = closed.cancelled() => break,
            }
        }
        standalone.finish();
    });
    tracing::debug!(session = %session_id, %version, "session opened");
    let mut http = json(StatusCode::OK, &response);
    if let Ok(v) = HeaderValue::from_str(&session_id) {
        http.headers_mut()
            .insert(HeaderName::from_static(SESSION_ID), v);
    }
    http
}

/// A request on a 2025-11-25 session: JSON, or a resumable stream that outlives the
/// connection.
async fn stateful(app: &Arc<App>, session: Arc<HttpSession>, request: Request) -> HttpResponse {
    let active = Active::new(&session);
    let mut out = spawn_request(session.session.clone(), request);
    let first = match out.recv().await {
        Some(Out::Done(Some(response))) => return json(StatusCode::OK, &response),
        Some(Out::Done(None)) | None => return StatusCode::NO_CONTENT.into_response(),
        Some(Out::Message(first)) => first,
    };
    let log = session.new_stream(app.config.event_buffer);
    log.push(&first);
    let pump_log = Arc::clone(&log);
    let pump_session = Arc::clone(&session);
    tokio::spawn(async move {
        let _active = active;
        while let Some(item) = out.recv().await {
            match item {
                Out::Message(m) => pump_log.push(&m),
                Out::Done(response) => {
                    if let Some(r) = response {
                        pump_log.push(&r.to_value().to_string());
                    }
                    break;
                }
            }
        }
        pump_log.finish();
        pump_session.stream_finished(pump_log.id);
    });
    // A POST stream ends when its response is sent, not at shutdown: in-flight requests finish.
    let body = log.follow(1, app.config.retry, None, CancellationToken::new());
    sse_response(Body::new(body))
}

async fn get(State(app): State<Arc<App>>, headers: HeaderMap) -> HttpResponse {
    let principal = match app.admit(&headers) {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let Some(session_id) = headers.get(SESSION_ID).and_then(|v| v.to_str().ok()) else {
        let version = headers::text(&headers, headers::PROTOCOL_VERSION)
            .ok()
            .flatten();
        if version.is_some_and(is_stateful_version) {
            return error_response(
                StatusCode::BAD_REQUEST,
                None,
                Error::InvalidRequest("missing Mcp-Session-Id header".into()),
            );
        }
        return method_not_allowed();
    };
    let Some(session) = app.session(session_id, &principal, true) else {
        return session_not_found(None);
    };
    let accepts_sse = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream") || v.contains("*/*"));
    if !accepts_sse {
        return plain_error(
            StatusCode::NOT_ACCEPTABLE,
            "a GET stream needs Accept: text/event-stream",
        );
    }
    let (log, from) = match headers.get(LAST_EVENT_ID).and_then(|v| v.to_str().ok()) {
        None => {
            let Some(log) = session.log(0) else {
                return session_not_found(None);
            };
            let from = log.undelivered();
            (log, from)
        }
        Some(last) => {
            let parsed = last
                .trim()
                .split_once('-')
                .and_then(|(s, n)| Some((s.parse::<u64>().ok()?, n.parse::<u64>().ok()?)));
            let found = parsed.and_then(|(s, n)| {
                session
                    .log(s)
                    .filter(|log| log.knows(n))
                    .map(|log| (log, n + 1))
            });
            match found {
                Some(f) => f,
                None => {
                    return plain_error(
                        StatusCode::BAD_REQUEST,
                        "unknown or expired Last-Event-ID",
                    );
                }
            }
        }
    };
    tracing::debug!(session = %session_id, stream = log.id, from, "GET stream");
    let stop = if log.id == 0 || !log.is_done() {
        session.closed.clone()
    } else {
        CancellationToken::new()
    };
    let active = Active::new(&session);
    let listening = (log.id == 0).then(|| Listening::new(&session));
    let body = log.follow(from, app.config.retry, app.config.keep_alive, stop);
    let body = Body::new(WithGuard {
        body,
        _guard: (active, listening),
    });
    sse_response(body)
}

/// Counts an open GET stream as a reader of the session's own stream while it lives.
struct Listening(Arc<HttpSession>);

impl Listening {
    fn new(session: &Arc<HttpSession>) -> Self {
        session.session.listen(true);
        Self(Arc::clone(session))
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.session.listen(false);
    }
}

/// A body that keeps a value alive as long as it is being sent.
struct WithGuard<B, G> {
    body: B,
    _guard: G,
}

impl<B: http_body::Body + Unpin, G: Unpin> http_body::Body for WithGuard<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }
}

async fn delete(State(app): State<Arc<App>>, headers: HeaderMap) -> HttpResponse {
    let principal = match app.admit(&headers) {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let Some(session_id) = headers.get(SESSION_ID).and_then(|v| v.to_str().ok()) else {
        return method_not_allowed();
    };
    if app.session(session_id, &principal, false).is_none() {
        return session_not_found(None);
    }
    if let Some(session) = app.remove(session_id) {
        session.end();
        tracing::debug!(session = %session_id, "session ended by the client");
    }
    StatusCode::NO_CONTENT.into_response()
}

/// Any method but POST, GET and DELETE.
async fn other_method() -> HttpResponse {
    let mut response = plain_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "this endpoint takes POST, GET and DELETE",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
    response
}

fn method_not_allowed() -> HttpResponse {
    let mut response = plain_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "this endpoint takes POST (GET and DELETE need a 2025-11-25 session)",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_and_origins() {
        for host in [
            "localhost",
            "localhost:3000",
            "127.0.0.1:9",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example.com",
            "evil.example.com:80",
            "127.0.0.2",
            "localhost.evil",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
        assert!(is_loopback_origin("http://localhost:5173"));
        assert!(is_loopback_origin("https://127.0.0.1"));
        assert!(!is_loopback_origin("http://evil.example.com"));
        assert!(!is_loopback_origin("null"));
        assert!(!is_loopback_origin("http://localhost.evil.com"));
    }

    #[test]
    fn busy_and_rate_limited_answers_get_their_status_and_retry_after() {
        use crate::quota::QuotaError;
        let answer = |error: Error| Response::error(Some(1.into()), error.into());
        let limited = answer(Error::RateLimited(QuotaError::CreationRate {
            per_second: 10.0,
            retry_after: Duration::from_millis(1500),
        }));
        assert_eq!(
            stateless_status(&limited),
            (StatusCode::TOO_MANY_REQUESTS, Some(2))
        );
        let soon = answer(Error::RateLimited(QuotaError::CreationRate {
            per_second: 10.0,
            retry_after: Duration::from_micros(10),
        }));
        assert_eq!(
            stateless_status(&soon),
            (StatusCode::TOO_MANY_REQUESTS, Some(1))
        );
        let live = answer(Error::RateLimited(QuotaError::LiveTasks {
            limit: 3,
            retry_after: Duration::from_secs(1),
        }));
        assert_eq!(
            stateless_status(&live),
            (StatusCode::TOO_MANY_REQUESTS, Some(1))
        );
        let busy = answer(Error::Busy("queue full".into()));
        assert_eq!(
            stateless_status(&busy),
            (StatusCode::SERVICE_UNAVAILABLE, Some(1))
        );
        let other = answer(Error::Internal("x".into()));
        assert_eq!(stateless_status(&other), (StatusCode::OK, None));
    }
}
