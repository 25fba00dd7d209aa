//! Scopes on tools, over HTTP, with tokens from a real OpenID provider (`oidc-provider`):
//! the resource server as the transport's authenticator, a tool's scopes checked at its call
//! and again at every later request about its task in both eras, the principal reaching the
//! tool from the task record, and other principals refused on every store.

#![cfg(feature = "oauth")]

mod provider;

use mcp_tasks_runtime::model::{CallToolResult, Content, TaskSupport};
use mcp_tasks_runtime::store::ClaimStore;
use mcp_tasks_runtime::transport::http::{HttpConfig, HttpHandle};
use mcp_tasks_runtime::{Server, TaskContext, Tool};
use provider::{Caller, JsonValue, Provider, RESOURCE, WITHIN, challenge, stateless, task_id};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// The scopes the provider's `machine` client may ask for.
const ALL: &str = "echo:write tasks:read";

/// What the tool saw of its caller.
fn caller_of(cx: &TaskContext) -> String {
    match cx.principal() {
        Some(p) => format!(
            "{} {:?} {}",
            p.subject,
            p.scopes.iter().collect::<Vec<_>>(),
            p.client_id.as_deref().unwrap_or("-")
        ),
        None => "anonymous".to_owned(),
    }
}

fn text_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

/// A server with `scoped_echo` (needs `echo:write`), `scoped_wait` (the same, and waits for
/// a permit of `gate`), and the public `whoami`.
fn server(store: impl ClaimStore, gate: Arc<Semaphore>, hide: bool) -> Server {
    let echo = |_cx: TaskContext, args: mcp_tasks_runtime::model::JsonObject| async move {
        let text = args["text"].as_str().unwrap_or_default().to_owned();
        Ok(CallToolResult::success(vec![Content::text(text)]))
    };
    let wait = move |cx: TaskContext, _args| {
        let gate = Arc::clone(&gate);
        async move {
            gate.acquire().await.unwrap().forget();
            Ok(CallToolResult::success(vec![Content::text(caller_of(&cx))]))
        }
    };
    let whoami = |cx: TaskContext, _args| async move {
        Ok(CallToolResult::success(vec![Content::text(caller_of(&cx))]))
    };
    Server::builder()
        .store(store)
        .tool(
            Tool::new("scoped_echo", echo)
                .input_schema(text_schema())
                .task_support(TaskSupport::Optional)
                .scopes(["echo:write"]),
        )
        .tool(
            Tool::new("scoped_wait", wait)
                .task_support(TaskSupport::Optional)
                .scopes(["echo:write"]),
        )
        .tool(Tool::new("whoami", whoami).task_support(TaskSupport::Optional))
        .hide_tools_out_of_scope(hide)
        .build()
        .unwrap()
}

/// Serves `server` with the provider's resource server as its authenticator.
async fn serve(server: &Server, provider: &Provider) -> (HttpHandle, String) {
    let config = HttpConfig::new().authenticate(provider.resource_server());
    let handle = server.serve_http(config).await.unwrap();
    let url = handle.url("/mcp");
    (handle, url)
}

/// The text of a result's first content, or of a 2026-07-28 task's result.
fn text(body: &Value) -> &str {
    body["result"]["content"][0]["text"]
        .as_str()
        .or_else(|| body["result"]["result"]["content"][0]["text"].as_str())
        .unwrap_or_else(|| panic!("no text: {body}"))
}

/// Asserts a refusal for want of `echo:write`: `403`, the challenge naming the scope and the
/// metadata, and the JSON-RPC error.
fn assert_insufficient(
    what: &str,
    (status, headers, body): &(u16, reqwest::header::HeaderMap, Value),
) {
    assert_eq!(*status, 403, "{what}: {body}");
    let challenge = challenge(headers);
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"echo:write\"")
            && challenge.contains(
                "resource_metadata=\"http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp\""
            ),
        "{what}: {challenge}"
    );
    assert_eq!(body["error"]["code"], -32003, "{what}: {body}");
    assert_eq!(
        body["error"]["data"]["requiredScopes"],
        json!(["echo:write"]),
        "{what}: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_tool_needs_its_scope_over_http_in_both_eras() {
    let provider = Provider::fresh("scoped");
    let server = server(
        mcp_tasks_runtime::store::MemoryTaskStore::new(),
        Arc::new(Semaphore::new(0)),
        false,
    );
    let (handle, url) = serve(&server, &provider).await;
    let full = provider.token("machine", ALL, RESOURCE).await;
    let reader = provider.token("reader", "tasks:read", RESOURCE).await;

    // The metadata is served beside the endpoint, without a token.
    let base = url.trim_end_matches("/mcp");
    let metadata = reqwest::get(format!("{base}/.well-known/oauth-protected-resource/mcp"))
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(metadata["resource"], RESOURCE);
    assert_eq!(metadata["authorization_servers"], json!([provider.issuer]));

    // No token: 401 with the challenge, in either era.
    let refused = stateless(&url, None, "tools/list", None, json!({})).await;
    assert_eq!(refused.0, 401, "{}", refused.2);
    assert!(challenge(&refused.1).starts_with("Bearer resource_metadata="));
    assert_eq!(Caller::new(&url, None).initialize().await, 401);

    // 2025-11-25: without the scope the call is refused; with it, it runs.
    let mut weak = Caller::new(&url, Some(reader.clone()));
    assert_eq!(weak.initialize().await, 200);
    let call = json!({"name": "scoped_echo", "arguments": {"text": "hi"}});
    assert_insufficient("2025 call", &weak.send("tools/call", call.clone()).await);
    let as_task = json!({"name": "scoped_echo", "arguments": {"text": "hi"}, "task": {}});
    assert_insufficient("2025 task", &weak.send("tools/call", as_task.clone()).await);
    // A public tool is public, and sees who calls.
    let r = weak.call("tools/call", json!({"name": "whoami"})).await;
    assert_eq!(text(&r), "reader [\"tasks:read\"] reader");
    let mut strong = Caller::new(&url, Some(full.clone()));
    assert_eq!(strong.initialize().await, 200);
    let r = strong.call("tools/call", call.clone()).await;
    assert_eq!(text(&r), "hi", "{r}");

    // 2026-07-28: the same.
    assert_insufficient(
        "2026 call",
        &stateless(
            &url,
            Some(&reader),
            "tools/call",
            Some("scoped_echo"),
            call.clone(),
        )
        .await,
    );
    let (status, _, body) = stateless(
        &url,
        Some(&full),
        "tools/call",
        Some("scoped_echo"),
        call.clone(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let r = match task_id(&body) {
        // Run as a task (the request declares the tasks extension): read it back.
        Some(id) => settled(&url, &full, &id).await,
        None => body,
    };
    assert_eq!(text(&r), "hi", "{r}");

    // Every tool is listed unless the server hides those out of scope.
    let (_, _, list) = stateless(&url, Some(&reader), "tools/list", None, json!({})).await;
    assert_eq!(tool_names(&list), ["scoped_echo", "scoped_wait", "whoami"]);
    handle.shutdown().await.unwrap();

    let hiding = self::server(
        mcp_tasks_runtime::store::MemoryTaskStore::new(),
        Arc::new(Semaphore::new(0)),
        true,
    );
    let (handle, url) = serve(&hiding, &provider).await;
    let (_, _, list) = stateless(&url, Some(&reader), "tools/list", None, json!({})).await;
    assert_eq!(tool_names(&list), ["whoami"]);
    assert_eq!(list["result"]["cacheScope"], "private");
    let (_, _, list) = stateless(&url, Some(&full), "tools/list", None, json!({})).await;
    assert_eq!(tool_names(&list), ["scoped_echo", "scoped_wait", "whoami"]);
    let mut weak = Caller::new(&url, Some(reader));
    assert_eq!(weak.initialize().await, 200);
    let list = weak.call("tools/list", json!({})).await;
    assert_eq!(tool_names(&list), ["whoami"]);
    handle.shutdown().await.unwrap();
}

fn tool_names(list: &Value) -> Vec<&str> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

/// Reads a 2026-07-28 task with `token` until it is no longer `working`.
async fn settled(url: &str, token: &str, id: &str) -> Value {
    tokio::time::timeout(WITHIN, async {
        loop {
            let (status, _, body) = stateless(
                url,
                Some(token),
                "tasks/get",
                Some(id),
                json!({"taskId": id}),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            if body["result"]["status"] != "working" {
                return body;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the task ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_lost_the_scope_can_no_longer_read_answer_or_cancel_the_task() {
    let provider = Provider::fresh("lost");
    let gate = Arc::new(Semaphore::new(0));
    let server = server(
        mcp_tasks_runtime::store::MemoryTaskStore::new(),
        Arc::clone(&gate),
        false,
    );
    let (handle, url) = serve(&server, &provider).await;
    // Two tokens of one subject: the second without `echo:write`.
    let full = provider.token("machine", ALL, RESOURCE).await;
    let lost = provider.token("machine", "tasks:read", RESOURCE).await;

    // 2025-11-25: the task is made with the full token, then asked about with the other,
    // on the same session and on another.
    let mut strong = Caller::new(&url, Some(full.clone()));
    assert_eq!(strong.initialize().await, 200);
    let r = strong
        .call("tools/call", json!({"name": "scoped_wait", "task": {}}))
        .await;
    let id = task_id(&r).unwrap_or_else(|| panic!("a task: {r}"));
    let mut same_session = Caller::new(&url, Some(lost.clone()));
    same_session.session = strong.session.clone();
    let mut other_session = Caller::new(&url, Some(lost.clone()));
    assert_eq!(other_session.initialize().await, 200);
    for caller in [&same_session, &other_session] {
        for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let answer = caller.send(method, json!({"taskId": id})).await;
            assert_insufficient(&format!("2025 {method}"), &answer);
        }
    }
    // `tasks/list` leaves the task out for the token that lost the scope, not for the other.
    let listed = |body: &Value| {
        body["result"]["tasks"]
            .as_array()
            .unwrap_or_else(|| panic!("a page: {body}"))
            .iter()
            .filter_map(|t| t["taskId"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let page = other_session.call("tasks/list", json!({})).await;
    assert!(!listed(&page).contains(&id), "{page}");
    let page = strong.call("tasks/list", json!({})).await;
    assert!(listed(&page).contains(&id), "{page}");
    // The task was not cancelled: the full token reads its result once it ends, made by
    // the principal its record kept.
    gate.add_permits(1);
    let r = strong.call("tasks/result", json!({"taskId": id})).await;
    assert_eq!(
        text(&r),
        "machine [\"echo:write\", \"tasks:read\"] machine",
        "{r}"
    );

    // 2026-07-28: the same with tasks/get, tasks/update and tasks/cancel.
    let (status, _, body) = stateless(
        &url,
        Some(&full),
        "tools/call",
        Some("scoped_wait"),
        json!({"name": "scoped_wait", "arguments": {}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let id = task_id(&body).unwrap_or_else(|| panic!("a task: {body}"));
    for (method, params) in [
        ("tasks/get", json!({"taskId": id})),
        ("tasks/update", json!({"taskId": id, "inputResponses": {}})),
        ("tasks/cancel", json!({"taskId": id})),
    ] {
        let answer = stateless(&url, Some(&lost), method, Some(&id), params).await;
        assert_insufficient(&format!("2026 {method}"), &answer);
    }
    gate.add_permits(1);
    let done = settled(&url, &full, &id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    handle.shutdown().await.unwrap();
}

/// Another subject's attempts at a task, on a server with `store`: how many succeeded.
async fn cross_principal_successes(store: impl ClaimStore, provider: &Provider) -> usize {
    let gate = Arc::new(Semaphore::new(0));
    let server = server(store, Arc::clone(&gate), false);
    let (handle, url) = serve(&server, provider).await;
    let owner = provider.token("machine", ALL, RESOURCE).await;
    // Another subject, holding every scope the tool needs.
    let stranger = provider.token("rsa", ALL, RESOURCE).await;
    let mut successes = 0;

    let mut mine = Caller::new(&url, Some(owner.clone()));
    assert_eq!(mine.initialize().await, 200);
    let r = mine
        .call("tools/call", json!({"name": "scoped_wait", "task": {}}))
        .await;
    let stateful_id = task_id(&r).unwrap_or_else(|| panic!("a task: {r}"));
    let (_, _, body) = stateless(
        &url,
        Some(&owner),
        "tools/call",
        Some("scoped_wait"),
        json!({"name": "scoped_wait", "arguments": {}}),
    )
    .await;
    let stateless_id = task_id(&body).unwrap_or_else(|| panic!("a task: {body}"));

    let mut theirs = Caller::new(&url, Some(stranger.clone()));
    assert_eq!(theirs.initialize().await, 200);
    for id in [&stateful_id, &stateless_id] {
        for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let (status, _, body) = theirs.send(method, json!({"taskId": id})).await;
            if status == 200 && body.get("error").is_none() {
                successes += 1;
            }
        }
        for (method, params) in [
            ("tasks/get", json!({"taskId": id})),
            ("tasks/update", json!({"taskId": id, "inputResponses": {}})),
            ("tasks/cancel", json!({"taskId": id})),
        ] {
            let (status, _, body) =
                stateless(&url, Some(&stranger), method, Some(id), params).await;
            if status == 200 && body.get("error").is_none() {
                successes += 1;
            }
        }
    }
    // The owner's tasks are untouched: they finish, made by their owner.
    gate.add_permits(2);
    let r = mine
        .call("tasks/result", json!({"taskId": stateful_id}))
        .await;
    assert_eq!(
        text(&r),
        "machine [\"echo:write\", \"tasks:read\"] machine",
        "{r}"
    );
    let done = settled(&url, &owner, &stateless_id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    handle.shutdown().await.unwrap();
    successes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_subject_gets_nothing_of_a_task_on_the_memory_store() {
    let provider = Provider::fresh("cross-memory");
    let store = mcp_tasks_runtime::store::MemoryTaskStore::new();
    assert_eq!(cross_principal_successes(store, &provider).await, 0);
}

#[cfg(all(
    feature = "sqlite",
    feature = "postgres",
    feature = "redis",
    feature = "testing"
))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_subject_gets_nothing_of_a_task_on_the_durable_stores() {
    use mcp_tasks_runtime::store::{
        PostgresTaskStore, RedisTaskStore, SqliteTaskStore, TestDatabase, TestRedis,
    };
    let provider = Provider::fresh("cross-durable");
    let path =
        std::env::temp_dir().join(format!("mcp-tasks-oauth-cross-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let sqlite = SqliteTaskStore::open(&path).unwrap();
    assert_eq!(
        cross_principal_successes(sqlite, &provider).await,
        0,
        "sqlite"
    );
    let _ = std::fs::remove_file(&path);
    if let Some(db) = TestDatabase::create("oauth_cross") {
        let postgres = PostgresTaskStore::connect(&db.url()).await.unwrap();
        assert_eq!(
            cross_principal_successes(postgres, &provider).await,
            0,
            "postgres"
        );
    }
    if let Some(redis) = TestRedis::create("oauth_cross") {
        let store = RedisTaskStore::connect(&redis.store_url()).await.unwrap();
        assert_eq!(
            cross_principal_successes(store, &provider).await,
            0,
            "redis"
        );
    }
}

/// A 2026-07-28 request's `_meta`, declaring the tasks extension.
fn task_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {
               "extensions": {"io.modelcontextprotocol/tasks": {}}}})
}

#[tokio::test]
async fn a_subscription_follows_only_the_tasks_whose_scopes_the_caller_holds() {
    use mcp_tasks_runtime::Principal;
    let gate = Arc::new(Semaphore::new(0));
    let server = server(
        mcp_tasks_runtime::store::MemoryTaskStore::new(),
        Arc::clone(&gate),
        false,
    );
    let full = Principal::new("ann").with_scopes(["echo:write", "tasks:read"]);
    let (session, _out) = server.session_as(Some(full.clone()));
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "scoped_wait", "arguments": {}, "_meta": task_meta()}});
    let created: Value =
        serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap();
    let id = task_id(&created).unwrap_or_else(|| panic!("a task: {created}"));
    let listen = json!({"jsonrpc": "2.0", "id": "sub", "method": "subscriptions/listen", "params": {
        "notifications": {"taskIds": [id]}, "_meta": task_meta()}});
    for (principal, honoured) in [
        (full, json!([id])),
        (Principal::new("ann").with_scopes(["tasks:read"]), json!([])),
    ] {
        let (session, mut out) = server.session_as(Some(principal));
        let request = listen.to_string();
        let stream = tokio::spawn(async move { session.handle_text(&request).await });
        let ack: Value = tokio::time::timeout(WITHIN, out.recv())
            .await
            .expect("an acknowledgement")
            .map(|m| serde_json::from_str(&m).unwrap())
            .unwrap();
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["notifications"]["taskIds"], honoured, "{ack}");
        stream.abort();
    }
    gate.add_permits(1);
}
