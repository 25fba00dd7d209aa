//! POST: admission, the body, the era of the message, then the stateless path, a new
//! session's `initialize` or a request on a session.

use super::config::HttpConfig;
use super::response::{
    closing, error_response, json, plain_error, reply, session_not_found, sse_response,
};
use super::serve::RequestBody;
use super::session::{Active, HttpSession, Streams};
use super::sse::{EventLog, Out, Running};
use super::stateless::stateless;
use super::{App, BUSY_RETRY_AFTER_MS, SESSION_ID, headers, sessions};
use crate::error::Error;
use crate::jsonrpc;
use crate::jsonrpc::{ErrorObject, Message, Request, Response};
use crate::principal::Principal;
use crate::wire::classify;
use crate::wire::classify::{Facts, Kind, is_stateful_version};
use crate::wire::v2025_11_25::primes_streams;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The POST handler of the router: the client's address is the one the server put in the
/// request.
pub(super) async fn post(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
) -> HttpResponse {
    let peer = super::admission::peer_of(request.extensions());
    let (parts, body) = request.into_parts();
    serve_post(&app, parts, RequestBody::Routed(body), peer).await
}

/// A POST to the MCP endpoint from the client at `peer`.
pub(super) async fn serve_post(
    app: &Arc<App>,
    parts: axum::http::request::Parts,
    body: RequestBody,
    peer: Option<SocketAddr>,
) -> HttpResponse {
    let headers = &parts.headers;
    app.server.recover_logged().await;
    let principal = match app.admit(&parts, peer).await {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let client = app.client_address(headers, peer.map(|p| p.ip()));
    if let Err(refused) = app.negotiate_post(headers) {
        return refused.into_response();
    }
    let body = match read_body(&app.config, headers, body).await {
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
    // Both read in place: the request's headers outlive its handling.
    let version = match headers::text(headers, &headers::PROTOCOL_VERSION) {
        Ok(v) => v,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, None, e),
    };
    let session_id = headers.get(&SESSION_ID).and_then(|v| v.to_str().ok());
    match message {
        Message::Request(mut request) => {
            tracing::debug!(method = %request.method, id = %request.id, "HTTP request");
            if let Err(e) = headers::carry_idempotency_key(headers, &mut request) {
                return error_response(StatusCode::BAD_REQUEST, Some(request.id), e);
            }
            headers::carry_trace_context(headers, &mut request);
            let facts = Facts::of(&request).with_version_header(version);
            // Only a request that may open tasks on a new session names its requestor.
            let requestor = |principal: &Option<Arc<Principal>>| {
                principal
                    .is_none()
                    .then(|| app.anonymous_requestor(headers, client))
            };
            if classify::classify(&facts) == Kind::Stateless {
                let requestor = requestor(&principal);
                return stateless(app, headers, principal, requestor, request).await;
            }
            let Some(session_id) = session_id else {
                if request.method == "initialize" {
                    let requestor = requestor(&principal);
                    // Boxed: its future holds a whole request's, and the handler's would be
                    // as large for every request.
                    return Box::pin(initialize(app, principal, requestor, client, request)).await;
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
            let Some(session) = app.session(session_id, principal.as_deref(), true) else {
                return session_not_found(Some(request.id));
            };
            if let Err(e) = check_session_version(&session, version) {
                return error_response(StatusCode::BAD_REQUEST, Some(request.id), e);
            }
            stateful(app, session, principal, request).await
        }
        other => {
            let Some(session_id) = session_id else {
                let stateless_client = version.is_some_and(|v| !is_stateful_version(v));
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
            let Some(session) = app.session(session_id, principal.as_deref(), false) else {
                return session_not_found(None);
            };
            if let Err(e) = check_session_version(&session, version) {
                return error_response(StatusCode::BAD_REQUEST, None, e);
            }
            // Boxed, as `initialize` is: a notification or a response is handled at once.
            Box::pin(session.session.handle(other)).await;
            StatusCode::ACCEPTED.into_response()
        }
    }
}

/// Reads a request body within the size limit and the body timeout. Refusals are JSON-RPC
/// errors like every other: 413 when too large, 408 when too slow, 400 when malformed (a
/// broken chunked encoding, say); the last two also close the connection, whose framing can
/// no longer be trusted.
pub(super) async fn read_body(
    config: &HttpConfig,
    headers: &HeaderMap,
    body: RequestBody,
) -> Result<Bytes, HttpResponse> {
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
    let mut read = std::pin::pin!(read_all(http_body_util::Limited::new(body, limit)));
    // A body that came with its head (most do) is read without arming the timer; one that
    // did not is awaited under it (the waker of this first poll is replaced by the next).
    let first = read
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
    let collected = match first {
        std::task::Poll::Ready(collected) => Ok(collected),
        std::task::Poll::Pending => tokio::time::timeout(config.body_timeout, read).await,
    };
    match collected {
        Ok(Ok(body)) => Ok(body),
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

/// The whole of a body. One that came in one data frame (most do) is that frame as it came,
/// read no further once the body says it ended; one that came in several is copied into one
/// buffer. Trailers are not part of it.
async fn read_all<B>(mut body: B) -> Result<Bytes, B::Error>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    use http_body_util::BodyExt as _;
    let mut first = Bytes::new();
    let mut joined: Option<Vec<u8>> = None;
    while !body.is_end_stream() {
        let Some(frame) = body.frame().await else {
            break;
        };
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => joined = Some([first.as_ref(), data.as_ref()].concat()),
        }
    }
    Ok(joined.map_or(first, Bytes::from))
}

/// A request on a session must name the session's version, if it names one (else 400).
pub(super) fn check_session_version(
    session: &HttpSession,
    version: Option<&str>,
) -> Result<(), Error> {
    match version {
        Some(v) if v != session.version => Err(Error::InvalidRequest(format!(
            "MCP-Protocol-Version {v:?} does not match the session's {:?}",
            session.version
        ))),
        _ => Ok(()),
    }
}

/// `initialize` without a session: opens one if the handshake succeeds. Its tasks are
/// charged to `requestor` when it has no principal; `client` is the client's address.
pub(super) async fn initialize(
    app: &Arc<App>,
    principal: Option<Arc<Principal>>,
    requestor: Option<Arc<str>>,
    client: Option<std::net::IpAddr>,
    request: Request,
) -> HttpResponse {
    let id = request.id.clone();
    let (session, outbound) = app.server.open_session(principal.clone(), requestor);
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
        priming: primes_streams(version).then_some(app.config.retry),
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
    let session_id = match app.register(Arc::clone(&http_session), principal.as_deref(), client) {
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
                sessions::Full::NoId(e) => {
                    return error_response(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        Some(id),
                        Error::from(e),
                    );
                }
            };
            let mut http = error_response(status, Some(id), Error::Busy(message.into()));
            http.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(BUSY_RETRY_AFTER_MS / 1000),
            );
            return http;
        }
    };
    http_session.session.set_wire(crate::spans::Wire {
        transport: "tcp",
        protocol: Some("http"),
        session: Some(Arc::from(crate::task::ShortId(&session_id).to_string())),
    });
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
        http.headers_mut().insert(SESSION_ID, v);
    }
    http
}

/// A request on a 2025-11-25 session: JSON, or a resumable stream that outlives the
/// connection.
pub(super) async fn stateful(
    app: &Arc<App>,
    session: Arc<HttpSession>,
    principal: Option<Arc<Principal>>,
    request: Request,
) -> HttpResponse {
    let active = Active::new(&session);
    let mut running = Running::start_as(session.session.clone(), request, principal);
    let first = match running.first().await {
        Out::Done(Some(response)) => {
            let status = scope_status(response.outcome.as_ref().err());
            let error = response.outcome.as_ref().err();
            return app.with_scope_challenge(reply(status, &response), error);
        }
        Out::Done(None) => return StatusCode::NO_CONTENT.into_response(),
        Out::Message(first) => first,
    };
    let mut out = running.detach();
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
                        pump_log.push(&r.to_json());
                    }
                    break;
                }
            }
        }
        pump_log.finish();
        pump_session.stream_finished(pump_log.id);
    });
    // A POST stream ends when its response is sent, not at shutdown: in-flight requests finish.
    let body = log.follow(1, session.priming, None, CancellationToken::new());
    sse_response(Body::new(body))
}

/// `403` for an answer refused for want of a scope, else `200`.
pub(super) fn scope_status(error: Option<&ErrorObject>) -> StatusCode {
    match error {
        Some(e) if e.code == jsonrpc::INSUFFICIENT_SCOPE => StatusCode::FORBIDDEN,
        _ => StatusCode::OK,
    }
}

impl App {
    /// Adds the `insufficient_scope` challenge naming the scopes to an answer refused for
    /// want of them (RFC 6750 §3.1).
    pub(super) fn with_scope_challenge(
        &self,
        mut http: HttpResponse,
        error: Option<&ErrorObject>,
    ) -> HttpResponse {
        let Some(error) = error else {
            return http;
        };
        if error.code != jsonrpc::INSUFFICIENT_SCOPE {
            return http;
        }
        let scopes: Vec<&str> = error
            .data
            .as_ref()
            .and_then(|d| d.get("requiredScopes"))
            .and_then(serde_json::Value::as_array)
            .map(|s| s.iter().filter_map(serde_json::Value::as_str).collect())
            .unwrap_or_default();
        if let Ok(challenge) = HeaderValue::from_str(&self.insufficient_scope(&scopes)) {
            http.headers_mut()
                .insert(header::WWW_AUTHENTICATE, challenge);
        }
        http
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A body of given frames that never says it ended before its last (as a chunked one).
    struct Frames(VecDeque<Frame<Bytes>>);

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    fn frames(parts: &[&'static str]) -> Frames {
        Frames(
            parts
                .iter()
                .map(|p| Frame::data(Bytes::from_static(p.as_bytes())))
                .collect(),
        )
    }

    #[tokio::test]
    async fn a_body_in_one_frame_is_that_frame_and_one_in_pieces_is_joined() {
        let one = frames(&["{\"jsonrpc\":\"2.0\"}"]);
        let whole = read_all(one).await.unwrap();
        assert_eq!(whole, "{\"jsonrpc\":\"2.0\"}");
        // Not copied: the very bytes that came.
        let frame = Bytes::from_static(b"same");
        let ptr = frame.as_ptr();
        let whole = read_all(Frames(VecDeque::from([Frame::data(frame)])))
            .await
            .unwrap();
        assert_eq!(whole.as_ptr(), ptr);

        let mut pieces = frames(&["{\"a\":", "", "1", "}"]);
        pieces.0.push_back(Frame::trailers(HeaderMap::new()));
        assert_eq!(read_all(pieces).await.unwrap(), "{\"a\":1}");
        assert_eq!(read_all(frames(&[])).await.unwrap(), "");
    }

    #[tokio::test]
    async fn a_body_past_its_limit_fails_with_the_limit_error() {
        let body = http_body_util::Limited::new(frames(&["12345", "67890"]), 8);
        let error = read_all(body).await.unwrap_err();
        assert!(error.is::<http_body_util::LengthLimitError>(), "{error}");
    }
}
