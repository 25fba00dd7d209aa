//! The 2026-07-28 path: a request checked against its headers, run in a session of its own,
//! answered with JSON (its error mapped to an HTTP status) or a stream that cancels it when
//! closed.

use super::response::{error_response, reply, sse_response};
use super::sse::{CancelOnDrop, LiveSse, Out, Running};
use super::{App, BUSY_RETRY_AFTER_MS, headers};
use crate::jsonrpc;
use crate::jsonrpc::{ErrorObject, Request};
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use serde_json::Value;
use std::sync::Arc;

/// A 2026-07-28 request: checked headers, a fresh session, JSON or a cancellable stream.
pub(super) async fn stateless(
    app: &Arc<App>,
    headers: &HeaderMap,
    principal: Option<Arc<crate::principal::Principal>>,
    requestor: Option<Arc<str>>,
    request: Request,
) -> HttpResponse {
    let strict = app.config.strict_task_name;
    if let Err(e) = headers::check_stateless(&app.param_headers, headers, &request, strict) {
        tracing::debug!(error = %e, "header mismatch");
        return error_response(StatusCode::BAD_REQUEST, Some(request.id), e);
    }
    let listen = request.method == "subscriptions/listen";
    let id = request.id.clone();
    let (session, mut running) = Running::request(&app.server, principal, requestor, request);
    session.set_wire(crate::spans::Wire {
        transport: "tcp",
        protocol: Some("http"),
        session: None,
    });
    let mut guard = CancelOnDrop::new(session, id);
    match running.first().await {
        Out::Done(Some(response)) => {
            guard.disarm();
            let (status, retry_after) = stateless_status(response.outcome.as_ref().err());
            let mut http = reply(status, &response);
            if let Some(seconds) = retry_after {
                http.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            app.with_scope_challenge(http, response.outcome.as_ref().err())
        }
        Out::Done(None) => {
            guard.disarm();
            StatusCode::NO_CONTENT.into_response()
        }
        Out::Message(first) => {
            let stop = listen.then(|| app.config.shutdown.clone());
            let out = running.detach();
            let body = LiveSse::new(first, out, guard, stop, app.config.keep_alive);
            sse_response(Body::new(body))
        }
    }
}

/// The HTTP status of a 2026-07-28 response, and the `Retry-After` seconds of a refusal to
/// take the request now: 429 when the requestor is over a quota (the error's `data.limit`),
/// 503 when the server is busy.
pub(super) fn stateless_status(error: Option<&ErrorObject>) -> (StatusCode, Option<u64>) {
    let status = match error {
        None => StatusCode::OK,
        Some(e) => match e.code {
            jsonrpc::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            jsonrpc::PARSE_ERROR
            | jsonrpc::INVALID_REQUEST
            | jsonrpc::INVALID_PARAMS
            | jsonrpc::HEADER_MISMATCH
            | jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY
            | jsonrpc::UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
            jsonrpc::INSUFFICIENT_SCOPE => StatusCode::FORBIDDEN,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::time::Duration;

    #[test]
    fn busy_and_rate_limited_answers_get_their_status_and_retry_after() {
        use crate::quota::QuotaError;
        let answer = |error: Error| Some(ErrorObject::from(error));
        let limited = answer(Error::RateLimited(QuotaError::CreationRate {
            per_second: 10.0,
            retry_after: Duration::from_millis(1500),
        }));
        assert_eq!(
            stateless_status(limited.as_ref()),
            (StatusCode::TOO_MANY_REQUESTS, Some(2))
        );
        let soon = answer(Error::RateLimited(QuotaError::CreationRate {
            per_second: 10.0,
            retry_after: Duration::from_micros(10),
        }));
        assert_eq!(
            stateless_status(soon.as_ref()),
            (StatusCode::TOO_MANY_REQUESTS, Some(1))
        );
        let live = answer(Error::RateLimited(QuotaError::LiveTasks {
            limit: 3,
            retry_after: Duration::from_secs(1),
        }));
        assert_eq!(
            stateless_status(live.as_ref()),
            (StatusCode::TOO_MANY_REQUESTS, Some(1))
        );
        let busy = answer(Error::Busy("queue full".into()));
        assert_eq!(
            stateless_status(busy.as_ref()),
            (StatusCode::SERVICE_UNAVAILABLE, Some(1))
        );
        let store = answer(Error::StoreUnavailable("connection refused".into()));
        assert_eq!(
            stateless_status(store.as_ref()),
            (StatusCode::SERVICE_UNAVAILABLE, Some(1))
        );
        for off in [
            crate::creation::CreationOff::Draining,
            crate::creation::CreationOff::Paused,
        ] {
            let draining = answer(Error::CreationOff(off, "slow".into()));
            assert_eq!(
                stateless_status(draining.as_ref()),
                (StatusCode::SERVICE_UNAVAILABLE, Some(1))
            );
        }
        let other = answer(Error::Internal("x".into()));
        assert_eq!(stateless_status(other.as_ref()), (StatusCode::OK, None));
    }
}
