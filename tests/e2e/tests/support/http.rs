//! Streamable HTTP from the client's side: a server in this process or the fixture as a
//! process, requests of both eras, and their answers as JSON or server-sent events.

use mcp_tasks_runtime::ServerBuilder;
use mcp_tasks_runtime::transport::http::{HttpConfig, HttpHandle};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const V2026: &str = "2026-07-28";
pub const V2025: &str = "2025-11-25";
pub const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";

/// Builds the server and serves HTTP on an ephemeral loopback port; the handle and the
/// endpoint's URL.
pub async fn serve(builder: ServerBuilder, config: HttpConfig) -> (HttpHandle, String) {
    let server = builder.build().unwrap();
    let handle = server.serve_http(config).await.unwrap();
    let url = handle.url("/mcp");
    (handle, url)
}

/// The fixture serving HTTP, as a process.
pub struct HttpFixture {
    pub child: Child,
    /// The endpoint it said it listens on.
    pub url: String,
}

impl HttpFixture {
    /// The fixture serving HTTP on a free loopback port, with `args` after `--http`.
    pub async fn start(args: &[&str]) -> Self {
        let mut command = Command::new(super::example("conformance-server"));
        command.args(["--http", "127.0.0.1:0"]).args(args);
        Self::spawn(command).await
    }

    /// Spawns `command`, which runs the fixture serving HTTP, and waits (at most 30 s) for it
    /// to say where it listens; the rest of its stderr is read and dropped.
    pub async fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the conformance server");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(url) = line.strip_prefix("listening on ") {
                    return url.trim().to_owned();
                }
            }
            panic!("the fixture exited before it listened");
        })
        .await
        .expect("the fixture listens within 30 s");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { child, url }
    }

    /// `kill -9`.
    pub async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

/// The 2026-07-28 `_meta` of a client with `capabilities`.
pub fn meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// The 2026-07-28 `_meta` of a client that speaks the tasks extension.
pub fn tasks_meta() -> Value {
    meta(json!({"extensions": {TASKS_EXT: {}}}))
}

/// A POST of `body` with the content headers every request carries.
pub fn post(client: &reqwest::Client, url: &str, body: &Value) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
}

/// A 2026-07-28 request of `method`: [`post`] with `MCP-Protocol-Version` and `Mcp-Method`,
/// then `headers` (each replaces an earlier one of its name). `params` gets `meta` as its
/// `_meta` unless it has one.
pub fn stateless_with(
    url: &str,
    id: u64,
    method: &str,
    mut params: Value,
    meta: Value,
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    if params.get("_meta").is_none() {
        params["_meta"] = meta;
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut all = vec![
        ("mcp-protocol-version".to_owned(), V2026.to_owned()),
        ("mcp-method".to_owned(), method.to_owned()),
    ];
    for (k, v) in headers {
        all.retain(|(h, _)| !h.eq_ignore_ascii_case(k));
        all.push(((*k).to_owned(), (*v).to_owned()));
    }
    let mut request = post(&reqwest::Client::new(), url, &body);
    for (k, v) in all {
        request = request.header(k, v);
    }
    request
}

/// A 2026-07-28 request with every header it needs (`Mcp-Name` from the params' `name` or
/// `taskId`, and an empty client's `_meta` unless `params` has one), plus `extra` headers
/// (which replace).
pub fn stateless(
    url: &str,
    id: u64,
    method: &str,
    params: Value,
    extra: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut headers: Vec<(&str, &str)> = name
        .as_deref()
        .map(|n| ("mcp-name", n))
        .into_iter()
        .collect();
    headers.extend_from_slice(extra);
    stateless_with(url, id, method, params, meta(json!({})), &headers)
}

/// The params of a 2025-11-25 `initialize` from `client` with `capabilities`.
pub fn init_params(client: &str, capabilities: Value) -> Value {
    json!({"protocolVersion": V2025, "capabilities": capabilities,
           "clientInfo": {"name": client, "version": "1"}})
}

/// A request of a 2025-11-25 session: [`post`] with `Mcp-Session-Id` and
/// `MCP-Protocol-Version: version`.
pub fn session_post(
    client: &reqwest::Client,
    url: &str,
    session: &str,
    version: &str,
    message: &Value,
) -> reqwest::RequestBuilder {
    post(client, url, message)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", version)
}

/// The GET stream of a 2025-11-25 session.
pub fn session_get(client: &reqwest::Client, url: &str, session: &str) -> reqwest::RequestBuilder {
    client
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", V2025)
}

/// The status and JSON body of a response, which must be `application/json`.
pub async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "status {status}"
    );
    let body = response.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

/// The JSON-RPC answer in a JSON or SSE response: in a stream, the first message with an id
/// that is not a request.
pub async fn answer(response: reqwest::Response) -> Value {
    let text = response.text().await.unwrap();
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return v;
    }
    text.split("\n\n")
        .filter_map(Event::parse)
        .map(|event| event.json())
        .find(|m| m.get("id").is_some() && m.get("method").is_none())
        .unwrap_or_else(|| panic!("no answer in {text}"))
}

/// One server-sent event.
#[derive(Debug, Default)]
pub struct Event {
    pub id: Option<String>,
    pub retry: Option<u64>,
    pub data: String,
}

impl Event {
    /// The event in one block of lines, or `None` for a block of comments only.
    pub fn parse(block: &str) -> Option<Self> {
        let mut event = Event::default();
        let mut any = false;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                event.id = Some(v.to_owned());
                any = true;
            } else if let Some(v) = line.strip_prefix("retry: ") {
                event.retry = v.parse().ok();
                any = true;
            } else if let Some(v) = line.strip_prefix("data:") {
                event.data.push_str(v.trim_start());
                any = true;
            }
        }
        any.then_some(event)
    }

    /// The data as JSON (`null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// Reads events from an SSE response, chunk by chunk.
pub struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    /// The events of `response`, which must be an unbuffered `text/event-stream`.
    pub fn new(response: reqwest::Response) -> Self {
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        assert_eq!(response.headers()["x-accel-buffering"], "no");
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The next event, or `None` at the end of the stream. Comments are skipped.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(event) = Event::parse(&block) {
                    return Some(event);
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.response.chunk())
                .await
                .expect("the stream stalled")
                .unwrap()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Events up to and including the first that satisfies `done`.
    pub async fn until(&mut self, done: impl Fn(&Value) -> bool) -> Vec<Event> {
        let mut seen = Vec::new();
        while let Some(event) = self.next().await {
            let stop = done(&event.json());
            seen.push(event);
            if stop {
                return seen;
            }
        }
        panic!("the stream ended before the expected event: {seen:?}");
    }
}
