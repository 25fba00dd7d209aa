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
/// worker.run().await?; // until SIGTERM or Ctrl-C, then a graceful stop
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
    /// `server`'s engine settings and [`shutdown_grace`](crate::ServerBuilder::shutdown_grace).
    pub fn new(server: Server) -> Self {
        let grace = server.shutdown_grace();
        Self {
            server,
            shutdown: None,
            grace,
        }
    }

    /// Stops when `token` fires instead of on `SIGTERM` or `SIGINT` (the kill switch still
    /// follows `SIGUSR1` and `SIGUSR2`).
    pub fn shutdown_signal(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// How long running tools may go on at shutdown before they are handed off (default:
    /// the server's [`shutdown_grace`](crate::ServerBuilder::shutdown_grace), 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The public face of the tasks in the worker's store (see [`Tasks`](crate::Tasks)).
    pub fn tasks(&self) -> crate::Tasks {
        self.server.tasks()
    }

    /// The kill switch of this worker: while creation is off for a tool, the worker starts
    /// no queued task of it (the tasks wait in the store). See [`creation`](crate::creation).
    pub fn creation(&self) -> crate::creation::TaskCreation {
        self.server.creation()
    }

    /// The worker's name in the leases it holds.
    pub fn id(&self) -> &str {
        self.server.inner.engine.worker()
    }

    /// Claims and runs tasks until `SIGTERM` or `SIGINT` (or the
    /// [`shutdown_signal`](Self::shutdown_signal)); then stops gracefully: claims nothing
    /// more, lets running tools finish for the grace period and hands off the rest at once
    /// (see [`Server::shutdown`]). A second signal cuts the grace short. `SIGUSR1` and
    /// `SIGUSR2` pause and resume starting tasks (see [`creation`](crate::creation)).
    pub async fn run(self) -> Result<Recovery, crate::Error> {
        let engine = &self.server.inner.engine;
        let mut signals = self.server.stop_signals();
        if let Some(token) = &self.shutdown {
            signals = crate::lifecycle::StopSignals {
                stop: token.clone(),
                force: CancellationToken::new(),
            };
        }
        let report = self.server.recover().await?;
        tracing::info!(worker = %engine.worker(), "worker started");
        crate::lifecycle::serve_then_shut_down(
            &self.server,
            self.grace,
            std::future::pending::<()>(),
            &signals,
        )
        .await;
        tracing::info!(worker = %engine.worker(), "worker stopped");
        Ok(report)
    }
}
