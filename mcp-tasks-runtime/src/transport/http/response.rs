//! The responses every path shares: JSON-RPC errors with their HTTP status, JSON bodies and
//! unbuffered event streams.

use crate::error::Error;
use crate::jsonrpc;
use crate::jsonrpc::{ErrorObject, Reply, RequestId, Response};
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response as HttpResponse;

/// A JSON-RPC error without id, for refusals before a message is read.
pub(crate) fn plain_error(status: StatusCode, message: &str) -> HttpResponse {
    let response = Response::error(None, ErrorObject::new(jsonrpc::INVALID_REQUEST, message));
    json(status, &response)
}

/// A JSON body: a response, or a reply whose result may be JSON text already.
pub(super) fn json(status: StatusCode, message: &impl serde::Serialize) -> HttpResponse {
    let mut body = Vec::with_capacity(256);
    if let Err(e) = serde_json::to_writer(&mut body, message) {
        debug_assert!(false, "a JSON-RPC message failed to serialise: {e}");
        body = b"null".to_vec();
    }
    json_body(status, body)
}

/// A JSON response carrying the router's reply to a request; a result already written as
/// text is copied into the body, not written again.
pub(super) fn reply(status: StatusCode, reply: &Reply) -> HttpResponse {
    json_body(status, reply.to_json_bytes())
}

fn json_body(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    let mut response = HttpResponse::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub(super) fn error_response(
    status: StatusCode,
    id: Option<RequestId>,
    error: Error,
) -> HttpResponse {
    json(status, &Response::error(id, error.into()))
}

/// A `text/event-stream` response that no cache or proxy buffers.
pub(super) fn sse_response(body: Body) -> HttpResponse {
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

/// Asks for the connection to be closed after this response.
pub(super) fn closing(mut response: HttpResponse) -> HttpResponse {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

pub(super) fn session_not_found(id: Option<RequestId>) -> HttpResponse {
    error_response(
        StatusCode::NOT_FOUND,
        id,
        Error::InvalidRequest(
            "session not found: it ended or never existed; initialize again".into(),
        ),
    )
}

pub(super) fn method_not_allowed() -> HttpResponse {
    let mut response = plain_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "this endpoint takes POST (GET and DELETE need a 2025-11-25 session)",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}
