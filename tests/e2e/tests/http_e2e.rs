//! The Streamable HTTP transport end to end: a real server on an ephemeral loopback port,
//! driven by a real HTTP client through both protocol eras.

mod support;

use mcp_tasks::prelude::*;
use mcp_tasks::transport::http::{AuthError, HttpConfig, HttpHandle};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::http::{
    Events, TASKS_EXT, V2025, V2026, init_params, json_of, meta, post, serve, session_get,
    session_post, stateless,
};
use tokio::sync::Notify;

// ---- Fixture tools ----

/// Greets someone.
#[task_tool(mode = "forbidden")]
async fn greet(name: String) -> String {
    format!("Hello, {name}!")
}

/// Reports progress three times, then answers.
#[task_tool(mode = "forbidden")]
async fn count_to_three(progress: Progress) -> &'static str {
    for i in 1..=3 {
        progress.report(f64::from(i), Some(3.0));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    "counted"
}

/// Asks the user for a name.
#[task_tool(mode = "forbidden")]
async fn ask_name(client: Client) -> Result<String, ToolError> {
    let answer = client
        .elicit(
            "Who are you?",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        )
        .await?;
    let name = answer
        .content
        .and_then(|c| c.get("name").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    Ok(format!("Hi {name}"))
}

/// Asks for a confirmation, as a task, after a moment.
#[task_tool(mode = "required")]
async fn confirm_later(client: Client) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = client
        .elicit(
            "Sure?",
            json!({"type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}),
        )
        .await?;
    Ok(format!("{:?}", answer.action))
}

/// How many `wait_for_cancel` calls ended (they only end early when cancelled).
static ENDED: AtomicUsize = AtomicUsize::new(0);

/// Counts the end of a call however it ends: returning, or its future being dropped.
struct CountEnd;

impl Drop for CountEnd {
    fn drop(&mut self) {
        ENDED.fetch_add(1, Ordering::SeqCst);
    }
}

/// Reports progress once, then waits (at most 60 s) to be cancelled.
#[task_tool(mode = "forbidden")]
async fn wait_for_cancel(
    progress: Progress,
    cancel: CancellationToken,
) -> Result<String, ToolError> {
    let _end = CountEnd;
    progress.report(1.0, None);
    tokio::select! {
        () = cancel.cancelled() => Err(ToolError::cancelled()),
        () = tokio::time::sleep(Duration::from_secs(60)) => Ok("not cancelled".into()),
    }
}

/// Released by the test.
static RELEASE: Notify = Notify::const_new();

/// A task that reports progress, then waits for the test to release it.
#[task_tool(mode = "optional", poll_interval = "50ms")]
async fn gated_job(progress: Progress) -> &'static str {
    progress.report(1.0, Some(2.0));
    RELEASE.notified().await;
    progress.report(2.0, Some(2.0));
    "released"
}

/// A task that runs until cancelled (at most 60 s).
#[task_tool(mode = "required", poll_interval = "50ms")]
async fn long_job(cancel: CancellationToken) -> Result<String, ToolError> {
    tokio::select! {
        () = cancel.cancelled() => Err(ToolError::cancelled()),
        () = tokio::time::sleep(Duration::from_secs(60)) => Ok("done".into()),
    }
}

// ---- Helpers ----

async fn start(config: HttpConfig) -> (HttpHandle, String) {
    serve(Server::builder().name("http-e2e").registry_tools(), config).await
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// A 2025-11-25 session: `initialize`, then `notifications/initialized`.
async fn open_session(url: &str, capabilities: Value) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": init_params("e2e", capabilities)});
    let response = post(&client(), url, &initialize).send().await.unwrap();
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (status, body) = json_of(response).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["protocolVersion"], V2025);
    let ack = stateful(
        url,
        &session,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(ack.status(), 202);
    session
}

fn stateful(url: &str, session: &str, message: Value) -> reqwest::RequestBuilder {
    stateful_as(url, session, V2025, message)
}

fn stateful_as(url: &str, session: &str, version: &str, message: Value) -> reqwest::RequestBuilder {
    session_post(&client(), url, session, version, &message)
}

fn get_stream(url: &str, session: &str, last_event_id: Option<&str>) -> reqwest::RequestBuilder {
    let request = session_get(&client(), url, session);
    match last_event_id {
        Some(id) => request.header("last-event-id", id),
        None => request,
    }
}

// ---- 2026-07-28 ----

#[tokio::test]
async fn stateless_requests_answer_json_or_stream_notifications_before_the_response() {
    let (handle, url) = start(HttpConfig::new()).await;

    let (status, body) = json_of(
        stateless(&url, 1, "server/discover", json!({}), &[])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["supportedVersions"], json!([V2026]));

    let call = json!({"name": "greet", "arguments": {"name": "http"}});
    let (status, body) = json_of(
        stateless(&url, 2, "tools/call", call, &[])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["content"][0]["text"], "Hello, http!");

    let mut m = meta(json!({}));
    m["progressToken"] = json!("p");
    let call = json!({"name": "count_to_three", "arguments": {}, "_meta": m});
    let mut events = Events::new(
        stateless(&url, 3, "tools/call", call, &[])
            .send()
            .await
            .unwrap(),
    );
    let seen = events.until(|v| v["id"] == 3).await;
    let progress: Vec<f64> = seen
        .iter()
        .filter(|e| e.json()["method"] == "notifications/progress")
        .map(|e| e.json()["params"]["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(progress, [1.0, 2.0, 3.0]);
    assert_eq!(
        seen.last().unwrap().json()["result"]["content"][0]["text"],
        "counted"
    );
    assert!(
        events.next().await.is_none(),
        "the stream ends with the response"
    );

    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_endpoint_s_post_and_the_routes_beside_it_are_each_answered_by_their_own() {
    use mcp_tasks::axum::{Router, routing::post as post_route};
    let beside = Router::new()
        .route("/mcp", post_route(|| async { "not the endpoint" }))
        .route("/custom/more", post_route(|| async { "beside" }));
    let (handle, _) = start(HttpConfig::new().path("/custom").serve_beside(beside)).await;
    let url = handle.url("/custom");

    let call = json!({"name": "greet", "arguments": {"name": "path"}});
    let (status, body) = json_of(
        stateless(&url, 1, "tools/call", call, &[])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["content"][0]["text"], "Hello, path!");
    // The same path under another method, and other paths, are the router's.
    let other = client().put(&url).send().await.unwrap();
    assert_eq!(other.status(), 405);
    for (path, text) in [("/mcp", "not the endpoint"), ("/custom/more", "beside")] {
        let answer = client().post(handle.url(path)).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.text().await.unwrap(), text);
    }
    let missing = client().post(handle.url("/custom/")).send().await.unwrap();
    assert_eq!(missing.status(), 404);

    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn stateless_headers_must_mirror_the_body() {
    let (handle, url) = start(HttpConfig::new()).await;
    let greet = || json!({"name": "greet", "arguments": {"name": "x"}});
    let expect = async |request: reqwest::RequestBuilder, status: u16, code: i64| {
        let (got, body) = json_of(request.send().await.unwrap()).await;
        assert_eq!(
            (got, body["error"]["code"].as_i64()),
            (status, Some(code)),
            "{body}"
        );
    };

    expect(
        stateless(
            &url,
            1,
            "tools/list",
            json!({}),
            &[("MCP-Protocol-Version", "2025-11-25")],
        ),
        400,
        -32020,
    )
    .await;
    expect(
        stateless(
            &url,
            2,
            "tools/list",
            json!({}),
            &[("Mcp-Method", "tools/call")],
        ),
        400,
        -32020,
    )
    .await;
    expect(
        stateless(
            &url,
            3,
            "tools/list",
            json!({}),
            &[("Mcp-Method", "TOOLS/LIST")],
        ),
        400,
        -32020,
    )
    .await;
    expect(
        stateless(&url, 4, "tools/call", greet(), &[("Mcp-Name", "other")]),
        400,
        -32020,
    )
    .await;
    expect(
        stateless(
            &url,
            5,
            "tools/call",
            greet(),
            &[("Mcp-Name", "=?base64?Z3JlZXQ?=")],
        ),
        400,
        -32020,
    )
    .await;
    // A header without its mirror in the body is missing, not ignored.
    let no_method = client()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V2026)
        .body(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"_meta": meta(json!({}))}}).to_string());
    expect(no_method, 400, -32020).await;

    // Base64 and surrounding whitespace are undone before comparing.
    let (status, body) = json_of(
        stateless(
            &url,
            7,
            "tools/call",
            greet(),
            &[("Mcp-Name", "=?base64?Z3JlZXQ=?=")],
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &body["result"]["content"][0]["text"]),
        (200, &json!("Hello, x!"))
    );
    let (status, _) = json_of(
        stateless(&url, 8, "tools/call", greet(), &[("Mcp-Name", "  greet ")])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);

    expect(
        stateless(&url, 9, "no/such/method", json!({}), &[]),
        404,
        -32601,
    )
    .await;
    expect(
        stateless(&url, 10, "initialize", json!({}), &[]),
        404,
        -32601,
    )
    .await;
    let mut old = meta(json!({}));
    old["io.modelcontextprotocol/protocolVersion"] = json!("1999-01-01");
    expect(
        stateless(
            &url,
            11,
            "server/discover",
            json!({"_meta": old}),
            &[("MCP-Protocol-Version", "1999-01-01")],
        ),
        400,
        -32022,
    )
    .await;

    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = client()
            .request(method, &url)
            .header("mcp-protocol-version", V2026)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405);
    }
    let big = "x".repeat(5 * 1024 * 1024);
    let response = stateless(
        &url,
        12,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": big}}),
        &[("Mcp-Name", "greet")],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 413);

    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn closing_a_stateless_stream_cancels_the_request() {
    // A client notices its dropped response body when more data arrives; keep-alives do that.
    let (handle, url) = start(HttpConfig::new().keep_alive(Some(Duration::from_millis(20)))).await;
    let before = ENDED.load(Ordering::SeqCst);
    let call = json!({"name": "wait_for_cancel", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": 1}});
    let mut events = Events::new(
        stateless(&url, 1, "tools/call", call, &[])
            .send()
            .await
            .unwrap(),
    );
    let first = events.next().await.unwrap();
    assert_eq!(first.json()["method"], "notifications/progress");
    drop(events);
    let mut waited = 0;
    while ENDED.load(Ordering::SeqCst) == before {
        waited += 1;
        assert!(waited < 500, "the tool never saw the cancellation");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown().await.unwrap();
}

// ---- 2025-11-25 ----

#[tokio::test]
async fn sessions_are_required_checked_and_ended_by_delete() {
    let (handle, url) = start(HttpConfig::new()).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});

    let no_session = client()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V2025)
        .body(list.to_string());
    let (status, body) = json_of(no_session.send().await.unwrap()).await;
    assert_eq!(
        (status, body["error"]["code"].as_i64()),
        (400, Some(-32600))
    );

    let (status, _) = json_of(
        stateful(&url, "no-such-session", list.clone())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);

    let session = open_session(&url, json!({})).await;
    let (status, body) =
        json_of(stateful(&url, &session, list.clone()).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(body["result"]["tools"].as_array().unwrap().len() >= 5);

    let wrong_version = stateful_as(&url, &session, "2025-06-18", list.clone());
    assert_eq!(wrong_version.send().await.unwrap().status(), 400);

    let deleted = client()
        .delete(&url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success());
    let (status, _) = json_of(stateful(&url, &session, list).send().await.unwrap()).await;
    assert_eq!(status, 404, "an ended session is gone");
    let get = get_stream(&url, &session, None).send().await.unwrap();
    assert_eq!(get.status(), 404);

    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stateful_stream_primes_then_carries_server_requests_then_the_response() {
    let (handle, url) = start(HttpConfig::new().sse_retry(Duration::from_millis(750))).await;
    let session = open_session(&url, json!({"elicitation": {}})).await;

    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "ask_name", "arguments": {}}});
    let mut events = Events::new(stateful(&url, &session, call).send().await.unwrap());
    let priming = events.next().await.unwrap();
    assert!(
        priming.id.is_some() && priming.data.is_empty(),
        "{priming:?}"
    );
    assert_eq!(priming.retry, Some(750));

    let ask = events.next().await.unwrap();
    assert!(ask.id.is_some());
    let ask = ask.json();
    assert_eq!(ask["method"], "elicitation/create");
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "Ada"}}});
    assert_eq!(
        stateful(&url, &session, answer)
            .send()
            .await
            .unwrap()
            .status(),
        202
    );

    let rest = events.until(|v| v["id"] == 7).await;
    assert_eq!(
        rest.last().unwrap().json()["result"]["content"][0]["text"],
        "Hi Ada"
    );
    assert!(events.next().await.is_none());

    handle.shutdown().await.unwrap();
}

/// Opens a session of an older revision: the version it was given, and the session id.
async fn open_old_session(url: &str, version: &str) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {},
                   "clientInfo": {"name": "old", "version": "1"}}});
    let response = post(&client(), url, &initialize).send().await.unwrap();
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (status, body) = json_of(response).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["protocolVersion"], version, "{body}");
    assert!(
        body["result"]["capabilities"].get("tasks").is_none(),
        "{body}"
    );
    session
}

#[tokio::test]
async fn streams_of_sessions_older_than_2025_11_25_have_no_priming_event() {
    let (handle, url) = start(HttpConfig::new()).await;
    for version in ["2025-06-18", "2025-03-26", "2024-11-05"] {
        let session = open_old_session(&url, version).await;
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "count_to_three", "arguments": {}, "_meta": {"progressToken": "p"}}});
        let response = stateful_as(&url, &session, version, call)
            .send()
            .await
            .unwrap();
        let mut events = Events::new(response);
        let first = events.next().await.unwrap();
        assert!(first.retry.is_none(), "{version}: {first:?}");
        assert_eq!(
            first.json()["method"],
            "notifications/progress",
            "{version}: {first:?}"
        );
        assert!(first.id.is_some(), "{version}: events keep their ids");
        let rest = events.until(|v| v["id"] == 3).await;
        assert!(
            rest.iter().all(|e| !e.data.is_empty()),
            "{version}: {rest:?}"
        );
        assert_eq!(
            rest.last().unwrap().json()["result"]["content"][0]["text"],
            "counted"
        );
    }
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_2024_11_05_client_gets_its_version_and_plain_tools() {
    let (handle, url) = start(HttpConfig::new()).await;
    let session = open_old_session(&url, "2024-11-05").await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let (status, tools) = json_of(
        stateful_as(&url, &session, "2024-11-05", list)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let tools = tools["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().all(|t| t.get("execution").is_none()));
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "Ada"}}});
    // Clients of 2024-11-05 send no MCP-Protocol-Version header.
    let (status, greeted) = json_of(
        post(&client(), &url, &call)
            .header("mcp-session-id", &session)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(greeted["result"]["content"][0]["text"], "Hello, Ada!");
    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": "x"}});
    let (_, refused) = json_of(
        stateful_as(&url, &session, "2024-11-05", get)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32601);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_dropped_get_stream_resumes_from_last_event_id() {
    let (handle, url) = start(HttpConfig::new()).await;
    let session = open_session(&url, json!({})).await;

    let mut get = Events::new(get_stream(&url, &session, None).send().await.unwrap());
    let priming = get.next().await.unwrap();
    assert!(priming.id.is_some() && priming.data.is_empty());

    // A task's status notifications and progress go to the GET stream.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "gated_job", "arguments": {}, "task": {"ttl": 60000}, "_meta": {"progressToken": "g"}}});
    let (status, body) = json_of(stateful(&url, &session, call).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    let task_id = body["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    let first = get.next().await.unwrap();
    let last_seen = first.id.clone().expect("events carry ids");
    drop(get);

    RELEASE.notify_one();
    let mut polls = 0;
    loop {
        let poll = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": task_id}});
        let (_, body) = json_of(stateful(&url, &session, poll).send().await.unwrap()).await;
        if body["result"]["status"] == "completed" {
            break;
        }
        polls += 1;
        assert!(polls < 500, "the task never completed: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut resumed = Events::new(
        get_stream(&url, &session, Some(&last_seen))
            .send()
            .await
            .unwrap(),
    );
    let replay = resumed
        .until(|v| {
            v["method"] == "notifications/tasks/status" && v["params"]["status"] == "completed"
        })
        .await;
    let ids: Vec<&str> = replay.iter().filter_map(|e| e.id.as_deref()).collect();
    assert!(
        !replay
            .iter()
            .skip(1)
            .any(|e| e.id.as_deref() == Some(last_seen.as_str())),
        "{ids:?}"
    );
    assert!(
        replay
            .iter()
            .any(|e| e.json()["method"] == "notifications/progress"
                && e.json()["params"]["progress"] == 2.0)
    );

    let bad = get_stream(&url, &session, Some("99-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    drop(resumed);
    handle.shutdown().await.unwrap();
}

// ---- Security ----

#[tokio::test]
async fn foreign_origins_and_hosts_are_refused() {
    let (handle, url) = start(HttpConfig::new().allow_origin("https://app.example.com")).await;
    let discover = |origin: Option<&str>| {
        let request = stateless(&url, 1, "server/discover", json!({}), &[]);
        match origin {
            Some(o) => request.header("origin", o),
            None => request,
        }
    };
    assert_eq!(
        discover(Some("http://evil.example.com"))
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(discover(Some("null")).send().await.unwrap().status(), 403);
    for ok in [
        "http://localhost:5173",
        "http://127.0.0.1",
        "http://[::1]:8080",
        "https://app.example.com",
    ] {
        assert_eq!(
            discover(Some(ok)).send().await.unwrap().status(),
            200,
            "{ok}"
        );
    }
    let foreign_host = discover(None)
        .header("host", "evil.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign_host.status(), 403);
    let local_host = discover(None)
        .header("host", "localhost")
        .send()
        .await
        .unwrap();
    assert_eq!(local_host.status(), 200);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn another_principal_cannot_read_or_cancel_a_task() {
    let config = HttpConfig::new().authenticator(|headers| {
        match headers.get("authorization").and_then(|v| v.to_str().ok()) {
            Some("Bearer alice") => Ok(Some("alice".into())),
            Some("Bearer bob") => Ok(Some("bob".into())),
            _ => Err(AuthError::unauthorized("a bearer token is required")),
        }
    });
    let (handle, url) = start(config).await;
    let caps = json!({"extensions": {TASKS_EXT: {}}});
    let as_user = |user: &str, id: u64, method: &str, params: Value| {
        stateless(&url, id, method, params, &[]).header("authorization", format!("Bearer {user}"))
    };

    let anonymous = stateless(&url, 1, "server/discover", json!({}), &[])
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert!(anonymous.headers().contains_key("www-authenticate"));

    let call = json!({"name": "long_job", "arguments": {}, "_meta": meta(caps.clone())});
    let (status, created) = json_of(
        as_user("alice", 2, "tools/call", call)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["result"]["resultType"], "task");
    let task_id = created["result"]["taskId"].as_str().unwrap().to_owned();

    let get = |user: &str, task: &str| {
        as_user(
            user,
            3,
            "tasks/get",
            json!({"taskId": task, "_meta": meta(caps.clone())}),
        )
    };
    let (_, mine) = json_of(get("alice", &task_id).send().await.unwrap()).await;
    assert_eq!(mine["result"]["taskId"], task_id.as_str());

    let (bob_status, bobs) = json_of(get("bob", &task_id).send().await.unwrap()).await;
    let (unknown_status, unknown) = json_of(get("bob", "no-such-task").send().await.unwrap()).await;
    assert_eq!(bobs["error"]["code"], -32602, "{bobs}");
    assert_eq!(
        (bob_status, &bobs["error"]["code"]),
        (unknown_status, &unknown["error"]["code"])
    );

    let cancel = |user: &str| {
        as_user(
            user,
            4,
            "tasks/cancel",
            json!({"taskId": task_id, "_meta": meta(caps.clone())}),
        )
    };
    let (_, bob_cancel) = json_of(cancel("bob").send().await.unwrap()).await;
    assert_eq!(bob_cancel["error"]["code"], -32602, "{bob_cancel}");
    let (_, still) = json_of(get("alice", &task_id).send().await.unwrap()).await;
    assert_eq!(still["result"]["status"], "working");
    let (_, alice_cancel) = json_of(cancel("alice").send().await.unwrap()).await;
    assert!(alice_cancel.get("result").is_some(), "{alice_cancel}");

    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_lets_an_in_flight_response_finish() {
    let (handle, url) = start(HttpConfig::new()).await;
    let mut m = meta(json!({}));
    m["progressToken"] = json!(1);
    let call = json!({"name": "count_to_three", "arguments": {}, "_meta": m});
    let response = stateless(&url, 1, "tools/call", call, &[])
        .send()
        .await
        .unwrap();
    let shutdown = tokio::spawn(handle.shutdown());
    let mut events = Events::new(response);
    let seen = events.until(|v| v["id"] == 1).await;
    assert_eq!(
        seen.last().unwrap().json()["result"]["content"][0]["text"],
        "counted"
    );
    shutdown.await.unwrap().unwrap();
}

#[tokio::test]
async fn idle_sessions_end_when_a_new_one_opens_and_the_session_cap_holds() {
    let config = HttpConfig::new()
        .session_idle_timeout(Duration::ZERO)
        .max_sessions(1);
    let (handle, url) = start(config).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let first = open_session(&url, json!({})).await;
    let second = open_session(&url, json!({})).await;
    let (status, _) = json_of(stateful(&url, &first, list.clone()).send().await.unwrap()).await;
    assert_eq!(status, 404, "the idle session was ended");
    let (status, _) = json_of(stateful(&url, &second, list).send().await.unwrap()).await;
    assert_eq!(status, 200);

    // An open GET stream keeps a session busy, so the cap turns the next one away.
    let mut get = Events::new(get_stream(&url, &second, None).send().await.unwrap());
    get.next().await.unwrap();
    let refused = client()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": V2025, "capabilities": {},
                "clientInfo": {"name": "e2e", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    drop(get);
    handle.shutdown().await.unwrap();
}

/// A stranger that asked for a task's result and keeps its stream open without reading it
/// holds the task's question only until the session that created the task can be asked:
/// once the owner listens, the question is taken back and asked there.
#[tokio::test]
async fn a_question_held_by_a_stranger_s_unread_stream_moves_to_its_owner() {
    let (handle, url) = start(HttpConfig::new()).await;
    let owner = open_session(&url, json!({"elicitation": {}})).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "confirm_later", "arguments": {}, "task": {}}});
    let (status, created) = json_of(stateful(&url, &owner, call).send().await.unwrap()).await;
    assert_eq!(status, 200, "{created}");
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    // Another session waits for the result and gets the question, the owner not listening
    // yet; it keeps its stream open and never answers.
    let stranger = open_session(&url, json!({"elicitation": {}})).await;
    let wait = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/result",
        "params": {"taskId": task}});
    let mut held = Events::new(stateful(&url, &stranger, wait).send().await.unwrap());
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = held.next().await.expect("the stream stays open");
            if !event.data.is_empty() && event.json()["method"] == "elicitation/create" {
                return event.json();
            }
        }
    })
    .await
    .expect("the stranger's stream carried the question while the owner could not be asked");

    // The owner starts listening: the question comes to it, and the stranger is told.
    let mut listening = Events::new(get_stream(&url, &owner, None).send().await.unwrap());
    let asked = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = listening.next().await.expect("the stream stays open");
            if !event.data.is_empty() && event.json()["method"] == "elicitation/create" {
                return event.json();
            }
        }
    })
    .await
    .expect("the owner got its task's question back from the stranger");
    assert_eq!(
        asked["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    let cancelled = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let event = held.next().await.expect("the stream stays open");
            if !event.data.is_empty() && event.json()["method"] == "notifications/cancelled" {
                return event.json();
            }
        }
    })
    .await
    .expect("the stranger was told its question was withdrawn");
    assert_eq!(cancelled["params"]["requestId"], first["id"]);
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": {"action": "accept", "content": {"sure": true}}});
    assert_eq!(
        stateful(&url, &owner, answer)
            .send()
            .await
            .unwrap()
            .status(),
        202
    );
    let done = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result",
        "params": {"taskId": task}});
    let (status, result) = json_of(stateful(&url, &owner, done).send().await.unwrap()).await;
    assert_eq!(status, 200, "{result}");
    assert!(result["result"].is_object(), "{result}");
    drop(held);
    handle.shutdown().await.unwrap();
}

/// A task id is a bearer handle among anonymous sessions: another session may wait for the
/// task's result. When it asks and walks away, the question must not be stranded on its
/// unread stream: the session that created the task, listening on its own stream, comes
/// first.
#[tokio::test]
async fn a_stranger_waiting_for_a_task_does_not_take_its_owner_s_question() {
    let (handle, url) = start(HttpConfig::new()).await;
    let owner = open_session(&url, json!({"elicitation": {}})).await;
    let mut listening = Events::new(get_stream(&url, &owner, None).send().await.unwrap());
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "confirm_later", "arguments": {}, "task": {}}});
    let (status, created) = json_of(stateful(&url, &owner, call).send().await.unwrap()).await;
    assert_eq!(status, 200, "{created}");
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    // Another session waits for the result, then goes away without reading its stream.
    let stranger = open_session(&url, json!({"elicitation": {}})).await;
    let wait = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/result",
        "params": {"taskId": task}});
    let waiting = tokio::spawn(stateful(&url, &stranger, wait).send());
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiting.abort();

    let asked = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = listening.next().await.expect("the stream stays open");
            if event.data.is_empty() {
                continue;
            }
            let m = event.json();
            if m["method"] == "elicitation/create" {
                return m;
            }
        }
    })
    .await
    .expect("the owner got its task's question");
    assert_eq!(
        asked["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": {"action": "accept", "content": {"sure": true}}});
    assert_eq!(
        stateful(&url, &owner, answer)
            .send()
            .await
            .unwrap()
            .status(),
        202
    );
    handle.shutdown().await.unwrap();
}
