//! Creating a task and running its tool under a lease, to its settled end.

use super::delivery::TaskBackend;
use super::{Delivery, Engine, NewTask, Run, principal_of, shard_of};
use crate::call::{CatchUnwind, RunEnd, outcome_of};
use crate::context::{CallBackend, TaskContext};
use crate::error::{CallOutcome, Error, ToolError};
use crate::sync::LockExt;
use crate::task::{Lease, SettlePolicy, TaskRecord, TaskStatus};
use crate::task::{ShortId, random_id};
use crate::tool::{Tool, ToolFuture};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;

impl Engine {
    /// Stores a new record, with its delivery attached first so no change is missed, and
    /// counts it against `requestor`'s quotas.
    /// Returns the id as the engine's own indexes share it.
    pub(super) async fn create(
        &self,
        record: &TaskRecord,
        requestor: &str,
        delivery: Option<Arc<dyn Delivery>>,
    ) -> Result<Arc<str>, Error> {
        self.ensure_background();
        let ticket = self.quotas.admit(requestor)?;
        let id: Arc<str> = record.id.as_str().into();
        self.counted[shard_of(&record.id)]
            .locked()
            .insert(Arc::clone(&id), ticket.requestor_key());
        if let Some(delivery) = &delivery {
            *self.live_entry(&record.id).delivery.locked() = Some(Arc::clone(delivery));
        }
        if let Err(e) = self.store.create(record.clone()).await {
            self.counted[shard_of(&record.id)]
                .locked()
                .remove(record.id.as_str());
            if let Some(live) = self.live(&record.id) {
                *live.delivery.locked() = None;
            }
            self.release(&record.id);
            return Err(e.into());
        }
        ticket.commit();
        metrics::counter!("mcp_tasks_created_total", "tool" => record.tool.clone()).increment(1);
        tracing::info!(task = %ShortId(&record.id), tool = %record.tool, "task created");
        tracing::debug!(task = %record.id, tool = %record.tool, leased = record.lease.is_some(), "task created (whole id)");
        Ok(id)
    }

    /// Starts a task: stores it, then runs the tool here if a slot is free, or leaves it
    /// queued for whichever process frees a slot first. When this returns, `tasks/get`
    /// finds the task in every process sharing the store.
    pub(crate) async fn start(&self, new: NewTask) -> Result<TaskRecord, Error> {
        self.admit()?;
        let id = random_id()?;
        let run_now = self.config.execute && self.reserve(&new.tool.name);
        let record = self.new_record(id, &new, run_now.then(|| self.my_lease()));
        let id = match self
            .create(&record, &new.requestor, new.delivery.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                if run_now {
                    self.unreserve(&new.tool.name);
                }
                return Err(e);
            }
        };
        if run_now {
            self.launch(new.tool, record.clone(), None);
        } else {
            let queued = {
                let mut queued = self.queued_here.locked();
                queued.insert(id);
                queued.len()
            };
            metrics::gauge!("mcp_tasks_queued").set(queued as f64);
            tracing::debug!(task = %record.id, tool = %record.tool, "no free slot here; the task waits in the store");
            self.claim_wake.notify_one();
        }
        Ok(record)
    }

    /// Turns a call that has already started into a task (calls whose tool ran a
    /// synchronous prelude). The future keeps running here, under a lease of this process;
    /// `cancel` is the token the tool already holds; `attach` receives the task's backend
    /// before the future resumes.
    pub(crate) async fn adopt(
        &self,
        new: NewTask,
        future: ToolFuture,
        cancel: CancellationToken,
        attach: impl FnOnce(&str, Arc<dyn CallBackend>),
    ) -> Result<TaskRecord, Error> {
        self.admit()?;
        let id = random_id()?;
        {
            let mut slots = self.slots.locked();
            slots.running += 1;
            *slots.per_tool.entry(new.tool.name.to_string()).or_default() += 1;
        }
        let record = self.new_record(id, &new, Some(self.my_lease()));
        if let Err(e) = self
            .create(&record, &new.requestor, new.delivery.clone())
            .await
        {
            self.unreserve(&new.tool.name);
            return Err(e);
        }
        let run = self.begin_run(&record, cancel);
        attach(&record.id, self.backend(&record, &run));
        self.spawn_run(new.tool, record.clone(), run, future);
        Ok(record)
    }

    pub(super) fn begin_run(&self, record: &TaskRecord, cancel: CancellationToken) -> Arc<Run> {
        let run = Arc::new(Run {
            epoch: record.epoch,
            cancel,
            lost: AtomicBool::new(false),
        });
        *self.live_entry(&record.id).run.locked() = Some(Arc::clone(&run));
        run
    }

    pub(super) fn backend(&self, record: &TaskRecord, run: &Arc<Run>) -> Arc<dyn CallBackend> {
        Arc::new(TaskBackend {
            engine: self.arc(),
            id: record.id.clone(),
            run: Arc::clone(run),
            last_write: Mutex::new(None),
        })
    }

    /// Runs the tool of a task this process holds the lease on (a slot is reserved).
    pub(super) fn launch(&self, tool: Tool, record: TaskRecord, future: Option<ToolFuture>) {
        let run = self.begin_run(&record, CancellationToken::new());
        let future = future.unwrap_or_else(|| {
            let cx = TaskContext::new(
                Arc::clone(&tool.name),
                run.cancel.clone(),
                record.client_capabilities.clone(),
                principal_of(record.owner.as_deref()),
                self.backend(&record, &run),
                self.state.clone(),
            );
            cx.set_task_id(&record.id);
            tool.runner().call(cx, record.arguments.clone())
        });
        self.spawn_run(tool, record, run, future);
    }

    pub(super) fn spawn_run(
        &self,
        tool: Tool,
        record: TaskRecord,
        run: Arc<Run>,
        future: ToolFuture,
    ) {
        let engine = self.arc();
        let span = tracing::info_span!(
            "task",
            task = %ShortId(&record.id),
            tool = %tool.name,
            epoch = record.epoch,
            status = tracing::field::Empty,
        );
        let running = async move {
            let id = record.id.clone();
            let started = Instant::now();
            metrics::gauge!("mcp_tasks_running").increment(1.0);
            tracing::debug!(task = %id, "run started");
            let end = engine.execute(&tool, &id, &run, future).await;
            let status = match end {
                Some(end) => engine.finish(&tool, &id, &run, end).await,
                None => {
                    tracing::warn!(
                        "the task's lease was lost to another process; this run stopped without settling it"
                    );
                    "lease lost"
                }
            };
            let elapsed = started.elapsed();
            tracing::Span::current().record("status", status);
            tracing::info!(
                status,
                duration = ?Duration::from_millis(elapsed.as_millis() as u64),
                "task finished"
            );
            metrics::gauge!("mcp_tasks_running").decrement(1.0);
            metrics::histogram!("mcp_tasks_run_seconds", "tool" => tool.name.to_string())
                .record(elapsed.as_secs_f64());
            metrics::counter!(
                "mcp_tasks_finished_total",
                "tool" => tool.name.to_string(),
                "status" => status
            )
            .increment(1);
            if let Some(live) = engine.live(&id) {
                *live.run.locked() = None;
            }
            engine.release(&id);
            engine.unreserve(&tool.name);
        };
        tokio::spawn(tracing::Instrument::instrument(running, span));
    }

    /// Runs the tool until it ends. `None` when the lease was lost: the caller must write
    /// nothing.
    pub(super) async fn execute(
        &self,
        tool: &Tool,
        id: &str,
        run: &Run,
        future: ToolFuture,
    ) -> Option<RunEnd> {
        let cancel = &run.cancel;
        let mut future = CatchUnwind::new(future);
        let deadline = async {
            match tool.deadline {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        let mut renew = tokio::time::interval(self.config.renew_every());
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        renew.tick().await;
        let end = loop {
            tokio::select! {
                end = &mut future => break end,
                () = cancel.cancelled() => {
                    // Cooperative first: the tool sees its token fire and may finish cleanly.
                    let end = tokio::time::timeout(self.config.cancel_grace, &mut future).await;
                    if run.lost.load(Ordering::Acquire) {
                        return None;
                    }
                    match end {
                        Ok(end) => break end,
                        Err(_) => return Some(RunEnd::Cancelled),
                    }
                }
                () = &mut deadline => {
                    cancel.cancel();
                    return Some(RunEnd::Returned(Err(ToolError::protocol(
                        crate::jsonrpc::INTERNAL_ERROR,
                        format!(
                            "the task exceeded its execution deadline of {} s",
                            tool.deadline.unwrap_or_default().as_secs()
                        ),
                    ))));
                }
                _ = renew.tick() => self.renew(id, run).await,
            }
        };
        if run.lost.load(Ordering::Acquire) {
            return None;
        }
        Some(match end {
            Ok(result) => RunEnd::Returned(result),
            Err(message) => {
                tracing::warn!(tool = %tool.name, panic = %message, "the tool panicked");
                RunEnd::Panicked
            }
        })
    }

    /// Extends the lease of a running task; stops the run when the lease is gone.
    pub(super) async fn renew(&self, id: &str, run: &Run) {
        let until = SystemTime::now() + self.config.lease;
        let renewed = self
            .update(id, |rec| {
                if !rec.is_held_by(&self.worker, run.epoch) {
                    return false;
                }
                rec.lease = Some(Lease {
                    worker: self.worker.clone(),
                    until,
                });
                true
            })
            .await;
        match renewed {
            Ok(Some((rec, _))) if rec.is_held_by(&self.worker, run.epoch) => {}
            Ok(Some((rec, _))) if rec.status.is_terminal() => run.cancel.cancel(),
            Ok(_) => self.lose(id, run),
            Err(e) => {
                tracing::warn!(task = %ShortId(id), error = %e, "cannot renew the task's lease");
            }
        }
    }

    pub(super) fn lose(&self, id: &str, run: &Run) {
        if !run.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(task = %ShortId(id), "lost the task's lease; stopping its tool");
        }
        run.cancel.cancel();
    }

    /// Stores the outcome of a run; returns what became of the task, for the logs.
    pub(super) async fn finish(
        &self,
        tool: &Tool,
        id: &str,
        run: &Run,
        end: RunEnd,
    ) -> &'static str {
        let outcome = match outcome_of(tool, end) {
            Some(o) => o,
            None => CallOutcome::Error(
                Error::Internal("the tool stopped for input outside of a request".into()).into(),
            ),
        };
        // A store that is out of reach for a moment (a database restart) must not cost the
        // outcome: try again while the lease would still be this process's. The fence
        // keeps a late attempt from writing over a takeover.
        let give_up = Instant::now() + self.config.lease;
        let mut pause = Duration::from_millis(50);
        let result = loop {
            let result = self
                .update(id, |rec| {
                    if !rec.is_held_by(&self.worker, run.epoch) {
                        return false;
                    }
                    settle(rec, &outcome, self.config.min_retention)
                })
                .await;
            match result {
                Err(e) if Instant::now() + pause < give_up => {
                    tracing::warn!(task = %ShortId(id), error = %e, "cannot store the task's outcome yet; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                result => break result,
            }
        };
        match result {
            Ok(Some((rec, true))) => {
                tracing::debug!(task = %id, tool = %tool.name, status = %rec.status, "task finished");
                rec.status.as_str()
            }
            Ok(_) => {
                tracing::debug!(task = %id, "task already settled; its late outcome is dropped");
                "already settled"
            }
            Err(e) => {
                tracing::error!(task = %ShortId(id), error = %e, "cannot store the task's outcome");
                "store failed"
            }
        }
    }
}

/// Writes a finished run's outcome into the record, by the task's settle policy. Returns
/// `false` when the task cannot move there.
pub(super) fn settle(rec: &mut TaskRecord, outcome: &CallOutcome, retention: Duration) -> bool {
    let (status, message) = match outcome {
        CallOutcome::Result(r) if r.is_error && rec.settle == SettlePolicy::Fail => (
            TaskStatus::Failed,
            Some(format!(
                "Tool execution failed: {}",
                r.first_text().unwrap_or("the tool reported an error")
            )),
        ),
        CallOutcome::Result(_) => (TaskStatus::Completed, None),
        CallOutcome::Error(e) if e.message == Error::Cancelled.to_string() => {
            (TaskStatus::Cancelled, None)
        }
        CallOutcome::Error(e) => (
            TaskStatus::Failed,
            Some(format!("Tool execution failed: {}", e.message)),
        ),
    };
    if !rec.status.can_move_to(status) {
        return false;
    }
    rec.status = status;
    rec.status_message = message;
    if status != TaskStatus::Cancelled {
        rec.outcome = Some(outcome.clone());
    }
    rec.input_requests.clear();
    rec.lease = None;
    keep_readable(rec, retention);
    true
}

/// Makes sure a finished task stays readable for `retention`, even past its TTL.
pub(super) fn keep_readable(rec: &mut TaskRecord, retention: Duration) {
    if let Some(ttl) = rec.ttl {
        let alive = SystemTime::now()
            .duration_since(rec.created_at)
            .unwrap_or_default();
        if ttl < alive + retention {
            rec.ttl = Some(alive + retention);
        }
    }
}
