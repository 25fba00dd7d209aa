//! Task creates through one HTTP server on each store: pre-built 2026-07-28 `tools/call`s of
//! a task tool that finishes at once, over raw keep-alive connections driven from one
//! thread, so that the server and its store are the limit.
//!
//! ```text
//! cargo bench -p mcp-tasks-e2e --bench creates                        # every store, 16 and 64 connections
//! MCP_BENCH_STORE=postgres MCP_BENCH_CONNECTIONS=64 cargo bench -p mcp-tasks-e2e --bench creates
//! MCP_BENCH_SECS=5 cargo bench -p mcp-tasks-e2e --bench creates
//! ```
//!
//! `MCP_BENCH_STORE` is a comma-separated list of `memory`, `sqlite`, `postgres` and `redis`
//! (default all four; PostgreSQL and Redis as `MCP_TASKS_TEST_POSTGRES` and
//! `MCP_TASKS_TEST_REDIS` name them); `MCP_BENCH_TOOL` one of `quick_job` (declared
//! idempotent) and `quick_plain_job` (not), default both. Each row gets a fresh store and a
//! fresh server. A create is answered once the task is stored (durably, on SQLite and
//! PostgreSQL). The tool of `quick_job` is polled before its create and ends in that poll,
//! so its task is stored settled; that of `quick_plain_job` runs once its task is stored,
//! and its outcome is written in the background. So each row also says how long after
//! the load stopped every task it created was settled, and what that makes per second
//! for the whole create → run → outcome path. The load average is printed before and
//! after every row. A PostgreSQL row is followed by what the database did per create over
//! the row (its `pg_stat_database`, read once the server's connections closed): commits
//! and rows fetched. Rows fetched include the catalog reads of each new connection, a
//! fixed cost that weighs more in a short row.

use mcp_tasks::Viewer;
use mcp_tasks::prelude::*;
use mcp_tasks::store::{PostgresTaskStore, RedisTaskStore, SqliteTaskStore};
use mcp_tasks::task::TaskStatus;
use mcp_tasks::transport::http::HttpConfig;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A task that finishes at once, declared idempotent: its tool may start before its task is
/// stored, and is stored settled in its create's one write.
#[task_tool(mode = "required", poll_interval = "1s", idempotent)]
async fn quick_job() -> &'static str {
    "done"
}

/// The same, not declared idempotent: its tool starts once its task is stored, and its
/// outcome is a second write.
#[task_tool(mode = "required", poll_interval = "1s")]
async fn quick_plain_job() -> &'static str {
    "done"
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// One complete 2026-07-28 task create: request line, headers and body.
fn create_request(addr: SocketAddr, tool: &str) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {"io.modelcontextprotocol/tasks": {}}
            }
        }
    }})
    .to_string();
    let mut bytes = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: {}\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: {tool}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// Sends one request and returns the response body.
async fn exchange(stream: &mut TcpStream, request: &[u8], buf: &mut Vec<u8>) -> Vec<u8> {
    stream.write_all(request).await.expect("send");
    buf.clear();
    let (head_len, body_len) = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..end]).expect("response head is text");
            assert!(
                head.starts_with("HTTP/1.1 200"),
                "unexpected response: {head}"
            );
            let length = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or_else(|| panic!("no content-length: {head}"));
            break (end + 4, length);
        }
        read_more(stream, buf).await;
    };
    while buf.len() < head_len + body_len {
        read_more(stream, buf).await;
    }
    buf[head_len..head_len + body_len].to_vec()
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) {
    buf.reserve(16 * 1024);
    assert!(
        stream.read_buf(buf).await.expect("read") > 0,
        "connection closed"
    );
}

/// Creates over `connections` connections for `secs` from a thread of its own; returns the
/// creates answered in the window and their latencies, sorted.
fn load(addr: SocketAddr, tool: &str, connections: usize, secs: f64) -> Vec<Duration> {
    let request: Arc<[u8]> = create_request(addr, tool).into();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("load generator runtime");
        runtime.block_on(async move {
            let start_line = Arc::new(tokio::sync::Barrier::new(connections));
            let mut workers = Vec::new();
            for _ in 0..connections {
                let (request, barrier) = (Arc::clone(&request), Arc::clone(&start_line));
                workers.push(tokio::spawn(async move {
                    let mut stream = TcpStream::connect(addr).await.expect("connect");
                    stream.set_nodelay(true).expect("TCP_NODELAY");
                    let mut buf = Vec::with_capacity(16 * 1024);
                    let first: Value =
                        serde_json::from_slice(&exchange(&mut stream, &request, &mut buf).await)
                            .expect("JSON");
                    assert!(
                        first["result"]["taskId"].is_string(),
                        "not created: {first}"
                    );
                    for _ in 0..20 {
                        exchange(&mut stream, &request, &mut buf).await;
                    }
                    barrier.wait().await;
                    let until = Instant::now() + Duration::from_secs_f64(secs);
                    let mut latencies = Vec::with_capacity(1 << 15);
                    while Instant::now() < until {
                        let t = Instant::now();
                        exchange(&mut stream, &request, &mut buf).await;
                        latencies.push(t.elapsed());
                    }
                    latencies
                }));
            }
            let mut latencies = Vec::new();
            for w in workers {
                latencies.extend(w.await.expect("load worker"));
            }
            latencies.sort();
            latencies
        })
    })
    .join()
    .expect("load generator")
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len().max(1) as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// What a database did per create: commits and rows fetched, from `pg_stat_database`.
async fn database_work(url: &str) -> Option<String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    let driver = tokio::spawn(connection);
    // A backend reports its counters when it exits; give the store's a moment to.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let row = client
        .query_one(
            "SELECT xact_commit, tup_fetched, tup_inserted FROM pg_stat_database \
             WHERE datname = current_database()",
            &[],
        )
        .await
        .ok()?;
    drop(client);
    let _ = driver.await;
    let (commits, fetched, inserted): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let per = |n: i64| n as f64 / inserted.max(1) as f64;
    Some(format!(
        "{:.3} commits and {:.3} rows fetched per create ({inserted} rows inserted)",
        per(commits),
        per(fetched)
    ))
}

/// A fresh store of `kind` in a server, what must be dropped after the row, and for
/// PostgreSQL the database's URL.
async fn server(kind: &str) -> Option<(Server, Box<dyn std::any::Any>, Option<String>)> {
    let builder = Server::builder()
        .name("creates-bench")
        .registry_tools()
        .quotas(mcp_tasks::quota::QuotaConfig::unlimited());
    Some(match kind {
        "memory" => (builder.build().unwrap(), Box::new(()), None),
        "sqlite" => {
            let dir = std::env::temp_dir().join(format!(
                "mcp-tasks-creates-{}",
                mcp_tasks::task::random_id().unwrap()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let store = SqliteTaskStore::open(dir.join("tasks.db")).unwrap();
            struct Gone(std::path::PathBuf);
            impl Drop for Gone {
                fn drop(&mut self) {
                    let _ = std::fs::remove_dir_all(&self.0);
                }
            }
            (
                builder.store(store).build().unwrap(),
                Box::new(Gone(dir)),
                None,
            )
        }
        "postgres" => {
            let db = mcp_tasks::store::TestDatabase::create("creates bench")?;
            // `MCP_BENCH_PG_POOL` sets the pool size (default the store's, 16).
            let mut options = mcp_tasks::store::PostgresOptions::default();
            if let Some(n) = std::env::var("MCP_BENCH_PG_POOL")
                .ok()
                .and_then(|n| n.parse().ok())
            {
                options = options.pool_size(n);
            }
            let store = PostgresTaskStore::connect_with(&db.url(), options)
                .await
                .unwrap();
            let url = db.url();
            (
                builder.store(store).build().unwrap(),
                Box::new(db),
                Some(url),
            )
        }
        "redis" => {
            let db = mcp_tasks::store::TestRedis::create("creates bench")?;
            let store = RedisTaskStore::connect(&db.store_url()).await.unwrap();
            (builder.store(store).build().unwrap(), Box::new(db), None)
        }
        other => panic!("MCP_BENCH_STORE lists memory, sqlite, postgres or redis, not {other:?}"),
    })
}

/// How many tasks the server's store holds, and how many of them are still `working`.
async fn counts(server: &Server) -> (u64, u64) {
    let counts = server
        .tasks()
        .count(&Viewer::admin("bench"))
        .await
        .expect("count");
    let working = counts
        .by_status_and_tool
        .iter()
        .filter(|((status, _), _)| *status == TaskStatus::Working)
        .map(|(_, n)| n)
        .sum();
    (counts.total(), working)
}

fn main() {
    let secs: f64 = std::env::var("MCP_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let stores = std::env::var("MCP_BENCH_STORE").unwrap_or("memory,sqlite,postgres,redis".into());
    let tools = std::env::var("MCP_BENCH_TOOL").unwrap_or("quick_job,quick_plain_job".into());
    let connections: Vec<usize> = match std::env::var("MCP_BENCH_CONNECTIONS") {
        Ok(list) => list.split(',').filter_map(|n| n.parse().ok()).collect(),
        Err(_) => vec![16, 64],
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!(
            "| store | tool | connections | creates/s | p50 | p99 | all settled after | created → settled/s | load average before → after |"
        );
        println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
        let mut notes = Vec::new();
        let mut rows = Vec::new();
        for kind in stores.split(',') {
            for tool in tools.split(',') {
                rows.extend(connections.iter().map(|&n| (kind, tool, n)));
            }
        }
        for (kind, tool, n) in rows {
                let Some((server, guard, database)) = server(kind).await else {
                    continue;
                };
                let handle = server
                    .serve_http(HttpConfig::new())
                    .await
                    .expect("serve HTTP");
                let addr: SocketAddr = handle
                    .url("")
                    .trim_start_matches("http://")
                    .parse()
                    .expect("server address");
                let before = load_average();
                let (stored, _) = counts(&server).await;
                let started = Instant::now();
                let name = tool.to_owned();
                let latencies = tokio::task::spawn_blocking(move || load(addr, &name, n, secs))
                    .await
                    .unwrap();
                let stopped = Instant::now();
                let (total, mut working) = counts(&server).await;
                while working > 0 && stopped.elapsed() < Duration::from_secs(120) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    working = counts(&server).await.1;
                }
                let settled = stopped.elapsed();
                // Each connection's first 21 creates were made before the window.
                let made = total.saturating_sub(stored + 21 * n as u64);
                println!(
                    "| {kind} | {tool} | {n} | {:.0} | {:.2} ms | {:.2} ms | {:.2} s{} | {:.0} | {before} → {} |",
                    latencies.len() as f64 / secs,
                    percentile(&latencies, 0.5),
                    percentile(&latencies, 0.99),
                    settled.as_secs_f64(),
                    if working > 0 { " (not all)" } else { "" },
                    made as f64 / (stopped - started + settled).as_secs_f64(),
                    load_average(),
                );
                handle.shutdown().await.expect("shutdown");
                drop(server);
                if let Some(url) = database
                    && let Some(work) = database_work(&url).await
                {
                    notes.push(format!("{kind}, {tool}, {n} connections: {work}"));
                }
                drop(guard);
        }
        if !notes.is_empty() {
            println!();
        }
        for note in notes {
            println!("{note}");
        }
    });
}
