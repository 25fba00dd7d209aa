//! Task engine benchmark: creates (with and without an idempotency key, and repeats of a
//! key), `tasks/get` and memory per task as the store fills up.
//!
//! Whole requests go through a session (JSON parsing, the 2026-07-28 adapter, the engine and
//! the in-memory store), without a transport.
//!
//! ```text
//! cargo bench -p mcp-tasks-runtime --bench engine            # 1,000 and 100,000 stored tasks
//! MCP_TASKS_BENCH_SIZES=1000,30000 cargo bench -p mcp-tasks-runtime --bench engine
//! # one size, then only N `tasks/get`s from one caller (for instruction counts):
//! MCP_TASKS_BENCH_ONE=100000 MCP_TASKS_BENCH_GETS=3000 valgrind --tool=callgrind target/release/deps/engine-…
//! # only `tasks/get` against the number of stored tasks, on one store (`memory` or `sqlite`):
//! MCP_TASKS_BENCH_STORE=memory cargo bench -p mcp-tasks-runtime --bench engine
//! MCP_TASKS_BENCH_STORE=sqlite cargo bench -p mcp-tasks-runtime --features sqlite --bench engine
//! ```
//!
//! With `MCP_TASKS_BENCH_STORE`, each size (`MCP_TASKS_BENCH_SIZES`, default 1,000, 100,000
//! and 1,000,000) runs in a fresh process, and the table gives `tasks/get`s per second
//! from 16 callers of ids picked among all the tasks (`any`), then among the 10,000
//! created last (`recent`, what clients poll, read after the arbitrary reads of the
//! first row have filled the SQLite store's read cache), with the CPU time the process
//! spent per `tasks/get` (which other load on the machine changes less than the rate).
//! Each row is measured after a warm-up as long as the measurement, over the same ids.
//! The memory store is filled through the session; the SQLite store (a file in a fresh
//! temporary directory, default options) gets its first 1,000 tasks through a session,
//! and the rest as copies of the last of them, made by one bulk `INSERT … SELECT` with the
//! server stopped, each with an id of its own and the next creation and change sequence
//! numbers.
//!
//! For instruction counts of `tasks/get` alone: `MCP_TASKS_BENCH_GET=SIZE` runs one size,
//! `MCP_TASKS_BENCH_GETS=N` makes it do only `MCP_TASKS_BENCH_WARM` `tasks/get`s then N
//! from one caller (of `MCP_TASKS_BENCH_PICK` ids: `recent` or `any`), and
//! `MCP_TASKS_BENCH_DB=DIR` keeps the SQLite files in DIR to use again, so that the runs
//! under valgrind do not fill; the difference between two values of N is the cost of the
//! `tasks/get`s. The tasks keep the tools' default time to live (an hour): once it has
//! passed, opening the kept file sweeps them, and the gets find nothing, so fill DIR anew.
//!
//! ```text
//! MCP_TASKS_BENCH_DB=/tmp/bench MCP_TASKS_BENCH_STORE=sqlite MCP_TASKS_BENCH_GETS=0 target/release/deps/engine-…
//! MCP_TASKS_BENCH_DB=/tmp/bench MCP_TASKS_BENCH_STORE=sqlite MCP_TASKS_BENCH_GET=1000000 \
//!     MCP_TASKS_BENCH_PICK=recent MCP_TASKS_BENCH_WARM=10000 MCP_TASKS_BENCH_GETS=5000 \
//!     valgrind --tool=callgrind target/release/deps/engine-…
//! ```

use mcp_tasks_runtime::model::{CallToolResult, Content, JsonObject, TaskSupport};
use mcp_tasks_runtime::{Server, Session, Tool};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[cfg(feature = "sqlite")]
#[path = "support/sqlite_copy.rs"]
mod sqlite_copy;
#[cfg(feature = "sqlite")]
use sqlite_copy::sqlite_copy;

const MEASURE: Duration = Duration::from_secs(2);

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    })
}

fn server() -> Server {
    builder().build().expect("server")
}

fn builder() -> mcp_tasks_runtime::ServerBuilder {
    Server::builder()
        .tool(
            Tool::new("quick", |_, args: JsonObject| async move {
                let n = args.get("n").and_then(Value::as_u64).unwrap_or(0);
                Ok(CallToolResult::success(vec![Content::text(n.to_string())]))
            })
            .task_support(TaskSupport::Optional),
        )
        // The benchmark is one requestor: lift the per-requestor quotas.
        .quotas(mcp_tasks_runtime::quota::QuotaConfig::unlimited())
}

/// A fresh request id: ids of requests in flight on one session must differ.
fn request_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

async fn create(session: &Session, n: u64) -> String {
    let call = json!({"jsonrpc": "2.0", "id": request_id(), "method": "tools/call",
                      "params": {"name": "quick", "arguments": {"n": n}, "_meta": meta()}});
    let r: Value =
        serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap();
    r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {r}"))
        .to_owned()
}

/// A create with the idempotency key `key` (arguments `n`): the first makes a task, a
/// repeat gets it back.
async fn create_keyed(session: &Session, n: u64, key: &str) -> String {
    let mut meta = meta();
    meta[mcp_tasks_runtime::IDEMPOTENCY_KEY_META] = json!(key);
    let call = json!({"jsonrpc": "2.0", "id": request_id(), "method": "tools/call",
                      "params": {"name": "quick", "arguments": {"n": n}, "_meta": meta}});
    let r: Value =
        serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap();
    r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {r}"))
        .to_owned()
}

async fn get(session: &Session, id: &str) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": request_id(), "method": "tasks/get",
                      "params": {"taskId": id, "_meta": meta()}});
    serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Runs `op` from `workers` concurrent callers for [`MEASURE`] and returns operations/s.
async fn rate<F, Fut>(workers: usize, op: F) -> f64
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let op = Arc::clone(&op);
        let done = Arc::clone(&done);
        handles.push(tokio::spawn(async move {
            let mut i = w as u64 * 1_000_000_000;
            while start.elapsed() < MEASURE {
                op(i).await;
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
                // A transport would yield here; without it the callers starve the executors.
                tokio::task::yield_now().await;
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    if let Ok(one) = std::env::var("MCP_TASKS_BENCH_GET") {
        let size = one.parse().expect("a size");
        get_rows(size);
        return;
    }
    if let Ok(store) = std::env::var("MCP_TASKS_BENCH_STORE") {
        let sizes: Vec<u64> = std::env::var("MCP_TASKS_BENCH_SIZES")
            .ok()
            .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_else(|| vec![1_000, 100_000, 1_000_000]);
        println!(
            "| store | stored tasks | ids picked among | tasks/get/s (16 callers) | CPU per tasks/get |"
        );
        println!("| --- | ---: | --- | ---: | ---: |");
        for size in &sizes {
            let status = std::process::Command::new(std::env::current_exe().expect("bench binary"))
                .env("MCP_TASKS_BENCH_GET", size.to_string())
                .env("MCP_TASKS_BENCH_STORE", &store)
                .status()
                .expect("run one size");
            assert!(status.success(), "size {size} failed");
        }
        return;
    }
    // Each size runs in a fresh process, so memory freed by one run does not hide the next
    // one's growth.
    for (variable, running) in [
        ("MCP_TASKS_BENCH_QUEUED", false),
        ("MCP_TASKS_BENCH_RUNNING", true),
    ] {
        if let Ok(one) = std::env::var(variable) {
            let size = one.parse().expect("a size");
            runtime().block_on(waiting(size, running));
            return;
        }
    }
    if let Ok(one) = std::env::var("MCP_TASKS_BENCH_ONE") {
        let size = one.parse().expect("a size");
        runtime().block_on(run(size));
        return;
    }
    let sizes: Vec<u64> = std::env::var("MCP_TASKS_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 100_000]);
    println!(
        "| stored tasks | fill time | fill rate (creates/s, 64 callers) | memory per task (RSS) | of which arguments | tasks/get/s (16 callers) | creates/s (16 callers) | creates with a key/s (16 callers) | repeats of a key/s (16 callers) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for size in &sizes {
        let status = std::process::Command::new(std::env::current_exe().expect("bench binary"))
            .env("MCP_TASKS_BENCH_ONE", size.to_string())
            .status()
            .expect("run one size");
        assert!(status.success(), "size {size} failed");
    }
    println!();
    println!(
        "| queued tasks (16 running) | memory per queued task (RSS) | of which arguments | the rest |"
    );
    println!("| --- | --- | --- | --- |");
    let queued_sizes: Vec<u64> = std::env::var("MCP_TASKS_BENCH_QUEUED_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![30_000, 100_000]);
    for size in queued_sizes {
        let status = std::process::Command::new(std::env::current_exe().expect("bench binary"))
            .env("MCP_TASKS_BENCH_QUEUED", size.to_string())
            .status()
            .expect("run one size");
        assert!(status.success(), "size {size} failed");
    }
    println!();
    println!("| running tasks | memory per running task (RSS) | of which arguments | the rest |");
    println!("| --- | --- | --- | --- |");
    let running_sizes: Vec<u64> = std::env::var("MCP_TASKS_BENCH_RUNNING_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 30_000]);
    for size in running_sizes {
        let status = std::process::Command::new(std::env::current_exe().expect("bench binary"))
            .env("MCP_TASKS_BENCH_RUNNING", size.to_string())
            .status()
            .expect("run one size");
        assert!(status.success(), "size {size} failed");
    }
}

/// Memory per task of a tool that never returns: while nearly every task waits for a slot
/// (16 running at a time, the rest queued in the store), or, with `running`, while every
/// task runs (each holds its running future, its cancellation token and whatever else the
/// engine keeps for a running task).
async fn waiting(size: u64, running: bool) {
    let server = Server::builder()
        .tool(
            Tool::new(
                "quick",
                |cx: mcp_tasks_runtime::TaskContext, _: JsonObject| async move {
                    cx.cancellation().cancelled().await;
                    Ok(CallToolResult::default())
                },
            )
            .task_support(TaskSupport::Optional),
        )
        .engine_config(mcp_tasks_runtime::EngineConfig {
            max_running: if running { size as usize } else { 16 },
            max_queued: 1_000_000,
            ..Default::default()
        })
        .quotas(mcp_tasks_runtime::quota::QuotaConfig::unlimited())
        .build()
        .expect("server");
    let (session, _out) = server.session();
    let before = rss_bytes();
    for n in 0..size {
        create(&session, n).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let per_task = rss_bytes().saturating_sub(before) as f64 / size as f64;
    let per_arguments = arguments_rss(size);
    println!(
        "| {size} | {per_task:.0} B | {per_arguments:.0} B | {:.0} B |",
        per_task - per_arguments
    );
}

/// What the arguments of `size` tasks take alone: as many argument maps, held the same way,
/// measured in the calling process.
fn arguments_rss(size: u64) -> f64 {
    let before = rss_bytes();
    let arguments: Vec<JsonObject> = (0..size)
        .map(|n| {
            let Value::Object(map) = json!({ "n": n }) else {
                unreachable!()
            };
            map
        })
        .collect();
    let per_arguments = rss_bytes().saturating_sub(before) as f64 / size as f64;
    drop(arguments);
    per_arguments
}

async fn run(size: u64) {
    {
        let server = server();
        let (session, _out) = server.session();
        let before = rss_bytes();
        let started = Instant::now();
        let ids = Arc::new(fill(&session, size).await);
        let fill = started.elapsed();
        settle().await;
        let per_task = rss_bytes().saturating_sub(before) as f64 / size as f64;
        // A fixed number of `tasks/get`s from one caller and nothing else, for instruction
        // counts (`valgrind --tool=callgrind`) at each store size.
        if let Some(gets) = std::env::var("MCP_TASKS_BENCH_GETS")
            .ok()
            .and_then(|n| n.parse::<u64>().ok())
        {
            for i in 0..gets {
                let id = &ids[(i.wrapping_mul(2_654_435_761) % ids.len() as u64) as usize];
                let r = get(&session, id).await;
                assert!(r["result"]["status"].is_string(), "{r}");
            }
            return;
        }
        let get_rate = {
            let session = session.clone();
            let ids = Arc::clone(&ids);
            rate(16, move |i| {
                let session = session.clone();
                let ids = Arc::clone(&ids);
                async move {
                    let id = &ids[(i.wrapping_mul(2_654_435_761) % ids.len() as u64) as usize];
                    let r = get(&session, id).await;
                    assert!(r["result"]["status"].is_string(), "{r}");
                }
            })
            .await
        };
        let create_rate = {
            let session = session.clone();
            rate(16, move |i| {
                let session = session.clone();
                async move {
                    create(&session, i).await;
                }
            })
            .await
        };
        // The same creates, each with a fresh idempotency key; then repeats of keys used.
        let keyed_rate = {
            let session = session.clone();
            rate(16, move |i| {
                let session = session.clone();
                async move {
                    create_keyed(&session, i, &format!("fresh-{i}")).await;
                }
            })
            .await
        };
        let repeat_rate = {
            let session = session.clone();
            rate(16, move |i| {
                let session = session.clone();
                async move {
                    let n = i % 1000;
                    create_keyed(&session, n, &format!("fresh-{n}")).await;
                }
            })
            .await
        };
        let per_arguments = arguments_rss(size);
        println!(
            "| {size} | {:.2} s | {:.0} | {:.0} B | {per_arguments:.0} B | {get_rate:.0} | {create_rate:.0} | {keyed_rate:.0} | {repeat_rate:.0} |",
            fill.as_secs_f64(),
            size as f64 / fill.as_secs_f64(),
            per_task
        );
    }
}

/// The most recently created tasks, which the `recent` rows read.
const RECENT: usize = 10_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Creates `size` tasks through `session` from 64 callers; their ids, in creation order.
async fn fill(session: &Session, size: u64) -> Vec<String> {
    let ids = Arc::new(std::sync::Mutex::new(Vec::with_capacity(size as usize)));
    let next = Arc::new(AtomicU64::new(0));
    let mut fillers = Vec::new();
    for _ in 0..64 {
        let session = session.clone();
        let ids = Arc::clone(&ids);
        let next = Arc::clone(&next);
        fillers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= size {
                    break;
                }
                let id = create(&session, n).await;
                ids.lock().unwrap().push(id);
                tokio::task::yield_now().await;
            }
        }));
    }
    for f in fillers {
        f.await.unwrap();
    }
    std::mem::take(&mut *ids.lock().unwrap())
}

/// Lets every task created finish, so that the store holds settled tasks with results.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// The CPU time this process has used (user and system), from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses: utime and stime are the
    // 12th and 13th, in clock ticks (100 a second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}

/// `tasks/get`s per second from 16 callers of ids picked among `ids`, after a warm-up as
/// long as the measurement, and the CPU time the process spent per `tasks/get` (which
/// other load on the machine changes less than the rate).
async fn get_rate(session: &Session, ids: Arc<Vec<String>>) -> (f64, f64) {
    let mut measured = (0.0, 0.0);
    for _ in 0..2 {
        let session = session.clone();
        let ids = Arc::clone(&ids);
        let cpu = cpu_seconds();
        let per_second = rate(16, move |i| {
            let session = session.clone();
            let ids = Arc::clone(&ids);
            async move {
                let id = &ids[(i.wrapping_mul(2_654_435_761) % ids.len() as u64) as usize];
                let r = get(&session, id).await;
                assert!(r["result"]["status"].is_string(), "{r}");
            }
        })
        .await;
        let cpu = cpu_seconds() - cpu;
        measured = (per_second, cpu / (per_second * MEASURE.as_secs_f64()));
    }
    measured
}

/// Prints the rows of one store at one size: `tasks/get`s of any ids, then of recent ones.
///
/// With `MCP_TASKS_BENCH_GETS=N`, only `MCP_TASKS_BENCH_WARM` `tasks/get`s (default none)
/// then N, from one caller, of ids picked among those `MCP_TASKS_BENCH_PICK` names
/// (`recent`, the default, or `any`), and nothing printed: for instruction counts, where
/// the difference between two values of N is the cost of the `tasks/get`s alone.
async fn get_table_rows(label: &str, session: &Session, ids: Vec<String>) {
    let size = ids.len();
    let recent = Arc::new(ids[size.saturating_sub(RECENT)..].to_vec());
    let any = Arc::new(ids);
    let count = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|n| n.parse::<u64>().expect("a count"))
    };
    if let Some(gets) = count("MCP_TASKS_BENCH_GETS") {
        let ids = match std::env::var("MCP_TASKS_BENCH_PICK").as_deref() {
            Ok("any") => any,
            Ok("recent") | Err(_) => recent,
            Ok(other) => panic!("MCP_TASKS_BENCH_PICK: {other:?} is neither recent nor any"),
        };
        for i in 0..count("MCP_TASKS_BENCH_WARM").unwrap_or(0) + gets {
            let id = &ids[(i.wrapping_mul(2_654_435_761) % ids.len() as u64) as usize];
            let r = get(session, id).await;
            assert!(r["result"]["status"].is_string(), "{r}");
        }
        return;
    }
    // Any first: the recent rows then show whether the cache keeps the polled tasks when
    // arbitrary reads have filled it.
    for (picked, ids) in [("any", any), ("recent", recent)] {
        let (rate, cpu) = get_rate(session, ids).await;
        println!(
            "| {label} | {size} | {picked} | {rate:.0} | {:.1} µs |",
            cpu * 1e6
        );
    }
}

/// The rows of one size on the store `MCP_TASKS_BENCH_STORE` names.
fn get_rows(size: u64) {
    let store = std::env::var("MCP_TASKS_BENCH_STORE").unwrap_or_else(|_| "memory".into());
    match store.as_str() {
        "memory" => runtime().block_on(async {
            let server = server();
            let (session, _out) = server.session();
            let ids = fill(&session, size).await;
            settle().await;
            get_table_rows("memory", &session, ids).await;
        }),
        "sqlite" => sqlite_rows(size),
        other => panic!("MCP_TASKS_BENCH_STORE: unknown store {other:?} (memory, sqlite)"),
    }
}

#[cfg(not(feature = "sqlite"))]
fn sqlite_rows(_size: u64) {
    panic!(
        "MCP_TASKS_BENCH_STORE=sqlite needs the `sqlite` feature: cargo bench --features sqlite"
    );
}

/// The SQLite rows: the first tasks through a session, the rest copied in bulk with the
/// server stopped, then the `tasks/get`s through a session of a server opened anew.
#[cfg(feature = "sqlite")]
fn sqlite_rows(size: u64) {
    use mcp_tasks_runtime::store::SqliteTaskStore;
    // `MCP_TASKS_BENCH_DB=DIR` keeps the file of each size (and its first ids) in DIR, and
    // uses it again instead of filling anew (for runs under valgrind, which fill slowly).
    let kept = std::env::var_os("MCP_TASKS_BENCH_DB").map(std::path::PathBuf::from);
    let dir = kept.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("mcp-tasks-bench-engine-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join(format!("engine-{size}.db"));
    let first_ids = dir.join(format!("engine-{size}.ids"));
    let through_session = size.min(1_000);
    if kept.is_some() && path.exists() {
        let mut ids: Vec<String> = std::fs::read_to_string(&first_ids)
            .expect("the ids of the kept file")
            .lines()
            .map(str::to_owned)
            .collect();
        ids.extend((through_session..size).map(|x| format!("fill-{x}")));
        runtime().block_on(async {
            let store = SqliteTaskStore::open(&path).expect("open");
            let server = builder().store(store).build().expect("server");
            let (session, _out) = server.session();
            get_table_rows("SQLite", &session, ids).await;
        });
        return;
    }
    let mut ids = {
        // The runtime goes with the server, its tasks and its store.
        runtime().block_on(async {
            let store = SqliteTaskStore::open(&path).expect("open");
            let server = builder().store(store).build().expect("server");
            let (session, _out) = server.session();
            let ids = fill(&session, through_session).await;
            settle().await;
            ids
        })
    };
    if kept.is_some() {
        std::fs::write(&first_ids, ids.join("\n")).expect("keep the ids");
    }
    if size > through_session {
        let started = Instant::now();
        let last = ids.last().expect("a task").clone();
        sqlite_copy(&path, &last, through_session, size);
        ids.extend((through_session..size).map(|x| format!("fill-{x}")));
        let file = std::fs::metadata(&path).map_or(0, |m| m.len());
        eprintln!(
            "copied to {size} in {:.1} s ({} MiB)",
            started.elapsed().as_secs_f64(),
            file >> 20
        );
    }
    runtime().block_on(async {
        let store = SqliteTaskStore::open(&path).expect("open");
        let server = builder().store(store).build().expect("server");
        let (session, _out) = server.session();
        get_table_rows("SQLite", &session, ids).await;
    });
    if kept.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
