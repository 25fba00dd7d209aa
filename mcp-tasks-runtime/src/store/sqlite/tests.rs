//! The SQLite store's own tests, beside the shared backend suite.

use super::cache::{CACHE_SHARDS, Cache, CacheShard, Lookup};
use super::row::COLUMNS;
use super::schema::{APPLICATION_ID, MIGRATIONS, migrate};
use super::*;
use crate::error::CallOutcome;
use crate::jsonrpc::ErrorObject;
use crate::model::InputRequest;
use crate::model::{CallToolResult, Content};
use crate::store::codec::from_millis;
use crate::store::codec::millis_ceil;
use crate::store::testing::{check_store, sample_record};
use crate::task::TaskStatus;
use serde_json::Value;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::UNIX_EPOCH;

/// A fresh directory under the system temp directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "mcp-tasks-sqlite-{}-{n}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        Self(dir)
    }

    /// A database path that no test has used yet.
    fn db(&self) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        self.0.join(format!("tasks-{n}.db"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + ms)
}

fn open_error_message(path: &Path) -> String {
    match SqliteTaskStore::open(path) {
        Ok(store) => panic!("{} opened: {store:?}", path.display()),
        Err(StoreError::Backend { message, .. }) => message,
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_store_passes_the_suite() {
    let dir = TempDir::new("suite");
    check_store(|| async { SqliteTaskStore::open(dir.db()).expect("open") }).await;
}

#[tokio::test]
async fn sqlite_store_passes_the_suite_on_one_thread() {
    let dir = TempDir::new("suite-1");
    check_store(|| async { SqliteTaskStore::open(dir.db()).expect("open") }).await;
}

/// A task that uses every field, with values JSON makes easy to lose: a JSON `null`
/// that is present, floats that need every digit, the largest integers.
fn tricky_record(id: &str) -> TaskRecord {
    let mut record = sample_record(id, Some("alice"), at_ms(123));
    record.arguments = json!({
        "third": 0.1 + 0.2,
        "tiny": 5e-324,
        "big": u64::MAX,
        "min": i64::MIN,
        "text": "tab\t nul\u{0} emoji 🦀",
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    record.status = TaskStatus::Completed;
    record.updated_at = at_ms(456);
    record.ttl = Some(Duration::from_millis(3_600_001));
    record.poll_interval = Duration::from_millis(1_250);
    record.status_message = Some(String::new());
    record.outcome = Some(Box::new(CallOutcome::Result(CallToolResult {
        content: vec![Content::text("done"), Content::image("aGk=", "image/png")],
        structured_content: Some(Value::Null),
        is_error: false,
    })));
    record.input_requests.insert(
        "input-1".into(),
        InputRequest {
            method: "roots/list".into(),
            params: Value::Null,
            key: None,
        },
    );
    record.input_responses.insert("input-0".into(), Value::Null);
    record.input_seq = 2;
    record.version = 5;
    record
}

#[tokio::test]
async fn tasks_survive_reopening_exactly() {
    let dir = TempDir::new("reopen");
    let path = dir.db();
    let record = tricky_record("t-1");
    let mut error = sample_record("t-2", None, at_ms(124));
    error.status = TaskStatus::Failed;
    error.outcome = Some(Box::new(CallOutcome::Error(
        ErrorObject::new(-32603, "boom").with_data(Value::Null),
    )));
    {
        let store = SqliteTaskStore::open(&path).unwrap();
        store.create(record.clone()).await.unwrap();
        store.create(error.clone()).await.unwrap();
    }
    let store = SqliteTaskStore::open(&path).unwrap();
    assert_eq!(store.get("t-1").await.unwrap(), Some(record));
    assert_eq!(store.get("t-2").await.unwrap(), Some(error));
}

#[tokio::test]
async fn cursors_stay_valid_across_reopening_and_deletes() {
    let dir = TempDir::new("cursor");
    let path = dir.db();
    let cursor = {
        let store = SqliteTaskStore::open(&path).unwrap();
        for (n, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
            let record = sample_record(id, Some("alice"), at_ms(n as u64));
            store.create(record).await.unwrap();
        }
        let page = store.list(Some("alice"), None, 3).await.unwrap();
        assert_eq!(page.tasks.len(), 3);
        // The newest two tasks go, so the cursor now points past every task.
        assert!(store.delete("c").await.unwrap());
        assert!(store.delete("d").await.unwrap());
        page.next_cursor.unwrap()
    };
    let store = SqliteTaskStore::open(&path).unwrap();
    store
        .create(sample_record("e", Some("alice"), at_ms(9)))
        .await
        .unwrap();
    let page = store.list(Some("alice"), Some(&cursor), 10).await.unwrap();
    let ids: Vec<_> = page.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["e"],
        "a task created after a reopen reuses an old position"
    );
    assert_eq!(page.next_cursor, None);
    for junk in ["", "s", "s-1", "m3", "s1x", "s99999999999999999999999"] {
        assert_eq!(
            store.list(Some("alice"), Some(junk), 10).await,
            Err(StoreError::InvalidCursor(junk.to_owned()))
        );
    }
}

#[tokio::test]
async fn concurrent_creates_of_one_id_store_it_once() {
    let dir = TempDir::new("dup");
    let store = Arc::new(SqliteTaskStore::open(dir.db()).unwrap());
    let mut creates = tokio::task::JoinSet::new();
    for n in 0..200u64 {
        let store = Arc::clone(&store);
        creates.spawn(async move {
            let id = format!("t-{}", n / 2);
            (n, store.create(sample_record(&id, None, at_ms(n))).await)
        });
    }
    let mut created = 0;
    let mut duplicates = 0;
    while let Some(joined) = creates.join_next().await {
        match joined.unwrap() {
            (_, Ok(())) => created += 1,
            (n, Err(StoreError::Duplicate(id))) => {
                assert_eq!(id, format!("t-{}", n / 2));
                duplicates += 1;
            }
            (_, Err(other)) => panic!("create failed: {other}"),
        }
    }
    assert_eq!((created, duplicates), (100, 100));
    let page = store.list(None, None, 1000).await.unwrap();
    assert_eq!(page.tasks.len(), 100);
}

#[tokio::test]
async fn oversized_outcomes_are_refused_and_change_nothing() {
    let dir = TempDir::new("big");
    let options = SqliteOptions::default().max_outcome_bytes(1024);
    let store = SqliteTaskStore::open_with(dir.db(), options).unwrap();
    let big = CallOutcome::Result(CallToolResult::success(vec![Content::text(
        "x".repeat(2000),
    )]));

    let mut record = sample_record("big", None, at_ms(0));
    record.status = TaskStatus::Completed;
    record.outcome = Some(Box::new(big.clone()));
    let Err(StoreError::Backend { message, .. }) = store.create(record).await else {
        panic!("an oversized create was accepted");
    };
    assert!(message.contains("limit of 1024 bytes"), "{message}");
    assert!(message.contains("max_outcome_bytes"), "{message}");
    assert_eq!(store.get("big").await.unwrap(), None);

    let small = sample_record("small", None, at_ms(0));
    store.create(small.clone()).await.unwrap();
    let mut done = small.clone();
    done.status = TaskStatus::Completed;
    done.outcome = Some(Box::new(big));
    let Err(StoreError::Backend { message, .. }) = store.compare_and_set(done, 0).await else {
        panic!("an oversized compare_and_set was accepted");
    };
    assert!(message.contains("task small"), "{message}");
    assert_eq!(store.get("small").await.unwrap(), Some(small.clone()));

    let mut fits = small;
    fits.status = TaskStatus::Completed;
    fits.outcome = Some(Box::new(CallOutcome::Result(CallToolResult::success(
        vec![Content::text("x".repeat(900))],
    ))));
    assert!(store.compare_and_set(fits, 0).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_share_tasks_claims_and_changes() {
    let dir = TempDir::new("shared");
    let path = dir.db();
    let a = SqliteTaskStore::open(&path).unwrap();
    let b = SqliteTaskStore::open(&path).unwrap();
    let cursor = a.changes(None, 100).await.unwrap().cursor;
    a.create(sample_record("t", None, at_ms(0))).await.unwrap();
    // B sees A's task, and A's cached copy is refreshed by the change feed after B
    // writes it.
    let seen = b.get("t").await.unwrap().expect("B sees A's task");
    assert_eq!(a.get("t").await.unwrap().unwrap().version, 0);
    let mut next = seen.clone();
    next.status = TaskStatus::Completed;
    assert!(b.compare_and_set(next, 0).await.unwrap());
    let changes = a.changes(Some(cursor), 100).await.unwrap();
    assert!(changes.ids.iter().any(|id| id == "t"), "{changes:?}");
    let now = a.get("t").await.unwrap().unwrap();
    assert_eq!((now.version, now.status), (1, TaskStatus::Completed));
    // A stale compare-and-set from A loses and leaves nothing stale behind.
    let mut stale = seen;
    stale.status_message = Some("stale".into());
    assert!(!a.compare_and_set(stale, 0).await.unwrap());

    // Creation sequence numbers never collide: listing sees every task once, in order.
    for n in 0..20 {
        let (store, name) = if n % 2 == 0 { (&a, "a") } else { (&b, "b") };
        store
            .create(sample_record(&format!("{name}{n:02}"), Some("o"), at_ms(n)))
            .await
            .unwrap();
    }
    let page = b.list(Some("o"), None, 100).await.unwrap();
    let ids: Vec<String> = page.tasks.iter().map(|t| t.id.clone()).collect();
    let want: Vec<String> = (0..20)
        .map(|n| format!("{}{n:02}", if n % 2 == 0 { "a" } else { "b" }))
        .collect();
    assert_eq!(ids, want);

    // Claims from both stores never hand out one task twice.
    let (a, b) = (Arc::new(a), Arc::new(b));
    let claim_all = |store: Arc<SqliteTaskStore>, worker: &'static str| async move {
        let mut mine = Vec::new();
        loop {
            let got = store.claim(worker, at_ms(99_000), 3, &[]).await.unwrap();
            if got.is_empty() {
                return mine;
            }
            mine.extend(got.into_iter().map(|r| r.id));
        }
    };
    let (from_a, from_b) = tokio::join!(
        tokio::spawn(claim_all(Arc::clone(&a), "wa")),
        tokio::spawn(claim_all(Arc::clone(&b), "wb"))
    );
    let mut all = from_a.unwrap();
    all.extend(from_b.unwrap());
    let count = all.len();
    all.sort();
    all.dedup();
    assert_eq!((all.len(), count), (20, 20));
}

/// The child half of `another_process_writes_to_the_same_file`: opens the store named
/// by `MCP_TASKS_SHARED_CHILD`, creates tasks `child-0..20`, and exits.
#[test]
#[ignore = "run by another test in a child process"]
fn shared_writer_child() {
    let Some(path) = std::env::var_os("MCP_TASKS_SHARED_CHILD") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = SqliteTaskStore::open(PathBuf::from(path)).unwrap();
        for n in 0..20 {
            store
                .create(sample_record(&format!("child-{n}"), Some("o"), at_ms(n)))
                .await
                .unwrap();
        }
    });
    println!("CREATED");
}

#[tokio::test]
async fn another_process_writes_to_the_same_file() {
    use std::process::Command;

    let dir = TempDir::new("process");
    let path = dir.db();
    let store = SqliteTaskStore::open(&path).unwrap();
    let cursor = store.changes(None, 100).await.unwrap().cursor;
    for n in 0..20 {
        store
            .create(sample_record(&format!("parent-{n}"), Some("o"), at_ms(n)))
            .await
            .unwrap();
    }
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::sqlite::tests::shared_writer_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MCP_TASKS_SHARED_CHILD", &path)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("CREATED"),
        "the child failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let changes = store.changes(Some(cursor), 1000).await.unwrap();
    for n in 0..20 {
        let id = format!("child-{n}");
        assert!(changes.ids.contains(&id), "the change feed missed {id}");
        assert!(store.get(&id).await.unwrap().is_some());
    }
    let page = store.list(Some("o"), None, 100).await.unwrap();
    assert_eq!(page.tasks.len(), 40);
}

#[test]
fn a_database_from_a_newer_version_is_refused() {
    let dir = TempDir::new("newer");
    let path = dir.db();
    drop(SqliteTaskStore::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let message = open_error_message(&path);
    let latest = SqliteTaskStore::SCHEMA_VERSION;
    assert!(message.contains("schema version 99"), "{message}");
    assert!(message.contains(&format!("up to {latest}")), "{message}");
    assert!(message.contains("newer version of mcp-tasks"), "{message}");
}

#[test]
fn migrations_run_forward_once_at_open() {
    let dir = TempDir::new("migrate");
    let path = dir.db();
    drop(SqliteTaskStore::open(&path).unwrap());
    let mut conn = Connection::open(&path).unwrap();
    let version = |conn: &Connection| -> i64 {
        conn.pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    };
    assert_eq!(version(&conn), i64::from(SqliteTaskStore::SCHEMA_VERSION));
    let application_id: i32 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .unwrap();
    assert_eq!(application_id, APPLICATION_ID);

    // A later version adds a column: only the new migration runs.
    let mut next = MIGRATIONS.to_vec();
    next.push("ALTER TABLE tasks ADD COLUMN note TEXT;");
    migrate(&mut conn, &path, &next).unwrap();
    assert_eq!(
        version(&conn),
        i64::from(SqliteTaskStore::SCHEMA_VERSION) + 1
    );
    migrate(&mut conn, &path, &next).unwrap();
    conn.execute("UPDATE tasks SET note = 'x'", []).unwrap();

    // A migration that fails leaves the database as it was.
    let mut broken = next.clone();
    broken.push("CREATE TABLE extra (x); SELECT no_such_function();");
    let Err(StoreError::Backend { message, .. }) = migrate(&mut conn, &path, &broken) else {
        panic!("a failing migration succeeded");
    };
    assert!(message.contains("migration to schema version"), "{message}");
    assert_eq!(
        version(&conn),
        i64::from(SqliteTaskStore::SCHEMA_VERSION) + 1
    );
    let extra: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'extra'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(extra, 0);
}

#[tokio::test]
async fn a_schema_3_database_with_a_task_upgrades_to_durable_fields() {
    let dir = TempDir::new("upgrade-3");
    let path = dir.db();
    let mut conn = Connection::open(&path).unwrap();
    migrate(&mut conn, &path, &MIGRATIONS[..3]).unwrap();
    conn.execute_batch(
        "INSERT INTO tasks (id, seq, owner, tool, settle, status, created_at, updated_at, \
            poll_interval_ms, version, input_seq, arguments, input_requests, input_responses, \
            client, epoch, change_seq) \
         VALUES ('old', 1, 'alice', 'sample', 'complete', 'working', 1800000000000, \
            1800000000000, 1000, 0, 0, '{\"n\":1}', '{}', '{}', '{}', 0, 1); \
         UPDATE meta SET value = 1 WHERE key IN ('last_seq', 'change_seq');",
    )
    .unwrap();
    drop(conn);

    let store = SqliteTaskStore::open(&path).unwrap();
    let mut want = sample_record("old", Some("alice"), at_ms(0));
    want.status = TaskStatus::Working;
    // Written before tasks kept a journal: no history, no trace.
    want.history.clear();
    want.trace = None;
    let old = store.get("old").await.unwrap().expect("the old task");
    assert_eq!(old, want);
    let page = store.list(Some("alice"), None, 10).await.unwrap();
    assert_eq!(page.tasks, [want.clone()]);

    // The old task can take a key, and then holds it.
    let mut keyed = old.clone();
    keyed.unique_key = Some("k".into());
    keyed.steps.insert("s".into(), json!([1]));
    assert!(store.compare_and_set(keyed, 0).await.unwrap());
    let mut second = sample_record("new", Some("alice"), at_ms(1));
    second.unique_key = Some("k".into());
    assert_eq!(
        store.create(second).await,
        Err(StoreError::Taken("old".into()))
    );
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_handles_on_one_file_refuse_a_taken_unique_key() {
    let dir = TempDir::new("unique-race");
    let path = dir.db();
    let a = Arc::new(SqliteTaskStore::open(&path).unwrap());
    let b = Arc::new(SqliteTaskStore::open(&path).unwrap());
    crate::store::testing::check_unique_race(a, b).await;
}

#[test]
fn another_applications_database_is_refused() {
    let dir = TempDir::new("foreign");
    let path = dir.db();
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE notes (body TEXT);")
        .unwrap();
    drop(conn);
    let message = open_error_message(&path);
    assert!(
        message.contains("not an mcp-tasks task database"),
        "{message}"
    );
}

#[test]
fn a_corrupt_file_is_refused_at_open() {
    let dir = TempDir::new("corrupt");
    let garbage = dir.db();
    std::fs::write(&garbage, "this is not a database\n".repeat(500)).unwrap();
    let message = open_error_message(&garbage);
    assert!(message.contains("corrupt"), "{message}");
    let error = SqliteTaskStore::open(&garbage).unwrap_err();
    let source = std::error::Error::source(&error).expect("the error keeps its source");
    assert!(
        source.downcast_ref::<rusqlite::Error>().is_some(),
        "{source:?}"
    );
    assert!(
        message.contains(&garbage.display().to_string()),
        "{message}"
    );

    // A real task database whose schema page is damaged.
    let damaged = dir.db();
    drop(SqliteTaskStore::open(&damaged).unwrap());
    let mut bytes = std::fs::read(&damaged).unwrap();
    assert!(bytes.len() > 4096, "the database is {} bytes", bytes.len());
    for byte in &mut bytes[100..4096] {
        *byte = 0xa5;
    }
    std::fs::write(&damaged, bytes).unwrap();
    let message = open_error_message(&damaged);
    assert!(
        message.contains("malformed") || message.contains("corrupt"),
        "{message}"
    );
}

#[test]
fn an_unwritable_path_is_refused_at_open() {
    let dir = TempDir::new("unwritable");
    let missing = dir.0.join("no-such-dir").join("tasks.db");
    let message = open_error_message(&missing);
    assert!(message.contains("does the directory exist"), "{message}");

    // A path below a regular file cannot be created, even by root.
    let file = dir.0.join("file");
    std::fs::write(&file, "").unwrap();
    let message = open_error_message(&file.join("tasks.db"));
    assert!(
        message.contains("cannot open the task database"),
        "{message}"
    );

    // A directory is not a database file.
    let subdir = dir.0.join("subdir");
    std::fs::create_dir(&subdir).unwrap();
    let message = open_error_message(&subdir);
    assert!(
        message.contains("cannot open the task database"),
        "{message}"
    );
}

#[tokio::test]
async fn expiry_and_scans_use_their_indexes() {
    let dir = TempDir::new("plans");
    let path = dir.db();
    drop(SqliteTaskStore::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    let plan = |sql: &str| -> String {
        let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = statement
            .query_map([], |row| row.get::<_, String>(3))
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
    };
    let get = plan(&format!("SELECT {COLUMNS} FROM tasks WHERE id = 'x'"));
    assert!(
        get.contains("USING INDEX sqlite_autoindex_tasks_1"),
        "{get}"
    );
    let list = plan(&format!(
        "SELECT {COLUMNS} FROM tasks INDEXED BY tasks_owner_seq \
         WHERE owner IS NULL AND seq > 0 ORDER BY seq LIMIT 5"
    ));
    assert!(!list.contains("TEMP B-TREE"), "{list}");
    assert!(list.contains("owner=? AND seq>?"), "{list}");
    let expire = plan(
        "SELECT rowid FROM tasks INDEXED BY tasks_expires_at \
         WHERE expires_at <= 5 ORDER BY expires_at LIMIT 5",
    );
    assert!(expire.contains("expires_at<?"), "{expire}");
    assert!(!expire.contains("TEMP B-TREE"), "{expire}");
}

#[tokio::test]
async fn shared_reads_of_a_cached_task_share_one_record() {
    let dir = TempDir::new("shared");
    let store = SqliteTaskStore::open(dir.db()).unwrap();
    let record = sample_record("shared", None, at_ms(0));
    store.create(record.clone()).await.unwrap();
    let first = store.get_shared("shared").await.unwrap().unwrap();
    let second = store.get_shared("shared").await.unwrap().unwrap();
    assert!(
        Arc::ptr_eq(&first, &second),
        "a cache hit copied the record"
    );
    assert!(store.compare_and_set(record, 0).await.unwrap());
    let written = store.get_shared("shared").await.unwrap().unwrap();
    assert_eq!(written.version, 1);
    assert!(!Arc::ptr_eq(&first, &written));
    // Without the cache, every read decodes a record of its own.
    let other = TempDir::new("uncached");
    let uncached =
        SqliteTaskStore::open_with(other.db(), SqliteOptions::default().cache_bytes(0)).unwrap();
    uncached
        .create(sample_record("shared", None, at_ms(0)))
        .await
        .unwrap();
    let a = uncached.get_shared("shared").await.unwrap().unwrap();
    let b = uncached.get_shared("shared").await.unwrap().unwrap();
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(*a, *b);
}

#[tokio::test]
async fn a_get_never_shows_an_older_version_than_a_listing_did() {
    let dir = TempDir::new("listed");
    let db = dir.db();
    let here = SqliteTaskStore::open(&db).unwrap();
    let record = sample_record("listed", None, at_ms(0));
    here.create(record.clone()).await.unwrap();
    let created = here.get("listed").await.unwrap().unwrap();
    assert_eq!(created.version, 0);
    // Another process's store on the same file: its writes reach this one's read cache only
    // through the change feed, or through what this one reads from the file.
    let there = SqliteTaskStore::open(&db).unwrap();
    let mut newer = there.get("listed").await.unwrap().unwrap();
    newer.status_message = Some("newer".into());
    assert!(there.compare_and_set(newer, 0).await.unwrap());
    // Cached, and the change feed has not been read yet: the old version.
    assert_eq!(here.get("listed").await.unwrap().unwrap().version, 0);
    let page = here.scan(&TaskFilter::default(), None, 10).await.unwrap();
    let listed = page.tasks.iter().find(|t| t.id == "listed").unwrap();
    assert_eq!(listed.version, 1);
    assert_eq!(
        here.get("listed").await.unwrap().unwrap().version,
        1,
        "a get showed an older version than the listing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_read_cache_never_serves_an_older_version() {
    let dir = TempDir::new("cache");
    let store = Arc::new(SqliteTaskStore::open(dir.db()).unwrap());
    let mut record = sample_record("hot", None, at_ms(0));
    record.status_message = Some("0".into());
    store.create(record.clone()).await.unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (store, done) = (Arc::clone(&store), Arc::clone(&done));
        readers.spawn(async move {
            let mut seen = 0;
            while !done.load(Ordering::Relaxed) {
                let got = store.get("hot").await.unwrap().unwrap();
                assert!(got.version >= seen, "{} after {seen}", got.version);
                assert_eq!(got.status_message, Some(got.version.to_string()));
                seen = got.version;
            }
            seen
        });
    }
    for version in 0..200u64 {
        record.status_message = Some((version + 1).to_string());
        assert!(
            store
                .compare_and_set(record.clone(), version)
                .await
                .unwrap()
        );
        let got = store.get("hot").await.unwrap().unwrap();
        assert_eq!(got.version, version + 1, "read after an acknowledged write");
    }
    done.store(true, Ordering::Relaxed);
    while let Some(seen) = readers.join_next().await {
        assert!(seen.unwrap() <= 200);
    }
    assert!(store.delete("hot").await.unwrap());
    assert_eq!(
        store.get("hot").await.unwrap(),
        None,
        "a deleted task was cached"
    );
}

#[test]
fn the_cache_keeps_to_its_budget() {
    let cache = Cache::new(CACHE_SHARDS * 1000);
    for n in 0..1000 {
        let record = Arc::new(sample_record(&format!("t-{n}"), None, at_ms(0)));
        let Lookup::Miss(epoch) = cache.get(&record.id) else {
            panic!("an unknown task was cached");
        };
        cache.fill(&record, 100, epoch);
        // Too big for a shard of 1000 bytes: never cached.
        cache.fill(&Arc::new(sample_record("huge", None, at_ms(0))), 300, epoch);
    }
    for shard in cache.shards.iter() {
        let shard = shard.lock().unwrap();
        assert!(shard.bytes <= 1000, "{}", shard.bytes);
        assert_eq!(shard.bytes, shard.tasks.len() * 100);
        assert!(!shard.tasks.contains_key("huge"));
    }
    // A fill that raced with a write to its shard is dropped.
    let record = Arc::new(sample_record("raced", None, at_ms(0)));
    let Lookup::Miss(epoch) = cache.get("raced") else {
        panic!("cached")
    };
    cache.forget("raced");
    cache.fill(&record, 10, epoch);
    assert!(matches!(cache.get("raced"), Lookup::Miss(_)));
}

#[test]
fn the_cache_evicts_tasks_not_read_since_their_fill_first() {
    // One shard's worth of budget for 4 tasks of 100 bytes.
    let cache = Cache::new(CACHE_SHARDS * 400);
    // Tasks of the shard that "polled" falls in.
    let same_shard: Vec<String> = {
        let index = |id: &str| {
            let shard = cache.shard(id);
            std::ptr::from_ref::<CacheShard>(&shard) as usize
        };
        let target = index("polled");
        (0..10_000)
            .map(|n| format!("once-{n}"))
            .filter(|id| index(id) == target)
            .take(8)
            .collect()
    };
    let fill = |id: &str| {
        let Lookup::Miss(epoch) = cache.get(id) else {
            panic!("{id} was cached before its fill");
        };
        cache.fill(&Arc::new(sample_record(id, None, at_ms(0))), 100, epoch);
    };
    fill("polled");
    for id in &same_shard[..3] {
        fill(id);
    }
    // Read after its fill: it gets a second chance, so the next fills evict the others.
    let Lookup::Hit(first) = cache.get("polled") else {
        panic!("a task filled into room to spare was not cached");
    };
    for id in &same_shard[3..] {
        fill(id);
        let Lookup::Hit(again) = cache.get("polled") else {
            panic!("a polled task was evicted before tasks read once");
        };
        // A hit shares the cached record.
        assert!(Arc::ptr_eq(&first, &again));
    }
    let shard = cache.shard("polled");
    assert_eq!(shard.tasks.len(), 4);
    assert_eq!(shard.bytes, 400);
    // The tasks read once went in the order of their fills.
    for id in &same_shard[..5] {
        assert!(
            !shard.tasks.contains_key(id.as_str()),
            "{id} is still cached"
        );
    }
}

#[test]
fn times_round_to_milliseconds_and_expiry_never_early() {
    let t = UNIX_EPOCH + Duration::from_nanos(1_500_000);
    assert_eq!(millis(t), 1);
    assert_eq!(millis_ceil(t), 2);
    assert_eq!(millis_ceil(UNIX_EPOCH + Duration::from_millis(7)), 7);
    let before = UNIX_EPOCH - Duration::from_nanos(1_500_000);
    assert_eq!(millis(before), -2);
    assert_eq!(millis_ceil(before), -1);
    assert_eq!(from_millis(-2), UNIX_EPOCH - Duration::from_millis(2));
    assert_eq!(from_millis(millis(at_ms(5))), at_ms(5));
}
