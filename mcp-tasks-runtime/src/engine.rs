//! The task engine: turns a tool call into a durable task, runs it, and settles it.
//!
//! Every change to a task is a compare-and-set in the [`TaskStore`], checked against the one
//! transition table ([`TaskStatus::can_move_to`]); a late change after a terminal status is a
//! silent no-op. After every write the task's watch channel is bumped, which wakes whoever
//! waits on the task (`tasks/result`, a tool waiting for an answer, a subscription). Nothing
//! busy-polls.
//!
//! The engine knows nothing of wire formats: the protocol era decides only how input reaches
//! the client ([`Flavor`]) and how a tool error settles the task ([`TaskProtocol`]).

use crate::call::{CatchUnwind, Notifier, RunEnd, input_key, outcome_of};
use crate::context::{BoxFuture, CallBackend, TaskContext};
use crate::error::{CallOutcome, Error, ToolError};
use crate::model::{InputRequest, JsonObject, LogLevel};
use crate::session::{Connection, RequestAborted, Sink};
use crate::store::{StoreError, TaskPage, TaskStore};
use crate::task::{TaskProtocol, TaskRecord, TaskStatus, random_id};
use crate::tool::{Registry, RestartPolicy, Tool, ToolFuture};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

/// Limits and timings of the task engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Tasks running at once, over all tools.
    pub max_running: usize,
    /// Tasks waiting for a free slot; past this, new tasks are refused.
    pub max_queued: usize,
    /// The longest TTL a task gets, whatever the tool or the client asks; `None`: no cap.
    pub max_ttl: Option<Duration>,
    /// How long a cancelled task's tool may go on cleaning up before it is dropped.
    pub cancel_grace: Duration,
    /// How often expired tasks are deleted.
    pub sweep_interval: Duration,
    /// How long a result stays readable after the task ends, even past its TTL.
    pub min_retention: Duration,
    /// The least time between two progress writes of one task's status message.
    pub progress_write_interval: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_running: 1024,
            max_queued: 100_000,
            max_ttl: Some(Duration::from_secs(7 * 24 * 60 * 60)),
            cancel_grace: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(5),
            min_retention: Duration::from_secs(60),
            progress_write_interval: Duration::from_millis(250),
        }
    }
}

/// [`TaskStore`] with boxed futures, so the engine can hold any backend.
trait DynStore: Send + Sync {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>>;
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;
    fn compare_and_set(
        &self,
        record: TaskRecord,
        expected: u64,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;
    fn list<'a>(
        &'a self,
        owner: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<TaskPage, StoreError>>;
    fn expire(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;
    fn unfinished(&self) -> BoxFuture<'_, Result<Vec<TaskRecord>, StoreError>>;
}

impl<S: TaskStore> DynStore for S {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(TaskStore::create(self, record))
    }
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(TaskStore::get(self, id))
    }
    fn compare_and_set(
        &self,
        record: TaskRecord,
        expected: u64,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(TaskStore::compare_and_set(self, record, expected))
    }
    fn list<'a>(
        &'a self,
        owner: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<TaskPage, StoreError>> {
        Box::pin(TaskStore::list(self, owner, cursor, limit))
    }
    fn expire(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(TaskStore::expire(self, now, limit))
    }
    fn unfinished(&self) -> BoxFuture<'_, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(TaskStore::unfinished(self))
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Internal(e.to_string())
    }
}

/// How a task's questions and progress reach its client.
#[derive(Clone, Debug)]
pub(crate) enum Flavor {
    /// 2025-11-25: server-to-client requests tagged with the related task, progress on the
    /// original token for the task's whole life.
    V2025 {
        conn: Arc<Connection>,
        progress_token: Option<Value>,
    },
    /// 2026-07-28: questions wait in the task as `inputRequests` for `tasks/update`.
    V2026,
}

/// Called after every status change of a task (2025-11-25 status notifications).
pub(crate) type StatusHook = Arc<dyn Fn(&TaskRecord) + Send + Sync>;

/// A task running in this process.
struct Live {
    cancel: CancellationToken,
    changed: watch::Sender<u64>,
    on_status: Option<StatusHook>,
    /// Server-to-client requests sent for this task and not answered yet (2025-11-25), so a
    /// `tasks/result` stream can be handed them again.
    outstanding: Mutex<HashMap<String, (Sink, Value)>>,
    /// Where 2025-11-25 requests for this task go while a `tasks/result` waits on it.
    delivery: Mutex<Option<Sink>>,
}

const LIVE_SHARDS: usize = 32;

/// The task engine of one server.
pub(crate) struct Engine {
    store: Arc<dyn DynStore>,
    config: EngineConfig,
    live: [Mutex<HashMap<String, Arc<Live>>>; LIVE_SHARDS],
    running: Arc<Semaphore>,
    tool_limits: HashMap<String, Arc<Semaphore>>,
    backlog: AtomicUsize,
    sweeper: AtomicBool,
    this: Weak<Engine>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("backlog", &self.backlog.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What a new task needs.
pub(crate) struct NewTask {
    pub(crate) tool: Tool,
    pub(crate) args: JsonObject,
    pub(crate) owner: Option<String>,
    pub(crate) protocol: TaskProtocol,
    pub(crate) requested_ttl: Option<Duration>,
    pub(crate) client_capabilities: Value,
    pub(crate) principal: Option<Arc<str>>,
    pub(crate) flavor: Flavor,
    pub(crate) on_status: Option<StatusHook>,
}

fn shard_of(id: &str) -> usize {
    id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) as usize
        % LIVE_SHARDS
}

impl Engine {
    pub(crate) fn new<S: TaskStore>(
        store: S,
        config: EngineConfig,
        tool_limits: HashMap<String, usize>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            store: Arc::new(store),
            running: Arc::new(Semaphore::new(config.max_running.max(1))),
            tool_limits: tool_limits
                .into_iter()
                .map(|(k, n)| (k, Arc::new(Semaphore::new(n.max(1)))))
                .collect(),
            config,
            live: std::array::from_fn(|_| Mutex::default()),
            backlog: AtomicUsize::new(0),
            sweeper: AtomicBool::new(false),
            this: this.clone(),
        })
    }

    fn live(&self, id: &str) -> Option<Arc<Live>> {
        self.live[shard_of(id)]
            .lock()
            .expect("live lock")
            .get(id)
            .cloned()
    }

    fn resolve_ttl(&self, tool: &Tool, requested: Option<Duration>) -> Option<Duration> {
        let asked = requested.or(tool.ttl);
        match self.config.max_ttl {
            Some(max) => Some(asked.map_or(max, |t| t.min(max))),
            None => asked,
        }
    }

    /// Checks that the engine can take one more task, and counts it.
    fn admit(&self) -> Result<(), Error> {
        let limit = self.config.max_running + self.config.max_queued;
        let previous = self.backlog.fetch_add(1, Ordering::AcqRel);
        if previous >= limit {
            self.backlog.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Busy(format!(
                "too many tasks: {limit} are running or queued; try again later"
            )));
        }
        Ok(())
    }

    /// Makes the record of a new task and stores it; when this returns, `tasks/get` finds it.
    async fn create_record(
        &self,
        new: &NewTask,
        id: String,
        cancel: CancellationToken,
    ) -> Result<(TaskRecord, Arc<Live>), Error> {
        self.start_sweeper();
        let now = SystemTime::now();
        let record = TaskRecord {
            id,
            owner: new.owner.clone(),
            tool: new.tool.name.to_string(),
            arguments: new.args.clone(),
            protocol: new.protocol,
            status: TaskStatus::Working,
            status_message: None,
            created_at: now,
            updated_at: now,
            ttl: self.resolve_ttl(&new.tool, new.requested_ttl),
            poll_interval: new.tool.poll_interval,
            outcome: None,
            input_requests: BTreeMap::new(),
            input_responses: BTreeMap::new(),
            input_seq: 0,
            version: 0,
        };
        let live = Arc::new(Live {
            cancel,
            changed: watch::Sender::new(0),
            on_status: new.on_status.clone(),
            outstanding: Mutex::default(),
            delivery: Mutex::default(),
        });
        self.live[shard_of(&record.id)]
            .lock()
            .expect("live lock")
            .insert(record.id.clone(), Arc::clone(&live));
        if let Err(e) = self.store.create(record.clone()).await {
            self.live[shard_of(&record.id)]
                .lock()
                .expect("live lock")
                .remove(&record.id);
            return Err(e.into());
        }
        tracing::debug!(task = %record.id, tool = %record.tool, "task created");
        Ok((record, live))
    }

    /// Starts a task: stores it, then runs the tool in the background.
    pub(crate) async fn start(&self, new: NewTask) -> Result<TaskRecord, Error> {
        self.admit()?;
        let created = self
            .create_record(&new, random_id(), CancellationToken::new())
            .await;
        let (record, live) = match created {
            Ok(r) => r,
            Err(e) => {
                self.backlog.fetch_sub(1, Ordering::AcqRel);
                return Err(e);
            }
        };
        let backend = self.backend(&record.id, &live, new.flavor.clone());
        let cx = TaskContext::new(
            Arc::clone(&new.tool.name),
            live.cancel.clone(),
            new.client_capabilities.clone(),
            new.principal.clone(),
            backend,
        );
        cx.set_task_id(&record.id);
        if let Err(e) = new.tool.check_arguments(&new.args) {
            let future: ToolFuture = Box::pin(async move { Err(e) });
            self.launch(new.tool, record.clone(), live, future);
            return Ok(record);
        }
        let future = (new.tool.handler)(cx, new.args.clone());
        self.launch(new.tool, record.clone(), live, future);
        Ok(record)
    }

    /// Turns a call that has already started into a task (2026-07-28 calls whose tool ran a
    /// synchronous prelude). `cancel` is the token the tool already holds; `attach` receives
    /// the task's backend before the future resumes.
    pub(crate) async fn adopt(
        &self,
        new: NewTask,
        future: ToolFuture,
        cancel: CancellationToken,
        attach: impl FnOnce(&str, Arc<dyn CallBackend>),
    ) -> Result<TaskRecord, Error> {
        self.admit()?;
        let (record, live) = match self.create_record(&new, random_id(), cancel).await {
            Ok(r) => r,
            Err(e) => {
                self.backlog.fetch_sub(1, Ordering::AcqRel);
                return Err(e);
            }
        };
        attach(
            &record.id,
            self.backend(&record.id, &live, new.flavor.clone()),
        );
        self.launch(new.tool, record.clone(), live, future);
        Ok(record)
    }

    fn backend(&self, id: &str, live: &Arc<Live>, flavor: Flavor) -> Arc<dyn CallBackend> {
        Arc::new(TaskBackend {
            engine: self.this.upgrade().expect("the engine outlives its tasks"),
            id: id.to_owned(),
            cancel: live.cancel.clone(),
            flavor,
            last_write: Mutex::new(None),
        })
    }

    fn launch(&self, tool: Tool, record: TaskRecord, live: Arc<Live>, future: ToolFuture) {
        let engine = self.this.upgrade().expect("the engine is alive");
        tokio::spawn(async move {
            let id = record.id.clone();
            let end = engine.execute(&tool, &live, future).await;
            engine.finish(&tool, &id, record.protocol, end).await;
            engine.live[shard_of(&id)]
                .lock()
                .expect("live lock")
                .remove(&id);
            engine.backlog.fetch_sub(1, Ordering::AcqRel);
        });
    }

    async fn execute(&self, tool: &Tool, live: &Live, future: ToolFuture) -> RunEnd {
        let cancel = &live.cancel;
        let _running = tokio::select! {
            permit = Arc::clone(&self.running).acquire_owned() => permit.ok(),
            () = cancel.cancelled() => return RunEnd::Cancelled,
        };
        let _tool_slot = match self.tool_limits.get(&*tool.name) {
            Some(limit) => tokio::select! {
                permit = Arc::clone(limit).acquire_owned() => permit.ok(),
                () = cancel.cancelled() => return RunEnd::Cancelled,
            },
            None => None,
        };
        let mut future = CatchUnwind::new(future);
        let deadline = async {
            match tool.deadline {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let end = tokio::select! {
            end = &mut future => end,
            () = cancel.cancelled() => {
                // Cooperative first: the tool sees its token fire and may finish cleanly.
                match tokio::time::timeout(self.config.cancel_grace, &mut future).await {
                    Ok(end) => end,
                    Err(_) => return RunEnd::Cancelled,
                }
            }
            () = deadline => {
                cancel.cancel();
                return RunEnd::Returned(Err(ToolError::protocol(
                    crate::jsonrpc::INTERNAL_ERROR,
                    format!(
                        "the task exceeded its execution deadline of {} s",
                        tool.deadline.unwrap_or_default().as_secs()
                    ),
                )));
            }
        };
        match end {
            Ok(result) => RunEnd::Returned(result),
            Err(message) => {
                tracing::error!(tool = %tool.name, panic = %message, "task panicked");
                RunEnd::Panicked
            }
        }
    }

    async fn finish(&self, tool: &Tool, id: &str, protocol: TaskProtocol, end: RunEnd) {
        let outcome = match outcome_of(tool, end) {
            Some(o) => o,
            None => CallOutcome::Error(
                Error::Internal("the tool stopped for input outside of a request".into()).into(),
            ),
        };
        let (status, message) = match &outcome {
            CallOutcome::Result(r) if r.is_error && protocol == TaskProtocol::V2025 => (
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
        let retention = self.config.min_retention;
        let result = self
            .update(id, |rec| {
                if !rec.status.can_move_to(status) {
                    return false;
                }
                rec.status = status;
                rec.status_message = message.clone();
                if status != TaskStatus::Cancelled {
                    rec.outcome = Some(outcome.clone());
                }
                rec.input_requests.clear();
                keep_readable(rec, retention);
                true
            })
            .await;
        match result {
            Ok(Some((rec, true))) => {
                tracing::debug!(task = %id, status = %rec.status, "task finished");
            }
            Ok(_) => {
                tracing::debug!(task = %id, "task already settled; its late outcome is dropped")
            }
            Err(e) => tracing::error!(task = %id, error = %e, "cannot store the task's outcome"),
        }
    }

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
    async fn update_from(
        &self,
        id: &str,
        mut read: Option<TaskRecord>,
        mut change: impl FnMut(&mut TaskRecord) -> bool,
    ) -> Result<Option<(TaskRecord, bool)>, Error> {
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
            if !change(&mut rec) {
                return Ok(Some((rec, false)));
            }
            rec.updated_at = SystemTime::now().max(rec.updated_at);
            if self.store.compare_and_set(rec.clone(), version).await? {
                rec.version = version + 1;
                self.publish(&rec, before != rec.status);
                return Ok(Some((rec, true)));
            }
        }
    }

    fn publish(&self, rec: &TaskRecord, status_changed: bool) {
        if let Some(live) = self.live(&rec.id) {
            live.changed.send_replace(rec.version);
            if status_changed && let Some(hook) = &live.on_status {
                hook(rec);
            }
        }
    }

    /// The task, if it exists, has not expired and `owner` may see it.
    pub(crate) async fn get(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<Option<TaskRecord>, Error> {
        let Some(rec) = self.store.get(id).await? else {
            return Ok(None);
        };
        Ok(visible(rec, owner))
    }

    /// Cancels a task. Returns the task as it is afterwards and whether this call cancelled
    /// it (`false`: it was already terminal). `None` for an unknown task.
    pub(crate) async fn cancel(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<Option<(TaskRecord, bool)>, Error> {
        let Some(visible) = self.get(id, owner).await? else {
            return Ok(None);
        };
        let retention = self.config.min_retention;
        let result = self
            .update_from(id, Some(visible), |rec| {
                if rec.status.is_terminal() {
                    return false;
                }
                rec.status = TaskStatus::Cancelled;
                rec.status_message = Some("The task was cancelled by request.".into());
                rec.input_requests.clear();
                keep_readable(rec, retention);
                true
            })
            .await?;
        if let Some(live) = self.live(id) {
            live.cancel.cancel();
        }
        Ok(result)
    }

    /// Hands the client's answers to a task waiting for input (2026-07-28 `tasks/update`).
    /// Answers for keys that are not outstanding are ignored. `None` for an unknown task.
    pub(crate) async fn answer(
        &self,
        id: &str,
        owner: Option<&str>,
        responses: &JsonObject,
    ) -> Result<Option<TaskRecord>, Error> {
        let Some(visible) = self.get(id, owner).await? else {
            return Ok(None);
        };
        let result = self
            .update_from(id, Some(visible), |rec| {
                if rec.status.is_terminal() {
                    return false;
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
        Ok(result.map(|(rec, _)| rec))
    }

    /// A receiver that wakes after every write to a task running in this process.
    pub(crate) fn watch(&self, id: &str) -> Option<watch::Receiver<u64>> {
        self.live(id).map(|l| l.changed.subscribe())
    }

    /// Waits until the task is terminal and returns it (2025-11-25 `tasks/result`).
    /// While it waits, the task's requests to the client go to `sink`.
    pub(crate) async fn wait_terminal(
        &self,
        id: &str,
        owner: Option<&str>,
        sink: &Sink,
        cancel: &CancellationToken,
    ) -> Result<Option<TaskRecord>, Error> {
        if let Some(live) = self.live(id) {
            *live.delivery.lock().expect("delivery lock") = Some(sink.clone());
            let resend: Vec<Value> = live
                .outstanding
                .lock()
                .expect("outstanding lock")
                .values()
                .filter(|(sent_on, _)| !sent_on.0.same_channel(&sink.0))
                .map(|(_, message)| message.clone())
                .collect();
            for message in resend {
                sink.send(&message);
            }
        }
        loop {
            let changed = self.watch(id);
            let Some(rec) = self.get(id, owner).await? else {
                return Ok(None);
            };
            if rec.status.is_terminal() {
                return Ok(Some(rec));
            }
            let wait = async {
                match changed {
                    Some(mut rx) => {
                        if rx.changed().await.is_err() {
                            // The task left this process; read the store again soon.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                    // Running in another process: poll at the task's own interval.
                    None => tokio::time::sleep(rec.poll_interval).await,
                }
            };
            tokio::select! {
                () = wait => {}
                () = cancel.cancelled() => return Err(Error::Cancelled),
            }
        }
    }

    /// One page of the owner's tasks (2025-11-25 `tasks/list`).
    pub(crate) async fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, Error> {
        match self.store.list(owner, cursor, limit).await {
            Ok(mut page) => {
                let now = SystemTime::now();
                page.tasks
                    .retain(|t| t.expires_at().is_none_or(|at| at > now));
                Ok(page)
            }
            Err(StoreError::InvalidCursor(c)) => {
                Err(Error::InvalidParams(format!("invalid cursor {c:?}")))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn start_sweeper(&self) {
        if self.sweeper.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = self.this.clone();
        let interval = self.config.sweep_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(engine) = weak.upgrade() else { break };
                engine.sweep().await;
            }
        });
    }

    /// Deletes expired tasks, in batches.
    pub(crate) async fn sweep(&self) -> usize {
        const BATCH: usize = 1000;
        let mut total = 0;
        loop {
            match self.store.expire(SystemTime::now(), BATCH).await {
                Ok(ids) => {
                    total += ids.len();
                    if ids.len() < BATCH {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "expiring tasks failed");
                    break;
                }
            }
        }
        if total > 0 {
            tracing::debug!(expired = total, "expired tasks deleted");
        }
        total
    }

    async fn park(&self, id: &str, request: &InputRequest) -> Result<Option<String>, Error> {
        let mut key = None;
        self.update(id, |rec| {
            if rec.status.is_terminal() {
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

    async fn unpark(&self, id: &str, key: &str) -> Result<(), Error> {
        self.update(id, |rec| {
            let removed = rec.input_requests.remove(key).is_some();
            let consumed = rec.input_responses.remove(key).is_some();
            if rec.input_requests.is_empty() && rec.status == TaskStatus::InputRequired {
                rec.status = TaskStatus::Working;
                return true;
            }
            removed || consumed
        })
        .await?;
        Ok(())
    }

    /// 2026-07-28: parks the question in the task and waits for `tasks/update` to answer it.
    async fn input_by_update(
        &self,
        id: &str,
        request: InputRequest,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let key = self
            .park(id, &request)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?
            .ok_or_else(ToolError::cancelled)?;
        let mut changed = self
            .watch(id)
            .ok_or_else(|| ToolError::new("the task is not running in this process"))?;
        loop {
            let rec = self
                .store
                .get(id)
                .await
                .map_err(|e| ToolError::new(e.to_string()))?
                .ok_or_else(ToolError::cancelled)?;
            if rec.status.is_terminal() {
                return Err(ToolError::cancelled());
            }
            if let Some(answer) = rec.input_responses.get(&key).cloned() {
                self.unpark(id, &key)
                    .await
                    .map_err(|e| ToolError::new(e.to_string()))?;
                return Ok(answer);
            }
            tokio::select! {
                r = changed.changed() => if r.is_err() { return Err(ToolError::cancelled()) },
                () = cancel.cancelled() => return Err(ToolError::cancelled()),
            }
        }
    }

    /// 2025-11-25: parks the question and sends it to the client as a request tagged with the
    /// task, on the stream of a waiting `tasks/result` or else the connection.
    async fn input_by_request(
        &self,
        id: &str,
        conn: &Connection,
        request: InputRequest,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let key = self
            .park(id, &request)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?
            .ok_or_else(ToolError::cancelled)?;
        let live = self.live(id);
        let sink = live
            .as_ref()
            .and_then(|l| l.delivery.lock().expect("delivery lock").clone())
            .unwrap_or_else(|| conn.sink.clone());
        let mut params = request.params.clone();
        if let Value::Object(p) = &mut params {
            let meta = p
                .entry("_meta")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Value::Object(meta) = meta {
                meta.insert(RELATED_TASK.into(), json!({ "taskId": id }));
            }
        }
        let record_outstanding = |message: &Value| {
            if let Some(live) = &live {
                live.outstanding
                    .lock()
                    .expect("outstanding lock")
                    .insert(key.clone(), (sink.clone(), message.clone()));
            }
        };
        let answer = conn
            .request_observed(&sink, &request.method, params, cancel, record_outstanding)
            .await;
        if let Some(live) = &live {
            live.outstanding
                .lock()
                .expect("outstanding lock")
                .remove(&key);
        }
        let _ = self.unpark(id, &key).await;
        match answer {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ToolError::new(format!(
                "the client answered {} with an error: {}",
                request.method, e.message
            ))),
            Err(RequestAborted::Cancelled) => Err(ToolError::cancelled()),
            Err(RequestAborted::Closed) => Err(ToolError::new("the client went away")),
        }
    }

    /// Settles the tasks an earlier process left unfinished: a tool declared
    /// `on_restart = "rerun"` runs again from its stored arguments under the same id; every
    /// other task (and any task whose tool no longer exists) ends `failed` with `-32603`.
    /// Nothing is re-executed silently: each rerun is logged.
    pub(crate) async fn recover(&self, registry: &Registry) -> Result<Recovery, Error> {
        let mut report = Recovery::default();
        for rec in self.store_unfinished().await? {
            if self.live(&rec.id).is_some() {
                continue;
            }
            match registry.get(&rec.tool) {
                Some(tool) if tool.on_restart == RestartPolicy::Rerun => {
                    self.rerun(tool.clone(), rec).await?;
                    report.rerun += 1;
                }
                _ => {
                    let retention = self.config.min_retention;
                    let (_, changed) = self
                        .update(&rec.id, |r| {
                            if r.status.is_terminal() {
                                return false;
                            }
                            r.status = TaskStatus::Failed;
                            r.status_message =
                                Some("The server restarted before the task finished.".into());
                            r.outcome = Some(CallOutcome::Error(
                                Error::Internal(
                                    "the task was interrupted by a server restart".into(),
                                )
                                .into(),
                            ));
                            r.input_requests.clear();
                            keep_readable(r, retention);
                            true
                        })
                        .await?
                        .unwrap_or((rec, false));
                    if changed {
                        report.failed += 1;
                    }
                }
            }
        }
        if report.rerun + report.failed > 0 {
            tracing::info!(
                rerun = report.rerun,
                failed = report.failed,
                "settled tasks interrupted by a restart"
            );
        }
        Ok(report)
    }

    async fn store_unfinished(&self) -> Result<Vec<TaskRecord>, Error> {
        Ok(self.store.unfinished().await?)
    }

    async fn rerun(&self, tool: Tool, rec: TaskRecord) -> Result<(), Error> {
        self.admit()?;
        let live = Arc::new(Live {
            cancel: CancellationToken::new(),
            changed: watch::Sender::new(rec.version),
            on_status: None,
            outstanding: Mutex::default(),
            delivery: Mutex::default(),
        });
        self.live[shard_of(&rec.id)]
            .lock()
            .expect("live lock")
            .insert(rec.id.clone(), Arc::clone(&live));
        let updated = self
            .update(&rec.id, |r| {
                if r.status.is_terminal() {
                    return false;
                }
                r.status = TaskStatus::Working;
                r.status_message = Some("Running again after a server restart.".into());
                r.input_requests.clear();
                r.input_responses.clear();
                true
            })
            .await;
        let record = match updated {
            Ok(Some((record, true))) => record,
            other => {
                self.live[shard_of(&rec.id)]
                    .lock()
                    .expect("live lock")
                    .remove(&rec.id);
                self.backlog.fetch_sub(1, Ordering::AcqRel);
                return other.map(|_| ());
            }
        };
        tracing::info!(task = %record.id, tool = %record.tool, "rerunning a task after a restart");
        // The client's capabilities were not kept: a rerun cannot ask the client anything.
        let backend = self.backend(&record.id, &live, Flavor::V2026);
        let cx = TaskContext::new(
            Arc::clone(&tool.name),
            live.cancel.clone(),
            json!({}),
            record.owner.as_deref().map(Into::into),
            backend,
        );
        cx.set_task_id(&record.id);
        let future = (tool.handler)(cx, record.arguments.clone());
        self.launch(tool, record, live, future);
        Ok(())
    }

    async fn set_status_message(&self, id: &str, message: String) {
        let _ = self
            .update(id, |rec| {
                if rec.status.is_terminal() || rec.status_message.as_deref() == Some(&message) {
                    return false;
                }
                rec.status_message = Some(message.clone());
                true
            })
            .await;
    }
}

/// What [`Server::recover`](crate::Server::recover) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Tasks run again (tools declared `on_restart = "rerun"`).
    pub rerun: usize,
    /// Tasks settled as `failed`.
    pub failed: usize,
}

/// The `_meta` key that ties a message to a task (2025-11-25).
pub(crate) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Makes sure a finished task stays readable for `retention`, even past its TTL.
fn keep_readable(rec: &mut TaskRecord, retention: Duration) {
    if let Some(ttl) = rec.ttl {
        let alive = SystemTime::now()
            .duration_since(rec.created_at)
            .unwrap_or_default();
        if ttl < alive + retention {
            rec.ttl = Some(alive + retention);
        }
    }
}

/// `rec` if it has not expired and `owner` may see it. A task with an owner is visible only
/// to that owner; one without is a bearer handle.
fn visible(rec: TaskRecord, owner: Option<&str>) -> Option<TaskRecord> {
    if rec.owner.is_some() && rec.owner.as_deref() != owner {
        return None;
    }
    if rec.expires_at().is_some_and(|at| at <= SystemTime::now()) {
        return None;
    }
    Some(rec)
}

/// The backend of a tool running as a task.
struct TaskBackend {
    engine: Arc<Engine>,
    id: String,
    cancel: CancellationToken,
    flavor: Flavor,
    last_write: Mutex<Option<Instant>>,
}

impl CallBackend for TaskBackend {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            match &self.flavor {
                Flavor::V2026 => {
                    self.engine
                        .input_by_update(&self.id, request, &self.cancel)
                        .await
                }
                Flavor::V2025 { conn, .. } => {
                    self.engine
                        .input_by_request(&self.id, conn, request, &self.cancel)
                        .await
                }
            }
        })
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if self.cancel.is_cancelled() {
            return;
        }
        if let Flavor::V2025 {
            conn,
            progress_token,
        } = &self.flavor
        {
            Notifier {
                sink: conn.sink.clone(),
                progress_token: progress_token.clone(),
                log: crate::call::LogGate::Connection(Arc::clone(conn)),
            }
            .progress(progress, total, message);
        }
        let text = match (message, total) {
            (Some(m), _) => m.to_owned(),
            (None, Some(t)) => format!("{progress}/{t}"),
            (None, None) => format!("{progress}"),
        };
        let now = Instant::now();
        {
            let mut last = self.last_write.lock().expect("progress lock");
            if last
                .is_some_and(|l| now.duration_since(l) < self.engine.config.progress_write_interval)
            {
                return;
            }
            *last = Some(now);
        }
        let engine = Arc::clone(&self.engine);
        let id = self.id.clone();
        tokio::spawn(async move { engine.set_status_message(&id, text).await });
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        // The 2026-07-28 extension does not carry log messages for tasks.
        if let Flavor::V2025 { conn, .. } = &self.flavor {
            Notifier {
                sink: conn.sink.clone(),
                progress_token: None,
                log: crate::call::LogGate::Connection(Arc::clone(conn)),
            }
            .log(level, logger, data);
        }
    }
}
