//! Deploys without losing work, in one process on paused time: a shutdown drains task
//! creation, serves the rest while running tasks finish, then hands off what is left at
//! once (a `rerun` task back to the queue, any other failed); the kill switch turns task
//! creation off from code or from a file, per tool or for the whole server.
//!
//! Two servers share one store in memory, as two processes would share a database.

use mcp_tasks_runtime::creation::CreationOff;
use mcp_tasks_runtime::model::TaskSupport;
use mcp_tasks_runtime::store::MemoryTaskStore;
use mcp_tasks_runtime::{EngineConfig, HandOff, RestartPolicy, Server, Tool};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::{Client, tasks_caps, text};

mod support;

/// One store in memory, shared by the servers of a test.
type Shared = Arc<MemoryTaskStore>;

/// The lease: long, so that nothing in these tests is taken over by a lapse.
const LEASE: Duration = Duration::from_secs(30);

/// Counts the runs of the tools that started, and of those, the ones dropped unfinished.
#[derive(Clone, Default)]
struct Runs {
    started: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

/// Counts a drop of the future that holds it, unless it was defused.
struct DropCount(Arc<AtomicUsize>, bool);

impl Drop for DropCount {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A tool that sleeps `ms` (argument) and answers `name`; `rerun` ones go back to the queue
/// when cut short.
fn sleeper(name: &'static str, support: TaskSupport, rerun: bool, runs: &Runs) -> Tool {
    let runs = runs.clone();
    let tool = Tool::new(name, move |_, args| {
        let runs = runs.clone();
        async move {
            runs.started.fetch_add(1, Ordering::SeqCst);
            let mut guard = DropCount(Arc::clone(&runs.dropped), false);
            let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            guard.1 = true;
            text(name)
        }
    })
    .task_support(support);
    if rerun {
        tool.durable_steps(true).on_restart(RestartPolicy::Rerun)
    } else {
        tool
    }
}

fn server(store: &Shared, runs: &Runs, execute: bool) -> Server {
    Server::builder()
        .tool(sleeper("work", TaskSupport::Required, false, runs))
        .tool(sleeper("again", TaskSupport::Required, true, runs))
        .tool(sleeper("either", TaskSupport::Optional, false, runs))
        .engine_config(EngineConfig {
            lease: LEASE,
            execute,
            ..EngineConfig::default()
        })
        .store(store.clone())
        .build()
        .unwrap()
}

fn task_id(r: &Value) -> String {
    r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {r}"))
        .to_owned()
}

/// The answer is the retryable refusal of a process whose task creation is off.
fn refused(r: &Value, why: CreationOff) {
    assert_eq!(r["error"]["code"], -32000, "{r}");
    assert_eq!(r["error"]["data"]["creation"], why.as_str(), "{r}");
    assert!(r["error"]["data"]["retryAfterMs"].as_u64().is_some(), "{r}");
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_refuses_new_tasks_and_serves_the_rest_while_running_tasks_finish() {
    let (store, runs) = (Shared::default(), Runs::default());
    let a = server(&store, &runs, true);
    let mut client = Client::stateless(&a, tasks_caps());
    let id = task_id(&client.call("work", json!({"ms": 2000})).await);
    let stopping = tokio::spawn({
        let a = a.clone();
        async move { a.shutdown(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(a.creation().is_draining());
    // No new task, not even a synchronous fallback of an optional tool: the process goes.
    refused(
        &client.call("work", json!({"ms": 1})).await,
        CreationOff::Draining,
    );
    refused(
        &client.call("either", json!({"ms": 1})).await,
        CreationOff::Draining,
    );
    // The running task is served, and finishes.
    assert_eq!(client.get(&id).await["result"]["status"], "working");
    let done = client.poll_until(&id, &["completed", "failed"]).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    let report = stopping.await.unwrap();
    assert_eq!(report, HandOff::default());
    assert_eq!(runs.started.load(Ordering::SeqCst), 1);
    assert_eq!(runs.dropped.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn past_the_grace_a_rerun_task_goes_back_to_the_queue_and_any_other_fails_at_once() {
    let (store, runs) = (Shared::default(), Runs::default());
    let a = server(&store, &runs, true);
    let mut on_a = Client::stateless(&a, tasks_caps());
    let hour = json!({"ms": 3_600_000});
    let again = task_id(&on_a.call("again", hour.clone()).await);
    let work = task_id(&on_a.call("work", hour).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(runs.started.load(Ordering::SeqCst), 2);

    let began = tokio::time::Instant::now();
    let report = a.shutdown(Duration::from_secs(1)).await;
    assert_eq!(report.requeued, 1, "{report:?}");
    assert_eq!(report.failed, 1, "{report:?}");
    assert!(began.elapsed() < LEASE / 2);
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Both tools were dropped, not left running.
    assert_eq!(runs.dropped.load(Ordering::SeqCst), 2);

    // Another process sees the outcome at once, and runs the requeued task, well before the
    // lease would have lapsed.
    let b_runs = Runs::default();
    let b = server(&store, &b_runs, true);
    let mut on_b = Client::stateless(&b, tasks_caps());
    let failed = on_b.get(&work).await;
    assert_eq!(failed["result"]["status"], "failed", "{failed}");
    assert!(
        failed
            .to_string()
            .contains("interrupted by a server shutdown"),
        "{failed}"
    );
    let queued = on_b.get(&again).await;
    assert_eq!(queued["result"]["status"], "working", "{queued}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(b_runs.started.load(Ordering::SeqCst), 1);
    assert!(began.elapsed() < LEASE / 2);
}

#[tokio::test(start_paused = true)]
async fn a_second_signal_cuts_the_grace_short() {
    let (store, runs) = (Shared::default(), Runs::default());
    let a = server(&store, &runs, true);
    let mut client = Client::stateless(&a, tasks_caps());
    let id = task_id(&client.call("again", json!({"ms": 3_600_000})).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let began = tokio::time::Instant::now();
    let force = mcp_tasks_runtime::CancellationToken::new();
    tokio::spawn({
        let force = force.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            force.cancel();
        }
    });
    let report = a.shutdown_until(Duration::from_secs(600), &force).await;
    assert_eq!(report.requeued, 1, "{report:?}");
    assert!(began.elapsed() < Duration::from_secs(2));
    let rec = client.get(&id).await;
    assert_eq!(rec["result"]["status"], "working", "{rec}");
}

#[tokio::test(start_paused = true)]
async fn the_kill_switch_runs_optional_tools_synchronously_and_refuses_the_rest() {
    let (store, runs) = (Shared::default(), Runs::default());
    let a = server(&store, &runs, true);
    let creation = a.creation();
    let mut client = Client::stateless(&a, tasks_caps());
    let before = task_id(&client.call("work", json!({"ms": 1000})).await);

    creation.pause_tool("either");
    assert_eq!(creation.is_paused("either"), Some(CreationOff::Paused));
    let sync = client.call("either", json!({"ms": 10})).await;
    assert_eq!(sync["result"]["content"][0]["text"], "either", "{sync}");
    assert!(sync["result"].get("taskId").is_none(), "{sync}");
    // Other tools still make tasks.
    task_id(&client.call("work", json!({"ms": 10})).await);

    creation.pause();
    refused(
        &client.call("work", json!({"ms": 10})).await,
        CreationOff::Paused,
    );
    // A task made before is served and runs to its end.
    let done = client.poll_until(&before, &["completed"]).await;
    assert_eq!(done["result"]["status"], "completed");

    creation.resume();
    creation.resume_tool("either");
    task_id(&client.call("either", json!({"ms": 10})).await);
    task_id(&client.call("work", json!({"ms": 10})).await);
}

#[tokio::test(start_paused = true)]
async fn a_paused_tool_waits_in_the_queue_until_its_creation_resumes() {
    let (store, runs) = (Shared::default(), Runs::default());
    let front = server(&store, &Runs::default(), false);
    let runner = server(&store, &runs, true);
    runner.creation().pause_tool("work");
    let mut client = Client::stateless(&front, tasks_caps());
    let id = task_id(&client.call("work", json!({"ms": 10})).await);
    // The runner's loops start on its first request.
    Client::stateless(&runner, tasks_caps()).get(&id).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runs.started.load(Ordering::SeqCst), 0);
    runner.creation().resume_tool("work");
    let done = client.poll_until(&id, &["completed"]).await;
    assert_eq!(done["result"]["status"], "completed");
    assert_eq!(runs.started.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn the_pause_file_turns_creation_off_while_it_exists() {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-pause-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pause");
    let _ = std::fs::remove_file(&path);
    let runs = Runs::default();
    let a = Server::builder()
        .tool(sleeper("work", TaskSupport::Required, false, &runs))
        .tool(sleeper("either", TaskSupport::Optional, false, &runs))
        .pause_file(&path)
        .pause_file_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let mut client = Client::stateless(&a, tasks_caps());
    task_id(&client.call("work", json!({})).await);

    std::fs::write(&path, "# rollback of 1.4\nwork\n").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    refused(&client.call("work", json!({})).await, CreationOff::Paused);
    task_id(&client.call("either", json!({})).await);

    std::fs::write(&path, "").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sync = client.call("either", json!({})).await;
    assert_eq!(sync["result"]["content"][0]["text"], "either", "{sync}");

    std::fs::remove_file(&path).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    task_id(&client.call("work", json!({})).await);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn on_the_2025_wire_a_paused_optional_tool_answers_a_task_request_synchronously() {
    let (store, runs) = (Shared::default(), Runs::default());
    let a = server(&store, &runs, true);
    a.creation().pause();
    let (mut client, _) = Client::stateful(&a).await;
    let sync = client
        .call_with("either", json!({"task": {"ttl": 60_000}}))
        .await;
    assert_eq!(sync["result"]["content"][0]["text"], "either", "{sync}");
    let r = client
        .call_with("work", json!({"task": {"ttl": 60_000}}))
        .await;
    refused(&r, CreationOff::Paused);
    a.creation().resume();
    let task = client
        .call_with("either", json!({"task": {"ttl": 60_000}}))
        .await;
    assert!(task["result"]["task"]["taskId"].is_string(), "{task}");
}

#[tokio::test(start_paused = true)]
async fn a_process_started_under_a_pause_file_never_starts_a_paused_task() {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-pause-start-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pause");
    std::fs::write(&path, "work\n").unwrap();
    let (store, runs) = (Shared::default(), Runs::default());
    let front = server(&store, &Runs::default(), false);
    let mut client = Client::stateless(&front, tasks_caps());
    let id = task_id(&client.call("work", json!({"ms": 10})).await);
    let runner = Server::builder()
        .tool(sleeper("work", TaskSupport::Required, false, &runs))
        .store(store.clone())
        .pause_file(&path)
        .build()
        .unwrap();
    Client::stateless(&runner, tasks_caps()).get(&id).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runs.started.load(Ordering::SeqCst), 0);
    std::fs::remove_file(&path).unwrap();
    let done = client.poll_until(&id, &["completed"]).await;
    assert_eq!(done["result"]["status"], "completed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The console's pause, resume and drain are the kill switch's.
#[cfg(feature = "admin")]
#[test]
fn the_console_switches_the_kill_switch() {
    use mcp_tasks_runtime::admin::Controls;
    let server = Server::builder().build().unwrap();
    let controls = server.creation();
    let console: &dyn Controls = &controls;
    console.pause_tool("work");
    assert_eq!(
        server.creation().is_paused("work"),
        Some(CreationOff::Paused)
    );
    assert_eq!(console.paused_tools(), ["work"]);
    console.resume_tool("work");
    assert_eq!(server.creation().is_paused("work"), None);
    console.drain();
    assert!(console.draining());
    assert_eq!(
        server.creation().is_paused("work"),
        Some(CreationOff::Draining)
    );
    console.undrain();
    assert!(!server.creation().is_draining());
}
