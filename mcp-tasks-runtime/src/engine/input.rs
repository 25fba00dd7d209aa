//! Questions a running tool asks its client, and its status line.

use super::{Engine, Run};
use crate::error::{Error, ToolError};
use crate::model::ANSWER_ERROR;
use crate::model::InputRequest;
use crate::model::input_key;
use crate::store::StoreError;
use crate::task::TaskStatus;
use serde_json::Value;
use std::time::Duration;

/// The first wait before a question's write or read is tried again while the store is out
/// of reach; it doubles up to [`UNREACHABLE_WAIT_MAX`].
const UNREACHABLE_WAIT: Duration = Duration::from_millis(100);

/// The longest wait between two tries of a question's write or read.
const UNREACHABLE_WAIT_MAX: Duration = Duration::from_secs(2);

/// Waits before a question's write or read is tried again, the store having been out of
/// reach ([`StoreError::Unavailable`]: nothing was changed); `wait` doubles each time.
/// A question is not a reason to fail its tool: the wait goes on for as long as the run
/// does, and a store out of reach for longer than the lease ends the run anyway.
async fn out_of_reach(run: &Run, wait: &mut Duration, reason: &str) -> Result<(), Error> {
    tracing::debug!(%reason, "task store out of reach for a question; trying again");
    tokio::select! {
        () = tokio::time::sleep(*wait) => {}
        () = run.cancel.cancelled() => return Err(Error::Cancelled),
    }
    *wait = (*wait * 2).min(UNREACHABLE_WAIT_MAX);
    Ok(())
}

/// The tool's error for a question that could not be asked or read.
fn question_error(error: Error) -> ToolError {
    match error {
        Error::Cancelled => ToolError::cancelled(),
        error => ToolError::new(error.to_string()),
    }
}

impl Engine {
    /// [`Engine::store_update_from`] for the run's questions, tried again while the store is
    /// out of reach (see [`out_of_reach`]).
    async fn update_reaching(
        &self,
        id: &str,
        run: &Run,
        mut change: impl FnMut(&mut crate::task::TaskRecord) -> bool,
    ) -> Result<(), Error> {
        let mut wait = UNREACHABLE_WAIT;
        loop {
            match self.store_update_from(id, None, &mut change).await {
                Err(StoreError::Unavailable(reason)) => {
                    out_of_reach(run, &mut wait, &reason).await?;
                }
                stored => return Ok(stored.map(drop)?),
            }
        }
    }

    pub(super) async fn park(
        &self,
        id: &str,
        run: &Run,
        request: &InputRequest,
    ) -> Result<Option<String>, Error> {
        let mut key = None;
        self.update_reaching(id, run, |rec| {
            key = None;
            if !rec.is_held_by(&self.worker, run.epoch) {
                return false;
            }
            rec.input_seq += 1;
            // A key the tool chose is used once; a second use gets the sequence number too,
            // so no key is ever reused within the task's life.
            let k = match &request.key {
                Some(key)
                    if !rec.input_requests.contains_key(key)
                        && !rec.input_responses.contains_key(key)
                        && rec.input_seq == 1 =>
                {
                    key.clone()
                }
                Some(key) => format!("{key}-{}", rec.input_seq),
                None => input_key(&request.method, rec.input_seq as usize),
            };
            let mut stored = request.clone();
            stored.key = None;
            rec.input_requests.insert(k.clone(), stored);
            if rec.status == TaskStatus::Working {
                rec.status = TaskStatus::InputRequired;
            }
            key = Some(k);
            true
        })
        .await?;
        Ok(key)
    }

    pub(super) async fn unpark(&self, id: &str, run: &Run, key: &str) -> Result<(), Error> {
        self.update_reaching(id, run, |rec| {
            if !rec.is_held_by(&self.worker, run.epoch) {
                return false;
            }
            let removed = rec.input_requests.remove(key).is_some();
            let consumed = rec.input_responses.remove(key).is_some();
            if rec.input_requests.is_empty() && rec.status == TaskStatus::InputRequired {
                rec.status = TaskStatus::Working;
                return true;
            }
            removed || consumed
        })
        .await
    }

    /// Parks the question in the task and waits until an answer is stored, from whichever
    /// process received it.
    pub(super) async fn input(
        &self,
        id: &str,
        run: &Run,
        request: InputRequest,
    ) -> Result<Value, ToolError> {
        let method = request.method.clone();
        let key = self
            .park(id, run, &request)
            .await
            .map_err(question_error)?
            .ok_or_else(ToolError::cancelled)?;
        let mut watch = self.watch(id);
        let mut wait = UNREACHABLE_WAIT;
        loop {
            let rec = match self.store.get(id).await {
                Err(StoreError::Unavailable(reason)) => {
                    out_of_reach(run, &mut wait, &reason)
                        .await
                        .map_err(question_error)?;
                    continue;
                }
                read => read
                    .map_err(|e| ToolError::new(e.to_string()))?
                    .ok_or_else(ToolError::cancelled)?,
            };
            wait = UNREACHABLE_WAIT;
            if !rec.is_held_by(&self.worker, run.epoch) {
                return Err(ToolError::cancelled());
            }
            if let Some(answer) = rec.input_responses.get(&key).cloned() {
                self.unpark(id, run, &key).await.map_err(question_error)?;
                if let Some(message) = answer.get(ANSWER_ERROR).and_then(Value::as_str) {
                    return Err(ToolError::new(format!(
                        "the client answered {method} with an error: {message}"
                    )));
                }
                return Ok(answer);
            }
            tokio::select! {
                () = watch.changed(rec.poll_interval) => {}
                () = run.cancel.cancelled() => return Err(ToolError::cancelled()),
            }
        }
    }

    pub(super) async fn set_status_message(&self, id: &str, epoch: u64, message: String) {
        let _ = self
            .update(id, |rec| {
                if !rec.is_held_by(&self.worker, epoch)
                    || rec.status_message.as_deref() == Some(&message)
                {
                    return false;
                }
                rec.status_message = Some(message.clone());
                true
            })
            .await;
    }
}
