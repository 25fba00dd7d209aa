//! `get` against the number of stored tasks: the same store filled to 1,000, 100,000 and
//! 1,000,000 tasks, then `get`s of ids picked at random among all of them (`any`), and
//! among the 10,000 created last (`recent`, like clients polling the tasks they started).
//!
//! ```text
//! cargo bench -p mcp-tasks-runtime --features sqlite --bench size
//! cargo bench -p mcp-tasks-runtime --features sqlite,postgres --bench size -- --postgres postgres://postgres@127.0.0.1:5432/postgres
//! BENCH_SIZES=1000,100000 BENCH_SECS=2 cargo bench -p mcp-tasks-runtime --features sqlite --bench size
//! ```
//!
//! The first task is created through the store; the others are copies of it made by one
//! bulk `INSERT … SELECT` per step (with the store closed, for SQLite), each with an id of
//! its own and the next creation and change sequence numbers. SQLite is measured with its
//! read cache on (the default) and off, so that the rows without it show the cost of the
//! database's own lookups; PostgreSQL, with `--postgres URL` (or `BENCH_POSTGRES`), in a
//! schema of its own that is dropped afterwards.

use mcp_tasks_runtime::store::{SqliteOptions, SqliteTaskStore, TaskStore};
use mcp_tasks_runtime::task::TaskRecord;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

#[path = "support/sqlite_copy.rs"]
mod sqlite_copy;
use sqlite_copy::sqlite_copy;

fn template() -> TaskRecord {
    let mut arguments = serde_json::Map::new();
    arguments.insert("query".into(), json!("what is the weather in Lisbon"));
    arguments.insert("limit".into(), json!(10));
    let mut record = TaskRecord::new("fill-0", "deep_research", arguments, SystemTime::now());
    record.owner = Some("principal-1".into());
    record.status_message = Some("starting".into());
    record.ttl = Some(Duration::from_secs(24 * 3600));
    record
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// `get`s per second of random ids among `fill-{from}` … `fill-{to - 1}`, from `callers`
/// concurrent loops, for `secs`, after a warm-up of a fifth of that.
async fn gets<S: TaskStore>(store: &Arc<S>, ids: (u64, u64), callers: usize, secs: f64) -> f64 {
    get_loops(store, ids, callers, secs / 5.0).await;
    get_loops(store, ids, callers, secs).await
}

async fn get_loops<S: TaskStore>(
    store: &Arc<S>,
    (from, to): (u64, u64),
    callers: usize,
    secs: f64,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let store = Arc::clone(store);
        loops.spawn(async move {
            let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (caller as u64 + 1);
            let mut done = 0u64;
            while Instant::now() < deadline {
                for _ in 0..16 {
                    let id = format!("fill-{}", from + xorshift(&mut rng) % (to - from));
                    let found = store.get(&id).await.expect("get");
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

/// The most recently created tasks, which the second kind of row reads.
const RECENT: u64 = 10_000;

/// Prints the rows of one store at one size: `get`s of any task, then of recent ones.
async fn rows<S: TaskStore>(label: &str, store: &Arc<S>, tasks: u64, secs: f64) {
    let recent = (tasks.saturating_sub(RECENT), tasks);
    for (picked, ids) in [("any", (0, tasks)), ("recent", recent)] {
        for callers in [1, 16] {
            let rate = gets(store, ids, callers, secs).await;
            println!("| {label} | {tasks} | {picked} | {callers} | {rate:.0} |");
        }
    }
}

async fn sqlite(dir: &Path, sizes: &[u64], secs: f64) {
    let path = dir.join("size.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    {
        let store = SqliteTaskStore::open(&path).expect("open");
        store.create(template()).await.expect("create the template");
    }
    let mut stored = 1;
    for &tasks in sizes {
        if tasks > stored {
            let started = Instant::now();
            sqlite_copy(&path, "fill-0", stored, tasks);
            eprintln!(
                "filled to {tasks} in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            stored = tasks;
        }
        for (label, cache) in [
            ("SQLite, read cache on", true),
            ("SQLite, read cache off", false),
        ] {
            let mut options = SqliteOptions::default();
            if !cache {
                options.cache_bytes = 0;
            }
            let store = Arc::new(SqliteTaskStore::open_with(&path, options).expect("open"));
            rows(label, &store, tasks, secs).await;
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str, sizes: &[u64], secs: f64) {
    use mcp_tasks_runtime::store::{PostgresOptions, PostgresTaskStore};
    let schema = format!("bench_size_{}", std::process::id());
    let store = PostgresTaskStore::connect_with(url, PostgresOptions::default().schema(&schema))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    store.create(template()).await.expect("create the template");
    let store = Arc::new(store);
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect for the bulk inserts");
    tokio::spawn(connection);
    let columns = "owner, tool, settle, status, status_message, created_at, updated_at, \
        ttl_ms, poll_interval_ms, expires_at, version, input_seq, arguments, input_requests, \
        input_responses, outcome, client, lease_worker, lease_until, epoch, cancel_at, \
        cancel_by, steps, unique_key, synchronous, journal";
    let mut stored = 1;
    for &tasks in sizes {
        if tasks > stored {
            let started = Instant::now();
            client
                .batch_execute(&format!(
                    "INSERT INTO {schema}.tasks (id, {columns}) \
                     SELECT 'fill-' || g, {columns} FROM {schema}.tasks AS t, \
                     generate_series({stored}, {last}) AS g WHERE t.id = 'fill-0'; \
                     ANALYZE {schema}.tasks;",
                    last = tasks - 1
                ))
                .await
                .expect("bulk insert");
            eprintln!(
                "filled to {tasks} in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            stored = tasks;
        }
        rows("PostgreSQL", &store, tasks, secs).await;
    }
    drop(store);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop the bench schema");
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_url: &str, _sizes: &[u64], _secs: f64) {
    panic!("--postgres needs the `postgres` feature: cargo bench --features sqlite,postgres");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, env: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
            .or_else(|| std::env::var(env).ok())
    };
    let secs: f64 = flag("--secs", "BENCH_SECS").map_or(3.0, |s| s.parse().expect("--secs"));
    let sizes: Vec<u64> = flag("--sizes", "BENCH_SIZES")
        .unwrap_or_else(|| "1000,100000,1000000".into())
        .split(',')
        .map(|n| n.parse().expect("--sizes"))
        .collect();
    let dir = flag("--dir", "BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let postgres_url = flag("--postgres", "BENCH_POSTGRES");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!("| store | tasks | ids picked among | callers | gets/s |");
        println!("| --- | ---: | --- | ---: | ---: |");
        if flag("--only", "BENCH_ONLY").as_deref() != Some("postgres") {
            sqlite(&dir, &sizes, secs).await;
        }
        if let Some(url) = postgres_url {
            postgres(&url, &sizes, secs).await;
        }
    });
}
