//! Creating a task and running its tool under a lease, to its settled end.

use super::keyed::{Identity, REPEAT_TRIES};
use super::outcome::{settle, stored_outcome};
use super::{Delivery, Engine, NOT_RENEWED, NewTask, Run, RunTool, principal_of, shard_of};
use crate::context::{CallBackend, TaskContext};
use crate::error::{CallOutcome, Error, ToolError};
use crate::run::{CatchUnwind, RunEnd};
use crate::store::StoreError;
use crate::sync::LockExt;
use crate::task::{Lease, TaskRecord};
use crate::task::{ShortId, random_id};
use crate::tool::{Tool, ToolFuture};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, SystemTime};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// What a tool's future gives.
pub(super) type ToolResult = Result<crate::model::CallToolResult, ToolError>;

/// What ends the wait for a running tool first.
enum First {
    /// The tool returned, or panicked.
    Ended(Result<ToolResult, String>),
    /// Its task was cancelled, or its lease lost.
    Cancelled,
    /// It ran past its deadline.
    Deadline,
}

/// Spawns a run's future, in `span` unless the span records nothing: then the future is
/// spawned alone, without the room a span takes in every running task.
pub(super) fn spawn_in<F>(span: tracing::Span, future: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    if span.is_disabled() {
        tokio::spawn(future);
    } else {
        tokio::spawn(tracing::Instrument::instrument(future, span));
    }
}

/// A running tool's future, which stops at a panic.
pub(super) type ToolRun = CatchUnwind<dyn Future<Output = ToolResult> + Send>;

pin_project_lite::pin_project! {
    /// A running task's future: the wait for its tool's end, its task's cancellation or its
    /// deadline, whichever comes first; then what follows, boxed, made when the wait ends.
    /// Written out rather than an `async fn`, whose arguments would stay in the future
    /// after they moved on: a running task holds this and no more.
    #[project = DriveNow]
    enum Drive {
        Waiting {
            #[pin]
            cancelled: WaitForCancellationFutureOwned,
            run: Arc<Run>,
            // The tool's future, until the wait ends.
            tool: Option<ToolRun>,
            started_from: Option<Box<TaskRecord>>,
            // On the heap, and only for a tool with a deadline: most have none.
            deadline: Option<Pin<Box<tokio::time::Sleep>>>,
        },
        After {
            after: Pin<Box<dyn Future<Output = ()> + Send>>,
        },
    }
}

impl Future for Drive {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        loop {
            let after = match self.as_mut().project() {
                DriveNow::After { after } => return after.as_mut().poll(cx),
                DriveNow::Waiting {
                    cancelled,
                    run,
                    tool,
                    started_from,
                    deadline,
                } => {
                    let future = tool.as_mut().expect("a run's tool until its wait ends");
                    let first = if let Poll::Ready(end) = Pin::new(future).poll(cx) {
                        First::Ended(end)
                    } else if cancelled.poll(cx).is_ready() {
                        First::Cancelled
                    } else if let Some(Poll::Ready(())) =
                        deadline.as_mut().map(|d| d.as_mut().poll(cx))
                    {
                        First::Deadline
                    } else {
                        return Poll::Pending;
                    };
                    let future = tool.take().expect("taken once");
                    Box::pin(Engine::after(
                        Arc::clone(run),
                        future,
                        first,
                        started_from.take(),
                    ))
                }
            };
            self.set(Drive::After { after });
        }
    }
}

/// What becomes of a task whose create is confirmed only after its call was answered
/// ([`Error::TaskOutcomeUnknown`]).
pub(super) enum Confirmed {
    /// It runs here: a slot is reserved for it, which the resolution takes over.
    Run(Tool),
    /// It waits in the store for a free slot of any process.
    Queue,
    /// Its tool began in its first poll and waits, parked, for the create (see
    /// [`first_poll`](super::first_poll)): it goes on if the task turns up under this
    /// process's lease, and stops if not. A slot is reserved for it, which the resolution
    /// takes over.
    Resume(Arc<super::first_poll::Parked>),
    /// Its tool had already started (an adopted call) and is gone with the call's error:
    /// the task is settled as failed, saying so. A slot is reserved for it, which the
    /// resolution takes over.
    Stop(Tool),
}

/// What became of a create.
pub(super) enum Created {
    /// The record is stored; its id as the engine's indexes share it.
    Stored(Arc<str>),
    /// Nothing was stored: the task with this id is in the way (the same derived id, or the
    /// same unique key).
    Exists(String),
}

/// What became of one try to start a task.
pub(super) enum Started {
    /// It is stored, and runs or waits.
    Stored(Box<TaskRecord>),
    /// The task with this id is in the way.
    Exists(String),
}

impl Engine {
    /// Stores a new record, with its delivery attached first so no change is missed, and
    /// counts it against `requestor`'s quotas.
    /// Returns the id as the engine's own indexes share it.
    ///
    /// A create whose answer was lost is sent once more: the id is this process's own, so
    /// the second either stores the task or finds the first one stored. When that does not
    /// settle it either, the call fails with [`Error::TaskOutcomeUnknown`] and the task is
    /// looked for in the background for a lease; if it turns up, it goes on as `then`
    /// says (which takes over the slot a `Run` or `Stop` reserved).
    ///
    /// A record with a derived id or a unique key may find an earlier task in its way: then
    /// nothing is stored or counted, and the answer names that task ([`Created::Exists`]).
    /// A create that stays unknown for such a record is answered as retryable (a repeat with
    /// the same key or arguments finds the task if it was stored).
    pub(super) async fn create(
        &self,
        record: &TaskRecord,
        requestor: &str,
        delivery: Option<Arc<dyn Delivery>>,
        then: Confirmed,
        derived: bool,
    ) -> Result<Created, Error> {
        let ticket = self.quotas.admit(requestor)?;
        self.create_admitted(record, ticket, delivery, then, derived)
            .await
    }

    /// [`create`](Self::create) under a quota `ticket` taken already.
    pub(super) async fn create_admitted(
        &self,
        record: &TaskRecord,
        ticket: crate::quota::Ticket,
        delivery: Option<Arc<dyn Delivery>>,
        then: Confirmed,
        derived: bool,
    ) -> Result<Created, Error> {
        self.ensure_background();
        let id: Arc<str> = record.id.as_str().into();
        // A derived id may be a live task's here: its count stays as it is.
        let fresh = {
            let mut counted = self.counted[shard_of(&record.id)].locked();
            let fresh = !counted.contains_key(record.id.as_str());
            if fresh {
                counted.insert(Arc::clone(&id), ticket.requestor_key());
            }
            fresh
        };
        if let Some(delivery) = &delivery {
            let (_, live) = self.live_entry_shared(&record.id, || Arc::clone(&id));
            live.now.locked().delivery = Some(Arc::clone(delivery));
        }
        let in_the_way = |holder: String| {
            self.forget_create(record, delivery.as_ref(), fresh);
            Ok(Created::Exists(holder))
        };
        let unknown = match self
            .store
            .create_with_id(record.clone(), Arc::clone(&id))
            .await
        {
            Ok(()) => None,
            Err(StoreError::Duplicate(_)) if derived => return in_the_way(record.id.clone()),
            Err(StoreError::Taken(holder)) => return in_the_way(holder),
            Err(StoreError::Ambiguous(first)) => match (self.store)
                .create_with_id(record.clone(), Arc::clone(&id))
                .await
            {
                Ok(()) => None,
                Err(StoreError::Duplicate(_)) if derived && !self.stored_as_mine(record).await => {
                    return in_the_way(record.id.clone());
                }
                Err(StoreError::Duplicate(_)) => {
                    tracing::info!(task = %record.id, cause = %first, "the store's answer to a create was lost; creating it again found it stored");
                    None
                }
                // The first create did not land: its id would be a duplicate.
                Err(StoreError::Taken(holder)) => return in_the_way(holder),
                Err(again) => {
                    tracing::warn!(task = %record.id, cause = %first, again = %again, "cannot tell whether the task was created; looking for it in the background");
                    Some(first)
                }
            },
            Err(e) => {
                self.forget_create(record, delivery.as_ref(), fresh);
                return Err(e.into());
            }
        };
        if let Some(cause) = unknown {
            // Its questions and progress would have no request to go with.
            if let Some(live) = self.live(&record.id) {
                live.now.locked().delivery = None;
            }
            self.resolve_create(record.clone(), ticket, then);
            return Err(Error::TaskOutcomeUnknown {
                task_id: record.id.clone(),
                cause: StoreError::Ambiguous(cause).to_string(),
            });
        }
        ticket.commit();
        metrics::counter!("mcp_tasks_created_total", "tool" => record.tool.clone()).increment(1);
        crate::spans::task_created(&record.tool);
        tracing::info!(task = %ShortId(&record.id), tool = %record.tool, "task created");
        tracing::debug!(task = %record.id, tool = %record.tool, leased = record.lease.is_some(), "task created (whole id)");
        Ok(Created::Stored(id))
    }

    /// Whether the stored task of `record`'s (derived) id is the one this create wrote,
    /// rather than another process's with the same id.
    async fn stored_as_mine(&self, record: &TaskRecord) -> bool {
        match self.store.get(&record.id).await {
            Ok(Some(rec)) => rec.lease == record.lease && rec.created_at == record.created_at,
            _ => false,
        }
    }

    /// Undoes what [`create`](Self::create) counted (when `counted`) and attached for a
    /// task that was not stored. Only the delivery this create attached is taken off (a
    /// task with the same derived id may be live here, with a delivery of its own).
    fn forget_create(
        &self,
        record: &TaskRecord,
        delivery: Option<&Arc<dyn Delivery>>,
        counted: bool,
    ) {
        if counted {
            self.counted[shard_of(&record.id)]
                .locked()
                .remove(record.id.as_str());
        }
        if let Some(live) = self.live(&record.id) {
            let mut now = live.now.locked();
            let slot = &mut now.delivery;
            if slot
                .as_ref()
                .is_some_and(|d| delivery.is_none_or(|mine| Arc::ptr_eq(d, mine)))
            {
                *slot = None;
            }
        }
        self.release(&record.id);
    }

    /// Looks for a task whose create had an unknown outcome, with backoff, for a lease;
    /// goes on as `then` says if it turns up, and forgets it (freeing its quota and its
    /// slot) if it does not. A create that lands even later leaves a task whose lease has
    /// lapsed, which any process settles by its tool's restart policy.
    fn resolve_create(&self, record: TaskRecord, ticket: crate::quota::Ticket, then: Confirmed) {
        let engine = self.arc();
        tokio::spawn(async move {
            // Keeps the task's entry here while it is looked for (see `launch`).
            let _watch = engine.watch(&record.id);
            let give_up = tokio::time::Instant::now() + engine.config.lease;
            let mut pause = Duration::from_millis(50);
            let found = loop {
                tokio::time::sleep(pause).await;
                match engine.store.get(&record.id).await {
                    Ok(Some(rec)) => break Some(rec),
                    Ok(None) | Err(_) if tokio::time::Instant::now() + pause >= give_up => {
                        break None;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(task = %record.id, error = %e, "cannot read the task whose create had an unknown outcome yet")
                    }
                }
                pause = (pause * 2).min(Duration::from_secs(1));
            };
            let Some(rec) = found else {
                tracing::warn!(task = %record.id, tool = %record.tool, "the task whose create had an unknown outcome was not found; forgetting it");
                engine.forget_create(&record, None, true);
                drop(ticket);
                match then {
                    Confirmed::Run(tool) | Confirmed::Stop(tool) => engine.unreserve(&tool.name),
                    Confirmed::Resume(parked) => engine.abandon(&parked),
                    Confirmed::Queue => {}
                }
                return;
            };
            ticket.commit();
            metrics::counter!("mcp_tasks_created_total", "tool" => rec.tool.clone()).increment(1);
            crate::spans::task_created(&rec.tool);
            tracing::info!(task = %rec.id, tool = %rec.tool, "the task whose create had an unknown outcome is stored");
            engine.observe(&rec);
            match then {
                Confirmed::Run(tool) if rec.is_held_by(&engine.worker, record.epoch) => {
                    engine.launch(tool, rec.id.as_str().into(), rec, None);
                }
                Confirmed::Run(tool) => engine.unreserve(&tool.name),
                Confirmed::Resume(parked) if rec.is_held_by(&engine.worker, record.epoch) => {
                    engine.resume(&parked, rec);
                }
                Confirmed::Resume(parked) => engine.abandon(&parked),
                Confirmed::Queue => {
                    if rec.is_queued() {
                        engine.queued_here.locked().insert(rec.id.as_str().into());
                        engine.claim_wake.notify_one();
                    }
                }
                Confirmed::Stop(tool) => {
                    let message = "the task was stored after its call had been answered with an error (the store's answer was lost), so its tool had already stopped";
                    let outcome = CallOutcome::Error(Error::Internal(message.into()).into());
                    let epoch = record.epoch;
                    let written = engine
                        .update_from(&rec.id.clone(), Some(rec), |r| {
                            r.is_held_by(&engine.worker, epoch)
                                && settle(r, &outcome, engine.config.min_retention)
                        })
                        .await;
                    if let Err(e) = written {
                        tracing::warn!(task = %record.id, error = %e, "cannot settle the task whose tool had stopped; its lease will lapse");
                    }
                    engine.unreserve(&tool.name);
                }
            }
            engine.release(&record.id);
        });
    }

    /// Starts a task: stores it, then runs the tool here if a slot is free, or leaves it
    /// queued for whichever process frees a slot first. When this returns, `tasks/get`
    /// finds the task in every process sharing the store.
    ///
    /// A call with an idempotency key, or of a unique tool, that finds an earlier task in
    /// its way gets that task back and starts nothing (see [`keyed`](super::keyed)).
    pub(crate) async fn start(&self, new: NewTask) -> Result<TaskRecord, Error> {
        let identity = self.identity(&new);
        let _flight = match &identity.id {
            Some(id) => Some(self.flight(id).await),
            None => None,
        };
        for _ in 0..REPEAT_TRIES {
            let holder = match self.start_as(&new, &identity).await? {
                Started::Stored(record) => return Ok(*record),
                Started::Exists(holder) => holder,
            };
            let found = self.store.get(&holder).await?;
            if let Some(rec) = self.repeat(found, &new, &identity).await? {
                return Ok(rec);
            }
        }
        Err(Error::StoreUnavailable(
            "the task this call repeats keeps vanishing; try again".into(),
        ))
    }

    /// One try of [`start`](Self::start): the record is stored, or the answer names the
    /// task in its way.
    async fn start_as(&self, new: &NewTask, identity: &Identity) -> Result<Started, Error> {
        self.creation_open(&new.tool)?;
        self.admit()?;
        let id = match &identity.id {
            Some(id) => id.clone(),
            None => random_id()?,
        };
        let run_now = self.config.execute && self.reserve(&new.tool.name);
        let mut record = self.new_record(id, new, run_now.then(|| self.my_lease()));
        record.unique_key.clone_from(&identity.unique_key);
        // A tool may start before its create only where running it again does no harm
        // (the create may fail, and the call be sent again). A call that may repeat an
        // earlier one (a key, a unique tool) may find that task in its way: its tool must
        // not start before the create says it is new.
        if run_now
            && new.tool.may_run_again()
            && identity.id.is_none()
            && identity.unique_key.is_none()
        {
            return self.start_polled(new, record).await;
        }
        let then = if run_now {
            Confirmed::Run(new.tool.clone())
        } else {
            Confirmed::Queue
        };
        let created = self
            .create(
                &record,
                &new.requestor,
                new.delivery.clone(),
                then,
                identity.id.is_some(),
            )
            .await;
        let id = match created {
            Ok(Created::Stored(id)) => id,
            Ok(Created::Exists(holder)) => {
                if run_now {
                    self.unreserve(&new.tool.name);
                }
                return Ok(Started::Exists(holder));
            }
            // An unknown outcome's resolution holds the slot. A repeat of a call with a
            // derived id or a unique key finds the task if it was stored: retryable.
            Err(Error::TaskOutcomeUnknown { task_id, cause })
                if identity.id.is_some() || identity.unique_key.is_some() =>
            {
                return Err(Error::StoreUnavailable(format!(
                    "cannot tell whether task {task_id} was created ({cause}); call again with the same idempotency key or arguments, which finds it if it was"
                )));
            }
            Err(e) => {
                if run_now && !matches!(e, Error::TaskOutcomeUnknown { .. }) {
                    self.unreserve(&new.tool.name);
                }
                return Err(e);
            }
        };
        if run_now {
            self.launch(new.tool.clone(), id, record.clone(), None);
        } else {
            let queued = {
                let mut queued = self.queued_here.locked();
                queued.insert(id);
                queued.len()
            };
            metrics::gauge!("mcp_tasks_queued").set(queued as f64);
            crate::spans::queue_depth(queued);
            tracing::debug!(task = %record.id, tool = %record.tool, "no free slot here; the task waits in the store");
            self.claim_wake.notify_one();
        }
        Ok(Started::Stored(Box::new(record)))
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
        attach: impl FnOnce(&Arc<str>, Arc<dyn CallBackend>),
    ) -> Result<TaskRecord, Error> {
        self.admit()?;
        let id = random_id()?;
        {
            let mut slots = self.slots.locked();
            slots.running += 1;
            *slots.per_tool.entry(new.tool.name.to_string()).or_default() += 1;
        }
        let record = self.new_record(id, &new, Some(self.my_lease()));
        let then = Confirmed::Stop(new.tool.clone());
        match self
            .create(&record, &new.requestor, new.delivery.clone(), then, false)
            .await
        {
            Ok(Created::Stored(_)) => {}
            Ok(Created::Exists(_)) => {
                // A random id and no unique key: nothing can be in the way.
                self.unreserve(&new.tool.name);
                return Err(Error::Internal("a new task's random id is taken".into()));
            }
            Err(e) => {
                if !matches!(e, Error::TaskOutcomeUnknown { .. }) {
                    self.unreserve(&new.tool.name);
                }
                return Err(e);
            }
        }
        let run = self.begin_run(&new.tool, record.id.as_str().into(), &record, cancel);
        attach(&run.id, Arc::clone(&run) as Arc<dyn CallBackend>);
        self.spawn_run(run, record.clone(), future);
        Ok(record)
    }

    /// Makes the run of `record`'s task under its lease, and keeps it in the task's entry.
    /// `id` is the task's id as the engine's indexes share it, for an entry made now.
    pub(super) fn begin_run(
        &self,
        tool: &Tool,
        id: Arc<str>,
        record: &TaskRecord,
        cancel: CancellationToken,
    ) -> Arc<Run> {
        let (id, live) = self.live_entry_shared(&record.id, || id);
        let own = match self.registry.get(&tool.name) {
            Some(known) if known.is_same(tool) => None,
            _ => Some(Box::new(tool.clone())),
        };
        let run = Arc::new(Run {
            engine: self.arc(),
            id,
            tool: RunTool {
                name: Arc::clone(&tool.name),
                own,
            },
            epoch: record.epoch,
            cancel,
            lost: AtomicBool::new(false),
            settling: AtomicBool::new(false),
            stored: AtomicBool::new(true),
            renew_at: AtomicU64::new(NOT_RENEWED),
            steps: Mutex::new((!record.steps.is_empty()).then(|| Box::new(record.steps.clone()))),
            last_write: AtomicU64::new(0),
            started: self.nanos_now(),
        });
        live.started.fetch_max(record.epoch, Ordering::AcqRel);
        live.now.locked().run = Some(Arc::clone(&run));
        run
    }

    /// Runs the tool of a task this process holds the lease on (a slot is reserved),
    /// unless a run already started here under the same lease epoch: then the slot is
    /// freed and nothing starts. Several tries of one keyed create (a client retrying while
    /// the store's answers are lost) each look for the task in the background, and every
    /// one that finds it stored finds it under the same lease; only the first may run it,
    /// and none may run it again after it ended (each search keeps the task's entry here,
    /// and with it the epoch that started, for as long as it looks).
    ///
    /// `id` is the task's id as the engine's indexes share it.
    pub(super) fn launch(
        &self,
        tool: Tool,
        id: Arc<str>,
        record: TaskRecord,
        future: Option<ToolFuture>,
    ) {
        let (id, live) = self.live_entry_shared(&record.id, || id);
        let started = live.started.fetch_max(record.epoch, Ordering::AcqRel);
        if started >= record.epoch {
            tracing::debug!(task = %record.id, epoch = record.epoch, "a run of the task already started here under this lease");
            self.unreserve(&tool.name);
            self.release(&record.id);
            return;
        }
        let run = self.begin_run(&tool, id, &record, CancellationToken::new());
        let future = future.unwrap_or_else(|| self.call_tool(&tool, &run, &record));
        self.spawn_run(run, record, future);
    }

    /// Calls `tool` for `record`'s task, with `run` as its context's backend.
    pub(super) fn call_tool(&self, tool: &Tool, run: &Arc<Run>, record: &TaskRecord) -> ToolFuture {
        let cx = TaskContext::new(
            Arc::clone(&tool.name),
            run.cancel.clone(),
            record.client_capabilities.clone(),
            principal_of(record),
            Arc::clone(run) as Arc<dyn CallBackend>,
            self.state.clone(),
        );
        cx.set_task_id(&run.id);
        tool.runner().call(cx, record.arguments.clone())
    }

    /// Spawns the run: the tool's future, then the storing of its outcome.
    pub(super) fn spawn_run(&self, run: Arc<Run>, record: TaskRecord, future: ToolFuture) {
        let span = self.run_span(&run, &record);
        self.spawn_run_in(span, run, record, CatchUnwind::pinned(future), false);
    }

    /// The span a run of `record`'s task goes in.
    pub(super) fn run_span(&self, run: &Run, record: &TaskRecord) -> tracing::Span {
        // The process that ran it before, as its history tells (for a rerun's span).
        let previous = record
            .history
            .iter()
            .rev()
            .filter_map(|c| c.process.as_deref())
            .find(|p| *p != self.worker);
        crate::spans::run(
            &record.id,
            &run.tool.name,
            record.epoch,
            &self.worker,
            record.trace.as_deref(),
            previous,
        )
    }

    /// [`spawn_run`](Self::spawn_run) in `span`, with the tool's future caught at a panic;
    /// `begun` when the tool was polled already (and its start counted).
    pub(super) fn spawn_run_in(
        &self,
        span: tracing::Span,
        run: Arc<Run>,
        record: TaskRecord,
        future: ToolRun,
        begun: bool,
    ) {
        // The run keeps none of the record: what it needs is in `run`, and the lease's end
        // only when a start must renew it first. Where a read is a round trip to a store
        // other processes share, it keeps the record it started from, boxed: its outcome is
        // then written over that version with no read first, unless something else wrote
        // the task meanwhile (a renewal, a question, a step), which makes that write fail
        // and the task be read again. Elsewhere a read is a lookup in memory, and a running
        // task keeps no copy.
        let lease_until = record.lease.as_ref().map(|l| l.until);
        let started_from = self.store.is_shared().then(|| Box::new(record));
        // A start that must renew the lease first is rare: only it waits for the renewal
        // before the run, so that the run's own future holds nothing for it.
        match lease_until.filter(|_| self.lease_short(lease_until)) {
            // Made in the span: what its start logs goes with the run.
            None => {
                let drive = span.in_scope(|| Self::drive(run, future, started_from, begun));
                spawn_in(span, drive);
            }
            Some(until) => spawn_in(span, async move {
                if run.engine.still_held_at_start(&run, until).await {
                    Self::drive(run, future, started_from, begun).await;
                } else {
                    if !begun {
                        metrics::gauge!("mcp_tasks_running").increment(1.0);
                    }
                    Box::pin(run.engine.conclude(&run, None, None)).await;
                }
            }),
        }
    }

    /// Runs the tool to its end, then stores what became of it.
    ///
    /// A running task's future ([`Drive`]) holds what the wait for the tool needs: the run,
    /// the wait for its cancellation, the tool's future and, on a shared store, the record
    /// it started from (boxed). Everything after that wait is one boxed future, made when
    /// the wait ends.
    fn drive(
        run: Arc<Run>,
        future: ToolRun,
        started_from: Option<Box<TaskRecord>>,
        begun: bool,
    ) -> Drive {
        if !begun {
            Self::tool_starts(&run);
        }
        // While the tool runs, the engine's renewal loop extends the lease.
        let every = run.engine.config.renew_every().as_millis() as u64;
        run.renew_at
            .store(run.engine.millis_now() + every, Ordering::Release);
        Drive::Waiting {
            cancelled: run.cancel.clone().cancelled_owned(),
            deadline: run.tool().deadline.map(|d| Box::pin(tokio::time::sleep(d))),
            run,
            tool: Some(future),
            started_from,
        }
    }

    /// Counts and logs the start of a run's tool.
    pub(super) fn tool_starts(run: &Run) {
        metrics::gauge!("mcp_tasks_running").increment(1.0);
        crate::spans::run_started(&run.tool.name);
        tracing::debug!(task = %run.id, "the tool starts");
    }

    /// What follows the wait for a running tool: what became of the run (after the grace
    /// period of a cancelled one), stored.
    async fn after(
        run: Arc<Run>,
        mut future: ToolRun,
        first: First,
        started_from: Option<Box<TaskRecord>>,
    ) {
        run.renew_at.store(NOT_RENEWED, Ordering::Release);
        let end = match first {
            First::Ended(end) => run.engine.ended(&run, end),
            First::Cancelled => run.engine.cancelled(&run, &mut future).await,
            First::Deadline => {
                run.cancel.cancel();
                Some(RunEnd::Returned(Err(ToolError::protocol(
                    crate::jsonrpc::INTERNAL_ERROR,
                    format!(
                        "the task exceeded its execution deadline of {} s",
                        run.tool().deadline.unwrap_or_default().as_secs()
                    ),
                ))))
            }
        };
        let outcome = end.map(|end| stored_outcome(run.tool(), end));
        run.engine.conclude(&run, outcome, started_from).await;
    }

    /// Stores a run's `outcome` (none when its lease was lost), and forgets the run.
    pub(super) async fn conclude(
        &self,
        run: &Run,
        outcome: Option<CallOutcome>,
        started_from: Option<Box<TaskRecord>>,
    ) {
        let status = match outcome {
            Some(outcome) => self.finish(run, outcome, started_from.map(|r| *r)).await,
            None => {
                tracing::warn!(
                    "the task's lease was lost to another process; this run stopped without settling it"
                );
                "lease lost"
            }
        };
        self.concluded(run, status);
    }

    /// Counts and logs the end of a run that ended as `status` says, forgets it and frees
    /// its slot.
    pub(super) fn concluded(&self, run: &Run, status: &'static str) {
        self.closed(run, status);
        self.unreserve(&run.tool.name);
    }

    /// [`concluded`](Self::concluded), but the slot stays taken: a resolution in the
    /// background takes it over.
    pub(super) fn closed(&self, run: &Run, status: &'static str) {
        let elapsed = Duration::from_nanos(self.nanos_now().saturating_sub(run.started));
        let name = &run.tool.name;
        crate::spans::run_ended(&tracing::Span::current(), name, status, elapsed);
        tracing::info!(
            status,
            duration = ?Duration::from_millis(elapsed.as_millis() as u64),
            "task finished"
        );
        metrics::gauge!("mcp_tasks_running").decrement(1.0);
        metrics::histogram!("mcp_tasks_run_seconds", "tool" => name.to_string())
            .record(elapsed.as_secs_f64());
        metrics::counter!(
            "mcp_tasks_finished_total",
            "tool" => name.to_string(),
            "status" => status
        )
        .increment(1);
        if let Some(live) = self.live(&run.id) {
            live.now.locked().run = None;
        }
        self.release(&run.id);
    }

    /// How a run whose task was cancelled ends: the tool sees its token fire and may finish
    /// cleanly within the grace period, else it is dropped.
    async fn cancelled(&self, run: &Run, future: &mut ToolRun) -> Option<RunEnd> {
        // Handed off or taken over: the task is no longer this run's, and the tool is
        // dropped at once.
        if run.lost.load(Ordering::Acquire) {
            tracing::info!("the run stopped: its lease is another process's");
            return None;
        }
        tracing::info!("cancel requested");
        match tokio::time::timeout(self.config.cancel_grace, future).await {
            Ok(end) => self.ended(run, end),
            Err(_) if run.lost.load(Ordering::Acquire) => None,
            Err(_) => Some(RunEnd::Cancelled),
        }
    }

    /// How a run whose tool returned (or panicked) ends; `None` when its lease was lost.
    pub(super) fn ended(&self, run: &Run, end: Result<ToolResult, String>) -> Option<RunEnd> {
        if run.lost.load(Ordering::Acquire) {
            return None;
        }
        Some(match end {
            Ok(result) => RunEnd::Returned(result),
            Err(message) => {
                tracing::warn!(tool = %run.tool.name, panic = %message, "the tool panicked");
                RunEnd::Panicked
            }
        })
    }

    /// Whether less than a renewal period is left of the lease a run starts under (see
    /// [`still_held_at_start`](Self::still_held_at_start)).
    fn lease_short(&self, lease_until: Option<SystemTime>) -> bool {
        lease_until.is_some_and(|until| {
            until.duration_since(SystemTime::now()).unwrap_or_default() < self.config.renew_every()
        })
    }

    /// Whether the tool may start: the lease it was claimed (or created) under is still this
    /// process's.
    ///
    /// A process that was slow or paused between the claim and the start (a stop signal, a
    /// long pause of the machine) may find its lease about to lapse, or lapsed and the task
    /// taken over and settled by another process. When less than a renewal period of the
    /// lease is left by this process's clock, the lease is renewed first, fenced by its
    /// epoch; the tool starts only when that write lands (or when the store cannot be reached:
    /// its writes stay fenced). A lease with more left cannot have been taken over (others
    /// wait for it to lapse), so the common start costs no store call. What remains: a pause
    /// between this check and the tool's first step longer than the lease's rest, or clocks
    /// of two processes apart by more than a renewal period.
    async fn still_held_at_start(&self, run: &Run, until: SystemTime) -> bool {
        let id = &*run.id;
        let left = until.duration_since(SystemTime::now()).unwrap_or_default();
        if left >= self.config.renew_every() {
            return true;
        }
        tracing::info!(
            task = %ShortId(id),
            left_ms = left.as_millis() as u64,
            "the lease is about to lapse before the tool starts: renewing it first"
        );
        if Box::pin(self.renew(run)).await {
            return true;
        }
        tracing::warn!(task = %ShortId(id), "the task is no longer this process's: its tool does not start");
        run.lost.store(true, Ordering::Release);
        false
    }

    /// Extends the lease of a running task; stops the run when the lease is gone. `true`
    /// when the lease is still this process's (also when the store could not be reached:
    /// the lease then runs on until it lapses).
    pub(super) async fn renew(&self, run: &Run) -> bool {
        let id = &*run.id;
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
            Ok(Some((rec, _))) if rec.is_held_by(&self.worker, run.epoch) => true,
            Ok(Some((rec, _))) if rec.status.is_terminal() => {
                run.cancel.cancel();
                false
            }
            Ok(_) => {
                self.lose(id, run);
                false
            }
            Err(e) => {
                tracing::warn!(task = %ShortId(id), error = %e, "cannot renew the task's lease");
                true
            }
        }
    }

    pub(super) fn lose(&self, id: &str, run: &Run) {
        if !run.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(task = %ShortId(id), "lost the task's lease; stopping its tool");
        }
        run.cancel.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_running_task_holds_stays_small() {
        // A spawned task is one allocation of tokio's, 112 bytes and the future, in steps of
        // 128 bytes: a future of up to 144 bytes takes 256 (and a span around it fits too).
        let drive = std::mem::size_of::<Drive>();
        assert!(drive <= 120, "the running task's future is {drive} bytes");
        let run = std::mem::size_of::<Run>();
        assert!(run <= 120, "a run is {run} bytes");
        let live = std::mem::size_of::<super::super::Live>();
        assert!(live <= 72, "a live entry is {live} bytes");
    }
}
