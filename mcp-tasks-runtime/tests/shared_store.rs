//! Two servers on one SQLite file in one process, each with its own store connections, as
//! two processes would have: a cancel through one stops the tool the other runs, and an
//! answer through one reaches the tool waiting on the other. And on a shared store, where a
//! run writes its outcome over the version of the task it started from, a task written
//! meanwhile (its lease renewed, a durable step stored) still gets its outcome, once.

#![cfg(feature = "sqlite")]

use mcp_tasks_runtime::model::{CallToolResult, Content, TaskSupport};
use mcp_tasks_runtime::store::SqliteTaskStore;
use mcp_tasks_runtime::store::TaskStore;
use mcp_tasks_runtime::{EngineConfig, Server, Session, Tool, ToolError};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use support::{asking_tool, eventually, meta, request, tasks_caps};

mod support;

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-shared-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tasks.db")
}

fn server(db: &PathBuf, stopped: Arc<AtomicBool>) -> Server {
    Server::builder()
        .tool(
            Tool::new("wait", move |cx, _| {
                let stopped = Arc::clone(&stopped);
                async move {
                    cx.cancellation().cancelled().await;
                    stopped.store(true, Ordering::Release);
                    Err(ToolError::cancelled())
                }
            })
            .task_support(TaskSupport::Optional),
        )
        .tool(
            asking_tool("ask", "Go on?", "go", "boolean", "go: ")
                .task_support(TaskSupport::Optional),
        )
        .store(SqliteTaskStore::open(db).unwrap())
        .build()
        .unwrap()
}

async fn call(session: &Session, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta(tasks_caps());
    request(session, 1, method, params).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_one_server_stops_the_tool_the_other_runs() {
    let db = temp_db("cancel");
    let stopped = Arc::new(AtomicBool::new(false));
    let runner = server(&db, Arc::clone(&stopped));
    let other = server(&db, Arc::default());
    let (on_runner, _a) = runner.session();
    let (on_other, _b) = other.session();
    let r = call(
        &on_runner,
        "tools/call",
        json!({"name": "wait", "arguments": {}}),
    )
    .await;
    let id = r["result"]["taskId"].as_str().expect("a task").to_owned();
    let r = call(&on_other, "tasks/cancel", json!({"taskId": id})).await;
    assert!(r.get("error").is_none(), "{r}");
    eventually(async || stopped.load(Ordering::Acquire)).await;
    let r = call(&on_runner, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(r["result"]["status"], "cancelled", "{r}");
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_through_one_server_reaches_the_tool_on_the_other() {
    let db = temp_db("answer");
    let runner = server(&db, Arc::default());
    let other = server(&db, Arc::default());
    let (on_runner, _a) = runner.session();
    let (on_other, _b) = other.session();
    let r = call(
        &on_runner,
        "tools/call",
        json!({"name": "ask", "arguments": {}}),
    )
    .await;
    let id = r["result"]["taskId"].as_str().expect("a task").to_owned();
    let mut key = String::new();
    eventually(async || {
        let r = call(&on_other, "tasks/get", json!({"taskId": id})).await;
        match r["result"]["inputRequests"].as_object() {
            Some(requests) if !requests.is_empty() => {
                key = requests.keys().next().unwrap().clone();
                true
            }
            _ => false,
        }
    })
    .await;
    let r = call(
        &on_other,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"go": true}}}}),
    )
    .await;
    assert!(r.get("error").is_none(), "{r}");
    eventually(async || {
        call(&on_runner, "tasks/get", json!({"taskId": id})).await["result"]["status"]
            == "completed"
    })
    .await;
    let r = call(&on_other, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(
        r["result"]["result"]["content"][0]["text"], "go: true",
        "{r}"
    );
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_written_while_it_ran_still_gets_its_outcome_once() {
    let db = temp_db("written");
    let store = Arc::new(SqliteTaskStore::open(&db).unwrap());
    let server = Server::builder()
        .engine_config(EngineConfig {
            // Renewed every 50 ms: the task is written several times while `slow` sleeps.
            lease: std::time::Duration::from_millis(150),
            ..EngineConfig::default()
        })
        .tool(
            Tool::new("slow", |_, _| async {
                tokio::time::sleep(std::time::Duration::from_millis(400)).await;
                Ok(CallToolResult::success(vec![Content::text("slept")]))
            })
            .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("stepped", |cx, _| async move {
                let n: u32 = cx.steps().run("first", || async { Ok(7) }).await?;
                Ok(CallToolResult::success(vec![Content::text(format!(
                    "step {n}"
                ))]))
            })
            .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("quick", |_, _| async {
                Ok(CallToolResult::success(vec![Content::text("at once")]))
            })
            .task_support(TaskSupport::Optional),
        )
        .store(store.clone())
        .build()
        .unwrap();
    let (session, _out) = server.session();
    for (tool, text) in [
        ("slow", "slept"),
        ("stepped", "step 7"),
        ("quick", "at once"),
    ] {
        let r = call(
            &session,
            "tools/call",
            json!({"name": tool, "arguments": {}}),
        )
        .await;
        let id = r["result"]["taskId"].as_str().expect("a task").to_owned();
        eventually(async || {
            call(&session, "tasks/get", json!({"taskId": id})).await["result"]["status"]
                == "completed"
        })
        .await;
        let r = call(&session, "tasks/get", json!({"taskId": id})).await;
        assert_eq!(r["result"]["result"]["content"][0]["text"], text, "{r}");
        let rec = store.get(&id).await.unwrap().expect("stored");
        let finished: Vec<_> = rec
            .history
            .iter()
            .filter(|c| c.status.is_terminal())
            .collect();
        assert_eq!(finished.len(), 1, "{tool}: {:?}", rec.history);
        assert!(rec.lease.is_none(), "{tool}: {:?}", rec.lease);
        if tool == "stepped" {
            assert_eq!(rec.steps["first"], json!(7), "{:?}", rec.steps);
        }
        if tool == "slow" {
            assert!(
                rec.version > 3,
                "{tool}: renewed while it ran, version {}",
                rec.version
            );
        }
    }
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}
