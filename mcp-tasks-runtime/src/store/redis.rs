//! The Redis task store (cargo feature `redis`), for Redis and Valkey. The design is
//! described on [`RedisTaskStore`].

mod scripts;

use super::codec::{Row, Stored, millis};
use super::scan::{no_page, scan_start, scan_take};
use super::{
    Changes, ClaimStore, ScanTasks, StoreError, TaskCounts, TaskFilter, TaskPage, TaskStore, paging,
};
use crate::sync::LockExt;
use crate::task::TaskRecord;
use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{AsyncCommands, ErrorKind, RedisError};
use futures_util::StreamExt;
use scripts::Scripts;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::{Notify, oneshot};

/// The longest key prefix accepted.
const MAX_PREFIX_LEN: usize = 100;

/// One page of the change feed, as [`Shared::feed_page`] reads it.
struct FeedPage {
    /// The change counter.
    end: u64,
    /// The highest change number trimmed from the feed.
    floor: u64,
    /// The ids of the page, oldest change first.
    ids: Vec<String>,
    /// The cursor after the page.
    next: u64,
}

/// How many records, index members and feed entries [`TaskStore::unfinished`] reads per
/// round trip.
const UNFINISHED_BATCH: usize = 500;

/// Knobs for [`RedisTaskStore::connect_with`]. `RedisOptions::default()` is what
/// [`RedisTaskStore::connect`] uses.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The prefix of every key the store writes (followed by `:`), so several groups of
    /// servers can share one Redis database. Letters, digits and `_ - . :`, at most 100
    /// characters. Default `mcp-tasks`. A URL given to [`RedisTaskStore::connect`] may set it
    /// too, as `?prefix=NAME`.
    pub key_prefix: String,
    /// The bound on every store operation, connecting included. A read that takes longer
    /// fails with [`StoreError::Unavailable`], a write with [`StoreError::Ambiguous`] (it
    /// may have been applied); a lost connection to Redis is an error within this time,
    /// never a hang, and while it is down requests fail at once. Default 5 s.
    pub timeout: Duration,
    /// How long after a terminal task's expiry Redis removes its record by itself (with
    /// `PEXPIREAT`), when no server's sweeper did so first. Covers clock skew between the
    /// servers and Redis. Default 60 s.
    pub expiry_grace: Duration,
    /// The largest outcome (result or error, as JSON) the store accepts; a write of a
    /// bigger one fails with [`StoreError::Backend`] and changes nothing. Default 16 MiB.
    pub max_outcome_bytes: usize,
    /// The most entries the change feed keeps: each write trims the oldest past this. A
    /// process that reads the feed less often than this many writes happen misses some
    /// (it says so in the log) and learns of them through its scans. Default 131,072; at
    /// least 1.
    pub feed_len: usize,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            key_prefix: "mcp-tasks".into(),
            timeout: Duration::from_secs(5),
            expiry_grace: Duration::from_secs(60),
            max_outcome_bytes: 16 * 1024 * 1024,
            feed_len: 1 << 17,
        }
    }
}

impl RedisOptions {
    /// These options with a different [key prefix](Self::key_prefix).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// These options with a different [operation timeout](Self::timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// These options with a different [expiry grace](Self::expiry_grace).
    pub fn expiry_grace(mut self, grace: Duration) -> Self {
        self.expiry_grace = grace;
        self
    }

    /// These options with a different [`max_outcome_bytes`](Self::max_outcome_bytes).
    pub fn max_outcome_bytes(mut self, bytes: usize) -> Self {
        self.max_outcome_bytes = bytes;
        self
    }

    /// These options with a different [`feed_len`](Self::feed_len).
    pub fn feed_len(mut self, entries: usize) -> Self {
        self.feed_len = entries;
        self
    }
}

/// What Redis' persistence settings promise for an acknowledged write, read at connect.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisDurability {
    /// `appendonly yes` with `appendfsync always`: every write is on disk before Redis
    /// answers; nothing acknowledged is lost, even on a power loss.
    Always,
    /// `appendonly yes` with `appendfsync everysec`: a restart of Redis loses nothing, an
    /// operating-system crash or power loss up to about a second of writes.
    EverySecond,
    /// `appendonly yes` with `appendfsync no`: a restart of Redis loses nothing, an
    /// operating-system crash or power loss whatever the kernel had not written yet.
    OsDecides,
    /// `appendonly no`: a restart of Redis loses every write since the last RDB snapshot;
    /// `snapshots` says whether snapshots are on at all (`save` is not empty).
    NotDurable {
        /// Whether RDB snapshots are configured.
        snapshots: bool,
    },
    /// `CONFIG GET` was refused (managed services often do that), so nothing is known.
    Unknown,
}

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

/// What the store's subscriber task shares with it.
struct Shared {
    conn: ConnectionManager,
    client: ::redis::Client,
    /// `redis://host:port/db (prefix p)`, for messages; never the password.
    label: String,
    /// The key prefix with its trailing `:`.
    prefix: String,
    options: RedisOptions,
    durability: RedisDurability,
    scripts: Scripts,
    /// Woken when a signal arrives or the subscriber reconnected.
    changed: Notify,
    /// Why Redis is out of reach, while it is: set when the subscriber loses its connection,
    /// cleared once it is back and the request connection answers. Requests fail at once
    /// with [`StoreError::Unavailable`] meanwhile, instead of waiting for a reconnect.
    down: std::sync::Mutex<Option<String>>,
    /// Asks the subscriber to check the connection now (a request got no answer).
    probe: Notify,
    /// How many times the subscriber has subscribed.
    subscriptions: AtomicU64,
    /// Set when the store is dropped, so the subscriber ends.
    closed: AtomicBool,
    closing: Notify,
}

impl fmt::Debug for RedisTaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTaskStore")
            .field("redis", &self.shared.label)
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
        let label = describe(&url, &options.key_prefix);
        let fail = {
            let label = label.clone();
            move |problem: String| {
                StoreError::Backend(format!(
                    "cannot open the Redis task store {label}: {problem}"
                ))
            }
        };
        check_prefix(&options.key_prefix).map_err(&fail)?;
        if options.timeout.is_zero() {
            return Err(fail("the timeout must be more than zero".into()));
        }
        let client = ::redis::Client::open(url.as_str()).map_err(|e| {
            fail(format!(
                "invalid Redis URL: {e} (expected redis://[USER:PASSWORD@]HOST:PORT/DB)"
            ))
        })?;
        let timeout = options.timeout;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(2));
        // One plain connection first: the manager would retry a refused connection until
        // the timeout, hiding why it failed.
        let first = within(timeout, client.get_multiplexed_async_connection())
            .await
            .map_err(|()| fail(timed_out(timeout)))?
            .map_err(|e| fail(problem(&e)))?;
        drop(first);
        let mut conn = within(
            timeout,
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await
        .map_err(|()| fail(timed_out(timeout)))?
        .map_err(|e| fail(problem(&e)))?;
        // A write, so a read-only replica, missing permissions or a full server fail here.
        let probe = conn.set::<_, _, ()>(
            format!("{}:opened_at", options.key_prefix),
            millis(SystemTime::now()),
        );
        within(timeout, probe)
            .await
            .map_err(|()| fail(timed_out(timeout)))?
            .map_err(|e| fail(format!("the server failed a write test: {}", problem(&e))))?;
        let durability = within(timeout, read_durability(&mut conn))
            .await
            .unwrap_or(RedisDurability::Unknown);
        report_durability(&label, &durability);
        let _ = within(timeout, check_eviction(&mut conn, &label)).await;

        let shared = Arc::new(Shared {
            conn,
            client,
            prefix: format!("{}:", options.key_prefix),
            label,
            options,
            durability,
            scripts: Scripts::new(),
            changed: Notify::new(),
            down: std::sync::Mutex::new(None),
            probe: Notify::new(),
            subscriptions: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            closing: Notify::new(),
        });
        // The subscriber must be up before the store is handed out, so a signal of any
        // later write wakes `changed`.
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(subscribe(Arc::clone(&shared), ready_tx));
        match within(timeout, ready_rx).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(problem))) => {
                shared.close();
                return Err(fail(format!("cannot subscribe to signals: {problem}")));
            }
            _ => {
                shared.close();
                return Err(fail(format!(
                    "cannot subscribe to signals: {}",
                    timed_out(timeout)
                )));
            }
        }
        if let Err(problem) = shared.backfill().await {
            shared.close();
            return Err(fail(problem.to_string()));
        }
        Ok(Self { shared })
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &RedisOptions {
        &self.shared.options
    }

    /// `redis://host:port/db (prefix p)`: the store as messages name it.
    pub fn redis(&self) -> &str {
        &self.shared.label
    }

    /// What the server's persistence settings promise, as read at connect.
    pub fn durability(&self) -> &RedisDurability {
        &self.shared.durability
    }
}

impl Drop for RedisTaskStore {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl Shared {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.closing.notify_waiters();
    }

    fn error(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::Backend(format!("the Redis task store {}: {problem}", self.label))
    }

    fn unavailable(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::Unavailable(format!("the Redis task store {}: {problem}", self.label))
    }

    fn ambiguous(&self, problem: impl fmt::Display) -> StoreError {
        StoreError::Ambiguous(format!("the Redis task store {}: {problem}", self.label))
    }

    /// Fails at once while Redis is known to be out of reach.
    fn check_up(&self, what: &str) -> Result<(), StoreError> {
        match &*self.down.locked() {
            None => Ok(()),
            Some(problem) => Err(self.unavailable(format!(
                "{what}: Redis is out of reach ({problem}); reconnecting in the background"
            ))),
        }
    }

    /// Records that Redis is out of reach; logged once per outage.
    fn mark_down(&self, problem: &str) {
        let mut down = self.down.locked();
        if down.is_none() {
            tracing::warn!(store = %self.label, %problem, "the Redis task store lost its connection; requests fail at once until it is back");
        }
        *down = Some(problem.to_owned());
    }

    /// Records that Redis answers again.
    fn mark_up(&self) {
        if self.down.locked().take().is_some() {
            tracing::info!(store = %self.label, "the Redis task store is reachable again");
        }
    }

    /// A request got no answer or lost its connection: the subscriber checks now whether
    /// Redis is still there, rather than at its next ping.
    fn suspect(&self, error: Option<&RedisError>) {
        if error.is_none_or(lost) {
            self.probe.notify_one();
        }
    }

    /// Runs one script that writes, within the timeout. When the answer is lost, the
    /// write may have been applied: [`StoreError::Ambiguous`].
    async fn run<T: ::redis::FromRedisValue>(
        &self,
        what: &str,
        invocation: ::redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.check_up(what)?;
        let mut conn = self.conn.clone();
        let timeout = self.options.timeout;
        match within(timeout, invocation.invoke_async(&mut conn)).await {
            Ok(Ok(value)) => Ok(value),
            // Refused: the manager could not connect, so nothing was sent.
            Ok(Err(e)) if e.is_connection_refusal() => {
                self.suspect(Some(&e));
                Err(self.unavailable(format!("{what}: {}", problem(&e))))
            }
            Ok(Err(e)) if lost(&e) => {
                self.suspect(Some(&e));
                Err(self.ambiguous(format!("{what}: {}", problem(&e))))
            }
            Ok(Err(e)) => Err(self.error(format!("{what}: {}", problem(&e)))),
            Err(()) => {
                self.suspect(None);
                Err(self.ambiguous(format!("{what}: {}", timed_out(timeout))))
            }
        }
    }

    /// Like [`run`](Self::run), for scripts that only read (or only drop stale index
    /// entries): one that found its connection lost is tried once more on the new one.
    async fn read<T: ::redis::FromRedisValue>(
        &self,
        what: &str,
        invocation: ::redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let invocation = &invocation;
        self.read_with(what, move |mut conn| async move {
            invocation.invoke_async(&mut conn).await
        })
        .await
    }

    /// Runs a read (`op`, on a connection), once more on the new connection if it found
    /// its connection lost, all within the store's timeout.
    async fn read_with<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, StoreError>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = ::redis::RedisResult<T>>,
    {
        self.check_up(what)?;
        let timeout = self.options.timeout;
        let attempt = async {
            let mut tries = 0;
            loop {
                tries += 1;
                match op(self.conn.clone()).await {
                    Ok(value) => return Ok(value),
                    Err(e) if lost(&e) && tries < 2 => continue,
                    Err(e) if lost(&e) || e.is_connection_refusal() => {
                        self.suspect(Some(&e));
                        return Err(self.unavailable(format!("{what}: {}", problem(&e))));
                    }
                    Err(e) => return Err(self.error(format!("{what}: {}", problem(&e)))),
                }
            }
        };
        match within(timeout, attempt).await {
            Ok(result) => result,
            Err(()) => {
                self.suspect(None);
                Err(self.unavailable(format!("{what}: {}", timed_out(timeout))))
            }
        }
    }

    /// Gives the tasks of a store written before the listings by status and tool existed
    /// their entries, once per store, a few hundred tasks per script.
    async fn backfill(&self) -> Result<(), StoreError> {
        let marker = format!("{}scan-indexed", self.prefix);
        let done: bool = self
            .read_with("cannot read the store's version", move |mut conn| {
                let marker = marker.clone();
                async move { conn.exists(marker).await }
            })
            .await?;
        if done {
            return Ok(());
        }
        let mut cursor = "0".to_owned();
        loop {
            let mut call = self.scripts.backfill.prepare_invoke();
            call.arg(&self.prefix).arg(&cursor);
            cursor = self
                .run("cannot index the tasks by status and tool", call)
                .await?;
            if cursor == "0" {
                return Ok(());
            }
        }
    }

    fn task_key(&self, id: &str) -> String {
        format!("{}task:{id}", self.prefix)
    }

    fn grace_ms(&self) -> i64 {
        i64::try_from(self.options.expiry_grace.as_millis()).unwrap_or(i64::MAX / 4)
    }

    /// One page of the change feed: up to `limit` entries written after `after` (none
    /// without a cursor), with the feed's counter and trimmed floor.
    async fn feed_page(&self, after: Option<u64>, limit: usize) -> Result<FeedPage, StoreError> {
        let mut call = self.scripts.changes.prepare_invoke();
        call.arg(&self.prefix)
            .arg(after.unwrap_or(u64::MAX))
            .arg(if after.is_some() { limit } else { 0 });
        let got: Vec<String> = self.read("cannot read the change feed", call).await?;
        let number = |text: &String| text.parse::<u64>().unwrap_or(0);
        let mut page = FeedPage {
            end: got.first().map_or(0, number),
            floor: got.get(1).map_or(0, number),
            ids: Vec::new(),
            next: after.unwrap_or(0),
        };
        let mut rest = got.into_iter().skip(2);
        while let (Some(id), Some(n)) = (rest.next(), rest.next()) {
            page.next = page.next.max(n.parse().unwrap_or(page.next));
            page.ids.push(id);
        }
        Ok(page)
    }

    /// The ids written after change `after`, to the end of the feed; `None` where the feed
    /// was trimmed past `after`, or where writes outpace the reading (more entries read than
    /// the feed holds). An id rewritten while the pages are read moves to the end of the
    /// feed, so it is still read, there.
    async fn written_since(&self, after: u64) -> Result<Option<Vec<String>>, StoreError> {
        let mut ids = Vec::new();
        let mut cursor = after;
        loop {
            let page = self.feed_page(Some(cursor), UNFINISHED_BATCH).await?;
            if page.floor > after || ids.len() > self.options.feed_len {
                return Ok(None);
            }
            let full = page.ids.len() == UNFINISHED_BATCH;
            ids.extend(page.ids);
            cursor = page.next;
            if !full {
                return Ok(Some(ids));
            }
        }
    }

    /// Every member of the sorted set `P:set`, a page per `ZSCAN`; a member may come twice.
    async fn members(&self, set: &str) -> Result<Vec<String>, StoreError> {
        let key = &format!("{}{set}", self.prefix);
        let mut members = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, Vec<String>) = self
                .read_with("cannot scan unfinished tasks", move |mut conn| async move {
                    ::redis::cmd("ZSCAN")
                        .arg(key)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(UNFINISHED_BATCH)
                        .query_async(&mut conn)
                        .await
                })
                .await?;
            // Member, score, member, score, …
            members.extend(page.into_iter().step_by(2));
            if next == 0 {
                return Ok(members);
            }
            cursor = next;
        }
    }

    /// The records of `ids` that are still unfinished, read in pipelined batches.
    async fn unfinished_of(&self, ids: &[String]) -> Result<Vec<TaskRecord>, StoreError> {
        let mut unfinished = Vec::with_capacity(ids.len());
        for batch in ids.chunks(UNFINISHED_BATCH) {
            let mut pipe = ::redis::pipe();
            for id in batch {
                pipe.hgetall(self.task_key(id));
            }
            let pipe = &pipe;
            let read: Vec<Vec<String>> = self
                .read_with("cannot read unfinished tasks", move |mut conn| async move {
                    pipe.query_async(&mut conn).await
                })
                .await?;
            unfinished.extend(
                read.into_iter()
                    .filter(|flat| !flat.is_empty())
                    .map(|flat| decode(flat).0)
                    .filter(|record| !record.status.is_terminal()),
            );
        }
        Ok(unfinished)
    }
}

/// Runs `future` with a time limit.
async fn within<F: Future>(limit: Duration, future: F) -> Result<F::Output, ()> {
    tokio::time::timeout(limit, future).await.map_err(|_| ())
}

fn timed_out(limit: Duration) -> String {
    format!("no answer from Redis within {limit:?} (is the server up and reachable?)")
}

/// The URL without a `prefix` query parameter, and that parameter.
fn split_prefix(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut prefix = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("prefix=") {
            Some(value) => {
                prefix = Some(value.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, prefix)
}

/// `redis://host:port/db (prefix p)`, without credentials.
fn describe(url: &str, prefix: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{host} (prefix {prefix})")
}

fn check_prefix(prefix: &str) -> Result<(), String> {
    let ok = !prefix.is_empty()
        && prefix.len() <= MAX_PREFIX_LEN
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid key prefix {prefix:?}: use letters, digits and `_ - . :`, at most \
             {MAX_PREFIX_LEN} characters"
        ))
    }
}

/// Whether the error is the connection's, not the request's.
fn lost(error: &RedisError) -> bool {
    error.is_connection_dropped() || error.is_io_error()
}

/// What went wrong, in words that name the problem.
fn problem(error: &RedisError) -> String {
    let text = error.to_string();
    let lower = text.to_lowercase();
    let hint = if error.kind() == ErrorKind::AuthenticationFailed
        || lower.contains("wrongpass")
        || lower.contains("noauth")
        || lower.contains("invalid username-password")
    {
        "bad credentials: "
    } else if lower.contains("db index is out of range") || lower.contains("invalid db index") {
        "the database number does not exist on this server: "
    } else if lower.contains("noperm") {
        "insufficient permissions: "
    } else if lower.contains("readonly") {
        "the server is a read-only replica: "
    } else if lower.contains("oom") {
        "the server is out of memory (maxmemory): "
    } else if lower.contains("loading") {
        "the server is loading its data after a restart: "
    } else if error.is_connection_refusal() {
        "unreachable (is Redis running, and on this host and port?): "
    } else if error.is_timeout() {
        "unreachable (the connection timed out): "
    } else if lower.contains("failed to lookup address")
        || lower.contains("name or service not known")
    {
        "unreachable (the host name does not resolve): "
    } else if error.is_connection_dropped() || error.is_io_error() {
        "the connection to Redis was lost: "
    } else {
        ""
    };
    format!("{hint}{text}")
}

/// One setting of the server (`CONFIG GET`), or `None` when the command is refused.
async fn config_get(conn: &mut ConnectionManager, name: &str) -> Option<String> {
    let got: Result<HashMap<String, String>, RedisError> = ::redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(conn)
        .await;
    got.ok()?.remove(name)
}

/// Reads `appendonly`, `appendfsync` and `save`; `Unknown` when `CONFIG` is refused.
async fn read_durability(conn: &mut ConnectionManager) -> RedisDurability {
    let appendonly = config_get(conn, "appendonly").await;
    let appendfsync = config_get(conn, "appendfsync").await;
    match (appendonly.as_deref(), appendfsync.as_deref()) {
        (Some("no"), _) => RedisDurability::NotDurable {
            snapshots: config_get(conn, "save")
                .await
                .is_none_or(|save| !save.trim().is_empty()),
        },
        (Some("yes"), Some("always")) => RedisDurability::Always,
        (Some("yes"), Some("everysec")) => RedisDurability::EverySecond,
        (Some("yes"), Some("no")) => RedisDurability::OsDecides,
        _ => RedisDurability::Unknown,
    }
}

/// Warns when the server may evict keys under memory pressure: an evicted task is lost.
async fn check_eviction(conn: &mut ConnectionManager, label: &str) {
    let Some(policy) = config_get(conn, "maxmemory-policy").await else {
        return;
    };
    if policy != "noeviction" {
        tracing::warn!(store = %label, policy = %policy, "Redis may evict tasks when it runs out of memory (maxmemory-policy is not noeviction); set maxmemory-policy noeviction so a full Redis refuses writes instead");
    }
}

fn report_durability(label: &str, durability: &RedisDurability) {
    match durability {
        RedisDurability::Always => {
            tracing::info!(store = %label, "Redis writes every acknowledged task to disk before answering (appendonly yes, appendfsync always)");
        }
        RedisDurability::EverySecond => {
            tracing::info!(store = %label, "acknowledged tasks survive a Redis restart; a power loss may lose about the last second (appendonly yes, appendfsync everysec); set appendfsync always to lose nothing");
        }
        RedisDurability::OsDecides => {
            tracing::warn!(store = %label, "acknowledged tasks survive a Redis restart, but a power loss or OS crash may lose many seconds of them (appendonly yes, appendfsync no); set appendfsync everysec or always");
        }
        RedisDurability::NotDurable { snapshots: true } => {
            tracing::warn!(store = %label, "acknowledged tasks will NOT survive a Redis restart: the append-only file is off (appendonly no), so a restart loses every task written since the last RDB snapshot; set appendonly yes (and appendfsync always or everysec) on the Redis server");
        }
        RedisDurability::NotDurable { snapshots: false } => {
            tracing::warn!(store = %label, "acknowledged tasks will NOT survive a Redis restart: the append-only file is off (appendonly no) and so are snapshots (save \"\"), so a restart loses every task; set appendonly yes (and appendfsync always or everysec) on the Redis server");
        }
        RedisDurability::Unknown => {
            tracing::warn!(store = %label, "cannot read the Redis persistence settings (CONFIG GET was refused): whether acknowledged tasks survive a Redis restart is unknown; make sure the server runs with appendonly yes");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Signals

/// How one connection of the subscriber ended.
enum Ended {
    /// The store closed.
    Closed,
    /// It was subscribed, then lost its connection (or a ping went unanswered).
    Lost(String),
    /// It could not connect, subscribe, or reach Redis through the request connection.
    Unreachable(String),
}

/// The subscriber task: keeps one connection subscribed to the store's signal channel,
/// reconnects with backoff, and wakes `changed` after each reconnect so the engine reads
/// the feed for whatever it missed. It also keeps the store's connection state: a lost
/// connection that cannot be made again at once marks Redis out of reach (requests then
/// fail at once), and a reconnect whose request connection answers marks it back.
async fn subscribe(shared: Arc<Shared>, ready: oneshot::Sender<Result<(), String>>) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(50);
    while !shared.closed.load(Ordering::Acquire) {
        match subscribe_once(&shared, &mut ready).await {
            Ended::Closed => return,
            Ended::Lost(problem) => {
                // Try again at once: a killed connection (a restart, a proxy, `CLIENT
                // KILL`) usually comes back on the first try, and requests carry on.
                tracing::debug!(store = %shared.label, %problem, "the Redis task store's signal subscriber lost its connection; reconnecting");
                backoff = Duration::from_millis(50);
                continue;
            }
            Ended::Unreachable(problem) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(problem));
                    return;
                }
                shared.mark_down(&problem);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shared.closing.notified() => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Whether the request connection answers, trying a few times within the timeout (the
/// connection manager makes a new connection after a failed request).
async fn answers(shared: &Shared) -> Result<(), String> {
    let timeout = shared.options.timeout;
    let attempt = async {
        let mut last = String::new();
        for _ in 0..3 {
            let mut conn = shared.conn.clone();
            match ::redis::cmd("PING").query_async::<String>(&mut conn).await {
                Ok(_) => return Ok(()),
                Err(e) => last = problem(&e),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(last)
    };
    within(timeout, attempt)
        .await
        .map_err(|()| timed_out(timeout))?
}

/// One connection of the subscriber, until it is lost.
async fn subscribe_once(
    shared: &Shared,
    ready: &mut Option<oneshot::Sender<Result<(), String>>>,
) -> Ended {
    let timeout = shared.options.timeout;
    let connect = async {
        let mut pubsub = within(timeout, shared.client.get_async_pubsub())
            .await
            .map_err(|()| timed_out(timeout))?
            .map_err(|e| problem(&e))?;
        let channel = format!("{}signal", shared.prefix);
        within(timeout, pubsub.subscribe(&channel))
            .await
            .map_err(|()| timed_out(timeout))?
            .map_err(|e| problem(&e))?;
        if ready.is_none() {
            // Requests go to the other connection: it must answer too.
            answers(shared).await?;
        }
        Ok::<_, String>(pubsub)
    };
    let pubsub = match connect.await {
        Ok(pubsub) => pubsub,
        Err(problem) => return Ended::Unreachable(problem),
    };
    let (mut sink, mut messages) = pubsub.split();
    shared.subscriptions.fetch_add(1, Ordering::Relaxed);
    match ready.take() {
        Some(ready) => {
            let _ = ready.send(Ok(()));
        }
        None => {
            tracing::debug!(store = %shared.label, "the Redis task store's signal subscriber reconnected");
            shared.mark_up();
            // Whatever was published while the subscriber was down is in the feed.
            shared.changed.notify_one();
        }
    }
    // A ping now and then, so a connection that died silently is noticed.
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    tick.tick().await;
    loop {
        if shared.closed.load(Ordering::Acquire) {
            return Ended::Closed;
        }
        tokio::select! {
            message = messages.next() => match message {
                Some(_) => {
                    shared.changed.notify_one();
                    continue;
                }
                None => return Ended::Lost("the connection closed".into()),
            },
            _ = tick.tick() => {}
            () = shared.probe.notified() => {}
            () = shared.closing.notified() => return Ended::Closed,
        }
        // A subscribed connection answers a ping with `["pong", ""]`.
        let pong: Result<Result<::redis::Value, RedisError>, ()> =
            within(timeout, sink.ping()).await;
        match pong {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Ended::Lost(problem(&e)),
            Err(()) => return Ended::Lost(timed_out(timeout)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Encoding

/// A record as the field/value pairs of its hash. Absent optional columns are left out.
fn encode(record: TaskRecord, max_outcome_bytes: usize) -> Result<(Row, Vec<String>), StoreError> {
    let row = Row::encode(record, max_outcome_bytes)?;
    let mut pairs: Vec<String> = Vec::with_capacity(48);
    let mut put = |field: &str, value: String| {
        pairs.push(field.to_owned());
        pairs.push(value);
    };
    put("id", row.id.clone());
    if let Some(owner) = &row.owner {
        put("owner", owner.clone());
    }
    put("tool", row.tool.clone());
    put("settle", row.settle.to_owned());
    put("status", row.status.to_owned());
    if let Some(message) = &row.status_message {
        put("status_message", message.clone());
    }
    put("created_at", row.created_at.to_string());
    put("updated_at", row.updated_at.to_string());
    if let Some(ttl) = row.ttl_ms {
        put("ttl_ms", ttl.to_string());
    }
    put("poll_interval_ms", row.poll_interval_ms.to_string());
    if let Some(expires) = row.expires_at {
        put("expires", expires.to_string());
    }
    put("version", row.version.to_string());
    put("input_seq", row.input_seq.to_string());
    put("arguments", row.arguments.clone());
    put("input_requests", row.input_requests.clone());
    put("input_responses", row.input_responses.clone());
    if let Some(outcome) = &row.outcome {
        put("outcome", outcome.clone());
    }
    put("client", row.client.clone());
    if let (Some(worker), Some(until)) = (&row.lease_worker, row.lease_until) {
        put("lease_worker", worker.clone());
        put("lease_until", until.to_string());
    }
    put("epoch", row.epoch.to_string());
    if let Some(at) = row.cancel_at {
        put("cancel_at", at.to_string());
    }
    if let Some(by) = &row.cancel_by {
        put("cancel_by", by.clone());
    }
    Ok((row, pairs))
}

/// Sets the `version` pair to `version`.
fn set_version(pairs: &mut [String], version: u64) {
    if let Some(at) = pairs.iter().step_by(2).position(|f| f == "version") {
        pairs[at * 2 + 1] = version.to_string();
    }
}

/// A record read back from the flat field/value list of `HGETALL`, and its creation number.
fn decode(flat: Vec<String>) -> (TaskRecord, u64) {
    let mut fields: HashMap<String, String> = HashMap::with_capacity(flat.len() / 2);
    let mut iter = flat.into_iter();
    while let (Some(field), Some(value)) = (iter.next(), iter.next()) {
        fields.insert(field, value);
    }
    let mut take = |name: &str| fields.remove(name);
    let int = |value: Option<String>| value.and_then(|v| v.parse::<i64>().ok());
    let (settle, status) = (take("settle"), take("status"));
    let (arguments, input_requests) = (take("arguments"), take("input_requests"));
    let (input_responses, outcome, client) =
        (take("input_responses"), take("outcome"), take("client"));
    // A missing JSON field reads as `null`, which the decoder takes as unreadable (logged,
    // then its default), except for the capabilities, where `null` is a value.
    fn text(value: &Option<String>) -> &str {
        value.as_deref().unwrap_or("null")
    }
    let columns = Stored {
        id: take("id").unwrap_or_default(),
        owner: take("owner"),
        tool: take("tool").unwrap_or_default(),
        settle: settle.as_deref().unwrap_or_default(),
        status: status.as_deref().unwrap_or_default(),
        status_message: take("status_message"),
        created_at: int(take("created_at")).unwrap_or(0),
        updated_at: int(take("updated_at")).unwrap_or(0),
        ttl_ms: int(take("ttl_ms")),
        poll_interval_ms: int(take("poll_interval_ms")).unwrap_or(0),
        version: int(take("version")).unwrap_or(0),
        input_seq: int(take("input_seq")).unwrap_or(0),
        arguments: text(&arguments),
        input_requests: text(&input_requests),
        input_responses: text(&input_responses),
        outcome: outcome.as_deref(),
        client: text(&client),
        lease_worker: take("lease_worker"),
        lease_until: int(take("lease_until")),
        epoch: int(take("epoch")).unwrap_or(0),
        cancel_at: int(take("cancel_at")),
        cancel_by: take("cancel_by"),
    };
    let seq = int(take("seq")).unwrap_or(0).max(0).unsigned_abs();
    let record = columns.decode_or_default();
    (record, seq)
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
        let created: i64 = shared.run("cannot create the task", call).await?;
        if created == 1 {
            Ok(())
        } else {
            Err(StoreError::Duplicate(row.id))
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
            return Err(shared.error("cannot list tasks: an empty answer from the list script"));
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
                tracing::debug!(store = %shared.label, "the change feed moved on during the unfinished scan; taking a snapshot instead");
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
                .map_err(|e| shared.error(format!("cannot list tasks: {e}")))?,
            None => {
                return Err(shared.error("cannot list tasks: an empty answer from the scan script"));
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
                .map_err(|e| shared.error(format!("cannot list tasks: {e}")))?;
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
            tracing::warn!(store = %shared.label, lost = page.floor - after, "the change feed was read too late; some changes were trimmed");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{TestRedis, check_store, sample_record};
    use crate::task::TaskStatus;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    static PREFIXES: AtomicUsize = AtomicUsize::new(0);

    async fn open(redis: &TestRedis, name: impl fmt::Display) -> RedisTaskStore {
        RedisTaskStore::connect_with(
            &redis.url(),
            RedisOptions::default()
                .key_prefix(format!("{}:{name}", redis.prefix()))
                .timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot open the test store: {e}"))
    }

    fn fresh() -> String {
        format!("suite{}", PREFIXES.fetch_add(1, Ordering::Relaxed))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn redis_store_passes_the_suite() {
        let Some(redis) = TestRedis::create("suite") else {
            return;
        };
        check_store(|| open(&redis, fresh())).await;
    }

    #[tokio::test]
    async fn redis_store_passes_the_suite_on_one_thread() {
        let Some(redis) = TestRedis::create("suite1") else {
            return;
        };
        check_store(|| open(&redis, fresh())).await;
    }

    #[test]
    fn prefixes_and_urls_are_read_exactly() {
        assert_eq!(
            split_prefix("redis://h:1/2?prefix=a:b&protocol=resp3"),
            (
                "redis://h:1/2?protocol=resp3".to_owned(),
                Some("a:b".to_owned())
            )
        );
        assert_eq!(
            split_prefix("redis://h:1/2"),
            ("redis://h:1/2".to_owned(), None)
        );
        assert_eq!(
            describe("redis://user:secret@h:1/2?x=y", "p"),
            "redis://h:1/2 (prefix p)"
        );
        for good in ["mcp-tasks", "a:b.c_d-1"] {
            assert!(check_prefix(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a*", "a?", &"a".repeat(101)] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_stores_share_tasks_claims_and_changes_and_wake_each_other() {
        let Some(redis) = TestRedis::create("two") else {
            return;
        };
        let a = open(&redis, "two").await;
        let b = open(&redis, "two").await;
        crate::store::testing::check_shared_stores(&a, &b).await;
        // Another prefix on the same database sees none of it.
        let other = open(&redis, "other").await;
        assert_eq!(other.get("x").await.unwrap(), None);
        assert!(other.unfinished().await.unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_subscriber_stays_connected_through_its_pings() {
        let Some(redis) = TestRedis::create("pings") else {
            return;
        };
        let store = open(&redis, "p").await;
        // Past two pings.
        tokio::time::sleep(Duration::from_millis(4500)).await;
        assert_eq!(store.shared.subscriptions.load(Ordering::Relaxed), 1);
        let wake = store.changed();
        store
            .create(sample_record("x", None, SystemTime::now()))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), wake)
            .await
            .expect("the store's own write wakes it");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_change_feed_is_trimmed_to_its_length() {
        let Some(redis) = TestRedis::create("feed") else {
            return;
        };
        let store = RedisTaskStore::connect_with(
            &redis.url(),
            RedisOptions::default()
                .key_prefix(redis.prefix())
                .feed_len(10),
        )
        .await
        .unwrap();
        let start = store.changes(None, 100).await.unwrap().cursor;
        let now = SystemTime::now();
        for n in 0..30 {
            store
                .create(sample_record(&format!("t{n:02}"), None, now))
                .await
                .unwrap();
        }
        let got = store.changes(Some(start), 100).await.unwrap();
        let want: Vec<String> = (20..30).map(|n| format!("t{n}")).collect();
        assert_eq!(got.ids, want, "only the newest entries are kept");
        assert_eq!(got.cursor, start + 30);
        let client = ::redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let kept: usize = conn
            .zcard(format!("{}:changes", redis.prefix()))
            .await
            .unwrap();
        assert_eq!(kept, 10);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_user_without_config_access_connects_with_the_durability_unknown() {
        let Some(redis) = TestRedis::create("acl") else {
            return;
        };
        let client = ::redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let user = format!("mcp-tasks-test-{}", &crate::task::random_id().unwrap()[..8]);
        let _: () = ::redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&user)
            .arg("on")
            .arg(">secret")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .arg("-config")
            .query_async(&mut conn)
            .await
            .unwrap();
        let server = redis.url();
        let server = server.replacen("redis://", &format!("redis://{user}:secret@"), 1);
        let checked = async {
            let store = RedisTaskStore::connect_with(
                &server,
                RedisOptions::default().key_prefix(redis.prefix()),
            )
            .await?;
            store
                .create(sample_record("x", None, SystemTime::now()))
                .await?;
            Ok::<_, StoreError>(store.durability().clone())
        }
        .await;
        // Deleting the user also ends its connections.
        let _: i64 = ::redis::cmd("ACL")
            .arg("DELUSER")
            .arg(&user)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(checked, Ok(RedisDurability::Unknown));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_removes_an_expired_record_itself_and_the_sweep_cleans_up() {
        let Some(redis) = TestRedis::create("pexpire") else {
            return;
        };
        let store = RedisTaskStore::connect_with(
            &redis.url(),
            RedisOptions::default()
                .key_prefix(redis.prefix())
                .expiry_grace(Duration::ZERO),
        )
        .await
        .unwrap();
        let now = SystemTime::now();
        let mut done = sample_record("gone", Some("alice"), now);
        done.status = TaskStatus::Completed;
        done.ttl = Some(Duration::from_millis(200));
        store.create(done).await.unwrap();
        store
            .create(sample_record("kept", Some("alice"), now))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while store.get("gone").await.unwrap().is_some() {
            assert!(Instant::now() < deadline, "Redis never expired the record");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The sweep still reports it, and the listing no longer has it.
        let expired = store
            .expire(SystemTime::now() + Duration::from_secs(1), 10)
            .await
            .unwrap();
        assert_eq!(expired, ["gone"]);
        let page = store.list(Some("alice"), None, 10).await.unwrap();
        let ids: Vec<&str> = page.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["kept"]);
        assert!(
            store
                .expire(SystemTime::now(), 10)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn unfinished_reads_queued_and_leased_tasks_in_batches_and_leaves_out_ended_ones() {
        let Some(redis) = TestRedis::create("unfinished") else {
            return;
        };
        let store = open(&redis, "unfinished").await;
        let now = SystemTime::now();
        let n = 2 * UNFINISHED_BATCH + 7;
        for i in 0..n {
            store
                .create(sample_record(&format!("t{i}"), None, now))
                .await
                .unwrap();
        }
        let leased = store
            .claim("w", now + Duration::from_secs(60), 3, &[])
            .await
            .unwrap();
        assert_eq!(leased.len(), 3);
        let ended: Vec<String> = (100..105).map(|i| format!("t{i}")).collect();
        for id in &ended {
            let mut done = store.get(id).await.unwrap().unwrap();
            let version = done.version;
            done.status = TaskStatus::Completed;
            assert!(store.compare_and_set(done, version).await.unwrap());
        }
        let got = store.unfinished().await.unwrap();
        let ids: std::collections::BTreeSet<&str> = got.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(got.len(), n - ended.len(), "each unfinished task once");
        assert_eq!(ids.len(), got.len());
        assert!(ended.iter().all(|id| !ids.contains(id.as_str())));
        for claimed in &leased {
            let read = got
                .iter()
                .find(|r| r.id == claimed.id)
                .expect("a leased task");
            assert_eq!(read.lease.as_ref().map(|l| l.worker.as_str()), Some("w"));
        }
        assert!(got.iter().all(|r| !r.status.is_terminal()));
    }

    #[tokio::test]
    async fn a_task_that_moves_between_the_indexes_mid_scan_is_named_by_the_feed() {
        let Some(redis) = TestRedis::create("moves") else {
            return;
        };
        let store = open(&redis, "moves").await;
        let now = SystemTime::now();
        store.create(sample_record("b", None, now)).await.unwrap();
        let claimed = store
            .claim("w", now + Duration::from_secs(60), 1, &[])
            .await
            .unwrap();
        assert_eq!(claimed[0].id, "b");
        store.create(sample_record("a", None, now)).await.unwrap();
        // The scan's steps, with `b`'s lease given up between the two index scans: it moves
        // into the queue, which was read already, out of the leases, which are read next.
        let shared = &store.shared;
        let start = shared.feed_page(None, 0).await.unwrap().end;
        let queued = shared.members("queued").await.unwrap();
        let mut b = store.get("b").await.unwrap().unwrap();
        let version = b.version;
        b.lease = None;
        assert!(store.compare_and_set(b, version).await.unwrap());
        let leased = shared.members("leases").await.unwrap();
        assert_eq!((queued, leased), (vec!["a".to_owned()], vec![]));
        let written = shared.written_since(start).await.unwrap();
        assert_eq!(
            written,
            Some(vec!["b".to_owned()]),
            "the feed names the move"
        );
        let mut all: Vec<String> = store
            .unfinished()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        all.sort();
        assert_eq!(all, ["a", "b"]);
    }

    #[tokio::test]
    async fn a_feed_trimmed_past_the_scan_s_start_is_told_apart() {
        let Some(redis) = TestRedis::create("trimmed") else {
            return;
        };
        let store = RedisTaskStore::connect_with(
            &redis.url(),
            RedisOptions::default()
                .key_prefix(format!("{}:trimmed", redis.prefix()))
                .feed_len(10),
        )
        .await
        .unwrap();
        let start = store.shared.feed_page(None, 0).await.unwrap().end;
        let now = SystemTime::now();
        for i in 0..5 {
            store
                .create(sample_record(&format!("t{i}"), None, now))
                .await
                .unwrap();
        }
        let written = store.shared.written_since(start).await.unwrap();
        assert_eq!(written.map(|ids| ids.len()), Some(5));
        for i in 5..20 {
            store
                .create(sample_record(&format!("t{i}"), None, now))
                .await
                .unwrap();
        }
        assert_eq!(store.shared.written_since(start).await.unwrap(), None);
        assert_eq!(store.unfinished().await.unwrap().len(), 20);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_configuration_fails_at_connect_naming_the_problem() {
        let Some(redis) = TestRedis::create("config") else {
            return;
        };
        let quick = RedisOptions::default().timeout(Duration::from_secs(3));
        let fails = |url: String, options: RedisOptions| async move {
            RedisTaskStore::connect_with(&url, options)
                .await
                .expect_err(&format!("connecting to {url} succeeded"))
                .to_string()
        };
        let error = fails("redis://127.0.0.1:1/0".into(), quick.clone()).await;
        assert!(error.contains("unreachable"), "{error}");
        assert!(error.contains("Redis task store"), "{error}");
        let server = redis.url();
        let server = server.rsplit_once('/').map_or(server.as_str(), |(s, _)| s);
        let error = fails(format!("{server}/4000"), quick.clone()).await;
        assert!(error.contains("database number"), "{error}");
        let with_password = server.replacen("redis://", "redis://nobody:wrong@", 1);
        let error = fails(format!("{with_password}/0"), quick.clone()).await;
        assert!(error.contains("credentials"), "{error}");
        let error = fails("http://what".into(), quick.clone()).await;
        assert!(error.contains("invalid Redis URL"), "{error}");
        let error = fails(redis.url(), quick.clone().key_prefix("bad prefix")).await;
        assert!(error.contains("invalid key prefix"), "{error}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_fail_in_bounded_time_while_connections_are_killed_then_recover() {
        let Some(redis) = TestRedis::create_in("outage", 13) else {
            return;
        };
        let store = open(&redis, "outage").await;
        let other = open(&redis, "outage").await;
        store
            .create(sample_record("before", None, SystemTime::now()))
            .await
            .unwrap();
        assert!(
            redis.kill_clients() >= 4,
            "both stores' connections were killed"
        );
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
        // The other store's subscriber comes back and is woken by later writes.
        let cursor = other.changes(None, 10).await.unwrap().cursor;
        loop {
            let wake = other.changed();
            store
                .create(sample_record(
                    &random_suffix("later"),
                    None,
                    SystemTime::now(),
                ))
                .await
                .unwrap();
            if tokio::time::timeout(Duration::from_millis(500), wake)
                .await
                .is_ok()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the subscriber did not come back"
            );
        }
        let got = other.changes(Some(cursor), 100).await.unwrap();
        assert!(!got.ids.is_empty(), "{got:?}");
    }

    fn random_suffix(name: &str) -> String {
        format!("{name}-{}", crate::task::random_id().unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_durability_of_the_server_s_settings_is_read() {
        let Some(redis) = TestRedis::create("durability") else {
            return;
        };
        let store = open(&redis, "d").await;
        let client = ::redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let config: HashMap<String, String> = ::redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query_async(&mut conn)
            .await
            .unwrap();
        let want_durable = config.get("appendonly").is_some_and(|v| v == "yes");
        assert_eq!(
            !matches!(store.durability(), RedisDurability::NotDurable { .. }),
            want_durable,
            "{:?} with {config:?}",
            store.durability()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_store_leaves_nothing_running_and_its_keys_are_under_its_prefix() {
        let Some(redis) = TestRedis::create("prefix") else {
            return;
        };
        let store = RedisTaskStore::connect(&redis.store_url()).await.unwrap();
        assert!(store.redis().contains(redis.prefix()), "{}", store.redis());
        let mut done = sample_record("t", Some("o"), SystemTime::now());
        done.status = TaskStatus::Completed;
        done.ttl = Some(Duration::from_secs(3600));
        store.create(done).await.unwrap();
        assert!(redis.key_count() >= 5, "{}", redis.key_count());
        let weak = Arc::downgrade(&store.shared);
        drop(store);
        let deadline = Instant::now() + Duration::from_secs(10);
        while weak.strong_count() > 0 {
            assert!(
                Instant::now() < deadline,
                "the subscriber outlived the store"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
