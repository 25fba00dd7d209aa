//! The durable embedded task store, on SQLite (cargo feature `sqlite`). The design is
//! described on [`SqliteTaskStore`].

use super::codec::{Row, millis, to_json};
use super::scan::{no_page, scan_start};
use super::{
    Changes, ClaimStore, ScanTasks, StoreError, TaskCounts, TaskFilter, TaskPage, TaskStore,
};
use crate::sync::LockExt;
use crate::task::TaskRecord;
use rusqlite::Connection;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::oneshot;

mod cache;
mod checkpoint;
mod options;
mod queries;
mod readers;
mod row;
mod schema;
#[cfg(test)]
mod tests;
mod writer;

use super::paging::{self, clamp_limit};
use cache::{Cache, Lookup};
use checkpoint::run_checkpointer;
pub use options::{SqliteOptions, Synchronous};
use queries::{
    changed_ids, count_records, get_record, lapsed_records, list_records, scan_records,
    unfinished_records,
};
use readers::{ReadJob, ReadQueue};
use schema::{MIGRATIONS, migrate, open_connection, open_reader, probe};
use writer::{WriteOp, Writer};

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
            return Err(StoreError::backend(format!(
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
                .map_err(|e| thread_error(&store.path, e))?;
            store.readers.push(thread);
        }
        let (kick, kicks) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("mcp-tasks-sqlite-checkpoint".into())
            .spawn(move || run_checkpointer(&checkpointer, &kicks))
            .map_err(|e| thread_error(&store.path, e))?;
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
            .map_err(|e| thread_error(&store.path, e))?;
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
    StoreError::backend(format!(
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
    StoreError::backend_caused_by(
        format!(
            "cannot open the task database {}: {what}: {error}{hint}",
            path.display()
        ),
        error,
    )
}

fn thread_error(path: &Path, error: io::Error) -> StoreError {
    StoreError::backend_caused_by(
        format!(
            "cannot open the task database {}: cannot start a thread: {error}",
            path.display()
        ),
        error,
    )
}

/// A failed statement as a store error: the database held by another connection for longer
/// than the busy timeout is out of reach for now, with nothing changed (a failed write is
/// rolled back), so trying again later may succeed; anything else is a backend failure.
fn sql_error(what: &str, error: rusqlite::Error) -> StoreError {
    match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable(format!(
                "{what}: {error} (another connection held it for longer than the busy timeout)"
            ))
        }
        _ => StoreError::backend_caused_by(format!("{what}: {error}"), error),
    }
}

impl TaskStore for SqliteTaskStore {
    async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
        let row = Row::encode(record, self.options.max_outcome_bytes)?;
        self.write(|reply| WriteOp::Create { row, reply }).await
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.get_shared(id).await?.map(Arc::unwrap_or_clone))
    }

    async fn get_shared(&self, id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        let epoch = match self.cache.get(id) {
            Lookup::Hit(record) => return Ok(Some(record)),
            Lookup::Miss(epoch) => epoch,
        };
        let cache = Arc::clone(&self.cache);
        let id = id.to_owned();
        self.read(move |conn| {
            let Some((record, bytes)) = get_record(conn, &id)? else {
                return Ok(None);
            };
            let record = Arc::new(record);
            cache.fill(&record, bytes, epoch);
            Ok(Some(record))
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
        let after: i64 = paging::cursor_after(cursor, 's')?;
        let owner = owner.map(str::to_owned);
        self.read(move |conn| list_records(conn, owner.as_deref(), after, limit))
            .await
    }

    async fn expire(&self, now: SystemTime, limit: usize) -> Result<Vec<String>, StoreError> {
        let now = millis(now);
        paging::expire_in_batches(limit, |batch| {
            self.write(move |reply| WriteOp::Expire {
                now,
                limit: clamp_limit(batch),
                reply,
            })
        })
        .await
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.read(unfinished_records).await
    }
}

impl ScanTasks for SqliteTaskStore {
    async fn scan(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let Some(before) = scan_start(cursor, 'q', i64::MAX, limit)? else {
            return Ok(no_page(cursor));
        };
        let filter = filter.clone();
        let page = self
            .read(move |conn| scan_records(conn, &filter, before, limit))
            .await?;
        for rec in &page.tasks {
            self.cache.forget_older(&rec.id, rec.version);
        }
        Ok(page)
    }

    async fn count(&self) -> Result<TaskCounts, StoreError> {
        self.read(count_records).await
    }
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
            let mut watcher = watcher.locked();
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
