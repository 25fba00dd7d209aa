//! The Streamable HTTP transport against real clients that bend the rules and hostile ones:
//! a real server on an ephemeral loopback port, driven by real sockets.

mod support;

use mcp_tasks::EngineConfig;
use mcp_tasks::ServerBuilder;
use mcp_tasks::prelude::*;
use mcp_tasks::transport::http::{HttpConfig, HttpHandle};
use serde_json::{Value, json};
use std::time::Duration;
use support::http::{
    HttpFixture, V2025, V2026, init_params, json_of, post, serve, session_get, session_post,
    stateless_with, tasks_meta,
};

// ---- Fixture tools ----

/// A task that runs until cancelled (at most 60 s).
#[task_tool(mode = "required", poll_interval = "50ms")]
async fn long_job(cancel: CancellationToken) -> Result<String, ToolError> {
    tokio::select! {
        () = cancel.cancelled() => Err(ToolError::cancelled()),
        () = tokio::time::sleep(Duration::from_secs(60)) => Ok("done".into()),
    }
}

/// Set once `wait_here` runs.
static WAITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A plain call that waits until it is cancelled (at most 60 s).
#[task_tool(mode = "forbidden")]
async fn wait_here(cancel: CancellationToken) -> Result<String, ToolError> {
    WAITING.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::select! {
        () = cancel.cancelled() => Err(ToolError::cancelled()),
        () = tokio::time::sleep(Duration::from_secs(60)) => Ok("done".into()),
    }
}

// ---- Helpers ----

async fn start(config: HttpConfig) -> (HttpHandle, String) {
    start_with(config, EngineConfig::default()).await
}

async fn start_with(config: HttpConfig, engine: EngineConfig) -> (HttpHandle, String) {
    let builder = Server::builder()
        .name("http-hardening")
        .registry_tools()
        .engine_config(engine);
    serve(builder, config).await
}

/// A 2026-07-28 request of a client that speaks the tasks extension, with exactly the
/// headers given (besides the content headers): no `Mcp-Name` unless `headers` has one.
fn stateless(
    url: &str,
    id: u64,
    method: &str,
    params: Value,
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    stateless_with(url, id, method, params, tasks_meta(), headers)
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
         Accept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{len:x}\r\n{chunk}\r\n{len:x}\r\n{chunk}\r\n0\r\n\r\n",
        len = chunk.len()
    );
    let (status, body) = parse_answer(&raw(&handle, request.as_bytes()).await);
    assert_eq!((status, &body["id"]), (413, &Value::Null), "{body}");
    assert_eq!(body["error"]["code"], -32600);

    let broken = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Accept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n";
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

#[tokio::test]
async fn a_requestor_over_its_creation_rate_gets_429_with_retry_after() {
    let server = Server::builder()
        .name("http-hardening")
        .registry_tools()
        .quotas(mcp_tasks::quota::QuotaConfig {
            creation_rate: Some(0.5),
            creation_burst: 1,
            ..mcp_tasks::quota::QuotaConfig::default()
        })
        .build()
        .unwrap();
    let handle = server.serve_http(HttpConfig::new()).await.unwrap();
    let url = handle.url("/mcp");
    create_task(&url).await;
    let call = json!({"name": "long_job", "arguments": {}});
    let response = stateless(&url, 2, "tools/call", call, &[("mcp-name", "long_job")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["retry-after"], "2");
    let (status, body) = json_of(response).await;
    assert_eq!((status, &body["id"]), (429, &json!(2)), "{body}");
    assert_eq!(body["error"]["code"], -32000, "{body}");
    assert_eq!(body["error"]["data"]["limit"], "creationRate", "{body}");
    handle.shutdown().await.unwrap();
}

// ---- Slow, idle and too many connections ----

/// A raw `server/discover` request of the 2026-07-28 era.
fn discover_request() -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {
        "_meta": tasks_meta()}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {V2026}\r\n\
         Mcp-Method: server/discover\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Reads one HTTP answer with a Content-Length body from `socket`.
async fn read_answer(socket: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut buffer = Vec::new();
    loop {
        let text = String::from_utf8_lossy(&buffer).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .expect("a Content-Length");
            if body.len() >= length {
                return text;
            }
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut chunk))
            .await
            .expect("no answer")
            .unwrap();
        assert!(n > 0, "closed before the answer: {text}");
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Waits (at most 10 s) for the server to close `socket`; returns what it sent first.
async fn until_closed(mut socket: impl tokio::io::AsyncRead + Unpin) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), socket.read(&mut chunk))
            .await
            .expect("the server kept the connection open")
        {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&answer).into_owned(),
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test]
async fn a_body_that_comes_in_pieces_within_its_timeout_is_read_whole() {
    use tokio::io::AsyncWriteExt as _;
    let (handle, _) = start(HttpConfig::new().body_timeout(Duration::from_secs(30))).await;
    let request = discover_request();
    let (head, body) = request.split_once("\r\n\r\n").unwrap();
    let mut socket = tokio::net::TcpStream::connect(handle.local_addr())
        .await
        .unwrap();
    socket.set_nodelay(true).unwrap();
    // The head alone, then the body in three pieces: the server finds no body with the head,
    // and must be woken by each piece that follows.
    socket
        .write_all(format!("{head}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let third = body.len() / 3;
    for piece in [&body[..third], &body[third..2 * third], &body[2 * third..]] {
        tokio::time::sleep(Duration::from_millis(50)).await;
        socket.write_all(piece.as_bytes()).await.unwrap();
    }
    let (status, answer) = parse_answer(&read_answer(&mut socket).await);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn slow_and_idle_connections_are_closed_after_their_timeouts() {
    use tokio::io::AsyncWriteExt as _;
    use tokio::net::TcpStream;
    use tokio::time::Instant;
    let header_timeout = Duration::from_millis(400);
    let body_timeout = Duration::from_millis(500);
    let idle_timeout = Duration::from_millis(700);
    let config = HttpConfig::new()
        .header_timeout(header_timeout)
        .body_timeout(body_timeout)
        .idle_timeout(idle_timeout);
    let (handle, url) = start(config).await;
    let addr = handle.local_addr();
    let mut closing = tokio::task::JoinSet::new();
    for kind in 0..3 {
        for _ in 0..20 {
            let opened = Instant::now();
            let mut socket = TcpStream::connect(addr).await.unwrap();
            let reader: Box<dyn tokio::io::AsyncRead + Unpin + Send> = match kind {
                // Idle: sends nothing.
                0 => Box::new(socket),
                // Slow headers: one byte every 50 ms, for ever.
                1 => {
                    let (read, mut write) = socket.into_split();
                    tokio::spawn(async move {
                        let head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
                        if write.write_all(head).await.is_err() {
                            return;
                        }
                        while write.write_all(b"a").await.is_ok() {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    });
                    Box::new(read)
                }
                // A body shorter than its Content-Length.
                _ => {
                    let head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                                Content-Type: application/json\r\n\
                                Accept: application/json, text/event-stream\r\n\
                                Content-Length: 100\r\n\r\n{\"jsonrpc\"";
                    socket.write_all(head.as_bytes()).await.unwrap();
                    Box::new(socket)
                }
            };
            closing.spawn(async move {
                let answer = until_closed(reader).await;
                (kind, opened.elapsed(), answer)
            });
        }
    }

    // Meanwhile a normal client is served, and its kept-alive connection ends when idle.
    let (status, found) = json_of(
        stateless(&url, 1, "server/discover", json!({}), &[])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{found}");
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(discover_request().as_bytes()).await.unwrap();
    assert!(read_answer(&mut kept).await.starts_with("HTTP/1.1 200"));
    let answered = Instant::now();
    assert_eq!(until_closed(kept).await, "");
    assert!(answered.elapsed() >= idle_timeout);

    let mut seen = [0; 3];
    while let Some(closed) = closing.join_next().await {
        let (kind, after, answer) = closed.unwrap();
        seen[kind] += 1;
        if kind == 2 {
            assert!(after >= body_timeout, "{after:?}");
            let (status, body) = parse_answer(&answer);
            assert_eq!((status, &body["id"]), (408, &Value::Null), "{body}");
        } else {
            assert!(after >= header_timeout, "{after:?}");
            assert_eq!(answer, "", "kind {kind}");
        }
    }
    assert_eq!(seen, [20; 3]);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_full_connection_table_evicts_idle_connections_for_new_clients() {
    use tokio::io::AsyncWriteExt as _;
    let cap = 32;
    let config = HttpConfig::new()
        .max_connections(cap)
        .header_timeout(Duration::from_secs(120))
        .body_timeout(Duration::from_secs(120))
        .idle_timeout(Duration::from_secs(120));
    let (handle, url) = start(config).await;
    let mut hostile = Vec::new();
    for i in 0..300 {
        let mut socket = tokio::net::TcpStream::connect(handle.local_addr())
            .await
            .unwrap();
        // Idle, half a header, or a body shorter than its Content-Length.
        let sent: &[u8] = match i % 3 {
            0 => b"",
            1 => b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            _ => {
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                   Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{"
            }
        };
        socket.write_all(sent).await.unwrap();
        hostile.push(socket);
    }
    for id in 0..5 {
        let response = tokio::time::timeout(
            Duration::from_secs(10),
            stateless(&url, id, "server/discover", json!({}), &[]).send(),
        )
        .await
        .expect("a normal request waited behind idle connections")
        .unwrap();
        assert_eq!(response.status(), 200);
    }
    // Every hostile connection was accepted before the normal ones, so all but the cap's
    // worth of them have been closed.
    let mut checks = tokio::task::JoinSet::new();
    for mut socket in hostile {
        checks.spawn(async move {
            use tokio::io::AsyncReadExt as _;
            let mut byte = [0u8; 1];
            match tokio::time::timeout(Duration::from_secs(2), socket.read(&mut byte)).await {
                Ok(Ok(0) | Err(_)) => true,
                Ok(Ok(_)) => panic!("the server answered an incomplete request"),
                Err(_) => false,
            }
        });
    }
    let mut closed = 0;
    while let Some(c) = checks.join_next().await {
        closed += usize::from(c.unwrap());
    }
    assert!(
        closed >= 300 - cap,
        "only {closed} of 300 idle connections closed"
    );
    handle.shutdown().await.unwrap();
}

// ---- Sessions ----

/// A client whose connections come from `source` (any address on loopback).
fn client_from(source: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(source))
        .build()
        .unwrap()
}

/// Sends `initialize`; the session id, or the refusal's status.
async fn initialize(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> Result<String, u16> {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": init_params("hardening", json!({}))});
    let mut request = post(client, url, &initialize);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let session = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let (status, body) = json_of(response).await;
    match session {
        Some(s) if status == 200 => Ok(s),
        _ => {
            assert!(body["error"].is_object(), "{body}");
            Err(status)
        }
    }
}

/// Sends `tools/list` on a session; the HTTP status.
async fn use_session(
    client: &reqwest::Client,
    url: &str,
    session: &str,
    token: Option<&str>,
) -> u16 {
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let mut request = session_post(client, url, session, V2025, &list);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().status().as_u16()
}

/// Opens the GET stream of a session, which keeps it busy while the response lives.
async fn open_stream(client: &reqwest::Client, url: &str, session: &str) -> reqwest::Response {
    let response = session_get(client, url, session).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response
}

#[tokio::test]
async fn each_anonymous_peer_has_its_own_share_of_sessions() {
    let (handle, url) = start(HttpConfig::new().max_sessions_per_client(2)).await;
    let (one, two) = (client_from([127, 0, 0, 1]), client_from([127, 0, 0, 2]));
    let first = initialize(&one, &url, None).await.unwrap();
    let second = initialize(&one, &url, None).await.unwrap();
    let elsewhere = initialize(&two, &url, None).await.unwrap();
    assert_eq!(use_session(&one, &url, &second, None).await, 200);
    assert_eq!(use_session(&one, &url, &first, None).await, 200);
    // A third session of the same peer ends that peer's least recently used idle one.
    let third = initialize(&one, &url, None).await.unwrap();
    assert_eq!(use_session(&one, &url, &second, None).await, 404);
    assert_eq!(use_session(&one, &url, &first, None).await, 200);
    assert_eq!(use_session(&one, &url, &third, None).await, 200);
    assert_eq!(use_session(&two, &url, &elsewhere, None).await, 200);

    // When all of a peer's sessions are busy, its next one is refused; others still open.
    let _streams = (
        open_stream(&one, &url, &first).await,
        open_stream(&one, &url, &third).await,
    );
    assert_eq!(initialize(&one, &url, None).await, Err(429));
    initialize(&two, &url, None).await.unwrap();
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_full_session_table_makes_room_instead_of_refusing() {
    let config = HttpConfig::new().max_sessions(3).authenticator(|headers| {
        let token = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        Ok(token.map(str::to_owned))
    });
    let (handle, url) = start(config).await;
    let client = reqwest::Client::new();
    let mut sessions = Vec::new();
    for user in ["a", "b", "c"] {
        let session = initialize(&client, &url, Some(user)).await.unwrap();
        sessions.push((user, session));
    }
    // `a` and `c` send requests; `b` never does, so it goes first.
    for i in [0, 2] {
        let (user, session) = &sessions[i];
        assert_eq!(use_session(&client, &url, session, Some(user)).await, 200);
    }
    let d = initialize(&client, &url, Some("d")).await.unwrap();
    let (b, b_session) = &sessions[1];
    assert_eq!(use_session(&client, &url, b_session, Some(b)).await, 404);
    // Then the least recently used: `a`.
    assert_eq!(use_session(&client, &url, &d, Some("d")).await, 200);
    initialize(&client, &url, Some("e")).await.unwrap();
    let (a, a_session) = &sessions[0];
    assert_eq!(use_session(&client, &url, a_session, Some(a)).await, 404);
    let (c, c_session) = &sessions[2];
    assert_eq!(use_session(&client, &url, c_session, Some(c)).await, 200);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_server_out_of_file_descriptors_evicts_idle_connections_for_new_clients() {
    // The server may open 128 files; it gets more idle connections than that.
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(r#"ulimit -n 128 && exec "$0" --http 127.0.0.1:0 --store memory"#)
        .arg(support::example("conformance-server"));
    let fixture = HttpFixture::spawn(command).await;
    let url = fixture.url.clone();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    for id in 0..3 {
        let response = tokio::time::timeout(
            Duration::from_secs(10),
            stateless(&url, id, "server/discover", json!({}), &[]).send(),
        )
        .await
        .expect("a normal request waited behind idle connections")
        .unwrap();
        assert_eq!(response.status(), 200);
    }
    drop(idle);
    fixture.kill().await;
}

// ---- Media types ----

/// A `server/discover` POST with the given `Content-Type` and `Accept` (`None`: no header).
async fn discover_with(
    url: &str,
    content_type: Option<&str>,
    accept: Option<&str>,
) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": tasks_meta()}});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("mcp-protocol-version", V2026)
        .header("mcp-method", "server/discover")
        .body(body.to_string());
    if let Some(t) = content_type {
        request = request.header("content-type", t);
    }
    if let Some(a) = accept {
        request = request.header("accept", a);
    }
    json_of(request.send().await.unwrap()).await
}

/// The status of a session's GET stream opened with `accept`.
async fn get_with(url: &str, session: &str, accept: &str) -> u16 {
    reqwest::Client::new()
        .get(url)
        .header("accept", accept)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", V2025)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn wrong_media_types_get_415_and_406_with_json_rpc_errors() {
    let (handle, url) = start(HttpConfig::new()).await;
    let both = Some("application/json, text/event-stream");
    let json_ct = Some("application/json");
    assert_eq!(discover_with(&url, json_ct, both).await.0, 200);
    assert_eq!(
        discover_with(&url, Some("application/json; charset=utf-8"), both)
            .await
            .0,
        200
    );
    for content_type in [None, Some("text/plain"), Some("application/jsonl")] {
        let (status, body) = discover_with(&url, content_type, both).await;
        assert_eq!(status, 415, "{content_type:?}: {body}");
        assert_eq!(
            (&body["id"], &body["error"]["code"]),
            (&Value::Null, &json!(-32600))
        );
    }
    for accept in [
        None,
        Some("application/json"),
        Some("text/event-stream"),
        Some("*/*"),
    ] {
        let (status, body) = discover_with(&url, json_ct, accept).await;
        assert_eq!(status, 406, "{accept:?}: {body}");
        assert_eq!(body["error"]["code"], -32600, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Accept")
        );
    }
    let client = reqwest::Client::new();
    let session = initialize(&client, &url, None).await.unwrap();
    assert_eq!(get_with(&url, &session, "application/json").await, 406);
    assert_eq!(get_with(&url, &session, "*/*").await, 406);
    let stream = session_get(&client, &url, &session).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    drop(stream);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_lenient_switch_takes_a_missing_accept_and_wildcards() {
    let (handle, url) = start(HttpConfig::new().lenient_accept(true)).await;
    let json_ct = Some("application/json");
    for accept in [None, Some("*/*"), Some("application/*, text/*")] {
        let (status, body) = discover_with(&url, json_ct, accept).await;
        assert_eq!(status, 200, "{accept:?}: {body}");
    }
    // What it names must still be right, and so must the Content-Type.
    assert_eq!(
        discover_with(&url, json_ct, Some("application/json"))
            .await
            .0,
        406
    );
    assert_eq!(discover_with(&url, None, None).await.0, 415);
    let session = initialize(&reqwest::Client::new(), &url, None)
        .await
        .unwrap();
    assert_eq!(get_with(&url, &session, "application/json").await, 406);
    assert_eq!(get_with(&url, &session, "*/*").await, 200);
    handle.shutdown().await.unwrap();
}

// ---- Reused request ids ----

#[tokio::test]
async fn a_reused_id_on_a_session_is_refused_while_its_request_is_in_flight() {
    let (handle, url) = start(HttpConfig::new()).await;
    let client = reqwest::Client::new();
    let session = initialize(&client, &url, None).await.unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "wait_here", "arguments": {}}});
    let first = tokio::spawn(session_post(&client, &url, &session, V2025, &call).send());
    tokio::time::timeout(Duration::from_secs(10), async {
        while !WAITING.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the first call runs");

    let again = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    let (status, refused) = json_of(
        session_post(&client, &url, &session, V2025, &again)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &refused["id"]), (200, &json!(9)), "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in use")
    );

    // The first request is still the one its id names: cancelling it ends it, unanswered.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 9}});
    let status = session_post(&client, &url, &session, V2025, &cancel)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 202);
    let first = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the cancelled call ended")
        .unwrap()
        .unwrap();
    assert_eq!(first.status(), 204);
    handle.shutdown().await.unwrap();
}

// ---- Requestors of anonymous clients ----

fn quota_server(burst: u32) -> ServerBuilder {
    Server::builder()
        .name("http-hardening")
        .registry_tools()
        .quotas(mcp_tasks::quota::QuotaConfig {
            creation_rate: Some(0.001),
            creation_burst: burst,
            ..mcp_tasks::quota::QuotaConfig::default()
        })
}

/// A 2026-07-28 `long_job` task created by `client` with `headers`: the HTTP status and the
/// error's `data.limit`, if refused.
async fn create_as(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "long_job", "arguments": {}, "_meta": tasks_meta()}});
    let mut request = post(client, url, &call)
        .header("mcp-protocol-version", V2026)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "long_job");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let (status, body) = json_of(request.send().await.unwrap()).await;
    (status, body["error"]["data"]["limit"].clone())
}

#[tokio::test]
async fn anonymous_2026_clients_are_charged_by_their_address() {
    let (handle, url) = serve(quota_server(2), HttpConfig::new()).await;
    let (one, two) = (client_from([127, 0, 0, 1]), client_from([127, 0, 0, 2]));
    for _ in 0..2 {
        assert_eq!(create_as(&one, &url, &[]).await.0, 200);
    }
    assert_eq!(
        create_as(&one, &url, &[]).await,
        (429, json!("creationRate"))
    );
    // Another address has a quota of its own.
    assert_eq!(create_as(&two, &url, &[]).await.0, 200);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_trusted_proxy_names_the_client_and_any_other_peer_is_the_client() {
    let config = HttpConfig::new().trusted_proxies(
        [std::net::IpAddr::from([127, 0, 0, 3])],
        mcp_tasks::transport::http::ProxyHeader::XForwardedFor,
    );
    let (handle, url) = serve(quota_server(1), config).await;
    let (proxy, other) = (client_from([127, 0, 0, 3]), client_from([127, 0, 0, 4]));
    let from = |client: &'static str| [("x-forwarded-for", client)];
    assert_eq!(create_as(&proxy, &url, &from("10.0.0.1")).await.0, 200);
    assert_eq!(create_as(&proxy, &url, &from("10.0.0.1")).await.0, 429);
    // What the client wrote itself before the proxy's entry does not count.
    assert_eq!(
        create_as(&proxy, &url, &from("10.0.0.2, 10.0.0.1")).await.0,
        429
    );
    assert_eq!(create_as(&proxy, &url, &from("10.0.0.2")).await.0, 200);
    // A peer that is not a trusted proxy is the client, whatever it forwards.
    assert_eq!(create_as(&other, &url, &from("10.0.0.5")).await.0, 200);
    assert_eq!(create_as(&other, &url, &from("10.0.0.6")).await.0, 429);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_anonymous_requestor_key_is_pluggable() {
    let config = HttpConfig::new()
        .anonymous_requestor(|headers, _| Some(headers.get("x-tenant")?.to_str().ok()?.to_owned()));
    let (handle, url) = serve(quota_server(1), config).await;
    let client = reqwest::Client::new();
    assert_eq!(create_as(&client, &url, &[("x-tenant", "a")]).await.0, 200);
    assert_eq!(create_as(&client, &url, &[("x-tenant", "a")]).await.0, 429);
    assert_eq!(create_as(&client, &url, &[("x-tenant", "b")]).await.0, 200);
    // No key: the address.
    assert_eq!(create_as(&client, &url, &[]).await.0, 200);
    assert_eq!(create_as(&client, &url, &[]).await.0, 429);
    handle.shutdown().await.unwrap();
}

/// A 2025-11-25 task-augmented `long_job` on `session`: the error's `data.limit`, `null`
/// when the task was created.
async fn create_on(client: &reqwest::Client, url: &str, session: &str) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "long_job", "arguments": {}, "task": {}}});
    let (status, body) = json_of(
        session_post(client, url, session, V2025, &call)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    if body["error"].is_null() {
        assert!(body["result"]["task"]["taskId"].is_string(), "{body}");
    }
    body["error"]["data"]["limit"].clone()
}

#[tokio::test]
async fn new_sessions_of_one_address_share_its_quotas() {
    let (handle, url) = serve(quota_server(2), HttpConfig::new()).await;
    let (one, two) = (client_from([127, 0, 0, 1]), client_from([127, 0, 0, 2]));
    let first = initialize(&one, &url, None).await.unwrap();
    assert_eq!(create_on(&one, &url, &first).await, Value::Null);
    assert_eq!(create_on(&one, &url, &first).await, Value::Null);
    assert_eq!(create_on(&one, &url, &first).await, "creationRate");
    let second = initialize(&one, &url, None).await.unwrap();
    assert_eq!(create_on(&one, &url, &second).await, "creationRate");
    let elsewhere = initialize(&two, &url, None).await.unwrap();
    assert_eq!(create_on(&two, &url, &elsewhere).await, Value::Null);
    handle.shutdown().await.unwrap();
}

// ---- Store outages ----

/// The memory store behind a switch that makes every operation fail as a lost backend does.
struct Failing {
    inner: mcp_tasks_runtime::store::MemoryTaskStore,
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

mod failing {
    use super::Failing;
    use mcp_tasks_runtime::store::{
        Changes, ClaimStore, ScanTasks, StoreError, TaskCounts, TaskFilter, TaskPage, TaskStore,
    };
    use mcp_tasks_runtime::task::TaskRecord;
    use std::sync::atomic::Ordering;
    use std::time::SystemTime;

    impl Failing {
        fn check(&self) -> Result<(), StoreError> {
            if self.down.load(Ordering::SeqCst) {
                Err(StoreError::Unavailable("connection refused".into()))
            } else {
                Ok(())
            }
        }
    }

    impl TaskStore for Failing {
        async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
            self.check()?;
            self.inner.create(record).await
        }
        async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
            self.check()?;
            self.inner.get(id).await
        }
        async fn compare_and_set(
            &self,
            record: TaskRecord,
            expected: u64,
        ) -> Result<bool, StoreError> {
            self.check()?;
            self.inner.compare_and_set(record, expected).await
        }
        async fn delete(&self, id: &str) -> Result<bool, StoreError> {
            self.check()?;
            self.inner.delete(id).await
        }
        async fn list(
            &self,
            owner: Option<&str>,
            cursor: Option<&str>,
            limit: usize,
        ) -> Result<TaskPage, StoreError> {
            self.check()?;
            self.inner.list(owner, cursor, limit).await
        }
        async fn expire(&self, now: SystemTime, limit: usize) -> Result<Vec<String>, StoreError> {
            self.check()?;
            self.inner.expire(now, limit).await
        }
        async fn unfinished(&self) -> Result<Vec<TaskRecord>, StoreError> {
            self.check()?;
            self.inner.unfinished().await
        }
    }

    impl ScanTasks for Failing {
        async fn scan(
            &self,
            filter: &TaskFilter,
            cursor: Option<&str>,
            limit: usize,
        ) -> Result<TaskPage, StoreError> {
            self.check()?;
            self.inner.scan(filter, cursor, limit).await
        }
        async fn count(&self) -> Result<TaskCounts, StoreError> {
            self.check()?;
            self.inner.count().await
        }
    }

    impl ClaimStore for Failing {
        async fn claim(
            &self,
            worker: &str,
            until: SystemTime,
            limit: usize,
            skip: &[String],
        ) -> Result<Vec<TaskRecord>, StoreError> {
            self.check()?;
            self.inner.claim(worker, until, limit, skip).await
        }
        async fn lapsed(
            &self,
            now: SystemTime,
            limit: usize,
        ) -> Result<Vec<TaskRecord>, StoreError> {
            self.check()?;
            self.inner.lapsed(now, limit).await
        }
        async fn changes(&self, cursor: Option<u64>, limit: usize) -> Result<Changes, StoreError> {
            self.check()?;
            self.inner.changes(cursor, limit).await
        }
        fn is_shared(&self) -> bool {
            self.inner.is_shared()
        }
    }
}

#[tokio::test]
async fn a_2026_answer_the_store_could_not_give_is_503_with_retry_after() {
    let store = Failing {
        inner: mcp_tasks_runtime::store::MemoryTaskStore::new(),
        down: Default::default(),
    };
    let down = std::sync::Arc::clone(&store.down);
    let builder = Server::builder()
        .name("http-hardening")
        .registry_tools()
        .store(store);
    let (handle, url) = serve(builder, HttpConfig::new()).await;
    let task = create_task(&url).await;

    down.store(true, std::sync::atomic::Ordering::SeqCst);
    let get = stateless(&url, 2, "tasks/get", json!({"taskId": task}), &[]);
    let call = json!({"name": "long_job", "arguments": {}});
    let create = stateless(&url, 3, "tools/call", call, &[("mcp-name", "long_job")]);
    for (id, request) in [(2, get), (3, create)] {
        let response = request.send().await.unwrap();
        assert_eq!(response.headers()["retry-after"], "1");
        let (status, body) = json_of(response).await;
        assert_eq!((status, &body["id"]), (503, &json!(id)), "{body}");
        assert_eq!(body["error"]["code"], -32000, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("task store unavailable"), "{message}");
    }

    // Back up: answered as before.
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    let response = stateless(&url, 4, "tasks/get", json!({"taskId": task}), &[])
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("retry-after").is_none());
    let (status, body) = json_of(response).await;
    assert_eq!((status, &body["result"]["taskId"]), (200, &json!(task)));
    handle.shutdown().await.unwrap();
}

/// The method of each request an authenticator saw, and the address it was told.
type Told = Vec<(String, Option<std::net::SocketAddr>)>;

/// Accepts every request, as a principal named after the address it was told the request
/// came from, and keeps the addresses it was told.
#[derive(Clone, Default)]
struct PeerNamer(std::sync::Arc<std::sync::Mutex<Told>>);

impl mcp_tasks::transport::http::Authenticate for PeerNamer {
    fn authenticate<'a>(
        &'a self,
        request: mcp_tasks::transport::http::RequestParts<'a>,
    ) -> mcp_tasks::context::BoxFuture<
        'a,
        Result<
            Option<mcp_tasks::transport::http::Principal>,
            mcp_tasks::transport::http::AuthError,
        >,
    > {
        let told = (request.method.to_string(), request.peer);
        self.0.lock().unwrap().push(told);
        let name = request.peer.map(|p| p.ip().to_string());
        Box::pin(async move { Ok(name.map(mcp_tasks::transport::http::Principal::new)) })
    }
}

#[tokio::test]
async fn an_authenticator_is_told_the_client_s_address_on_the_endpoint_s_every_method() {
    let namer = PeerNamer::default();
    let config = HttpConfig::new().authenticate(namer.clone());
    let (handle, url) = serve(quota_server(100), config).await;
    let client = client_from([127, 0, 0, 7]);
    // The endpoint's POST (answered without the router) and its GET and DELETE (through it).
    assert_eq!(create_as(&client, &url, &[]).await.0, 200);
    let get = client.get(&url).header("accept", "text/event-stream");
    let get = get.send().await.unwrap().status();
    let delete = client.delete(&url).send().await.unwrap().status();
    assert!(
        get.is_client_error() && delete.is_client_error(),
        "{get} {delete}"
    );
    let told = namer.0.lock().unwrap().clone();
    let methods: Vec<&str> = told.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(methods, ["POST", "GET", "DELETE"]);
    for (method, peer) in &told {
        let ip = peer.map(|p| p.ip());
        assert_eq!(ip, Some(std::net::IpAddr::from([127, 0, 0, 7])), "{method}");
    }
    handle.shutdown().await.unwrap();
}
