//! The durable embedded task store, on SQLite (cargo feature `sqlite`). The design is
//! described on [`SqliteTaskStore`].

use super::codec::{Row, StoredOutcome, from_millis, millis, to_json};
use super::{Changes, ClaimStore, StoreError, TaskPage, TaskStore};
use crate::model::{InputRequest, JsonObject};
use crate::task::{CancelRequest, Lease, SettlePolicy, TaskRecord, TaskStatus};
use rusqlite::{Connection, OpenFlags, TransactionBehavior, params};
use serde_json::Value;
use std::collections::VecDeque;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::oneshot;

/// `PRAGMA application_id` of a task database: "mcpt".
const APPLICATION_ID: i32 = 0x6d63_7074;

/// Forward migrations: `MIGRATIONS[n]` takes a database from schema version `n` to `n + 1`.
/// Version 0 is an empty file. Append only; never edit a migration that has shipped.
const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE TABLE meta (
        key TEXT PRIMARY KEY NOT NULL,
        value ANY
    ) STRICT;
    INSERT INTO meta (key, value) VALUES ('last_seq', 0);
    CREATE TABLE tasks (
        id TEXT PRIMARY KEY NOT NULL,
        seq INTEGER NOT NULL,
        owner TEXT,
        tool TEXT NOT NULL,
        protocol TEXT NOT NULL,
        status TEXT NOT NULL,
        status_message TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        ttl_ms INTEGER,
        poll_interval_ms INTEGER NOT NULL,
        expires_at INTEGER,
        version INTEGER NOT NULL,
        input_seq INTEGER NOT NULL,
        arguments TEXT NOT NULL,
        input_requests TEXT NOT NULL,
        input_responses TEXT NOT NULL,
        outcome TEXT
    ) STRICT;
    CREATE INDEX tasks_owner_seq ON tasks (owner, seq);
    CREATE INDEX tasks_expires_at ON tasks (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX tasks_unfinished ON tasks (status)
        WHERE status IN ('working', 'input_required');",
    // 2: many processes on one file. The protocol column becomes the settle policy;
    // leases, fencing epochs, stored cancellation, the client's capabilities and a change
    // sequence for cross-process signals. Tasks left unfinished by an earlier version get a
    // lease that has already lapsed, so their tools' restart policies settle them.
    "ALTER TABLE tasks ADD COLUMN settle TEXT NOT NULL DEFAULT 'complete';
    UPDATE tasks SET settle = 'fail' WHERE protocol = '2025-11-25';
    ALTER TABLE tasks DROP COLUMN protocol;
    ALTER TABLE tasks ADD COLUMN client TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE tasks ADD COLUMN lease_worker TEXT;
    ALTER TABLE tasks ADD COLUMN lease_until INTEGER;
    ALTER TABLE tasks ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN cancel_at INTEGER;
    ALTER TABLE tasks ADD COLUMN cancel_by TEXT;
    ALTER TABLE tasks ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0;
    UPDATE tasks SET lease_worker = 'an earlier version', lease_until = 0, epoch = 1
        WHERE status IN ('working', 'input_required');
    INSERT INTO meta (key, value) VALUES ('change_seq', 0);
    CREATE INDEX tasks_queued ON tasks (seq)
        WHERE lease_worker IS NULL AND status IN ('working', 'input_required');
    CREATE INDEX tasks_lease ON tasks (lease_until)
        WHERE lease_worker IS NOT NULL AND status IN ('working', 'input_required');
    CREATE INDEX tasks_changes ON tasks (change_seq);",
];

/// The columns a record is read from, in the order [`decode`] expects.
const COLUMNS: &str = "id, owner, tool, settle, status, status_message, created_at, \
    updated_at, ttl_ms, poll_interval_ms, version, input_seq, arguments, input_requests, \
    input_responses, outcome, seq, client, lease_worker, lease_until, epoch, cancel_at, \
    cancel_by";

/// How many leading columns of [`COLUMNS`] count toward a cached record's size.
const SIZED_COLUMNS: usize = 18;

const INSERT: &str = "INSERT INTO tasks (id, seq, owner, tool, settle, status, \
    status_message, created_at, updated_at, ttl_ms, poll_interval_ms, expires_at, version, \
    input_seq, arguments, input_requests, input_responses, outcome, client, lease_worker, \
    lease_until, epoch, cancel_at, cancel_by, change_seq) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
    ?19, ?20, ?21, ?22, ?23, ?24, ?25) \
    ON CONFLICT (id) DO NOTHING";

const UPDATE: &str = "UPDATE tasks SET owner = ?3, tool = ?4, settle = ?5, status = ?6, \
    status_message = ?7, created_at = ?8, updated_at = ?9, ttl_ms = ?10, \
    poll_interval_ms = ?11, expires_at = ?12, version = ?13, input_seq = ?14, \
    arguments = ?15, input_requests = ?16, input_responses = ?17, outcome = ?18, \
    client = ?19, lease_worker = ?20, lease_until = ?21, epoch = ?22, cancel_at = ?23, \
    cancel_by = ?24, change_seq = ?25 \
    WHERE id = ?1 AND version = ?2";

/// The states in which a task is unfinished, as SQL.
const UNFINISHED: &str = "status IN ('working', 'input_required')";

/// The most rows one `expire` statement deletes; larger limits take several batches, so a
/// big sweep never holds the writer for long.
const EXPIRE_BATCH: usize = 1000;

/// How the commit that answers a write reaches the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Synchronous {
    /// `PRAGMA synchronous=FULL`: every commit `fsync`s the write-ahead log before the
    /// writes it holds are answered. A write that returned `Ok` survives a process crash and
    /// a power loss. The default.
    #[default]
    Full,
    /// `PRAGMA synchronous=NORMAL`: commits are written to the log but `fsync`ed only at
    /// checkpoints. A write that returned `Ok` survives a process crash (`kill -9`) but the
    /// last commits may be lost if the machine loses power or the OS crashes.
    Normal,
}

/// Knobs for [`SqliteTaskStore::open_with`]. `SqliteOptions::default()` is what
/// [`SqliteTaskStore::open`] uses.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// The largest outcome (result or error, as JSON) the store accepts; a write of a
    /// bigger one fails with [`StoreError::Backend`] and changes nothing. Default 16 MiB.
    pub max_outcome_bytes: usize,
    /// How commits reach the disk. Default [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// The number of reader threads, each with its own connection. Default 2; at least 1.
    pub read_connections: usize,
    /// The most writes committed in one transaction. Default 1024; at least 1.
    pub max_batch: usize,
    /// How long a connection waits for a lock SQLite holds briefly (checkpoints, recovery).
    /// Default 5 s.
    pub busy_timeout: Duration,
    /// Bytes of the database each reader maps into memory (`PRAGMA mmap_size`), so hot
    /// pages are read without a system call. Default 256 MiB; 0 turns it off.
    pub mmap_bytes: u64,
    /// The memory, in bytes of stored JSON and text, of the in-process cache of recently
    /// read tasks that answers `get` without a trip to a reader thread. Every write of
    /// this store drops the task from the cache before it is answered; writes of other
    /// processes drop it when [`ClaimStore::changes`] sees them (the engine looks every
    /// few tens of milliseconds), and a compare-and-set that loses drops it at once, so a
    /// retry reads the stored version. A program that reads a shared file without an engine
    /// (and so never calls `changes`) should turn the cache off. Tasks larger than 1/64 of this are not cached.
    /// Default 64 MiB; 0 turns the cache off.
    pub cache_bytes: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            max_outcome_bytes: 16 * 1024 * 1024,
            synchronous: Synchronous::Full,
            read_connections: 2,
            max_batch: 1024,
            busy_timeout: Duration::from_secs(5),
            mmap_bytes: 256 * 1024 * 1024,
            cache_bytes: 64 * 1024 * 1024,
        }
    }
}

impl SqliteOptions {
    /// These options with a different [`max_outcome_bytes`](Self::max_outcome_bytes).
    pub fn max_outcome_bytes(mut self, bytes: usize) -> Self {
        self.max_outcome_bytes = bytes;
        self
    }

    /// These options with a different [`synchronous`](Self::synchronous) mode.
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// These options with a different number of [reader threads](Self::read_connections).
    pub fn read_connections(mut self, readers: usize) -> Self {
        self.read_connections = readers;
        self
    }

    /// These options with a different [cache size](Self::cache_bytes); 0 turns it off.
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.cache_bytes = bytes;
        self
    }
}

/// A durable task store in one SQLite database file (bundled SQLite, WAL mode; cargo
/// feature `sqlite`).
///
/// # Durability and group commit
///
/// Every write (`create`, `compare_and_set`, `delete`, `expire`) is sent to one dedicated
/// writer thread that owns the only write connection. The thread takes every request that
/// is waiting (up to [`SqliteOptions::max_batch`]), applies them in arrival order inside one
/// transaction, commits, and only then answers each caller. With the default
/// [`Synchronous::Full`] the commit `fsync`s the write-ahead log, so when `create` returns
/// `Ok` the task is on disk and survives a process crash, a `kill -9` and a power loss.
/// Concurrent callers share one `fsync` per batch (group commit), so throughput grows with
/// the number of callers instead of collapsing to one `fsync` per task.
///
/// Reads (`get`, `list`, `unfinished`) go to a small pool of reader threads, each with its
/// own read-only connection; WAL lets them read while the writer writes. No SQLite call
/// ever runs on an async worker thread: the async methods only encode the record, queue the
/// request and await a `oneshot` answer. `get` first looks in a bounded in-process cache of
/// recently read tasks ([`SqliteOptions::cache_bytes`]); the writer drops a task from the
/// cache after its write commits and before the write is answered, so a `get` never sees
/// an older version than the last write it could know about.
///
/// # Files
///
/// Next to the database at `PATH`, SQLite keeps `PATH-wal` and `PATH-shm`. Back up all of
/// them together, or stop the servers first.
///
/// # Many processes
///
/// Several processes on one host may open the same file at once (two copies of a stdio
/// server that a desktop client started, a server and its workers). SQLite serializes
/// their writes; each commit takes its sequence numbers under the write lock, so they never
/// collide. Each write stamps the task with a change sequence number, and
/// [`ClaimStore::changes`] reads what other processes wrote since the last look, guarded
/// by `PRAGMA data_version`, which costs no table read while nothing changed. Tasks are
/// run under leases ([`ClaimStore::claim`]); a task whose runner died is found by
/// [`ClaimStore::lapsed`]. The file must be on a local file system: SQLite's locks do not
/// hold on network file systems.
///
/// # Schema
///
/// One `tasks` table: the id is the primary key; `owner, seq` (a creation sequence number)
/// is indexed for listing, `expires_at` (milliseconds; `NULL` while the task runs or has no
/// TTL) for expiry, `status` (partial index over unfinished tasks) for the unfinished scan,
/// `seq` over queued tasks for claims, `lease_until` over leased unfinished tasks for the
/// lapsed-lease scan, and `change_seq` for the change feed. Times and durations are stored in whole milliseconds; arguments, the outcome and
/// input requests and responses are JSON text. The schema version is kept in
/// `PRAGMA user_version` and the file is marked with an `application_id`; forward
/// migrations run at open, and a file written by a newer schema version is refused.
///
/// ```no_run
/// # async fn demo() -> Result<(), mcp_tasks_runtime::store::StoreError> {
/// use mcp_tasks_runtime::store::{SqliteTaskStore, TaskStore};
///
/// let store = SqliteTaskStore::open("data/tasks.db")?;
/// let unfinished = store.unfinished().await?;
/// # Ok(()) }
/// ```
pub struct SqliteTaskStore {
    path: PathBuf,
    options: SqliteOptions,
    /// `None` only while dropping.
    writes: Option<mpsc::Sender<WriteOp>>,
    reads: Arc<ReadQueue>,
    cache: Arc<Cache>,
    readers: Vec<JoinHandle<()>>,
    /// `None` only while dropping.
    checkpoints: Option<mpsc::SyncSender<()>>,
    checkpointer: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
    /// The connection that watches for commits of other connections, and the
    /// `PRAGMA data_version` it last saw (`None` until the first look).
    watcher: Arc<Mutex<(Connection, Option<i64>)>>,
}

impl fmt::Debug for SqliteTaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteTaskStore")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl SqliteTaskStore {
    /// The schema version this build writes. A database with a higher version is refused.
    pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

    /// Opens (or creates) the task database at `path` with the default options.
    ///
    /// Everything that can be checked up front is checked here rather than at the first
    /// call: the path is opened, the file is checked to be a task database
    /// (not corrupt, not another application's, not from a newer version), migrations run,
    /// and a real write is committed and a read made. The directory must exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (or creates) the task database at `path` with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let fail = |what: &str, error: rusqlite::Error| open_error(&path, what, error);

        let mut writer = open_connection(&path, options.busy_timeout)
            .map_err(|e| fail("cannot open the database", e))?;
        // Switching a new file to WAL takes a lock that SQLite's busy handler does not wait
        // for: when several processes open the same new file at once, wait here.
        let busy_until = Instant::now() + options.busy_timeout;
        let mode: String = loop {
            match writer.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
                Err(e)
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                        && Instant::now() < busy_until =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => break other.map_err(|e| fail("cannot read the database", e))?,
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Backend(format!(
                "cannot open the task database {}: SQLite could not switch it to WAL mode \
                 (it stayed in {mode:?} mode); is it on a network file system?",
                path.display()
            )));
        }
        let synchronous = match options.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        writer
            .pragma_update(None, "synchronous", synchronous)
            .map_err(|e| fail("cannot configure the database", e))?;
        // Truncate the log back to this size after a checkpoint, so a burst of writes does
        // not leave a large file behind.
        writer
            .pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)
            .map_err(|e| fail("cannot configure the database", e))?;
        migrate(&mut writer, &path, MIGRATIONS)?;
        let last_seq = probe(&writer).map_err(|e| fail("the database failed a write test", e))?;

        // Checkpoints run on their own thread, so the writer only appends to the log.
        writer
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(|e| fail("cannot configure the database", e))?;
        let checkpointer = open_connection(&path, options.busy_timeout)
            .and_then(|conn| {
                conn.pragma_update(None, "synchronous", synchronous)?;
                Ok(conn)
            })
            .map_err(|e| fail("cannot open the checkpointer", e))?;
        let watcher = open_reader(&path, &options).map_err(|e| fail("cannot open a reader", e))?;
        let mut readers = Vec::new();
        for _ in 0..options.read_connections.max(1) {
            let reader =
                open_reader(&path, &options).map_err(|e| fail("cannot open a reader", e))?;
            readers.push(reader);
        }

        // From here on the store owns the threads it starts, and dropping it (also on an
        // error below) stops them.
        let mut store = Self {
            path,
            options: options.clone(),
            writes: None,
            reads: Arc::new(ReadQueue::default()),
            cache: Arc::new(Cache::new(options.cache_bytes)),
            readers: Vec::new(),
            checkpoints: None,
            checkpointer: None,
            writer: None,
            watcher: Arc::new(Mutex::new((watcher, None))),
        };
        for (n, reader) in readers.into_iter().enumerate() {
            let queue = Arc::clone(&store.reads);
            let thread = std::thread::Builder::new()
                .name(format!("mcp-tasks-sqlite-read-{n}"))
                .spawn(move || queue.serve(&reader))
                .map_err(|e| thread_error(&store.path, &e))?;
            store.readers.push(thread);
        }
        let (kick, kicks) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("mcp-tasks-sqlite-checkpoint".into())
            .spawn(move || run_checkpointer(&checkpointer, &kicks))
            .map_err(|e| thread_error(&store.path, &e))?;
        store.checkpointer = Some(thread);
        store.checkpoints = Some(kick.clone());
        let (write_tx, write_rx) = mpsc::channel::<WriteOp>();
        let cache = Arc::clone(&store.cache);
        let max_batch = store.options.max_batch.max(1);
        let thread = std::thread::Builder::new()
            .name("mcp-tasks-sqlite-write".into())
            .spawn(move || {
                Writer {
                    conn: writer,
                    last_seq,
                    change_seq: 0,
                    checkpoints: kick,
                    cache,
                }
                .run(&write_rx, max_batch);
            })
            .map_err(|e| thread_error(&store.path, &e))?;
        store.writer = Some(thread);
        store.writes = Some(write_tx);
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &SqliteOptions {
        &self.options
    }

    /// Sends a write to the writer thread and waits until its batch is committed.
    async fn write<T>(
        &self,
        op: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> WriteOp,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        let sent = self
            .writes
            .as_ref()
            .is_some_and(|writes| writes.send(op(tx)).is_ok());
        if !sent {
            return Err(stopped("writer"));
        }
        rx.await.unwrap_or_else(|_| Err(stopped("writer")))
    }

    /// Runs `read` on a reader thread.
    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        let job: ReadJob = Box::new(move |conn| {
            let _ = tx.send(read(conn));
        });
        if !self.reads.push(job) {
            return Err(stopped("reader"));
        }
        rx.await.unwrap_or_else(|_| Err(stopped("reader")))
    }
}

impl Drop for SqliteTaskStore {
    fn drop(&mut self) {
        // Closing a queue lets its threads finish what is queued and exit. The readers and
        // the checkpointer go first, so the writer's connection is the last one and
        // checkpoints the log into the database as it closes.
        self.reads.close();
        for thread in self.readers.drain(..) {
            let _ = thread.join();
        }
        self.writes = None;
        self.checkpoints = None;
        if let Some(thread) = self.checkpointer.take() {
            let _ = thread.join();
        }
        if let Some(thread) = self.writer.take() {
            let _ = thread.join();
        }
    }
}

fn stopped(which: &str) -> StoreError {
    StoreError::Backend(format!(
        "the SQLite task store's {which} thread has stopped"
    ))
}

fn open_error(path: &Path, what: &str, error: rusqlite::Error) -> StoreError {
    let hint = match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => {
            " (the file is corrupt or is not an SQLite database)"
        }
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => " (the file is corrupt)",
        Some(rusqlite::ErrorCode::CannotOpen) => {
            " (does the directory exist, and may this process write to it?)"
        }
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::PermissionDenied) => {
            " (the file or its directory is not writable)"
        }
        _ => "",
    };
    StoreError::Backend(format!(
        "cannot open the task database {}: {what}: {error}{hint}",
        path.display()
    ))
}

fn thread_error(path: &Path, error: &io::Error) -> StoreError {
    StoreError::Backend(format!(
        "cannot open the task database {}: cannot start a thread: {error}",
        path.display()
    ))
}

fn sql_error(what: &str, error: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("{what}: {error}"))
}

fn open_connection(path: &Path, busy_timeout: Duration) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy_timeout)?;
    Ok(conn)
}

fn open_reader(path: &Path, options: &SqliteOptions) -> rusqlite::Result<Connection> {
    let conn = open_connection(path, options.busy_timeout)?;
    conn.pragma_update(None, "query_only", true)?;
    conn.pragma_update(
        None,
        "mmap_size",
        i64::try_from(options.mmap_bytes).unwrap_or(i64::MAX),
    )?;
    // A first read, so a reader that cannot read fails now.
    conn.query_row("SELECT count(*) FROM meta", [], |_| Ok(()))?;
    Ok(conn)
}

/// Brings the database at `path` to the newest schema version in `migrations`, or refuses
/// a file that is not a task database or is newer than this build.
fn migrate(conn: &mut Connection, path: &Path, migrations: &[&str]) -> Result<(), StoreError> {
    let fail = |what: &str, error: rusqlite::Error| open_error(path, what, error);
    let latest = i64::try_from(migrations.len()).unwrap_or(i64::MAX);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| fail("cannot start a transaction", e))?;
    let application_id: i32 = tx
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(|e| fail("cannot read the database header", e))?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| fail("cannot read the database header", e))?;
    let objects: i64 = tx
        .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
        .map_err(|e| fail("cannot read the schema", e))?;
    let foreign = if application_id == 0 {
        version != 0 || objects != 0
    } else {
        application_id != APPLICATION_ID
    };
    if foreign {
        return Err(StoreError::Backend(format!(
            "cannot open the task database {}: it is an SQLite database of another \
             application (application_id {application_id:#x}, user_version {version}), \
             not an mcp-tasks task database",
            path.display()
        )));
    }
    if version > latest {
        return Err(StoreError::Backend(format!(
            "cannot open the task database {}: it has schema version {version}, written by \
             a newer version of mcp-tasks; this version (mcp-tasks-runtime {}) reads schema \
             versions up to {latest}. Upgrade, or open another file",
            path.display(),
            env!("CARGO_PKG_VERSION"),
        )));
    }
    if version == latest {
        return Ok(());
    }
    let from = usize::try_from(version).unwrap_or(0);
    for (n, migration) in migrations.iter().enumerate().skip(from) {
        tx.execute_batch(migration).map_err(|e| {
            fail(
                &format!("the migration to schema version {} failed", n + 1),
                e,
            )
        })?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .and_then(|()| tx.pragma_update(None, "user_version", latest))
        .and_then(|()| tx.commit())
        .map_err(|e| fail("cannot record the schema version", e))
}

/// Commits a real write and reads it back; returns the last creation sequence number.
fn probe(conn: &Connection) -> rusqlite::Result<i64> {
    conn.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('opened_at', ?1)",
        [millis(SystemTime::now())],
    )?;
    // Touch every index's root page too, so a damaged table fails here.
    conn.query_row(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM tasks LIMIT 1)), \
                (SELECT count(*) FROM (SELECT 1 FROM tasks INDEXED BY tasks_owner_seq \
                    WHERE owner IS NULL AND seq > 0 LIMIT 1)), \
                (SELECT count(*) FROM (SELECT 1 FROM tasks INDEXED BY tasks_expires_at \
                    WHERE expires_at <= 0 LIMIT 1)), \
                (SELECT count(*) FROM (SELECT 1 FROM tasks INDEXED BY tasks_unfinished \
                    WHERE status IN ('working', 'input_required') LIMIT 1))",
        [],
        |_| Ok(()),
    )?;
    conn.query_row("SELECT value FROM meta WHERE key = 'last_seq'", [], |row| {
        row.get(0)
    })
}

/// Reads a record (and its creation sequence number) from a row selected with [`COLUMNS`].
fn decode(row: &rusqlite::Row<'_>) -> Result<(TaskRecord, i64), StoreError> {
    let sql = |e| sql_error("cannot read a task", e);
    let id: String = row.get(0).map_err(sql)?;
    let corrupt = |what: &str, error: &dyn fmt::Display| {
        StoreError::Backend(format!(
            "task {id}: the stored {what} is unreadable: {error}"
        ))
    };
    let text = |n: usize| -> Result<&str, StoreError> {
        row.get_ref(n)
            .map_err(sql)?
            .as_str()
            .map_err(|e| sql_error("cannot read a task", e.into()))
    };
    let settle: SettlePolicy = text(3)?
        .parse()
        .map_err(|e: String| corrupt("settle policy", &e))?;
    let status: TaskStatus = text(4)?
        .parse()
        .map_err(|e: String| corrupt("status", &e))?;
    let ttl_ms: Option<i64> = row.get(8).map_err(sql)?;
    let poll_interval_ms: i64 = row.get(9).map_err(sql)?;
    let version: i64 = row.get(10).map_err(sql)?;
    let input_seq: i64 = row.get(11).map_err(sql)?;
    let arguments: JsonObject =
        serde_json::from_str(text(12)?).map_err(|e| corrupt("arguments", &e))?;
    let input_requests: BTreeMap<String, InputRequest> =
        serde_json::from_str(text(13)?).map_err(|e| corrupt("input requests", &e))?;
    let input_responses: BTreeMap<String, Value> =
        serde_json::from_str(text(14)?).map_err(|e| corrupt("input responses", &e))?;
    let outcome = match row.get_ref(15).map_err(sql)? {
        rusqlite::types::ValueRef::Null => None,
        _ => Some(
            serde_json::from_str::<StoredOutcome>(text(15)?)
                .map_err(|e| corrupt("outcome", &e))?
                .into(),
        ),
    };
    let client_capabilities = super::codec::CLIENT_CAPABILITIES.share_owned(
        serde_json::from_str(text(17)?).map_err(|e| corrupt("client capabilities", &e))?,
    );
    let lease_worker: Option<String> = row.get(18).map_err(sql)?;
    let lease_until: Option<i64> = row.get(19).map_err(sql)?;
    let epoch: i64 = row.get(20).map_err(sql)?;
    let cancel_at: Option<i64> = row.get(21).map_err(sql)?;
    let cancel_by: Option<String> = row.get(22).map_err(sql)?;
    let record = TaskRecord {
        owner: row.get(1).map_err(sql)?,
        tool: row.get(2).map_err(sql)?,
        arguments,
        settle,
        status,
        status_message: row.get(5).map_err(sql)?,
        created_at: from_millis(row.get(6).map_err(sql)?),
        updated_at: from_millis(row.get(7).map_err(sql)?),
        ttl: ttl_ms.map(|ms| Duration::from_millis(ms.max(0).unsigned_abs())),
        poll_interval: Duration::from_millis(poll_interval_ms.max(0).unsigned_abs()),
        outcome,
        input_requests,
        input_responses,
        input_seq: input_seq.max(0).unsigned_abs(),
        client_capabilities,
        lease: lease_worker.map(|worker| Lease {
            worker,
            until: from_millis(lease_until.unwrap_or(0)),
        }),
        epoch: epoch.max(0).unsigned_abs(),
        cancel_requested: cancel_at.map(|at| CancelRequest {
            at: from_millis(at),
            by: cancel_by,
        }),
        version: version.max(0).unsigned_abs(),
        id,
    };
    let seq = row.get(16).map_err(sql)?;
    Ok((record, seq))
}

fn parse_cursor(cursor: &str) -> Option<i64> {
    let digits = cursor.strip_prefix('s')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn clamp_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------
// The writer thread

/// A write waiting for its batch.
enum WriteOp {
    Create {
        row: Row,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    CompareAndSet {
        row: Row,
        expected: i64,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    Delete {
        id: String,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    Expire {
        now: i64,
        limit: i64,
        reply: oneshot::Sender<Result<Vec<String>, StoreError>>,
    },
    Claim {
        worker: String,
        until: i64,
        limit: i64,
        /// The tools to leave out, as a JSON array.
        skip: String,
        reply: oneshot::Sender<Result<Vec<TaskRecord>, StoreError>>,
    },
}

/// What a write did, before its batch commits.
enum Answer {
    Changed(bool),
    Ids(Vec<String>),
    Records(Vec<TaskRecord>),
}

impl WriteOp {
    /// Answers the caller. Called once the batch is committed, or failed.
    fn finish(self, answer: Result<Answer, StoreError>) {
        let mismatch = || StoreError::Backend("internal error: mismatched write answer".into());
        match self {
            Self::Create { row, reply } => {
                let _ = reply.send(match answer {
                    Ok(Answer::Changed(true)) => Ok(()),
                    Ok(Answer::Changed(false)) => Err(StoreError::Duplicate(row.id)),
                    Ok(_) => Err(mismatch()),
                    Err(error) => Err(error),
                });
            }
            Self::CompareAndSet { reply, .. } | Self::Delete { reply, .. } => {
                let _ = reply.send(match answer {
                    Ok(Answer::Changed(changed)) => Ok(changed),
                    Ok(_) => Err(mismatch()),
                    Err(error) => Err(error),
                });
            }
            Self::Expire { reply, .. } => {
                let _ = reply.send(match answer {
                    Ok(Answer::Ids(ids)) => Ok(ids),
                    Ok(_) => Err(mismatch()),
                    Err(error) => Err(error),
                });
            }
            Self::Claim { reply, .. } => {
                let _ = reply.send(match answer {
                    Ok(Answer::Records(records)) => Ok(records),
                    Ok(_) => Err(mismatch()),
                    Err(error) => Err(error),
                });
            }
        }
    }
}

/// The longest quiet gap the writer waits for another write before it commits.
const MAX_QUIET: Duration = Duration::from_micros(100);

/// The owner of the write connection.
struct Writer {
    conn: Connection,
    /// The last creation sequence number handed out; read from `meta` at the start of every
    /// transaction (another process may have written since) and saved with every batch
    /// that creates tasks, so numbers are never reused, even after the newest task is
    /// deleted.
    last_seq: i64,
    /// The last change sequence number, kept the same way: every write of a task stamps it
    /// with the next one, which is what [`ClaimStore::changes`] reads.
    change_seq: i64,
    /// Nudges the checkpointer after a commit.
    checkpoints: mpsc::SyncSender<()>,
    /// Written tasks are dropped from it between the commit and the answer.
    cache: Arc<Cache>,
}

impl Writer {
    fn run(mut self, requests: &mpsc::Receiver<WriteOp>, max_batch: usize) {
        // A moving average of how long a commit takes.
        let mut commit_time = Duration::ZERO;
        while let Ok(first) = requests.recv() {
            let mut batch = vec![first];
            while batch.len() < max_batch {
                match requests.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            // While writes keep arriving, wait a little for more: the callers answered by
            // the last commit are coming back, and taking them now saves them waiting a
            // whole commit. A quiet gap of an eighth of a commit, or a wait of half a
            // commit, ends the gathering; a lone caller pays one quiet gap.
            let quiet = (commit_time / 8).min(MAX_QUIET);
            let gather_until = Instant::now() + commit_time / 2;
            while batch.len() < max_batch && !quiet.is_zero() {
                let left = gather_until.saturating_duration_since(Instant::now());
                match requests.recv_timeout(quiet.min(left)) {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
                while batch.len() < max_batch {
                    match requests.try_recv() {
                        Ok(op) => batch.push(op),
                        Err(_) => break,
                    }
                }
                if left.is_zero() {
                    break;
                }
            }
            let started = Instant::now();
            self.commit(batch);
            commit_time = (commit_time * 7 + started.elapsed()) / 8;
            // Never blocks: a nudge that is already pending is enough.
            let _ = self.checkpoints.try_send(());
        }
    }

    /// Applies `batch` in one transaction, commits it and answers every caller.
    fn commit(&mut self, mut batch: Vec<WriteOp>) {
        let fail_all = |batch: Vec<WriteOp>, what: &str, error: &rusqlite::Error| {
            for op in batch {
                op.finish(Err(StoreError::Backend(format!("{what}: {error}"))));
            }
        };
        while !batch.is_empty() {
            if let Err(error) = self.conn.execute_batch("BEGIN IMMEDIATE") {
                return fail_all(batch, "cannot start a write transaction", &error);
            }
            // The write lock is held from here on: another process's numbers are final.
            if let Err(error) = self.load_seqs() {
                let _ = self.conn.execute_batch("ROLLBACK");
                return fail_all(batch, "cannot read the sequence numbers", &error);
            }
            let first_seq = (self.last_seq, self.change_seq);
            let mut answers = Vec::with_capacity(batch.len());
            let mut aborted = None;
            // Tasks this transaction writes are kept out of the read cache from before its
            // commit becomes visible until after it: a reader never caches, nor is served,
            // a version older than one another reader may already have seen.
            let mut writing: Vec<String> = Vec::new();
            for (n, op) in batch.iter().enumerate() {
                match catch_unwind(AssertUnwindSafe(|| self.apply(op))) {
                    Ok(Ok(answer)) => {
                        match (op, &answer) {
                            (WriteOp::CompareAndSet { row, .. }, _) => writing.push(row.id.clone()),
                            (WriteOp::Delete { id, .. }, _) => writing.push(id.clone()),
                            (_, Answer::Ids(ids)) => writing.extend(ids.iter().cloned()),
                            (_, Answer::Records(records)) => {
                                writing.extend(records.iter().map(|r| r.id.clone()));
                            }
                            _ => {}
                        }
                        answers.push(Ok(answer));
                    }
                    Ok(Err(error)) if self.conn.is_autocommit() => {
                        // SQLite rolled the whole transaction back (I/O error, disk full):
                        // this write fails, the others run again in a new transaction.
                        aborted = Some((n, sql_error("the write failed", error)));
                        break;
                    }
                    Ok(Err(error)) => answers.push(Err(sql_error("the write failed", error))),
                    Err(_) => answers.push(Err(StoreError::Backend(
                        "internal error: the write panicked".into(),
                    ))),
                }
            }
            if let Some((n, error)) = aborted {
                batch.remove(n).finish(Err(error));
                continue;
            }
            // A create needs nothing: a missing task is never cached. A lost
            // compare-and-set is marked too: its caller read an older version (another
            // process wrote), so the next read goes to the database.
            for id in &writing {
                self.cache.begin_write(id);
            }
            let committed = self
                .save_seq(first_seq)
                .and_then(|()| self.conn.execute_batch("COMMIT"));
            if committed.is_err() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
            for id in &writing {
                self.cache.end_write(id);
            }
            match committed {
                Ok(()) => {
                    for (op, answer) in batch.into_iter().zip(answers) {
                        op.finish(answer);
                    }
                }
                Err(error) => {
                    fail_all(batch, "the commit failed; nothing was written", &error);
                }
            }
            return;
        }
    }

    fn load_seqs(&mut self) -> rusqlite::Result<()> {
        let mut statement = self.conn.prepare_cached(
            "SELECT (SELECT value FROM meta WHERE key = 'last_seq'), \
                    (SELECT value FROM meta WHERE key = 'change_seq')",
        )?;
        let (last, change) = statement.query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        self.last_seq = last;
        self.change_seq = change;
        Ok(())
    }

    fn save_seq(&self, (last_seq, change_seq): (i64, i64)) -> rusqlite::Result<()> {
        if self.last_seq != last_seq {
            self.conn
                .prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'last_seq'")?
                .execute([self.last_seq])?;
        }
        if self.change_seq != change_seq {
            self.conn
                .prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'change_seq'")?
                .execute([self.change_seq])?;
        }
        Ok(())
    }

    fn apply(&mut self, op: &WriteOp) -> rusqlite::Result<Answer> {
        match op {
            WriteOp::Create { row, .. } => {
                let seq = self.last_seq + 1;
                let change = self.change_seq + 1;
                let inserted = self.conn.prepare_cached(INSERT)?.execute(params![
                    row.id,
                    seq,
                    row.owner,
                    row.tool,
                    row.settle,
                    row.status,
                    row.status_message,
                    row.created_at,
                    row.updated_at,
                    row.ttl_ms,
                    row.poll_interval_ms,
                    row.expires_at,
                    row.version,
                    row.input_seq,
                    row.arguments,
                    row.input_requests,
                    row.input_responses,
                    row.outcome,
                    row.client,
                    row.lease_worker,
                    row.lease_until,
                    row.epoch,
                    row.cancel_at,
                    row.cancel_by,
                    change,
                ])? == 1;
                if inserted {
                    self.last_seq = seq;
                    self.change_seq = change;
                }
                Ok(Answer::Changed(inserted))
            }
            WriteOp::CompareAndSet { row, expected, .. } => {
                let change = self.change_seq + 1;
                let updated = self.conn.prepare_cached(UPDATE)?.execute(params![
                    row.id,
                    expected,
                    row.owner,
                    row.tool,
                    row.settle,
                    row.status,
                    row.status_message,
                    row.created_at,
                    row.updated_at,
                    row.ttl_ms,
                    row.poll_interval_ms,
                    row.expires_at,
                    expected.saturating_add(1),
                    row.input_seq,
                    row.arguments,
                    row.input_requests,
                    row.input_responses,
                    row.outcome,
                    row.client,
                    row.lease_worker,
                    row.lease_until,
                    row.epoch,
                    row.cancel_at,
                    row.cancel_by,
                    change,
                ])?;
                if updated == 1 {
                    self.change_seq = change;
                }
                Ok(Answer::Changed(updated == 1))
            }
            WriteOp::Claim {
                worker,
                until,
                limit,
                skip,
                ..
            } => {
                let change = self.change_seq + 1;
                let mut statement = self.conn.prepare_cached(&format!(
                    "UPDATE tasks SET lease_worker = ?1, lease_until = ?2, epoch = epoch + 1, \
                        version = version + 1, change_seq = ?3 \
                     WHERE rowid IN ( \
                        SELECT rowid FROM tasks INDEXED BY tasks_queued \
                        WHERE lease_worker IS NULL AND {UNFINISHED} \
                          AND tool NOT IN (SELECT value FROM json_each(?4)) \
                        ORDER BY seq LIMIT ?5 \
                     ) RETURNING {COLUMNS}"
                ))?;
                let mut rows = statement.query(params![worker, until, change, skip, limit])?;
                let mut claimed = Vec::new();
                while let Some(row) = rows.next()? {
                    match decode(row) {
                        Ok(decoded) => claimed.push(decoded),
                        Err(error) => {
                            tracing::error!(%error, "a claimed task is unreadable");
                        }
                    }
                }
                drop(rows);
                if !claimed.is_empty() {
                    self.change_seq = change;
                }
                claimed.sort_by_key(|(_, seq)| *seq);
                Ok(Answer::Records(
                    claimed.into_iter().map(|(r, _)| r).collect(),
                ))
            }
            WriteOp::Delete { id, .. } => {
                let deleted = self
                    .conn
                    .prepare_cached("DELETE FROM tasks WHERE id = ?1")?
                    .execute([id])?;
                Ok(Answer::Changed(deleted == 1))
            }
            WriteOp::Expire { now, limit, .. } => {
                let mut statement = self.conn.prepare_cached(
                    "DELETE FROM tasks WHERE rowid IN (
                        SELECT rowid FROM tasks INDEXED BY tasks_expires_at
                        WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2
                     ) RETURNING id",
                )?;
                let ids = statement
                    .query_map(params![now, limit], |row| row.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()?;
                Ok(Answer::Ids(ids))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The read cache

/// The number of cache shards; a power of two.
const CACHE_SHARDS: usize = 16;

/// Recently read tasks, so a `get` of a hot task needs no trip to a reader thread.
///
/// Coherence: the writer calls [`Cache::forget`] for every task a batch changed after the
/// batch commits and before any caller is answered. A read that missed fills the cache
/// only if no task of its shard was forgotten since the miss (the shard's `epoch` is
/// unchanged), so a fill can never bring back a version older than a forget it raced with.
struct Cache {
    shards: Box<[Mutex<CacheShard>]>,
    /// The byte budget of each shard.
    shard_bytes: usize,
}

#[derive(Default)]
struct CacheShard {
    tasks: HashMap<String, (TaskRecord, usize)>,
    bytes: usize,
    /// Bumped by every forget.
    epoch: u64,
    /// Tasks a transaction is writing now (with how many writes): never cached meanwhile.
    writing: HashMap<String, u32>,
}

impl CacheShard {
    /// Drops a task, and makes every read that missed before this unable to fill it.
    fn invalidate(&mut self, id: &str) {
        self.epoch += 1;
        if let Some((_, size)) = self.tasks.remove(id) {
            self.bytes -= size;
        }
    }
}

// Returned by value straight to the caller, so the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum Lookup {
    Hit(TaskRecord),
    /// Not cached; the shard's epoch at the time of the miss.
    Miss(u64),
}

impl Cache {
    fn new(bytes: usize) -> Self {
        Self {
            shards: (0..CACHE_SHARDS).map(|_| Mutex::default()).collect(),
            shard_bytes: bytes / CACHE_SHARDS,
        }
    }

    fn shard(&self, id: &str) -> MutexGuard<'_, CacheShard> {
        // FNV-1a.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in id.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let index = (hash ^ (hash >> 32)) as usize & (CACHE_SHARDS - 1);
        // Nothing in a critical section can leave a shard half-changed, so a poisoned
        // shard is still consistent.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, id: &str) -> Lookup {
        if self.shard_bytes == 0 {
            return Lookup::Miss(0);
        }
        let shard = self.shard(id);
        match shard.tasks.get(id) {
            Some((record, _)) => Lookup::Hit(record.clone()),
            None => Lookup::Miss(shard.epoch),
        }
    }

    /// Keeps a task out of the cache until [`Cache::end_write`]: called before the commit
    /// that writes it.
    fn begin_write(&self, id: &str) {
        if self.shard_bytes == 0 {
            return;
        }
        let mut shard = self.shard(id);
        shard.invalidate(id);
        *shard.writing.entry(id.to_owned()).or_default() += 1;
    }

    /// The commit that wrote a task is done (or failed): reads may cache it again, from a
    /// read that starts after this.
    fn end_write(&self, id: &str) {
        if self.shard_bytes == 0 {
            return;
        }
        let mut shard = self.shard(id);
        shard.invalidate(id);
        if let Some(n) = shard.writing.get_mut(id) {
            *n -= 1;
            if *n == 0 {
                shard.writing.remove(id);
            }
        }
    }

    /// Caches a task read after a miss at `epoch`, unless a write got in between.
    fn fill(&self, record: &TaskRecord, bytes: usize, epoch: u64) {
        // A shard's budget holds at least 4 tasks of the largest size cached.
        if bytes > self.shard_bytes / 4 {
            return;
        }
        let mut shard = self.shard(&record.id);
        if shard.epoch != epoch
            || shard.tasks.contains_key(&record.id)
            || shard.writing.contains_key(&record.id)
        {
            return;
        }
        while shard.bytes + bytes > self.shard_bytes {
            // Evict an arbitrary task: the hash map's order is as good as random.
            let Some(victim) = shard.tasks.keys().next().cloned() else {
                break;
            };
            if let Some((_, size)) = shard.tasks.remove(&victim) {
                shard.bytes -= size;
            }
        }
        shard.bytes += bytes;
        shard
            .tasks
            .insert(record.id.clone(), (record.clone(), bytes));
    }

    /// Drops a task that was just written.
    fn forget(&self, id: &str) {
        if self.shard_bytes == 0 {
            return;
        }
        self.shard(id).invalidate(id);
    }
}

// ---------------------------------------------------------------------------------------
// The reader threads

type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// The most jobs a reader takes from the queue at once.
const READ_BATCH: usize = 8;

/// The queue the reader threads serve. Pushing a job makes no system call unless a reader
/// is asleep, and a busy reader takes several jobs per lock.
#[derive(Default)]
struct ReadQueue {
    state: Mutex<ReadState>,
    ready: Condvar,
}

#[derive(Default)]
struct ReadState {
    jobs: VecDeque<ReadJob>,
    /// Readers waiting on `ready`.
    idle: usize,
    closed: bool,
}

impl ReadQueue {
    fn lock(&self) -> MutexGuard<'_, ReadState> {
        // Jobs run outside the lock, so a poisoned lock still guards a consistent queue.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a job; `false` once the queue is closed.
    fn push(&self, job: ReadJob) -> bool {
        let mut state = self.lock();
        if state.closed {
            return false;
        }
        state.jobs.push_back(job);
        let wake = state.idle > 0;
        drop(state);
        if wake {
            self.ready.notify_one();
        }
        true
    }

    /// Makes the readers exit once the queue is empty.
    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// A reader thread: runs jobs until the queue is closed and empty.
    fn serve(&self, conn: &Connection) {
        let mut batch = Vec::with_capacity(READ_BATCH);
        loop {
            {
                let mut state = self.lock();
                while state.jobs.is_empty() {
                    if state.closed {
                        return;
                    }
                    state.idle += 1;
                    state = self
                        .ready
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                    state.idle -= 1;
                }
                let take = state.jobs.len().min(READ_BATCH);
                batch.extend(state.jobs.drain(..take));
                if !state.jobs.is_empty() && state.idle > 0 {
                    self.ready.notify_one();
                }
            }
            for job in batch.drain(..) {
                // A panic drops the job's answer channel, which its caller sees as an
                // error; the thread keeps serving.
                let _ = catch_unwind(AssertUnwindSafe(|| job(conn)));
            }
        }
    }
}

/// How long the checkpointer rests between checkpoints, so that while writes keep coming
/// the database file is synced a few times a second rather than after every commit.
const CHECKPOINT_PAUSE: Duration = Duration::from_millis(100);

/// The checkpointer thread: after commits, copies the log into the database file
/// (`PRAGMA wal_checkpoint(PASSIVE)`, which never blocks the writer or the readers), at
/// most once per [`CHECKPOINT_PAUSE`]. Exits when the writer is gone.
fn run_checkpointer(conn: &Connection, kicks: &mpsc::Receiver<()>) {
    let mut due = kicks.recv().is_ok();
    while due {
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(%error, "task store checkpoint failed");
        }
        // Rest, remembering whether more commits came meanwhile.
        let rested = Instant::now() + CHECKPOINT_PAUSE;
        due = false;
        loop {
            match kicks.recv_timeout(rested.saturating_duration_since(Instant::now())) {
                Ok(()) => due = true,
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
        if !due {
            due = kicks.recv().is_ok();
        }
    }
}

/// The task with this id, and roughly how many bytes it takes.
fn get_record(conn: &Connection, id: &str) -> Result<Option<(TaskRecord, usize)>, StoreError> {
    let sql = |e| sql_error("cannot read a task", e);
    let mut statement = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"))
        .map_err(sql)?;
    let mut rows = statement.query([id]).map_err(sql)?;
    let Some(row) = rows.next().map_err(sql)? else {
        return Ok(None);
    };
    let (record, _) = decode(row)?;
    let mut bytes = 256;
    for column in 0..SIZED_COLUMNS {
        if let Ok(rusqlite::types::ValueRef::Text(text)) = row.get_ref(column) {
            bytes += text.len();
        }
    }
    Ok(Some((record, bytes)))
}

fn list_records(
    conn: &Connection,
    owner: Option<&str>,
    after: i64,
    limit: usize,
) -> Result<TaskPage, StoreError> {
    let sql = |e| sql_error("cannot list tasks", e);
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks INDEXED BY tasks_owner_seq \
             WHERE owner IS ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
        ))
        .map_err(sql)?;
    let wanted = clamp_limit(limit).saturating_add(1);
    let mut rows = statement
        .query(params![owner, after, wanted])
        .map_err(sql)?;
    let mut tasks = Vec::new();
    let mut last = after;
    let mut more = false;
    while let Some(row) = rows.next().map_err(sql)? {
        if tasks.len() == limit {
            more = true;
            break;
        }
        let (record, seq) = decode(row)?;
        tasks.push(record);
        last = seq;
    }
    let next_cursor = more.then(|| format!("s{last}"));
    Ok(TaskPage { tasks, next_cursor })
}

fn unfinished_records(conn: &Connection) -> Result<Vec<TaskRecord>, StoreError> {
    let sql = |e| sql_error("cannot scan unfinished tasks", e);
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks INDEXED BY tasks_unfinished \
             WHERE status IN ('working', 'input_required')"
        ))
        .map_err(sql)?;
    let mut rows = statement.query([]).map_err(sql)?;
    let mut records = Vec::new();
    while let Some(row) = rows.next().map_err(sql)? {
        records.push(decode(row)?.0);
    }
    Ok(records)
}

impl TaskStore for SqliteTaskStore {
    async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
        let row = Row::encode(record, self.options.max_outcome_bytes)?;
        self.write(|reply| WriteOp::Create { row, reply }).await
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let epoch = match self.cache.get(id) {
            Lookup::Hit(record) => return Ok(Some(record)),
            Lookup::Miss(epoch) => epoch,
        };
        let cache = Arc::clone(&self.cache);
        let id = id.to_owned();
        self.read(move |conn| {
            let found = get_record(conn, &id)?;
            if let Some((record, bytes)) = &found {
                cache.fill(record, *bytes, epoch);
            }
            Ok(found.map(|(record, _)| record))
        })
        .await
    }

    async fn compare_and_set(
        &self,
        record: TaskRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let Ok(expected) = i64::try_from(expected_version) else {
            return Ok(false);
        };
        let row = Row::encode(record, self.options.max_outcome_bytes)?;
        self.write(|reply| WriteOp::CompareAndSet {
            row,
            expected,
            reply,
        })
        .await
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.write(|reply| WriteOp::Delete { id, reply }).await
    }

    async fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let after = match cursor {
            None => 0,
            Some(c) => parse_cursor(c).ok_or_else(|| StoreError::InvalidCursor(c.to_owned()))?,
        };
        let owner = owner.map(str::to_owned);
        self.read(move |conn| list_records(conn, owner.as_deref(), after, limit))
            .await
    }

    async fn expire(&self, now: SystemTime, limit: usize) -> Result<Vec<String>, StoreError> {
        let now = millis(now);
        let mut expired = Vec::new();
        while expired.len() < limit {
            let batch = (limit - expired.len()).min(EXPIRE_BATCH);
            let ids = self
                .write(|reply| WriteOp::Expire {
                    now,
                    limit: clamp_limit(batch),
                    reply,
                })
                .await?;
            let done = ids.len() < batch;
            expired.extend(ids);
            if done {
                break;
            }
        }
        Ok(expired)
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.read(unfinished_records).await
    }
}

fn lapsed_records(conn: &Connection, now: i64, limit: i64) -> Result<Vec<TaskRecord>, StoreError> {
    let sql = |e| sql_error("cannot scan lapsed leases", e);
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks INDEXED BY tasks_lease \
             WHERE lease_worker IS NOT NULL AND {UNFINISHED} AND lease_until <= ?1 \
             ORDER BY lease_until, id LIMIT ?2"
        ))
        .map_err(sql)?;
    let mut rows = statement.query(params![now, limit]).map_err(sql)?;
    let mut records = Vec::new();
    while let Some(row) = rows.next().map_err(sql)? {
        records.push(decode(row)?.0);
    }
    Ok(records)
}

/// What [`ClaimStore::changes`] reads on the watcher connection.
fn changed_ids(
    watcher: &mut (Connection, Option<i64>),
    cursor: Option<u64>,
    limit: usize,
) -> Result<Changes, StoreError> {
    let sql = |e| sql_error("cannot read the change feed", e);
    let (conn, seen) = watcher;
    let version: i64 = conn
        .pragma_query_value(None, "data_version", |row| row.get(0))
        .map_err(sql)?;
    let Some(after) = cursor else {
        let now: i64 = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'change_seq'",
                [],
                |row| row.get(0),
            )
            .map_err(sql)?;
        *seen = Some(version);
        return Ok(Changes {
            ids: Vec::new(),
            cursor: now.max(0).unsigned_abs(),
        });
    };
    if *seen == Some(version) {
        // Nothing was committed since the last look that read everything.
        return Ok(Changes {
            ids: Vec::new(),
            cursor: after,
        });
    }
    let mut statement = conn
        .prepare_cached(
            "SELECT id, change_seq FROM tasks INDEXED BY tasks_changes \
             WHERE change_seq > ?1 ORDER BY change_seq LIMIT ?2",
        )
        .map_err(sql)?;
    let after_sql = i64::try_from(after).unwrap_or(i64::MAX);
    let mut rows = statement
        .query(params![after_sql, clamp_limit(limit)])
        .map_err(sql)?;
    let mut ids = Vec::new();
    let mut last = after;
    while let Some(row) = rows.next().map_err(sql)? {
        ids.push(row.get::<_, String>(0).map_err(sql)?);
        last = last.max(row.get::<_, i64>(1).map_err(sql)?.max(0).unsigned_abs());
    }
    // A full page may have left more behind: look again next time even if nothing new
    // is committed.
    *seen = (ids.len() < limit).then_some(version);
    Ok(Changes { ids, cursor: last })
}

impl ClaimStore for SqliteTaskStore {
    async fn claim(
        &self,
        worker: &str,
        until: SystemTime,
        limit: usize,
        skip: &[String],
    ) -> Result<Vec<TaskRecord>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let skip = to_json("claim", "the tools to skip", skip)?;
        let worker = worker.to_owned();
        self.write(|reply| WriteOp::Claim {
            worker,
            until: millis(until),
            limit: clamp_limit(limit),
            skip,
            reply,
        })
        .await
    }

    async fn lapsed(&self, now: SystemTime, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        let now = millis(now);
        let limit = clamp_limit(limit);
        self.read(move |conn| lapsed_records(conn, now, limit))
            .await
    }

    async fn changes(&self, cursor: Option<u64>, limit: usize) -> Result<Changes, StoreError> {
        let watcher = Arc::clone(&self.watcher);
        let cache = Arc::clone(&self.cache);
        tokio::task::spawn_blocking(move || {
            let mut watcher = watcher.lock().unwrap_or_else(PoisonError::into_inner);
            let changes = changed_ids(&mut watcher, cursor, limit)?;
            for id in &changes.ids {
                cache.forget(id);
            }
            Ok(changes)
        })
        .await
        .unwrap_or_else(|_| Err(stopped("change watcher")))
    }

    fn is_shared(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CallOutcome;
    use crate::jsonrpc::ErrorObject;
    use crate::model::{CallToolResult, Content};
    use crate::store::codec::millis_ceil;
    use crate::store::testing::{check_store, sample_record};
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
            Err(StoreError::Backend(message)) => message,
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
        record.outcome = Some(CallOutcome::Result(CallToolResult {
            content: vec![Content::text("done"), Content::image("aGk=", "image/png")],
            structured_content: Some(Value::Null),
            is_error: false,
        }));
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
        error.outcome = Some(CallOutcome::Error(
            ErrorObject::new(-32603, "boom").with_data(Value::Null),
        ));
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
        record.outcome = Some(big.clone());
        let Err(StoreError::Backend(message)) = store.create(record).await else {
            panic!("an oversized create was accepted");
        };
        assert!(message.contains("limit of 1024 bytes"), "{message}");
        assert!(message.contains("max_outcome_bytes"), "{message}");
        assert_eq!(store.get("big").await.unwrap(), None);

        let small = sample_record("small", None, at_ms(0));
        store.create(small.clone()).await.unwrap();
        let mut done = small.clone();
        done.status = TaskStatus::Completed;
        done.outcome = Some(big);
        let Err(StoreError::Backend(message)) = store.compare_and_set(done, 0).await else {
            panic!("an oversized compare_and_set was accepted");
        };
        assert!(message.contains("task small"), "{message}");
        assert_eq!(store.get("small").await.unwrap(), Some(small.clone()));

        let mut fits = small;
        fits.status = TaskStatus::Completed;
        fits.outcome = Some(CallOutcome::Result(CallToolResult::success(vec![
            Content::text("x".repeat(900)),
        ])));
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
        let Err(StoreError::Backend(message)) = migrate(&mut conn, &path, &broken) else {
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
            let record = sample_record(&format!("t-{n}"), None, at_ms(0));
            let Lookup::Miss(epoch) = cache.get(&record.id) else {
                panic!("an unknown task was cached");
            };
            cache.fill(&record, 100, epoch);
            // Too big for a shard of 1000 bytes: never cached.
            cache.fill(&sample_record("huge", None, at_ms(0)), 300, epoch);
        }
        for shard in cache.shards.iter() {
            let shard = shard.lock().unwrap();
            assert!(shard.bytes <= 1000, "{}", shard.bytes);
            assert_eq!(shard.bytes, shard.tasks.len() * 100);
            assert!(!shard.tasks.contains_key("huge"));
        }
        // A fill that raced with a write to its shard is dropped.
        let record = sample_record("raced", None, at_ms(0));
        let Lookup::Miss(epoch) = cache.get("raced") else {
            panic!("cached")
        };
        cache.forget("raced");
        cache.fill(&record, 10, epoch);
        assert!(matches!(cache.get("raced"), Lookup::Miss(_)));
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
}
