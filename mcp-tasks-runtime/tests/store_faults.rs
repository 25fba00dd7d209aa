//! Honest answers from a store in trouble: a create whose answer was lost is either found
//! or answered as of unknown outcome with its task id (and runs once it turns up); an
//! outcome the store refuses fails the task with the cause; an outcome stored only after an
//! outage longer than a lease keeps its result; a Redis that is down is answered at once;
//! questions a task asks while reads fail are neither dropped nor fatal to the tool; a
//! task whose tool ends at once costs one write, is read settled by another process on
//! SQLite, PostgreSQL and Redis, and a create the store refuses stops the tool its first
//! poll began.
//!
//! First against a store that loses answers on purpose (in memory), then against the real
//! ones: a PostgreSQL table locked by the test, and a `redis-server` of the test's own that
//! it pauses and kills. Every wait is bounded; nothing asserts how fast anything is.

use mcp_tasks_runtime::model::{TaskSupport, ToolAnnotations};
use mcp_tasks_runtime::store::{
    Changes, ClaimStore, MemoryTaskStore, ScanTasks, StoreError, TaskCounts, TaskFilter, TaskPage,
    TaskStore,
};
use mcp_tasks_runtime::task::TaskRecord;
use mcp_tasks_runtime::{CallOutcome, EngineConfig, Server, Session, Tool};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use support::{Client, meta, request, text};

mod support;

/// A bound on every wait.
const WITHIN: Duration = Duration::from_secs(30);

/// Declared idempotent: it may start before its task is stored.
fn idempotent(tool: Tool) -> Tool {
    tool.annotations(ToolAnnotations {
        idempotent_hint: Some(true),
        ..ToolAnnotations::default()
    })
}

/// `quick` answers its `word`, `later` too after a pause (both idempotent); `nul` and
/// `nul_at_once` (idempotent) answer text PostgreSQL cannot store.
fn server_on<S: ClaimStore>(store: S, lease: Duration) -> Server {
    Server::builder()
        .tool(idempotent(
            Tool::new("quick", |_, args| async move {
                text(format!("quick {}", args["word"].as_str().unwrap_or("?")))
            })
            .task_support(TaskSupport::Required),
        ))
        .tool(idempotent(
            Tool::new("later", |_, args| async move {
                tokio::task::yield_now().await;
                text(format!("later {}", args["word"].as_str().unwrap_or("?")))
            })
            .task_support(TaskSupport::Required),
        ))
        .tool(
            Tool::new("nul", |_, _| async { text("a\u{0}b") }).task_support(TaskSupport::Required),
        )
        .tool(idempotent(
            Tool::new("nul_at_once", |_, _| async { text("a\u{0}b") })
                .task_support(TaskSupport::Required),
        ))
        .engine_config(EngineConfig {
            lease,
            ..EngineConfig::default()
        })
        .store(store)
        .build()
        .unwrap()
}

/// `quick`, idempotent, answering "at once": a tool that ends in its first poll.
fn at_once() -> Tool {
    idempotent(
        Tool::new("quick", |_, _| async { text("at once") }).task_support(TaskSupport::Required),
    )
}

async fn call(session: &Session, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
    request(session, 1, method, params).await
}

async fn start(session: &Session, tool: &str, word: &str) -> Value {
    call(
        session,
        "tools/call",
        json!({"name": tool, "arguments": {"word": word}}),
    )
    .await
}

/// Polls the task until it is terminal, for at most [`WITHIN`].
async fn settled(session: &Session, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let r = call(session, "tasks/get", json!({"taskId": id})).await;
        if matches!(
            r["result"]["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return r["result"].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} did not end: {r}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The answer is the unknown-outcome error, naming the task it would be; returns its id.
fn unknown_outcome(r: &Value) -> String {
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cannot tell whether task"), "{r}");
    assert!(message.contains("may create a second task"), "{r}");
    let id = r["error"]["data"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id in the error's data: {r}"));
    assert!(message.contains(id), "{r}");
    id.to_owned()
}

// ---------------------------------------------------------------------------------------
// A store that loses answers on purpose

#[derive(Default)]
struct Faults {
    /// Creates to store, then answer as if the answer was lost.
    lose_after_storing: usize,
    /// While set, creates are kept here instead of stored, and answered as lost.
    hold_creates: Option<Vec<TaskRecord>>,
    /// While set, writes of a task's result (not of an error) fail with this error.
    refuse_results: Option<StoreError>,
    /// While set, every write of a finished task fails with this error.
    refuse_outcomes: Option<StoreError>,
    /// While set, a claim that took tasks answers only once this is notified: the process
    /// pauses between claiming a task and starting its tool.
    pause_claims: Option<Arc<tokio::sync::Notify>>,
    /// While set, every create fails with this error.
    refuse_creates: Option<StoreError>,
    /// Creates and compare-and-sets asked of the store, refused ones included.
    writes: usize,
    /// Reads of a task asking two questions at once that find the store out of reach,
    /// the first this many times.
    unreachable_reads_of_two_questions: usize,
}

#[derive(Clone, Default)]
struct Faulty {
    inner: Arc<MemoryTaskStore>,
    faults: Arc<Mutex<Faults>>,
}

impl Faulty {
    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.faults.lock().unwrap()
    }
}

fn lost() -> StoreError {
    StoreError::Ambiguous("the faulty store: no answer in time".into())
}

impl Faulty {
    /// Refuses the write of a finished task as the faults say.
    fn refuse_outcome(&self, record: &TaskRecord) -> Result<(), StoreError> {
        if record.status.is_terminal() {
            let faults = self.faults();
            let result = matches!(record.outcome.as_deref(), Some(CallOutcome::Result(_)));
            if let Some(error) = faults.refuse_outcomes.clone() {
                return Err(error);
            }
            if let Some(error) = faults.refuse_results.clone().filter(|_| result) {
                return Err(error);
            }
        }
        Ok(())
    }
}

impl TaskStore for Faulty {
    async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
        self.faults().writes += 1;
        if let Some(error) = self.faults().refuse_creates.clone() {
            return Err(error);
        }
        // A task created settled carries its outcome: refused as the outcome's write is.
        self.refuse_outcome(&record)?;
        if let Some(held) = &mut self.faults().hold_creates {
            held.push(record);
            return Err(lost());
        }
        let lose = {
            let mut faults = self.faults();
            let lose = faults.lose_after_storing > 0;
            faults.lose_after_storing = faults.lose_after_storing.saturating_sub(1);
            lose
        };
        self.inner.create(record).await?;
        if lose { Err(lost()) } else { Ok(()) }
    }
    async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let read = self.inner.get(id).await?;
        if read.as_ref().is_some_and(|r| r.input_requests.len() == 2) {
            let mut faults = self.faults();
            if faults.unreachable_reads_of_two_questions > 0 {
                faults.unreachable_reads_of_two_questions -= 1;
                return Err(StoreError::Unavailable(
                    "the faulty store: no answer".into(),
                ));
            }
        }
        Ok(read)
    }
    async fn compare_and_set(&self, record: TaskRecord, expected: u64) -> Result<bool, StoreError> {
        self.faults().writes += 1;
        self.refuse_outcome(&record)?;
        self.inner.compare_and_set(record, expected).await
    }
    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        self.inner.delete(id).await
    }
    async fn list(
        &self,
        owner: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        self.inner.list(owner, cursor, limit).await
    }
    async fn expire(&self, now: SystemTime, limit: usize) -> Result<Vec<String>, StoreError> {
        self.inner.expire(now, limit).await
    }
    async fn unfinished(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.inner.unfinished().await
    }
}

impl ScanTasks for Faulty {
    async fn scan(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        self.inner.scan(filter, cursor, limit).await
    }
    async fn count(&self) -> Result<TaskCounts, StoreError> {
        self.inner.count().await
    }
}

impl ClaimStore for Faulty {
    async fn claim(
        &self,
        worker: &str,
        until: SystemTime,
        limit: usize,
        skip: &[String],
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let claimed = self.inner.claim(worker, until, limit, skip).await?;
        let pause = self.faults().pause_claims.clone();
        if let Some(pause) = pause.filter(|_| !claimed.is_empty()) {
            pause.notified().await;
        }
        Ok(claimed)
    }
    async fn lapsed(&self, now: SystemTime, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        self.inner.lapsed(now, limit).await
    }
    async fn changes(&self, cursor: Option<u64>, limit: usize) -> Result<Changes, StoreError> {
        self.inner.changes(cursor, limit).await
    }
    fn is_shared(&self) -> bool {
        false
    }
}

/// A process paused between claiming a task and starting its tool (as by a stop signal)
/// finds, once it goes on, that the task lapsed and another process settled it: it never
/// starts the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_paused_between_claim_and_start_never_starts_a_task_settled_meanwhile() {
    let store = Faulty::default();
    let resume = Arc::new(tokio::sync::Notify::new());
    store.faults().pause_claims = Some(Arc::clone(&resume));
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let lease = Duration::from_millis(300);
    let config = |execute| EngineConfig {
        lease,
        execute,
        ..EngineConfig::default()
    };
    // Serves only: its tasks wait for a runner; it settles lapsed leases.
    let front = Server::builder()
        .tool(
            Tool::new("counted", |_, _| async { text("ran") }).task_support(TaskSupport::Required),
        )
        .engine_config(config(false))
        .store(store.clone())
        .build()
        .unwrap();
    let counter = Arc::clone(&started);
    let runner = Server::builder()
        .tool(
            Tool::new("counted", move |_, _| {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    text("ran")
                }
            })
            .task_support(TaskSupport::Required),
        )
        .engine_config(config(true))
        .store(store.clone())
        .build()
        .unwrap();
    let (session, _out) = front.session_for(None);
    let r = call(
        &session,
        "tools/call",
        json!({"name": "counted", "arguments": {}}),
    )
    .await;
    let id = r["result"]["taskId"].as_str().expect("a task").to_owned();
    // A read starts the runner's claim loop; it claims the task and pauses.
    let (on_runner, _out) = runner.session_for(None);
    call(&on_runner, "tasks/get", json!({"taskId": id})).await;
    let done = settled(&session, &id).await;
    assert_eq!(done["status"], "failed", "{done}");
    resume.notify_one();
    // What the runner does once it goes on: its bounded chance to start the tool.
    tokio::time::sleep(lease * 3).await;
    assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 0);
    let after = call(&session, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(after["result"]["status"], "failed", "{after}");
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_is_answered_with_its_task() {
    let store = Faulty::default();
    store.faults().lose_after_storing = 1;
    let server = server_on(store.clone(), Duration::from_secs(30));
    let (session, _out) = server.session_for(None);
    let r = start(&session, "quick", "found").await;
    let id = r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("the stored task is answered as created: {r}"));
    let done = settled(&session, id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "quick found");
}

/// Calls `tool` with `word` while the store holds creates back: the call is answered as of
/// unknown outcome, naming its task; then the first create held back lands, late, and the
/// task ends with `answer`. Returns the creates held back.
async fn held_back_then_landed(tool: &str, word: &str, answer: &str) -> Vec<TaskRecord> {
    let store = Faulty::default();
    store.faults().hold_creates = Some(Vec::new());
    let server = server_on(store.clone(), Duration::from_secs(30));
    let (session, _out) = server.session_for(None);
    let r = start(&session, tool, word).await;
    let id = unknown_outcome(&r);
    let held = store.faults().hold_creates.take().unwrap();
    assert!(held.iter().all(|record| record.id == id));
    store.inner.create(held[0].clone()).await.unwrap();
    let done = settled(&session, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], answer);
    held
}

#[tokio::test]
async fn a_create_of_unknown_outcome_names_its_task_which_runs_once_it_is_stored() {
    let held = held_back_then_landed("quick", "late", "quick late").await;
    // Sent once, then once more to settle it; the second never lands.
    assert_eq!(held.len(), 2, "sent once, then once more to settle it");
}

/// The same for a tool that does not end at once: it began before the create and waits
/// for it, then goes on once its task turns up.
#[tokio::test]
async fn a_tool_waiting_for_a_create_of_unknown_outcome_goes_on_once_its_task_is_stored() {
    let held = held_back_then_landed("later", "on", "later on").await;
    assert_eq!(held[0].status.as_str(), "working", "stored as it started");
}

/// A keyed create whose outcome stays unknown is answered as retryable; the client's retry
/// with the same key, once the store answers again, gets the task the first create stored,
/// which ran once.
#[tokio::test]
async fn a_keyed_create_of_unknown_outcome_is_retryable_and_the_retry_finds_its_task() {
    let store = Faulty::default();
    store.faults().hold_creates = Some(Vec::new());
    let server = server_on(store.clone(), Duration::from_secs(30));
    let (session, _out) = server.session_for(None);
    let call_keyed = async |session: &Session, word: &str| {
        let mut params = json!({"name": "quick", "arguments": {"word": word}});
        params["_meta"] = meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
        params["_meta"]["io.github.mcp-tasks/idempotencyKey"] = json!("order-1");
        request(session, 1, "tools/call", params).await
    };
    let r = call_keyed(&session, "once").await;
    assert_eq!(
        r["error"]["code"], -32000,
        "retryable, not a plain failure: {r}"
    );
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("call again with the same idempotency key"),
        "{r}"
    );
    assert!(r["error"]["data"]["retryAfterMs"].is_u64(), "{r}");
    // The first create lands late; the retry finds it.
    let held = store.faults().hold_creates.take().unwrap();
    assert_eq!(held.len(), 2, "sent once, then once more to settle it");
    let id = held[0].id.clone();
    store
        .inner
        .create(held.into_iter().next().unwrap())
        .await
        .unwrap();
    let retried = call_keyed(&session, "once").await;
    assert_eq!(retried["result"]["taskId"], id.as_str(), "{retried}");
    let done = settled(&session, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "quick once");
    // One task in the store: the retry started nothing.
    assert_eq!(store.inner.count().await.unwrap().total(), 1);
}

/// A client retries a keyed create several times while every create's answer is lost:
/// each try looks for its task in the background, and each finds the one that lands, under
/// the same lease of this process. The tool runs once, not once per try.
#[tokio::test(start_paused = true)]
async fn tries_of_a_keyed_create_that_all_find_the_late_task_run_it_once() {
    let store = Faulty::default();
    store.faults().hold_creates = Some(Vec::new());
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let server = Server::builder()
        .tool(
            Tool::new("counted", move |_, _| {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    text("counted")
                }
            })
            .task_support(TaskSupport::Required),
        )
        .engine_config(EngineConfig {
            lease: Duration::from_secs(30),
            ..EngineConfig::default()
        })
        .store(store.clone())
        .build()
        .unwrap();
    let (session, _out) = server.session_for(None);
    let call_keyed = async |session: &Session| {
        let mut params = json!({"name": "counted", "arguments": {}});
        params["_meta"] = meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
        params["_meta"]["io.github.mcp-tasks/idempotencyKey"] = json!("order-2");
        request(session, 1, "tools/call", params).await
    };
    for _ in 0..3 {
        let r = call_keyed(&session).await;
        assert_eq!(r["error"]["code"], -32000, "retryable: {r}");
    }
    // The first try's create lands; every try's search finds it.
    let held = store.faults().hold_creates.take().unwrap();
    assert_eq!(held.len(), 6, "each try sent its create twice");
    let id = held[0].id.clone();
    store
        .inner
        .create(held.into_iter().next().unwrap())
        .await
        .unwrap();
    let done = settled(&session, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    // Every search has had time to find the task (they look at least once a second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let retried = call_keyed(&session).await;
    assert_eq!(retried["result"]["taskId"], id.as_str(), "{retried}");
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the tool ran once"
    );
}

#[tokio::test]
async fn an_outcome_the_store_refuses_fails_the_task_with_the_cause() {
    let store = Faulty::default();
    store.faults().refuse_results = Some(StoreError::backend(
        "the faulty store: the value is too large",
    ));
    let server = server_on(store.clone(), Duration::from_millis(300));
    let (session, _out) = server.session_for(None);
    fails_for_its_outcome(&session, "quick", "the value is too large").await;
}

/// Calls `tool`, whose task then fails: its outcome could not be stored, for `cause`.
async fn fails_for_its_outcome(session: &Session, tool: &str, cause: &str) {
    let r = start(session, tool, "").await;
    let id = r["result"]["taskId"].as_str().unwrap().to_owned();
    let done = settled(session, &id).await;
    assert_eq!(done["status"], "failed", "{done}");
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the task's outcome could not be stored") && message.contains(cause),
        "{done}"
    );
}

#[tokio::test]
async fn an_outcome_stored_after_an_outage_of_many_leases_keeps_its_result() {
    let lease = Duration::from_millis(200);
    let store = Faulty::default();
    store.faults().refuse_outcomes = Some(StoreError::Unavailable(
        "the faulty store: out of reach".into(),
    ));
    let server = server_on(store.clone(), lease);
    let (session, _out) = server.session_for(None);
    let r = start(&session, "quick", "kept").await;
    let id = r["result"]["taskId"].as_str().unwrap().to_owned();
    tokio::time::sleep(lease * 5).await;
    store.faults().refuse_outcomes = None;
    let done = settled(&session, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "quick kept");
}

/// The tool of an idempotent task that ends in its first poll is stored settled: its task
/// costs one write of the store, answered as a new task starts (`working`) and read as
/// finished at once. A tool that does not end at once costs a create, then its outcome,
/// and so does one not declared idempotent, which starts only once its task is stored.
#[tokio::test]
async fn a_task_whose_tool_ends_at_once_is_stored_in_one_write() {
    let store = Faulty::default();
    let server = Server::builder()
        .tool(at_once())
        .tool(idempotent(
            Tool::new("later", |_, _| async {
                tokio::task::yield_now().await;
                text("after a pause")
            })
            .task_support(TaskSupport::Required),
        ))
        .tool(
            Tool::new("plain", |_, _| async { text("plain") }).task_support(TaskSupport::Required),
        )
        .store(store.clone())
        .build()
        .unwrap();
    let (session, _out) = server.session_for(None);
    let r = start(&session, "quick", "").await;
    assert_eq!(
        r["result"]["status"], "working",
        "a new task starts working: {r}"
    );
    let id = r["result"]["taskId"].as_str().unwrap().to_owned();
    let stored = store.inner.get(&id).await.unwrap().expect("stored");
    assert_eq!(
        stored.status.as_str(),
        "completed",
        "stored settled: {stored:?}"
    );
    let done = settled(&session, &id).await;
    assert_eq!(done["result"]["content"][0]["text"], "at once", "{done}");
    assert_eq!(store.faults().writes, 1, "one write for the whole task");

    for (tool, answer, writes) in [("later", "after a pause", 3), ("plain", "plain", 5)] {
        let r = start(&session, tool, "").await;
        let id = r["result"]["taskId"].as_str().unwrap().to_owned();
        let done = settled(&session, &id).await;
        assert_eq!(done["result"]["content"][0]["text"], answer, "{done}");
        assert_eq!(
            store.faults().writes,
            writes,
            "{tool}: a create, then the outcome"
        );
    }
}

/// A create the store refuses answers the call with an error and stops the idempotent
/// tool that began in its first poll (its future is dropped), while a tool not declared
/// idempotent never began; the slot it took is free again, so a server with one slot runs
/// the next task once the store takes creates again.
#[tokio::test]
async fn a_create_the_store_refuses_stops_the_tool_and_frees_its_slot() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&dropped);
    let began = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&began);
    let store = Faulty::default();
    let server = Server::builder()
        .tool(at_once())
        .tool(idempotent(
            Tool::new("waits", move |_, _| {
                let guard = Dropped(Arc::clone(&flag));
                async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                    text("never")
                }
            })
            .task_support(TaskSupport::Required),
        ))
        .tool(
            Tool::new("plain", move |_, _| {
                count.fetch_add(1, Ordering::SeqCst);
                async { text("plain") }
            })
            .task_support(TaskSupport::Required),
        )
        .engine_config(EngineConfig {
            max_running: 1,
            ..EngineConfig::default()
        })
        .store(store.clone())
        .build()
        .unwrap();
    let (session, _out) = server.session_for(None);
    store.faults().refuse_creates = Some(StoreError::Unavailable(
        "the faulty store: out of reach".into(),
    ));
    let r = start(&session, "waits", "").await;
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("out of reach"), "{r}");
    assert!(dropped.load(Ordering::SeqCst), "the tool was stopped");
    for tool in ["quick", "plain"] {
        let r = start(&session, tool, "").await;
        assert!(r["error"].is_object(), "{r}");
    }
    assert_eq!(began.load(Ordering::SeqCst), 0, "never began");
    store.faults().refuse_creates = None;
    let r = start(&session, "quick", "").await;
    let id = r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let done = settled(&session, &id).await;
    assert_eq!(done["result"]["content"][0]["text"], "at once", "{done}");
}

/// A task stored settled (an idempotent tool that ended in its first poll, through the
/// first of two processes on one store) is read settled, with its result, by the second,
/// and is not among the store's unfinished tasks (`third` is a third handle on the store).
#[cfg(any(feature = "postgres", feature = "redis", feature = "sqlite"))]
async fn stored_settled_is_read_by_another_process(
    first: impl ClaimStore,
    second: impl ClaimStore,
    third: impl ClaimStore,
) {
    let one = server_on(first, Duration::from_secs(30));
    let two = server_on(second, Duration::from_secs(30));
    let (by_one, _out) = one.session_for(None);
    let (by_two, _out) = two.session_for(None);
    let r = start(&by_one, "quick", "shared").await;
    let id = r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let got = call(&by_two, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(got["result"]["status"], "completed", "{got}");
    assert_eq!(
        got["result"]["result"]["content"][0]["text"], "quick shared",
        "{got}"
    );
    let unfinished = third.unfinished().await.unwrap();
    assert!(unfinished.iter().all(|rec| rec.id != id), "not unfinished");
}

// ---------------------------------------------------------------------------------------
// SQLite

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_stored_settled_on_sqlite_is_read_by_another_process() {
    use mcp_tasks_runtime::store::SqliteTaskStore;
    let dir = std::env::temp_dir().join(format!("mcp-tasks-settled-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let open = || SqliteTaskStore::open(dir.join("tasks.db")).unwrap();
    stored_settled_is_read_by_another_process(open(), open(), open()).await;
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use mcp_tasks_runtime::store::TestDatabase;
    use mcp_tasks_runtime::store::{PostgresOptions, PostgresTaskStore};

    async fn open(db: &TestDatabase, options: PostgresOptions) -> PostgresTaskStore {
        PostgresTaskStore::connect_with(&db.url(), options)
            .await
            .unwrap_or_else(|e| panic!("cannot open the test store: {e}"))
    }

    /// Makes every insert into the tasks table wait for the advisory lock 4242 (a trigger),
    /// and returns a connection of the test's own that holds it until
    /// `pg_advisory_unlock(4242)`. Nothing else waits: reads, claims and updates go on.
    async fn hold_inserts(db: &TestDatabase) -> tokio_postgres::Client {
        db.execute(
            "CREATE FUNCTION mcp_tasks.hold() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$; \
             CREATE TRIGGER hold BEFORE INSERT ON mcp_tasks.tasks \
             FOR EACH ROW EXECUTE FUNCTION mcp_tasks.hold()",
        )
        .await;
        let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute("SELECT pg_advisory_lock(4242)")
            .await
            .unwrap();
        client
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_create_held_up_by_a_lock_names_its_task_which_runs_once_stored() {
        let Some(db) = TestDatabase::create("create_unknown") else {
            return;
        };
        let options = PostgresOptions::default().timeout(Duration::from_millis(300));
        let store = open(&db, options).await;
        let server = server_on(store, Duration::from_secs(10));
        let (session, _out) = server.session_for(None);
        // The create is sent and waits in the database, then times out.
        let locker = hold_inserts(&db).await;
        let r = start(&session, "quick", "locked").await;
        let id = unknown_outcome(&r);
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("PostgreSQL task store")
        );
        locker
            .batch_execute("SELECT pg_advisory_unlock(4242)")
            .await
            .unwrap();
        let done = settled(&session, &id).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["result"]["content"][0]["text"], "quick locked");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_stored_settled_is_read_by_another_process() {
        let Some(db) = TestDatabase::create("stored_settled") else {
            return;
        };
        let options = PostgresOptions::default;
        stored_settled_is_read_by_another_process(
            open(&db, options()).await,
            open(&db, options()).await,
            open(&db, options()).await,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_outcome_postgres_refuses_fails_the_task_with_the_cause() {
        let Some(db) = TestDatabase::create("outcome_refused") else {
            return;
        };
        let store = open(&db, PostgresOptions::default()).await;
        let server = server_on(store, Duration::from_secs(1));
        let (session, _out) = server.session_for(None);
        // Written after its create, and (idempotent, ended in its first poll) in its create.
        for tool in ["nul", "nul_at_once"] {
            fails_for_its_outcome(&session, tool, "NUL").await;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Redis

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use mcp_tasks_runtime::store::RedisServer;
    use mcp_tasks_runtime::store::testing::sample_record;
    use mcp_tasks_runtime::store::{RedisOptions, RedisTaskStore};

    async fn open(server: &RedisServer, timeout: Duration) -> RedisTaskStore {
        RedisTaskStore::connect_with(&server.url(), RedisOptions::default().timeout(timeout))
            .await
            .unwrap_or_else(|e| panic!("cannot open the test store: {e}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_stored_settled_is_read_by_another_process() {
        let Some(db) = mcp_tasks_runtime::store::TestRedis::create("stored settled") else {
            return;
        };
        let connect = async || RedisTaskStore::connect(&db.store_url()).await.unwrap();
        stored_settled_is_read_by_another_process(
            connect().await,
            connect().await,
            connect().await,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_create_held_up_by_paused_writes_names_its_task_which_runs_once_stored() {
        let Some(redis) = RedisServer::start("create_unknown") else {
            return;
        };
        let store = open(&redis, Duration::from_millis(300)).await;
        // The create script is loaded now: under the pause, the create itself is sent and
        // waits (loading the script would wait as well, and a create that timed out there
        // was never sent).
        store
            .create(sample_record("warm", None, SystemTime::now()))
            .await
            .unwrap();
        let server = server_on(store, Duration::from_secs(10));
        let (session, _out) = server.session_for(None);
        redis.pause_writes(WITHIN);
        let r = start(&session, "quick", "paused").await;
        let id = unknown_outcome(&r);
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Redis task store")
        );
        redis.unpause();
        let done = settled(&session, &id).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["result"]["content"][0]["text"], "quick paused");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_fail_at_once_while_redis_is_down_and_succeed_once_it_is_back() {
        let Some(mut redis) = RedisServer::start("down") else {
            return;
        };
        // A timeout far past the test's bound: only failing at once passes.
        let store = open(&redis, Duration::from_secs(600)).await;
        store
            .create(sample_record("before", None, SystemTime::now()))
            .await
            .unwrap();
        redis.kill();
        let down = async {
            // Each request waiting for a reconnect (seconds each) would not fit the bound.
            let mut unavailable = 0;
            for n in 0..40 {
                let read = store.get("before").await;
                let write = store
                    .create(sample_record(
                        &format!("during-{n}"),
                        None,
                        SystemTime::now(),
                    ))
                    .await;
                for result in [read.map(drop), write] {
                    match result {
                        Err(StoreError::Unavailable(message)) => {
                            assert!(message.contains("Redis task store"), "{message}");
                            unavailable += 1;
                        }
                        other => assert!(other.is_err(), "Redis is down: {other:?}"),
                    }
                }
            }
            unavailable
        };
        let unavailable = tokio::time::timeout(WITHIN, down)
            .await
            .expect("requests fail at once while Redis is down");
        assert!(
            unavailable >= 70,
            "{unavailable} of 80 said the store is unavailable"
        );
        redis.restart();
        let back = async {
            loop {
                // The restarted server is empty.
                if let Ok(None) = store.get("before").await {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(WITHIN, back)
            .await
            .expect("the store is back once Redis is");
        store
            .create(sample_record("after", None, SystemTime::now()))
            .await
            .unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Questions while the store is briefly out of reach: a read that fails says nothing of a
// question, so the question is neither dropped (left unasked until the client answered the
// others) nor turned into a failure of the tool that asked it.

/// `both` asks two questions at once and answers with both answers.
fn asking_server(store: Faulty) -> Server {
    Server::builder()
        .tool(
            Tool::new("both", |cx, _| async move {
                let client = cx.client();
                let name = client.elicit(
                    "name?",
                    json!({"type": "object", "properties": {"name": {"type": "string"}}}),
                );
                let ok = client.elicit(
                    "ok?",
                    json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
                );
                let (name, ok) = tokio::join!(name, ok);
                let (name, ok) = (name?, ok?);
                text(format!(
                    "{} {}",
                    name.content.unwrap_or_default()["name"],
                    ok.content.unwrap_or_default()["ok"]
                ))
            })
            .task_support(TaskSupport::Required),
        )
        .store(store)
        .build()
        .unwrap()
}

/// Every read of the task with both questions open fails a few times: both questions still
/// reach the session before either is answered, and the tool gets both answers.
#[tokio::test(start_paused = true)]
async fn questions_asked_at_once_survive_reads_the_store_failed() {
    for failing in [1, 2, 4, 8] {
        let store = Faulty::default();
        store.faults().unreachable_reads_of_two_questions = failing;
        let (mut c, _) = Client::stateful(&asking_server(store.clone())).await;
        let created = c
            .request("tools/call", json!({"name": "both", "task": {}}))
            .await;
        let id = created["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {created}"))
            .to_owned();
        let mut questions: Vec<Value> = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), async {
            while questions.len() < 2 {
                let m = c.next_outbound().await;
                if m["method"] == "elicitation/create" {
                    questions.push(m);
                }
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!("{failing} failed reads: both questions were not asked at once: {questions:?}")
        });
        assert_eq!(
            store.faults().unreachable_reads_of_two_questions,
            0,
            "every failing read happened"
        );
        for q in &questions {
            let content = if q["params"]["message"] == "name?" {
                json!({"name": "Ada"})
            } else {
                json!({"ok": true})
            };
            let answer = json!({"jsonrpc": "2.0", "id": q["id"],
                "result": {"action": "accept", "content": content}});
            c.raw(&answer.to_string()).await;
        }
        let r = c.request("tasks/result", json!({"taskId": id})).await;
        assert_eq!(
            r["result"]["content"][0]["text"], "\"Ada\" true",
            "{failing} failed reads: {r}"
        );
    }
}
