//! The pool of request connections: running statements within the store's timeout, and
//! naming what went wrong.

use super::listener::{ChangeLog, Notice};
use super::options::PostgresOptions;
use super::queries::Sql;
use crate::store::StoreError;
use crate::store::remote::{Closing, Late, Remote};
use crate::sync::LockExt;
use deadpool_postgres::{Pool, PoolError};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::{Notify, mpsc, watch};
use tokio_postgres::error::SqlState;

/// What the store's background tasks share with it.
pub(super) struct Shared {
    pub(super) pool: Pool,
    /// The connection settings, for the listener.
    pub(super) config: tokio_postgres::Config,
    /// The store as messages name it: `user@host:port/db (schema s)`, never the password.
    pub(super) remote: Remote,
    pub(super) options: PostgresOptions,
    pub(super) sql: Sql,
    /// The channel the change notifications of the schema go to.
    pub(super) data_channel: String,
    /// Notifications waiting to be sent, for the notifier task.
    pub(super) notices: mpsc::UnboundedSender<Notice>,
    /// The channel this store's syncs come back on.
    pub(super) sync_channel: String,
    /// The last sync token sent.
    pub(super) sync_sent: AtomicU64,
    /// The last sync token the listener heard.
    pub(super) sync_heard: watch::Sender<u64>,
    /// Whether the listener is connected and caught up.
    pub(super) listening: AtomicBool,
    /// Tells the listener to drop its connection and connect again.
    pub(super) reconnect: Notify,
    /// Woken when the listener hears a change.
    pub(super) changed: Notify,
    pub(super) log: Mutex<ChangeLog>,
    /// Set when the store is dropped, so the background tasks end.
    pub(super) closing: Closing,
}

impl Shared {
    pub(super) fn close(&self) {
        self.closing.close();
        self.pool.close();
    }

    pub(super) fn log(&self) -> MutexGuard<'_, ChangeLog> {
        self.log.locked()
    }

    /// The error of a pool that gave no connection: nothing was sent.
    pub(super) fn pool_error(&self, what: &str, error: PoolError) -> StoreError {
        let problem = format!("{what}: {}", pool_problem(&error));
        match error {
            PoolError::Closed => self.remote.error_from(problem, error),
            _ => self.remote.unavailable(problem),
        }
    }

    /// Runs `op` on a pooled connection, within the timeout. A statement whose answer is
    /// lost (the connection closed, or no answer in time) may have been applied:
    /// [`StoreError::Ambiguous`]; one that never got a connection was not:
    /// [`StoreError::Unavailable`].
    pub(super) async fn run<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(deadpool_postgres::Object) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let sent = AtomicBool::new(false);
        let attempt = async {
            let client = self
                .pool
                .get()
                .await
                .map_err(|e| self.pool_error(what, e))?;
            sent.store(true, Ordering::Relaxed);
            op(client).await.map_err(|e| {
                let problem = format!("{what}: {}", problem(&e));
                if connection_ended(&e) {
                    self.remote.ambiguous(problem)
                } else {
                    self.remote.error_from(problem, e)
                }
            })
        };
        let late = || {
            if sent.load(Ordering::Relaxed) {
                Late::Ambiguous
            } else {
                Late::Unavailable
            }
        };
        self.remote
            .bounded(what, self.options.timeout, attempt, late)
            .await
    }

    /// Like [`run`](Self::run), for reads: a read that found its connection closed (the
    /// server restarted since it was pooled) is tried once more on a fresh one.
    pub(super) async fn read<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
    where
        F: Fn(deadpool_postgres::Object) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let attempt = async {
            let mut tries = 0;
            loop {
                tries += 1;
                let client = self
                    .pool
                    .get()
                    .await
                    .map_err(|e| self.pool_error(what, e))?;
                match op(client).await {
                    Ok(value) => return Ok(value),
                    Err(e) if e.is_closed() && tries < 2 => continue,
                    Err(e) if !connection_ended(&e) => {
                        let problem = format!("{what}: {}", problem(&e));
                        return Err(self.remote.error_from(problem, e));
                    }
                    Err(e) => {
                        let problem = format!("{what}: {}", problem(&e));
                        return Err(self.remote.unavailable(problem));
                    }
                }
            }
        };
        self.remote
            .bounded(what, self.options.timeout, attempt, || Late::Unavailable)
            .await
    }
}

/// Whether the error ended the connection rather than the statement (the server closed
/// it, or was shut down or restarted under it): a statement sent on it may have been
/// committed before the answer was lost.
pub(super) fn connection_ended(error: &tokio_postgres::Error) -> bool {
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
pub(super) fn problem(error: &tokio_postgres::Error) -> String {
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

pub(super) fn pool_problem(error: &PoolError) -> String {
    match error {
        PoolError::Backend(e) => problem(e),
        PoolError::Timeout(_) => "no connection to PostgreSQL could be had in time \
            (is the server up and reachable, or are all connections busy?)"
            .into(),
        PoolError::Closed => "the store is closed".into(),
        other => other.to_string(),
    }
}
