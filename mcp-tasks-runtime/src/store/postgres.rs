//! The PostgreSQL task store (cargo feature `postgres`). The design is described on
//! [`PostgresTaskStore`].

use super::codec::{Row, Stored, millis};
use super::scan::{SqlValue, count_query, no_page, scan_query, scan_start};
use super::{
    Changes, ClaimStore, ScanTasks, StoreError, TaskCounts, TaskFilter, TaskPage, TaskStore, paging,
};
use crate::sync::LockExt;
use crate::task::{TaskRecord, random_id};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use paging::clamp_limit;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot, watch};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, NoTls};

/// Forward migrations: `MIGRATIONS[n]` takes a schema from version `n` to `n + 1`. `{s}` is
/// the quoted schema name. Append only; never edit a migration that has shipped.
const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE SEQUENCE {s}.task_seq;
    CREATE SEQUENCE {s}.change_seq;
    CREATE TABLE {s}.tasks (
        id text PRIMARY KEY,
        seq bigint NOT NULL DEFAULT nextval('{s}.task_seq'),
        owner text,
        tool text NOT NULL,
        settle text NOT NULL,
        status text NOT NULL,
        status_message text,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        ttl_ms bigint,
        poll_interval_ms bigint NOT NULL,
        expires_at bigint,
        version bigint NOT NULL,
        input_seq bigint NOT NULL,
        arguments jsonb NOT NULL,
        input_requests jsonb NOT NULL,
        input_responses jsonb NOT NULL,
        outcome jsonb,
        client jsonb NOT NULL,
        lease_worker text,
        lease_until bigint,
        epoch bigint NOT NULL,
        cancel_at bigint,
        cancel_by text,
        change_seq bigint NOT NULL DEFAULT nextval('{s}.change_seq')
    );
    CREATE INDEX tasks_owner_seq ON {s}.tasks (owner, seq);
    CREATE INDEX tasks_expires_at ON {s}.tasks (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX tasks_unfinished ON {s}.tasks (status)
        WHERE status IN ('working', 'input_required');
    CREATE INDEX tasks_queued ON {s}.tasks (seq)
        WHERE lease_worker IS NULL AND status IN ('working', 'input_required');
    CREATE INDEX tasks_lease ON {s}.tasks (lease_until, id)
        WHERE lease_worker IS NOT NULL AND status IN ('working', 'input_required');
    CREATE INDEX tasks_changes ON {s}.tasks (change_seq);",
    // 2: listing across owners by status and by tool, newest first, and counts.
    "CREATE INDEX tasks_status_seq ON {s}.tasks (status, seq);
    CREATE INDEX tasks_tool_status_seq ON {s}.tasks (tool, status, seq);",
];

/// The columns a record is read from, in the order [`decode`] expects.
const COLUMNS: &str = "id, owner, tool, settle, status, status_message, created_at, \
    updated_at, ttl_ms, poll_interval_ms, version, input_seq, arguments::text, \
    input_requests::text, input_responses::text, outcome::text, seq, client::text, \
    lease_worker, lease_until, epoch, cancel_at, cancel_by";

/// The number of [`COLUMNS`].
const COLUMN_COUNT: usize = 23;

/// [`COLUMNS`] with each column qualified by `table`.
fn qualified_columns(table: &str) -> String {
    COLUMNS
        .split(", ")
        .map(|column| format!("{table}.{column}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The states in which a task is unfinished, as SQL.
const UNFINISHED: &str = "status IN ('working', 'input_required')";

/// The most statements of batched `get`s in flight at once. Few, so that the `get`s that
/// arrive while they run gather into the next statement: one statement (one parse, one
/// plan, one round trip) for many reads, instead of one each.
const GET_SLOTS: usize = 4;

/// The most ids one batched `get` statement reads.
const MAX_GET_BATCH: usize = 256;

/// The most change ids kept for [`ClaimStore::changes`]; older ones are dropped.
const MAX_LOG: usize = 1 << 17;

/// The longest name a schema may have: channel names are at most 63 bytes.
const MAX_SCHEMA_LEN: usize = 40;

/// Knobs for [`PostgresTaskStore::connect_with`]. `PostgresOptions::default()` is what
/// [`PostgresTaskStore::connect`] uses.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The schema the store's tables live in, created if missing; several servers can
    /// share a database with a schema each. Lowercase letters, digits and `_`, starting
    /// with a letter or `_`, at most 40 characters. Default `mcp_tasks`.
    pub schema: String,
    /// The most connections the store opens for requests (the change listener has one
    /// more of its own). Default 16; at least 1.
    pub pool_size: usize,
    /// The bound on every store operation: waiting for a connection, connecting, and the
    /// statement itself. An operation that gets no connection in time fails with
    /// [`StoreError::Unavailable`], a statement sent without an answer in time with
    /// [`StoreError::Ambiguous`] (a read: `Unavailable`); a lost connection to PostgreSQL
    /// is an error within this time, never a hang.
    /// Default 5 s.
    pub timeout: Duration,
    /// The largest outcome (result or error, as JSON) the store accepts; a write of a
    /// bigger one fails with [`StoreError::Backend`] and changes nothing. Default 16 MiB.
    pub max_outcome_bytes: usize,
    /// The most creates inserted by one statement. Creates that arrive while every
    /// connection is busy are inserted together; each is still committed before it is
    /// answered. Default 256; at least 1.
    pub max_batch: usize,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            schema: "mcp_tasks".into(),
            pool_size: 16,
            timeout: Duration::from_secs(5),
            max_outcome_bytes: 16 * 1024 * 1024,
            max_batch: 256,
        }
    }
}

impl PostgresOptions {
    /// These options with a different [`schema`](Self::schema).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// These options with a different [pool size](Self::pool_size).
    pub fn pool_size(mut self, connections: usize) -> Self {
        self.pool_size = connections;
        self
    }

    /// These options with a different [operation timeout](Self::timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// These options with a different [`max_outcome_bytes`](Self::max_outcome_bytes).
    pub fn max_outcome_bytes(mut self, bytes: usize) -> Self {
        self.max_outcome_bytes = bytes;
        self
    }
}

/// A task store in a PostgreSQL database (cargo feature `postgres`), for many servers and
/// workers sharing one set of tasks.
///
/// # Connections
///
/// Requests use a pool of connections ([`PostgresOptions::pool_size`]); one more
/// connection listens for changes. Every operation is bounded by
/// [`PostgresOptions::timeout`]: when PostgreSQL is down or unreachable, requests fail with
/// a clear [`StoreError::Unavailable`] naming the store (a JSON-RPC `-32603` error to the
/// client) instead of waiting, and the pool and the listener reconnect on their own, with
/// backoff, when it comes back. A statement whose answer is lost (no answer in time, or the
/// connection ended under it) fails with [`StoreError::Ambiguous`]: it may have been
/// committed. TLS is not supported; connect over a trusted network or a Unix socket.
///
/// # Durability and batching
///
/// A `create` is committed before it returns. Creates that arrive while every connection
/// is busy are inserted by one statement (up to [`PostgresOptions::max_batch`]), and each
/// caller is answered after that statement commits, so a busy server pays one commit for
/// many creates without answering any of them early. Likewise, `get`s that arrive while a
/// few reads are already in flight are read together by one statement; each still sees
/// every write that returned before it was asked.
///
/// # Many processes
///
/// Claims lock queued tasks with `FOR UPDATE SKIP LOCKED`, so concurrent claimers in any
/// number of processes never take the same task. Every write of a task stamps it with a
/// change sequence number; once it has committed, and before it returns, the store sends
/// `NOTIFY` on the channel `mcp_tasks.SCHEMA` (payload: the sequence number, what changed
/// — `created`, `updated` or `claimed` —, the status and the task id), batched with the
/// notifications of concurrent writes. (A `NOTIFY` inside the writing transaction would
/// serialize the commits of every notifying transaction in the database behind one lock,
/// `fsync` included.) A dedicated connection listens; [`ClaimStore::changes`] serves what
/// it heard, first making sure it has heard every write that returned before the call,
/// and [`ClaimStore::changed`] wakes the engine as soon as something arrives. After the
/// listener reconnects it scans the change sequence from a point safely before it went
/// down, so no write is missed; a process that dies between a commit and its
/// notification (before the write was acknowledged) leaves that change to the other
/// processes' lease and claim scans.
///
/// # Schema
///
/// Everything lives in one schema ([`PostgresOptions::schema`]): a `meta` table with the
/// schema version, and a `tasks` table with the id as primary key and indexes on
/// `owner, seq` (listing with cursors), `expires_at` (expiry), unfinished tasks, queued
/// tasks (claims), `lease_until` of leased tasks (the lapsed-lease scan) and `change_seq`
/// (the catch-up scan). Times are whole milliseconds since the Unix epoch; arguments,
/// outcomes, input requests and responses and the client's capabilities are `jsonb`.
/// Versioned migrations run at connect under an advisory lock, and a schema written by a
/// newer version is refused. PostgreSQL cannot store the NUL character in text, so a
/// task with one in a string is refused with a clear error.
///
/// ```no_run
/// # async fn demo() -> Result<(), mcp_tasks_runtime::store::StoreError> {
/// use mcp_tasks_runtime::store::{PostgresTaskStore, TaskStore};
///
/// let store = PostgresTaskStore::connect("postgres://app@db.internal:5432/tasks").await?;
/// let unfinished = store.unfinished().await?;
/// # Ok(()) }
/// ```
pub struct PostgresTaskStore {
    shared: Arc<Shared>,
    creates: mpsc::UnboundedSender<CreateOp>,
    gets: mpsc::UnboundedSender<GetOp>,
}

/// What the store's background tasks share with it.
struct Shared {
    pool: Pool,
    /// The connection settings, for the listener.
    config: tokio_postgres::Config,
    /// `user@host:port/db (schema s)`, for messages; never the password.
    label: String,
    options: PostgresOptions,
    sql: Sql,
    /// The channel the change notifications of the schema go to.
    data_channel: String,
    /// Notifications waiting to be sent, for the notifier task.
    notices: mpsc::UnboundedSender<Notice>,
    /// The channel this store's syncs come back on.
    sync_channel: String,
    /// The last sync token sent.
    sync_sent: AtomicU64,
    /// The last sync token the listener heard.
    sync_heard: watch::Sender<u64>,
    /// Whether the listener is connected and caught up.
    listening: AtomicBool,
    /// Tells the listener to drop its connection and connect again.
    reconnect: Notify,
    /// Woken when the listener hears a change.
    changed: Notify,
    log: Mutex<ChangeLog>,
    /// Set when the store is dropped, so the background tasks end.
    closed: AtomicBool,
    closing: Notify,
}

/// The change ids the listener heard, numbered by this process.
#[derive(Default)]
struct ChangeLog {
    ids: VecDeque<String>,
    /// The number of the first id in `ids`, minus one.
    base: u64,
    /// The highest change sequence number heard.
    max_seq: i64,
    /// `(when, max_seq)` samples, one a second, to find where a catch-up scan starts.
    history: VecDeque<(Instant, i64)>,
}

impl ChangeLog {
    fn end(&self) -> u64 {
        self.base + self.ids.len() as u64
    }

    fn push(&mut self, id: String) {
        if self.ids.len() == MAX_LOG {
            self.ids.pop_front();
            self.base += 1;
        }
        self.ids.push_back(id);
    }

    fn sample(&mut self, keep: Duration) {
        let now = Instant::now();
        if self
            .history
            .back()
            .is_none_or(|(at, _)| now.duration_since(*at) >= Duration::from_secs(1))
        {
            self.history.push_back((now, self.max_seq));
        }
        while self.history.len() > 2
            && self
                .history
                .get(1)
                .is_some_and(|(at, _)| now.duration_since(*at) > keep)
        {
            self.history.pop_front();
        }
    }

    /// A change sequence number every write that could still commit after `since` is
    /// above: the highest heard at least `settle` before `since`.
    fn floor(&self, since: Instant, settle: Duration) -> i64 {
        self.history
            .iter()
            .rev()
            .find(|(at, _)| since.saturating_duration_since(*at) >= settle)
            .or(self.history.front())
            .map_or(0, |(_, seq)| *seq)
    }
}

/// The SQL of every statement, with the schema filled in.
struct Sql {
    insert: String,
    update: String,
    get: String,
    get_many: String,
    delete: String,
    list_owner: String,
    list_unowned: String,
    expire: String,
    unfinished: String,
    claim: String,
    lapsed: String,
    catch_up: String,
    /// The table, for the scans across owners.
    table: String,
    count: String,
}

impl Sql {
    fn new(s: &str) -> Self {
        Self {
            insert: format!(
                "INSERT INTO {s}.tasks (id, owner, tool, settle, status, status_message, \
                    created_at, updated_at, ttl_ms, poll_interval_ms, expires_at, version, \
                    input_seq, arguments, input_requests, input_responses, outcome, client, \
                    lease_worker, lease_until, epoch, cancel_at, cancel_by) \
                 SELECT id, owner, tool, settle, status, status_message, created_at, \
                    updated_at, ttl_ms, poll_interval_ms, expires_at, version, input_seq, \
                    arguments::jsonb, input_requests::jsonb, input_responses::jsonb, \
                    outcome::jsonb, client::jsonb, lease_worker, lease_until, epoch, \
                    cancel_at, cancel_by \
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
                    $6::text[], $7::int8[], $8::int8[], $9::int8[], $10::int8[], $11::int8[], \
                    $12::int8[], $13::int8[], $14::text[], $15::text[], $16::text[], \
                    $17::text[], $18::text[], $19::text[], $20::int8[], $21::int8[], \
                    $22::int8[], $23::text[]) WITH ORDINALITY \
                    AS u(id, owner, tool, settle, status, status_message, created_at, \
                    updated_at, ttl_ms, poll_interval_ms, expires_at, version, input_seq, \
                    arguments, input_requests, input_responses, outcome, client, \
                    lease_worker, lease_until, epoch, cancel_at, cancel_by, n) \
                 ORDER BY id, n \
                 ON CONFLICT (id) DO NOTHING RETURNING id, change_seq"
            ),
            update: format!(
                "UPDATE {s}.tasks SET owner = $3, tool = $4, settle = $5, status = $6, \
                    status_message = $7, created_at = $8, updated_at = $9, ttl_ms = $10, \
                    poll_interval_ms = $11, expires_at = $12, version = $2 + 1, \
                    input_seq = $13, arguments = $14::text::jsonb, \
                    input_requests = $15::text::jsonb, input_responses = $16::text::jsonb, \
                    outcome = $17::text::jsonb, client = $18::text::jsonb, \
                    lease_worker = $19, lease_until = $20, epoch = $21, cancel_at = $22, \
                    cancel_by = $23, change_seq = nextval('{s}.change_seq') \
                 WHERE id = $1 AND version = $2 RETURNING change_seq"
            ),
            get: format!("SELECT {COLUMNS} FROM {s}.tasks WHERE id = $1"),
            get_many: format!("SELECT {COLUMNS} FROM {s}.tasks WHERE id = ANY($1::text[])"),
            delete: format!("DELETE FROM {s}.tasks WHERE id = $1"),
            list_owner: format!(
                "SELECT {COLUMNS} FROM {s}.tasks WHERE owner = $1 AND seq > $2 \
                 ORDER BY seq LIMIT $3"
            ),
            list_unowned: format!(
                "SELECT {COLUMNS} FROM {s}.tasks WHERE owner IS NULL AND seq > $1 \
                 ORDER BY seq LIMIT $2"
            ),
            expire: format!(
                "WITH due AS MATERIALIZED ( \
                    SELECT id FROM {s}.tasks WHERE expires_at <= $1 \
                    ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED \
                 ) \
                 DELETE FROM {s}.tasks AS t USING due WHERE t.id = due.id RETURNING t.id"
            ),
            unfinished: format!("SELECT {COLUMNS} FROM {s}.tasks WHERE {UNFINISHED}"),
            // The pick is a CTE, evaluated once: as a subquery it may be run again for
            // each updated row and take more than `LIMIT` tasks.
            claim: format!(
                "WITH picked AS MATERIALIZED ( \
                    SELECT id FROM {s}.tasks \
                    WHERE lease_worker IS NULL AND {UNFINISHED} AND tool <> ALL($3::text[]) \
                    ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED \
                 ) \
                 UPDATE {s}.tasks AS t SET lease_worker = $1, lease_until = $2, \
                    epoch = t.epoch + 1, version = t.version + 1, \
                    change_seq = nextval('{s}.change_seq') \
                 FROM picked WHERE t.id = picked.id \
                 RETURNING {}, t.change_seq",
                qualified_columns("t")
            ),
            lapsed: format!(
                "SELECT {COLUMNS} FROM {s}.tasks \
                 WHERE lease_worker IS NOT NULL AND {UNFINISHED} AND lease_until <= $1 \
                 ORDER BY lease_until, id LIMIT $2"
            ),
            catch_up: format!(
                "SELECT id, change_seq FROM {s}.tasks WHERE change_seq > $1 \
                 ORDER BY change_seq LIMIT $2"
            ),
            table: format!("{s}.tasks"),
            count: count_query(&format!("{s}.tasks")),
        }
    }
}

impl fmt::Debug for PostgresTaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresTaskStore")
            .field("database", &self.shared.label)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

/// A create waiting for its batch.
struct CreateOp {
    row: Row,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

/// A `get` waiting for its batch.
struct GetOp {
    id: String,
    reply: oneshot::Sender<Result<Option<TaskRecord>, StoreError>>,
}

impl PostgresTaskStore {
    /// The schema version this build writes. A schema with a higher version is refused.
    pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

    /// Connects to the database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, or
    /// the `key=value` form) with the default options.
    ///
    /// Everything that can be checked up front is checked here rather than at the first
    /// call: the URL, the host, the credentials, the database, the schema (created if
    /// missing, refused if it belongs to another application or to a newer version) and
    /// the privileges, by committing a real write. Each failure names the problem.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to the database at `url` with `options`.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            StoreError::Backend(format!(
                "invalid PostgreSQL URL for the task store: {e} (expected \
                 postgres://USER@HOST:PORT/DATABASE)"
            ))
        })?;
        let label = describe(&config, &options.schema);
        let fail = {
            let label = label.clone();
            move |problem: String| {
                StoreError::Backend(format!(
                    "cannot open the PostgreSQL task store {label}: {problem}"
                ))
            }
        };
        check_schema_name(&options.schema).map_err(&fail)?;
        if options.timeout.is_zero() {
            return Err(fail("the timeout must be more than zero".into()));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.timeout);
        }
        config
            .application_name("mcp-tasks")
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .keepalives_interval(Duration::from_secs(2))
            .keepalives_retries(3)
            .tcp_user_timeout(options.timeout.max(Duration::from_secs(1)) * 2);
        let statement_ms = (options.timeout.as_millis().max(1)) * 2;
        let server_options = match config.get_options() {
            Some(existing) => format!("{existing} -c statement_timeout={statement_ms}"),
            None => format!("-c statement_timeout={statement_ms}"),
        };
        config.options(server_options);

        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.timeout))
            .create_timeout(Some(options.timeout))
            .recycle_timeout(Some(options.timeout))
            .build()
            .map_err(|e| fail(format!("cannot make a connection pool: {e}")))?;

        let schema = quote_ident(&options.schema);
        let mut client = within(options.timeout, pool.get())
            .await
            .map_err(|_| fail(timed_out(options.timeout)))?
            .map_err(|e| fail(pool_problem(&e)))?;
        migrate(&mut client, &options.schema, &schema, options.timeout)
            .await
            .map_err(&fail)?;
        probe(&client, &schema, options.timeout)
            .await
            .map_err(&fail)?;
        let initial_seq = current_change_seq(&client, &schema, options.timeout)
            .await
            .map_err(&fail)?;
        drop(client);

        let (sync_heard, _) = watch::channel(0);
        let (notices, notice_queue) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            data_channel: format!("mcp_tasks.{}", options.schema),
            notices,
            pool,
            config,
            label,
            sql: Sql::new(&schema),
            sync_channel: format!(
                "mcp_tasks.sync.{}",
                random_id().map_err(|e| StoreError::Backend(e.to_string()))?
            ),
            sync_sent: AtomicU64::new(0),
            sync_heard,
            listening: AtomicBool::new(false),
            reconnect: Notify::new(),
            changed: Notify::new(),
            log: Mutex::new(ChangeLog {
                max_seq: initial_seq,
                ..ChangeLog::default()
            }),
            closed: AtomicBool::new(false),
            closing: Notify::new(),
            options,
        });
        // The listener must be up before the store is handed out, so the first
        // `changes(None)` already covers every later write.
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(listen(Arc::clone(&shared), ready_tx));
        match within(shared.options.timeout, ready_rx).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(problem))) => {
                shared.close();
                return Err(fail(format!("cannot start the change listener: {problem}")));
            }
            _ => {
                shared.close();
                return Err(fail(format!(
                    "cannot start the change listener: {}",
                    timed_out(shared.options.timeout)
                )));
            }
        }
        tokio::spawn(send_notices(Arc::downgrade(&shared), notice_queue));
        let (creates, queue) = mpsc::unbounded_channel();
        // Creates that arrive while every pooled connection is busy share the next
        // statement and its commit. (Concurrent statements are not capped lower than the
        // pool on purpose: when the WAL flush is what takes the time, PostgreSQL flushes
        // the commits of concurrent statements together, so more of them in flight means
        // more creates per flush; measured on a 2-core machine with a slow disk, a cap of
        // two statements did no better.)
        let (pool_size, max_batch) = (shared.options.pool_size, shared.options.max_batch);
        tokio::spawn(batches(
            Arc::clone(&shared),
            queue,
            pool_size,
            max_batch,
            insert_batch,
        ));
        // `get`s that arrive while every one of `GET_SLOTS` statements is in flight share
        // the next statement; each still reads what was committed when it was asked, or
        // later.
        let (gets, queue) = mpsc::unbounded_channel();
        tokio::spawn(batches(
            Arc::clone(&shared),
            queue,
            GET_SLOTS.min(pool_size),
            MAX_GET_BATCH,
            read_batch,
        ));
        Ok(Self {
            shared,
            creates,
            gets,
        })
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &PostgresOptions {
        &self.shared.options
    }

    /// `user@host:port/db (schema s)`: the store as messages name it.
    pub fn database(&self) -> &str {
        &self.shared.label
    }
}

impl Drop for PostgresTaskStore {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl Shared {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.closing.notify_waiters();
        self.pool.close();
    }

    fn log(&self) -> MutexGuard<'_, ChangeLog> {
        self.log.locked()
    }

    fn error(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::Backend(format!(
            "the PostgreSQL task store {}: {problem}",
            self.label
        ))
    }

    fn unavailable(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::Unavailable(format!(
            "the PostgreSQL task store {}: {problem}",
            self.label
        ))
    }

    fn ambiguous(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::Ambiguous(format!(
            "the PostgreSQL task store {}: {problem}",
            self.label
        ))
    }

    /// The error of a pool that gave no connection: nothing was sent.
    fn pool_error(&self, what: &str, error: &PoolError) -> StoreError {
        let problem = format!("{what}: {}", pool_problem(error));
        match error {
            PoolError::Closed => self.error(problem),
            _ => self.unavailable(problem),
        }
    }

    /// Runs `op` on a pooled connection, within the timeout. A statement whose answer is
    /// lost (the connection closed, or no answer in time) may have been applied:
    /// [`StoreError::Ambiguous`]; one that never got a connection was not:
    /// [`StoreError::Unavailable`].
    async fn run<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(deadpool_postgres::Object) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let timeout = self.options.timeout;
        let sent = AtomicBool::new(false);
        let attempt = async {
            let client = self
                .pool
                .get()
                .await
                .map_err(|e| self.pool_error(what, &e))?;
            sent.store(true, Ordering::Relaxed);
            op(client).await.map_err(|e| {
                let problem = format!("{what}: {}", problem(&e));
                if connection_ended(&e) {
                    self.ambiguous(problem)
                } else {
                    self.error(problem)
                }
            })
        };
        match within(timeout, attempt).await {
            Ok(result) => result,
            Err(_) if sent.load(Ordering::Relaxed) => {
                Err(self.ambiguous(format!("{what}: {}", timed_out(timeout))))
            }
            Err(_) => Err(self.unavailable(format!("{what}: {}", timed_out(timeout)))),
        }
    }

    /// Like [`run`](Self::run), for reads: a read that found its connection closed (the
    /// server restarted since it was pooled) is tried once more on a fresh one.
    async fn read<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
    where
        F: Fn(deadpool_postgres::Object) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let timeout = self.options.timeout;
        let attempt = async {
            let mut tries = 0;
            loop {
                tries += 1;
                let client = self
                    .pool
                    .get()
                    .await
                    .map_err(|e| self.pool_error(what, &e))?;
                match op(client).await {
                    Ok(value) => return Ok(value),
                    Err(e) if e.is_closed() && tries < 2 => continue,
                    Err(e) if !connection_ended(&e) => {
                        return Err(self.error(format!("{what}: {}", problem(&e))));
                    }
                    Err(e) => return Err(self.unavailable(format!("{what}: {}", problem(&e)))),
                }
            }
        };
        match within(timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(self.unavailable(format!("{what}: {}", timed_out(timeout)))),
        }
    }

    /// Sends the change notifications of writes that just committed (`SEQ WHAT STATUS ID`)
    /// and waits, within the timeout, until they are sent. A notification that cannot be
    /// sent is logged: the write stands.
    async fn announce(&self, payloads: Vec<String>) {
        if payloads.is_empty() {
            return;
        }
        let (done, sent) = oneshot::channel();
        if self.notices.send(Notice { payloads, done }).is_err() {
            return;
        }
        let _ = within(self.options.timeout * 2, sent).await;
    }

    /// Makes sure the listener has heard every write that returned before this call.
    async fn sync(&self) -> Result<(), StoreError> {
        if !self.listening.load(Ordering::Acquire) {
            return Err(self.unavailable("the change listener is reconnecting"));
        }
        let token = self.sync_sent.fetch_add(1, Ordering::AcqRel) + 1;
        let payload = token.to_string();
        let channel = self.sync_channel.clone();
        self.run("cannot read the change feed", |client| async move {
            let statement = client.prepare_cached(NOTIFY_ONE).await?;
            client.execute(&statement, &[&channel, &payload]).await
        })
        .await?;
        let mut heard = self.sync_heard.subscribe();
        let timeout = self.options.timeout;
        match within(timeout, heard.wait_for(|heard| *heard >= token)).await {
            Ok(Ok(_)) => Ok(()),
            _ => {
                // A listener that stops hearing its own notifications has lost its
                // connection without noticing: make it connect again.
                self.reconnect.notify_one();
                Err(self.unavailable(format!(
                    "the change listener did not hear back within {timeout:?}"
                )))
            }
        }
    }
}

/// Runs `future` with a time limit.
async fn within<F: Future>(limit: Duration, future: F) -> Result<F::Output, ()> {
    tokio::time::timeout(limit, future).await.map_err(|_| ())
}

fn timed_out(limit: Duration) -> String {
    format!("no answer from PostgreSQL within {limit:?} (is the server up and reachable?)")
}

/// `user@host:port/db (schema s)`.
fn describe(config: &tokio_postgres::Config, schema: &str) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("(no user)");
    let db = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{db} (schema {schema})")
}

fn check_schema_name(schema: &str) -> Result<(), String> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || schema.len() > MAX_SCHEMA_LEN {
        return Err(format!(
            "invalid schema name {schema:?}: use lowercase letters, digits and `_`, starting \
             with a letter or `_`, at most {MAX_SCHEMA_LEN} characters"
        ));
    }
    if schema.starts_with("pg_") {
        return Err(format!(
            "invalid schema name {schema:?}: names starting with `pg_` are PostgreSQL's"
        ));
    }
    Ok(())
}

/// A checked schema name as an SQL identifier.
fn quote_ident(schema: &str) -> String {
    format!("\"{schema}\"")
}

/// Whether the error ended the connection rather than the statement (the server closed
/// it, or was shut down or restarted under it): a statement sent on it may have been
/// committed before the answer was lost.
fn connection_ended(error: &tokio_postgres::Error) -> bool {
    match error.as_db_error() {
        Some(db) => {
            let code = db.code();
            *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || code.code().starts_with("08")
        }
        None => true,
    }
}

/// What went wrong, in words that name the problem.
fn problem(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let code = db.code();
        let hint = if *code == SqlState::INVALID_PASSWORD {
            "bad credentials: "
        } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
            "bad credentials or a role that may not connect: "
        } else if *code == SqlState::INVALID_CATALOG_NAME {
            "the database does not exist: "
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            "insufficient privileges: "
        } else if *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
        {
            "the server is restarting or shutting down: "
        } else if *code == SqlState::TOO_MANY_CONNECTIONS {
            "the server has no free connections: "
        } else if *code == SqlState::QUERY_CANCELED {
            "the statement took too long: "
        } else {
            ""
        };
        return format!("{hint}{}", db.message());
    }
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            let hint = match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    " (unreachable: is PostgreSQL running, and on this host and port?)"
                }
                std::io::ErrorKind::TimedOut => " (unreachable: the connection timed out)",
                _ => "",
            };
            return format!("{error}: {io}{hint}");
        }
        source = inner.source();
    }
    if error.is_closed() {
        return "the connection to PostgreSQL was lost".into();
    }
    let text = error.to_string();
    if text.contains("timeout") || text.contains("timed out") {
        return format!("{text} (unreachable: the connection timed out)");
    }
    if text.contains("failed to lookup address") || text.contains("Name or service") {
        return format!("{text} (unreachable: the host name does not resolve)");
    }
    text
}

fn pool_problem(error: &PoolError) -> String {
    match error {
        PoolError::Backend(e) => problem(e),
        PoolError::Timeout(_) => "no connection to PostgreSQL could be had in time \
            (is the server up and reachable, or are all connections busy?)"
            .into(),
        PoolError::Closed => "the store is closed".into(),
        other => other.to_string(),
    }
}

/// Creates the schema or brings it to the newest version, or refuses one that is not a
/// task schema or is newer than this build.
async fn migrate(
    client: &mut deadpool_postgres::Object,
    name: &str,
    schema: &str,
    timeout: Duration,
) -> Result<(), String> {
    let work = async {
        let tx = client.transaction().await.map_err(|e| problem(&e))?;
        // One migrator at a time per schema, across every process.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('mcp_tasks.migrate.' || $1))",
            &[&name],
        )
        .await
        .map_err(|e| problem(&e))?;
        let exists = !tx
            .query("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&name])
            .await
            .map_err(|e| problem(&e))?
            .is_empty();
        if !exists {
            tx.batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await
                .map_err(|e| {
                    let hint = if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
                        format!(
                            " (grant the role CREATE on the database, or create the schema \
                             {schema} for it with AUTHORIZATION)"
                        )
                    } else {
                        String::new()
                    };
                    format!("cannot create the schema: {}{hint}", problem(&e))
                })?;
        }
        let tables: Vec<String> = tx
            .query(
                "SELECT c.relname::text FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
                &[&name],
            )
            .await
            .map_err(|e| problem(&e))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let version: i64 = if tables.iter().any(|t| t == "meta") {
            let rows = tx
                .query(
                    &format!("SELECT value FROM {schema}.meta WHERE key = 'schema_version'"),
                    &[],
                )
                .await
                .map_err(|e| format!("cannot read the schema version: {}", problem(&e)))?;
            match rows.first() {
                Some(row) => row.try_get(0).map_err(|e| problem(&e))?,
                None => {
                    return Err(
                        "the schema's meta table has no schema version: it is not an \
                                mcp-tasks task schema"
                            .into(),
                    );
                }
            }
        } else if tables.is_empty() {
            tx.batch_execute(&format!(
                "CREATE TABLE {schema}.meta (key text PRIMARY KEY, value bigint NOT NULL); \
                 INSERT INTO {schema}.meta (key, value) VALUES ('schema_version', 0);"
            ))
            .await
            .map_err(|e| format!("cannot create the schema's tables: {}", problem(&e)))?;
            0
        } else {
            return Err(format!(
                "the schema holds tables of another application ({}); choose another schema",
                tables.join(", ")
            ));
        };
        let latest = PostgresTaskStore::SCHEMA_VERSION;
        if version > latest {
            return Err(format!(
                "the schema has version {version}, written by a newer version of mcp-tasks; \
                 this version (mcp-tasks-runtime {}) reads schema versions up to {latest}. \
                 Upgrade, or use another schema",
                env!("CARGO_PKG_VERSION"),
            ));
        }
        if version == latest {
            return tx.commit().await.map_err(|e| problem(&e));
        }
        let from = usize::try_from(version).unwrap_or(0);
        for (n, migration) in MIGRATIONS.iter().enumerate().skip(from) {
            tx.batch_execute(&migration.replace("{s}", schema))
                .await
                .map_err(|e| {
                    format!(
                        "the migration to schema version {} failed: {}",
                        n + 1,
                        problem(&e)
                    )
                })?;
        }
        tx.execute(
            &format!("UPDATE {schema}.meta SET value = $1 WHERE key = 'schema_version'"),
            &[&latest],
        )
        .await
        .map_err(|e| format!("cannot record the schema version: {}", problem(&e)))?;
        tx.commit().await.map_err(|e| problem(&e))
    };
    within(timeout * 4, work)
        .await
        .map_err(|()| timed_out(timeout * 4))?
}

/// Commits a real write and reads the tasks table, so missing privileges fail at connect.
async fn probe(
    client: &deadpool_postgres::Object,
    schema: &str,
    timeout: Duration,
) -> Result<(), String> {
    let work = async {
        client
            .execute(
                &format!(
                    "INSERT INTO {schema}.meta (key, value) VALUES ('opened_at', $1) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ),
                &[&millis(SystemTime::now())],
            )
            .await
            .map_err(|e| format!("the database failed a write test: {}", problem(&e)))?;
        client
            .query(&format!("SELECT id FROM {schema}.tasks LIMIT 1"), &[])
            .await
            .map_err(|e| format!("cannot read the tasks table: {}", problem(&e)))?;
        Ok(())
    };
    within(timeout, work)
        .await
        .map_err(|()| timed_out(timeout))?
}

async fn current_change_seq(
    client: &deadpool_postgres::Object,
    schema: &str,
    timeout: Duration,
) -> Result<i64, String> {
    let work = async {
        let row = client
            .query_one(
                &format!("SELECT COALESCE(max(change_seq), 0) FROM {schema}.tasks"),
                &[],
            )
            .await
            .map_err(|e| format!("cannot read the change sequence: {}", problem(&e)))?;
        row.try_get::<_, i64>(0).map_err(|e| problem(&e))
    };
    within(timeout, work)
        .await
        .map_err(|()| timed_out(timeout))?
}

// ---------------------------------------------------------------------------------------
// The change listener

/// The listener task: keeps one connection listening on the store's channels, reconnects
/// with backoff, and scans for what it missed after each reconnect.
async fn listen(shared: Arc<Shared>, ready: oneshot::Sender<Result<(), String>>) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(50);
    // When the listener last knew it had heard everything, for the catch-up scan.
    let mut down_since: Option<Instant> = None;
    let settle = shared.options.timeout * 2 + Duration::from_secs(1);
    while !shared.closed.load(Ordering::Acquire) {
        match listen_once(&shared, &mut ready, &mut down_since, settle).await {
            Ok(()) => backoff = Duration::from_millis(50),
            Err(problem) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(problem));
                    return;
                }
                tracing::warn!(store = %shared.label, %problem, "the task store's change listener lost its connection; reconnecting");
            }
        }
        shared.listening.store(false, Ordering::Release);
        down_since.get_or_insert_with(Instant::now);
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shared.closing.notified() => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// One connection of the listener, until it is lost. `Ok` when it ended for a reason that
/// warrants no backoff (the store closing, a forced reconnect).
async fn listen_once(
    shared: &Shared,
    ready: &mut Option<oneshot::Sender<Result<(), String>>>,
    down_since: &mut Option<Instant>,
    settle: Duration,
) -> Result<(), String> {
    let timeout = shared.options.timeout;
    let (client, mut connection) = within(timeout, shared.config.connect(NoTls))
        .await
        .map_err(|()| timed_out(timeout))?
        .map_err(|e| problem(&e))?;
    let (messages, mut inbox) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if messages.send(n).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(problem(&e)),
                None => return Ok(()),
            }
        }
    });
    let _abort = AbortOnDrop(driver.abort_handle());
    let data_channel = shared.data_channel.as_str();
    within(
        timeout,
        client.batch_execute(&format!(
            "LISTEN \"{data_channel}\"; LISTEN \"{}\"",
            shared.sync_channel
        )),
    )
    .await
    .map_err(|()| timed_out(timeout))?
    .map_err(|e| problem(&e))?;

    // Everything committed from here on is heard. What was committed while the listener
    // was down is found by its change sequence number.
    if let Some(since) = down_since.take() {
        let floor = shared.log().floor(since, settle);
        catch_up(shared, &client, floor).await?;
    }
    shared.listening.store(true, Ordering::Release);
    if let Some(ready) = ready.take() {
        let _ = ready.send(Ok(()));
    }
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        // Checked at least once a second (the tick), so a store closed while this
        // connection was being made is noticed too.
        if shared.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        tokio::select! {
            message = inbox.recv() => {
                let Some(n) = message else {
                    return match driver.await {
                        Ok(Ok(())) | Err(_) => Err("the connection closed".into()),
                        Ok(Err(problem)) => Err(problem),
                    };
                };
                if n.channel() == shared.sync_channel {
                    let token: u64 = n.payload().parse().unwrap_or(0);
                    shared.sync_heard.send_if_modified(|heard| {
                        let newer = token > *heard;
                        if newer {
                            *heard = token;
                        }
                        newer
                    });
                } else if n.channel() == data_channel {
                    heard_change(shared, n.payload());
                }
            }
            _ = tick.tick() => shared.log().sample(settle * 2),
            () = shared.reconnect.notified() => return Ok(()),
            () = shared.closing.notified() => return Ok(()),
        }
    }
}

/// Records a change notification: `SEQ OP STATUS ID`.
fn heard_change(shared: &Shared, payload: &str) {
    let mut parts = payload.splitn(4, ' ');
    let seq = parts.next().and_then(|s| s.parse::<i64>().ok());
    let id = parts.nth(2);
    let (Some(seq), Some(id)) = (seq, id) else {
        tracing::warn!(store = %shared.label, payload, "an unreadable change notification");
        return;
    };
    let mut log = shared.log();
    log.max_seq = log.max_seq.max(seq);
    log.push(id.to_owned());
    drop(log);
    shared.changed.notify_one();
}

/// Reads every task written after the change sequence number `floor` into the log.
async fn catch_up(
    shared: &Shared,
    client: &tokio_postgres::Client,
    floor: i64,
) -> Result<(), String> {
    const PAGE: i64 = 10_000;
    let timeout = shared.options.timeout;
    let statement = within(timeout, client.prepare(&shared.sql.catch_up))
        .await
        .map_err(|()| timed_out(timeout))?
        .map_err(|e| problem(&e))?;
    let mut after = floor;
    let mut found = 0usize;
    loop {
        let rows = within(timeout, client.query(&statement, &[&after, &PAGE]))
            .await
            .map_err(|()| timed_out(timeout))?
            .map_err(|e| problem(&e))?;
        let mut log = shared.log();
        for row in &rows {
            let id: String = row.try_get(0).map_err(|e| problem(&e))?;
            let seq: i64 = row.try_get(1).map_err(|e| problem(&e))?;
            after = after.max(seq);
            log.max_seq = log.max_seq.max(seq);
            log.push(id);
        }
        drop(log);
        found += rows.len();
        if rows.len() < PAGE as usize {
            break;
        }
    }
    tracing::info!(store = %shared.label, after = floor, found, "the task store's change listener reconnected and caught up");
    if found > 0 {
        shared.changed.notify_one();
    }
    Ok(())
}

/// Change notifications of one write (or batch), to be sent.
struct Notice {
    payloads: Vec<String>,
    done: oneshot::Sender<()>,
}

/// The most notifications sent by one statement.
const NOTICE_BATCH: usize = 1024;

/// Sends notification `$2` on channel `$1`, committing without waiting for the WAL flush.
///
/// A notifying transaction gets a transaction id (the queue entries carry it) and so a
/// commit record, and PostgreSQL holds its one database-wide notification lock from before
/// that commit until it returns: with `synchronous_commit` on, every notifying transaction
/// in the database would wait for its own `fsync` while the others wait for the lock. These
/// transactions write no data, so nothing is lost by not waiting: listeners are signalled at
/// commit either way, and a notification lost to a crash is made up for by the listeners'
/// catch-up scans. (The setting is local to the statement's own transaction.)
const NOTIFY_ONE: &str = "SELECT pg_notify($1, $2) \
    FROM (SELECT set_config('synchronous_commit', 'off', true)) AS quick";

/// [`NOTIFY_ONE`] for every payload of the array `$2`.
const NOTIFY_MANY: &str = "SELECT pg_notify($1, p) \
    FROM (SELECT set_config('synchronous_commit', 'off', true)) AS quick, \
    unnest($2::text[]) AS p";

/// The notifier task: sends the notifications that are waiting, together, on a pooled
/// connection, at most two statements at a time. It holds the store weakly (the store
/// holds its queue), and ends with it.
async fn send_notices(shared: std::sync::Weak<Shared>, mut queue: mpsc::UnboundedReceiver<Notice>) {
    let slots = Arc::new(Semaphore::new(2));
    let statement = NOTIFY_MANY;
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut payloads = first.payloads;
        let mut done = vec![first.done];
        while payloads.len() < NOTICE_BATCH {
            match queue.try_recv() {
                Ok(notice) => {
                    payloads.extend(notice.payloads);
                    done.push(notice.done);
                }
                Err(_) => break,
            }
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let channel = shared.data_channel.clone();
            let sent = shared
                .run("cannot send change notifications", |client| async move {
                    let statement = client.prepare_cached(statement).await?;
                    client.execute(&statement, &[&channel, &payloads]).await
                })
                .await;
            if let Err(error) = sent {
                tracing::warn!(%error, "other processes may hear of these writes only through their scans");
            }
            for done in done {
                let _ = done.send(());
            }
            drop(slot);
        });
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

// ---------------------------------------------------------------------------------------
// Batched creates

/// Runs batches of the operations in `queue`, with at most `slots` of them in flight: an
/// operation that finds a slot free goes at once, alone; the ones that arrive while every
/// slot is taken share the next batch, up to `max`. Each batch runs as a task of its own,
/// holding its slot until `run` drops it (so a batch may free its slot before it has
/// answered every caller).
async fn batches<T, F, Fut>(
    shared: Arc<Shared>,
    mut queue: mpsc::UnboundedReceiver<T>,
    slots: usize,
    max: usize,
    run: F,
) where
    T: Send + 'static,
    F: Fn(Arc<Shared>, Vec<T>, tokio::sync::OwnedSemaphorePermit) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let count = slots.max(1);
    let free = Arc::new(Semaphore::new(count));
    loop {
        let Ok(slot) = Arc::clone(&free).acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut batch = vec![first];
        let busy = free.available_permits() + 1 < count;
        gather(&mut queue, &mut batch, max.max(1), busy).await;
        tokio::spawn(run(Arc::clone(&shared), batch, slot));
    }
}

/// Takes what is waiting in `queue` into `batch`, up to `max`. When `busy` (other statements
/// are in flight, so callers are active), it first lets the tasks that are ready to run go
/// once or twice: the callers just answered by the last statement then queue their next
/// requests in time to join this one, instead of this statement leaving with the first of
/// them alone (a woken task tends to run next, before the others woken with it).
async fn gather<T>(
    queue: &mut mpsc::UnboundedReceiver<T>,
    batch: &mut Vec<T>,
    max: usize,
    busy: bool,
) {
    let rounds = if busy { 3 } else { 1 };
    for round in 0..rounds {
        if round > 0 {
            tokio::task::yield_now().await;
        }
        while batch.len() < max {
            match queue.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
    }
}

/// Inserts a batch in one statement and answers each caller once it committed and its
/// change notifications were sent. The statement slot is handed back as soon as the
/// statement is done, so the next batch is inserted while this one's notifications go out.
/// The rows go in id order (the first of one id in the batch wins), so concurrent batches
/// that share ids take their index locks in the same order and cannot deadlock.
async fn insert_batch(
    shared: Arc<Shared>,
    mut batch: Vec<CreateOp>,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    // A caller that gave up waiting was told its task may not be stored: leave it out.
    batch.retain(|op| !op.reply.is_closed());
    if batch.is_empty() {
        return;
    }
    let rows: Vec<&Row> = batch.iter().map(|op| &op.row).collect();
    let result = {
        let columns = Columns::of(&rows);
        let sql = &shared.sql.insert;
        shared
            .run("cannot create the task", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                let params = columns.params();
                let inserted = client.query(&statement, &params).await?;
                inserted
                    .iter()
                    .map(|row| Ok((row.try_get::<_, String>(0)?, row.try_get::<_, i64>(1)?)))
                    .collect::<Result<Vec<(String, i64)>, tokio_postgres::Error>>()
            })
            .await
    };
    drop(slot);
    match result {
        Ok(inserted) => {
            let status: std::collections::HashMap<&str, &str> = rows
                .iter()
                .map(|row| (row.id.as_str(), row.status))
                .collect();
            let payloads = inserted
                .iter()
                .map(|(id, seq)| {
                    let status = status.get(id.as_str()).copied().unwrap_or("working");
                    format!("{seq} created {status} {id}")
                })
                .collect();
            shared.announce(payloads).await;
            let mut inserted: std::collections::HashSet<String> =
                inserted.into_iter().map(|(id, _)| id).collect();
            for op in batch {
                // With one id twice in a batch, the first create wins.
                let answer = if inserted.remove(&op.row.id) {
                    Ok(())
                } else {
                    Err(StoreError::Duplicate(op.row.id))
                };
                let _ = op.reply.send(answer);
            }
        }
        Err(error) => {
            for op in batch {
                let _ = op.reply.send(Err(error.clone()));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Batched reads

/// Reads the tasks of a batch of `get`s and answers each caller.
async fn read_batch(
    shared: Arc<Shared>,
    mut batch: Vec<GetOp>,
    _slot: tokio::sync::OwnedSemaphorePermit,
) {
    batch.retain(|op| !op.reply.is_closed());
    if batch.is_empty() {
        return;
    }
    let result = if let [op] = batch.as_slice() {
        let sql = &shared.sql.get;
        let id = op.id.as_str();
        shared
            .read("cannot read a task", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                let rows = client.query(&statement, &[&id]).await?;
                rows.first()
                    .map(decode)
                    .transpose()
                    .map(|found| found.map(|(record, _)| vec![record]).unwrap_or_default())
            })
            .await
    } else {
        let ids: Vec<&str> = batch.iter().map(|op| op.id.as_str()).collect();
        let ids = &ids;
        let sql = &shared.sql.get_many;
        shared
            .read("cannot read a task", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                decode_all(&client.query(&statement, &[ids]).await?)
            })
            .await
    };
    match result {
        Ok(records) => {
            let mut found: std::collections::HashMap<String, TaskRecord> = records
                .into_iter()
                .map(|record| (record.id.clone(), record))
                .collect();
            // The same id may be asked more than once in a batch: each caller gets it.
            let mut asked: std::collections::HashMap<String, usize> =
                std::collections::HashMap::new();
            for op in &batch {
                *asked.entry(op.id.clone()).or_default() += 1;
            }
            for op in batch {
                let left = asked.get_mut(&op.id).map_or(0, |n| {
                    *n -= 1;
                    *n
                });
                let record = if left > 0 {
                    found.get(&op.id).cloned()
                } else {
                    found.remove(&op.id)
                };
                let _ = op.reply.send(Ok(record));
            }
        }
        Err(error) => {
            for op in batch {
                let _ = op.reply.send(Err(error.clone()));
            }
        }
    }
}

/// A batch of rows as one array per column, for `unnest`.
struct Columns {
    id: Vec<String>,
    owner: Vec<Option<String>>,
    tool: Vec<String>,
    settle: Vec<&'static str>,
    status: Vec<&'static str>,
    status_message: Vec<Option<String>>,
    created_at: Vec<i64>,
    updated_at: Vec<i64>,
    ttl_ms: Vec<Option<i64>>,
    poll_interval_ms: Vec<i64>,
    expires_at: Vec<Option<i64>>,
    version: Vec<i64>,
    input_seq: Vec<i64>,
    arguments: Vec<String>,
    input_requests: Vec<String>,
    input_responses: Vec<String>,
    outcome: Vec<Option<String>>,
    client: Vec<String>,
    lease_worker: Vec<Option<String>>,
    lease_until: Vec<Option<i64>>,
    epoch: Vec<i64>,
    cancel_at: Vec<Option<i64>>,
    cancel_by: Vec<Option<String>>,
}

impl Columns {
    fn of(rows: &[&Row]) -> Self {
        Self {
            id: rows.iter().map(|r| r.id.clone()).collect(),
            owner: rows.iter().map(|r| r.owner.clone()).collect(),
            tool: rows.iter().map(|r| r.tool.clone()).collect(),
            settle: rows.iter().map(|r| r.settle).collect(),
            status: rows.iter().map(|r| r.status).collect(),
            status_message: rows.iter().map(|r| r.status_message.clone()).collect(),
            created_at: rows.iter().map(|r| r.created_at).collect(),
            updated_at: rows.iter().map(|r| r.updated_at).collect(),
            ttl_ms: rows.iter().map(|r| r.ttl_ms).collect(),
            poll_interval_ms: rows.iter().map(|r| r.poll_interval_ms).collect(),
            expires_at: rows.iter().map(|r| r.expires_at).collect(),
            version: rows.iter().map(|r| r.version).collect(),
            input_seq: rows.iter().map(|r| r.input_seq).collect(),
            arguments: rows.iter().map(|r| r.arguments.clone()).collect(),
            input_requests: rows.iter().map(|r| r.input_requests.clone()).collect(),
            input_responses: rows.iter().map(|r| r.input_responses.clone()).collect(),
            outcome: rows.iter().map(|r| r.outcome.clone()).collect(),
            client: rows.iter().map(|r| r.client.clone()).collect(),
            lease_worker: rows.iter().map(|r| r.lease_worker.clone()).collect(),
            lease_until: rows.iter().map(|r| r.lease_until).collect(),
            epoch: rows.iter().map(|r| r.epoch).collect(),
            cancel_at: rows.iter().map(|r| r.cancel_at).collect(),
            cancel_by: rows.iter().map(|r| r.cancel_by.clone()).collect(),
        }
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 23] {
        [
            &self.id,
            &self.owner,
            &self.tool,
            &self.settle,
            &self.status,
            &self.status_message,
            &self.created_at,
            &self.updated_at,
            &self.ttl_ms,
            &self.poll_interval_ms,
            &self.expires_at,
            &self.version,
            &self.input_seq,
            &self.arguments,
            &self.input_requests,
            &self.input_responses,
            &self.outcome,
            &self.client,
            &self.lease_worker,
            &self.lease_until,
            &self.epoch,
            &self.cancel_at,
            &self.cancel_by,
        ]
    }
}

// ---------------------------------------------------------------------------------------
// Encoding

/// Refuses a row PostgreSQL cannot store: text and `jsonb` hold no NUL character.
fn check_storable(row: &Row) -> Result<(), StoreError> {
    let texts = [
        Some(row.id.as_str()),
        row.owner.as_deref(),
        Some(row.tool.as_str()),
        row.status_message.as_deref(),
        row.lease_worker.as_deref(),
        row.cancel_by.as_deref(),
    ];
    let jsons = [
        Some(row.arguments.as_str()),
        Some(row.input_requests.as_str()),
        Some(row.input_responses.as_str()),
        row.outcome.as_deref(),
        Some(row.client.as_str()),
    ];
    let nul = texts.into_iter().flatten().any(|t| t.contains('\0'))
        || jsons.into_iter().flatten().any(json_has_nul);
    if nul {
        return Err(StoreError::Backend(format!(
            "task {}: the PostgreSQL task store cannot store the NUL character (U+0000) in \
             text; it was not stored",
            row.id
        )));
    }
    Ok(())
}

/// Whether JSON text (as serde_json writes it) has an escaped NUL, `\u0000`, in a string.
fn json_has_nul(json: &str) -> bool {
    let bytes = json.as_bytes();
    let mut from = 0;
    while let Some(at) = json[from..].find("\\u0000") {
        let at = from + at;
        // The escape counts if an even number of backslashes precede its own.
        let before = bytes[..at]
            .iter()
            .rev()
            .take_while(|b| **b == b'\\')
            .count();
        if before % 2 == 0 {
            return true;
        }
        from = at + 1;
    }
    false
}

fn encode(record: TaskRecord, max_outcome_bytes: usize) -> Result<Row, StoreError> {
    let row = Row::encode(record, max_outcome_bytes)?;
    check_storable(&row)?;
    Ok(row)
}

/// Reads a record (and its creation sequence number) from a row selected with [`COLUMNS`].
fn decode(row: &tokio_postgres::Row) -> Result<(TaskRecord, i64), tokio_postgres::Error> {
    let columns = Stored {
        id: row.try_get(0)?,
        owner: row.try_get(1)?,
        tool: row.try_get(2)?,
        settle: row.try_get(3)?,
        status: row.try_get(4)?,
        status_message: row.try_get(5)?,
        created_at: row.try_get(6)?,
        updated_at: row.try_get(7)?,
        ttl_ms: row.try_get(8)?,
        poll_interval_ms: row.try_get(9)?,
        version: row.try_get(10)?,
        input_seq: row.try_get(11)?,
        arguments: row.try_get(12)?,
        input_requests: row.try_get(13)?,
        input_responses: row.try_get(14)?,
        outcome: row.try_get(15)?,
        client: row.try_get(17)?,
        lease_worker: row.try_get(18)?,
        lease_until: row.try_get(19)?,
        epoch: row.try_get(20)?,
        cancel_at: row.try_get(21)?,
        cancel_by: row.try_get(22)?,
    };
    let record = columns.decode_or_default();
    Ok((record, row.try_get(16)?))
}

fn decode_all(rows: &[tokio_postgres::Row]) -> Result<Vec<TaskRecord>, tokio_postgres::Error> {
    rows.iter().map(|row| decode(row).map(|(r, _)| r)).collect()
}

// ---------------------------------------------------------------------------------------
// The store

impl TaskStore for PostgresTaskStore {
    async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
        let row = encode(record, self.shared.options.max_outcome_bytes)?;
        let (reply, answer) = oneshot::channel();
        if self.creates.send(CreateOp { row, reply }).is_err() {
            return Err(self.shared.error("the store is closed"));
        }
        // The batch is bounded by the store's timeout; this only guards a lost answer.
        match within(self.shared.options.timeout * 2, answer).await {
            Ok(Ok(result)) => result,
            _ => Err(self
                .shared
                .ambiguous("cannot create the task: no answer in time")),
        }
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = GetOp {
            id: id.to_owned(),
            reply,
        };
        if self.gets.send(op).is_err() {
            return Err(self.shared.error("the store is closed"));
        }
        // The read is bounded by the store's timeout; this only guards a lost answer.
        match within(self.shared.options.timeout * 2, answer).await {
            Ok(Ok(result)) => result,
            _ => Err(self
                .shared
                .unavailable("cannot read a task: no answer in time")),
        }
    }

    async fn compare_and_set(
        &self,
        record: TaskRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let Ok(expected) = i64::try_from(expected_version) else {
            return Ok(false);
        };
        let row = encode(record, self.shared.options.max_outcome_bytes)?;
        let sql = &self.shared.sql.update;
        let row = &row;
        let changed = self
            .shared
            .run("cannot write a task", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                let params: [&(dyn ToSql + Sync); 23] = [
                    &row.id,
                    &expected,
                    &row.owner,
                    &row.tool,
                    &row.settle,
                    &row.status,
                    &row.status_message,
                    &row.created_at,
                    &row.updated_at,
                    &row.ttl_ms,
                    &row.poll_interval_ms,
                    &row.expires_at,
                    &row.input_seq,
                    &row.arguments,
                    &row.input_requests,
                    &row.input_responses,
                    &row.outcome,
                    &row.client,
                    &row.lease_worker,
                    &row.lease_until,
                    &row.epoch,
                    &row.cancel_at,
                    &row.cancel_by,
                ];
                let rows = client.query(&statement, &params).await?;
                rows.first().map(|r| r.try_get::<_, i64>(0)).transpose()
            })
            .await?;
        let Some(seq) = changed else {
            return Ok(false);
        };
        self.shared
            .announce(vec![format!("{seq} updated {} {}", row.status, row.id)])
            .await;
        Ok(true)
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let sql = &self.shared.sql.delete;
        self.shared
            .run("cannot delete a task", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                Ok(client.execute(&statement, &[&id]).await? == 1)
            })
            .await
    }

    async fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let after: i64 = paging::cursor_after(cursor, 'p')?;
        let wanted = clamp_limit(limit).saturating_add(1);
        let shared = &self.shared;
        let (mut tasks, last, more) = shared
            .read("cannot list tasks", |client| async move {
                let rows = match owner {
                    Some(owner) => {
                        let statement = client.prepare_cached(&shared.sql.list_owner).await?;
                        client.query(&statement, &[&owner, &after, &wanted]).await?
                    }
                    None => {
                        let statement = client.prepare_cached(&shared.sql.list_unowned).await?;
                        client.query(&statement, &[&after, &wanted]).await?
                    }
                };
                let more = rows.len() > limit;
                let mut tasks = Vec::with_capacity(rows.len().min(limit));
                let mut last = after;
                for row in rows.iter().take(limit) {
                    let (record, seq) = decode(row)?;
                    tasks.push(record);
                    last = seq;
                }
                Ok((tasks, last, more))
            })
            .await?;
        tasks.shrink_to_fit();
        let next_cursor = more.then(|| paging::cursor('p', last));
        Ok(TaskPage { tasks, next_cursor })
    }

    async fn expire(&self, now: SystemTime, limit: usize) -> Result<Vec<String>, StoreError> {
        let now = millis(now);
        let sql = &self.shared.sql.expire;
        let shared = &self.shared;
        paging::expire_in_batches(limit, |batch| {
            let batch = clamp_limit(batch);
            shared.run("cannot delete expired tasks", move |client| async move {
                let statement = client.prepare_cached(sql).await?;
                let rows = client.query(&statement, &[&now, &batch]).await?;
                rows.iter()
                    .map(|row| row.try_get::<_, String>(0))
                    .collect::<Result<Vec<_>, _>>()
            })
        })
        .await
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let sql = &self.shared.sql.unfinished;
        self.shared
            .read("cannot scan unfinished tasks", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                decode_all(&client.query(&statement, &[]).await?)
            })
            .await
    }
}

impl ScanTasks for PostgresTaskStore {
    async fn scan(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let Some(before) = scan_start(cursor, 'g', i64::MAX, limit)? else {
            return Ok(no_page(cursor));
        };
        let shared = &self.shared;
        let wanted = clamp_limit(limit).saturating_add(1);
        let query = scan_query(filter, COLUMNS, &shared.sql.table, before, wanted, |n| {
            format!("${n}")
        });
        let query = &query;
        let (tasks, last, more) = shared
            .read("cannot list tasks", |client| async move {
                let params: Vec<&(dyn ToSql + Sync)> = query
                    .params
                    .iter()
                    .map(|p| match p {
                        SqlValue::Text(text) => text as &(dyn ToSql + Sync),
                        SqlValue::Int(n) => n as &(dyn ToSql + Sync),
                    })
                    .collect();
                let statement = client.prepare_cached(&query.sql).await?;
                let rows = client.query(&statement, &params).await?;
                let more = rows.len() > limit;
                let mut tasks = Vec::with_capacity(rows.len().min(limit));
                let mut last = before;
                for row in rows.iter().take(limit) {
                    let (record, seq) = decode(row)?;
                    tasks.push(record);
                    last = seq;
                }
                Ok((tasks, last, more))
            })
            .await?;
        let next_cursor = more.then(|| paging::cursor('g', last));
        Ok(TaskPage { tasks, next_cursor })
    }

    async fn count(&self) -> Result<TaskCounts, StoreError> {
        let shared = &self.shared;
        let rows = shared
            .read("cannot count tasks", |client| async move {
                let statement = client.prepare_cached(&shared.sql.count).await?;
                client.query(&statement, &[]).await
            })
            .await?;
        let mut counts = TaskCounts::default();
        for row in rows {
            let (status, tool, n): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
            if let Ok(status) = status.parse() {
                counts.add(status, &tool, n.max(0).unsigned_abs());
            }
        }
        Ok(counts)
    }
}

impl ClaimStore for PostgresTaskStore {
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
        let until = millis(until);
        let limit = clamp_limit(limit);
        let sql = &self.shared.sql.claim;
        let mut claimed = self
            .shared
            .run("cannot claim tasks", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                let rows = client
                    .query(&statement, &[&worker, &until, &skip, &limit])
                    .await?;
                rows.iter()
                    .map(|row| {
                        let (record, seq) = decode(row)?;
                        Ok((record, seq, row.try_get::<_, i64>(COLUMN_COUNT)?))
                    })
                    .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            })
            .await?;
        let payloads = claimed
            .iter()
            .map(|(r, _, change)| format!("{change} claimed {} {}", r.status, r.id))
            .collect();
        self.shared.announce(payloads).await;
        claimed.sort_by_key(|(_, seq, _)| *seq);
        Ok(claimed.into_iter().map(|(record, _, _)| record).collect())
    }

    async fn lapsed(&self, now: SystemTime, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        let now = millis(now);
        let limit = clamp_limit(limit);
        let sql = &self.shared.sql.lapsed;
        self.shared
            .read("cannot scan lapsed leases", |client| async move {
                let statement = client.prepare_cached(sql).await?;
                decode_all(&client.query(&statement, &[&now, &limit]).await?)
            })
            .await
    }

    async fn changes(&self, cursor: Option<u64>, limit: usize) -> Result<Changes, StoreError> {
        self.shared.sync().await?;
        let log = self.shared.log();
        let end = log.end();
        let Some(after) = cursor else {
            return Ok(Changes {
                ids: Vec::new(),
                cursor: end,
            });
        };
        if after > end {
            // Not a cursor of this store: start from now.
            return Ok(Changes {
                ids: Vec::new(),
                cursor: end,
            });
        }
        if after < log.base {
            tracing::warn!(store = %self.shared.label, lost = log.base - after, "the change feed was read too late; some changes were dropped");
        }
        let start = after.max(log.base);
        let skip = usize::try_from(start - log.base).unwrap_or(usize::MAX);
        let ids: Vec<String> = log.ids.iter().skip(skip).take(limit).cloned().collect();
        let cursor = start + ids.len() as u64;
        Ok(Changes { ids, cursor })
    }

    fn changed(&self) -> impl Future<Output = ()> + Send {
        self.shared.changed.notified()
    }

    fn is_shared(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{TestDatabase, check_store, sample_record};
    use serde_json::Value;
    use std::sync::atomic::AtomicUsize;

    static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

    fn fresh_schema() -> String {
        format!("suite_{}", SCHEMAS.fetch_add(1, Ordering::Relaxed))
    }

    async fn open(db: &TestDatabase, schema: impl Into<String>) -> PostgresTaskStore {
        PostgresTaskStore::connect_with(
            &db.url(),
            PostgresOptions::default()
                .schema(schema)
                .pool_size(4)
                .timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot open the test store: {e}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_store_passes_the_suite() {
        let Some(db) = TestDatabase::create("suite") else {
            return;
        };
        check_store(|| open(&db, fresh_schema())).await;
    }

    #[tokio::test]
    async fn postgres_store_passes_the_suite_on_one_thread() {
        let Some(db) = TestDatabase::create("suite1") else {
            return;
        };
        check_store(|| open(&db, fresh_schema())).await;
    }

    #[test]
    fn nul_escapes_are_found_exactly() {
        assert!(json_has_nul(r#"{"a":"x\u0000y"}"#));
        assert!(json_has_nul(r#"{"a":"\\\u0000"}"#));
        assert!(!json_has_nul(r#"{"a":"\\u0000"}"#));
        assert!(!json_has_nul(r#"{"a":"\\\\u0000"}"#));
        assert!(!json_has_nul(r#"{"a":"u0000"}"#));
    }

    #[test]
    fn schema_names_are_checked() {
        for good in ["mcp_tasks", "_x", "a1_b2"] {
            assert!(check_schema_name(good).is_ok(), "{good}");
        }
        for bad in ["", "1a", "A", "a-b", "a b", "a\"b", "pg_x", &"a".repeat(41)] {
            assert!(check_schema_name(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_nul_character_is_refused_clearly_and_changes_nothing() {
        let Some(db) = TestDatabase::create("nul") else {
            return;
        };
        let store = open(&db, "nul").await;
        let now = SystemTime::now();
        let mut record = sample_record("nul", None, now);
        record.status_message = Some("a\0b".into());
        let error = store.create(record).await.unwrap_err().to_string();
        assert!(error.contains("NUL"), "{error}");
        let mut record = sample_record("nul", None, now);
        record
            .arguments
            .insert("x".into(), Value::String("\0".into()));
        assert!(store.create(record).await.is_err());
        assert_eq!(store.get("nul").await.unwrap(), None);
        // Creates batched with a refused one are unaffected.
        store.create(sample_record("ok", None, now)).await.unwrap();
        assert!(store.get("ok").await.unwrap().is_some());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_creates_batch_and_each_is_committed_once() {
        let Some(db) = TestDatabase::create("batch") else {
            return;
        };
        let store = Arc::new(open(&db, "batch").await);
        let now = SystemTime::now();
        let mut calls = tokio::task::JoinSet::new();
        for n in 0..400u32 {
            let store = Arc::clone(&store);
            // Every id twice: exactly one of each pair wins.
            let id = format!("t{}", n / 2);
            calls.spawn(async move { store.create(sample_record(&id, None, now)).await });
        }
        let (mut ok, mut duplicate) = (0, 0);
        while let Some(joined) = calls.join_next().await {
            match joined.unwrap() {
                Ok(()) => ok += 1,
                Err(StoreError::Duplicate(_)) => duplicate += 1,
                Err(e) => panic!("a create failed: {e}"),
            }
        }
        assert_eq!((ok, duplicate), (200, 200));
        let page = store.list(None, None, 1000).await.unwrap();
        assert_eq!(page.tasks.len(), 200);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_gets_batch_and_each_caller_gets_the_task_it_asked_for() {
        let Some(db) = TestDatabase::create("getbatch") else {
            return;
        };
        let store = Arc::new(open(&db, "getbatch").await);
        let now = SystemTime::now();
        for n in 0..50u32 {
            let mut record = sample_record(&format!("t{n}"), None, now);
            record.status_message = Some(format!("message {n}"));
            store.create(record).await.unwrap();
        }
        let mut calls = tokio::task::JoinSet::new();
        for n in 0..600u32 {
            let store = Arc::clone(&store);
            // Each id several times, and ten ids that do not exist.
            let id = format!("t{}", n % 60);
            calls.spawn(async move { (n % 60, store.get(&id).await) });
        }
        while let Some(joined) = calls.join_next().await {
            let (n, got) = joined.unwrap();
            let got = got.unwrap_or_else(|e| panic!("a get failed: {e}"));
            if n < 50 {
                let record = got.unwrap_or_else(|| panic!("t{n} was not found"));
                assert_eq!(record.id, format!("t{n}"));
                assert_eq!(record.status_message, Some(format!("message {n}")));
            } else {
                assert_eq!(got, None, "t{n} does not exist");
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_stores_share_tasks_claims_and_changes_and_wake_each_other() {
        let Some(db) = TestDatabase::create("two") else {
            return;
        };
        let a = open(&db, "two").await;
        let b = open(&db, "two").await;
        crate::store::testing::check_shared_stores(&a, &b).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_listener_catches_up_after_its_connection_is_killed() {
        let Some(db) = TestDatabase::create("catchup") else {
            return;
        };
        let a = open(&db, "catchup").await;
        let b = open(&db, "catchup").await;
        let cursor = b.changes(None, 100).await.unwrap().cursor;
        // Kill b's listener (the only connection listening on b's sync channel), then write
        // while it is down.
        db.execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%{}%'",
            b.shared.sync_channel
        ))
        .await;
        a.create(sample_record("missed", None, SystemTime::now()))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        let mut cursor = cursor;
        while !seen.iter().any(|id| id == "missed") {
            assert!(Instant::now() < deadline, "the listener never caught up");
            if let Ok(got) = b.changes(Some(cursor), 100).await {
                cursor = got.cursor;
                seen.extend(got.ids);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_store_closes_its_connections() {
        let Some(db) = TestDatabase::create("drop") else {
            return;
        };
        let store = open(&db, "dropped").await;
        store
            .create(sample_record("x", None, SystemTime::now()))
            .await
            .unwrap();
        assert!(store.changes(None, 10).await.is_ok());
        drop(store);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (client, connection) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
            let driver = tokio::spawn(connection);
            let others: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            drop(client);
            let _ = driver.await;
            if others == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{others} connections still open after the store was dropped"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn migrations_run_once_and_a_newer_schema_is_refused() {
        let Some(db) = TestDatabase::create("migrate") else {
            return;
        };
        let store = open(&db, "versions").await;
        store
            .create(sample_record("kept", None, SystemTime::now()))
            .await
            .unwrap();
        drop(store);
        // Opening again keeps the data.
        let store = open(&db, "versions").await;
        assert!(store.get("kept").await.unwrap().is_some());
        drop(store);
        db.execute("UPDATE versions.meta SET value = 99 WHERE key = 'schema_version'")
            .await;
        let error = PostgresTaskStore::connect_with(
            &db.url(),
            PostgresOptions::default().schema("versions"),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("schema version 99") || error.contains("version 99"),
            "{error}"
        );
        assert!(error.contains("newer version"), "{error}");
        // Another application's schema is refused too.
        db.execute("CREATE SCHEMA theirs; CREATE TABLE theirs.accounts (id int)")
            .await;
        let error =
            PostgresTaskStore::connect_with(&db.url(), PostgresOptions::default().schema("theirs"))
                .await
                .unwrap_err()
                .to_string();
        assert!(error.contains("another application"), "{error}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_configuration_fails_at_connect_naming_the_problem() {
        let Some(db) = TestDatabase::create("config") else {
            return;
        };
        let quick = PostgresOptions::default().timeout(Duration::from_secs(3));
        let fails = |url: String, options: PostgresOptions| async move {
            PostgresTaskStore::connect_with(&url, options)
                .await
                .expect_err(&format!("connecting to {url} succeeded"))
                .to_string()
        };
        // Nothing listens on port 1.
        let error = fails(
            "postgres://postgres@127.0.0.1:1/postgres".into(),
            quick.clone(),
        )
        .await;
        assert!(error.contains("unreachable"), "{error}");
        let error = fails(db.url_for("no_such_role_here", "postgres"), quick.clone()).await;
        assert!(error.contains("credentials"), "{error}");
        let error = fails(
            db.url_for("postgres", "no_such_database_here"),
            quick.clone(),
        )
        .await;
        assert!(error.contains("database does not exist"), "{error}");
        let error = fails("mysql://what".into(), quick.clone()).await;
        assert!(error.contains("invalid PostgreSQL URL"), "{error}");
        let error = fails(db.url(), quick.clone().schema("Bad-Name")).await;
        assert!(error.contains("invalid schema name"), "{error}");
        // A role that may connect but not create anything.
        let role = format!("{}_weak", db.name());
        db.execute(&format!(
            "CREATE ROLE {role} LOGIN; REVOKE CREATE ON DATABASE {} FROM PUBLIC; \
             REVOKE CREATE ON SCHEMA public FROM PUBLIC",
            db.name()
        ))
        .await;
        let error = fails(db.url_for(&role, &db.name()), quick.clone()).await;
        db.execute(&format!("DROP ROLE {role}")).await;
        assert!(error.contains("insufficient privileges"), "{error}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_fail_in_bounded_time_while_connections_are_killed_then_recover() {
        let Some(db) = TestDatabase::create("outage") else {
            return;
        };
        let store = open(&db, "outage").await;
        store
            .create(sample_record("before", None, SystemTime::now()))
            .await
            .unwrap();
        db.terminate_connections().await;
        // Whatever each call answers, it answers within the timeout and the store
        // recovers without being reopened.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let started = Instant::now();
            let got = store.get("before").await;
            assert!(started.elapsed() < Duration::from_secs(12), "a get hung");
            if let Ok(Some(_)) = got {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the store did not recover: {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        store
            .create(sample_record("after", None, SystemTime::now()))
            .await
            .unwrap();
        let cursor = loop {
            match store.changes(None, 10).await {
                Ok(c) => break c.cursor,
                Err(_) => {
                    assert!(Instant::now() < deadline, "the listener did not come back");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        store
            .create(sample_record("later", None, SystemTime::now()))
            .await
            .unwrap();
        let got = store.changes(Some(cursor), 10).await.unwrap();
        assert!(got.ids.contains(&"later".to_owned()), "{got:?}");
    }
}
