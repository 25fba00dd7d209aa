//! The settings of the HTTP transport and the authenticator hook.

use crate::context::BoxFuture;
use axum::http::{HeaderMap, Method, Uri, header};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Decides who makes each request: a [`Principal`] for an authenticated caller, `None` for
/// an anonymous one (allow it only if the server is meant to be open), or an [`AuthError`]
/// to refuse the request (`401` with a challenge, `403`, or `503` with `Retry-After`). Tasks
/// belong to the principal that created them: no other principal can read, answer or
/// cancel them.
///
/// Asynchronous, so that it may fetch keys or ask an introspection endpoint. The OAuth
/// resource server (`oauth::ResourceServer`, feature `oauth`) is one;
/// [`HttpConfig::authenticator`] makes one of a function of the headers.
///
/// ```
/// use mcp_tasks_runtime::context::BoxFuture;
/// use mcp_tasks_runtime::principal::Principal;
/// use mcp_tasks_runtime::transport::http::{AuthError, Authenticate, HttpConfig, RequestParts};
///
/// /// Callers named by a header a gateway in front of the server sets.
/// struct Gateway;
///
/// impl Authenticate for Gateway {
///     fn authenticate<'a>(
///         &'a self,
///         request: RequestParts<'a>,
///     ) -> BoxFuture<'a, Result<Option<Principal>, AuthError>> {
///         Box::pin(async move {
///             let user = request.headers.get("x-user").and_then(|v| v.to_str().ok());
///             match user {
///                 Some(user) => Ok(Some(Principal::new(user).with_scopes(["reports:read"]))),
///                 None => Err(AuthError::unauthorized("no x-user header")),
///             }
///         })
///     }
/// }
///
/// let config = HttpConfig::new().authenticate(Gateway);
/// # drop(config);
/// ```
pub trait Authenticate: Send + Sync + 'static {
    /// Who makes `request`.
    fn authenticate<'a>(
        &'a self,
        request: RequestParts<'a>,
    ) -> BoxFuture<'a, Result<Option<Principal>, AuthError>>;

    /// The `WWW-Authenticate` value of a `403` for a caller that lacks `scopes` (a tool's,
    /// at its call or a later request about its task); by default a bare `Bearer` challenge
    /// (RFC 6750 §3.1) naming them.
    fn insufficient_scope(&self, scopes: &[&str]) -> String {
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\"",
            scopes.join(" ")
        )
    }

    /// Routes the endpoint's router serves beside it without authentication, such as the
    /// OAuth resource server's metadata; none by default.
    fn routes(&self) -> Option<axum::Router> {
        None
    }
}

/// What an [`Authenticate`] sees of a request: its method, URI, headers and the peer's
/// address (`None` when the router is served without it).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RequestParts<'a> {
    /// The HTTP method.
    pub method: &'a Method,
    /// The request's URI.
    pub uri: &'a Uri,
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The peer's address.
    pub peer: Option<SocketAddr>,
}

impl<'a> RequestParts<'a> {
    /// The parts of a request to show an authenticator (outside the transport: tests, or an
    /// authenticator that asks another).
    pub fn new(method: &'a Method, uri: &'a Uri, headers: &'a HeaderMap) -> Self {
        Self {
            method,
            uri,
            headers,
            peer: None,
        }
    }

    /// The same, from `peer`.
    #[must_use]
    pub fn with_peer(mut self, peer: SocketAddr) -> Self {
        self.peer = Some(peer);
        self
    }

    /// The bearer token of the `Authorization` header (RFC 6750 §2.1), if it has one.
    pub fn bearer_token(&self) -> Option<&'a str> {
        let value = self.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = value.split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
    }
}

/// A shared [`Authenticate`], as [`HttpConfig`] keeps it.
pub type Authenticator = Arc<dyn Authenticate>;

/// The authenticator of [`HttpConfig::authenticator`]: a function of the headers, whose
/// name is the principal's subject.
struct FromHeaders<F>(F);

impl<F> Authenticate for FromHeaders<F>
where
    F: Fn(&HeaderMap) -> Result<Option<String>, AuthError> + Send + Sync + 'static,
{
    fn authenticate<'a>(
        &'a self,
        request: RequestParts<'a>,
    ) -> BoxFuture<'a, Result<Option<Principal>, AuthError>> {
        let principal = (self.0)(request.headers).map(|name| name.map(Principal::new));
        Box::pin(std::future::ready(principal))
    }
}

/// Names the requestor an anonymous request is charged to, for the task quotas
/// ([`ServerBuilder::quotas`](crate::ServerBuilder::quotas)), from the request's headers and
/// the client's address (the peer's, or the one a trusted proxy forwarded; `None` when the
/// router is served without the peer's address). `None` falls back to the address.
///
/// See [`HttpConfig::anonymous_requestor`].
pub type RequestorKey = Arc<dyn Fn(&HeaderMap, Option<IpAddr>) -> Option<String> + Send + Sync>;

/// The header a trusted reverse proxy puts the client's address in
/// ([`HttpConfig::trusted_proxies`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `Forwarded: for=…` (RFC 7239).
    Forwarded,
    /// `X-Forwarded-For: client, proxy1, …`.
    XForwardedFor,
}

/// The principal of a request, set as a request extension by an application's own
/// authentication layer when the MCP router is mounted in its app: the
/// [`Principal`](crate::principal::Principal) of the whole crate, with its scopes and facts.
///
/// The HTTP transport reads it before the [`Authenticator`]: a request that carries one is
/// made by that principal (it owns the tasks it creates and the sessions it opens), and the
/// authenticator is not asked. A request without it goes to the authenticator as usual (or is
/// anonymous when there is none). The `Host` and `Origin` checks apply either way.
///
/// ```
/// use mcp_tasks_runtime::axum::{Router, extract::Request, middleware, response::Response};
/// use mcp_tasks_runtime::transport::http::{HttpConfig, Principal};
///
/// /// The app's own authentication, in front of every route including `/mcp`.
/// async fn auth(mut request: Request, next: middleware::Next) -> Response {
///     let user = request
///         .headers()
///         .get("x-user")
///         .and_then(|v| v.to_str().ok())
///         .map(str::to_owned);
///     if let Some(user) = user {
///         request.extensions_mut().insert(Principal::new(user));
///     }
///     next.run(request).await
/// }
///
/// # fn app(server: mcp_tasks_runtime::Server) -> Router {
/// Router::new()
///     .merge(server.http_router(HttpConfig::new().path("/mcp")))
///     .layer(middleware::from_fn(auth))
/// # }
/// ```
pub use crate::principal::Principal;

/// Why an [`Authenticate`] refused a request. Each is answered with its HTTP status, its
/// headers and a JSON-RPC error body; the messages are the client's to read, so they never
/// quote a credential.
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
    /// Valid credentials without a scope the request needs: HTTP 403 with the challenge
    /// (`Bearer error="insufficient_scope", scope="…"`).
    #[error("insufficient scope: {message}")]
    InsufficientScope {
        /// What was missing, for the client.
        message: String,
        /// The `WWW-Authenticate` header value.
        challenge: String,
    },
    /// The credentials could not be checked now (the issuer's keys or its introspection
    /// endpoint out of reach): HTTP 503 with `Retry-After`.
    #[error("authentication unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// When to try again.
        retry_after: Duration,
    },
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
    pub(super) bind: SocketAddr,
    pub(super) path: String,
    pub(super) allowed_origins: Vec<String>,
    pub(super) allowed_hosts: Vec<String>,
    pub(super) any_host: bool,
    pub(super) body_limit: usize,
    pub(super) body_timeout: Duration,
    pub(super) header_timeout: Duration,
    pub(super) idle_timeout: Duration,
    pub(super) max_connections: usize,
    pub(super) authenticator: Option<Authenticator>,
    pub(super) event_buffer: usize,
    pub(super) retry: Duration,
    pub(super) keep_alive: Option<Duration>,
    pub(super) max_sessions: usize,
    pub(super) max_sessions_per_client: usize,
    pub(super) session_idle: Duration,
    pub(super) unused_session_idle: Duration,
    pub(super) strict_task_name: bool,
    pub(super) lenient_accept: bool,
    pub(super) trusted_proxies: Vec<IpAddr>,
    pub(super) proxy_header: ProxyHeader,
    pub(super) anonymous_requestor: Option<RequestorKey>,
    pub(super) shutdown: CancellationToken,
    /// Routes [`Server::serve_http`](crate::Server::serve_http) serves beside the endpoint.
    pub(super) beside: axum::Router,
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
            .field("lenient_accept", &self.lenient_accept)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("proxy_header", &self.proxy_header)
            .field("anonymous_requestor", &self.anonymous_requestor.is_some())
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
            lenient_accept: false,
            trusted_proxies: Vec::new(),
            proxy_header: ProxyHeader::XForwardedFor,
            anonymous_requestor: None,
            shutdown: CancellationToken::new(),
            beside: axum::Router::new(),
        }
    }
}

impl HttpConfig {
    /// The defaults: `127.0.0.1` on a free port, path `/mcp`, loopback `Host`s and `Origin`s
    /// only, 4 MiB bodies, no authentication, 256 events kept per stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the address [`Server::serve_http`](crate::Server::serve_http) listens on (port 0 picks a free port).
    pub fn bind(mut self, addr: impl Into<SocketAddr>) -> Self {
        self.bind = addr.into();
        self
    }

    /// Sets the endpoint's path (default `/mcp`).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// Routes that [`Server::serve_http`](crate::Server::serve_http) serves beside the MCP
    /// endpoint, on the same listener and under the same connection limits and stop: an
    /// operator console, a health check, metrics. They must not claim the endpoint's path
    /// (serving panics on overlapping routes). [`Server::http_router`](crate::Server::http_router)
    /// leaves them out: an application that mounts the endpoint mounts its own routes too.
    pub fn serve_beside(mut self, routes: axum::Router) -> Self {
        self.beside = self.beside.merge(routes);
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
    /// 10 s); a slower one is closed. Applies to [`Server::serve_http`](crate::Server::serve_http).
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// Sets how long a kept-alive connection may wait for its next request's headers after a
    /// response (default 60 s); then it is closed. Applies to [`Server::serve_http`](crate::Server::serve_http).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets how many connections may be open at once (default 1024). At the cap a new
    /// connection evicts the one that has waited longest without a request in progress;
    /// when every connection is busy it waits. The process running out of file descriptors
    /// evicts the same way. Applies to [`Server::serve_http`](crate::Server::serve_http).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Authenticates every request with a function of its headers: `Ok(Some(name))` names
    /// the principal (its subject, without scopes), `Ok(None)` lets an anonymous request in,
    /// `Err` refuses it. For scopes, claims or asynchronous checks, see
    /// [`authenticate`](Self::authenticate).
    pub fn authenticator<F>(self, f: F) -> Self
    where
        F: Fn(&HeaderMap) -> Result<Option<String>, AuthError> + Send + Sync + 'static,
    {
        self.authenticate(FromHeaders(f))
    }

    /// Authenticates every request with `authenticator` (see [`Authenticate`]), such as the
    /// OAuth resource server (`oauth::ResourceServer`, feature `oauth`).
    pub fn authenticate(mut self, authenticator: impl Authenticate) -> Self {
        self.authenticator = Some(Arc::new(authenticator));
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
    /// principal, or for anonymous clients one address (an IPv6 /64). Beyond that its
    /// least recently used idle session is ended, or the `initialize` gets 429 when all of
    /// them are busy. Behind a reverse proxy every anonymous client has the proxy's address
    /// unless the proxy is trusted ([`trusted_proxies`](Self::trusted_proxies)):
    /// authenticate, trust it, or raise this.
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

    /// Also serves requests whose `Accept` header is missing or allows the media types only
    /// through a wildcard (`*/*`, `text/*`); off by default.
    ///
    /// The Streamable HTTP rules have a client name both `application/json` and
    /// `text/event-stream` in the `Accept` of every POST, and `text/event-stream` in that of a
    /// GET; a request that does not gets 406 (a POST whose `Content-Type` is not
    /// `application/json` gets 415, whatever this says). The official SDKs and the MCP
    /// Inspector send exactly that; turn this on for hand-written clients (`curl`, scripts)
    /// that send no `Accept` or `*/*`.
    pub fn lenient_accept(mut self, lenient: bool) -> Self {
        self.lenient_accept = lenient;
        self
    }

    /// Takes the client's address from `header` when a request comes from one of `proxies`
    /// (reverse proxies or load balancers in front of this server); by default no proxy is
    /// trusted and the client's address is the peer's.
    ///
    /// The address serves where anonymous clients are told apart: their share of the session
    /// table ([`max_sessions_per_client`](Self::max_sessions_per_client)) and the requestor
    /// their tasks are charged to ([`anonymous_requestor`](Self::anonymous_requestor)). The
    /// header's addresses are read from the right: each trusted proxy's entry names the
    /// hop before it, and the first address that is not a trusted proxy is the client.
    /// Trust only proxies that set `header` themselves (appending to what the client sent),
    /// and name the header they set: a header a client wrote itself is never believed past
    /// the nearest trusted hop.
    ///
    /// ```
    /// use mcp_tasks_runtime::transport::http::{HttpConfig, ProxyHeader};
    /// let config = HttpConfig::new()
    ///     .allow_any_host()
    ///     .trusted_proxies(["10.0.0.2".parse().unwrap()], ProxyHeader::XForwardedFor);
    /// # drop(config);
    /// ```
    pub fn trusted_proxies(
        mut self,
        proxies: impl IntoIterator<Item = IpAddr>,
        header: ProxyHeader,
    ) -> Self {
        self.trusted_proxies = proxies.into_iter().map(|ip| ip.to_canonical()).collect();
        self.proxy_header = header;
        self
    }

    /// Names the requestor each anonymous request is charged to, for the per-requestor task
    /// quotas ([`ServerBuilder::quotas`](crate::ServerBuilder::quotas)); see [`RequestorKey`].
    ///
    /// A request with a principal is charged to its principal. By default an anonymous one
    /// is charged to the client's address (an IPv6 /64; behind a proxy, see
    /// [`trusted_proxies`](Self::trusted_proxies)), in both eras: every 2026-07-28 request
    /// and every 2025-11-25 session of one address share its quotas, so one client can
    /// neither use up the quotas of the others nor escape its own by opening sessions. When
    /// the router is served without the peer's address (see
    /// [`Server::http_router`](crate::Server::http_router)), anonymous requests without a key
    /// of this function's share one requestor.
    ///
    /// ```
    /// use mcp_tasks_runtime::transport::http::HttpConfig;
    /// // Anonymous clients of a gateway that names the tenant.
    /// let config = HttpConfig::new().anonymous_requestor(|headers, _address| {
    ///     let tenant = headers.get("x-tenant")?.to_str().ok()?;
    ///     Some(format!("tenant:{tenant}"))
    /// });
    /// # drop(config);
    /// ```
    pub fn anonymous_requestor<F>(mut self, f: F) -> Self
    where
        F: Fn(&HeaderMap, Option<IpAddr>) -> Option<String> + Send + Sync + 'static,
    {
        self.anonymous_requestor = Some(Arc::new(f));
        self
    }

    /// Ends the GET and `subscriptions/listen` streams when `token` is cancelled, so that a
    /// graceful shutdown of a server this router is mounted in does not wait for them.
    /// [`Server::serve_http`](crate::Server::serve_http) does this itself.
    pub fn shutdown_signal(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }
}
