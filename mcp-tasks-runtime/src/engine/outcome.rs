//! What becomes of a run: its outcome, stored by the task's settle policy, and kept
//! trying while the store is out of reach.

use super::{Engine, Run};
use crate::error::{CallOutcome, Error};
use crate::run::{RunEnd, outcome_of};
use crate::task::{SettlePolicy, ShortId, TaskRecord, TaskStatus};
use crate::tool::Tool;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

impl Engine {
    /// Stores the outcome of a run; returns what became of the task, for the logs.
    /// `started_from` is the record the run started from, if it kept it: the first write
    /// goes over that version without reading the task first.
    pub(super) async fn finish(
        &self,
        run: &Run,
        outcome: CallOutcome,
        mut started_from: Option<TaskRecord>,
    ) -> &'static str {
        let (tool, id) = (run.tool(), &*run.id);
        // A store that is out of reach for a while (a database restart, a network cut) must
        // not cost the outcome: try again, with backoff, for up to `OUTCOME_LEASES` leases,
        // for as long as the task is still this run's (the fence keeps a late attempt from
        // writing over a takeover, and this process does not take over its own runs). An
        // outcome the store refuses, or one still not stored when the tries run out, is
        // replaced by an error that says why, so the client reads the real cause.
        run.settling.store(true, Ordering::Release);
        let give_up = tokio::time::Instant::now() + self.config.lease * OUTCOME_LEASES;
        const FIRST_PAUSE: Duration = Duration::from_millis(50);
        let mut pause = FIRST_PAUSE;
        let mut outcome = outcome;
        let mut replaced = false;
        let result = loop {
            let result = self
                .store_update_from(id, started_from.take(), |rec| {
                    if !rec.is_held_by(&self.worker, run.epoch) {
                        return false;
                    }
                    settle(rec, &outcome, self.config.min_retention)
                })
                .await;
            match result {
                Err(e) if e.is_transient() && tokio::time::Instant::now() + pause < give_up => {
                    if pause == FIRST_PAUSE {
                        tracing::warn!(task = %ShortId(id), error = %e, "cannot store the task's outcome yet; trying again");
                    } else {
                        tracing::debug!(task = %id, error = %e, "cannot store the task's outcome yet; trying again");
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) if !replaced => {
                    tracing::error!(task = %id, error = %e, "cannot store the task's outcome; storing why instead");
                    replaced = true;
                    outcome = CallOutcome::Error(
                        Error::Internal(format!("the task's outcome could not be stored: {e}"))
                            .into(),
                    );
                }
                result => break result,
            }
        };
        match result {
            Ok(Some((rec, true))) => {
                tracing::debug!(task = %id, tool = %tool.name, status = %rec.status, "task finished");
                rec.status.as_str()
            }
            Ok(found) => {
                // What the write found instead (settled or taken over elsewhere) is handed
                // on here: the change feed's news of it was not read while the outcome was
                // being written.
                if let Some((rec, false)) = &found {
                    self.observe(rec);
                }
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

/// What a run that ended as `end` stores as its outcome.
pub(super) fn stored_outcome(tool: &Tool, end: RunEnd) -> CallOutcome {
    outcome_of(tool, end).unwrap_or_else(|| {
        CallOutcome::Error(
            Error::Internal("the tool stopped for input outside of a request".into()).into(),
        )
    })
}

/// How many leases a run keeps trying to store its outcome while the store is out of reach.
pub(super) const OUTCOME_LEASES: u32 = 10;

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
        rec.outcome = Some(Box::new(outcome.clone()));
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
