//! Load over loopback HTTP: sync tool calls, task creates and `tasks/get`, for both protocol
//! eras, at 1, 16 and 64 concurrent clients (each with its own keep-alive connection).
//!
//! ```text
//! cargo bench -p mcp-tasks-e2e --bench http                 # both tables (a few seconds per row)
//! MCP_BENCH_SECS=0.5 cargo bench -p mcp-tasks-e2e --bench http
//! MCP_BENCH_HTTP=prebuilt cargo bench -p mcp-tasks-e2e --bench http   # only the pre-built-request table
//! MCP_BENCH_HTTP=clients cargo bench -p mcp-tasks-e2e --bench http    # only the JSON-client table
//! # the pre-built table in three rounds of interleaved pairs, medians (the figures to compare):
//! MCP_BENCH_HTTP=prebuilt MCP_BENCH_ROUNDS=3 MCP_BENCH_SECS=2 cargo bench -p mcp-tasks-e2e --bench http
//! # the same with every server of the run (and the load generator) on mimalloc:
//! MCP_BENCH_HTTP=prebuilt MCP_BENCH_ROUNDS=3 MCP_BENCH_SECS=2 \
//!     cargo bench -p mcp-tasks-e2e --bench http --features mimalloc
//! # sync calls of the fixture tool `test_simple_text` on conformance servers already running:
//! MCP_BENCH_PEERS="mcp-tasks=http://127.0.0.1:3000/mcp;rmcp=http://127.0.0.1:8001/mcp" \
//!     cargo bench -p mcp-tasks-e2e --bench http
//! # rows of the first table whose server and operation contain MCP_BENCH_OP ("sync",
//! # "2025-11-25 tasks/get", …), a fixed number of requests (for instruction profiles):
//! MCP_BENCH_HTTP=prebuilt MCP_BENCH_OP="2026-07-28 sync" MCP_BENCH_CONNECTIONS=16 \
//!     MCP_BENCH_COUNT=2000 valgrind --tool=callgrind target/release/deps/http-…
//! ```
//!
//! Prints two Markdown tables. The first drives the server with pre-built requests over raw
//! keep-alive connections from one thread (the load generator does next to nothing per
//! request, so the server is the limit) and puts beside it a bare hyper server and a bare
//! axum server, each answering a fixed JSON body: the hyper one is the physical limit of
//! HTTP on this machine, the axum one what a router adds to it. Each row is run right after
//! a run of the hyper echo and its "÷ hyper echo" is the ratio to that run (interleaved
//! pairs); `MCP_BENCH_ROUNDS=N` repeats the pairs N times and prints the medians. The echo's
//! own row, and by default its paired runs, POST `{}` without the MCP headers;
//! `MCP_BENCH_ECHO=same` makes each paired run send the row's own request instead (its
//! headers and body, byte for byte), so that the ratio leaves out what reading that request
//! costs hyper. The second table uses a JSON HTTP client per connection, as a real client
//! would.

use mcp_tasks::prelude::*;
use mcp_tasks::transport::http::HttpConfig;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// With `--features mimalloc`, every server of the run (ours and the echoes) allocates with
/// mimalloc.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Answers at once.
#[task_tool(mode = "forbidden")]
async fn echo(text: String) -> String {
    text
}

/// A task that finishes at once.
#[task_tool(mode = "required", poll_interval = "1s")]
async fn quick_job() -> &'static str {
    "done"
}

const V2026: &str = "2026-07-28";
const V2025: &str = "2025-11-25";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Era {
    Stateless,
    Stateful,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    SyncCall,
    TaskCreate,
    TaskGet,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::SyncCall => "sync tools/call",
            Op::TaskCreate => "task create",
            Op::TaskGet => "tasks/get",
        }
    }
}

/// One client: its own connection, and for 2025-11-25 its own session.
struct Client {
    http: reqwest::Client,
    url: String,
    era: Era,
    session: Option<String>,
    task_id: String,
    next_id: u64,
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        }
    })
}

impl Client {
    async fn new(url: &str, era: Era) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        let mut client = Self {
            http,
            url: url.to_owned(),
            era,
            session: None,
            task_id: String::new(),
            next_id: 0,
        };
        if era == Era::Stateful {
            let response = client
                .http
                .post(&client.url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(
                    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                        "protocolVersion": V2025, "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "1"}}})
                    .to_string(),
                )
                .send()
                .await
                .unwrap();
            client.session = Some(
                response.headers()["mcp-session-id"]
                    .to_str()
                    .unwrap()
                    .to_owned(),
            );
            response.bytes().await.unwrap();
        }
        let created = client.call(Op::TaskCreate).await;
        client.task_id = match era {
            Era::Stateless => created["result"]["taskId"].as_str(),
            Era::Stateful => created["result"]["task"]["taskId"].as_str(),
        }
        .unwrap_or_else(|| panic!("no task created: {created}"))
        .to_owned();
        client
    }

    async fn call(&mut self, op: Op) -> Value {
        self.next_id += 1;
        let (method, mut params, name) = match op {
            Op::SyncCall => (
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "hi"}}),
                "echo".to_owned(),
            ),
            Op::TaskCreate => (
                "tools/call",
                json!({"name": "quick_job", "arguments": {}}),
                "quick_job".to_owned(),
            ),
            Op::TaskGet => (
                "tasks/get",
                json!({"taskId": self.task_id}),
                self.task_id.clone(),
            ),
        };
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        match self.era {
            Era::Stateless => {
                params["_meta"] = meta();
                request = request
                    .header("mcp-protocol-version", V2026)
                    .header("mcp-method", method)
                    .header("mcp-name", name);
            }
            Era::Stateful => {
                // An hour, as the 2026-07-28 tasks get by default: the task `new` makes is
                // read for as long as the bench runs, minutes with several rounds.
                if matches!(op, Op::TaskCreate) {
                    params["task"] = json!({"ttl": 3_600_000});
                }
                request = request
                    .header("mcp-protocol-version", V2025)
                    .header("mcp-session-id", self.session.as_deref().unwrap());
            }
        }
        let body =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let response = request.body(body.to_string()).send().await.unwrap();
        let bytes = response.bytes().await.unwrap();
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(value.get("result").is_some(), "{op:?}: {value}");
        value
    }
}

struct Row {
    requests: usize,
    latencies: Vec<Duration>,
}

impl Row {
    /// The row of every request's latency, in any order.
    fn of(mut latencies: Vec<Duration>) -> Self {
        latencies.sort();
        Self {
            requests: latencies.len(),
            latencies,
        }
    }
}

async fn measure(url: &str, era: Era, op: Op, clients: usize, secs: f64) -> Row {
    let mut workers = Vec::new();
    let start_line = std::sync::Arc::new(tokio::sync::Barrier::new(clients));
    for _ in 0..clients {
        let url = url.to_owned();
        let barrier = std::sync::Arc::clone(&start_line);
        workers.push(tokio::spawn(async move {
            let mut client = Client::new(&url, era).await;
            for _ in 0..20 {
                client.call(op).await;
            }
            barrier.wait().await;
            let until = Instant::now() + Duration::from_secs_f64(secs);
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let t = Instant::now();
                client.call(op).await;
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for w in workers {
        latencies.extend(w.await.unwrap());
    }
    Row::of(latencies)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// The load generator of the first table: pre-built HTTP/1.1 requests over raw keep-alive
/// connections, all driven from one thread, so that the server is the limit.
mod prebuilt {
    use super::{Row, V2026, meta};
    use serde_json::{Value, json};
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// One complete request: request line, headers and body.
    pub(super) fn request(addr: SocketAddr, headers: &[(&str, &str)], body: &Value) -> Vec<u8> {
        let body = body.to_string();
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body.as_bytes());
        bytes
    }

    /// A 2026-07-28 request with its full header set.
    pub(super) fn stateless(addr: SocketAddr, method: &str, name: &str, params: Value) -> Vec<u8> {
        let mut params = params;
        params["_meta"] = meta();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        request(
            addr,
            &[
                ("mcp-protocol-version", V2026),
                ("mcp-method", method),
                ("mcp-name", name),
            ],
            &body,
        )
    }

    /// Sends one request and reads its response; returns the response body.
    pub(super) async fn exchange(
        stream: &mut TcpStream,
        request: &[u8],
        buf: &mut Vec<u8>,
    ) -> std::io::Result<Vec<u8>> {
        read_exchange(stream, request, buf, false)
            .await
            .map(|(_, body)| body)
    }

    /// [`exchange`], with the response's head. A body is read up to its `Content-Length`,
    /// or, sent in chunks (a stream of server-sent events), up to its last chunk, and then
    /// given as it came, chunk sizes and all.
    pub(super) async fn exchange_with_head(
        stream: &mut TcpStream,
        request: &[u8],
        buf: &mut Vec<u8>,
    ) -> std::io::Result<(String, Vec<u8>)> {
        read_exchange(stream, request, buf, true).await
    }

    /// [`exchange_with_head`]; the head is copied only when `keep_head` asks for it, so the
    /// load generator's own share of a measured request stays small.
    async fn read_exchange(
        stream: &mut TcpStream,
        request: &[u8],
        buf: &mut Vec<u8>,
        keep_head: bool,
    ) -> std::io::Result<(String, Vec<u8>)> {
        stream.write_all(request).await?;
        buf.clear();
        let (head, head_len, body_len) = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&buf[..end]).expect("response head is text");
                assert!(
                    head.starts_with("HTTP/1.1 2"),
                    "unexpected response: {head}"
                );
                let (mut length, mut chunked) = (None, false);
                for (name, value) in head.lines().filter_map(|line| line.split_once(':')) {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse::<usize>().ok();
                    } else if name.eq_ignore_ascii_case("transfer-encoding") {
                        chunked = value.contains("chunked");
                    }
                }
                let head = if keep_head {
                    head.to_owned()
                } else {
                    String::new()
                };
                break (head, end + 4, (!chunked).then(|| length.unwrap_or(0)));
            }
            read_more(stream, buf).await?;
        };
        let end = match body_len {
            Some(length) => {
                while buf.len() < head_len + length {
                    read_more(stream, buf).await?;
                }
                head_len + length
            }
            None => loop {
                if buf[head_len..].ends_with(b"0\r\n\r\n") {
                    break buf.len();
                }
                read_more(stream, buf).await?;
            },
        };
        Ok((head, buf[head_len..end].to_vec()))
    }

    /// The JSON message of a response body: the body itself, or the first `data:` line of
    /// an event stream that holds a message.
    pub(super) fn message(body: &[u8]) -> Value {
        if let Ok(value) = serde_json::from_slice(body) {
            return value;
        }
        String::from_utf8_lossy(body)
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| serde_json::from_str(data.trim()).ok())
            .unwrap_or_else(|| panic!("no message in {}", String::from_utf8_lossy(body)))
    }

    /// Set by the peer table: acknowledge every segment at once (`TCP_QUICKACK`, which
    /// Linux clears after each read), so that a server writing one answer in several small
    /// segments without `TCP_NODELAY` is not held by Nagle's algorithm waiting for a delayed
    /// acknowledgement (40 ms a request).
    pub(super) static QUICKACK: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
        buf.reserve(16 * 1024);
        if stream.read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if QUICKACK.load(std::sync::atomic::Ordering::Relaxed) {
            socket2::SockRef::from(&*stream).set_tcp_quickack(true)?;
        }
        Ok(())
    }

    /// Opens a kept-alive connection.
    pub(super) async fn connect(addr: SocketAddr) -> TcpStream {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        stream
    }

    /// Sends `requests` over `connections` connections for `secs`, from one thread (the
    /// connection `i` sends the request `i` modulo their number), and checks the first answer
    /// on each with `check`.
    pub(super) fn measure(
        addr: SocketAddr,
        requests: Vec<Vec<u8>>,
        connections: usize,
        secs: f64,
        check: fn(&Value) -> bool,
    ) -> Row {
        let requests: Vec<Arc<[u8]>> = requests.into_iter().map(Into::into).collect();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("load generator runtime");
            runtime.block_on(async move {
                let start_line = Arc::new(tokio::sync::Barrier::new(connections));
                let mut workers = Vec::new();
                for i in 0..connections {
                    let request = Arc::clone(&requests[i % requests.len()]);
                    let barrier = Arc::clone(&start_line);
                    workers.push(tokio::spawn(async move {
                        let mut stream = connect(addr).await;
                        let mut buf = Vec::with_capacity(16 * 1024);
                        let first = exchange(&mut stream, &request, &mut buf).await.unwrap();
                        let value = message(&first);
                        assert!(check(&value), "unexpected answer: {value}");
                        for _ in 0..50 {
                            exchange(&mut stream, &request, &mut buf).await.unwrap();
                        }
                        barrier.wait().await;
                        let until = Instant::now() + Duration::from_secs_f64(secs);
                        // A fixed count instead of a duration, for instruction-count profiles.
                        let count: Option<usize> = std::env::var("MCP_BENCH_COUNT")
                            .ok()
                            .and_then(|c| c.parse().ok());
                        let mut latencies = Vec::with_capacity(1 << 16);
                        while count.map_or(Instant::now() < until, |c| latencies.len() < c) {
                            let t = Instant::now();
                            exchange(&mut stream, &request, &mut buf).await.unwrap();
                            latencies.push(t.elapsed());
                        }
                        latencies
                    }));
                }
                let mut latencies = Vec::new();
                for w in workers {
                    latencies.extend(w.await.unwrap());
                }
                Row::of(latencies)
            })
        })
        .join()
        .expect("load generator")
    }

    /// A bare hyper server answering every request with `body` once it has read the
    /// request's body: the physical limit of one loopback HTTP/1.1 request here, with no
    /// router or middleware.
    pub(super) async fn hyper_echo_server(body: Vec<u8>) -> SocketAddr {
        use http_body_util::{BodyExt, Full};
        let body = hyper::body::Bytes::from(body);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let body = body.clone();
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let body = body.clone();
                        async move {
                            request.into_body().collect().await?;
                            let mut response = hyper::Response::new(Full::new(body));
                            response.headers_mut().insert(
                                hyper::header::CONTENT_TYPE,
                                hyper::header::HeaderValue::from_static("application/json"),
                            );
                            Ok::<_, hyper::Error>(response)
                        }
                    },
                );
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        addr
    }

    /// A bare axum server answering every POST with `body`: hyper with a router.
    pub(super) async fn echo_server(body: Vec<u8>) -> SocketAddr {
        use axum::serve::ListenerExt;
        let body = axum::body::Bytes::from(body);
        let app = axum::Router::new().route(
            "/mcp",
            axum::routing::post(move |_request: axum::body::Bytes| {
                let body = body.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        body,
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }
}

/// The first table: pre-built requests of both eras against the server (a 2025-11-25
/// session shared by every connection), and the same load against a bare hyper server and
/// a bare axum server, both answering the server's own 2026-07-28 sync-call response.
async fn prebuilt_table(url: &str, secs: f64) {
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .expect("server address");
    let sync = prebuilt::stateless(
        addr,
        "tools/call",
        "echo",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    );
    let create = prebuilt::stateless(
        addr,
        "tools/call",
        "quick_job",
        json!({"name": "quick_job", "arguments": {}}),
    );
    let mut stream = prebuilt::connect(addr).await;
    let mut buf = Vec::new();
    let created: Value = serde_json::from_slice(
        &prebuilt::exchange(&mut stream, &create, &mut buf)
            .await
            .unwrap(),
    )
    .unwrap();
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task created: {created}"))
        .to_owned();
    let get = prebuilt::stateless(addr, "tasks/get", &task_id, json!({"taskId": task_id}));
    // The echo answers with the server's own answer to a sync call, byte for byte.
    let answer = prebuilt::exchange(&mut stream, &sync, &mut buf)
        .await
        .unwrap();
    drop(stream);
    let hyper_echo = prebuilt::hyper_echo_server(answer.clone()).await;
    let hyper_echo_sync = prebuilt::request(hyper_echo, &[], &json!({}));
    let echo = prebuilt::echo_server(answer).await;
    let echo_sync = prebuilt::request(echo, &[], &json!({}));
    // 2025-11-25: one session, opened (with a task made) by a JSON client, that every
    // connection's requests name, each connection with request ids of its own (an id may
    // not be in flight twice on one session).
    let stateful = Client::new(url, Era::Stateful).await;
    let session = stateful.session.clone().expect("a 2025-11-25 session");
    let headers = [
        ("mcp-protocol-version", V2025),
        ("mcp-session-id", session.as_str()),
    ];
    let stateful_request = |method: &str, params: Value| -> Vec<Vec<u8>> {
        (1..=64)
            .map(|id| {
                let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
                prebuilt::request(addr, &headers, &body)
            })
            .collect()
    };
    let sync_2025 = stateful_request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    );
    let get_2025 = stateful_request("tasks/get", json!({"taskId": stateful.task_id}));

    fn has_result(v: &Value) -> bool {
        v.get("result").is_some()
    }
    let rounds: usize = std::env::var("MCP_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    // The paired echo runs send the row's own request rather than `{}`.
    let same_request = std::env::var("MCP_BENCH_ECHO").is_ok_and(|v| v == "same");
    let echo_column = if same_request {
        "÷ hyper echo of the same request"
    } else {
        "÷ hyper echo"
    };
    println!("| server | operation | connections | requests/s | {echo_column} | p50 | p99 |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for connections in connection_counts() {
        let (hyper_echo_sync, echo_sync, sync, get) = (
            vec![hyper_echo_sync.clone()],
            vec![echo_sync.clone()],
            vec![sync.clone()],
            vec![get.clone()],
        );
        let rows: [(&str, &str, std::net::SocketAddr, &Vec<Vec<u8>>); 6] = [
            (
                "bare hyper, fixed body",
                "POST /mcp",
                hyper_echo,
                &hyper_echo_sync,
            ),
            ("bare axum, fixed body", "POST /mcp", echo, &echo_sync),
            ("mcp-tasks 2026-07-28", "sync tools/call", addr, &sync),
            ("mcp-tasks 2026-07-28", "tasks/get", addr, &get),
            ("mcp-tasks 2025-11-25", "sync tools/call", addr, &sync_2025),
            ("mcp-tasks 2025-11-25", "tasks/get", addr, &get_2025),
        ];
        let only = std::env::var("MCP_BENCH_OP").unwrap_or_default();
        let run = |target, request: &Vec<Vec<u8>>| {
            let request = request.clone();
            // The load generator blocks its own thread, never one of the server's workers.
            tokio::task::spawn_blocking(move || {
                prebuilt::measure(target, request, connections, secs, has_result)
            })
        };
        // Each row but the echo's own is measured right after a run of the hyper echo, and
        // its ratio is to that run: the machine's drift from one row to the next, which is
        // as large as the differences measured, stays out of the ratio. Over several rounds
        // a row gives the median of its rates and of its ratios.
        // Rows left out by `MCP_BENCH_OP` are not run, and the echo runs beside the others
        // only while its own row is in (a profile of one row has no other load in it).
        let selected = |(server, op, _, _): &(&str, &str, _, _)| {
            only.is_empty() || format!("{server} {op}").contains(&only)
        };
        let paired = selected(&rows[0]);
        let mut measured: Vec<Vec<(f64, Option<f64>, Row)>> =
            rows.iter().map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            for (i, row) in rows.iter().enumerate() {
                if !selected(row) {
                    continue;
                }
                let (_, _, target, request) = row;
                let echo = if i == 0 || !paired {
                    None
                } else {
                    let paired = if same_request {
                        request
                    } else {
                        &hyper_echo_sync
                    };
                    let echo = run(hyper_echo, paired).await.unwrap();
                    Some(echo.requests as f64 / secs)
                };
                let row = run(*target, request).await.unwrap();
                measured[i].push((row.requests as f64 / secs, echo, row));
            }
        }
        for ((server, op, _, _), runs) in rows.iter().zip(measured) {
            if runs.is_empty() {
                continue;
            }
            let rate = median(runs.iter().map(|(rate, _, _)| *rate).collect());
            let ratios: Vec<f64> = runs
                .iter()
                .filter_map(|(rate, echo, _)| echo.map(|e| rate / e))
                .collect();
            let ratio = if ratios.is_empty() {
                "—".to_owned()
            } else {
                format!("{:.2}", median(ratios))
            };
            let latencies = Row::of(
                runs.into_iter()
                    .flat_map(|(_, _, row)| row.latencies)
                    .collect(),
            );
            println!(
                "| {server} | {op} | {connections} | {rate:.0} | {ratio} | {:.3} ms | {:.3} ms |",
                percentile(&latencies.latencies, 0.50).as_secs_f64() * 1e3,
                percentile(&latencies.latencies, 0.99).as_secs_f64() * 1e3,
            );
        }
    }
}

/// The median of some values (the mean of the middle two when they are even in number).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The connection counts of the pre-built rows: `MCP_BENCH_CONNECTIONS` (`1,16`), or 1, 16
/// and 64.
fn connection_counts() -> Vec<usize> {
    match std::env::var("MCP_BENCH_CONNECTIONS") {
        Ok(list) => list.split(',').filter_map(|n| n.parse().ok()).collect(),
        Err(_) => vec![1, 16, 64],
    }
}

/// Synchronous `tools/call`s of the fixture tool `test_simple_text` against each server of
/// `MCP_BENCH_PEERS` (`label=http://127.0.0.1:PORT/mcp`, separated by `;`), one after the
/// other at 1, 16 and 64 connections, on one 2025-11-25 session per server with pre-built
/// requests: this crate's `conformance-server` beside another SDK's server of the same
/// fixture tools.
async fn peer_table(peers: &str, secs: f64) {
    prebuilt::QUICKACK.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut servers = Vec::new();
    for peer in peers.split(';').filter(|p| !p.is_empty()) {
        let (label, url) = peer.split_once('=').expect("label=url");
        let addr: std::net::SocketAddr = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .expect("a loopback address");
        let mut stream = prebuilt::connect(addr).await;
        let mut buf = Vec::new();
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": V2025, "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}});
        let (head, body) = prebuilt::exchange_with_head(
            &mut stream,
            &prebuilt::request(addr, &[], &initialize),
            &mut buf,
        )
        .await
        .unwrap();
        let session = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("{label}: no session: {head}"));
        let answer = prebuilt::message(&body);
        let version = answer["result"]["protocolVersion"]
            .as_str()
            .unwrap_or(V2025)
            .to_owned();
        let headers = [
            ("mcp-protocol-version", version.as_str()),
            ("mcp-session-id", session.as_str()),
        ];
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        prebuilt::exchange(
            &mut stream,
            &prebuilt::request(addr, &headers, &initialized),
            &mut buf,
        )
        .await
        .unwrap();
        let calls: Vec<Vec<u8>> = (1..=64)
            .map(|id| {
                let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "test_simple_text", "arguments": {}}});
                prebuilt::request(addr, &headers, &call)
            })
            .collect();
        servers.push((label.to_owned(), addr, calls));
    }
    fn has_result(v: &Value) -> bool {
        v.get("result").is_some()
    }
    println!("| server | connections | requests/s | p50 | p99 |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for connections in connection_counts() {
        for (label, addr, calls) in &servers {
            let (addr, calls) = (*addr, calls.clone());
            let row = tokio::task::spawn_blocking(move || {
                prebuilt::measure(addr, calls, connections, secs, has_result)
            })
            .await
            .unwrap();
            println!(
                "| {label} | {connections} | {:.0} | {:.3} ms | {:.3} ms |",
                row.requests as f64 / secs,
                percentile(&row.latencies, 0.50).as_secs_f64() * 1e3,
                percentile(&row.latencies, 0.99).as_secs_f64() * 1e3,
            );
        }
    }
}

fn main() {
    // With OTEL_EXPORTER_OTLP_ENDPOINT set, every request's span is exported (or, with no
    // collector there, dropped and counted): the cost of tracing on the request path.
    let otel = mcp_tasks::otel::init_export_from_env().expect("OpenTelemetry from the environment");
    let secs: f64 = std::env::var("MCP_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Ok(peers) = std::env::var("MCP_BENCH_PEERS") {
        runtime.block_on(peer_table(&peers, secs));
        return;
    }
    runtime.block_on(async {
        // The load generator is one requestor: lift the per-requestor quotas.
        let server = Server::builder()
            .name("http-bench")
            .registry_tools()
            .quotas(mcp_tasks::quota::QuotaConfig::unlimited())
            .build()
            .unwrap();
        let handle = server
            .serve_http(
                // Every client of the load generator is one anonymous requestor: lift the
                // per-client session share as well as the table's size.
                HttpConfig::new()
                    .max_sessions(1_000)
                    .max_sessions_per_client(1_000),
            )
            .await
            .unwrap();
        let url = handle.url("/mcp");
        let tables = std::env::var("MCP_BENCH_HTTP").unwrap_or_default();
        if tables != "clients" {
            prebuilt_table(&url, secs).await;
        }
        if tables == "prebuilt" {
            handle.shutdown().await.unwrap();
            return;
        }
        println!();
        println!("| era | operation | clients | requests/s | p50 | p99 |");
        println!("| --- | --- | ---: | ---: | ---: | ---: |");
        for era in [Era::Stateless, Era::Stateful] {
            for op in [Op::SyncCall, Op::TaskCreate, Op::TaskGet] {
                for clients in [1, 16, 64] {
                    let row = measure(&url, era, op, clients, secs).await;
                    let era_label = match era {
                        Era::Stateless => V2026,
                        Era::Stateful => V2025,
                    };
                    println!(
                        "| {era_label} | {} | {clients} | {:.0} | {:.2} ms | {:.2} ms |",
                        op.label(),
                        row.requests as f64 / secs,
                        percentile(&row.latencies, 0.50).as_secs_f64() * 1e3,
                        percentile(&row.latencies, 0.99).as_secs_f64() * 1e3,
                    );
                }
            }
        }
        handle.shutdown().await.unwrap();
    });
    if otel.is_some() {
        println!(
            "\nspans dropped (queue full or export failed): {}",
            mcp_tasks::otel::dropped_spans()
        );
    }
}
