//! The operator's console behind OAuth: `AdminScope` admits the access tokens of a real
//! OpenID provider (`oidc-provider`) that carry the console's scope, names the operator by
//! the token's subject, and refuses the rest without listing or changing anything.

#![cfg(all(feature = "oauth", feature = "admin"))]

mod provider;

use mcp_tasks_runtime::admin::AdminScope;
use mcp_tasks_runtime::axum::Router;
use mcp_tasks_runtime::model::{CallToolResult, Content, TaskSupport};
use mcp_tasks_runtime::transport::http::HttpConfig;
use mcp_tasks_runtime::{Server, Tool};
use provider::{JsonValue, Provider, RESOURCE};
use serde_json::{Value, json};

/// The scope the console asks for here (the provider's `reader` client cannot get it).
const ADMIN_SCOPE: &str = "echo:write";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_admits_tokens_with_its_scope_and_refuses_the_rest() {
    let provider = Provider::fresh("admin-scope");
    let server = Server::builder()
        .tool(
            Tool::new("wait", |cx, _| async move {
                cx.cancellation().cancelled().await;
                Ok(CallToolResult::success(vec![Content::text("stopped")]))
            })
            .task_support(TaskSupport::Required),
        )
        .build()
        .unwrap();
    let console = server.admin_router(AdminScope::new(provider.resource_server(), ADMIN_SCOPE));
    let http = server
        .serve_http(
            HttpConfig::new().serve_beside(Router::new().nest("/admin", console.into_router())),
        )
        .await
        .unwrap();
    // One task of someone's, for the console to list and cancel.
    let (session, _out) = server.session_for(Some("ada".into()));
    let created = session
        .handle_text(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "wait", "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities":
                        {"extensions": {"io.modelcontextprotocol/tasks": {}}}}}})
            .to_string(),
        )
        .await
        .unwrap();
    let created: Value = serde_json::from_str(&created).unwrap();
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();

    let http_client = reqwest::Client::new();
    let list = |token: Option<String>| {
        let mut request = http_client.get(http.url("/admin/api/tasks"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let cancel = |token: String| {
        http_client
            .post(http.url(&format!("/admin/api/tasks/{id}/cancel")))
            .bearer_auth(token)
            .header("x-mcp-tasks-admin", "1")
            .header("content-type", "application/json")
            .body("{}")
            .send()
    };

    // No token, or one no issuer signed: 401, nothing listed.
    let none = list(None).await.unwrap();
    assert_eq!(none.status(), 401);
    let garbage = list(Some("not-a-token".into())).await.unwrap();
    assert_eq!(garbage.status(), 401);
    assert!(
        !garbage.json_value().await.to_string().contains(&id),
        "a refusal lists nothing"
    );

    // A valid token without the scope: 403 naming it, and the task is not cancelled.
    let reader = provider.token("reader", "tasks:read", RESOURCE).await;
    let refused = list(Some(reader.clone())).await.unwrap();
    assert_eq!(refused.status(), 403);
    let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains("insufficient_scope") && challenge.contains(ADMIN_SCOPE),
        "{challenge}"
    );
    assert!(!challenge.contains(&reader), "the token is never echoed");
    assert_eq!(cancel(reader).await.unwrap().status(), 403);

    // A token with it: every owner's tasks are listed, and the cancel is the operator's.
    let admin = provider.token("machine", ADMIN_SCOPE, RESOURCE).await;
    let listed = list(Some(admin.clone())).await.unwrap();
    assert_eq!(listed.status(), 200);
    let listed = listed.json_value().await;
    assert!(listed.to_string().contains(&id), "{listed}");
    let cancelled = cancel(admin).await.unwrap();
    assert_eq!(cancelled.status(), 200);
    let record = server
        .tasks()
        .get(&mcp_tasks_runtime::Viewer::admin("test"), &id)
        .await;
    let record = record.unwrap().expect("the task");
    assert_eq!(record.status.as_str(), "cancelled");
    http.shutdown().await.unwrap();
}
