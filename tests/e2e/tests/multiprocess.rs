//! Several fixture processes on one store — a SQLite file, a PostgreSQL database, and a
//! key prefix in Redis —: a task created by one is served, answered and cancelled through
//! another; a process killed or frozen past its lease loses its tasks to the others, settled
//! by each tool's restart policy, and a frozen process that wakes up writes nothing over
//! them. Each
//! scenario runs on every shared store (`sqlite::NAME`, `postgres::NAME`, `redis::NAME`).
//!
//! Every wait is bounded; nothing here asserts how fast anything is.

#[macro_use]
mod support;

use serde_json::json;
use std::time::Duration;
use support::{LEASE_MS, Server, Store, TERMINAL, Worker, result_text};

on_every_store!(
    two_stdio_servers_on_one_store_serve_each_other_s_tasks,
    a_killed_process_s_tasks_are_settled_by_their_restart_policy,
    a_process_frozen_past_its_lease_writes_nothing_over_the_takeover,
    a_serving_process_leaves_tasks_to_a_worker,
    a_killed_worker_s_tasks_are_settled_by_another_worker,
    a_session_gets_the_questions_of_its_task_run_by_a_worker,
    a_task_s_questions_asked_at_once_are_open_at_once,
);

/// A bound on any cross-process wait: several leases and scans.
const WITHIN: Duration = Duration::from_secs(20);

async fn two_stdio_servers_on_one_store_serve_each_other_s_tasks(store: &Store) {
    let mut a = Server::on(store);
    let mut b = Server::on(store);
    // Both serve their own clients.
    for s in [&mut a, &mut b] {
        let r = s
            .request(
                "tools/call",
                json!({"name": "greet", "arguments": {"name": "x"}}),
            )
            .await;
        assert_eq!(r["result"]["content"][0]["text"], "Hello, x!", "{r}");
    }

    // A task created (and run) by A is visible on B.
    let quick = a
        .start_task("slow_compute", json!({"seconds": 1, "label": "on-a"}))
        .await;
    let r = b.wait_for(&quick, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_eq!(result_text(&r), "on-a finished after 1 s");

    // A cancel sent to B settles a task running on A, and A sees it too.
    let long = a
        .start_task(
            "slow_compute",
            json!({"seconds": 600, "label": "cancel-me"}),
        )
        .await;
    assert_eq!(b.get(&long).await["result"]["status"], "working");
    let r = b.request("tasks/cancel", json!({"taskId": long})).await;
    assert!(r.get("error").is_none(), "{r}");
    let r = a.wait_for(&long, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "cancelled", "{r}");

    // A question asked by the tool running on A is answered through B; the tool resumes.
    let asking = a
        .start_task("confirm_delete", json!({"filename": "report.pdf"}))
        .await;
    let r = b.wait_for(&asking, &["input_required"], WITHIN).await;
    let keys: Vec<String> = r["result"]["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("no input requests: {r}"))
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys.len(), 1, "{r}");
    let r = b
        .request(
            "tasks/update",
            json!({"taskId": asking, "inputResponses": {
                keys[0].clone(): {"action": "accept", "content": {"confirm": true}}
            }}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let r = a.wait_for(&asking, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_eq!(result_text(&r), "deleted report.pdf");

    a.kill().await;
    b.kill().await;
}

async fn a_killed_process_s_tasks_are_settled_by_their_restart_policy(store: &Store) {
    let mut a = Server::on(store);
    let mut b = Server::on(store);
    let fails = a
        .start_task("slow_compute", json!({"seconds": 600, "label": "lost"}))
        .await;
    let reruns = a
        .start_task("durable_sleep", json!({"seconds": 1, "label": "again"}))
        .await;
    // Both run on A.
    for id in [&fails, &reruns] {
        assert_eq!(b.get(id).await["result"]["status"], "working");
    }
    a.kill().await;

    let r = b.wait_for(&fails, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "failed", "{r}");
    assert_eq!(r["result"]["error"]["code"], -32603, "{r}");
    let r = b.wait_for(&reruns, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_eq!(result_text(&r), "slept 1s: again");

    b.kill().await;
}

async fn a_process_frozen_past_its_lease_writes_nothing_over_the_takeover(store: &Store) {
    // A longer lease here, so A can be frozen between two of its writes: SQLite's write
    // lock is the file's, and a process frozen inside a write would hold it.
    const LEASE: &str = "3000";
    let mut a = Server::on_with(store, &["--lease-ms", LEASE]);
    let mut b = Server::on_with(store, &["--lease-ms", LEASE]);
    // A 2 s rerun task on A, which writes nothing until its first renewal a second in.
    let id = a
        .start_task("durable_sleep", json!({"seconds": 2, "label": "frozen"}))
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    a.signal("STOP");
    // B takes the task over once A's lease lapses, runs it again and completes it.
    let r = b.wait_for(&id, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let settled = r["result"].clone();
    // A wakes with its own run finished and its lease gone: it must write nothing.
    a.signal("CONT");
    tokio::time::sleep(Duration::from_millis(4 * LEASE_MS)).await;
    let r = a.get(&id).await;
    assert_eq!(
        r["result"], settled,
        "the frozen process overwrote a task another process had taken over"
    );
    a.kill().await;
    b.kill().await;
}

async fn a_serving_process_leaves_tasks_to_a_worker(store: &Store) {
    let mut server = Server::on_with(store, &["--no-execute"]);
    let id = server
        .start_task(
            "durable_sleep",
            json!({"seconds": 0, "label": "by a worker"}),
        )
        .await;
    // Nobody runs it yet.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.get(&id).await["result"]["status"], "working");
    let worker = Worker::start(store, &[]);
    let r = server.wait_for(&id, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_eq!(result_text(&r), "slept 0s: by a worker");
    drop(worker);
    server.kill().await;
}

async fn a_killed_worker_s_tasks_are_settled_by_another_worker(store: &Store) {
    let mut server = Server::on_with(store, &["--no-execute"]);
    let first = Worker::start(store, &[]);
    let fails = server
        .start_task("slow_compute", json!({"seconds": 600, "label": "lost"}))
        .await;
    let reruns = server
        .start_task("durable_sleep", json!({"seconds": 600, "label": "again"}))
        .await;
    // Both run on the first worker; a second one starts, then the first is killed.
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !(first.claimed(&fails) && first.claimed(&reruns)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first worker did not claim both tasks"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = Worker::start(store, &[]);
    first.kill().await;

    // The `fail` task is settled as failed, the `rerun` task runs again on the second
    // worker, each about a lease after the kill.
    let r = server.wait_for(&fails, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "failed", "{r}");
    assert_eq!(r["result"]["error"]["code"], -32603, "{r}");
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !second.claimed(&reruns) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second worker did not take the rerun task over"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.get(&reruns).await["result"]["status"], "working");
    let r = server
        .request("tasks/cancel", json!({"taskId": reruns}))
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let r = server.wait_for(&reruns, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "cancelled", "{r}");
    second.kill().await;
    server.kill().await;
}

/// A 2025-11-25 session on a serving process, its task run by a worker: the question the
/// tool asks on the worker reaches the client on its session, tagged with the task, and the
/// answer reaches the tool.
async fn a_session_gets_the_questions_of_its_task_run_by_a_worker(store: &Store) {
    let mut server = Server::on_with(store, &["--no-execute"]);
    let worker = Worker::start(store, &[]);
    let r = server
        .raw_request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "clientInfo": {"name": "t", "version": "1"},
                   "capabilities": {"elicitation": {}}}),
        )
        .await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
    server.notify("notifications/initialized").await;
    let r = server
        .raw_request(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}, "task": {}}),
        )
        .await;
    let id = r["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    // The question arrives on the session as a server-to-client request.
    let question = tokio::time::timeout(WITHIN, async {
        loop {
            let m = server.recv().await.expect("the server is alive");
            if m["method"] == "elicitation/create" {
                return m;
            }
        }
    })
    .await
    .expect("the question reached the session");
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    server
        .respond(
            &question["id"],
            json!({"action": "accept", "content": {"confirm": true}}),
        )
        .await;
    let r = server
        .raw_request("tasks/result", json!({"taskId": id}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "deleted a.txt", "{r}");
    assert!(worker.claimed(&id), "the worker ran the task");
    worker.kill().await;
    server.kill().await;
}

/// `multi_input` asks two questions at once: a 2025-11-25 session gets both before it
/// answers either, and a 2026-07-28 `tasks/get` lists both, on every store.
async fn a_task_s_questions_asked_at_once_are_open_at_once(store: &Store) {
    let mut old = Server::on(store);
    let r = old
        .raw_request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "clientInfo": {"name": "t", "version": "1"},
                   "capabilities": {"elicitation": {}}}),
        )
        .await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
    old.notify("notifications/initialized").await;
    let r = old
        .raw_request("tools/call", json!({"name": "multi_input", "task": {}}))
        .await;
    let id = r["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    let questions = tokio::time::timeout(WITHIN, async {
        let mut questions = Vec::new();
        while questions.len() < 2 {
            let m = old.recv().await.expect("the server is alive");
            if m["method"] == "elicitation/create" {
                questions.push(m);
            }
        }
        questions
    })
    .await
    .expect("both questions reached the session before either was answered");
    for q in &questions {
        let content = if q["params"]["message"] == "What is your name?" {
            json!({"name": "Ada"})
        } else {
            json!({"confirm": true})
        };
        old.respond(&q["id"], json!({"action": "accept", "content": content}))
            .await;
    }
    let r = old.raw_request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(
        r["result"]["content"][0]["text"], "name: \"Ada\", confirm: true",
        "{r}"
    );
    old.kill().await;

    let mut new = Server::on(store);
    let id = new.start_task("multi_input", json!({})).await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let r = new.get(&id).await;
        let open = r["result"]["inputRequests"]
            .as_object()
            .map_or(0, serde_json::Map::len);
        if open == 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task's two questions were not open at once: {r}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    new.kill().await;
}
