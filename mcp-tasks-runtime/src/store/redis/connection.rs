//! The request connection: running commands and scripts within the store's timeout,
//! failing at once while Redis is out of reach, and naming what went wrong.

use super::options::{RedisDurability, RedisOptions};
use super::scripts::Scripts;
use crate::store::StoreError;
use crate::store::remote::{Closing, Late, Remote};
use crate::sync::LockExt;
use ::redis::aio::ConnectionManager;
use ::redis::{ErrorKind, RedisError};
use std::future::Future;
use std::sync::atomic::AtomicU64;
use tokio::sync::Notify;

/// What the store's subscriber task shares with it.
pub(super) struct Shared {
    pub(super) conn: ConnectionManager,
    pub(super) client: ::redis::Client,
    /// The store as messages name it: `redis://host:port/db (prefix p)`, never the
    /// password.
    pub(super) remote: Remote,
    /// The key prefix with its trailing `:`.
    pub(super) prefix: String,
    pub(super) options: RedisOptions,
    pub(super) durability: RedisDurability,
    pub(super) scripts: Scripts,
    /// Woken when a signal arrives or the subscriber reconnected.
    pub(super) changed: Notify,
    /// Why Redis is out of reach, while it is: set when the subscriber loses its connection,
    /// cleared once it is back and the request connection answers. Requests fail at once
    /// with [`StoreError::Unavailable`] meanwhile, instead of waiting for a reconnect.
    pub(super) down: std::sync::Mutex<Option<String>>,
    /// Asks the subscriber to check the connection now (a request got no answer).
    pub(super) probe: Notify,
    /// How many times the subscriber has subscribed.
    pub(super) subscriptions: AtomicU64,
    /// Set when the store is dropped, so the subscriber ends.
    pub(super) closing: Closing,
}

impl Shared {
    /// Fails at once while Redis is known to be out of reach.
    pub(super) fn check_up(&self, what: &str) -> Result<(), StoreError> {
        match &*self.down.locked() {
            None => Ok(()),
            Some(problem) => Err(self.remote.unavailable(format!(
                "{what}: Redis is out of reach ({problem}); reconnecting in the background"
            ))),
        }
    }

    /// Records that Redis is out of reach; logged once per outage.
    pub(super) fn mark_down(&self, problem: &str) {
        let mut down = self.down.locked();
        if down.is_none() {
            tracing::warn!(store = %self.remote.label(), %problem, "the Redis task store lost its connection; requests fail at once until it is back");
        }
        *down = Some(problem.to_owned());
    }

    /// Records that Redis answers again.
    pub(super) fn mark_up(&self) {
        if self.down.locked().take().is_some() {
            tracing::info!(store = %self.remote.label(), "the Redis task store is reachable again");
        }
    }

    /// A request got no answer or lost its connection: the subscriber checks now whether
    /// Redis is still there, rather than at its next ping.
    pub(super) fn suspect(&self, error: Option<&RedisError>) {
        if error.is_none_or(lost) {
            self.probe.notify_one();
        }
    }

    /// Runs one script that writes, within the timeout. When the answer is lost, the
    /// write may have been applied: [`StoreError::Ambiguous`].
    pub(super) async fn run<T: ::redis::FromRedisValue>(
        &self,
        what: &str,
        invocation: ::redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.check_up(what)?;
        let mut conn = self.conn.clone();
        let attempt = async {
            invocation.invoke_async(&mut conn).await.map_err(|e| {
                let problem = format!("{what}: {}", problem(&e));
                // Refused: the manager could not connect, so nothing was sent.
                if e.is_connection_refusal() {
                    self.suspect(Some(&e));
                    self.remote.unavailable(problem)
                } else if lost(&e) {
                    self.suspect(Some(&e));
                    self.remote.ambiguous(problem)
                } else {
                    self.remote.error_from(problem, e)
                }
            })
        };
        let late = || {
            self.suspect(None);
            Late::Ambiguous
        };
        self.remote
            .bounded(what, self.options.timeout, attempt, late)
            .await
    }

    /// Like [`run`](Self::run), for scripts that only read (or only drop stale index
    /// entries): one that found its connection lost is tried once more on the new one.
    pub(super) async fn read<T: ::redis::FromRedisValue>(
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
    pub(super) async fn read_with<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, StoreError>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = ::redis::RedisResult<T>>,
    {
        self.check_up(what)?;
        let attempt = async {
            let mut tries = 0;
            loop {
                tries += 1;
                match op(self.conn.clone()).await {
                    Ok(value) => return Ok(value),
                    Err(e) if lost(&e) && tries < 2 => continue,
                    Err(e) if lost(&e) || e.is_connection_refusal() => {
                        self.suspect(Some(&e));
                        let problem = format!("{what}: {}", problem(&e));
                        return Err(self.remote.unavailable(problem));
                    }
                    Err(e) => {
                        let problem = format!("{what}: {}", problem(&e));
                        return Err(self.remote.error_from(problem, e));
                    }
                }
            }
        };
        let late = || {
            self.suspect(None);
            Late::Unavailable
        };
        self.remote
            .bounded(what, self.options.timeout, attempt, late)
            .await
    }

    pub(super) fn task_key(&self, id: &str) -> String {
        format!("{}task:{id}", self.prefix)
    }

    pub(super) fn grace_ms(&self) -> i64 {
        i64::try_from(self.options.expiry_grace.as_millis()).unwrap_or(i64::MAX / 4)
    }
}

/// Whether the error is the connection's, not the request's.
pub(super) fn lost(error: &RedisError) -> bool {
    error.is_connection_dropped() || error.is_io_error()
}

/// What went wrong, in words that name the problem.
pub(super) fn problem(error: &RedisError) -> String {
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
