//! How a task's questions, progress and logs reach its client, and who waits on a task.

use super::{Engine, Run};
use crate::context::{BoxFuture, CallBackend, StepError};
use crate::error::ToolError;
use crate::jsonrpc::RequestId;
use crate::model::{InputRequest, LogLevel};
use crate::session::{Connection, Sink};
use crate::sync::LockExt;
use crate::task::TaskRecord;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;

/// How a task's questions, progress and log lines reach its client: the seam a wire
/// adapter implements. The engine calls it in the process that holds the client.
pub(crate) trait Delivery: Send + Sync + 'static {
    /// The task changed (as stored now). Called for every version this process sees, in
    /// order, at most once each; `status_changed` says whether the status moved.
    fn changed(&self, record: &TaskRecord, status_changed: bool);
    /// Progress of the tool, when it runs in this process.
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>);
    /// A log line of the tool, when it runs in this process.
    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value);
    /// `true` once the client it serves is gone, so another may take its place.
    fn is_closed(&self) -> bool;
    /// A request of `conn` named the task (it read it, or waits for its result): the client
    /// knows the task now.
    fn named_by(&self, conn: &Arc<Connection>);
    /// A request of `conn` that waits on the task offers its stream (`sink`) to carry the
    /// task's messages to the client, until [`Delivery::withdraw_stream`].
    fn offer_stream(&self, conn: &Arc<Connection>, sink: &Sink, request: &RequestId);
    /// The request `request` of `conn` no longer waits: its stream carries nothing more.
    fn withdraw_stream(&self, conn: &Arc<Connection>, request: &RequestId);
}

/// A receiver of a task's changes; the engine forgets the task when the last one is gone.
pub(crate) struct TaskWatch {
    pub(super) engine: Arc<Engine>,
    pub(super) id: String,
    pub(super) rx: Option<watch::Receiver<u64>>,
}

impl TaskWatch {
    /// Waits for the next change the engine learns of, or at most `fallback` (a safety
    /// net: a change feed that failed for a while must not leave a waiter asleep).
    pub(crate) async fn changed(&mut self, fallback: Duration) {
        let Some(rx) = &mut self.rx else { return };
        let fallback = fallback.max(Duration::from_millis(100));
        let _ = tokio::time::timeout(fallback, rx.changed()).await;
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        self.rx = None;
        self.engine.release(&self.id);
    }
}

impl std::fmt::Debug for TaskWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskWatch").field("id", &self.id).finish()
    }
}

impl Run {
    fn delivery(&self) -> Option<Arc<dyn Delivery>> {
        self.engine.delivery(&self.id)
    }
}

/// The backend of a tool running as a task is its run.
impl CallBackend for Run {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            self.engine.until_stored(self).await;
            self.engine.input(&self.id, self, request).await
        })
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if self.cancel.is_cancelled() {
            return;
        }
        if let Some(delivery) = self.delivery() {
            delivery.progress(progress, total, message);
        }
        let text = match (message, total) {
            (Some(m), _) => m.to_owned(),
            (None, Some(t)) => format!("{progress}/{t}"),
            (None, None) => format!("{progress}"),
        };
        // Before its task is stored, a progress message has nothing to be written into;
        // the first one after is.
        if !self.stored.load(Ordering::Acquire) {
            return;
        }
        // Plus one: never 0, which means no write yet.
        let now = self.engine.nanos_now() + 1;
        let interval = self.engine.config.progress_write_interval.as_nanos() as u64;
        let last = self.last_write.load(Ordering::Acquire);
        if last != 0 && now.saturating_sub(last) < interval {
            return;
        }
        if self
            .last_write
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another progress call wrote meanwhile.
            return;
        }
        let engine = Arc::clone(&self.engine);
        let id = Arc::clone(&self.id);
        let epoch = self.epoch;
        tokio::spawn(async move { engine.set_status_message(&id, epoch, text).await });
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if let Some(delivery) = self.delivery() {
            delivery.log(level, logger, data);
        }
    }

    fn step_output(&self, name: &str) -> Option<Value> {
        self.steps.locked().as_ref()?.get(name).cloned()
    }

    fn store_step(&self, name: &str, output: Value) -> BoxFuture<'_, Result<(), StepError>> {
        let name = name.to_owned();
        Box::pin(async move {
            self.engine.until_stored(self).await;
            self.engine.store_step(&self.id, self, name, output).await
        })
    }
}
