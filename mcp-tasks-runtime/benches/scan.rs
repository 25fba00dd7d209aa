//! Listing across owners stays flat as the store grows: the time of the first and of a
//! deep page of `ScanTasks::scan` filtered by status (and by tool and status), and of
//! `count`, for the memory and SQLite stores holding 10,000, 100,000 and 1,000,000 tasks.
//!
//! ```text
//! cargo bench -p mcp-tasks-runtime --features sqlite --bench scan
//! cargo bench -p mcp-tasks-runtime --features sqlite --bench scan -- --sizes 10000,100000
//! ```
//!
//! Of the stored tasks 2 % are `failed`, 1 % `working` and the rest `completed`, over four
//! tools. Without `--bench` (as under `cargo test --benches`) it runs a short smoke version.

use mcp_tasks_runtime::model::JsonObject;
use mcp_tasks_runtime::store::{
    MemoryTaskStore, ScanTasks, SqliteOptions, SqliteTaskStore, Synchronous, TaskFilter, TaskStore,
};
use mcp_tasks_runtime::task::{TaskRecord, TaskStatus};
use serde_json::json;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

const TOOLS: [&str; 4] = ["render", "mail", "charge", "index"];

fn record(n: u64) -> TaskRecord {
    let mut arguments = JsonObject::new();
    arguments.insert("n".into(), json!(n));
    let now = SystemTime::now();
    let status = match n % 100 {
        0 | 1 => TaskStatus::Failed,
        2 => TaskStatus::Working,
        _ => TaskStatus::Completed,
    };
    let mut record = TaskRecord::new(
        format!("task-{n:08}"),
        TOOLS[(n / 7 % 4) as usize],
        arguments,
        now,
    );
    record.owner = Some(format!("principal:user{}", n % 1000));
    record.status = status;
    record.ttl = None;
    record
}

/// Fills `store` up to `total` tasks, 64 creates at a time.
async fn fill<S: TaskStore>(store: &Arc<S>, from: u64, total: u64) {
    let mut next = from;
    while next < total {
        let end = (next + 4096).min(total);
        let mut set = tokio::task::JoinSet::new();
        for lane in 0..64 {
            let store = Arc::clone(store);
            set.spawn(async move {
                let mut n = next + lane;
                while n < end {
                    store.create(record(n)).await.expect("create");
                    n += 64;
                }
            });
        }
        while set.join_next().await.is_some() {}
        next = end;
    }
}

/// The median time of `runs` runs of `op`, in microseconds.
async fn median<F, Fut>(runs: usize, mut op: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        op().await;
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// One row: first page, tenth page, tool+status page and count, each a median.
async fn measure<S: ScanTasks>(name: &str, size: u64, store: &Arc<S>, runs: usize) {
    let failed = TaskFilter::new().status(TaskStatus::Failed);
    let first = median(runs, || async {
        let page = store.scan(&failed, None, 50).await.expect("scan");
        assert_eq!(page.tasks.len(), 50);
    })
    .await;
    // The cursor of the tenth page, found once; then that page timed.
    let mut cursor = None;
    for _ in 0..9 {
        cursor = store
            .scan(&failed, cursor.as_deref(), 50)
            .await
            .expect("scan")
            .next_cursor;
    }
    let deep = median(runs, || async {
        let page = store
            .scan(&failed, cursor.as_deref(), 50)
            .await
            .expect("scan");
        assert_eq!(page.tasks.len(), 50);
    })
    .await;
    let by_tool = TaskFilter::new().tool("mail").status(TaskStatus::Failed);
    let tool = median(runs, || async {
        store.scan(&by_tool, None, 50).await.expect("scan");
    })
    .await;
    let count = median(runs.min(20), || async {
        let counts = store.count().await.expect("count");
        assert_eq!(counts.total(), size);
    })
    .await;
    println!("| {name} | {size} | {first:.0} | {deep:.0} | {tool:.0} | {count:.0} |");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = !args.iter().any(|a| a == "--bench");
    let sizes: Vec<u64> = args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
        .map(|s| {
            s.split(',')
                .filter_map(|n| n.replace('_', "").parse().ok())
                .collect()
        })
        .unwrap_or_else(|| {
            if smoke {
                vec![10_000]
            } else {
                vec![10_000, 100_000, 1_000_000]
            }
        });
    let runs = if smoke { 5 } else { 200 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        println!("| store | tasks | first page of failed (µs) | 10th page (µs) | failed of one tool (µs) | count (µs) |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: |");
        let memory = Arc::new(MemoryTaskStore::new());
        let dir = std::env::temp_dir().join(format!("mcp-tasks-scan-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("bench directory");
        let options = SqliteOptions::default().synchronous(Synchronous::Normal);
        let sqlite = Arc::new(
            SqliteTaskStore::open_with(dir.join("scan.db"), options).expect("open"),
        );
        let mut filled = 0;
        for &size in &sizes {
            fill(&memory, filled, size).await;
            fill(&sqlite, filled, size).await;
            filled = size;
            measure("memory", size, &memory, runs).await;
            measure("SQLite", size, &sqlite, runs).await;
        }
        drop(sqlite);
        let _ = std::fs::remove_dir_all(&dir);
    });
}
