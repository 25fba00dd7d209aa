//! The console's routes: the page, the JSON API, its OpenAPI document and the feed.

use super::Shared;
use super::auth::AdminAuthError;
use super::feed::{Event, Feed, stats};
use super::query::ListQuery;
use super::view::{detail, summary, time};
use crate::error::Error;
use crate::model::JsonObject;
use crate::tasks::Viewer;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};
use tokio::sync::{broadcast, mpsc};

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");
const OPENAPI: &str = include_str!("assets/openapi.json");

/// How often an idle feed sends a comment, so that proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/openapi.json", get(openapi))
        .route("/api/tasks", get(list))
        .route("/api/tasks/{id}", get(task))
        .route("/api/tasks/{id}/cancel", post(cancel))
        .route("/api/tasks/{id}/rerun", post(rerun))
        .route("/api/tasks/{id}/answer", post(answer))
        .route("/api/stats", get(stats_route))
        .route("/api/events", get(events))
        .route("/api/controls", get(controls))
        .route("/api/tools/{tool}/pause", post(pause))
        .route("/api/tools/{tool}/resume", post(resume))
        .route("/api/drain", post(drain))
        .route("/api/undrain", post(undrain))
        .with_state(shared)
}

/// A JSON answer that no cache keeps.
fn reply(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn refuse(status: StatusCode, message: &str) -> Response {
    reply(status, &json!({ "error": message }))
}

fn error_reply(e: &Error) -> Response {
    let status = match e {
        Error::InvalidParams(_) | Error::InvalidRequest(_) | Error::UnknownTool(_) => {
            StatusCode::BAD_REQUEST
        }
        Error::TaskNotFound => StatusCode::NOT_FOUND,
        Error::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        Error::Busy(_) | Error::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    refuse(status, &e.to_string())
}

fn not_found() -> Response {
    refuse(StatusCode::NOT_FOUND, "no such task")
}

/// The operator making an API request, after the guard's checks; the refusal otherwise.
async fn admit(
    shared: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Viewer, Box<Response>> {
    if let Err((status, why)) = shared.guard.check(method, headers) {
        tracing::info!(%method, why, "console request refused");
        return Err(Box::new(refuse(status, why)));
    }
    match shared.auth.authorize(headers).await {
        Ok(name) => {
            Feed::start(shared);
            Ok(Viewer::admin(name))
        }
        Err(e) => {
            let (status, challenge) = match &e {
                AdminAuthError::InsufficientScope(scope) => (
                    StatusCode::FORBIDDEN,
                    format!(
                        "Bearer realm=\"mcp-tasks admin\", error=\"insufficient_scope\", scope=\"{scope}\""
                    ),
                ),
                AdminAuthError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, String::new()),
                _ => (
                    StatusCode::UNAUTHORIZED,
                    "Bearer realm=\"mcp-tasks admin\"".to_owned(),
                ),
            };
            tracing::info!(%method, reason = %e, "console request refused");
            let mut response = refuse(status, &e.to_string());
            if let Ok(value) = HeaderValue::from_str(&challenge)
                && !challenge.is_empty()
            {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            } else if status == StatusCode::SERVICE_UNAVAILABLE {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            Err(Box::new(response))
        }
    }
}

/// The operator of an admitted API request: the guard's checks and the authorization
/// passed for the request's method and headers. A handler that takes it answers only
/// admitted requests; the refusal is the rejection.
struct Operator(Viewer);

impl axum::extract::FromRequestParts<Arc<Shared>> for Operator {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        shared: &Arc<Shared>,
    ) -> Result<Self, Response> {
        admit(shared, &parts.method, &parts.headers)
            .await
            .map(Operator)
            .map_err(|refused| *refused)
    }
}

fn name(viewer: &Viewer) -> &str {
    match viewer {
        Viewer::Admin(name) | Viewer::Owner(name) => name,
    }
}

/// The page, with its script and style inlined, and a policy that allows nothing else.
async fn page(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    static PAGE: LazyLock<(String, String)> = LazyLock::new(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let hash =
            |s: &str| base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(s));
        let html = INDEX
            .replace("/*STYLE*/", STYLE)
            .replace("/*SCRIPT*/", SCRIPT);
        let policy = format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            hash(SCRIPT),
            hash(STYLE)
        );
        (html, policy)
    });
    if let Err((status, why)) = shared.guard.check(&Method::GET, &headers) {
        return refuse(status, why);
    }
    let (html, policy) = &*PAGE;
    let mut response = html.clone().into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(policy) = HeaderValue::from_str(policy) {
        h.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn openapi(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err((status, why)) = shared.guard.check(&Method::GET, &headers) {
        return refuse(status, why);
    }
    let mut response = OPENAPI.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn list(State(shared): State<Arc<Shared>>, Operator(viewer): Operator, uri: Uri) -> Response {
    let query = match ListQuery::parse(uri.query()) {
        Ok(q) => q,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &e),
    };
    // A search for a task id finds the task however it was filed.
    if let Some(q) = &query.search
        && query.cursor.is_none()
        && let Ok(Some(rec)) = shared.tasks.get(&viewer, q).await
        && query.filter.matches(&rec)
    {
        return reply(
            StatusCode::OK,
            &json!({ "tasks": [summary(&rec)], "nextCursor": null }),
        );
    }
    let page = match shared
        .tasks
        .list(&viewer, &query.filter, query.cursor.as_deref(), query.limit)
        .await
    {
        Ok(page) => page,
        Err(e) => return error_reply(&e),
    };
    let tasks: Vec<Value> = page
        .tasks
        .iter()
        .filter(|t| {
            query.search.as_deref().is_none_or(|q| {
                [
                    Some(t.id.as_str()),
                    Some(t.tool.as_str()),
                    t.owner.as_deref(),
                    t.status_message.as_deref(),
                ]
                .into_iter()
                .flatten()
                .any(|field| field.to_lowercase().contains(q))
            })
        })
        .map(summary)
        .collect();
    reply(
        StatusCode::OK,
        &json!({ "tasks": tasks, "nextCursor": page.next_cursor }),
    )
}

async fn task(
    State(shared): State<Arc<Shared>>,
    Operator(viewer): Operator,
    Path(id): Path<String>,
) -> Response {
    match shared.tasks.get(&viewer, &id).await {
        Ok(Some(rec)) => reply(StatusCode::OK, &detail(&rec)),
        Ok(None) => not_found(),
        Err(e) => error_reply(&e),
    }
}

async fn cancel(
    State(shared): State<Arc<Shared>>,
    Operator(viewer): Operator,
    Path(id): Path<String>,
) -> Response {
    match shared.tasks.cancel(&viewer, &id).await {
        Ok(Some((rec, cancelled))) => {
            if cancelled {
                tracing::info!(task = %id, tool = %rec.tool, operator = name(&viewer), "an operator cancelled a task");
            }
            reply(
                StatusCode::OK,
                &json!({ "cancelled": cancelled, "task": summary(&rec) }),
            )
        }
        Ok(None) => not_found(),
        Err(e) => error_reply(&e),
    }
}

async fn rerun(
    State(shared): State<Arc<Shared>>,
    Operator(viewer): Operator,
    Path(id): Path<String>,
) -> Response {
    match shared.tasks.rerun(&viewer, &id).await {
        Ok(Some(rec)) => reply(
            StatusCode::CREATED,
            &json!({ "task": summary(&rec), "rerunOf": id }),
        ),
        Ok(None) => not_found(),
        Err(e) => error_reply(&e),
    }
}

/// The `_meta` key of an answer an operator gave, naming who and when.
pub(super) const ANSWERED_BY: &str = "io.github.mcp-tasks/answeredBy";

async fn answer(
    State(shared): State<Arc<Shared>>,
    Operator(viewer): Operator,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let responses = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(mut o)) => match o.remove("responses") {
            Some(Value::Object(r)) => r,
            _ => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "the body takes `responses`: an object of answers by question key",
                );
            }
        },
        _ => return refuse(StatusCode::BAD_REQUEST, "the body must be a JSON object"),
    };
    // Each answer keeps who gave it and when, beside what the tool reads.
    let at = time(SystemTime::now());
    let operator = name(&viewer).to_owned();
    let responses: JsonObject = responses
        .into_iter()
        .map(|(key, mut answer)| {
            if let Value::Object(a) = &mut answer {
                let meta = a.entry("_meta").or_insert_with(|| json!({}));
                if let Value::Object(meta) = meta {
                    meta.insert(
                        ANSWERED_BY.into(),
                        json!({ "operator": operator, "at": at }),
                    );
                }
            }
            (key, answer)
        })
        .collect();
    match shared.tasks.answer(&viewer, &id, &responses).await {
        Ok(Some(rec)) => {
            tracing::info!(task = %id, tool = %rec.tool, operator = %operator, keys = ?responses.keys().collect::<Vec<_>>(), "an operator answered on the user's behalf");
            reply(
                StatusCode::OK,
                &json!({ "task": summary(&rec), "answeredBy": operator, "at": at }),
            )
        }
        Ok(None) => not_found(),
        Err(e) => error_reply(&e),
    }
}

async fn stats_route(State(shared): State<Arc<Shared>>, Operator(viewer): Operator) -> Response {
    match stats(&shared, &viewer).await {
        Ok(stats) => reply(StatusCode::OK, &stats),
        Err(e) => error_reply(&e),
    }
}

fn no_controls() -> Response {
    refuse(
        StatusCode::NOT_IMPLEMENTED,
        "this server gave the console no controls: pausing tools and draining are not available here",
    )
}

async fn controls(State(shared): State<Arc<Shared>>, _: Operator) -> Response {
    match &shared.controls {
        Some(c) => reply(
            StatusCode::OK,
            &json!({ "paused": c.paused_tools(), "draining": c.draining() }),
        ),
        None => no_controls(),
    }
}

/// Runs one control for an admitted operator, and answers the controls' state.
fn control(
    shared: &Shared,
    Operator(viewer): Operator,
    what: &str,
    act: impl FnOnce(&dyn super::Controls),
) -> Response {
    let Some(c) = &shared.controls else {
        return no_controls();
    };
    act(c.as_ref());
    tracing::info!(operator = name(&viewer), what, "an operator used a control");
    reply(
        StatusCode::OK,
        &json!({ "paused": c.paused_tools(), "draining": c.draining() }),
    )
}

async fn pause(
    State(shared): State<Arc<Shared>>,
    operator: Operator,
    Path(tool): Path<String>,
) -> Response {
    control(&shared, operator, &format!("pause {tool}"), |c| {
        c.pause_tool(&tool)
    })
}

async fn resume(
    State(shared): State<Arc<Shared>>,
    operator: Operator,
    Path(tool): Path<String>,
) -> Response {
    control(&shared, operator, &format!("resume {tool}"), |c| {
        c.resume_tool(&tool)
    })
}

async fn drain(State(shared): State<Arc<Shared>>, operator: Operator) -> Response {
    control(&shared, operator, "drain", |c| c.drain())
}

async fn undrain(State(shared): State<Arc<Shared>>, operator: Operator) -> Response {
    control(&shared, operator, "undrain", |c| c.undrain())
}

/// The feed as server-sent events: `stats` now and every few seconds, a `task` for each
/// new version of a task, `resync` when this reader fell behind and missed some.
async fn events(State(shared): State<Arc<Shared>>, Operator(viewer): Operator) -> Response {
    let mut rx = shared.feed.tx.subscribe();
    shared.feed.wake.notify_one();
    let first = stats(&shared, &viewer).await.ok();
    let (tx, body_rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let frame =
            |event: &str, data: &str| Bytes::from(format!("event: {event}\ndata: {data}\n\n"));
        if tx
            .send(Bytes::from_static(b"retry: 2000\n\n"))
            .await
            .is_err()
        {
            return;
        }
        if let Some(first) = first
            && tx.send(frame("stats", &first.to_string())).await.is_err()
        {
            return;
        }
        loop {
            let event: Result<Event, _> = tokio::select! {
                e = rx.recv() => e,
                () = tokio::time::sleep(KEEP_ALIVE) => {
                    if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                        return;
                    }
                    continue;
                }
                () = tx.closed() => return,
            };
            let bytes = match event {
                Ok(e) => frame(e.0, &e.1),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    frame("resync", &json!({ "missed": n }).to_string())
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if tx.send(bytes).await.is_err() {
                return;
            }
        }
    });
    let mut response = Body::new(SseBody(body_rx)).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// A body of the frames a feed task sends; dropping it (the client left) ends the task.
struct SseBody(mpsc::Receiver<Bytes>);

impl http_body::Body for SseBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|frame| frame.map(|b| Ok(http_body::Frame::data(b))))
    }
}
