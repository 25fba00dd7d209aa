//! Durable steps with real engines: a task interrupted between two steps reruns without
//! doing the first again; outputs over the limit and repeated names are refused; a plain
//! call runs its steps; a step finished after another process took the task over is not
//! stored, and neither is the run's outcome.
//!
//! The processes share one in-memory store (the stores' own encodings of steps are tested
//! with the stores). Time is paused; every wait is bounded.

use mcp_tasks_runtime::model::{JsonObject, TaskSupport};
use mcp_tasks_runtime::store::{MemoryTaskStore, TaskStore};
use mcp_tasks_runtime::task::{Lease, TaskRecord};
use mcp_tasks_runtime::{
    CancellationToken, EngineConfig, MAX_STEP_OUTPUT_BYTES, RestartPolicy, Server, Session, Tool,
    ToolError, Worker,
};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use support::{eventually, meta, request, text};

mod support;

/// A bound on every wait.
const WITHIN: Duration = Duration::from_secs(120);

/// What the tools did, shared by every process of a test.
#[derive(Clone, Default)]
struct Effects {
    charged: Arc<AtomicUsize>,
    mailed: Arc<AtomicUsize>,
    /// While set, `order` waits between its steps until its run is stopped.
    hold: Arc<AtomicBool>,
    /// `fenced` waits for this before its step.
    go: Arc<tokio::sync::Notify>,
    /// Set once `fenced` waits for `go`.
    waiting: Arc<AtomicBool>,
    /// What `fenced`'s step answered, when it failed.
    step_error: Arc<Mutex<Option<String>>>,
}

impl Effects {
    fn counts(&self) -> (usize, usize) {
        (
            self.charged.load(Ordering::SeqCst),
            self.mailed.load(Ordering::SeqCst),
        )
    }
}

/// `order` charges then mails, each a step; `fenced` runs one step once told to; `big`
/// makes an output over the limit; `plain` runs two steps in a plain call, and `twice` one
/// name twice.
fn tools(effects: &Effects) -> Vec<Tool> {
    let e = effects.clone();
    let order = Tool::new("order", move |cx, args: JsonObject| {
        let e = e.clone();
        async move {
            let steps = cx.steps();
            let order = args["order"].as_str().unwrap_or("?").to_owned();
            let receipt: String = steps
                .run("charge", || async {
                    e.charged.fetch_add(1, Ordering::SeqCst);
                    Ok(format!("receipt {order}"))
                })
                .await?;
            if e.hold.load(Ordering::SeqCst) {
                cx.cancellation().cancelled().await;
                return Err(ToolError::cancelled());
            }
            steps
                .run("mail", || async {
                    e.mailed.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .await?;
            text(format!("{receipt} mailed"))
        }
    })
    .task_support(TaskSupport::Required)
    .durable_steps(true)
    .on_restart(RestartPolicy::Rerun);
    let e = effects.clone();
    let fenced = Tool::new("fenced", move |cx, _| {
        let e = e.clone();
        async move {
            e.waiting.store(true, Ordering::SeqCst);
            e.go.notified().await;
            let charged = cx
                .steps()
                .run("charge", || async {
                    e.charged.fetch_add(1, Ordering::SeqCst);
                    Ok(1)
                })
                .await;
            if let Err(error) = &charged {
                *e.step_error.lock().unwrap() = Some(error.to_string());
            }
            text(format!("charged {}", charged?))
        }
    })
    .task_support(TaskSupport::Required)
    .durable_steps(true);
    let big = Tool::new("big", |cx, _| async move {
        let output: String = cx
            .steps()
            .run("render", || async { Ok("x".repeat(MAX_STEP_OUTPUT_BYTES)) })
            .await?;
        text(format!("{} bytes", output.len()))
    })
    .task_support(TaskSupport::Required)
    .durable_steps(true);
    let e = effects.clone();
    let plain = Tool::new("plain", move |cx, _| {
        let e = e.clone();
        async move {
            let steps = cx.steps();
            let n: usize = steps
                .run("charge", || async {
                    Ok(e.charged.fetch_add(1, Ordering::SeqCst) + 1)
                })
                .await?;
            let m: usize = steps
                .run("mail", || async {
                    Ok(e.mailed.fetch_add(1, Ordering::SeqCst) + 1)
                })
                .await?;
            text(format!("charged {n}, mailed {m}"))
        }
    })
    .durable_steps(true);
    let twice = Tool::new("twice", |cx, _| async move {
        let steps = cx.steps();
        // A failed step may be tried again under its name...
        let failed: Result<u8, ToolError> = steps
            .run("once", || async { Err(ToolError::new("not yet")) })
            .await;
        assert!(failed.is_err());
        let first: u8 = steps.run("once", || async { Ok(1) }).await?;
        // ...but a name gives one output per run.
        let second: u8 = steps.run("once", || async { Ok(2) }).await?;
        text(format!("{first} {second}"))
    })
    .task_support(TaskSupport::Optional);
    vec![order, fenced, big, plain, twice]
}

fn server_on(store: &Shared, effects: &Effects, execute: bool) -> Server {
    let mut builder = Server::builder()
        .engine_config(EngineConfig {
            lease: Duration::from_secs(3),
            execute,
            ..EngineConfig::default()
        })
        .store(store.clone());
    for tool in tools(effects) {
        builder = builder.tool(tool);
    }
    builder.build().unwrap()
}

async fn call(session: &Session, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
    request(session, 1, method, params).await
}

/// Starts a task of `tool`; returns its id.
async fn start(session: &Session, tool: &str, arguments: Value) -> String {
    let r = call(
        session,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {r}"))
        .to_owned()
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

fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_task_interrupted_between_steps_reruns_only_the_unfinished_one() {
    let store = Shared::default();
    let effects = Effects::default();
    effects.hold.store(true, Ordering::SeqCst);
    // The front takes calls and settles lapsed leases; the worker runs the first run.
    let front = server_on(&store, &effects, false);
    let stop = CancellationToken::new();
    let worker = Worker::new(server_on(&store, &effects, true))
        .shutdown_signal(stop.clone())
        .shutdown_grace(Duration::ZERO);
    let worker = tokio::spawn(worker.run());
    let (session, _out) = front.session_for(None);
    let id = start(&session, "order", json!({"order": "A-1"})).await;
    eventually(async || record(&store, &id).await.steps.contains_key("charge")).await;
    assert_eq!(
        record(&store, &id).await.steps["charge"],
        json!("receipt A-1")
    );
    assert_eq!(effects.counts(), (1, 0));

    // The worker stops while the task sits between its steps: its run ends unsettled.
    stop.cancel();
    worker.await.unwrap().unwrap();
    let left = record(&store, &id).await;
    assert!(!left.status.is_terminal(), "{:?}", left.status);
    assert!(left.outcome.is_none());

    // Another process takes it over and runs it again from its stored arguments and steps.
    effects.hold.store(false, Ordering::SeqCst);
    let second = server_on(&store, &effects, true);
    second.recover().await.unwrap();
    let done = settled(&session, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(first_text(&done["result"]), "receipt A-1 mailed");
    assert_eq!(effects.counts(), (1, 1), "each step was done once");
    let steps = record(&store, &id).await.steps;
    assert_eq!(
        steps.keys().collect::<Vec<_>>(),
        ["charge", "mail"],
        "{steps:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_output_over_the_limit_fails_the_step_and_stores_nothing() {
    let store = Shared::default();
    let server = server_on(&store, &Effects::default(), true);
    let (session, _out) = server.session_for(None);
    let id = start(&session, "big", json!({})).await;
    let done = settled(&session, &id).await;
    // A tool error: the task completes with `isError`, saying why.
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(
        first_text(&done["result"]),
        format!(
            "the output of step \"render\" is 65538 bytes of JSON; at most {MAX_STEP_OUTPUT_BYTES} can be stored"
        )
    );
    assert!(record(&store, &id).await.steps.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_plain_call_runs_every_step_and_a_name_gives_one_output_per_run() {
    let effects = Effects::default();
    let server = server_on(&Shared::default(), &effects, true);
    let (session, _out) = server.session_for(None);
    for n in 1..=2 {
        let r = request(
            &session,
            1,
            "tools/call",
            json!({"name": "plain", "arguments": {}, "_meta": meta(json!({}))}),
        )
        .await;
        assert_eq!(
            first_text(&r["result"]),
            format!("charged {n}, mailed {n}"),
            "{r}"
        );
    }
    assert_eq!(
        effects.counts(),
        (2, 2),
        "nothing is stored for a plain call"
    );

    let r = request(
        &session,
        2,
        "tools/call",
        json!({"name": "twice", "arguments": {}, "_meta": meta(json!({}))}),
    )
    .await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        first_text(&r["result"]),
        "the step \"once\" already ran in this run: give each step of a run a name of its own"
    );
}

#[tokio::test(start_paused = true)]
async fn a_step_finished_after_a_takeover_is_fenced_out() {
    let store = Shared::default();
    let effects = Effects::default();
    let server = server_on(&store, &effects, true);
    let (session, _out) = server.session_for(None);
    let id = start(&session, "fenced", json!({})).await;
    eventually(async || effects.waiting.load(Ordering::SeqCst)).await;

    // Another process takes the task over, as after a lapse of this one's lease.
    let mut rec = record(&store, &id).await;
    let version = rec.version;
    rec.epoch += 1;
    rec.lease = Some(Lease {
        worker: "another-process".into(),
        until: SystemTime::now() + Duration::from_secs(3600),
    });
    assert!(store.compare_and_set(rec, version).await.unwrap());
    effects.go.notify_one();

    eventually(async || effects.step_error.lock().unwrap().is_some()).await;
    let error = effects.step_error.lock().unwrap().clone().unwrap();
    assert_eq!(
        error,
        "the task was taken over by another process: the output of step \"charge\" was not stored and this run stops"
    );
    assert_eq!(effects.counts(), (1, 0), "the step itself ran");
    // Neither the step's output nor the run's outcome was written over the takeover.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let rec = record(&store, &id).await;
    assert!(rec.steps.is_empty(), "{:?}", rec.steps);
    assert!(rec.outcome.is_none());
    assert!(!rec.status.is_terminal(), "{:?}", rec.status);
    assert_eq!(rec.lease.unwrap().worker, "another-process");
}

// ---------------------------------------------------------------------------------------
// One in-memory store shared by the processes of a test

type Shared = Arc<MemoryTaskStore>;

/// The task `id` as stored.
async fn record(store: &Shared, id: &str) -> TaskRecord {
    store.get(id).await.unwrap().expect("the task is stored")
}
