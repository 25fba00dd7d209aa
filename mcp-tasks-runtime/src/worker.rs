//! A process that runs tools of tasks from a shared store, with no transport.

use crate::engine::Recovery;
use crate::server::{BuildError, Server};
use crate::store::ClaimStore;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs the tools of queued tasks from a store that servers share, and serves no client.
///
/// Start as many as the work needs, next to servers built on the same store (SQLite on one
/// host, PostgreSQL or Redis across hosts): servers accept tasks, workers claim and run
/// them under leases, and whichever process a client asks answers it. A worker registers
/// the same tools as the servers (`#[task_tool]` functions come with the binary).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use mcp_tasks_runtime::{Worker, store::SqliteTaskStore};
///
/// let worker = Worker::from_registry(SqliteTaskStore::open("data/tasks.db")?)?;
/// worker.run().await?; // until Ctrl-C or SIGTERM
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Worker {
    server: Server,
    shutdown: Option<CancellationToken>,
    grace: Duration,
}

impl Worker {
    /// A worker for every `#[task_tool]` function of this binary, on `store`.
    pub fn from_registry<S: ClaimStore>(store: S) -> Result<Self, BuildError> {
        Ok(Self::new(
            Server::builder().registry_tools().store(store).build()?,
        ))
    }

    /// A worker that runs the tools of `server` (built with the store it shares), with
    /// `server`'s engine settings.
    pub fn new(server: Server) -> Self {
        Self {
            server,
            shutdown: None,
            grace: Duration::from_secs(30),
        }
    }

    /// Stops when `token` fires instead of on Ctrl-C or SIGTERM.
    pub fn shutdown_signal(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// How long running tools may go on at shutdown before their leases are handed back
    /// (default 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The public face of the tasks in the worker's store (see [`Tasks`](crate::Tasks)).
    pub fn tasks(&self) -> crate::Tasks {
        self.server.tasks()
    }

    /// The worker's name in the leases it holds.
    pub fn id(&self) -> &str {
        self.server.inner.engine.worker()
    }

    /// Claims and runs tasks until the shutdown signal; then lets running tools finish for
    /// the grace period and hands back the leases of the rest, so another process settles
    /// them by their restart policies at once.
    pub async fn run(self) -> Result<Recovery, crate::Error> {
        let engine = &self.server.inner.engine;
        let report = self.server.recover().await?;
        tracing::info!(worker = %engine.worker(), "worker started");
        match &self.shutdown {
            Some(token) => token.cancelled().await,
            None => shutdown_signal().await,
        }
        tracing::info!(worker = %engine.worker(), "worker stopping");
        engine.shutdown(self.grace).await;
        Ok(report)
    }
}

/// Ctrl-C, or SIGTERM on Unix.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
