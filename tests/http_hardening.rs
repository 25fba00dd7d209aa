//! The Streamable HTTP transport against real clients that bend the rules and hostile ones:
//! a real server on an ephemeral loopback port, driven by real sockets.

use mcp_tasks::EngineConfig;
use mcp_tasks::prelude::*;
use mcp_tasks::transport::http::{HttpConfig, HttpHandle};
use serde_json::{Value, json};
use std::time::Duration;

// ---- Fixture tools ----

/// A task that runs until cancelled (at most 60 s).
#[task_tool(mode = "required", poll_interval = "50ms")]
async fn long_job(cancel: CancellationToken) -> Result<String, ToolError> {
    tokio::select! {
        () = cancel.cancelled() => Err(ToolError::cancelled()),
        () = tokio::time::sleep(Duration::from_secs(60)) => Ok("done".into()),
    }
}

// ---- Helpers ----

const V2026: &str = "2026-07-28";
const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";

async fn start(config: HttpConfig) -> (HttpHandle, String) {
    start_with(config, EngineConfig::default()).await
}

async fn start_with(config: HttpConfig, engine: EngineConfig) -> (HttpHandle, String) {
    let server = Server::builder()
        .name("http-hardening")
        .registry_tools()
        .engine_config(engine)
        .build()
        .unwrap();
    let handle = server.serve_http(config).await.unwrap();
    let url = handle.url("/mcp");
    (handle, url)
}

/// The 2026-07-28 `_meta` of a client that speaks the tasks extension.
fn tasks_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXT: {}}},
    })
}

/// A 2026-07-28 request with exactly the headers given (besides the content headers).
fn stateless(
    url: &str,
    id: u64,
    method: &str,
    mut params: Value,
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    params["_meta"] = tasks_meta();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V2026)
        .header("mcp-method", method)
        .body(body.to_string());
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request
}

async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "status {status}"
    );
    let body = response.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

/// Starts a `long_job` task and returns its id.
async fn create_task(url: &str) -> String {
    let call = json!({"name": "long_job", "arguments": {}});
    let (status, created) = json_of(
        stateless(url, 1, "tools/call", call, &[("mcp-name", "long_job")])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    created["result"]["taskId"].as_str().unwrap().to_owned()
}

// ---- Mcp-Name on tasks/* ----

#[tokio::test]
async fn tasks_requests_without_mcp_name_are_served_but_a_wrong_one_is_refused() {
    let (handle, url) = start(HttpConfig::new()).await;
    let task = create_task(&url).await;
    let params = json!({"taskId": task});

    let (status, got) = json_of(
        stateless(&url, 2, "tasks/get", params.clone(), &[])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["result"]["taskId"], task.as_str());

    let (status, wrong) = json_of(
        stateless(
            &url,
            3,
            "tasks/get",
            params.clone(),
            &[("mcp-name", "other")],
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, &wrong["error"]["code"]), (400, &json!(-32020)));

    let (status, cancelled) = json_of(
        stateless(&url, 4, "tasks/cancel", params, &[])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{cancelled}");
    assert!(cancelled.get("result").is_some(), "{cancelled}");

    // Other methods still need their Mcp-Name.
    let call = json!({"name": "long_job", "arguments": {}});
    let (status, refused) = json_of(
        stateless(&url, 5, "tools/call", call, &[])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &refused["error"]["code"]), (400, &json!(-32020)));
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_strict_switch_requires_mcp_name_on_tasks_requests() {
    let (handle, url) = start(HttpConfig::new().require_task_name_header(true)).await;
    let task = create_task(&url).await;
    for method in ["tasks/get", "tasks/cancel"] {
        let (status, refused) = json_of(
            stateless(&url, 2, method, json!({"taskId": task}), &[])
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, &refused["error"]["code"]),
            (400, &json!(-32020)),
            "{method}: {refused}"
        );
    }
    let (status, got) = json_of(
        stateless(
            &url,
            3,
            "tasks/get",
            json!({"taskId": task}),
            &[("mcp-name", &task)],
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{got}");
    handle.shutdown().await.unwrap();
}

// ---- Refusals are JSON-RPC ----

/// Sends raw bytes on a new connection and reads until the server closes it (at most 10 s).
async fn raw(handle: &HttpHandle, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut socket = tokio::net::TcpStream::connect(handle.local_addr())
        .await
        .unwrap();
    socket.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer))
        .await
        .expect("the server did not close the connection")
        .ok();
    String::from_utf8_lossy(&answer).into_owned()
}

/// The status and JSON body of a raw HTTP/1.1 answer.
fn parse_answer(answer: &str) -> (u16, Value) {
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    (status, serde_json::from_str(body).expect(body))
}

#[tokio::test]
async fn oversized_and_broken_bodies_get_json_rpc_errors() {
    let (handle, url) = start(HttpConfig::new().body_limit(1024)).await;
    let big = json!({"name": "long_job", "arguments": {"x": "y".repeat(2048)}});
    let response = stateless(&url, 1, "tools/call", big, &[("mcp-name", "long_job")])
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!(status, 413);
    assert_eq!(body["id"], Value::Null);
    assert_eq!(body["error"]["code"], -32600, "{body}");

    // The same without Content-Length: a chunked body that grows past the limit.
    let chunk = "z".repeat(700);
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n{len:x}\r\n{chunk}\r\n{len:x}\r\n{chunk}\r\n0\r\n\r\n",
        len = chunk.len()
    );
    let (status, body) = parse_answer(&raw(&handle, request.as_bytes()).await);
    assert_eq!((status, &body["id"]), (413, &Value::Null), "{body}");
    assert_eq!(body["error"]["code"], -32600);

    let broken = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n";
    let (status, body) = parse_answer(&raw(&handle, broken.as_bytes()).await);
    assert_eq!((status, &body["id"]), (400, &Value::Null), "{body}");
    assert_eq!(body["error"]["code"], -32600);

    let put = reqwest::Client::new().put(&url).send().await.unwrap();
    assert_eq!(put.headers()["allow"], "GET, POST, DELETE");
    let (status, body) = json_of(put).await;
    assert_eq!((status, &body["id"]), (405, &Value::Null));
    handle.shutdown().await.unwrap();
}

// ---- Busy answers ----

#[tokio::test]
async fn a_busy_2026_answer_is_503_with_retry_after_and_the_json_rpc_error() {
    let engine = EngineConfig {
        max_running: 1,
        max_queued: 0,
        ..EngineConfig::default()
    };
    let (handle, url) = start_with(HttpConfig::new(), engine).await;
    let task = create_task(&url).await;
    let call = json!({"name": "long_job", "arguments": {}});
    let response = stateless(&url, 2, "tools/call", call, &[("mcp-name", "long_job")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["retry-after"], "1");
    let (status, body) = json_of(response).await;
    assert_eq!((status, &body["id"]), (503, &json!(2)), "{body}");
    assert_eq!(body["error"]["code"], -32000);

    // Other answers carry no Retry-After.
    let response = stateless(&url, 3, "tasks/cancel", json!({"taskId": task}), &[])
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("retry-after").is_none());
    assert_eq!(response.status(), 200);
    handle.shutdown().await.unwrap();
}
