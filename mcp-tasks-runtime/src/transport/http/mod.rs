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
//!   requestor is over a quota and 503 when the server is busy or its task store failed,
//!   both with `Retry-After`.
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
//! stream of a 2025-11-25 session starts with a priming event (an id, `retry:` and empty
//! data) so it can be resumed; sessions of the older revisions get none, since their clients
//! read the empty data as a malformed message (their events still carry ids). SSE responses carry `Cache-Control: no-cache` and `X-Accel-Buffering: no`.
//!
//! # The GET stream
//!
//! One reader at a time per session: a new GET **replaces** the previous one, whose response
//! ends. Replacing (rather than refusing with 409) means a client whose connection died
//! without the server noticing can always reconnect. Messages sent while no GET is open wait
//! in the stream's log and go out on the next GET.
//!
//! # Media types
//!
//! As the Streamable HTTP rules say: a POST whose `Content-Type` is not `application/json`
//! gets 415; a POST whose `Accept` does not name both `application/json` and
//! `text/event-stream`, or a GET whose `Accept` does not name `text/event-stream`, gets 406
//! ([`HttpConfig::lenient_accept`] also takes a missing `Accept` and wildcards).
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
//! open, evicting the longest-idle one for a new client. Each client (principal, or address
//! when anonymous, after [`HttpConfig::trusted_proxies`]) has a share of the session table
//! and is one requestor of the task quotas ([`HttpConfig::anonymous_requestor`] names
//! anonymous requestors otherwise); sessions that never sent a
//! request expire soon, and a full table ends its least recently used idle session rather
//! than turn a new client away. On the 2026-07-28 wire a busy answer is 503 and a
//! rate-limited one 429, both with `Retry-After`.
//!
//! Nor is what a client does not read: a 2026-07-28 response stream holds at most the
//! server's [`outbound_capacity`](crate::ServerBuilder::outbound_capacity) unsent messages
//! (then its request waits, its log notifications are dropped and only its latest progress
//! is kept), and a 2025-11-25 session's streams keep the bounded event logs `HttpConfig`
//! sizes for resumption.

mod admission;
mod config;
mod get;
mod headers;
mod post;
pub(crate) mod response;
mod serve;
mod session;
mod sessions;
mod sse;
mod stateless;

pub use config::{
    AuthError, Authenticate, Authenticator, HttpConfig, Principal, ProxyHeader, RequestParts,
    RequestorKey,
};

use crate::server::Server;
use crate::transport::TransportError;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use response::{method_not_allowed, plain_error, session_not_found};
use session::HttpSession;
use sessions::Sessions;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The session header of 2025-11-25.
const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

/// The header a client resumes a stream with.
const LAST_EVENT_ID: &str = "last-event-id";

/// The `Retry-After` of a busy answer that gives no delay of its own.
const BUSY_RETRY_AFTER_MS: u64 = 1000;

/// A running standalone HTTP server, from [`Server::serve_http`].
#[derive(Debug)]
pub struct HttpHandle {
    local_addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    server: Server,
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

    /// Stops gracefully, for a deploy: task creation drains (a call that would make a task
    /// gets a 503 with `Retry-After` on the 2026-07-28 wire, a retryable `-32000` on the
    /// 2025-11-25 one, so the balancer or the client goes to another replica), every other
    /// request is served while the running tools finish, for up to `grace`, then the rest
    /// are handed off ([`Server::shutdown`]) and the server stops as
    /// [`shutdown`](Self::shutdown) does.
    pub async fn shutdown_gracefully(
        self,
        grace: std::time::Duration,
    ) -> Result<(), TransportError> {
        self.server.shutdown(grace).await;
        self.shutdown().await
    }

    /// Serves until `SIGTERM` or `SIGINT` (or the token of [`HttpConfig::shutdown_signal`]),
    /// then stops as [`shutdown_gracefully`](Self::shutdown_gracefully) does with the
    /// server's [`shutdown_grace`](crate::ServerBuilder::shutdown_grace); a second signal
    /// cuts the grace short (see [`lifecycle`](crate::lifecycle)). `SIGUSR1` and `SIGUSR2`
    /// pause and resume task creation meanwhile.
    pub async fn run_until_signal(self) -> Result<(), TransportError> {
        let mut signals = self.server.stop_signals();
        let configured = self.shutdown.clone();
        let stop = signals.stop.clone();
        signals.stop = CancellationToken::new();
        let either = signals.stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = configured.cancelled() => {}
            }
            either.cancel();
        });
        let server = self.server.clone();
        let grace = server.shutdown_grace();
        let (local_addr, shutdown) = (self.local_addr, self.shutdown.clone());
        let mut task = self.task;
        let serving = async { (&mut task).await };
        let ended = crate::lifecycle::serve_then_shut_down(&server, grace, serving, &signals).await;
        let joined = match ended {
            Some(joined) => joined,
            None => {
                tracing::info!(address = %local_addr, "closing the HTTP listener");
                shutdown.cancel();
                task.await
            }
        };
        match joined {
            Ok(result) => result.map_err(TransportError::Io),
            Err(e) => Err(TransportError::Io(std::io::Error::other(e))),
        }
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
    /// The MCP endpoint as an axum [`Router`], to serve or to mount in an application (cargo
    /// feature `http`; [`axum`] is the version it is built on).
    ///
    /// Serve it with `TCP_NODELAY` on accepted sockets (as [`Server::serve_http`] does):
    /// SSE events are small writes that must not wait on Nagle's algorithm. Serve it with
    /// the peer's address (`into_make_service_with_connect_info::<SocketAddr>()`) so that
    /// anonymous sessions and tasks are counted per peer (without it, anonymous clients
    /// share one requestor unless [`HttpConfig::anonymous_requestor`] names them). The connection limits of [`HttpConfig`]
    /// (header and idle timeouts, the connection cap) are [`Server::serve_http`]'s; the
    /// body limit and the body timeout hold here too.
    ///
    /// Mounted in an application, the app's own authentication layer names who makes each
    /// request with a [`Principal`] extension, which comes before [`HttpConfig::authenticator`].
    /// The tasks an earlier run left unfinished are settled once ([`Server::recover`]):
    /// starting now when a Tokio runtime is running, and before the router answers its first
    /// request in any case.
    ///
    /// ```no_run
    /// use mcp_tasks_runtime::axum::{self, Router, routing::get};
    /// use mcp_tasks_runtime::transport::http::HttpConfig;
    /// # async fn run(server: mcp_tasks_runtime::Server) -> std::io::Result<()> {
    /// let app = Router::new()
    ///     .route("/health", get(|| async { "ok" }))
    ///     .merge(server.http_router(HttpConfig::new().path("/mcp")));
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    /// axum::serve(
    ///     listener,
    ///     app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    /// )
    /// .await
    /// # }
    /// ```
    pub fn http_router(&self, config: HttpConfig) -> Router {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let server = self.clone();
            runtime.spawn(async move { server.recover_logged().await });
        }
        self.http_routes(config).router
    }

    /// The MCP endpoint's router, and its POST for [`serve::serve`] to answer directly.
    fn http_routes(&self, config: HttpConfig) -> serve::Routes {
        let beside = config.authenticator.as_ref().and_then(|a| a.routes());
        let app = Arc::new(App::new(self, config));
        let router = Router::new()
            .route(
                &app.config.path,
                axum::routing::post(post::post)
                    .get(get::get)
                    .delete(delete)
                    .fallback(other_method),
            )
            .with_state(Arc::clone(&app));
        let router = match beside {
            Some(routes) => router.merge(routes),
            None => router,
        };
        serve::Routes { router, mcp: app }
    }

    /// Serves the MCP endpoint on `config`'s address until [`HttpHandle::shutdown`] (cargo
    /// feature `http`).
    ///
    /// Connections are bounded: see [`HttpConfig::header_timeout`],
    /// [`HttpConfig::idle_timeout`], [`HttpConfig::body_timeout`] and
    /// [`HttpConfig::max_connections`].
    pub async fn serve_http(&self, config: HttpConfig) -> Result<HttpHandle, TransportError> {
        self.recover_logged().await;
        let listener = tokio::net::TcpListener::bind(config.bind).await?;
        let local_addr = listener.local_addr()?;
        let shutdown = config.shutdown.clone();
        let limits = serve::Limits {
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            body_timeout: config.body_timeout,
            max_connections: config.max_connections,
        };
        let path = config.path.clone();
        let beside = config.beside.clone();
        let mut routes = self.http_routes(config);
        routes.router = routes.router.merge(beside);
        let task = tokio::spawn(serve::serve(listener, routes, limits, shutdown.clone()));
        tracing::info!(
            address = %local_addr,
            %path,
            store = self.store_kind(),
            eras = crate::wire::ERAS,
            "serving MCP over HTTP"
        );
        Ok(HttpHandle {
            local_addr,
            shutdown,
            task,
            server: self.clone(),
        })
    }
}

struct App {
    server: Server,
    /// The tool arguments mirrored into `Mcp-Param-*` headers.
    param_headers: headers::ParamHeaders,
    config: HttpConfig,
    sessions: Mutex<Sessions<HttpSession>>,
    epoch: Instant,
    /// The requestor keys of the client groups seen lately, so that a request does not
    /// write its own; emptied when it holds [`REQUESTOR_KEYS`].
    requestor_keys: Mutex<std::collections::HashMap<std::net::IpAddr, Arc<str>>>,
}

impl App {
    fn new(server: &Server, config: HttpConfig) -> Self {
        let limits = sessions::Limits {
            max_sessions: config.max_sessions,
            per_owner: config.max_sessions_per_client,
            idle: config.session_idle,
            unused_idle: config.unused_session_idle,
        };
        Self {
            server: server.clone(),
            param_headers: headers::ParamHeaders::of(server),
            config,
            sessions: Mutex::new(Sessions::new(limits)),
            epoch: Instant::now(),
            requestor_keys: Mutex::default(),
        }
    }
}

/// The most requestor keys of client groups [`App`] keeps.
const REQUESTOR_KEYS: usize = 4096;

async fn delete(State(app): State<Arc<App>>, request: axum::extract::Request) -> HttpResponse {
    let (parts, _) = request.into_parts();
    let headers = &parts.headers;
    app.server.recover_logged().await;
    let principal = match app
        .admit(&parts, admission::peer_of(&parts.extensions))
        .await
    {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let Some(session_id) = headers.get(&SESSION_ID).and_then(|v| v.to_str().ok()) else {
        return method_not_allowed();
    };
    if app
        .session(session_id, principal.as_deref(), false)
        .is_none()
    {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's future is moved whole when it is boxed (by the router, then by the call
    /// that runs it). The large branches a synchronous call never takes (a task create,
    /// `initialize`, recovery, a keyed call's record, `tasks/result`'s wait, a subscription)
    /// are boxed where they are awaited, so that the futures of the common requests stay
    /// small: 9.4 and 8 KB before.
    #[test]
    fn the_futures_of_a_request_stay_small() {
        let server = Server::builder().build().unwrap();
        let app = Arc::new(App::new(&server, HttpConfig::new()));
        let handler = post::post(
            axum::extract::State(app),
            axum::extract::Request::new(axum::body::Body::empty()),
        );
        let size = std::mem::size_of_val(&handler);
        assert!(size <= 2048, "the POST handler's future is {size} bytes");
        let (session, _notes) = server.open_request_session(None, None);
        let text = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#;
        let Ok(crate::jsonrpc::Message::Request(request)) = crate::jsonrpc::Message::parse(text)
        else {
            unreachable!()
        };
        let reply = session.reply_on(request, None);
        let size = std::mem::size_of_val(&reply);
        assert!(size <= 3072, "a request's future is {size} bytes");
    }
}
