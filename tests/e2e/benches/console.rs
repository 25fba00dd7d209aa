//! The operator's console under churn: a SQLite store holding 100,000 tasks, new tasks
//! created over MCP (2026-07-28, loopback HTTP) at a target rate, and the console's API
//! and feed read meanwhile.
//!
//! ```text
//! cargo bench -p mcp-tasks-e2e --bench console
//! MCP_BENCH_TASKS=100000 MCP_BENCH_RATE=1000 MCP_BENCH_SECS=10 cargo bench -p mcp-tasks-e2e --bench console
//! ```
//!
//! Measures, in two phases of the same length: the creates per second the MCP path reaches
//! with nobody on the console, then with the console in use (one page following the feed,
//! one client listing without pause); the median and 95th percentile of the console's
//! listing (a page of 50 of every status, a page of the working ones) and of its counts;
//! and the feed's lag, from a create's answer to the feed's event for that task. Without
//! `--bench` (as under `cargo test --benches`) it runs a short smoke version.

use mcp_tasks::admin::AdminToken;
use mcp_tasks::model::JsonObject;
use mcp_tasks::prelude::*;
use mcp_tasks::store::{SqliteOptions, SqliteTaskStore, Synchronous, TaskStore};
use mcp_tasks::task::{TaskRecord, TaskStatus};
use mcp_tasks::transport::http::HttpConfig;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

const TOKEN: &str = "console-bench-token-0123456789";

/// A task that finishes at once.
#[task_tool(mode = "required", poll_interval = "1s")]
async fn churn_job() -> &'static str {
    "done"
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Fills the store with `total` tasks written an hour ago: 2 % failed, 1 % working, the
/// rest completed, over four tools.
async fn fill(store: &Arc<SqliteTaskStore>, total: u64) {
    let tools = ["render", "mail", "charge", "index"];
    let then = SystemTime::now() - Duration::from_secs(3600);
    let mut set = tokio::task::JoinSet::new();
    for lane in 0..64 {
        let store = Arc::clone(store);
        set.spawn(async move {
            let mut n = lane;
            while n < total {
                let mut args = JsonObject::new();
                args.insert("n".into(), json!(n));
                let mut r =
                    TaskRecord::new(format!("fill-{n:08}"), tools[(n % 4) as usize], args, then);
                r.status = match n % 100 {
                    0 | 1 => TaskStatus::Failed,
                    2 => TaskStatus::Working,
                    _ => TaskStatus::Completed,
                };
                r.owner = Some(format!("principal:user{}", n % 1000));
                r.ttl = None;
                store.create(r).await.expect("create");
                n += 64;
            }
        });
    }
    while set.join_next().await.is_some() {}
}

fn percentile(times: &mut [Duration], p: f64) -> Duration {
    if times.is_empty() {
        return Duration::ZERO;
    }
    times.sort();
    times[((times.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Creates tasks at `rate` per second from 16 connections until `stop`; records when each
/// create was answered.
async fn churn(
    url: String,
    rate: u64,
    stop: Arc<AtomicBool>,
    made: Arc<AtomicU64>,
    answered: Arc<Mutex<HashMap<String, Instant>>>,
) {
    let lanes = 16;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..lanes {
        let (url, stop, made, answered) = (
            url.clone(),
            Arc::clone(&stop),
            Arc::clone(&made),
            Arc::clone(&answered),
        );
        set.spawn(async move {
            let http = reqwest::Client::new();
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "churn_job", "arguments": {},
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
            }})
            .to_string();
            let mut tick = tokio::time::interval(Duration::from_secs_f64(lanes as f64 / rate as f64));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let response = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-protocol-version", "2026-07-28")
                    .header("mcp-method", "tools/call")
                    .header("mcp-name", "churn_job")
                    .body(body.clone())
                    .send()
                    .await;
                let Ok(response) = response else { continue };
                let Ok(text) = response.text().await else { continue };
                if let Ok(v) = serde_json::from_str::<Value>(&text)
                    && let Some(id) = v["result"]["taskId"].as_str()
                {
                    made.fetch_add(1, Ordering::Relaxed);
                    answered.lock().unwrap().insert(id.to_owned(), Instant::now());
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
}

async fn run(size: u64, rate: u64, secs: f64) {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-console-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tasks.db");
    let started = Instant::now();
    {
        let store = Arc::new(
            SqliteTaskStore::open_with(
                &path,
                SqliteOptions::default().synchronous(Synchronous::Normal),
            )
            .unwrap(),
        );
        fill(&store, size).await;
    }
    eprintln!(
        "filled {size} tasks in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let server = Server::builder()
        .store(SqliteTaskStore::open(&path).unwrap())
        .quotas(mcp_tasks::quota::QuotaConfig::unlimited())
        .registry_tools()
        .build()
        .unwrap();
    let app = server.http_router(HttpConfig::new()).nest(
        "/admin",
        server
            .admin_router(AdminToken::new(TOKEN).unwrap())
            .into_router(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        mcp_tasks::axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
        .unwrap();
    });
    let mcp = format!("http://{addr}/mcp");
    let api = format!("http://{addr}/admin/api");
    let phase = Duration::from_secs_f64(secs);

    // Phase 1: nobody on the console.
    let answered = Arc::new(Mutex::new(HashMap::new()));
    let (stop, made) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let load = tokio::spawn(churn(
        mcp.clone(),
        rate,
        Arc::clone(&stop),
        Arc::clone(&made),
        Arc::clone(&answered),
    ));
    tokio::time::sleep(phase).await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let alone = made.load(Ordering::Relaxed) as f64 / secs;
    answered.lock().unwrap().clear();

    // Phase 2: a page follows the feed; a client lists and counts without pause.
    let http = reqwest::Client::new();
    let feed_seen: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let feed = {
        let (http, api, answered, seen) = (
            http.clone(),
            api.clone(),
            Arc::clone(&answered),
            Arc::clone(&feed_seen),
        );
        tokio::spawn(async move {
            let mut response = http
                .get(format!("{api}/events"))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            let mut buffer = String::new();
            let mut first: HashMap<String, ()> = HashMap::new();
            while let Ok(Some(chunk)) = response.chunk().await {
                let now = Instant::now();
                buffer.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(cut) = buffer.find("\n\n") {
                    let block: String = buffer.drain(..cut + 2).collect();
                    let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
                        continue;
                    };
                    if !block.starts_with("event: task") {
                        continue;
                    }
                    let Ok(task) = serde_json::from_str::<Value>(data) else {
                        continue;
                    };
                    let Some(id) = task["taskId"].as_str() else {
                        continue;
                    };
                    if first.insert(id.to_owned(), ()).is_some() {
                        continue;
                    }
                    if let Some(at) = answered.lock().unwrap().get(id) {
                        seen.lock()
                            .unwrap()
                            .push(now.saturating_duration_since(*at));
                    }
                }
            }
        })
    };
    stop.store(false, Ordering::Relaxed);
    made.store(0, Ordering::Relaxed);
    let load = tokio::spawn(churn(
        mcp.clone(),
        rate,
        Arc::clone(&stop),
        Arc::clone(&made),
        Arc::clone(&answered),
    ));
    let mut lists: Vec<(&str, String, Vec<Duration>)> = vec![
        (
            "a page of 50, every status",
            format!("{api}/tasks?limit=50"),
            Vec::new(),
        ),
        (
            "a page of 50 working",
            format!("{api}/tasks?status=working&limit=50"),
            Vec::new(),
        ),
        (
            "counts and rates (`/api/stats`)",
            format!("{api}/stats"),
            Vec::new(),
        ),
    ];
    let end = Instant::now() + phase;
    while Instant::now() < end {
        for (_, url, times) in &mut lists {
            let at = Instant::now();
            let r = http
                .get(url.as_str())
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            let _ = r.bytes().await.unwrap();
            times.push(at.elapsed());
        }
    }
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let watched = made.load(Ordering::Relaxed) as f64 / secs;
    tokio::time::sleep(Duration::from_secs(2)).await;
    feed.abort();

    println!("\n{size} stored tasks, target churn {rate} creates/s, {secs} s per phase\n");
    println!("| | p50 | p95 | calls |\n| --- | ---: | ---: | ---: |");
    for (label, _, times) in &mut lists {
        let n = times.len();
        println!(
            "| {label} | {} | {} | {n} |",
            ms(percentile(times, 0.5)),
            ms(percentile(times, 0.95))
        );
    }
    let mut lag = feed_seen.lock().unwrap().clone();
    println!(
        "| feed lag (create answered → its event) | {} | {} | {} |",
        ms(percentile(&mut lag, 0.5)),
        ms(percentile(&mut lag, 0.95)),
        lag.len()
    );
    println!(
        "\nMCP creates/s: {alone:.0} with nobody on the console, {watched:.0} with the console in use ({:+.1} %)",
        (watched / alone - 1.0) * 100.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (size, rate, secs) = if bench {
        (
            env_or("MCP_BENCH_TASKS", 100_000),
            env_or("MCP_BENCH_RATE", 1000),
            env_or("MCP_BENCH_SECS", 10.0),
        )
    } else {
        (500, 50, 0.5)
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(size, rate, secs));
}
