//! The PostgreSQL task store (cargo feature `postgres`). The design is described on
//! [`PostgresTaskStore`].

mod batch;
mod connection;
mod listener;
mod options;
mod queries;
mod row;
mod schema;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
mod updates;

pub use options::PostgresOptions;

use super::codec::millis;
use super::remote::{Closing, Remote, start_listener, within};
use super::scan::{SqlValue, no_page, scan_query, scan_start};
use super::{
    Changes, ClaimStore, ScanTasks, StoreError, TaskCounts, TaskFilter, TaskPage, TaskStore, paging,
};
use crate::task::{TaskRecord, random_id};
use batch::{CreateOp, GET_SLOTS, GetOp, MAX_GET_BATCH, batches, insert_batch, read_batch};
use connection::{Shared, pool_problem};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use listener::{ChangeLog, listen, send_notices};
use options::{check_schema_name, describe, quote_ident};
use paging::clamp_limit;
use queries::{COLUMN_COUNT, COLUMNS, Sql};
use row::{decode, decode_all, decode_page, encode};
use schema::{MIGRATIONS, current_change_seq, migrate, probe};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_postgres::NoTls;
use tokio_postgres::types::ToSql;
use updates::{UpdateOp, update_batch};

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
/// many creates without answering any of them early. Compare-and-sets are batched the same
/// way (one version of a task per statement; a batch PostgreSQL refuses for one of its
/// rows runs again one write at a time). Likewise, `get`s that arrive while a
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
    updates: mpsc::UnboundedSender<UpdateOp>,
    gets: mpsc::UnboundedSender<GetOp>,
}

impl fmt::Debug for PostgresTaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresTaskStore")
            .field("database", &self.shared.remote.label())
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
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
            let problem = format!(
                "invalid PostgreSQL URL for the task store: {e} (expected \
                 postgres://USER@HOST:PORT/DATABASE)"
            );
            StoreError::backend_caused_by(problem, e)
        })?;
        let remote = Remote::new("PostgreSQL", describe(&config, &options.schema));
        let fail = |problem: String| remote.cannot_open(problem);
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
            .map_err(|e| {
                remote.cannot_open_from(format!("cannot make a connection pool: {e}"), e)
            })?;

        let schema = quote_ident(&options.schema);
        let mut client = within(options.timeout, pool.get())
            .await
            .map_err(|()| fail(remote.timed_out(options.timeout)))?
            .map_err(|e| remote.cannot_open_from(pool_problem(&e), e))?;
        migrate(
            &mut client,
            &options.schema,
            &schema,
            &remote,
            options.timeout,
        )
        .await
        .map_err(fail)?;
        probe(&client, &schema, &remote, options.timeout)
            .await
            .map_err(fail)?;
        let initial_seq = current_change_seq(&client, &schema, &remote, options.timeout)
            .await
            .map_err(fail)?;
        drop(client);

        let (sync_heard, _) = watch::channel(0);
        let (notices, notice_queue) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            data_channel: format!("mcp_tasks.{}", options.schema),
            notices,
            pool,
            config,
            remote: remote.clone(),
            sql: Sql::new(&schema),
            sync_channel: format!(
                "mcp_tasks.sync.{}",
                random_id().map_err(|e| StoreError::backend_caused_by(e.to_string(), e))?
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
            closing: Closing::default(),
            options,
        });
        // The listener must be up before the store is handed out, so the first
        // `changes(None)` already covers every later write.
        let listener = |ready| listen(Arc::clone(&shared), ready);
        if let Err(problem) = start_listener(&remote, shared.options.timeout, listener).await {
            shared.close();
            return Err(fail(format!("cannot start the change listener: {problem}")));
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
        // Compare-and-sets likewise: the ones that arrive while every connection is busy
        // share the next statement and its commit.
        let (updates, queue) = mpsc::unbounded_channel();
        tokio::spawn(batches(
            Arc::clone(&shared),
            queue,
            pool_size,
            max_batch,
            update_batch,
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
            updates,
            gets,
        })
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &PostgresOptions {
        &self.shared.options
    }

    /// `user@host:port/db (schema s)`: the store as messages name it.
    pub fn database(&self) -> &str {
        self.shared.remote.label()
    }
}

impl PostgresTaskStore {
    /// The answer of an operation handed to a batch (`sent`: whether the batch took it).
    /// The batch is bounded by the store's timeout; the wait here only guards a lost answer,
    /// which `lost` names.
    async fn answer<T>(
        &self,
        sent: bool,
        answer: oneshot::Receiver<Result<T, StoreError>>,
        lost: impl FnOnce(&Remote) -> StoreError,
    ) -> Result<T, StoreError> {
        if !sent {
            return Err(self.shared.remote.error("the store is closed"));
        }
        match within(self.shared.options.timeout * 2, answer).await {
            Ok(Ok(result)) => result,
            _ => Err(lost(&self.shared.remote)),
        }
    }
}

impl Drop for PostgresTaskStore {
    fn drop(&mut self) {
        self.shared.close();
    }
}

// ---------------------------------------------------------------------------------------
// The store

impl TaskStore for PostgresTaskStore {
    async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
        let row = encode(record, self.shared.options.max_outcome_bytes)?;
        let (reply, answer) = oneshot::channel();
        let sent = self.creates.send(CreateOp { row, reply }).is_ok();
        self.answer(sent, answer, |remote| {
            remote.ambiguous("cannot create the task: no answer in time")
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = GetOp {
            id: id.to_owned(),
            reply,
        };
        let sent = self.gets.send(op).is_ok();
        self.answer(sent, answer, |remote| {
            remote.unavailable("cannot read a task: no answer in time")
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
        let row = encode(record, self.shared.options.max_outcome_bytes)?;
        let (reply, answer) = oneshot::channel();
        let op = UpdateOp {
            row,
            expected,
            reply,
        };
        let sent = self.updates.send(op).is_ok();
        self.answer(sent, answer, |remote| {
            remote.ambiguous("cannot write a task: no answer in time")
        })
        .await
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
                decode_page(&rows, limit, after)
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
                decode_page(&rows, limit, before)
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
            tracing::warn!(store = %self.shared.remote.label(), lost = log.base - after, "the change feed was read too late; some changes were dropped");
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
