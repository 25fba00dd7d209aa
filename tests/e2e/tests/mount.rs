//! The MCP endpoint mounted in an axum application of its own: the app's authentication layer
//! names the principal with a request extension, tasks belong to it, and the tasks an earlier
//! run left unfinished are settled before the first answer.

mod support;

use mcp_tasks::axum::extract::Request;
use mcp_tasks::axum::http::StatusCode;
use mcp_tasks::axum::middleware::{self, Next};
use mcp_tasks::axum::response::{IntoResponse, Response};
use mcp_tasks::axum::{Router, routing::get};
use mcp_tasks::prelude::*;
use mcp_tasks::store::{MemoryTaskStore, TaskStore};
use mcp_tasks::task::{Lease, TaskRecord};
use mcp_tasks::transport::http::{AuthError, HttpConfig, Principal};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};
use support::http::{answer, stateless, tasks_meta};

/// The application's own authentication: `X-User` names the user, anything else is a 401.
async fn login(mut request: Request, next: Next) -> Response {
    let user = request
        .headers()
        .get("x-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(user) = user else {
        return (StatusCode::UNAUTHORIZED, "log in first").into_response();
    };
    request.extensions_mut().insert(Principal::new(user));
    next.run(request).await
}

/// A task that a process which died left `working`, its lease run out.
fn left_over(id: &str, owner: &str) -> TaskRecord {
    let now = SystemTime::now();
    let mut record = TaskRecord::new(id, "whoami", Default::default(), now);
    // How the engine stores a principal's ownership.
    record.owner = Some(format!("principal:{owner}"));
    record.ttl = Some(Duration::from_secs(3600));
    record.lease = Some(Lease {
        worker: "a process that died".into(),
        until: now,
    });
    record.epoch = 1;
    record.version = 1;
    record
}

/// The app: a route of its own and the MCP endpoint at `/mcp`, all behind `login`. The MCP
/// authenticator refuses everything, so every request that reaches a tool was let in by the
/// app's principal.
async fn serve_app(server: &Server) -> String {
    let config = HttpConfig::new()
        .path("/mcp")
        .authenticator(|_| Err(AuthError::Forbidden("only through the app's login".into())));
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .merge(server.http_router(config))
        .layer(middleware::from_fn(login));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        mcp_tasks::axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    format!("http://{address}/mcp")
}

/// A 2026-07-28 request of a client with the tasks extension, made as `user`.
async fn as_user(url: &str, user: &str, id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = tasks_meta();
    let response = stateless(url, id, method, params, &[("x-user", user)])
        .send()
        .await
        .unwrap();
    answer(response).await
}

#[tokio::test]
async fn the_endpoint_mounted_in_an_app_takes_the_apps_principal() {
    let store = MemoryTaskStore::new();
    store.create(left_over("left-over", "alice")).await.unwrap();
    let whoami = Tool::new("whoami", |cx: TaskContext, _| async move {
        let me = cx
            .principal()
            .map_or_else(|| "nobody".to_owned(), |p| p.subject.clone());
        Ok(CallToolResult::success(vec![Content::text(me)]))
    })
    .task_support(TaskSupport::Optional);
    let server = Server::builder().store(store).tool(whoami).build().unwrap();
    let url = serve_app(&server).await;

    // Settled before the first answer, without a call to `recover`.
    let left = as_user(
        &url,
        "alice",
        1,
        "tasks/get",
        json!({"taskId": "left-over"}),
    )
    .await;
    assert_eq!(left["result"]["status"], "failed", "{left}");

    // The app's own route and its login work beside the endpoint.
    let health = reqwest::Client::new()
        .get(url.replace("/mcp", "/health"))
        .header("x-user", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
    let anonymous = support::http::post(&reqwest::Client::new(), &url, &json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    // A task created through the app belongs to the app's principal.
    let params = json!({"name": "whoami", "arguments": {}});
    let created = as_user(&url, "alice", 2, "tools/call", params).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let mut task = Value::Null;
    for n in 3..500 {
        task = as_user(&url, "alice", n, "tasks/get", json!({"taskId": id})).await;
        if task["result"]["status"] != "working" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(task["result"]["status"], "completed", "{task}");
    assert_eq!(task["result"]["result"]["content"][0]["text"], "alice");

    // Nobody else reaches it, nor the left-over task.
    for id in [id.as_str(), "left-over"] {
        let other = as_user(&url, "bob", 600, "tasks/get", json!({"taskId": id})).await;
        assert!(other["error"].is_object(), "bob read {id}: {other}");
    }
}
