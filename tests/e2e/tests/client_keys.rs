//! Idempotency keys from the client's side, against a `Server` in this process: which calls
//! carry a key in `_meta`, the handle store's pending calls, and a call whose connection
//! dropped before the answer sent again with the same key (through an HTTP proxy that drops
//! connections), by the client and by the command line.

use mcp_tasks::IDEMPOTENCY_KEY_META;
use mcp_tasks::IdempotencyKey;
use mcp_tasks::client::{CALL_ATTEMPTS, Called, ClientError, Era, HandleStore, McpClient};
use mcp_tasks::prelude::*;
use mcp_tasks::transport::http::{HttpConfig, HttpHandle};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The bound on every wait of these tests.
const WITHIN: Duration = Duration::from_secs(30);

/// Says hello, never as a task.
#[task_tool(mode = "forbidden")]
async fn hello(name: String) -> String {
    format!("Hello, {name}!")
}

/// Works a moment, always as a task.
#[task_tool(mode = "required", poll_interval = "20ms")]
async fn brief_job(label: String) -> String {
    tokio::time::sleep(Duration::from_millis(50)).await;
    format!("{label} done")
}

fn server() -> Server {
    Server::builder().registry_tools().build().unwrap()
}

/// A handle store of its own for one test.
fn store(name: &str) -> (PathBuf, Arc<HandleStore>) {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-keys-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(HandleStore::open(dir.join("handles.db")).unwrap());
    (dir, store)
}

fn deadline() -> Option<tokio::time::Instant> {
    Some(tokio::time::Instant::now() + WITHIN)
}

/// The idempotency key in a `tools/call` message's `_meta`, if any.
fn key_of(call: &Value) -> Option<&str> {
    call["params"]["_meta"][IDEMPOTENCY_KEY_META].as_str()
}

async fn finish(called: Called) -> String {
    match called {
        Called::Task(t) => match t.wait(deadline()).await.unwrap() {
            mcp_tasks::client::TaskOutcome::Completed(r) => r.text(),
            other => panic!("expected a result, got {other:?}"),
        },
        Called::Done(r) => r.text(),
    }
}

/// The `tools/call` messages a client sent, oldest first.
type Calls = Arc<Mutex<Vec<Value>>>;

/// A client of `era` talking to a fresh server through a relay that notes every
/// `tools/call`; on 2026-07-28 the relay marks `hello` as `forbidden` in `tools/list`, as a
/// server that says so would.
async fn recorded(era: Era, store: Arc<HandleStore>) -> (McpClient, Calls) {
    let (client_end, relay_client) = tokio::io::duplex(1 << 16);
    let (relay_server, server_end) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_end);
    tokio::spawn(mcp_tasks::transport::serve_io(
        server(),
        server_read,
        server_write,
    ));
    let calls = Calls::default();
    let seen = calls.clone();
    let (from_client, mut to_client) = tokio::io::split(relay_client);
    let (from_server, mut to_server) = tokio::io::split(relay_server);
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_client).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let m: Value = serde_json::from_str(&line).unwrap();
            if m["method"] == "tools/call" {
                seen.lock().unwrap().push(m);
            }
            if to_server
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    });
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_server).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut m: Value = serde_json::from_str(&line).unwrap();
            for tool in m["result"]["tools"].as_array_mut().into_iter().flatten() {
                if tool["name"] == "hello" && tool.get("execution").is_none() {
                    tool["execution"] = json!({"taskSupport": "forbidden"});
                }
            }
            if to_client
                .write_all(format!("{m}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    });
    let (read, write) = tokio::io::split(client_end);
    let client = McpClient::builder()
        .io("recorded", read, write)
        .era(era)
        .store(store)
        .connect()
        .await
        .unwrap();
    (client, calls)
}

/// A task-capable tool's call carries a fresh key in `_meta`, a forbidden one's none, and a
/// caller's own key is sent as given; once answered, no call is left pending.
#[tokio::test]
async fn task_capable_calls_carry_a_fresh_key_and_forbidden_ones_none() {
    let (dir, store) = store("meta");
    for era in [Era::V2025_11_25, Era::V2026_07_28] {
        let (client, calls) = recorded(era, store.clone()).await;
        // 2026-07-28 servers decide per call: a tool not listed yet may become a task.
        if era == Era::V2026_07_28 {
            let called = client
                .call_tool("hello", json!({"name": "Ada"}))
                .await
                .unwrap();
            assert_eq!(finish(called).await, "Hello, Ada!");
            let sent = calls.lock().unwrap().pop().unwrap();
            assert!(key_of(&sent).is_some(), "{era}: {sent}");
            client.list_tools().await.unwrap();
        }

        let called = client
            .call_tool("hello", json!({"name": "Ada"}))
            .await
            .unwrap();
        assert_eq!(finish(called).await, "Hello, Ada!");
        let called = client
            .call_tool("brief_job", json!({"label": "a"}))
            .await
            .unwrap();
        assert!(matches!(called, Called::Task(_)), "{era}: {called:?}");
        assert_eq!(finish(called).await, "a done");
        let called = client
            .call_tool("brief_job", json!({"label": "b"}))
            .await
            .unwrap();
        assert_eq!(finish(called).await, "b done");
        let mine = IdempotencyKey::new("order-1042/charge").unwrap();
        let called = client
            .call_tool_with_key("hello", json!({"name": "Bo"}), mine.clone())
            .await
            .unwrap();
        assert_eq!(finish(called).await, "Hello, Bo!");

        let sent = std::mem::take(&mut *calls.lock().unwrap());
        assert_eq!(sent.len(), 4, "{era}: {sent:?}");
        assert_eq!(key_of(&sent[0]), None, "{era}: forbidden: {}", sent[0]);
        let (a, b) = (key_of(&sent[1]), key_of(&sent[2]));
        assert!(a.is_some() && b.is_some(), "{era}: {sent:?}");
        assert_ne!(a, b, "{era}: a fresh key for every call");
        IdempotencyKey::new(a.unwrap()).expect("a valid key");
        assert_eq!(key_of(&sent[3]), Some(mine.as_str()), "{era}");
        // The progress token is still there, beside the key.
        assert!(sent[1]["params"]["_meta"]["progressToken"].is_string());
        assert!(client.pending_calls().unwrap().is_empty(), "{era}");
    }
    assert!(store.pending_calls(None).unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// An HTTP proxy in front of a server that notes every `tools/call` it passes, and closes
/// the connection of the next `drops` of them before they reach the server. Every request
/// goes to the server on a connection of its own, closed after the answer.
#[derive(Clone)]
struct Proxy {
    url: String,
    calls: Calls,
    drops: Arc<AtomicUsize>,
}

impl Proxy {
    async fn start(upstream: SocketAddr, drops: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Self {
            url: format!("http://{}/mcp", listener.local_addr().unwrap()),
            calls: Calls::default(),
            drops: Arc::new(AtomicUsize::new(drops)),
        };
        let serving = proxy.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let proxy = serving.clone();
                tokio::spawn(async move {
                    let _ = proxy.pass(socket, upstream).await;
                });
            }
        });
        proxy
    }

    fn drop_next(&self, n: usize) {
        self.drops.store(n, Ordering::SeqCst);
    }

    fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap().clone()
    }

    async fn pass(&self, mut client: TcpStream, upstream: SocketAddr) -> std::io::Result<()> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let length = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.trim()
                    .eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())
                    .flatten()
            })
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = &buf[head_end..head_end + length];
        if let Ok(m) = serde_json::from_slice::<Value>(body)
            && m["method"] == "tools/call"
        {
            self.calls.lock().unwrap().push(m);
            let dropped = self
                .drops
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| d.checked_sub(1))
                .is_ok();
            if dropped {
                // Closed with no answer: the client cannot tell whether the call ran.
                return Ok(());
            }
        }
        let mut lines: Vec<&str> = head
            .trim_end()
            .split("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
            .collect();
        lines.push("connection: close");
        let mut request = lines.join("\r\n").into_bytes();
        request.extend_from_slice(b"\r\n\r\n");
        request.extend_from_slice(body);
        let mut server = TcpStream::connect(upstream).await?;
        server.write_all(&request).await?;
        tokio::io::copy(&mut server, &mut client).await?;
        client.shutdown().await
    }
}

async fn serve() -> HttpHandle {
    server().serve_http(HttpConfig::new()).await.unwrap()
}

/// A call whose connection dropped before the answer is sent again with the same key, and
/// its task runs once; a call without a key is not sent again.
#[tokio::test]
async fn a_dropped_call_is_sent_again_with_the_same_key() {
    let http = serve().await;
    let proxy = Proxy::start(http.local_addr(), 0).await;
    let (dir, store) = store("dropped");
    for era in [Era::V2026_07_28, Era::V2025_11_25] {
        let client = McpClient::builder()
            .http(&proxy.url)
            .era(era)
            .store(store.clone())
            .connect()
            .await
            .unwrap();
        client.list_tools().await.unwrap();
        let before = proxy.calls().len();
        proxy.drop_next(1);
        let called = client
            .call_tool("brief_job", json!({"label": "x"}))
            .await
            .unwrap();
        let Called::Task(task) = called else {
            panic!("{era}: expected a task, got {called:?}");
        };
        let id = task.id().to_owned();
        assert_eq!(finish(Called::Task(task)).await, "x done", "{era}");
        let sent = proxy.calls()[before..].to_vec();
        assert_eq!(
            sent.len(),
            2,
            "{era}: sent once, dropped, sent again: {sent:?}"
        );
        assert!(key_of(&sent[0]).is_some(), "{era}");
        assert_eq!(key_of(&sent[0]), key_of(&sent[1]), "{era}: the same key");
        assert_eq!(sent[0]["params"], sent[1]["params"], "{era}: the same call");
        assert!(client.pending_calls().unwrap().is_empty(), "{era}");
        let handles = store.list(Some(client.server_key()), false).unwrap();
        assert_eq!(
            handles.iter().filter(|h| h.task_id == id).count(),
            1,
            "{era}"
        );

        // Without a key (a forbidden tool, on 2025-11-25 where the listing says so), a
        // dropped call is not sent again.
        if era == Era::V2025_11_25 {
            let before = proxy.calls().len();
            proxy.drop_next(1);
            let e = client
                .call_tool("hello", json!({"name": "Ada"}))
                .await
                .unwrap_err();
            assert!(
                matches!(e, ClientError::Connect { .. } | ClientError::Closed(_)),
                "{e}"
            );
            assert_eq!(proxy.calls().len(), before + 1, "sent once");
            assert!(client.pending_calls().unwrap().is_empty());
        }
        client.close(Duration::from_secs(1)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A call that never gets an answer is sent `CALL_ATTEMPTS` times with one key, then left
/// pending in the handle store; repeating it with that key later gets its task.
#[tokio::test]
async fn a_call_of_unknown_outcome_stays_pending_until_repeated_with_its_key() {
    let http = serve().await;
    let proxy = Proxy::start(http.local_addr(), usize::MAX).await;
    let (dir, store) = store("unknown");
    let client = McpClient::builder()
        .http(&proxy.url)
        .store(store.clone())
        .connect()
        .await
        .unwrap();
    let e = client
        .call_tool("brief_job", json!({"label": "lost"}))
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Connect { .. }), "{e}");
    let sent = proxy.calls();
    assert_eq!(sent.len(), CALL_ATTEMPTS, "{sent:?}");
    let key = key_of(&sent[0]).unwrap().to_owned();
    assert!(sent.iter().all(|c| key_of(c) == Some(key.as_str())));

    let pending = client.pending_calls().unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].key.as_str(), key);
    assert_eq!(pending[0].tool, "brief_job");
    assert_eq!(pending[0].arguments, json!({"label": "lost"}));
    assert_eq!(pending[0].server, client.server_key());

    // A client started later finds it and repeats it.
    proxy.drop_next(0);
    let later = McpClient::builder()
        .http(&proxy.url)
        .store(store.clone())
        .connect()
        .await
        .unwrap();
    let call = later.pending_calls().unwrap().remove(0);
    let called = later
        .call_tool_with_key(&call.tool, call.arguments, call.key)
        .await
        .unwrap();
    assert_eq!(finish(called).await, "lost done");
    assert_eq!(key_of(proxy.calls().last().unwrap()), Some(key.as_str()));
    assert!(later.pending_calls().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `mcp-tasks call --idempotency-key KEY` sends that key, again after a dropped connection;
/// a call whose outcome stays unknown names the key to repeat it with; a bad key is a usage
/// error.
#[tokio::test]
async fn the_command_line_sends_its_key_and_names_the_key_of_a_lost_call() {
    let http = serve().await;
    let proxy = Proxy::start(http.local_addr(), 1).await;
    let (dir, _store) = store("cli");
    let cli = |args: &[&str]| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks-cli"));
        c.env("MCP_TASKS_HOME", &dir)
            .arg("--url")
            .arg(&proxy.url)
            .args(args)
            .stdin(std::process::Stdio::null());
        c
    };
    let out = cli(&[
        "call",
        "brief_job",
        "label=cli",
        "--idempotency-key",
        "cli-key-1",
        "--json",
    ])
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let sent = proxy.calls();
    assert_eq!(sent.len(), 2, "dropped once, sent again: {sent:?}");
    assert!(
        sent.iter().all(|c| key_of(c) == Some("cli-key-1")),
        "{sent:?}"
    );

    proxy.drop_next(usize::MAX);
    let out = cli(&["call", "brief_job", "label=lost"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "a connection error: {stderr}");
    let lost = proxy.calls().last().cloned().unwrap();
    let key = key_of(&lost).unwrap();
    assert!(
        stderr.contains(&format!("--idempotency-key {key}")),
        "{stderr}"
    );

    let out = cli(&[
        "call",
        "brief_job",
        "label=x",
        "--idempotency-key",
        "two words",
    ])
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("visible ASCII"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
