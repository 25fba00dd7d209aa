//! Calls that must not run twice: calls made with an idempotency key, and calls of unique
//! tools.
//!
//! A task call with a key gets the id derived from its scope, tool and key
//! ([`keys::keyed_id`]); a repeat's create of the same id finds the first task, which it gets
//! back. A unique tool's task carries its unique key, and a call equal to an unfinished task
//! gets that task back. A synchronous call with a key leaves a record of its own, marked
//! [`synchronous`](crate::task::TaskRecord::synchronous), holding the call's outcome for
//! [`EngineConfig::idempotency_retention`](super::EngineConfig::idempotency_retention): a
//! repeat gets the same outcome, or waits for the first call to end. Repeats in one process
//! wait for the first call's create in a single flight; repeats in other processes are
//! settled by the store's unique ids.

use super::keys::{self, UniqueIdentity};
use super::{Engine, NewTask, is_expired};
use crate::error::{CallOutcome, Error};
use crate::idempotency::IdempotencyKey;
use crate::model::JsonObject;
use crate::store::StoreError;
use crate::sync::LockExt;
use crate::task::{Lease, SettlePolicy, TaskRecord, TaskStatus};
use crate::tool::Tool;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;
use tokio_util::sync::CancellationToken;

/// How often a call tries again when the task it found in the way vanished meanwhile (ended
/// and expired, or freed its unique key).
pub(super) const REPEAT_TRIES: usize = 3;

/// The single flight of one derived id in this process: held while a call with that id is
/// created (a task) or runs (a synchronous call).
pub(crate) struct Flight {
    engine: Arc<Engine>,
    id: String,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        let mut flights = self.engine.flights.locked();
        // The map's copy and this guard's lock: nobody else waits.
        if flights
            .get(&self.id)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            flights.remove(&self.id);
        }
    }
}

/// How a new task is told apart from earlier ones.
#[derive(Default)]
pub(super) struct Identity {
    /// The derived id, for a call with a key or a unique tool with a window.
    pub(super) id: Option<String>,
    /// The unique key, for a unique tool without a window.
    pub(super) unique_key: Option<String>,
    /// The call's own key: a repeat must bring the same arguments.
    pub(super) key: Option<IdempotencyKey>,
}

/// What a synchronous call with a key does.
pub(crate) enum KeyedCall {
    /// It runs: its record is stored; the caller stores the outcome with
    /// [`CallRecord::finish`].
    Run(CallRecord),
    /// It is a repeat of a call that ended: its outcome.
    Done(CallOutcome),
}

impl Engine {
    /// Waits for, then holds, the single flight of `id` in this process.
    pub(super) async fn flight(&self, id: &str) -> Flight {
        let lock = Arc::clone(self.flights.locked().entry(id.to_owned()).or_default());
        Flight {
            engine: self.arc(),
            id: id.to_owned(),
            _guard: lock.lock_owned().await,
        }
    }

    /// The scope of `owner`'s keys and unique tasks.
    fn key_scope<'a>(&self, owner: Option<&'a str>) -> &'a str {
        keys::scope(owner, self.config.strict_session_binding)
    }

    /// How the task of `new` is told apart from earlier ones.
    pub(super) fn identity(&self, new: &NewTask) -> Identity {
        let scope = self.key_scope(new.owner.as_deref());
        let mut identity = Identity {
            key: new.key.clone(),
            ..Identity::default()
        };
        if let Some(unique) = &new.tool.unique {
            match keys::unique_identity(unique, scope, &new.tool, &new.args, SystemTime::now()) {
                UniqueIdentity::Key(k) => identity.unique_key = Some(k),
                UniqueIdentity::Id(id) => identity.id = Some(id),
            }
        }
        if let Some(key) = &new.key {
            identity.id = Some(keys::keyed_id(scope, &new.tool.name, key.as_str()));
        }
        identity
    }

    /// The task a new call found in its way (the first call with its key, or an equal task
    /// of a unique tool), handed back as the call's task. `None` when it is no longer there
    /// to be found (expired, deleted): the call tries again.
    pub(super) async fn repeat(
        &self,
        rec: Option<TaskRecord>,
        new: &NewTask,
        identity: &Identity,
    ) -> Result<Option<TaskRecord>, Error> {
        let Some(rec) = rec else {
            return Ok(None);
        };
        if is_expired(&rec) {
            self.store.delete(&rec.id).await?;
            return Ok(None);
        }
        if let Some(key) = &identity.key {
            check_repeat(&rec, key, &new.tool.name, &new.args, false)?;
        }
        if rec.synchronous || !self.may_see(&rec, new.owner.as_deref()) {
            // A unique key is scoped to its owner; a derived id too. Neither happens
            // unless a hash collides.
            return Err(Error::Internal(
                "the call's key names a task of another caller".into(),
            ));
        }
        if let (Some(delivery), false) = (&new.delivery, rec.status.is_terminal())
            && let Err(e) = self.attach(&rec.id, Arc::clone(delivery)).await
        {
            tracing::debug!(task = %rec.id, error = %e, "cannot attach the repeat's delivery");
        }
        metrics::counter!("mcp_tasks_repeated_calls_total", "tool" => rec.tool.clone())
            .increment(1);
        tracing::debug!(task = %rec.id, tool = %rec.tool, "a repeated call gets the task it repeats");
        Ok(Some(rec))
    }

    /// Begins a synchronous call of `tool` with `key`: stores its record, or finds the
    /// first call's (then waits for it to end, or until `cancel` fires).
    pub(crate) async fn keyed_call(
        &self,
        tool: &Tool,
        args: &JsonObject,
        owner: Option<&str>,
        key: &IdempotencyKey,
        cancel: &CancellationToken,
    ) -> Result<KeyedCall, Error> {
        self.ensure_background();
        let scope = self.key_scope(owner);
        let id = keys::keyed_id(scope, &tool.name, key.as_str());
        let flight = self.flight(&id).await;
        for _ in 0..REPEAT_TRIES {
            let record = self.call_record(&id, tool, args, owner);
            let found = match self.store.create(record.clone()).await {
                Ok(()) => return Ok(KeyedCall::Run(CallRecord::begin(self, record, flight))),
                Err(StoreError::Duplicate(_)) => self.store.get(&id).await?,
                Err(StoreError::Ambiguous(first)) => {
                    match self.store.create(record.clone()).await {
                        Ok(()) => {
                            return Ok(KeyedCall::Run(CallRecord::begin(self, record, flight)));
                        }
                        Err(StoreError::Duplicate(_)) => match self.store.get(&id).await? {
                            Some(rec) if rec.lease == record.lease && rec.epoch == record.epoch => {
                                return Ok(KeyedCall::Run(CallRecord::begin(self, rec, flight)));
                            }
                            other => other,
                        },
                        Err(again) => {
                            tracing::warn!(call = %id, cause = %first, again = %again, "cannot tell whether a keyed call's record was stored");
                            return Err(Error::StoreUnavailable(format!(
                                "cannot tell whether the call was recorded ({first}); call again with the same idempotency key"
                            )));
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            };
            let Some(rec) = found else { continue };
            if is_expired(&rec) {
                self.store.delete(&id).await?;
                continue;
            }
            check_repeat(&rec, key, &tool.name, args, true)?;
            metrics::counter!("mcp_tasks_repeated_calls_total", "tool" => rec.tool.clone())
                .increment(1);
            let rec = if rec.status.is_terminal() {
                rec
            } else {
                // Its first call runs in another process (this one's would hold the flight).
                match self.wait_call(&id, cancel).await? {
                    Some(rec) => rec,
                    None => continue,
                }
            };
            return Ok(KeyedCall::Done(kept_outcome(&rec)));
        }
        Err(Error::StoreUnavailable(
            "the first call with this idempotency key keeps vanishing; try again".into(),
        ))
    }

    /// Waits until the record of a synchronous call ends (its lease lapses if its process
    /// died, and it is then settled as failed). `None` when it vanished.
    async fn wait_call(
        &self,
        id: &str,
        cancel: &CancellationToken,
    ) -> Result<Option<TaskRecord>, Error> {
        let mut watch = self.watch(id);
        loop {
            let Some(rec) = self.store.get(id).await? else {
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

    fn call_record(
        &self,
        id: &str,
        tool: &Tool,
        args: &JsonObject,
        owner: Option<&str>,
    ) -> TaskRecord {
        let now = SystemTime::now();
        TaskRecord {
            id: id.to_owned(),
            owner: owner.map(str::to_owned),
            principal: None,
            tool: tool.name.to_string(),
            arguments: args.clone(),
            settle: SettlePolicy::Complete,
            status: TaskStatus::Working,
            status_message: None,
            created_at: now,
            updated_at: now,
            ttl: Some(self.config.idempotency_retention),
            poll_interval: tool.poll_interval,
            outcome: None,
            input_requests: BTreeMap::new(),
            input_responses: BTreeMap::new(),
            input_seq: 0,
            client_capabilities: Arc::new(serde_json::Value::Null),
            lease: Some(self.my_lease()),
            epoch: 1,
            cancel_requested: None,
            version: 0,
            steps: BTreeMap::new(),
            unique_key: None,
            synchronous: true,
            history: Vec::new(),
            trace: None,
        }
    }
}

/// Refuses a repeat whose key was used for something else: another tool, other arguments,
/// or a task where a synchronous call is repeated (or the other way round).
fn check_repeat(
    rec: &TaskRecord,
    key: &IdempotencyKey,
    tool: &str,
    args: &JsonObject,
    synchronous: bool,
) -> Result<(), Error> {
    if rec.tool != tool || &rec.arguments != args {
        return Err(Error::InvalidParams(format!(
            "the idempotency key {key:?} was already used for a call of {tool:?} with other arguments; use a new key for a different call",
            key = key.as_str()
        )));
    }
    if rec.synchronous != synchronous {
        let first = if rec.synchronous {
            "a call that did not run as a task"
        } else {
            "a call that ran as a task"
        };
        return Err(Error::InvalidParams(format!(
            "the idempotency key {key:?} was already used for {first} of {tool:?}; use a new key",
            key = key.as_str()
        )));
    }
    Ok(())
}

/// The outcome a finished synchronous call's record keeps.
fn kept_outcome(rec: &TaskRecord) -> CallOutcome {
    match (&rec.outcome, rec.status) {
        (Some(outcome), _) => CallOutcome::clone(outcome),
        (None, TaskStatus::Cancelled) => CallOutcome::Error(Error::Cancelled.into()),
        (None, _) => CallOutcome::Error(
            Error::Internal("the first call with this idempotency key left no outcome".into())
                .into(),
        ),
    }
}

/// The stored record of a synchronous call with a key, while the call runs: its lease is
/// renewed, and [`finish`](Self::finish) stores the outcome. Dropped unfinished (the call
/// asked for answers in another round, or was cancelled), the record is deleted, so a repeat
/// runs the call again.
pub(crate) struct CallRecord {
    engine: Arc<Engine>,
    id: String,
    epoch: u64,
    renewal: tokio::task::JoinHandle<()>,
    done: bool,
    _flight: Flight,
}

impl std::fmt::Debug for CallRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallRecord")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl CallRecord {
    fn begin(engine: &Engine, record: TaskRecord, flight: Flight) -> Self {
        let renewal = {
            let engine = engine.arc();
            let (id, epoch) = (record.id.clone(), record.epoch);
            tokio::spawn(async move {
                let mut every = tokio::time::interval(engine.config.renew_every());
                every.tick().await;
                loop {
                    every.tick().await;
                    let until = SystemTime::now() + engine.config.lease;
                    let worker = engine.worker.clone();
                    let renewed = engine
                        .update(&id, |r| {
                            if !r.is_held_by(&worker, epoch) {
                                return false;
                            }
                            r.lease = Some(Lease {
                                worker: worker.clone(),
                                until,
                            });
                            true
                        })
                        .await;
                    if let Err(e) = renewed {
                        tracing::debug!(call = %id, error = %e, "cannot renew a keyed call's lease");
                    }
                }
            })
        };
        Self {
            engine: engine.arc(),
            id: record.id,
            epoch: record.epoch,
            renewal,
            done: false,
            _flight: flight,
        }
    }

    /// Stores the call's outcome, kept for the engine's idempotency retention.
    pub(crate) async fn finish(mut self, outcome: &CallOutcome) {
        self.done = true;
        self.renewal.abort();
        let engine = Arc::clone(&self.engine);
        let (worker, epoch) = (engine.worker.clone(), self.epoch);
        let retention = engine.config.idempotency_retention;
        // Boxed: the write's future is large, and a synchronous call's future holds this one.
        let written = Box::pin(engine.update(&self.id, |r| {
            if !r.is_held_by(&worker, epoch) || !super::outcome::settle(r, outcome, retention) {
                return false;
            }
            let alive = SystemTime::now()
                .duration_since(r.created_at)
                .unwrap_or_default();
            r.ttl = Some(alive + retention);
            true
        }))
        .await;
        if let Err(e) = written {
            tracing::warn!(call = %self.id, error = %e, "cannot keep a keyed call's outcome; a repeat finds it failed once its lease lapses");
        }
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        self.renewal.abort();
        if self.done {
            return;
        }
        let engine = Arc::clone(&self.engine);
        let (id, epoch) = (self.id.clone(), self.epoch);
        tokio::spawn(async move {
            let worker = engine.worker.clone();
            let mine = match engine.store.get(&id).await {
                Ok(Some(rec)) => rec.is_held_by(&worker, epoch) && !rec.status.is_terminal(),
                _ => false,
            };
            if mine && let Err(e) = engine.store.delete(&id).await {
                tracing::debug!(call = %id, error = %e, "cannot forget a keyed call's record; it lapses with its lease");
            }
        });
    }
}
