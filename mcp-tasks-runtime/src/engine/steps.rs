//! Storing the outputs of a tool's durable steps ([`Steps`](crate::Steps)), fenced by the
//! run's lease.

use super::{Engine, Run};
use crate::context::StepError;
use crate::sync::LockExt;
use crate::task::ShortId;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

impl Engine {
    /// Stores the output of the durable step `name` in the task's record, with a
    /// compare-and-set fenced by the run's lease epoch, and keeps it for the rest of the run.
    ///
    /// A lost compare-and-set (the task changed meanwhile: a progress message, an answer)
    /// reads the task again and tries again, up to [`STEP_CONFLICTS`] times. A store out of
    /// reach is tried again with backoff for as long as a run tries to store its outcome
    /// ([`OUTCOME_LEASES`](super::outcome::OUTCOME_LEASES) leases): the step's side effect has
    /// happened, and failing the run for a short outage would lose what it did. A write whose
    /// answer was lost and which landed after all is found in the record and not written
    /// again. When the task is no longer this run's (another process took it over), the run
    /// loses its lease, as a failed renewal does: it stops and writes nothing more, its
    /// outcome included. When the task has ended (cancelled), the run is cancelled.
    pub(super) async fn store_step(
        &self,
        id: &str,
        run: &Run,
        name: String,
        output: Value,
    ) -> Result<(), StepError> {
        const FIRST_PAUSE: Duration = Duration::from_millis(20);
        let give_up =
            tokio::time::Instant::now() + self.config.lease * super::outcome::OUTCOME_LEASES;
        let mut pause = FIRST_PAUSE;
        let mut conflicts = 0;
        loop {
            if run.lost.load(Ordering::Acquire) {
                return Err(StepError::LeaseLost(name));
            }
            let failure = match self.store.get(id).await {
                Ok(Some(mut rec)) => {
                    if !rec.is_held_by(&self.worker, run.epoch) {
                        if rec.status.is_terminal() && rec.epoch == run.epoch {
                            run.cancel.cancel();
                            return Err(StepError::TaskEnded(name));
                        }
                        self.lose(id, run);
                        return Err(StepError::LeaseLost(name));
                    }
                    if rec.steps.get(&name) == Some(&output) {
                        // An earlier try whose answer was lost landed after all.
                        run.steps
                            .locked()
                            .get_or_insert_default()
                            .insert(name.clone(), output);
                        tracing::debug!(task = %ShortId(id), step = %name, "step output found stored");
                        return Ok(());
                    }
                    let version = rec.version;
                    rec.steps.insert(name.clone(), output.clone());
                    rec.updated_at = SystemTime::now().max(rec.updated_at);
                    match self.store.compare_and_set(rec.clone(), version).await {
                        Ok(true) => {
                            rec.version = version + 1;
                            run.steps
                                .locked()
                                .get_or_insert_default()
                                .insert(name.clone(), output);
                            tracing::debug!(task = %ShortId(id), step = %name, "step output stored");
                            self.observe(&rec);
                            return Ok(());
                        }
                        Ok(false) => None,
                        Err(e) => Some(e),
                    }
                }
                Ok(None) => {
                    self.lose(id, run);
                    return Err(StepError::LeaseLost(name));
                }
                Err(e) => Some(e),
            };
            match failure {
                // Another write landed first: read the task again at once.
                None if conflicts < STEP_CONFLICTS => {
                    conflicts += 1;
                    tokio::task::yield_now().await;
                }
                None => {
                    return Err(StepError::Store {
                        name,
                        message: format!("the task changed under {STEP_CONFLICTS} writes in a row"),
                    });
                }
                Some(e) if e.is_transient() && tokio::time::Instant::now() + pause < give_up => {
                    if pause == FIRST_PAUSE {
                        tracing::warn!(task = %ShortId(id), step = %name, error = %e, "cannot store the step's output yet; trying again");
                    } else {
                        tracing::debug!(task = %ShortId(id), step = %name, error = %e, "cannot store the step's output yet; trying again");
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Some(e) => {
                    tracing::warn!(task = %ShortId(id), step = %name, error = %e, "cannot store the step's output");
                    return Err(StepError::Store {
                        name,
                        message: e.to_string(),
                    });
                }
            }
        }
    }
}

/// How many lost compare-and-sets in a row a step's write takes before it fails.
const STEP_CONFLICTS: u32 = 100;
