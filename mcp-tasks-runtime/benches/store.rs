//! Task store throughput: creates and gets per second for the memory and SQLite stores at 1
//! and 64 concurrent callers (for PostgreSQL at 1, 16 and 64, for Redis at 16 and 64), and the
//! time to reopen a large SQLite database.
//!
//! ```text
//! cargo bench -p mcp-tasks-runtime --features sqlite --bench store
//! cargo bench -p mcp-tasks-runtime --features sqlite --bench store -- --secs 5 --reopen-tasks 200000
//! cargo bench -p mcp-tasks-runtime --features sqlite,postgres --bench store -- \
//!     --postgres postgres://postgres@127.0.0.1:5432/bench
//! cargo bench -p mcp-tasks-runtime --features sqlite,redis --bench store -- \
//!     --redis redis://127.0.0.1:6379/0
//! ```
//!
//! Knobs (flags, or the environment variables in brackets):
//!
//! - `--secs S` [`BENCH_SECS`]: how long each throughput measurement runs (default 3).
//! - `--reopen-tasks N` [`BENCH_REOPEN_TASKS`]: tasks in the database that is reopened
//!   (default 1,000,000; 0 skips the reopen measurement).
//! - `--dir PATH` [`BENCH_DIR`]: where the databases go (default the system temp directory).
//! - `--postgres URL` [`BENCH_POSTGRES`]: also measure the PostgreSQL store (feature
//!   `postgres`) in this database, in a schema of its own that is dropped afterwards.
//! - `--redis URL` [`BENCH_REDIS`]: also measure the Redis store (feature `redis`) in this
//!   Redis database, under a key prefix of its own that is deleted afterwards.
//! - `--only postgres` [`BENCH_ONLY`]: measure only the PostgreSQL store (no memory, SQLite
//!   or reopen rows).
//!
//! Without `--bench` (as under `cargo test --benches`) it runs a short smoke version.

use mcp_tasks_runtime::model::JsonObject;
use mcp_tasks_runtime::store::{
    MemoryTaskStore, SqliteOptions, SqliteTaskStore, Synchronous, TaskStore,
};
use mcp_tasks_runtime::task::{Lease, TaskRecord, TaskStatus, random_id};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

struct Config {
    secs: f64,
    reopen_tasks: u64,
    dir: PathBuf,
    postgres: Option<String>,
    redis: Option<String>,
    postgres_only: bool,
}

impl Config {
    fn from_args() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let smoke = !args.iter().any(|a| a == "--bench");
        let flag = |name: &str, env: &str| -> Option<String> {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1).cloned())
                .or_else(|| std::env::var(env).ok())
        };
        let secs = flag("--secs", "BENCH_SECS")
            .and_then(|s| s.parse().ok())
            .unwrap_or(if smoke { 0.2 } else { 3.0 });
        let reopen_tasks = flag("--reopen-tasks", "BENCH_REOPEN_TASKS")
            .and_then(|s| s.replace('_', "").parse().ok())
            .unwrap_or(if smoke { 2_000 } else { 1_000_000 });
        let dir = flag("--dir", "BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
            .join(format!("mcp-tasks-store-bench-{}", std::process::id()));
        Self {
            secs,
            reopen_tasks,
            dir,
            postgres: flag("--postgres", "BENCH_POSTGRES"),
            redis: flag("--redis", "BENCH_REDIS"),
            postgres_only: flag("--only", "BENCH_ONLY").as_deref() == Some("postgres"),
        }
    }
}

/// A task as the engine creates it: `working`, a few arguments, a TTL, no outcome yet.
fn record(id: String, owner: &str) -> TaskRecord {
    let mut arguments = JsonObject::new();
    arguments.insert("query".into(), json!("what is the weather in Lisbon"));
    arguments.insert("limit".into(), json!(10));
    let now = SystemTime::now();
    let mut record = TaskRecord::new(id, "deep_research", arguments, now);
    record.owner = Some(owner.to_owned());
    record.status_message = Some("starting".into());
    record.ttl = Some(Duration::from_secs(3600));
    record.lease = Some(Lease {
        worker: "bench".into(),
        until: now + Duration::from_secs(30),
    });
    record.epoch = 1;
    record
}

/// A fast, deterministic random number generator for picking ids.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Runs `callers` concurrent create loops for `secs`; returns creates per second and the
/// ids created.
async fn creates<S: TaskStore>(store: &Arc<S>, callers: usize, secs: f64) -> (f64, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let store = Arc::clone(store);
        loops.spawn(async move {
            let owner = format!("principal-{}", caller % 8);
            let mut ids = Vec::new();
            while Instant::now() < deadline {
                let id = random_id().expect("random bytes");
                store
                    .create(record(id.clone(), &owner))
                    .await
                    .expect("create");
                ids.push(id);
            }
            ids
        });
    }
    let mut ids = Vec::new();
    while let Some(done) = loops.join_next().await {
        ids.extend(done.expect("a create loop panicked"));
    }
    (ids.len() as f64 / start.elapsed().as_secs_f64(), ids)
}

/// Runs `callers` concurrent loops of `get` on random ids out of `ids` for `secs`; returns
/// gets per second.
async fn gets<S: TaskStore>(
    store: &Arc<S>,
    ids: &Arc<Vec<String>>,
    callers: usize,
    secs: f64,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let store = Arc::clone(store);
        let ids = Arc::clone(ids);
        loops.spawn(async move {
            let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (caller as u64 + 1);
            let mut done = 0u64;
            while Instant::now() < deadline {
                for _ in 0..16 {
                    let id = &ids[(xorshift(&mut rng) % ids.len() as u64) as usize];
                    let found = store.get(id).await.expect("get");
                    assert!(found.is_some(), "{id} is missing");
                    done += 1;
                }
            }
            done
        });
    }
    let mut total = 0;
    while let Some(done) = loops.join_next().await {
        total += done.expect("a get loop panicked");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// How many of the most recently created tasks the gets pick from.
const HOT_TASKS: usize = 10_000;

struct Row {
    store: &'static str,
    callers: usize,
    creates: f64,
    gets: f64,
    /// Tasks in the store when the gets ran.
    tasks: usize,
}

async fn measure<S: TaskStore>(
    name: &'static str,
    store: S,
    callers: &[usize],
    secs: f64,
    rows: &mut Vec<Row>,
) {
    let store = Arc::new(store);
    let mut all_ids = Vec::new();
    for &callers in callers {
        let (creates_per_sec, ids) = creates(&store, callers, secs).await;
        all_ids.extend(ids);
        // Gets go to the most recently created tasks, like clients polling their running
        // tasks; the same number for every store.
        let hot = &all_ids[all_ids.len().saturating_sub(HOT_TASKS)..];
        let ids = Arc::new(hot.to_vec());
        let gets_per_sec = gets(&store, &ids, callers, secs).await;
        println!(
            "  {name:<22} {callers:>3} callers: {creates_per_sec:>10.0} creates/s {gets_per_sec:>10.0} gets/s ({} tasks)",
            all_ids.len()
        );
        rows.push(Row {
            store: name,
            callers,
            creates: creates_per_sec,
            gets: gets_per_sec,
            tasks: all_ids.len(),
        });
    }
}

fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-lock"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(file));
    }
}

fn file_mib(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / (1024.0 * 1024.0))
}

async fn reopen(config: &Config) {
    let tasks = config.reopen_tasks;
    let path = config.dir.join("reopen.db");
    remove_db(&path);
    println!("\nfilling {} with {tasks} tasks...", path.display());
    let start = Instant::now();
    let mut ids = Vec::new();
    {
        // Filling uses the durable default too, with many callers so commits are grouped.
        let store = Arc::new(SqliteTaskStore::open(&path).expect("open"));
        let next = Arc::new(AtomicU64::new(0));
        let mut loops = tokio::task::JoinSet::new();
        for caller in 0..256u64 {
            let store = Arc::clone(&store);
            let next = Arc::clone(&next);
            loops.spawn(async move {
                let owner = format!("principal-{}", caller % 8);
                let mut sample = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= tasks {
                        break;
                    }
                    let mut task = record(random_id().expect("random bytes"), &owner);
                    // Half of them finished, half still running.
                    if n.is_multiple_of(2) {
                        task.status = TaskStatus::Completed;
                    }
                    if n.is_multiple_of(1000) {
                        sample.push(task.id.clone());
                    }
                    store.create(task).await.expect("create");
                }
                sample
            });
        }
        while let Some(done) = loops.join_next().await {
            ids.extend(done.expect("a fill loop panicked"));
        }
    }
    let filled = start.elapsed();
    println!(
        "filled in {:.1} s ({:.0} creates/s, 256 callers); database {:.0} MiB",
        filled.as_secs_f64(),
        tasks as f64 / filled.as_secs_f64(),
        file_mib(&path)
    );
    let mut times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let store = SqliteTaskStore::open(&path).expect("reopen");
        let opened = start.elapsed();
        for id in &ids {
            let found = store.get(id).await.expect("get");
            assert!(found.is_some(), "{id} is missing after reopen");
        }
        let first_get = start.elapsed();
        let unfinished = Instant::now();
        let running = store.unfinished().await.expect("unfinished").len();
        let unfinished = unfinished.elapsed();
        drop(store);
        println!(
            "reopen: open {:.1} ms, open + {} cold gets {:.1} ms; unfinished() found {running} in {:.0} ms",
            opened.as_secs_f64() * 1e3,
            ids.len(),
            first_get.as_secs_f64() * 1e3,
            unfinished.as_secs_f64() * 1e3
        );
        times.push(first_get);
    }
    times.sort();
    println!(
        "| reopen {tasks} tasks ({:.0} MiB) | min {:.1} ms | max {:.1} ms |",
        file_mib(&path),
        times[0].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
    remove_db(&path);
}

/// Measures the PostgreSQL store in a fresh schema of the database at `url`, then drops it.
#[cfg(feature = "postgres")]
async fn postgres(url: &str, secs: f64, rows: &mut Vec<Row>) {
    use mcp_tasks_runtime::store::{PostgresOptions, PostgresTaskStore};
    let schema = format!("bench_{}", std::process::id());
    let options = PostgresOptions::default().schema(&schema).pool_size(16);
    let store = PostgresTaskStore::connect_with(url, options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    measure("postgres", store, &[1, 16, 64], secs, rows).await;
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to drop the bench schema");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop the bench schema");
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_url: &str, _secs: f64, _rows: &mut Vec<Row>) {
    panic!("--postgres needs the `postgres` feature: cargo bench --features sqlite,postgres");
}

/// Measures the Redis store under a fresh key prefix at `url`, then deletes its keys.
#[cfg(feature = "redis")]
async fn redis(url: &str, secs: f64, rows: &mut Vec<Row>) {
    use mcp_tasks_runtime::store::{RedisOptions, RedisTaskStore};
    let prefix = format!("mcp-tasks-bench-{}", std::process::id());
    let options = RedisOptions::default().key_prefix(&prefix);
    let store = RedisTaskStore::connect_with(url, options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    measure("redis", store, &[16, 64], secs, rows).await;
    let client = ::redis::Client::open(url).expect("a Redis URL");
    // The restart scan over every task the rows above left running, while another client
    // pings: its longest wait is how long Redis was held up by the scan.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pinger = std::thread::spawn({
        let (client, stop) = (client.clone(), std::sync::Arc::clone(&stop));
        move || {
            let mut conn = client.get_connection().expect("connect to ping");
            let mut longest = Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let start = Instant::now();
                ::redis::cmd("PING")
                    .query::<String>(&mut conn)
                    .expect("PING");
                longest = longest.max(start.elapsed());
            }
            longest
        }
    });
    let store = RedisTaskStore::connect_with(url, RedisOptions::default().key_prefix(&prefix))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let running = store.unfinished().await.expect("unfinished").len();
    let scanned = start.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let longest = pinger.join().expect("pinger");
    println!(
        "redis: unfinished() found {running} in {:.0} ms; the longest PING meanwhile took {:.1} ms",
        scanned.as_secs_f64() * 1e3,
        longest.as_secs_f64() * 1e3
    );
    let mut conn = client
        .get_connection()
        .expect("connect to delete the bench keys");
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query(&mut conn)
        .expect("list the bench keys");
    for chunk in keys.chunks(1000) {
        ::redis::cmd("DEL")
            .arg(chunk)
            .query::<()>(&mut conn)
            .expect("delete the bench keys");
    }
}

#[cfg(not(feature = "redis"))]
async fn redis(_url: &str, _secs: f64, _rows: &mut Vec<Row>) {
    panic!("--redis needs the `redis` feature: cargo bench --features sqlite,redis");
}

fn main() {
    let config = Config::from_args();
    std::fs::create_dir_all(&config.dir).expect("create the bench directory");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    println!(
        "task store benchmark: {} s a measurement, {} tokio workers",
        config.secs,
        runtime.metrics().num_workers()
    );
    runtime.block_on(async {
        let mut rows = Vec::new();
        if config.postgres_only {
            let url = config
                .postgres
                .as_deref()
                .expect("--only postgres needs --postgres URL");
            postgres(url, config.secs, &mut rows).await;
            for row in &rows {
                println!(
                    "| {} | {} | {:.0} | {:.0} | {} |",
                    row.store, row.callers, row.creates, row.gets, row.tasks
                );
            }
            return;
        }
        measure(
            "memory",
            MemoryTaskStore::new(),
            &[1, 64],
            config.secs,
            &mut rows,
        )
        .await;
        let configs = [
            ("sqlite (default)", SqliteOptions::default()),
            (
                "sqlite (no read cache)",
                SqliteOptions::default().cache_bytes(0),
            ),
            (
                "sqlite (NORMAL)",
                SqliteOptions::default().synchronous(Synchronous::Normal),
            ),
        ];
        for (n, (name, options)) in configs.into_iter().enumerate() {
            let path = config.dir.join(format!("throughput-{n}.db"));
            remove_db(&path);
            let store = SqliteTaskStore::open_with(&path, options).expect("open");
            measure(name, store, &[1, 64], config.secs, &mut rows).await;
            remove_db(&path);
        }
        if let Some(url) = &config.postgres {
            postgres(url, config.secs, &mut rows).await;
        }
        if let Some(url) = &config.redis {
            redis(url, config.secs, &mut rows).await;
        }
        println!("\n| store | callers | creates/s | gets/s | tasks in store |");
        println!("| --- | ---: | ---: | ---: | ---: |");
        for row in &rows {
            println!(
                "| {} | {} | {:.0} | {:.0} | {} |",
                row.store, row.callers, row.creates, row.gets, row.tasks
            );
        }
        if config.reopen_tasks > 0 {
            reopen(&config).await;
        }
    });
    let _ = std::fs::remove_dir_all(&config.dir);
}
