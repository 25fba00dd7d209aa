//! The connections of [`Server::serve_http`](crate::Server::serve_http): an accept loop over
//! hyper that bounds what a client can hold without sending requests.
//!
//! - A new connection has the header timeout to send its first request's headers; a kept-alive
//!   one has the idle timeout to send the next one's. Past that it is closed.
//! - A request body has the body timeout to arrive (the handler answers 408 first; the
//!   connection is closed a moment later if it did not get the chance).
//! - At most `max_connections` are open. At the cap, or when the process runs out of file
//!   descriptors, a new connection evicts the one that has waited longest without a request
//!   in progress, so clients that send requests keep being served however many connections
//!   sit idle. Connections with a request in progress (a response or an SSE stream being
//!   sent) are never evicted: when every connection is busy, new ones wait.
//!
//! Each connection is in one phase, packed with the time it began into one atomic word, so
//! the reaper never sees a phase with the time of another.

use crate::sync::LockExt;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use http_body::Body as _;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The connection limits of [`serve`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) max_connections: usize,
}

/// How long after the body timeout a connection still reading its body is closed, which
/// leaves the handler time to answer 408 first.
const BODY_GRACE: Duration = Duration::from_secs(1);

/// Waiting for the first request's headers.
const HEADERS: u64 = 0;
/// Kept alive after a response, waiting for the next request's headers.
const IDLE: u64 = 1;
/// A request whose body is still arriving.
const BODY: u64 = 2;
/// A request being handled or its response being sent.
const BUSY: u64 = 3;
const PHASE_SHIFT: u32 = 62;

/// One open connection.
struct Conn {
    /// The phase in the top two bits, the milliseconds since `epoch` it began at below.
    state: AtomicU64,
    epoch: Instant,
    /// Closes the connection at once (a timeout or an eviction).
    close: CancellationToken,
}

impl Conn {
    fn enter(&self, phase: u64) {
        // Rounded up, so that no deadline falls early.
        let ms =
            u64::try_from(self.epoch.elapsed().as_micros().div_ceil(1000)).unwrap_or(u64::MAX >> 2);
        self.state.store(
            (phase << PHASE_SHIFT) | ms.min((1 << PHASE_SHIFT) - 1),
            Ordering::Release,
        );
    }

    /// The phase and when it began.
    fn phase(&self) -> (u64, Instant) {
        let state = self.state.load(Ordering::Acquire);
        let ms = state & ((1 << PHASE_SHIFT) - 1);
        (state >> PHASE_SHIFT, self.epoch + Duration::from_millis(ms))
    }
}

/// The open connections.
struct Conns {
    epoch: Instant,
    limits: Limits,
    table: Mutex<HashMap<u64, Arc<Conn>>>,
    /// Fired when a connection is gone: room for a waiting one, or the end of a drain.
    gone: Notify,
}

impl Conns {
    fn len(&self) -> usize {
        self.table.locked().len()
    }

    fn remove(&self, id: u64) {
        self.table.locked().remove(&id);
        self.gone.notify_waiters();
    }

    /// Closes the connection that has waited longest without a request in progress.
    fn evict_one(&self) -> bool {
        let mut table = self.table.locked();
        let victim = table
            .iter()
            .map(|(id, c)| (*id, c.phase()))
            .filter(|(_, (phase, _))| *phase != BUSY)
            .min_by_key(|(_, (_, since))| *since)
            .map(|(id, _)| id);
        let Some(conn) = victim.and_then(|id| table.remove(&id)) else {
            return false;
        };
        conn.close.cancel();
        tracing::debug!("connection evicted to make room");
        true
    }

    /// Closes every connection past its phase's deadline.
    fn reap(&self, now: Instant) {
        let limits = &self.limits;
        let mut table = self.table.locked();
        table.retain(|_, conn| {
            let (phase, since) = conn.phase();
            let allowed = match phase {
                HEADERS => limits.header_timeout,
                IDLE => limits.idle_timeout,
                BODY => limits.body_timeout + BODY_GRACE,
                _ => return true,
            };
            let expired = now.saturating_duration_since(since) >= allowed;
            if expired {
                tracing::debug!(phase, "connection timed out");
                conn.close.cancel();
            }
            !expired
        });
    }
}

/// What the connections serve: a router, and the POST of the MCP endpoint, answered without
/// going through the router (the request most often made; the router's path matching, boxed
/// services and response conversions cost it some 3,400 instructions).
pub(crate) struct Routes {
    pub(crate) router: Router,
    /// The MCP endpoint, at its configured path.
    pub(crate) mcp: Arc<super::App>,
}

/// Accepts connections on `listener` and serves `routes` on them until `shutdown`, then lets
/// in-flight requests finish and returns once every connection is closed.
pub(crate) async fn serve(
    listener: TcpListener,
    routes: Routes,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let routes = Arc::new(routes);
    let conns = Arc::new(Conns {
        epoch: Instant::now(),
        limits,
        table: Mutex::new(HashMap::new()),
        gone: Notify::new(),
    });
    let reaper = tokio::spawn(reap(Arc::clone(&conns)));
    let mut next_id = 0u64;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                if out_of_descriptors(&e) && conns.evict_one() {
                    // Give the evicted connection a moment to close its descriptor.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                if !is_connection_error(&e) {
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        if !room(&conns, &shutdown).await {
            break;
        }
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        next_id += 1;
        let conn = Arc::new(Conn {
            state: AtomicU64::new(0),
            epoch: conns.epoch,
            close: CancellationToken::new(),
        });
        conn.enter(HEADERS);
        conns.table.locked().insert(next_id, Arc::clone(&conn));
        tokio::spawn(connection(
            Arc::clone(&conns),
            next_id,
            conn,
            tcp,
            peer,
            Arc::clone(&routes),
            shutdown.clone(),
        ));
    }
    drop(listener);
    loop {
        let gone = conns.gone.notified();
        tokio::pin!(gone);
        gone.as_mut().enable();
        if conns.len() == 0 {
            break;
        }
        gone.await;
    }
    reaper.abort();
    Ok(())
}

/// Waits until one more connection fits, evicting an idle one at the cap; `false` on shutdown.
async fn room(conns: &Conns, shutdown: &CancellationToken) -> bool {
    loop {
        let gone = conns.gone.notified();
        tokio::pin!(gone);
        gone.as_mut().enable();
        if conns.len() < conns.limits.max_connections || conns.evict_one() {
            return true;
        }
        tokio::select! {
            () = gone => {}
            () = shutdown.cancelled() => return false,
        }
    }
}

/// Runs the timeouts, a few times per shortest timeout.
async fn reap(conns: Arc<Conns>) {
    let limits = conns.limits;
    let shortest = limits
        .header_timeout
        .min(limits.idle_timeout)
        .min(limits.body_timeout);
    let every = (shortest / 4).clamp(Duration::from_millis(5), Duration::from_millis(500));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        conns.reap(Instant::now());
    }
}

/// Serves one connection until it ends, is closed by a timeout or an eviction, or drains
/// after `shutdown`.
async fn connection(
    conns: Arc<Conns>,
    id: u64,
    conn: Arc<Conn>,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    routes: Arc<Routes>,
    shutdown: CancellationToken,
) {
    let state = Arc::clone(&conn);
    let service =
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let state = Arc::clone(&state);
            let routes = Arc::clone(&routes);
            async move {
                let (mut parts, body) = request.into_parts();
                let body = if body.is_end_stream() {
                    state.enter(BUSY);
                    RequestBody::Whole(body)
                } else {
                    state.enter(BODY);
                    RequestBody::Tracked(Tracked {
                        body,
                        conn: Arc::clone(&state),
                    })
                };
                let app = &routes.mcp;
                let mcp_post =
                    parts.method == axum::http::Method::POST && parts.uri.path() == app.config.path;
                if !mcp_post {
                    // The router's handlers (and an application's routes) find the client's
                    // address where axum puts it; the MCP endpoint's POST is told it.
                    parts.extensions.insert(ConnectInfo(peer));
                }
                let response = if mcp_post {
                    super::post::serve_post(app, parts, body, Some(peer)).await
                } else {
                    let request = hyper::Request::from_parts(parts, Body::new(body));
                    let service =
                        hyper_util::service::TowerToHyperService::new(routes.router.clone());
                    hyper::service::Service::call(&service, request).await?
                };
                Ok::<_, Infallible>(response.map(|body| {
                    Body::new(Responding {
                        body,
                        _end: ResponseEnd(state),
                    })
                }))
            }
        });
    let http = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
    tokio::pin!(http);
    let mut draining = false;
    loop {
        tokio::select! {
            result = http.as_mut() => {
                match result {
                    Ok(()) => {}
                    Err(e) if client_went_away(&e) => {
                        tracing::debug!(reason = %e, "the client closed the connection");
                    }
                    Err(e) => tracing::debug!(error = %e, "connection ended with an error"),
                }
                break;
            }
            () = conn.close.cancelled() => break,
            () = shutdown.cancelled(), if !draining => {
                draining = true;
                http.as_mut().graceful_shutdown();
            }
        }
    }
    conns.remove(id);
}

/// Whether a connection's error only says that the client went away: it closed or reset the
/// connection in the middle of a request, or while a response was streaming to it. Clients do
/// that all the time (a command line that got its answer, a reader of an SSE stream that
/// stopped), so it is not logged as an error.
fn client_went_away(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() || e.is_closed() || e.is_canceled() || e.is_body_write_aborted() {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::UnexpectedEof
            );
        }
        source = cause.source();
    }
    false
}

/// A request body as the MCP endpoint's POST reads it, not boxed: hyper's, whole when the
/// request arrived; hyper's while it arrives ([`Tracked`]); or one the router handed over.
pub(super) enum RequestBody {
    /// The body of a request that had all arrived when its head was read.
    Whole(hyper::body::Incoming),
    /// The body of a request still arriving: its connection is marked busy once it has.
    Tracked(Tracked),
    /// A body the router handed over (a POST through an application's routes).
    Routed(Body),
}

impl http_body::Body for RequestBody {
    type Data = axum::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::pin::Pin;
        match self.get_mut() {
            Self::Whole(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Self::Tracked(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Self::Routed(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Whole(body) => body.is_end_stream(),
            Self::Tracked(body) => body.is_end_stream(),
            Self::Routed(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Self::Whole(body) => body.size_hint(),
            Self::Tracked(body) => body.size_hint(),
            Self::Routed(body) => body.size_hint(),
        }
    }
}

/// A request body that marks its connection busy once it has all arrived.
pub(super) struct Tracked {
    body: hyper::body::Incoming,
    conn: Arc<Conn>,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        let done = match &polled {
            std::task::Poll::Ready(None | Some(Err(_))) => true,
            std::task::Poll::Ready(Some(Ok(_))) => self.body.is_end_stream(),
            std::task::Poll::Pending => false,
        };
        if done {
            self.conn.enter(BUSY);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Marks its connection idle when the response has been sent (or abandoned).
struct ResponseEnd(Arc<Conn>);

impl Drop for ResponseEnd {
    fn drop(&mut self) {
        self.0.enter(IDLE);
    }
}

/// A response body that keeps its [`ResponseEnd`] until it is done.
struct Responding {
    body: Body,
    _end: ResponseEnd,
}

impl http_body::Body for Responding {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// `EMFILE` or `ENFILE`: no file descriptor left for the new connection.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    cfg!(unix) && matches!(e.raw_os_error(), Some(23 | 24))
}

/// An error of the one connection being accepted, not of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conns(max: usize) -> Conns {
        Conns {
            epoch: Instant::now(),
            limits: Limits {
                header_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_secs(60),
                body_timeout: Duration::from_secs(30),
                max_connections: max,
            },
            table: Mutex::new(HashMap::new()),
            gone: Notify::new(),
        }
    }

    fn add(conns: &Conns, id: u64, phase: u64) -> Arc<Conn> {
        let conn = Arc::new(Conn {
            state: AtomicU64::new(0),
            epoch: conns.epoch,
            close: CancellationToken::new(),
        });
        conn.enter(phase);
        conns.table.locked().insert(id, Arc::clone(&conn));
        conn
    }

    #[tokio::test(start_paused = true)]
    async fn phases_keep_their_start_time() {
        let conns = conns(4);
        let conn = add(&conns, 1, HEADERS);
        tokio::time::advance(Duration::from_millis(1500)).await;
        conn.enter(IDLE);
        let (phase, since) = conn.phase();
        assert_eq!(phase, IDLE);
        assert_eq!(since - conns.epoch, Duration::from_millis(1500));
    }

    #[tokio::test(start_paused = true)]
    async fn each_phase_times_out_after_its_own_limit_and_busy_never_does() {
        let conns = conns(16);
        let headers = add(&conns, 1, HEADERS);
        let idle = add(&conns, 2, IDLE);
        let body = add(&conns, 3, BODY);
        let busy = add(&conns, 4, BUSY);
        tokio::time::advance(Duration::from_secs(10)).await;
        conns.reap(Instant::now());
        assert!(headers.close.is_cancelled());
        assert!(!idle.close.is_cancelled() && !body.close.is_cancelled());
        tokio::time::advance(Duration::from_secs(21)).await;
        conns.reap(Instant::now());
        assert!(body.close.is_cancelled(), "30 s and the grace");
        assert!(!idle.close.is_cancelled());
        tokio::time::advance(Duration::from_secs(29)).await;
        conns.reap(Instant::now());
        assert!(idle.close.is_cancelled());
        tokio::time::advance(Duration::from_secs(3600)).await;
        conns.reap(Instant::now());
        assert!(!busy.close.is_cancelled());
        assert_eq!(conns.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn eviction_takes_the_longest_waiting_connection_that_is_not_busy() {
        let conns = conns(3);
        let old_busy = add(&conns, 1, BUSY);
        tokio::time::advance(Duration::from_secs(1)).await;
        let old_idle = add(&conns, 2, IDLE);
        tokio::time::advance(Duration::from_secs(1)).await;
        let new_headers = add(&conns, 3, HEADERS);
        assert!(conns.evict_one());
        assert!(old_idle.close.is_cancelled());
        assert!(conns.evict_one());
        assert!(new_headers.close.is_cancelled());
        assert!(!conns.evict_one(), "busy connections stay");
        assert!(!old_busy.close.is_cancelled());
        assert_eq!(conns.len(), 1);
    }
}
