//! Several fixture processes on one task store: creates and `tasks/get`s per second with
//! one and with two processes, the takeover time after `kill -9`, and the delays of answers
//! and cancellations that cross processes.
//!
//! `cargo bench -p mcp-tasks-e2e --bench cluster` (release fixture: `cargo build --release -p mcp-tasks-e2e --example
//! conformance-server` first, or the debug one is used). `MCP_BENCH_TASKS` sets how many
//! tasks each throughput row creates (default 4000); `MCP_BENCH_ROUNDS` how many takeovers
//! and signal round trips are timed (default 10). `MCP_BENCH_STORE` picks the shared store:
//! `sqlite` (the default, a fresh file per row), `postgres` (a fresh database on the server
//! of `MCP_TASKS_TEST_POSTGRES`) or `redis` (a fresh key prefix on the Redis of
//! `MCP_TASKS_TEST_REDIS`).
//!
//! With `MCP_BENCH_STORE=postgres` it also times a create in this process to the tool
//! starting in a worker process (this binary again, run with `--stamp-worker URL`), with
//! durable commits and, for comparison, with `synchronous_commit=off`.

#[path = "../tests/support/mod.rs"]
mod support;

use mcp_tasks::prelude::*;
use mcp_tasks::store::{PostgresTaskStore, RedisTaskStore, SqliteTaskStore};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{Server as Fixture, Store};

/// The kind of store the rows are measured on (`MCP_BENCH_STORE`).
#[derive(Clone, Copy)]
enum Kind {
    Sqlite,
    Postgres,
    Redis,
}

impl Kind {
    fn from_env() -> Self {
        match std::env::var("MCP_BENCH_STORE").as_deref() {
            Err(_) | Ok("sqlite") => Self::Sqlite,
            Ok("postgres") => Self::Postgres,
            Ok("redis") => Self::Redis,
            Ok(other) => panic!("MCP_BENCH_STORE is sqlite, postgres or redis, not {other:?}"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "SQLite",
            Self::Postgres => "PostgreSQL",
            Self::Redis => "Redis",
        }
    }

    /// A fresh store for one row.
    fn fresh(self, name: &str) -> Store {
        match self {
            Self::Sqlite => Some(Store::sqlite(name)),
            Self::Postgres => Store::postgres(name),
            Self::Redis => Store::redis(name),
        }
        .expect("the bench needs its store: unset MCP_TASKS_TEST_POSTGRES/REDIS=skip")
    }
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Pipelines `n` requests on one process and waits for every answer; returns the ids of
/// the tasks created (for creates) and the elapsed time.
async fn pipelined(
    fixture: &mut Fixture,
    n: usize,
    request: impl Fn(usize) -> (&'static str, Value),
) -> (Vec<String>, Duration) {
    let started = Instant::now();
    let mut pending = std::collections::HashSet::new();
    for i in 0..n {
        let (method, params) = request(i);
        pending.insert(fixture.send(method, params).await);
    }
    let mut ids = Vec::new();
    while !pending.is_empty() {
        let m = fixture.recv().await.expect("the fixture is alive");
        if let Some(id) = m["id"].as_u64()
            && pending.remove(&id)
        {
            assert!(m.get("error").is_none(), "{m}");
            if let Some(task) = m["result"]["taskId"].as_str() {
                ids.push(task.to_owned());
            }
        }
    }
    (ids, started.elapsed())
}

fn create(i: usize) -> (&'static str, Value) {
    (
        "tools/call",
        json!({"name": "durable_sleep", "arguments": {"seconds": 0, "label": format!("t{i}")}}),
    )
}

async fn throughput(kind: Kind, store: &Store, processes: usize, tasks: usize) {
    let mut fixtures: Vec<Fixture> = (0..processes)
        .map(|_| Fixture::on_with(store, &["--no-quotas"]))
        .collect();
    let per = tasks / processes;
    let started = Instant::now();
    let mut all = Vec::new();
    let runs = fixtures
        .iter_mut()
        .map(|f| pipelined(f, per, create))
        .collect::<Vec<_>>();
    for (ids, _) in futures_join(runs).await {
        all.push(ids);
    }
    let created = started.elapsed();
    let started = Instant::now();
    let runs = fixtures
        .iter_mut()
        .zip(&all)
        .map(|(f, ids)| {
            let ids = ids.clone();
            pipelined(f, per, move |i| {
                ("tasks/get", json!({"taskId": ids[i % ids.len()]}))
            })
        })
        .collect::<Vec<_>>();
    futures_join(runs).await;
    let got = started.elapsed();
    println!(
        "| {}, {processes} process{} | {:.0} | {:.0} |",
        kind.name(),
        if processes == 1 { "" } else { "es" },
        (per * processes) as f64 / created.as_secs_f64(),
        (per * processes) as f64 / got.as_secs_f64()
    );
    for f in fixtures {
        f.kill().await;
    }
}

/// Runs futures that borrow different fixtures concurrently.
async fn futures_join<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (f, o) in pinned.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("ready")).collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// From `kill -9` of the process running a `rerun` task to another process running it.
async fn takeover(store: &Store, rounds: usize) {
    let mut times = Vec::new();
    let mut b = Fixture::on(store);
    for _ in 0..rounds {
        let mut a = Fixture::on(store);
        let id = a
            .start_task("durable_sleep", json!({"seconds": 600, "label": "x"}))
            .await;
        // Let A renew once, as a running process would.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let killed = Instant::now();
        a.kill().await;
        loop {
            let r = b.get(&id).await;
            if r["result"]["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Running again"))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        times.push(killed.elapsed());
        b.request("tasks/cancel", json!({"taskId": id})).await;
    }
    println!(
        "| takeover after kill -9 (lease {} ms) | median {:.0} ms, max {:.0} ms |",
        support::LEASE_MS,
        median(times.clone()).as_secs_f64() * 1000.0,
        times
            .iter()
            .max()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1000.0
    );
    b.kill().await;
}

/// From `tasks/update` on B to the tool on A having its answer (seen as its result on A).
async fn answer_delay(store: &Store, rounds: usize) {
    let mut a = Fixture::on(store);
    let mut b = Fixture::on(store);
    let mut times = Vec::new();
    for _ in 0..rounds {
        let id = a
            .start_task("confirm_delete", json!({"filename": "f"}))
            .await;
        let r = b
            .wait_for(&id, &["input_required"], Duration::from_secs(10))
            .await;
        let key = r["result"]["inputRequests"]
            .as_object()
            .and_then(|o| o.keys().next().cloned())
            .expect("a question");
        let sent = Instant::now();
        b.request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}}),
        )
        .await;
        loop {
            if a.get(&id).await["result"]["status"] == "completed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        times.push(sent.elapsed());
    }
    println!(
        "| answer on B reaches the tool on A | median {:.1} ms |",
        median(times).as_secs_f64() * 1000.0
    );
    a.kill().await;
    b.kill().await;
}

/// From `tasks/cancel` through one server to the cancellation token firing in the tool that
/// another server on the same store runs (two engines in this process, each with its own
/// store connections, as two processes would have).
async fn cancel_delay(store: &Store, rounds: usize) {
    let fired: Arc<Mutex<Option<Instant>>> = Arc::default();
    let make = async |fired: Arc<Mutex<Option<Instant>>>| {
        let builder = Server::builder().tool(
            Tool::new("wait", move |cx, _| {
                let fired = Arc::clone(&fired);
                async move {
                    cx.cancellation().cancelled().await;
                    *fired.lock().unwrap() = Some(Instant::now());
                    Err(ToolError::cancelled())
                }
            })
            .task_support(TaskSupport::Optional),
        );
        let builder = match store {
            Store::Sqlite(path) => builder.store(SqliteTaskStore::open(path).expect("open")),
            Store::Postgres(db) => {
                builder.store(PostgresTaskStore::connect(&db.url()).await.expect("open"))
            }
            Store::Redis(redis) => builder.store(
                RedisTaskStore::connect(&redis.store_url())
                    .await
                    .expect("open"),
            ),
        };
        builder.build().expect("server")
    };
    let runner = make(Arc::clone(&fired)).await;
    let other = make(Arc::default()).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    let (on_runner, _r) = runner.session();
    let (on_other, _o) = other.session();
    let mut times = Vec::new();
    for n in 0..rounds {
        *fired.lock().unwrap() = None;
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "wait", "arguments": {}, "_meta": meta}});
        let r: Value =
            serde_json::from_str(&on_runner.handle_text(&call.to_string()).await.unwrap()).unwrap();
        let id = r["result"]["taskId"].as_str().expect("a task").to_owned();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let cancel = json!({"jsonrpc": "2.0", "id": n, "method": "tasks/cancel",
            "params": {"taskId": id, "_meta": meta}});
        let sent = Instant::now();
        on_other.handle_text(&cancel.to_string()).await;
        loop {
            if let Some(at) = *fired.lock().unwrap() {
                times.push(at - sent);
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    println!(
        "| cancel on B fires the token on A | median {:.1} ms |",
        median(times).as_secs_f64() * 1000.0
    );
}

/// The tool of the create-to-start rows: answers with the wall-clock time it started at, in
/// microseconds since the Unix epoch.
fn stamp_tool() -> Tool {
    Tool::new("stamp", |_cx, _| async move {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Ok(CallToolResult::success(vec![Content::text(
            now.as_micros().to_string(),
        )]))
    })
    .task_support(TaskSupport::Required)
}

/// The worker process of the create-to-start rows: runs `stamp` from the PostgreSQL store
/// at `url` until stdin closes.
async fn stamp_worker(url: &str) {
    let store = mcp_tasks::store::PostgresTaskStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let server = Server::builder()
        .tool(stamp_tool())
        .store(store)
        .build()
        .expect("server");
    let stop = CancellationToken::new();
    let worker = Worker::new(server).shutdown_signal(stop.clone());
    let run = tokio::spawn(worker.run());
    println!("ready");
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(tokio::io::stdin()));
    while let Ok(Some(_)) = lines.next_line().await {}
    stop.cancel();
    let _ = run.await;
}

/// From sending a task create to a server in this process to the tool starting in a worker
/// process on the same PostgreSQL database: the create's commit, its notification, the
/// worker's wake-up, its claim and the start of the tool. One task at a time, a little
/// apart, as isolated events; the first rounds warm up and are not counted. `options` is
/// added to the database URL of both processes (say, to turn `synchronous_commit` off and
/// see what the path costs without the two `fsync`s of the create and the claim).
async fn create_to_start(store: &Store, rounds: usize, label: &str, options: &str) {
    use tokio::io::AsyncBufReadExt;
    let url = format!("{}{options}", store.arg());
    let mut child = tokio::process::Command::new(std::env::current_exe().expect("this binary"))
        .args(["--stamp-worker", &url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the worker");
    let mut ready = tokio::io::BufReader::new(child.stdout.take().expect("piped")).lines();
    tokio::time::timeout(Duration::from_secs(30), ready.next_line())
        .await
        .expect("the worker starts within 30 s")
        .expect("the worker's stdout");
    let server = Server::builder()
        .tool(stamp_tool())
        .store(
            mcp_tasks::store::PostgresTaskStore::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .serve_only()
        .build()
        .expect("server");
    let (session, _notifications) = server.session();
    let meta = support::meta();
    let mut times = Vec::new();
    const WARM_UP: usize = 5;
    for n in 0..rounds + WARM_UP {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "stamp", "arguments": {}, "_meta": meta}});
        let sent = SystemTime::now();
        let r: Value =
            serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap();
        let id = r["result"]["taskId"].as_str().expect("a task").to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        let started = loop {
            let get = json!({"jsonrpc": "2.0", "id": n, "method": "tasks/get",
                "params": {"taskId": id, "_meta": meta}});
            let r: Value =
                serde_json::from_str(&session.handle_text(&get.to_string()).await.unwrap())
                    .unwrap();
            if r["result"]["status"] == "completed" {
                let text = r["result"]["result"]["content"][0]["text"].as_str();
                break text.and_then(|t| t.parse::<u64>().ok()).expect("a time");
            }
            assert!(Instant::now() < deadline, "task {id} did not run: {r}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let sent = sent
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
        if n >= WARM_UP {
            times.push(Duration::from_micros(started.saturating_sub(sent)));
        }
    }
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "| {label}: a create on one process to the tool starting on another | median {:.1} ms, p90 {:.1} ms, max {:.1} ms |",
        at(0.5).as_secs_f64() * 1000.0,
        at(0.9).as_secs_f64() * 1000.0,
        at(1.0).as_secs_f64() * 1000.0
    );
    drop(child.stdin.take());
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
}

fn main() {
    let mut args = std::env::args().skip(1);
    if let (Some(flag), Some(url)) = (args.next(), args.next())
        && flag == "--stamp-worker"
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(stamp_worker(&url));
        return;
    }
    let tasks = env_or("MCP_BENCH_TASKS", 4000);
    let rounds = env_or("MCP_BENCH_ROUNDS", 10);
    let kind = Kind::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        println!("| store, processes | creates/s | tasks/get/s |\n| --- | ---: | ---: |");
        for processes in [1, 2] {
            let store = kind.fresh(&format!("bench-throughput-{processes}"));
            throughput(kind, &store, processes, tasks).await;
        }
        println!(
            "\n| cross-process ({}) | time |\n| --- | --- |",
            kind.name()
        );
        takeover(&kind.fresh("bench-takeover"), rounds).await;
        answer_delay(&kind.fresh("bench-answer"), rounds).await;
        cancel_delay(&kind.fresh("bench-cancel"), rounds).await;
        if let Kind::Postgres = kind {
            create_to_start(&kind.fresh("bench_start"), rounds.max(50), "PostgreSQL", "").await;
            let options = "?options=-c%20synchronous_commit%3Doff";
            let label = "PostgreSQL, `synchronous_commit=off` (not durable)";
            create_to_start(
                &kind.fresh("bench_start_async"),
                rounds.max(50),
                label,
                options,
            )
            .await;
        }
    });
}
