//! GET: the session's own stream, or a stream resumed after `Last-Event-ID`.

use super::response::{
    error_response, method_not_allowed, plain_error, session_not_found, sse_response,
};
use super::session::{Active, HttpSession};
use super::{App, LAST_EVENT_ID, SESSION_ID, headers};
use crate::error::Error;
use crate::wire::classify::is_stateful_version;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub(super) async fn get(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
) -> HttpResponse {
    let (parts, _) = request.into_parts();
    let headers = parts.headers.clone();
    app.server.recover_logged().await;
    let principal = match app
        .admit(&parts, super::admission::peer_of(&parts.extensions))
        .await
    {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let Some(session_id) = headers.get(&SESSION_ID).and_then(|v| v.to_str().ok()) else {
        let version = headers::text(&headers, &headers::PROTOCOL_VERSION)
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
    let Some(session) = app.session(session_id, principal.as_deref(), true) else {
        return session_not_found(None);
    };
    if let Err(refused) = app.negotiate_get(&headers) {
        return refused.into_response();
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
    let body = log.follow(from, session.priming, app.config.keep_alive, stop);
    let body = Body::new(WithGuard {
        body,
        _guard: (active, listening),
    });
    sse_response(body)
}

/// Counts an open GET stream as a reader of the session's own stream while it lives.
pub(super) struct Listening(Arc<HttpSession>);

impl Listening {
    pub(super) fn new(session: &Arc<HttpSession>) -> Self {
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
pub(super) struct WithGuard<B, G> {
    pub(super) body: B,
    pub(super) _guard: G,
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
