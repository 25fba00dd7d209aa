//! What the runtime logs, as an operator reads it: at `info` the server's start and each
//! task's creation and end, at `warn` a tool's error or panic with its message, task ids only
//! by their first characters (a task without a principal is reached by its id alone), never a
//! client's answers or credentials, and a client hanging up is not an error.

use mcp_tasks::ServerBuilder;
use mcp_tasks::prelude::*;
use mcp_tasks::transport::http::HttpConfig;
use serde_json::{Value, json};
use std::time::Duration;

/// What a test's subscriber wrote: the log as an operator reads it.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The process's subscriber: plain text at every level of the runtime, written here. One
    /// subscriber for the whole test binary, which has one test, so that what tracing caches
    /// about which events are wanted never depends on another test's subscriber.
    fn install() -> Self {
        let log = Self::default();
        let writer = log.clone();
        let filter =
            tracing_subscriber::EnvFilter::new("trace,hyper=off,hyper_util=off,reqwest=off");
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_env_filter(filter)
            .with_writer(move || writer.clone())
            .init();
        log
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Forgets what was written so far.
    fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// The lines of `log` at `INFO`, `WARN` or `ERROR`.
fn operator_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" INFO ") || l.contains(" WARN ") || l.contains("ERROR "))
        .collect()
}

/// The tools of the logging tests: one of each way a tool ends.
fn logging_server() -> ServerBuilder {
    let tool = |name: &str| Tool::new(name, |_, _| async { Ok(CallToolResult::default()) });
    Server::builder()
        .tool(tool("fine").task_support(TaskSupport::Optional))
        .tool(
            Tool::new("full_disk", |_, _| async {
                Err(ToolError::new("the disk is full"))
            })
            .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("trips", |_, _| async {
                panic!("the tool tripped over a cable");
            })
            .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("login", |cx: TaskContext, _| async move {
                let answer = cx
                    .client()
                    .elicit(
                        "Your password?",
                        json!({"type": "object", "properties": {"password": {"type": "string"}}}),
                    )
                    .await?;
                let got = answer
                    .content
                    .is_some_and(|c| c.get("password").is_some_and(Value::is_string));
                Ok(CallToolResult::success(vec![Content::text(format!(
                    "logged in: {got}"
                ))]))
            })
            .task_support(TaskSupport::Optional),
        )
}

/// A 2026-07-28 request with the tasks extension, sent with an `Authorization` header.
async fn call_with_token(url: &str, id: u64, method: &str, params: Value) -> Value {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        },
    });
    let mut params = params;
    params["_meta"] = meta;
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .header("authorization", "Bearer s3cret-token-value")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    serde_json::from_str(&response.text().await.unwrap()).unwrap()
}

#[tokio::test]
async fn the_log_tells_what_happened_without_secrets() {
    let log = Captured::install();
    a_session_shows_task_id_prefixes_and_no_secrets(&log).await;
    log.clear();
    a_client_hanging_up_is_not_logged_as_an_error(&log).await;
    log.clear();
    serving_a_byte_stream_says_so(&log).await;
}

/// stdio (any byte stream) says where the tasks are and which eras it speaks, at `info`.
async fn serving_a_byte_stream_says_so(log: &Captured) {
    let server = Server::builder().build().unwrap();
    let (client, served) = tokio::io::duplex(1024);
    let (read, write) = tokio::io::split(served);
    drop(client);
    mcp_tasks::transport::serve_io(server, read, write)
        .await
        .unwrap();
    let text = log.text();
    assert!(
        operator_lines(&text).iter().any(|l| l.contains("INFO")
            && l.contains("serving MCP over a byte stream")
            && l.contains("MemoryTaskStore")
            && l.contains("2025-11-25")),
        "{text}"
    );
}

/// Everything is recorded; what an operator sees at `info` is read from the lines at `INFO`
/// and above.
async fn a_session_shows_task_id_prefixes_and_no_secrets(log: &Captured) {
    let server = logging_server().build().unwrap();
    let config = HttpConfig::new().authenticator(|headers| {
        Ok(headers
            .get("authorization")
            .map(|_| "operator-of-the-test".to_owned()))
    });
    let handle = server.serve_http(config).await.unwrap();
    let url = handle.url("/mcp");

    let mut ids = Vec::new();
    let mut n = 0;
    for tool in ["fine", "full_disk", "trips", "login"] {
        n += 1;
        let created = call_with_token(
            &url,
            n,
            "tools/call",
            json!({"name": tool, "arguments": {}}),
        )
        .await;
        let id = created["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {created}"))
            .to_owned();
        let mut done = false;
        for _ in 0..500 {
            n += 1;
            let task = call_with_token(&url, n, "tasks/get", json!({"taskId": id})).await;
            let status = task["result"]["status"].as_str().unwrap_or_default();
            if status == "input_required" {
                let key = task["result"]["inputRequests"]
                    .as_object()
                    .and_then(|r| r.keys().next().cloned())
                    .expect("the question's key");
                n += 1;
                let answer = json!({key: {"action": "accept", "content": {"password": "hunter2"}}});
                call_with_token(
                    &url,
                    n,
                    "tasks/update",
                    json!({"taskId": id, "inputResponses": answer}),
                )
                .await;
            } else if status != "working" {
                done = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(done, "task {id} of {tool} ended");
        ids.push(id);
    }
    handle.shutdown().await.unwrap();

    let text = log.text();
    let seen = operator_lines(&text);
    let has = |needle: &[&str]| seen.iter().any(|l| needle.iter().all(|n| l.contains(n)));
    assert!(
        has(&[
            "INFO",
            "serving MCP over HTTP",
            "127.0.0.1",
            "MemoryTaskStore",
            "2026-07-28"
        ]),
        "{text}"
    );
    assert!(has(&["INFO", "task created", "full_disk"]), "{text}");
    assert!(
        has(&["INFO", "task finished", "completed", "fine"]),
        "{text}"
    );
    assert!(has(&["WARN", "the disk is full", "full_disk"]), "{text}");
    assert!(
        has(&["WARN", "the tool tripped over a cable", "trips"]),
        "{text}"
    );
    for id in &ids {
        assert!(has(&[&id[..8], "task finished"]), "{id}: {text}");
        let whole: Vec<_> = seen.iter().filter(|l| l.contains(id.as_str())).collect();
        assert!(
            whole.is_empty(),
            "whole task id at info or above: {whole:#?}"
        );
        // The whole id is there for whoever turns on `debug`.
        assert!(text.contains(id.as_str()), "{id} at debug");
    }
    assert!(
        !text.contains("hunter2"),
        "an elicitation answer was logged: {text}"
    );
    assert!(
        !text.contains("s3cret-token-value"),
        "an Authorization header was logged: {text}"
    );
}

/// Half a request, then the client is gone: said at `debug`, and not as an error.
async fn a_client_hanging_up_is_not_logged_as_an_error(log: &Captured) {
    use tokio::io::AsyncWriteExt as _;
    let server = Server::builder().build().unwrap();
    let handle = server.serve_http(HttpConfig::new()).await.unwrap();
    let mut tcp = tokio::net::TcpStream::connect(handle.local_addr())
        .await
        .unwrap();
    // Half a request, then the client is gone.
    tcp.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    drop(tcp);
    let mut text = String::new();
    for _ in 0..500 {
        text = log.text();
        if text.contains("the client closed the connection") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.shutdown().await.unwrap();
    assert!(text.contains("the client closed the connection"), "{text}");
    let hang_up: Vec<_> = text
        .lines()
        .filter(|l| l.contains("connection") || l.contains("client closed"))
        .collect();
    assert!(
        hang_up.iter().all(|l| !l.to_lowercase().contains("error")),
        "{hang_up:#?}"
    );
}
