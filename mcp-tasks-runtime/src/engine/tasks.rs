//! What clients do with tasks: read, list, cancel, answer, watch.

use super::outcome::keep_readable;
use super::{Delivery, Engine, TaskWatch, shard_of};
use crate::error::Error;
use crate::model::JsonObject;
use crate::quota::Stage;
use crate::store::{StoreError, TaskCounts, TaskFilter, TaskPage};
use crate::sync::LockExt;
use crate::task::{CancelRequest, StatusChange, TaskRecord, TaskStatus};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

impl Engine {
    /// Reads, changes and writes a task until the compare-and-set wins. `change` returns
    /// whether it changed anything; it may run more than once. Returns the record as stored
    /// and whether this call wrote it; `None` when the task does not exist.
    pub(crate) async fn update(
        &self,
        id: &str,
        change: impl FnMut(&mut TaskRecord) -> bool,
    ) -> Result<Option<(TaskRecord, bool)>, Error> {
        self.update_from(id, None, change).await
    }

    /// [`Engine::update`] starting from a record the caller has just read, so the first
    /// attempt costs no second read; a lost compare-and-set reads the store again.
    pub(super) async fn update_from(
        &self,
        id: &str,
        read: Option<TaskRecord>,
        change: impl FnMut(&mut TaskRecord) -> bool,
    ) -> Result<Option<(TaskRecord, bool)>, Error> {
        Ok(self.store_update_from(id, read, change).await?)
    }

    /// [`Engine::update_from`] with the store's own error, for callers that tell a store
    /// out of reach from one that refused the write.
    pub(super) async fn store_update_from(
        &self,
        id: &str,
        mut read: Option<TaskRecord>,
        mut change: impl FnMut(&mut TaskRecord) -> bool,
    ) -> Result<Option<(TaskRecord, bool)>, StoreError> {
        loop {
            let current = match read.take() {
                Some(rec) => Some(rec),
                None => self.store.get(id).await?,
            };
            let Some(mut rec) = current else {
                return Ok(None);
            };
            let version = rec.version;
            let before = rec.status;
            let held = rec.lease.is_some();
            if !change(&mut rec) {
                return Ok(Some((rec, false)));
            }
            self.stamp(&mut rec, before, held);
            if self.store.compare_and_set(rec.clone(), version).await? {
                rec.version = version + 1;
                if before != rec.status {
                    tracing::debug!(task = %rec.id, tool = %rec.tool, from = %before, to = %rec.status, "task status changed");
                }
                self.observe(&rec);
                return Ok(Some((rec, true)));
            }
        }
    }

    /// Dates a change to `rec`, which had status `before` and a lease when `held`, and
    /// notes it in the history that goes with the same write: a new status, or a task its
    /// runner gave back to the queue to run again.
    pub(super) fn stamp(&self, rec: &mut TaskRecord, before: TaskStatus, held: bool) {
        rec.updated_at = SystemTime::now().max(rec.updated_at);
        let requeued = held && rec.lease.is_none() && !rec.status.is_terminal();
        if before != rec.status || requeued {
            let mut change = StatusChange::new(rec.status, rec.updated_at);
            change.message = rec.status_message.clone();
            change.epoch = rec.epoch;
            change.process = Some(self.worker.clone());
            rec.record_change(change);
        }
    }

    /// Hands a version of a task on to whatever waits on it here.
    pub(super) fn observe(&self, rec: &TaskRecord) {
        if rec.status.is_terminal() {
            self.uncount(rec);
            if self.store.is_shared() {
                self.ended_here.locked().note(&rec.id);
            }
        }
        let Some(live) = self.live(&rec.id) else {
            return;
        };
        // What was handed on, the run and the delivery, read under the entry's one lock.
        let (status_changed, run, delivery) = {
            let mut now = live.now.locked();
            let seen = &mut now.seen;
            if seen.1.is_some() && rec.version <= seen.0 {
                return;
            }
            let changed = seen.1 != Some(rec.status);
            *seen = (rec.version, Some(rec.status));
            (changed, now.run.clone(), now.delivery.clone())
        };
        if let Some(changed) = live.changed.get() {
            changed.send_replace(rec.version);
        }
        if let Some(run) = run {
            if rec.status.is_terminal() {
                run.cancel.cancel();
            } else if !rec.is_held_by(&self.worker, run.epoch) {
                self.lose(&rec.id, &run);
            }
        }
        if let Some(delivery) = delivery {
            delivery.changed(rec, status_changed);
            if rec.status.is_terminal() {
                live.now.locked().delivery = None;
            }
        }
        if rec.status.is_terminal() {
            drop(live);
            self.release(&rec.id);
        }
    }

    /// A task this process created ended: it counts as retained until it expires.
    pub(super) fn uncount(&self, rec: &TaskRecord) {
        let Some((id, requestor)) = self.counted[shard_of(&rec.id)]
            .locked()
            .remove_entry(rec.id.as_str())
        else {
            return;
        };
        self.quotas.finished(&requestor);
        // A task kept until deleted stays counted as retained.
        if let Some(at) = rec.expires_at() {
            self.retained.locked().insert((at, id, requestor));
        }
    }

    /// Stops counting finished tasks whose time to be kept is over.
    pub(super) fn uncount_expired(&self) {
        let now = SystemTime::now();
        let mut retained = self.retained.locked();
        while retained.first().is_some_and(|first| first.0 <= now) {
            if let Some((_, _, requestor)) = retained.pop_first() {
                self.quotas.gone(&requestor, Stage::Retained);
            }
        }
    }

    /// Whether `rec` has not expired and `owner` may see it. A task owned by a principal is
    /// visible only to that principal; a task owned by a session is a bearer handle unless
    /// sessions are strictly bound; a task without an owner is a bearer handle.
    /// The record of a synchronous call (kept for its idempotency key) is no task.
    pub(super) fn may_see(&self, rec: &TaskRecord, owner: Option<&str>) -> bool {
        if rec.synchronous {
            return false;
        }
        let bearer = rec.owner.is_none()
            || (!self.config.strict_session_binding
                && rec
                    .owner
                    .as_deref()
                    .is_some_and(|o| o.starts_with("session:")));
        if !bearer && rec.owner.as_deref() != owner {
            return false;
        }
        !is_expired(rec)
    }

    /// The task, if it exists, has not expired and `access` may see it.
    pub(crate) async fn get_as(
        &self,
        id: &str,
        access: Access<'_>,
    ) -> Result<Option<TaskRecord>, Error> {
        Ok(self
            .get_shared_as(id, access)
            .await?
            .map(Arc::unwrap_or_clone))
    }

    /// [`Engine::get_as`], shared: the store's record without a copy where the store keeps
    /// it behind an `Arc` (for answers that only read a few of its fields).
    pub(crate) async fn get_shared_as(
        &self,
        id: &str,
        access: Access<'_>,
    ) -> Result<Option<Arc<TaskRecord>>, Error> {
        // A process that only reads must still hear of other processes' writes.
        self.ensure_background();
        let Some(rec) = self.store.get_shared(id).await? else {
            return Ok(None);
        };
        let seen = match access {
            Access::Owner(owner) => self.may_see(&rec, owner),
            Access::Admin(_) => !is_expired(&rec),
        };
        Ok(seen.then_some(rec))
    }

    /// Cancels a task by whoever `access` names (kept in the task as who cancelled it).
    /// Returns the task as it is afterwards and whether this call cancelled it (`false`: it
    /// was already terminal). `None` for an unknown task. The process that runs the tool
    /// learns of it from the store and stops the tool.
    pub(crate) async fn cancel_as(
        &self,
        id: &str,
        access: Access<'_>,
    ) -> Result<Option<(TaskRecord, bool)>, Error> {
        let Some(visible) = self.get_as(id, access).await? else {
            return Ok(None);
        };
        let by = access.who();
        let retention = self.config.min_retention;
        let result = self
            .update_from(id, Some(visible), |rec| {
                if rec.status.is_terminal() {
                    return false;
                }
                rec.status = TaskStatus::Cancelled;
                rec.status_message = Some("The task was cancelled by request.".into());
                rec.cancel_requested = Some(Box::new(CancelRequest {
                    at: SystemTime::now(),
                    by: by.clone(),
                }));
                rec.input_requests.clear();
                rec.lease = None;
                keep_readable(rec, retention);
                true
            })
            .await?;
        if let Some((rec, true)) = &result {
            tracing::debug!(task = %id, tool = %rec.tool, "task cancelled");
        }
        Ok(result)
    }

    /// Hands the client's answers to a task waiting for input, on behalf of whoever `access`
    /// names. Answers for keys that are not outstanding are ignored. `None` for an unknown
    /// task. An answer that does not fit its question (a form's content against its
    /// `requestedSchema`) is [`Error::InvalidParams`] naming the key and the field, and
    /// nothing is stored: every question stays open.
    pub(crate) async fn answer_as(
        &self,
        id: &str,
        access: Access<'_>,
        responses: &JsonObject,
    ) -> Result<Option<TaskRecord>, Error> {
        let Some(visible) = self.get_as(id, access).await? else {
            return Ok(None);
        };
        if let Access::Admin(admin) = access {
            tracing::info!(task = %crate::task::ShortId(id), %admin, keys = responses.len(), "an operator answered a task's question");
        }
        let mut invalid = None;
        let result = self
            .update_from(id, Some(visible), |rec| {
                invalid = None;
                if rec.status.is_terminal() {
                    return false;
                }
                for (key, value) in responses {
                    if let Some(question) = rec.input_requests.get(key)
                        && let Err(problem) = crate::schema::check_answer(question, value)
                    {
                        invalid = Some(format!("`inputResponses[{key:?}]`: {problem}"));
                        return false;
                    }
                }
                let mut changed = false;
                for (key, value) in responses {
                    if rec.input_requests.remove(key).is_some() {
                        rec.input_responses.insert(key.clone(), value.clone());
                        changed = true;
                    }
                }
                if changed
                    && rec.input_requests.is_empty()
                    && rec.status == TaskStatus::InputRequired
                {
                    rec.status = TaskStatus::Working;
                }
                changed
            })
            .await?;
        if let Some(problem) = invalid {
            return Err(Error::InvalidParams(problem));
        }
        Ok(result.map(|(rec, _)| rec))
    }

    /// Wakes on every change of the task this process learns of, from its own writes and
    /// (for shared stores) from other processes'.
    pub(crate) fn watch(&self, id: &str) -> TaskWatch {
        self.ensure_background();
        let live = self.live_entry(id);
        TaskWatch {
            engine: self.arc(),
            id: id.to_owned(),
            rx: Some(
                live.changed
                    .get_or_init(|| watch::Sender::new(0))
                    .subscribe(),
            ),
        }
    }

    /// The delivery attached to a task in this process.
    pub(crate) fn delivery(&self, id: &str) -> Option<Arc<dyn Delivery>> {
        self.live(id)
            .and_then(|live| live.now.locked().delivery.clone())
    }

    /// Attaches `delivery` to a task unless a delivery whose client is still there is
    /// attached; returns the one attached afterwards. It is handed the task as it is now.
    pub(crate) async fn attach(
        &self,
        id: &str,
        delivery: Arc<dyn Delivery>,
    ) -> Result<Arc<dyn Delivery>, Error> {
        self.ensure_background();
        let live = self.live_entry(id);
        let attached = {
            let mut now = live.now.locked();
            let slot = &mut now.delivery;
            match &*slot {
                Some(current) if !current.is_closed() => return Ok(Arc::clone(current)),
                _ => {
                    *slot = Some(Arc::clone(&delivery));
                    delivery
                }
            }
        };
        if let Some(rec) = self.store.get(id).await? {
            attached.changed(&rec, false);
            if rec.status.is_terminal() {
                live.now.locked().delivery = None;
            }
        }
        drop(live);
        self.release(id);
        Ok(attached)
    }

    /// Waits until the task is terminal and returns it (a blocking `tasks/result`).
    pub(crate) async fn wait_terminal(
        &self,
        id: &str,
        owner: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<Option<TaskRecord>, Error> {
        let mut watch = self.watch(id);
        loop {
            let Some(rec) = self.get_as(id, Access::Owner(owner)).await? else {
                return Ok(None);
            };
            if rec.status.is_terminal() {
                return Ok(Some(rec));
            }
            tokio::select! {
                () = watch.changed(rec.poll_interval) => {}
                () = cancel.cancelled() => return Err(Error::Cancelled),
            }
        }
    }

    /// One page of the tasks that match `filter` and that `access` may list: an owner lists
    /// its own tasks, an admin every task.
    pub(crate) async fn scan(
        &self,
        access: Access<'_>,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, Error> {
        self.ensure_background();
        let filter = match access {
            Access::Admin(_) => std::borrow::Cow::Borrowed(filter),
            Access::Owner(None) => return Ok(TaskPage::default()),
            Access::Owner(Some(owner)) => {
                if filter.owner.as_deref().is_some_and(|o| o != owner) {
                    return Ok(TaskPage::default());
                }
                std::borrow::Cow::Owned(filter.clone().owner(owner))
            }
        };
        let page = self.store.scan(&filter, cursor, limit).await;
        unexpired(page.map_err(listing_error)?)
    }

    /// The tasks `access` may list, by status and tool.
    pub(crate) async fn count(&self, access: Access<'_>) -> Result<TaskCounts, Error> {
        if let Access::Admin(_) = access {
            return Ok(self.store.count().await?);
        }
        let mut counts = TaskCounts::default();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .scan(access, &TaskFilter::new(), cursor.as_deref(), 1000)
                .await?;
            for task in &page.tasks {
                counts.add(task.status, &task.tool, 1);
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(counts),
            }
        }
    }

    /// Runs a finished task's tool again with its arguments, as a new task of the same
    /// owner; only tools whose restart policy reruns them (declared idempotent, or made of
    /// durable steps).
    pub(crate) async fn rerun(
        &self,
        id: &str,
        access: Access<'_>,
    ) -> Result<Option<TaskRecord>, Error> {
        let Some(old) = self.get_as(id, access).await? else {
            return Ok(None);
        };
        let tool = self.registry.get(&old.tool).ok_or_else(|| {
            Error::InvalidParams(format!("the tool {:?} is not served here", old.tool))
        })?;
        if tool.on_restart != crate::tool::RestartPolicy::Rerun {
            return Err(Error::InvalidParams(format!(
                "the tool {:?} does not rerun (declare on_restart = \"rerun\" on a tool that is idempotent or uses durable steps)",
                old.tool
            )));
        }
        if !old.status.is_terminal() {
            return Err(Error::InvalidParams(format!(
                "the task has not finished (it is {})",
                old.status
            )));
        }
        let record = self
            .start(super::NewTask {
                tool: tool.clone(),
                args: old.arguments,
                // Charged to the task's owner, as the first run was; an anonymous task to
                // whoever asked for the rerun.
                requestor: old
                    .owner
                    .clone()
                    .or_else(|| access.who())
                    .unwrap_or_else(|| "anonymous".into()),
                owner: old.owner,
                principal: old.principal,
                settle: old.settle,
                requested_ttl: old.ttl,
                client_capabilities: old.client_capabilities,
                delivery: None,
                key: None,
                // A rerun joins the trace of the call that created the task.
                trace: old.trace,
            })
            .await?;
        tracing::info!(task = %crate::task::ShortId(&record.id), rerun_of = %crate::task::ShortId(id), tool = %record.tool, by = ?access.who(), "task rerun");
        Ok(Some(record))
    }

    /// One page of the owner's tasks, oldest first (`tasks/list`).
    pub(crate) async fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, Error> {
        self.ensure_background();
        let page = self.store.list(owner, cursor, limit).await;
        unexpired(page.map_err(listing_error)?)
    }
}

/// Who reads or changes a task through the engine.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Access<'a> {
    /// An owner key (or an anonymous caller), under the protocol's visibility rules.
    Owner(Option<&'a str>),
    /// An operator, by name, who sees every task.
    Admin(&'a str),
}

impl Access<'_> {
    /// Who to record as having acted.
    fn who(self) -> Option<String> {
        match self {
            Access::Owner(owner) => owner.map(str::to_owned),
            Access::Admin(name) => Some(format!("admin:{name}")),
        }
    }
}

/// `true` once a task's time to be kept is over: it is never returned any more.
pub(crate) fn is_expired(rec: &TaskRecord) -> bool {
    rec.expires_at().is_some_and(|at| at <= SystemTime::now())
}

/// A page of a listing without the tasks that expired.
pub(crate) fn unexpired(mut page: TaskPage) -> Result<TaskPage, Error> {
    page.tasks.retain(|t| !is_expired(t));
    Ok(page)
}

/// The error of a listing whose store failed: a cursor the store did not make is the
/// caller's mistake.
pub(crate) fn listing_error(e: StoreError) -> Error {
    match e {
        StoreError::InvalidCursor(c) => Error::InvalidParams(format!("invalid cursor {c:?}")),
        other => other.into(),
    }
}
