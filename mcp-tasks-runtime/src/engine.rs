//! The task engine: turns a tool call into a durable task, runs it under a lease, and
//! settles it — correctly when several processes share one store.
//!
//! Every change to a task is a compare-and-set in the [`TaskStore`], checked against the one
//! transition table ([`TaskStatus::can_move_to`]); a late change after a terminal status is a
//! silent no-op. The process that runs a task holds its lease ([`TaskRecord::lease`]) and
//! renews it while the tool runs; each of its writes is fenced by the lease epoch, so a
//! process whose lease lapsed can never overwrite a task another process took over.
//!
//! What the engine learns of a task — its own writes, and through the store's change feed
//! ([`ClaimStore::changes`]) the writes of other processes — it hands to whoever waits in
//! this process: the tool waiting for an answer, `tasks/result`, subscriptions, and the
//! [`Delivery`] a wire adapter attached to carry the task's questions and progress to its
//! client. Queued tasks are records in the store, claimed by any process with a free slot.
//! A task whose lease lapsed (its process died or froze) is settled by its tool's restart
//! policy, by any live process. The engine knows nothing of wire formats or protocol eras.

use crate::call::{CatchUnwind, RunEnd, input_key, outcome_of};
use crate::context::{BoxFuture, CallBackend, TaskContext};
use crate::error::{CallOutcome, Error, ToolError};
use crate::model::{InputRequest, JsonObject, LogLevel};
use crate::quota::{Quotas, Stage};
use crate::store::{Changes, ClaimStore, StoreError, TaskPage, TaskStore};
use crate::task::{CancelRequest, Lease, SettlePolicy, TaskRecord, TaskStatus, random_id};
use crate::tool::{Registry, RestartPolicy, Tool, ToolFuture};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// Limits and timings of the task engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Tasks running at once in this process, over all tools.
    pub max_running: usize,
    /// Tasks this process created that may wait for a free slot; past this, new tasks are
    /// refused as busy.
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
    /// How long a lease lasts unless renewed. The runner renews it every third of this; a
    /// task whose runner stopped renewing is taken over about this long after.
    pub lease: Duration,
    /// How often the engine reads the store's change feed to learn what other processes
    /// did (shared stores only). It bounds the delay of cross-process signals; a store that
    /// wakes the engine when something changed ([`ClaimStore::changed`]) is read sooner.
    pub signal_interval: Duration,
    /// Whether this process runs tools. `false` serves only: tasks wait for a worker.
    pub execute: bool,
    /// Keep anonymous tasks bound to the session that created them. Off by default: without
    /// an authenticated principal the task id (≥122 random bits) is a bearer handle that
    /// works from any session, so a client can resume a task after a reconnect or restart
    /// (`tasks/list` still shows a session only what it created).
    pub strict_session_binding: bool,
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
            lease: Duration::from_secs(30),
            signal_interval: Duration::from_millis(50),
            execute: true,
            strict_session_binding: false,
        }
    }
}

impl EngineConfig {
    /// How often a runner renews its leases.
    fn renew_every(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(10))
    }

    /// How often lapsed leases are looked for.
    fn lapse_scan_every(&self) -> Duration {
        (self.lease / 4).clamp(Duration::from_millis(20), Duration::from_secs(5))
    }
}

/// [`TaskStore`] and [`ClaimStore`] with boxed futures, so the engine can hold any backend.
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
    fn claim<'a>(
        &'a self,
        worker: &'a str,
        until: SystemTime,
        limit: usize,
        skip: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>>;
    fn lapsed(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TaskRecord>, StoreError>>;
    fn changes(
        &self,
        cursor: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Changes, StoreError>>;
    fn changed(&self) -> BoxFuture<'_, ()>;
    fn is_shared(&self) -> bool;
}

impl<S: TaskStore + ClaimStore> DynStore for S {
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
    fn claim<'a>(
        &'a self,
        worker: &'a str,
        until: SystemTime,
        limit: usize,
        skip: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(ClaimStore::claim(self, worker, until, limit, skip))
    }
    fn lapsed(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(ClaimStore::lapsed(self, now, limit))
    }
    fn changes(
        &self,
        cursor: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Changes, StoreError>> {
        Box::pin(ClaimStore::changes(self, cursor, limit))
    }
    fn changed(&self) -> BoxFuture<'_, ()> {
        Box::pin(ClaimStore::changed(self))
    }
    fn is_shared(&self) -> bool {
        ClaimStore::is_shared(self)
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Internal(e.to_string())
    }
}

/// How a task's questions, progress and log lines reach its client: the seam a wire
/// adapter implements. The engine calls it in the process that holds the client.
pub(crate) trait Delivery: Send + Sync + 'static {
    /// The task changed (as stored now). Called for every version this process sees, in
    /// order, at most once each; `status_changed` says whether the status moved.
    fn changed(&self, engine: &Arc<Engine>, record: &TaskRecord, status_changed: bool);
    /// Progress of the tool, when it runs in this process.
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>);
    /// A log line of the tool, when it runs in this process.
    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value);
    /// `true` once the client it serves is gone, so another may take its place.
    fn is_closed(&self) -> bool;
    /// For the adapter to find its own type again.
    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

/// A run of a task's tool in this process.
struct Run {
    /// The lease epoch it runs under; every write it makes is fenced by it.
    epoch: u64,
    cancel: CancellationToken,
    /// Set when the lease was lost to another process: the run stops and writes nothing.
    lost: AtomicBool,
}

/// What this process keeps of a task it runs, watches or delivers.
struct Live {
    changed: watch::Sender<u64>,
    /// The version and status last handed on, so each version is handed on once.
    seen: Mutex<(u64, Option<TaskStatus>)>,
    run: Mutex<Option<Arc<Run>>>,
    delivery: Mutex<Option<Arc<dyn Delivery>>>,
}

impl Live {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            changed: watch::Sender::new(0),
            seen: Mutex::new((0, None)),
            run: Mutex::default(),
            delivery: Mutex::default(),
        })
    }
}

/// Locks a mutex whose critical sections leave their data consistent even when they
/// panic (they only insert, remove or replace): a poisoned lock is still safe to use.
fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Running tasks of this process, over all tools and per tool.
#[derive(Default)]
struct Slots {
    running: usize,
    per_tool: HashMap<String, usize>,
}

const LIVE_SHARDS: usize = 32;

/// The task engine of one process.
pub(crate) struct Engine {
    store: Arc<dyn DynStore>,
    config: EngineConfig,
    registry: Registry,
    /// This process's name in leases.
    worker: String,
    live: [Mutex<HashMap<String, Arc<Live>>>; LIVE_SHARDS],
    slots: Mutex<Slots>,
    tool_limits: HashMap<String, usize>,
    /// Tasks this process created that wait for a slot (here or in another process).
    queued_here: Mutex<HashSet<String>>,
    /// Wakes the claim loop: a slot freed, or a task may be waiting.
    claim_wake: Arc<Notify>,
    background: AtomicBool,
    stopping: AtomicBool,
    /// Per-requestor limits on the tasks this process creates.
    quotas: Quotas,
    /// The application state tools take.
    state: crate::state::StateMap,
    /// Unfinished tasks this process created, with the requestor whose live-task quota each
    /// counts against until it ends.
    counted: [Mutex<HashMap<String, Box<str>>>; LIVE_SHARDS],
    /// Finished tasks counted as retained, by when they expire.
    retained: Mutex<BTreeSet<(SystemTime, String, Box<str>)>>,
    this: Weak<Engine>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("worker", &self.worker)
            .field("config", &self.config)
            .field("running", &lock(&self.slots).running)
            .finish_non_exhaustive()
    }
}

/// What a new task needs.
pub(crate) struct NewTask {
    pub(crate) tool: Tool,
    pub(crate) args: JsonObject,
    pub(crate) owner: Option<String>,
    pub(crate) settle: SettlePolicy,
    pub(crate) requested_ttl: Option<Duration>,
    pub(crate) client_capabilities: Value,
    pub(crate) delivery: Option<Arc<dyn Delivery>>,
}

fn shard_of(id: &str) -> usize {
    id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) as usize
        % LIVE_SHARDS
}

/// The principal of an owner key, for the tool's context.
fn principal_of(owner: Option<&str>) -> Option<Arc<str>> {
    owner?.strip_prefix("principal:").map(Into::into)
}

/// The stored form of a client's error answer to a question, which the waiting tool turns
/// back into an error.
const ANSWER_ERROR: &str = "io.mcp-tasks/answerError";

/// A client's error answer to a question, in the form [`Engine::answer`] stores.
pub(crate) fn error_answer(message: &str) -> Value {
    json!({ ANSWER_ERROR: message })
}

impl Engine {
    pub(crate) fn new<S: TaskStore + ClaimStore>(
        store: S,
        config: EngineConfig,
        registry: Registry,
        quotas: Quotas,
        state: crate::state::StateMap,
    ) -> Arc<Self> {
        let tool_limits = registry
            .iter()
            .filter_map(|t| Some((t.name.to_string(), t.max_concurrency?.max(1))))
            .collect();
        let worker = format!("{}-{}", std::process::id(), &random_id()[..8]);
        Arc::new_cyclic(|this| Self {
            store: Arc::new(store),
            config,
            registry,
            worker,
            live: std::array::from_fn(|_| Mutex::default()),
            slots: Mutex::default(),
            tool_limits,
            queued_here: Mutex::default(),
            claim_wake: Arc::new(Notify::new()),
            background: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            quotas,
            state,
            counted: std::array::from_fn(|_| Mutex::default()),
            retained: Mutex::default(),
            this: this.clone(),
        })
    }

    fn arc(&self) -> Arc<Engine> {
        self.this
            .upgrade()
            .expect("the engine is alive while it is used")
    }

    /// This process's name in leases.
    pub(crate) fn worker(&self) -> &str {
        &self.worker
    }

    fn live(&self, id: &str) -> Option<Arc<Live>> {
        lock(&self.live[shard_of(id)]).get(id).cloned()
    }

    fn live_entry(&self, id: &str) -> Arc<Live> {
        Arc::clone(
            lock(&self.live[shard_of(id)])
                .entry(id.to_owned())
                .or_insert_with(Live::new),
        )
    }

    /// Forgets a task nobody here runs, watches or delivers any more.
    fn release(&self, id: &str) {
        let mut shard = lock(&self.live[shard_of(id)]);
        let idle = shard.get(id).is_some_and(|live| {
            live.changed.receiver_count() == 0
                && lock(&live.run).is_none()
                && lock(&live.delivery).is_none()
        });
        if idle {
            shard.remove(id);
        }
    }

    fn resolve_ttl(&self, tool: &Tool, requested: Option<Duration>) -> Option<Duration> {
        let asked = requested.or(tool.ttl);
        match self.config.max_ttl {
            Some(max) => Some(asked.map_or(max, |t| t.min(max))),
            None => asked,
        }
    }

    /// Takes a running slot for `tool`, if one is free here.
    fn reserve(&self, tool: &str) -> bool {
        let mut slots = lock(&self.slots);
        if slots.running >= self.config.max_running.max(1) {
            return false;
        }
        if let Some(limit) = self.tool_limits.get(tool)
            && slots.per_tool.get(tool).copied().unwrap_or(0) >= *limit
        {
            return false;
        }
        slots.running += 1;
        *slots.per_tool.entry(tool.to_owned()).or_default() += 1;
        true
    }

    fn unreserve(&self, tool: &str) {
        {
            let mut slots = lock(&self.slots);
            slots.running = slots.running.saturating_sub(1);
            if let Some(n) = slots.per_tool.get_mut(tool) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    slots.per_tool.remove(tool);
                }
            }
        }
        self.claim_wake.notify_one();
    }

    /// The tools at their limit here, which a claim must leave for other processes.
    fn full_tools(&self) -> Vec<String> {
        let slots = lock(&self.slots);
        self.tool_limits
            .iter()
            .filter(|(tool, limit)| slots.per_tool.get(*tool).copied().unwrap_or(0) >= **limit)
            .map(|(tool, _)| tool.clone())
            .collect()
    }

    /// Refuses a new task when this process already has as many running and waiting as it
    /// may.
    fn admit(&self) -> Result<(), Error> {
        let limit = self.config.max_running + self.config.max_queued;
        let running = lock(&self.slots).running;
        let queued = lock(&self.queued_here).len();
        if running + queued >= limit {
            return Err(Error::Busy(format!(
                "too many tasks: {limit} are running or queued; try again later"
            )));
        }
        Ok(())
    }

    fn new_record(&self, new: &NewTask, lease: Option<Lease>) -> TaskRecord {
        let now = SystemTime::now();
        TaskRecord {
            id: random_id(),
            owner: new.owner.clone(),
            tool: new.tool.name.to_string(),
            arguments: new.args.clone(),
            settle: new.settle,
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
            client_capabilities: new.client_capabilities.clone(),
            epoch: u64::from(lease.is_some()),
            lease,
            cancel_requested: None,
            version: 0,
        }
    }

    fn my_lease(&self) -> Lease {
        Lease {
            worker: self.worker.clone(),
            until: SystemTime::now() + self.config.lease,
        }
    }

    /// Stores a new record, with its delivery attached first so no change is missed, and
    /// counts it against its requestor's quotas.
    async fn create(
        &self,
        record: &TaskRecord,
        delivery: Option<Arc<dyn Delivery>>,
    ) -> Result<(), Error> {
        self.ensure_background();
        let requestor = record.owner.as_deref().unwrap_or("anonymous");
        let ticket = self.quotas.admit(requestor)?;
        lock(&self.counted[shard_of(&record.id)]).insert(record.id.clone(), requestor.into());
        if let Some(delivery) = &delivery {
            *lock(&self.live_entry(&record.id).delivery) = Some(Arc::clone(delivery));
        }
        if let Err(e) = self.store.create(record.clone()).await {
            lock(&self.counted[shard_of(&record.id)]).remove(&record.id);
            if let Some(live) = self.live(&record.id) {
                *lock(&live.delivery) = None;
            }
            self.release(&record.id);
            return Err(e.into());
        }
        ticket.commit();
        metrics::counter!("mcp_tasks_created_total", "tool" => record.tool.clone()).increment(1);
        tracing::debug!(task = %record.id, tool = %record.tool, leased = record.lease.is_some(), "task created");
        Ok(())
    }

    /// Starts a task: stores it, then runs the tool here if a slot is free, or leaves it
    /// queued for whichever process frees a slot first. When this returns, `tasks/get`
    /// finds the task in every process sharing the store.
    pub(crate) async fn start(&self, new: NewTask) -> Result<TaskRecord, Error> {
        self.admit()?;
        let run_now = self.config.execute && self.reserve(&new.tool.name);
        let record = self.new_record(&new, run_now.then(|| self.my_lease()));
        if let Err(e) = self.create(&record, new.delivery.clone()).await {
            if run_now {
                self.unreserve(&new.tool.name);
            }
            return Err(e);
        }
        if run_now {
            self.launch(new.tool, record.clone(), None);
        } else {
            let queued = {
                let mut queued = lock(&self.queued_here);
                queued.insert(record.id.clone());
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
        {
            let mut slots = lock(&self.slots);
            slots.running += 1;
            *slots.per_tool.entry(new.tool.name.to_string()).or_default() += 1;
        }
        let record = self.new_record(&new, Some(self.my_lease()));
        if let Err(e) = self.create(&record, new.delivery.clone()).await {
            self.unreserve(&new.tool.name);
            return Err(e);
        }
        let run = self.begin_run(&record, cancel);
        attach(&record.id, self.backend(&record, &run));
        self.spawn_run(new.tool, record.clone(), run, future);
        Ok(record)
    }

    fn begin_run(&self, record: &TaskRecord, cancel: CancellationToken) -> Arc<Run> {
        let run = Arc::new(Run {
            epoch: record.epoch,
            cancel,
            lost: AtomicBool::new(false),
        });
        *lock(&self.live_entry(&record.id).run) = Some(Arc::clone(&run));
        run
    }

    fn backend(&self, record: &TaskRecord, run: &Arc<Run>) -> Arc<dyn CallBackend> {
        Arc::new(TaskBackend {
            engine: self.arc(),
            id: record.id.clone(),
            run: Arc::clone(run),
            last_write: Mutex::new(None),
        })
    }

    /// Runs the tool of a task this process holds the lease on (a slot is reserved).
    fn launch(&self, tool: Tool, record: TaskRecord, future: Option<ToolFuture>) {
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
            match tool.check_arguments(&record.arguments) {
                Ok(()) => (tool.handler)(cx, record.arguments.clone()),
                Err(e) => Box::pin(async move { Err(e) }),
            }
        });
        self.spawn_run(tool, record, run, future);
    }

    fn spawn_run(&self, tool: Tool, record: TaskRecord, run: Arc<Run>, future: ToolFuture) {
        let engine = self.arc();
        let span = tracing::info_span!(
            "task",
            task = %record.id,
            tool = %tool.name,
            epoch = record.epoch,
            status = tracing::field::Empty,
        );
        let running = async move {
            let id = record.id.clone();
            let started = Instant::now();
            metrics::gauge!("mcp_tasks_running").increment(1.0);
            tracing::debug!("run started");
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
            tracing::debug!(status, elapsed_ms = elapsed.as_millis() as u64, "run ended");
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
                *lock(&live.run) = None;
            }
            engine.release(&id);
            engine.unreserve(&tool.name);
        };
        tokio::spawn(tracing::Instrument::instrument(running, span));
    }

    /// Runs the tool until it ends. `None` when the lease was lost: the caller must write
    /// nothing.
    async fn execute(
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
                tracing::error!(tool = %tool.name, panic = %message, "task panicked");
                RunEnd::Panicked
            }
        })
    }

    /// Extends the lease of a running task; stops the run when the lease is gone.
    async fn renew(&self, id: &str, run: &Run) {
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
            Err(e) => tracing::warn!(task = %id, error = %e, "cannot renew the task's lease"),
        }
    }

    fn lose(&self, id: &str, run: &Run) {
        if !run.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(task = %id, "lost the task's lease; stopping its tool");
        }
        run.cancel.cancel();
    }

    /// Stores the outcome of a run; returns what became of the task, for the logs.
    async fn finish(&self, tool: &Tool, id: &str, run: &Run, end: RunEnd) -> &'static str {
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
                    tracing::warn!(task = %id, error = %e, "cannot store the task's outcome yet; trying again");
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
                tracing::error!(task = %id, error = %e, "cannot store the task's outcome");
                "store failed"
            }
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
                if before != rec.status {
                    tracing::debug!(task = %rec.id, tool = %rec.tool, from = %before, to = %rec.status, "task status changed");
                }
                self.observe(&rec);
                return Ok(Some((rec, true)));
            }
        }
    }

    /// Hands a version of a task on to whatever waits on it here.
    fn observe(&self, rec: &TaskRecord) {
        if rec.status.is_terminal() {
            self.uncount(rec);
        }
        let Some(live) = self.live(&rec.id) else {
            return;
        };
        let status_changed = {
            let mut seen = lock(&live.seen);
            if seen.1.is_some() && rec.version <= seen.0 {
                return;
            }
            let changed = seen.1 != Some(rec.status);
            *seen = (rec.version, Some(rec.status));
            changed
        };
        live.changed.send_replace(rec.version);
        let run = lock(&live.run).clone();
        if let Some(run) = run {
            if rec.status.is_terminal() {
                run.cancel.cancel();
            } else if !rec.is_held_by(&self.worker, run.epoch) {
                self.lose(&rec.id, &run);
            }
        }
        let delivery = lock(&live.delivery).clone();
        if let Some(delivery) = delivery {
            delivery.changed(&self.arc(), rec, status_changed);
            if rec.status.is_terminal() {
                *lock(&live.delivery) = None;
            }
        }
        if rec.status.is_terminal() {
            drop(live);
            self.release(&rec.id);
        }
    }

    /// A task this process created ended: it counts as retained until it expires.
    fn uncount(&self, rec: &TaskRecord) {
        let Some(requestor) = lock(&self.counted[shard_of(&rec.id)]).remove(&rec.id) else {
            return;
        };
        self.quotas.finished(&requestor);
        // A task kept until deleted stays counted as retained.
        if let Some(at) = rec.expires_at() {
            lock(&self.retained).insert((at, rec.id.clone(), requestor));
        }
    }

    /// Stops counting finished tasks whose time to be kept is over.
    fn uncount_expired(&self) {
        let now = SystemTime::now();
        let mut retained = lock(&self.retained);
        while retained.first().is_some_and(|first| first.0 <= now) {
            if let Some((_, _, requestor)) = retained.pop_first() {
                self.quotas.gone(&requestor, Stage::Retained);
            }
        }
    }

    /// `rec` if it has not expired and `owner` may see it. A task owned by a principal is
    /// visible only to that principal; a task owned by a session is a bearer handle unless
    /// sessions are strictly bound; a task without an owner is a bearer handle.
    fn visible(&self, rec: TaskRecord, owner: Option<&str>) -> Option<TaskRecord> {
        let bearer = rec.owner.is_none()
            || (!self.config.strict_session_binding
                && rec
                    .owner
                    .as_deref()
                    .is_some_and(|o| o.starts_with("session:")));
        if !bearer && rec.owner.as_deref() != owner {
            return None;
        }
        if rec.expires_at().is_some_and(|at| at <= SystemTime::now()) {
            return None;
        }
        Some(rec)
    }

    /// The task, if it exists, has not expired and `owner` may see it.
    pub(crate) async fn get(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<Option<TaskRecord>, Error> {
        // A process that only reads must still hear of other processes' writes.
        self.ensure_background();
        let Some(rec) = self.store.get(id).await? else {
            return Ok(None);
        };
        Ok(self.visible(rec, owner))
    }

    /// Cancels a task. Returns the task as it is afterwards and whether this call cancelled
    /// it (`false`: it was already terminal). `None` for an unknown task. The process that
    /// runs the tool learns of it from the store and stops the tool.
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
                rec.cancel_requested = Some(CancelRequest {
                    at: SystemTime::now(),
                    by: owner.map(str::to_owned),
                });
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

    /// Hands the client's answers to a task waiting for input. Answers for keys that are
    /// not outstanding are ignored. `None` for an unknown task.
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

    /// Wakes on every change of the task this process learns of, from its own writes and
    /// (for shared stores) from other processes'.
    pub(crate) fn watch(&self, id: &str) -> TaskWatch {
        self.ensure_background();
        let live = self.live_entry(id);
        TaskWatch {
            engine: self.arc(),
            id: id.to_owned(),
            rx: Some(live.changed.subscribe()),
        }
    }

    /// The delivery attached to a task in this process.
    pub(crate) fn delivery(&self, id: &str) -> Option<Arc<dyn Delivery>> {
        self.live(id).and_then(|live| lock(&live.delivery).clone())
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
            let mut slot = lock(&live.delivery);
            match &*slot {
                Some(current) if !current.is_closed() => return Ok(Arc::clone(current)),
                _ => {
                    *slot = Some(Arc::clone(&delivery));
                    delivery
                }
            }
        };
        if let Some(rec) = self.store.get(id).await? {
            attached.changed(&self.arc(), &rec, false);
            if rec.status.is_terminal() {
                *lock(&live.delivery) = None;
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
            let Some(rec) = self.get(id, owner).await? else {
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

    /// One page of the owner's tasks (`tasks/list`).
    pub(crate) async fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, Error> {
        self.ensure_background();
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

    /// Starts the background loops once: the sweeper, the lapsed-lease scan, the claim loop
    /// (when this process runs tools) and the change feed (when the store is shared).
    pub(crate) fn ensure_background(&self) {
        // Called on every read: a plain load first keeps the cache line shared.
        if self.background.load(Ordering::Acquire) || self.background.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = self.this.clone();
        let every = self.config.sweep_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(engine) = weak.upgrade() else { break };
                engine.sweep().await;
            }
        });
        let weak = self.this.clone();
        let every = self.config.lapse_scan_every();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(engine) = weak.upgrade() else { break };
                if let Err(e) = engine.settle_lapsed().await {
                    tracing::warn!(error = %e, "cannot scan for lapsed leases");
                }
                engine.forget_claimed().await;
                engine.uncount_expired();
            }
        });
        if self.config.execute {
            let weak = self.this.clone();
            let wake = Arc::clone(&self.claim_wake);
            tokio::spawn(async move {
                loop {
                    {
                        let Some(engine) = weak.upgrade() else { break };
                        if engine.stopping.load(Ordering::Acquire) {
                            break;
                        }
                        engine.claim_round().await;
                    }
                    tokio::select! {
                        () = wake.notified() => {}
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            });
        }
        if self.store.is_shared() {
            let weak = self.this.clone();
            let every = self.config.signal_interval;
            tokio::spawn(async move {
                let mut cursor = None;
                let mut failing = false;
                loop {
                    let read_at = tokio::time::Instant::now();
                    let store = {
                        let Some(engine) = weak.upgrade() else { break };
                        cursor = engine.read_changes(cursor, &mut failing).await;
                        Arc::clone(&engine.store)
                    };
                    // A store that can tell when there is news is read as soon as there is
                    // some, but not more often than ten times per interval: news after a
                    // quiet spell is read at once, a stream of it in batches.
                    let woken = async {
                        store.changed().await;
                        tokio::time::sleep_until(read_at + every / 10).await;
                    };
                    tokio::select! {
                        () = tokio::time::sleep(every) => {}
                        () = woken => {}
                    }
                }
            });
        }
    }

    /// Reads the change feed once and hands on what other processes changed. `failing`
    /// says whether the last read failed, so an outage is logged once, not every poll.
    async fn read_changes(&self, cursor: Option<u64>, failing: &mut bool) -> Option<u64> {
        const BATCH: usize = 1000;
        let mut cursor = cursor;
        loop {
            let changes = match self.store.changes(cursor, BATCH).await {
                Ok(c) => c,
                Err(e) => {
                    if *failing {
                        tracing::debug!(error = %e, "cannot read the task store's change feed");
                    } else {
                        tracing::warn!(error = %e, "cannot read the task store's change feed");
                    }
                    *failing = true;
                    return cursor;
                }
            };
            if std::mem::take(failing) {
                tracing::info!("the task store's change feed is readable again");
            }
            let first = cursor.is_none();
            cursor = Some(changes.cursor);
            let mut unknown = false;
            let mut seen = HashSet::new();
            for id in &changes.ids {
                if !seen.insert(id.as_str()) {
                    continue;
                }
                let counted = lock(&self.counted[shard_of(id)]).contains_key(id.as_str());
                if self.live(id).is_none() && !counted {
                    unknown = true;
                    continue;
                }
                match self.store.get(id).await {
                    Ok(Some(rec)) => self.observe(&rec),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(task = %id, error = %e, "cannot read a changed task"),
                }
            }
            if (unknown || first) && self.config.execute {
                self.claim_wake.notify_one();
            }
            if changes.ids.len() < BATCH {
                return cursor;
            }
        }
    }

    /// Claims queued tasks while this process has free slots.
    async fn claim_round(&self) {
        const BATCH: usize = 32;
        loop {
            let free = {
                let slots = lock(&self.slots);
                self.config.max_running.max(1).saturating_sub(slots.running)
            };
            if free == 0 || self.stopping.load(Ordering::Acquire) {
                return;
            }
            let asked = free.min(BATCH);
            let skip = self.full_tools();
            let until = SystemTime::now() + self.config.lease;
            let claimed = match self.store.claim(&self.worker, until, asked, &skip).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot claim queued tasks");
                    return;
                }
            };
            let got = claimed.len();
            for rec in claimed {
                self.run_claimed(rec).await;
            }
            if got < asked {
                return;
            }
        }
    }

    /// Runs a task this process just claimed.
    async fn run_claimed(&self, rec: TaskRecord) {
        lock(&self.queued_here).remove(&rec.id);
        let Some(tool) = self.registry.get(&rec.tool).cloned() else {
            tracing::error!(task = %rec.id, tool = %rec.tool, "claimed a task of an unknown tool");
            let message = format!("the tool {:?} does not exist in this server", rec.tool);
            let epoch = rec.epoch;
            let id = rec.id.clone();
            let _ = self
                .update_from(&id, Some(rec), |r| {
                    if !r.is_held_by(&self.worker, epoch) {
                        return false;
                    }
                    let outcome = CallOutcome::Error(Error::Internal(message.clone()).into());
                    settle(r, &outcome, self.config.min_retention)
                })
                .await;
            return;
        };
        {
            let mut slots = lock(&self.slots);
            slots.running += 1;
            *slots.per_tool.entry(tool.name.to_string()).or_default() += 1;
        }
        tracing::debug!(task = %rec.id, tool = %rec.tool, epoch = rec.epoch, "claimed a task");
        metrics::counter!("mcp_tasks_claimed_total", "tool" => rec.tool.clone()).increment(1);
        self.observe(&rec);
        self.launch(tool, rec, None);
    }

    /// Settles tasks whose lease lapsed by their tools' restart policies: `rerun` tools go
    /// back to the queue (under the same id), every other task ends `failed`.
    async fn settle_lapsed(&self) -> Result<Recovery, Error> {
        const BATCH: usize = 100;
        let mut report = Recovery::default();
        loop {
            let lapsed = self.store.lapsed(SystemTime::now(), BATCH).await?;
            let got = lapsed.len();
            for rec in lapsed {
                let (id, tool, lapsed_lease) =
                    (rec.id.clone(), rec.tool.clone(), rec.lease.clone());
                let rerun = self
                    .registry
                    .get(&rec.tool)
                    .is_some_and(|t| t.on_restart == RestartPolicy::Rerun);
                let retention = self.config.min_retention;
                let now = SystemTime::now();
                let written = self
                    .update_from(&id, Some(rec), |r| {
                        // Renewed or settled meanwhile: not lapsed any more.
                        if r.status.is_terminal()
                            || r.lease != lapsed_lease
                            || r.lease.as_ref().is_none_or(|l| l.until > now)
                        {
                            return false;
                        }
                        r.input_requests.clear();
                        r.lease = None;
                        if rerun {
                            r.status = TaskStatus::Working;
                            r.status_message =
                                Some("Running again: the process running it stopped.".into());
                            r.input_responses.clear();
                        } else {
                            r.status = TaskStatus::Failed;
                            r.status_message =
                                Some("The server restarted before the task finished.".into());
                            r.outcome = Some(CallOutcome::Error(
                                Error::Internal(
                                    "the task was interrupted by a server restart".into(),
                                )
                                .into(),
                            ));
                            keep_readable(r, retention);
                        }
                        true
                    })
                    .await?;
                if matches!(written, Some((_, true))) {
                    metrics::counter!(
                        "mcp_tasks_lapsed_total",
                        "tool" => tool.clone(),
                        "policy" => if rerun { "rerun" } else { "fail" }
                    )
                    .increment(1);
                    if rerun {
                        tracing::info!(task = %id, tool = %tool, "task's runner stopped; queued to run again");
                        report.rerun += 1;
                    } else {
                        tracing::info!(task = %id, tool = %tool, "task's runner stopped; settled as failed");
                        report.failed += 1;
                    }
                }
            }
            if got < BATCH {
                break;
            }
        }
        if report.rerun > 0 && self.config.execute {
            self.claim_wake.notify_one();
        }
        Ok(report)
    }

    /// Drops from the queued count the tasks created here that another process claimed.
    async fn forget_claimed(&self) {
        let ids: Vec<String> = lock(&self.queued_here).iter().take(256).cloned().collect();
        for id in ids {
            let gone = match self.store.get(&id).await {
                Ok(Some(rec)) => !rec.is_queued(),
                Ok(None) => true,
                Err(_) => false,
            };
            if gone {
                lock(&self.queued_here).remove(&id);
            }
        }
    }

    /// Settles what can be settled now: tasks whose lease has already lapsed (those of an
    /// earlier version of the store, or of a process that died more than a lease ago).
    /// Tasks of a process that died less than a lease ago are settled once it lapses, by
    /// whichever process sees it first. Starts the background loops.
    pub(crate) async fn recover(&self) -> Result<Recovery, Error> {
        self.ensure_background();
        let report = self.settle_lapsed().await?;
        if report.rerun + report.failed > 0 {
            tracing::info!(
                rerun = report.rerun,
                failed = report.failed,
                "settled tasks whose runner had stopped"
            );
        }
        Ok(report)
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

    /// Stops claiming, waits up to `grace` for the tools running here to finish, then stops
    /// the rest and hands their leases back (their lease ends now), so another process
    /// settles them by their restart policies at once.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        self.stopping.store(true, Ordering::Release);
        self.claim_wake.notify_one();
        let deadline = Instant::now() + grace;
        while lock(&self.slots).running > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let runs: Vec<(String, Arc<Run>)> = self
            .live
            .iter()
            .flat_map(|shard| {
                lock(shard)
                    .iter()
                    .filter_map(|(id, live)| lock(&live.run).clone().map(|r| (id.clone(), r)))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (id, run) in runs {
            let now = SystemTime::now();
            let _ = self
                .update(&id, |rec| {
                    if !rec.is_held_by(&self.worker, run.epoch) {
                        return false;
                    }
                    rec.lease = Some(Lease {
                        worker: self.worker.clone(),
                        until: now,
                    });
                    true
                })
                .await;
            self.lose(&id, &run);
            tracing::info!(task = %id, "handed the task's lease back at shutdown");
        }
    }

    async fn park(
        &self,
        id: &str,
        run: &Run,
        request: &InputRequest,
    ) -> Result<Option<String>, Error> {
        let mut key = None;
        self.update(id, |rec| {
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

    async fn unpark(&self, id: &str, run: &Run, key: &str) -> Result<(), Error> {
        self.update(id, |rec| {
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
        .await?;
        Ok(())
    }

    /// Parks the question in the task and waits until an answer is stored, from whichever
    /// process received it.
    async fn input(&self, id: &str, run: &Run, request: InputRequest) -> Result<Value, ToolError> {
        let method = request.method.clone();
        let key = self
            .park(id, run, &request)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?
            .ok_or_else(ToolError::cancelled)?;
        let mut watch = self.watch(id);
        loop {
            let rec = self
                .store
                .get(id)
                .await
                .map_err(|e| ToolError::new(e.to_string()))?
                .ok_or_else(ToolError::cancelled)?;
            if !rec.is_held_by(&self.worker, run.epoch) {
                return Err(ToolError::cancelled());
            }
            if let Some(answer) = rec.input_responses.get(&key).cloned() {
                self.unpark(id, run, &key)
                    .await
                    .map_err(|e| ToolError::new(e.to_string()))?;
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

    async fn set_status_message(&self, id: &str, epoch: u64, message: String) {
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

/// Writes a finished run's outcome into the record, by the task's settle policy. Returns
/// `false` when the task cannot move there.
fn settle(rec: &mut TaskRecord, outcome: &CallOutcome, retention: Duration) -> bool {
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

/// A receiver of a task's changes; the engine forgets the task when the last one is gone.
pub(crate) struct TaskWatch {
    engine: Arc<Engine>,
    id: String,
    rx: Option<watch::Receiver<u64>>,
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

/// What [`Server::recover`](crate::Server::recover) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Tasks queued to run again (tools declared `on_restart = "rerun"`).
    pub rerun: usize,
    /// Tasks settled as `failed`.
    pub failed: usize,
}

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

/// The backend of a tool running as a task.
struct TaskBackend {
    engine: Arc<Engine>,
    id: String,
    run: Arc<Run>,
    last_write: Mutex<Option<Instant>>,
}

impl TaskBackend {
    fn delivery(&self) -> Option<Arc<dyn Delivery>> {
        self.engine.delivery(&self.id)
    }
}

impl CallBackend for TaskBackend {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move { self.engine.input(&self.id, &self.run, request).await })
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if self.run.cancel.is_cancelled() {
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
        let now = Instant::now();
        {
            let mut last = lock(&self.last_write);
            if last
                .is_some_and(|l| now.duration_since(l) < self.engine.config.progress_write_interval)
            {
                return;
            }
            *last = Some(now);
        }
        let engine = Arc::clone(&self.engine);
        let id = self.id.clone();
        let epoch = self.run.epoch;
        tokio::spawn(async move { engine.set_status_message(&id, epoch, text).await });
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if let Some(delivery) = self.delivery() {
            delivery.log(level, logger, data);
        }
    }
}
