//! Fixture processes on one Redis, under faults: a worker killed mid-task, every client
//! connection killed during a burst of creates and while a question is answered, two
//! servers and two workers under load, and bad settings at startup. Each test uses a key prefix of its own, deleted afterwards; with
//! `MCP_TASKS_TEST_REDIS=skip` they are skipped (loudly).
//!
//! Every wait is bounded; nothing here asserts how fast anything is.

mod support;

use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::{Server, Store, TERMINAL, Worker, burst, refused, result_text};

/// A bound on any cross-process wait.
const WITHIN: Duration = Duration::from_secs(30);

/// The databases the connection-killing tests have to themselves: each ends every
/// connection of its own.
const KILLED_DB: u32 = 14;
const LOST_SIGNAL_DB: u32 = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_task_is_settled_by_its_policy_by_another_process() {
    let Some(store) = Store::redis("worker_kill") else {
        return;
    };
    let mut server = Server::on_with(&store, &["--no-execute"]);
    let first = Worker::start(&store, &[]);
    let fails = server
        .start_task("slow_compute", json!({"seconds": 600, "label": "lost"}))
        .await;
    let reruns = server
        .start_task("durable_sleep", json!({"seconds": 2, "label": "again"}))
        .await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !(first.claimed(&fails) && first.claimed(&reruns)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker did not claim both tasks"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = Worker::start(&store, &[]);
    first.kill().await;
    // `fail`: failed with an internal error; `rerun`: run again by the second worker, to
    // its own result.
    let r = server.wait_for(&fails, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "failed", "{r}");
    assert_eq!(r["result"]["error"]["code"], -32603, "{r}");
    let r = server.wait_for(&reruns, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_eq!(result_text(&r), "slept 2s: again");
    assert!(second.claimed(&reruns), "the second worker ran the rerun");
    second.kill().await;
    server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_survive_every_client_being_killed_during_a_burst() {
    let Some(store) = Store::redis_in("burst_kill", KILLED_DB) else {
        return;
    };
    let redis = store.redis_prefix().expect("a Redis store");
    // Both serve before the connections are killed: the faults are the burst's, not startup's.
    let (a, b) = tokio::join!(Server::on(&store).ready(), Server::on(&store).ready());
    let stop = AtomicBool::new(false);
    let killer = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut killed = 0;
        for _ in 0..5 {
            killed += redis.kill_clients();
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, Ordering::Release);
        killed
    };
    let ((mut a, handles_a, errors_a), (mut b, handles_b, errors_b), killed) =
        tokio::join!(burst(a, "a", 20, &stop), burst(b, "b", 20, &stop), killer);
    eprintln!(
        "connections killed: {killed}; creates answered with a handle: {}, with an error: {}",
        handles_a.len() + handles_b.len(),
        errors_a.len() + errors_b.len()
    );
    assert!(killed >= 4, "the servers' connections were killed");

    support::check_after_burst(
        &mut a,
        &mut b,
        &handles_a,
        &handles_b,
        &errors_a,
        &errors_b,
        "Redis task store",
    )
    .await;
    a.kill().await;
    b.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_sent_while_the_subscribers_reconnect_still_reaches_the_tool() {
    let Some(store) = Store::redis_in("lost_signal", LOST_SIGNAL_DB) else {
        return;
    };
    let redis = store.redis_prefix().expect("a Redis store");
    let mut a = Server::on(&store);
    let mut b = Server::on(&store);
    let asking = a
        .start_task("confirm_delete", json!({"filename": "notes.txt"}))
        .await;
    let r = b.wait_for(&asking, &["input_required"], WITHIN).await;
    let key = r["result"]["inputRequests"]
        .as_object()
        .and_then(|o| o.keys().next().cloned())
        .unwrap_or_else(|| panic!("no input request: {r}"));
    // Every connection goes, the subscribers' too: the signal of the answer may be lost.
    assert!(
        redis.kill_clients() >= 4,
        "the servers' connections were killed"
    );
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let r = b
            .request(
                "tasks/update",
                json!({"taskId": asking, "inputResponses": {
                    key.clone(): {"action": "accept", "content": {"confirm": true}}
                }}),
            )
            .await;
        if r.get("error").is_none() {
            break;
        }
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("Redis task store"), "{r}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "B never recovered: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The tool on A gets the answer all the same and finishes with it.
    let r = a.wait_for(&asking, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_eq!(result_text(&r), "deleted notes.txt");
    a.kill().await;
    b.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_and_two_workers_settle_every_task_once_with_its_own_result() {
    let Some(store) = Store::redis("load") else {
        return;
    };
    support::settle_every_task_once_under_load(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_store_settings_fail_at_startup_naming_the_problem() {
    let Some(store) = Store::redis("startup") else {
        return;
    };
    let redis = store.redis_prefix().expect("a Redis store");
    let url = redis.url();
    let server = url.rsplit_once('/').map_or(url.as_str(), |(s, _)| s);
    let stderr = refused("redis://127.0.0.1:1/0", WITHIN).await;
    assert!(stderr.contains("unreachable"), "{stderr}");
    let stderr = refused(&format!("{server}/4000"), WITHIN).await;
    assert!(stderr.contains("database number"), "{stderr}");
    let stderr = refused(
        &server.replacen("redis://", "redis://nobody:wrong@", 1),
        WITHIN,
    )
    .await;
    assert!(stderr.contains("credentials"), "{stderr}");
    // The server starts on the real one, and says what a Redis restart would keep.
    let mut server = Server::on(&store);
    let r = server
        .request(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "redis"}}),
        )
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "Hello, redis!", "{r}");
    assert!(
        !server
            .log
            .lines_with(&["tasks are kept in Redis"])
            .is_empty(),
        "{:?}",
        server.log.summary(10)
    );
    server.kill().await;
}
