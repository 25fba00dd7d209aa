//! The task engine: turns a tool call into a durable task, runs it under a lease, and
//! settles it — correctly when several processes share one store.
//!
//! Every change to a task is a compare-and-set in the [`TaskStore`](crate::store::TaskStore), checked against the one
//! transition table ([`TaskStatus::can_move_to`]); a late change after a terminal status is a
//! silent no-op. The process that runs a task holds its lease ([`TaskRecord::lease`]) and
//! renews it while the tool runs; each of its writes is fenced by the lease epoch, so a
//! process whose lease lapsed can never overwrite a task another process took over.
//! A tool starts only under a lease with at least a renewal period left; a process slowed
//! or paused since the claim renews it first, fenced, and starts nothing when the task is
//! no longer its own.
//!
//! What the engine learns of a task — its own writes, and through the store's change feed
//! ([`ClaimStore::changes`]) the writes of other processes — it hands to whoever waits in
//! this process: the tool waiting for an answer, `tasks/result`, subscriptions, and the
//! `Delivery` a wire adapter attached to carry the task's questions and progress to its
//! client. Queued tasks are records in the store, claimed by any process with a free slot.
//! A task whose lease lapsed (its process died or froze) is settled by its tool's restart
//! policy, by any live process. The engine knows nothing of wire formats or protocol eras.
//!
//! Its files: `config` (limits and timings), `dyn_store` (the store behind it), `run`
//! (creating a task and running its tool under a lease to a settled end), `tasks` (what
//! clients do with tasks: read, list, cancel, answer, watch), `input` (the questions a tool
//! asks), `delivery` (the seam to a wire adapter, and waiters), `steps` (storing the outputs
//! of a tool's durable steps) and `background` (the change feed, claims, lapsed leases,
//! expiry and shutdown).

use crate::error::Error;
use crate::model::JsonObject;
use crate::quota::Quotas;
use crate::store::ClaimStore;
use crate::sync::LockExt;
use crate::task::{Lease, SettlePolicy, TaskRecord, TaskStatus, random_id};
use crate::tool::{Registry, Tool};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

mod background;
mod config;
mod delivery;
mod dyn_store;
mod first_poll;
mod input;
mod keyed;
mod keys;
mod outcome;
mod run;
mod steps;
mod tasks;

pub use background::{HandOff, Recovery};
pub use config::EngineConfig;
pub(crate) use delivery::{Delivery, TaskWatch};
pub(crate) use dyn_store::DynStore;
pub(crate) use keyed::KeyedCall;
pub(crate) use tasks::{Access, is_expired, listing_error, unexpired};

/// A run of a task's tool in this process, and the backend its tool's context calls
/// ([`CallBackend`](crate::context::CallBackend)): one allocation per run.
struct Run {
    engine: Arc<Engine>,
    /// The task's id, shared with the engine's entry for it.
    id: Arc<str>,
    /// The tool it runs, by name; the tool itself is the registry's.
    tool: RunTool,
    /// The lease epoch it runs under; every write it makes is fenced by it.
    epoch: u64,
    cancel: CancellationToken,
    /// Set when the lease was lost to another process: the run stops and writes nothing.
    lost: AtomicBool,
    /// Set once the run writes its outcome. From then on, the change feed's news of the
    /// task is not read: either the outcome lands and the task is settled, or the write
    /// meets a newer version, which it reads.
    settling: AtomicBool,
    /// Clear while the task is not stored yet (its tool's first poll comes before its
    /// create; see [`first_poll`]): what the tool asks of the store waits until it is set,
    /// or until the run is lost.
    stored: AtomicBool,
    /// When the engine's renewal loop next extends the run's lease, in milliseconds since
    /// the engine started; [`NOT_RENEWED`] while the tool does not run (before it starts,
    /// and once it ended).
    renew_at: AtomicU64,
    /// The outputs of the tool's durable steps: those of the record the run started from,
    /// and those it stored since; `None` while there are none (most tools have no steps).
    #[allow(clippy::box_collection)] // a pointer rather than an empty map's 24 bytes
    steps: Mutex<Option<Box<BTreeMap<String, Value>>>>,
    /// When the run last wrote a progress message, in nanoseconds since the engine started
    /// plus one; 0 before its first.
    last_write: AtomicU64,
    /// When the run began, in nanoseconds since the engine started.
    started: u64,
}

/// [`Run::renew_at`] of a run whose lease the renewal loop leaves alone.
const NOT_RENEWED: u64 = u64::MAX;

/// The tool of a run: its name, and the tool itself only when the engine's registry holds
/// another tool by that name (a tool handed in from outside it).
struct RunTool {
    name: Arc<str>,
    own: Option<Box<Tool>>,
}

impl Run {
    /// The tool it runs.
    fn tool(&self) -> &Tool {
        match &self.tool.own {
            Some(tool) => tool,
            None => self
                .engine
                .registry
                .get(&self.tool.name)
                .expect("a run keeps its tool unless the registry holds it"),
        }
    }
}

/// What this process keeps of a task it runs, watches or delivers.
struct Live {
    /// Wakes those who watch the task; made by the first watcher (most tasks have none, and
    /// a channel costs a few hundred bytes).
    changed: std::sync::OnceLock<watch::Sender<u64>>,
    /// What is handed on, the run and the delivery, under one lock (every running task has
    /// an entry: one lock costs less than three).
    now: Mutex<LiveNow>,
    /// The highest lease epoch a run of the task started under here: a lease epoch runs
    /// once per process (see [`Engine::launch`]).
    started: AtomicU64,
}

/// The part of a [`Live`] entry under its lock.
#[derive(Default)]
struct LiveNow {
    /// The version and status last handed on, so each version is handed on once.
    seen: (u64, Option<TaskStatus>),
    run: Option<Arc<Run>>,
    delivery: Option<Arc<dyn Delivery>>,
}

impl Live {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            changed: std::sync::OnceLock::new(),
            now: Mutex::default(),
            started: AtomicU64::new(0),
        })
    }
}

/// Running tasks of this process, over all tools and per tool.
#[derive(Default)]
struct Slots {
    running: usize,
    per_tool: HashMap<String, usize>,
}

const LIVE_SHARDS: usize = 32;

/// The most finished tasks [`EndedHere`] remembers.
const ENDED_KEPT: usize = 8192;

/// The ids of the tasks this process last saw finished, up to [`ENDED_KEPT`], oldest first
/// out. A finished task never changes status again, so news of one from the change feed is
/// never a task to claim; remembering the recent ones spares a claim round for each of this
/// process's own writes that the feed brings back.
#[derive(Default)]
struct EndedHere {
    order: std::collections::VecDeque<Arc<str>>,
    ids: HashSet<Arc<str>>,
}

impl EndedHere {
    /// Whether this process saw the task finish lately.
    fn has(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    fn note(&mut self, id: &str) {
        if self.ids.contains(id) {
            return;
        }
        if self.order.len() == ENDED_KEPT
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        let id: Arc<str> = id.into();
        self.ids.insert(Arc::clone(&id));
        self.order.push_back(id);
    }
}

/// A finished task counted as retained: when it expires, its id, its requestor.
type Retained = (SystemTime, Arc<str>, Arc<str>);

/// The task engine of one process.
pub(crate) struct Engine {
    store: Arc<dyn DynStore>,
    config: EngineConfig,
    registry: Registry,
    /// This process's name in leases.
    worker: String,
    live: [Mutex<HashMap<Arc<str>, Arc<Live>>>; LIVE_SHARDS],
    slots: Mutex<Slots>,
    tool_limits: HashMap<String, usize>,
    /// Tasks this process created that wait for a slot (here or in another process).
    queued_here: Mutex<HashSet<Arc<str>>>,
    /// Wakes the claim loop: a slot freed, or a task may be waiting.
    claim_wake: Arc<Notify>,
    /// Whether the last claim round may have left queued tasks it had no room for (no free
    /// slot, or tools at their limit or paused): only then does a freed slot wake the claim
    /// loop.
    claim_backlog: AtomicBool,
    /// Tasks this process saw finished lately: the change feed's news of them cannot be a
    /// task waiting to be claimed.
    ended_here: Mutex<EndedHere>,
    /// Wakes what a tool asked of the store before its task was stored (see [`first_poll`]).
    stored_wake: Notify,
    background: AtomicBool,
    stopping: AtomicBool,
    /// Per-requestor limits on the tasks this process creates.
    quotas: Quotas,
    /// The application state tools take.
    state: crate::state::StateMap,
    /// Unfinished tasks this process created, with the requestor whose live-task quota each
    /// counts against until it ends.
    /// The id is shared with `queued_here`, the requestor with the quota table.
    counted: [Mutex<HashMap<Arc<str>, Arc<str>>>; LIVE_SHARDS],
    /// Finished tasks counted as retained, by when they expire.
    retained: Mutex<BTreeSet<Retained>>,
    /// The client capabilities of recent tasks, shared by new records.
    capabilities: crate::task::SharedValues,
    /// The calls with a derived id being created or run here, one at a time per id.
    flights: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The kill switch of task creation (and of starting queued tasks) in this process.
    pub(crate) creation: crate::creation::TaskCreation,
    /// The pause file, and how often it is read.
    pause_file: Option<(std::path::PathBuf, Duration)>,
    /// Wakes [`Engine::shutdown`] when a run here ends.
    run_ended: Notify,
    /// When the engine started: the origin of [`Run::renew_at`] and [`Run::started`].
    born: std::time::Instant,
    this: Weak<Engine>,
}

/// What an engine is switched by from outside: the kill switch, and the file that turns it.
#[derive(Clone, Default)]
pub(crate) struct Controls {
    pub(crate) creation: crate::creation::TaskCreation,
    pub(crate) pause_file: Option<(std::path::PathBuf, Duration)>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("worker", &self.worker)
            .field("config", &self.config)
            .field("running", &self.slots.locked().running)
            .finish_non_exhaustive()
    }
}

/// What a new task needs.
pub(crate) struct NewTask {
    pub(crate) tool: Tool,
    pub(crate) args: JsonObject,
    pub(crate) owner: Option<String>,
    /// The authenticated principal that asked, as the task keeps it.
    pub(crate) principal: Option<Arc<crate::principal::Principal>>,
    /// Who the task is charged to for the quotas (see [`Connection::requestor`]).
    ///
    /// [`Connection::requestor`]: crate::session::Connection::requestor
    pub(crate) requestor: String,
    pub(crate) settle: SettlePolicy,
    pub(crate) requested_ttl: Option<Duration>,
    pub(crate) client_capabilities: Arc<Value>,
    pub(crate) delivery: Option<Arc<dyn Delivery>>,
    /// The call's idempotency key: a repeat with it gets this task back.
    pub(crate) key: Option<crate::idempotency::IdempotencyKey>,
    /// The trace context of the request that asked for it.
    pub(crate) trace: Option<Arc<crate::task::TraceContext>>,
}

fn shard_of(id: &str) -> usize {
    id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) as usize
        % LIVE_SHARDS
}

/// The principal of a task, for the tool's context: the one it kept, else (a task stored
/// before tasks kept their principal) one named by its owner key.
fn principal_of(rec: &TaskRecord) -> Option<Arc<crate::principal::Principal>> {
    match &rec.principal {
        Some(p) => Some(Arc::clone(p)),
        None => rec
            .owner
            .as_deref()?
            .strip_prefix("principal:")
            .map(|name| Arc::new(crate::principal::Principal::new(name))),
    }
}

impl Engine {
    pub(crate) fn new<S: ClaimStore>(
        store: S,
        config: EngineConfig,
        registry: Registry,
        quotas: Quotas,
        state: crate::state::StateMap,
        controls: Controls,
    ) -> Arc<Self> {
        let tool_limits = registry
            .iter()
            .filter_map(|t| Some((t.name.to_string(), t.max_concurrency?.max(1))))
            .collect();
        // The process id tells processes on one host apart; the random part, processes on
        // different hosts (or the start time, should the OS have no random bytes to give).
        let unique = random_id().map_or_else(
            |_| {
                let nanos = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos();
                format!("{:08x}", nanos as u32)
            },
            |id| id[..8].to_owned(),
        );
        let worker = format!("{}-{unique}", std::process::id());
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
            claim_backlog: AtomicBool::new(false),
            ended_here: Mutex::default(),
            stored_wake: Notify::new(),
            background: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            quotas,
            state,
            counted: std::array::from_fn(|_| Mutex::default()),
            retained: Mutex::default(),
            capabilities: crate::task::SharedValues::new(),
            flights: Mutex::default(),
            creation: controls.creation,
            pause_file: controls.pause_file,
            run_ended: Notify::new(),
            born: std::time::Instant::now(),
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
        self.live[shard_of(id)].locked().get(id).cloned()
    }

    fn live_entry(&self, id: &str) -> Arc<Live> {
        self.live_entry_shared(id, || id.into()).1
    }

    /// [`live_entry`](Self::live_entry), with the id as the entry keeps it: `key` when the
    /// entry is new.
    fn live_entry_shared(&self, id: &str, key: impl FnOnce() -> Arc<str>) -> (Arc<str>, Arc<Live>) {
        let mut shard = self.live[shard_of(id)].locked();
        if let Some((key, live)) = shard.get_key_value(id) {
            return (Arc::clone(key), Arc::clone(live));
        }
        let key = key();
        let live = Live::new();
        shard.insert(Arc::clone(&key), Arc::clone(&live));
        (key, live)
    }

    /// Milliseconds since the engine started, for [`Run::renew_at`].
    fn millis_now(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// Nanoseconds since the engine started, for [`Run::started`] and [`Run::last_write`]
    /// (kept in 8 bytes rather than an `Instant`'s 16).
    fn nanos_now(&self) -> u64 {
        self.born.elapsed().as_nanos() as u64
    }

    /// Forgets a task nobody here runs, watches or delivers any more.
    fn release(&self, id: &str) {
        let mut shard = self.live[shard_of(id)].locked();
        let idle = shard.get(id).is_some_and(|live| {
            let now = live.now.locked();
            live.changed.get().is_none_or(|tx| tx.receiver_count() == 0)
                && now.run.is_none()
                && now.delivery.is_none()
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
        let mut slots = self.slots.locked();
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
            let mut slots = self.slots.locked();
            slots.running = slots.running.saturating_sub(1);
            if let Some(n) = slots.per_tool.get_mut(tool) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    slots.per_tool.remove(tool);
                }
            }
        }
        self.run_ended.notify_waiters();
        if self.claim_backlog.load(Ordering::Acquire) {
            self.claim_wake.notify_one();
        }
    }

    /// The tools at their limit here, which a claim must leave for other processes.
    fn full_tools(&self) -> Vec<String> {
        let slots = self.slots.locked();
        self.tool_limits
            .iter()
            .filter(|(tool, limit)| slots.per_tool.get(*tool).copied().unwrap_or(0) >= **limit)
            .map(|(tool, _)| tool.clone())
            .collect()
    }

    /// Refuses a new task of `tool` while task creation is off here (the kill switch, or a
    /// drain).
    fn creation_open(&self, tool: &Tool) -> Result<(), Error> {
        match self.creation.is_paused(&tool.name) {
            None => Ok(()),
            Some(off) => Err(Error::CreationOff(off, tool.name.to_string())),
        }
    }

    /// Refuses a new task when this process already has as many running and waiting as it
    /// may.
    fn admit(&self) -> Result<(), Error> {
        let limit = self.config.max_running + self.config.max_queued;
        let running = self.slots.locked().running;
        let queued = self.queued_here.locked().len();
        if running + queued >= limit {
            return Err(Error::Busy(format!(
                "too many tasks: {limit} are running or queued; try again later"
            )));
        }
        Ok(())
    }

    fn new_record(&self, id: String, new: &NewTask, lease: Option<Lease>) -> TaskRecord {
        let now = SystemTime::now();
        // The span of the request that creates the task (a child of the caller's), when
        // OpenTelemetry records it; else the trace context the request carried.
        let trace = crate::spans::creating(&id)
            .map(Arc::new)
            .or_else(|| new.trace.clone());
        TaskRecord {
            id,
            owner: new.owner.clone(),
            principal: new.principal.clone(),
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
            client_capabilities: self.capabilities.share(&new.client_capabilities),
            epoch: u64::from(lease.is_some()),
            lease,
            cancel_requested: None,
            version: 0,
            steps: BTreeMap::new(),
            unique_key: None,
            synchronous: false,
            history: Vec::new(),
            trace,
        }
    }

    fn my_lease(&self) -> Lease {
        Lease {
            worker: self.worker.clone(),
            until: SystemTime::now() + self.config.lease,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ENDED_KEPT, EndedHere};

    #[test]
    fn the_finished_tasks_remembered_are_the_latest_each_once() {
        let mut ended = EndedHere::default();
        ended.note("first");
        ended.note("first");
        assert_eq!(ended.order.len(), 1, "a task noted twice is kept once");
        for n in 0..ENDED_KEPT {
            ended.note(&format!("task-{n}"));
        }
        assert!(
            !ended.ids.contains("first"),
            "the oldest is forgotten first"
        );
        assert_eq!(
            (ended.ids.len(), ended.order.len()),
            (ENDED_KEPT, ENDED_KEPT)
        );
        assert!(ended.ids.contains("task-0"));
        assert!(
            ended
                .ids
                .contains(format!("task-{}", ENDED_KEPT - 1).as_str())
        );
    }
}
