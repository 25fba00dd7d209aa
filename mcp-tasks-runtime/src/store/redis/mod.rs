//! The Redis task store (cargo feature `redis`), for Redis and Valkey. The design is
//! described on [`RedisTaskStore`].

mod connection;
mod options;
mod reads;
mod row;
mod scripts;
mod setup;
mod subscriber;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

pub use options::{RedisDurability, RedisOptions};

use super::codec::millis;
use super::remote::{Closing, Remote, start_listener, within};
use super::scan::{no_page, scan_start, scan_take};
use super::{
    Changes, ClaimStore, ScanTasks, StoreError, TaskCounts, TaskFilter, TaskPage, TaskStore, paging,
};
use crate::task::TaskRecord;
use ::redis::AsyncCommands;
use ::redis::RedisError;
use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use connection::{Shared, problem};
use options::{check_prefix, describe, split_prefix};
use row::{decode, encode, set_version};
use scripts::Scripts;
use setup::{check_eviction, read_durability, report_durability};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};
use subscriber::subscribe;
use tokio::sync::Notify;

/// A task store in Redis or Valkey (cargo feature `redis`), for many servers and workers
/// sharing one set of tasks.
///
/// # Connections
///
/// Requests share one multiplexed connection (the `redis` crate's `ConnectionManager`,
/// which pipelines concurrent requests and reconnects with backoff when the connection is
/// lost); one more connection subscribes to the store's signals. Every operation is
/// bounded by [`RedisOptions::timeout`]. The subscriber also keeps the connection state:
/// when its connection is lost and cannot be made again at once, Redis is marked out of
/// reach, and until the subscriber is back and the request connection answers, requests
/// fail at once with a clear [`StoreError::Unavailable`] naming Redis (a JSON-RPC `-32603`
/// error to the client) instead of waiting; the store recovers by itself, with backoff,
/// when Redis comes back. A write whose answer is lost (a timeout, a dropped connection)
/// fails with [`StoreError::Ambiguous`]: it may have been applied. The URL
/// is `redis://[USER:PASSWORD@]HOST[:PORT][/DB]` (`rediss://` is not supported); the
/// database number, the credentials and write access are checked at connect, and each
/// failure names the problem. Use a standalone Redis or Valkey, or the primary of a
/// replicated one; Redis Cluster is not supported (the scripts touch keys of many slots).
///
/// # Durability
///
/// A write is acknowledged once Redis has applied it, so what survives a restart of Redis
/// is Redis' own configuration, which the store reads at connect (`CONFIG GET appendonly`
/// and `appendfsync`) and reports ([`RedisTaskStore::durability`]), with a warning in the
/// log when acknowledged tasks would not survive a restart:
///
/// | Redis settings | after a Redis restart | after a power loss |
/// | --- | --- | --- |
/// | `appendonly yes`, `appendfsync always` | every acknowledged task | every acknowledged task |
/// | `appendonly yes`, `appendfsync everysec` (Redis' default when AOF is on) | every acknowledged task | all but about the last second |
/// | `appendonly yes`, `appendfsync no` | every acknowledged task | all but what the kernel had not written |
/// | `appendonly no` (RDB snapshots only, or none) | only what the last snapshot held | the same |
///
/// With replicas, a failover may also lose the writes the new primary had not received.
/// Redis must also keep what it holds: with a `maxmemory` limit, `maxmemory-policy
/// noeviction` makes a full Redis refuse writes (a clear error to the client) instead of
/// evicting tasks, and the store warns at connect about any other policy.
///
/// # Many processes
///
/// Every write is one Lua script (sent with `EVALSHA`), so it is atomic: a compare-and-set
/// checks the version and rewrites the record and its indexes together, and a claim takes
/// queued tasks oldest first and leases them in one step, so concurrent claimers in any
/// number of processes never take the same task. Each write also appends the task's id to
/// a change feed kept in Redis (a sorted set by change number, trimmed to its newest
/// [`RedisOptions::feed_len`] entries) and publishes the change number on the channel `PREFIX:signal`. The
/// store's subscriber wakes [`ClaimStore::changed`] when a signal arrives; the engine then
/// reads [`ClaimStore::changes`] from its cursor, which is a range read of the feed. A
/// signal lost while the subscriber reconnects only delays the news to the engine's next
/// poll of the feed: cancels and answers are stored state and are never lost.
///
/// # Keys
///
/// Everything lives under the key prefix ([`RedisOptions::key_prefix`]): a hash per task
/// (`PREFIX:task:ID`, one field per column, arguments, outcomes and the rest as JSON),
/// sorted sets for each owner's listing (by creation), queued tasks (claims), leases (by
/// their end: the lapsed-lease scan), expiry times and the change feed, and two counters.
/// A terminal task with a TTL is also given a Redis expiry
/// ([`RedisOptions::expiry_grace`] after its own), so Redis reclaims it even when no
/// server runs; the engine's sweeper normally deletes it first and cleans the indexes,
/// which it also does for a record Redis removed.
///
/// ```no_run
/// # async fn demo() -> Result<(), mcp_tasks_runtime::store::StoreError> {
/// use mcp_tasks_runtime::store::{RedisTaskStore, TaskStore};
///
/// let store = RedisTaskStore::connect("redis://cache.internal:6379/2?prefix=billing").await?;
/// let unfinished = store.unfinished().await?;
/// # Ok(()) }
/// ```
pub struct RedisTaskStore {
    shared: Arc<Shared>,
}

impl fmt::Debug for RedisTaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTaskStore")
            .field("redis", &self.shared.remote.label())
            .field("options", &self.shared.options)
            .field("durability", &self.shared.durability)
            .finish_non_exhaustive()
    }
}

impl RedisTaskStore {
    /// Connects to the Redis at `url` (`redis://[USER:PASSWORD@]HOST[:PORT][/DB]`,
    /// optionally with `?prefix=NAME` for the key prefix) with the default options.
    ///
    /// Everything that can be checked up front is checked here rather than at the first
    /// call: the URL, the host, the credentials, the database number and write access (a
    /// real write). The durability of the server's settings is read and logged. Each
    /// failure names the problem.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to the Redis at `url` with `options`; a `?prefix=NAME` in the URL takes
    /// the place of [`RedisOptions::key_prefix`].
    pub async fn connect_with(url: &str, mut options: RedisOptions) -> Result<Self, StoreError> {
        let (url, prefix) = split_prefix(url);
        if let Some(prefix) = prefix {
            options.key_prefix = prefix;
        }
        let remote = Remote::new("Redis", describe(&url, &options.key_prefix));
        let fail = |problem: String| remote.cannot_open(problem);
        check_prefix(&options.key_prefix).map_err(fail)?;
        if options.timeout.is_zero() {
            return Err(fail("the timeout must be more than zero".into()));
        }
        let client = ::redis::Client::open(url.as_str()).map_err(|e| {
            let problem =
                format!("invalid Redis URL: {e} (expected redis://[USER:PASSWORD@]HOST:PORT/DB)");
            remote.cannot_open_from(problem, e)
        })?;
        let timeout = options.timeout;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(2));
        // One plain connection first: the manager would retry a refused connection until
        // the timeout, hiding why it failed.
        let first = remote
            .answer(timeout, client.get_multiplexed_async_connection(), problem)
            .await
            .map_err(fail)?;
        drop(first);
        let manager = ConnectionManager::new_with_config(client.clone(), config);
        let mut conn = remote
            .answer(timeout, manager, problem)
            .await
            .map_err(fail)?;
        // A write, so a read-only replica, missing permissions or a full server fail here.
        let probe = conn.set::<_, _, ()>(
            format!("{}:opened_at", options.key_prefix),
            millis(SystemTime::now()),
        );
        let failed = |e: &RedisError| format!("the server failed a write test: {}", problem(e));
        remote.answer(timeout, probe, failed).await.map_err(fail)?;
        let durability = within(timeout, read_durability(&mut conn))
            .await
            .unwrap_or(RedisDurability::Unknown);
        report_durability(remote.label(), &durability);
        let _ = within(timeout, check_eviction(&mut conn, remote.label())).await;

        let shared = Arc::new(Shared {
            conn,
            client,
            prefix: format!("{}:", options.key_prefix),
            remote: remote.clone(),
            options,
            durability,
            scripts: Scripts::new(),
            changed: Notify::new(),
            down: std::sync::Mutex::new(None),
            probe: Notify::new(),
            subscriptions: AtomicU64::new(0),
            closing: Closing::default(),
        });
        // The subscriber must be up before the store is handed out, so a signal of any
        // later write wakes `changed`.
        let subscriber = |ready| subscribe(Arc::clone(&shared), ready);
        if let Err(problem) = start_listener(&remote, timeout, subscriber).await {
            shared.closing.close();
            return Err(fail(format!("cannot subscribe to signals: {problem}")));
        }
        if let Err(problem) = shared.backfill().await {
            shared.closing.close();
            return Err(remote.cannot_open_from(problem.to_string(), problem));
        }
        Ok(Self { shared })
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &RedisOptions {
        &self.shared.options
    }

    /// `redis://host:port/db (prefix p)`: the store as messages name it.
    pub fn redis(&self) -> &str {
        self.shared.remote.label()
    }

    /// What the server's persistence settings promise, as read at connect.
    pub fn durability(&self) -> &RedisDurability {
        &self.shared.durability
    }
}

impl Drop for RedisTaskStore {
    fn drop(&mut self) {
        self.shared.closing.close();
    }
}

// ---------------------------------------------------------------------------------------
// The store

impl TaskStore for RedisTaskStore {
    async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
        let shared = &self.shared;
        let (row, pairs) = encode(record, shared.options.max_outcome_bytes)?;
        let mut call = shared.scripts.create.prepare_invoke();
        call.arg(&shared.prefix)
            .arg(&row.id)
            .arg(shared.grace_ms())
            .arg(shared.options.feed_len.max(1))
            .arg(&pairs);
        let answer: Vec<String> = shared.run("cannot create the task", call).await?;
        match answer.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["ok"] => Ok(()),
            ["duplicate"] => Err(StoreError::Duplicate(row.id)),
            ["taken", holder] => Err(StoreError::Taken(holder.to_owned())),
            _ => Err(StoreError::backend(format!(
                "cannot create the task {}: the create script answered {answer:?}",
                row.id
            ))),
        }
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let shared = &self.shared;
        let key = &shared.task_key(id);
        let flat: Vec<String> = shared
            .read_with("cannot read a task", move |mut conn| async move {
                conn.hgetall(key).await
            })
            .await?;
        if flat.is_empty() {
            return Ok(None);
        }
        Ok(Some(decode(flat).0))
    }

    async fn compare_and_set(
        &self,
        record: TaskRecord,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let Some(next) = expected_version.checked_add(1) else {
            return Ok(false);
        };
        let shared = &self.shared;
        let (row, mut pairs) = encode(record, shared.options.max_outcome_bytes)?;
        set_version(&mut pairs, next);
        let mut call = shared.scripts.update.prepare_invoke();
        call.arg(&shared.prefix)
            .arg(&row.id)
            .arg(expected_version)
            .arg(shared.grace_ms())
            .arg(shared.options.feed_len.max(1))
            .arg(&pairs);
        let changed: i64 = shared.run("cannot write a task", call).await?;
        Ok(changed == 1)
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let shared = &self.shared;
        let mut call = shared.scripts.delete.prepare_invoke();
        call.arg(&shared.prefix).arg(id);
        let deleted: i64 = shared.run("cannot delete a task", call).await?;
        Ok(deleted == 1)
    }

    async fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let after: u64 = paging::cursor_after(cursor, 'r')?;
        if limit == 0 {
            return Ok(TaskPage::default());
        }
        let shared = &self.shared;
        let mut call = shared.scripts.list.prepare_invoke();
        call.arg(&shared.prefix)
            .arg(if owner.is_some() { "1" } else { "0" })
            .arg(owner.unwrap_or_default())
            .arg(after)
            .arg(limit.min(1 << 20));
        let mut got: Vec<Vec<String>> = shared.read("cannot list tasks", call).await?;
        if got.is_empty() {
            return Err(shared
                .remote
                .error("cannot list tasks: an empty answer from the list script"));
        }
        let more = got.remove(0).first().is_some_and(|m| m == "1");
        let mut last = after;
        let tasks: Vec<TaskRecord> = got
            .into_iter()
            .map(|flat| {
                let (record, seq) = decode(flat);
                last = seq;
                record
            })
            .collect();
        let next_cursor = more.then(|| paging::cursor('r', last));
        Ok(TaskPage { tasks, next_cursor })
    }

    async fn expire(&self, now: SystemTime, limit: usize) -> Result<Vec<String>, StoreError> {
        let shared = &self.shared;
        let now = millis(now);
        paging::expire_in_batches(limit, |batch| {
            let mut call = shared.scripts.expire.prepare_invoke();
            call.arg(&shared.prefix).arg(now).arg(batch);
            async move { shared.run("cannot delete expired tasks", call).await }
        })
        .await
    }

    /// In pieces, each a short command that Redis answers between other clients' ones: the
    /// members of both unfinished indexes page by page (`ZSCAN`), then the tasks written
    /// meanwhile from the change feed, then the records in pipelined batches.
    ///
    /// Every task that is unfinished for the whole call is returned, once: one that stayed
    /// in its index is returned by that index's scan, and one that moved between the two
    /// (claimed, released) was written, so the feed names it. Tasks that ended meanwhile
    /// are left out. Where the feed was trimmed past the start of the scan (more writes
    /// meanwhile than it keeps), one snapshot of both indexes' ids is taken instead.
    async fn unfinished(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let shared = &self.shared;
        let start = shared.feed_page(None, 0).await?.end;
        let mut ids = shared.members("queued").await?;
        ids.extend(shared.members("leases").await?);
        match shared.written_since(start).await? {
            Some(written) => ids.extend(written),
            None => {
                tracing::debug!(store = %shared.remote.label(), "the change feed moved on during the unfinished scan; taking a snapshot instead");
                let mut call = shared.scripts.unfinished.prepare_invoke();
                call.arg(&shared.prefix);
                ids = shared.read("cannot scan unfinished tasks", call).await?;
            }
        }
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        ids.retain(|id| seen.insert(id.clone()));
        shared.unfinished_of(&ids).await
    }
}

impl ScanTasks for RedisTaskStore {
    async fn scan(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        // Creation numbers stay below 2^53, where Lua's numbers are exact.
        let Some(below) = scan_start(cursor, 'k', 1u64 << 53, limit)? else {
            return Ok(no_page(cursor));
        };
        let shared = &self.shared;
        let limit = limit.min(1 << 20);
        let time = |at: Option<SystemTime>| at.map(|t| millis(t).to_string()).unwrap_or_default();
        let mut call = shared.scripts.scan.prepare_invoke();
        call.arg(&shared.prefix)
            .arg(below)
            .arg(scan_take(filter, limit))
            .arg(limit)
            .arg(if filter.owner.is_some() { "1" } else { "0" })
            .arg(filter.owner.as_deref().unwrap_or_default())
            .arg(filter.tool.as_deref().unwrap_or_default())
            .arg(time(filter.created.after))
            .arg(time(filter.created.before))
            .arg(time(filter.updated.after))
            .arg(time(filter.updated.before));
        for status in filter.wanted_statuses() {
            call.arg(status.as_str());
        }
        let got: Vec<::redis::Value> = shared.read("cannot list tasks", call).await?;
        let mut got = got.into_iter();
        let floor: String = match got.next() {
            Some(value) => ::redis::from_redis_value(value)
                .map_err(|e| shared.remote.error(format!("cannot list tasks: {e}")))?,
            None => {
                return Err(shared
                    .remote
                    .error("cannot list tasks: an empty answer from the scan script"));
            }
        };
        let mut tasks = Vec::new();
        let mut last = below;
        let mut full = false;
        for value in got {
            if tasks.len() == limit {
                full = true;
                break;
            }
            let flat: Vec<String> = ::redis::from_redis_value(value)
                .map_err(|e| shared.remote.error(format!("cannot list tasks: {e}")))?;
            let (record, seq) = decode(flat);
            last = seq;
            tasks.push(record);
        }
        let next_cursor = if full {
            Some(paging::cursor('k', last))
        } else {
            (!floor.is_empty()).then(|| paging::cursor('k', floor))
        };
        Ok(TaskPage { tasks, next_cursor })
    }

    async fn count(&self) -> Result<TaskCounts, StoreError> {
        let shared = &self.shared;
        let call = {
            let mut call = shared.scripts.count.prepare_invoke();
            call.arg(&shared.prefix);
            call
        };
        let pairs: Vec<(String, u64)> = shared.read("cannot count tasks", call).await?;
        let mut counts = TaskCounts::default();
        for (pair, n) in pairs {
            if let Some((status, tool)) = pair.split_once(':')
                && let Ok(status) = status.parse()
            {
                counts.add(status, tool, n);
            }
        }
        Ok(counts)
    }
}

impl ClaimStore for RedisTaskStore {
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
        let shared = &self.shared;
        let mut call = shared.scripts.claim.prepare_invoke();
        call.arg(&shared.prefix)
            .arg(worker)
            .arg(millis(until))
            .arg(limit.min(1 << 20))
            .arg(shared.options.feed_len.max(1))
            .arg(skip);
        let got: Vec<Vec<String>> = shared.run("cannot claim tasks", call).await?;
        Ok(got.into_iter().map(|flat| decode(flat).0).collect())
    }

    async fn lapsed(&self, now: SystemTime, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let shared = &self.shared;
        let mut call = shared.scripts.lapsed.prepare_invoke();
        call.arg(&shared.prefix)
            .arg(millis(now))
            .arg(limit.min(1 << 20));
        let got: Vec<Vec<String>> = shared.read("cannot scan lapsed leases", call).await?;
        Ok(got.into_iter().map(|flat| decode(flat).0).collect())
    }

    async fn changes(&self, cursor: Option<u64>, limit: usize) -> Result<Changes, StoreError> {
        let shared = &self.shared;
        let page = shared.feed_page(cursor, limit).await?;
        let Some(after) = cursor.filter(|&after| after <= page.end) else {
            // No cursor yet, or not one of this store (or Redis lost its data): from now.
            return Ok(Changes {
                ids: Vec::new(),
                cursor: page.end,
            });
        };
        if after < page.floor {
            tracing::warn!(store = %shared.remote.label(), lost = page.floor - after, "the change feed was read too late; some changes were trimmed");
        }
        Ok(Changes {
            ids: page.ids,
            cursor: page.next,
        })
    }

    fn changed(&self) -> impl Future<Output = ()> + Send {
        self.shared.changed.notified()
    }

    fn is_shared(&self) -> bool {
        true
    }
}
