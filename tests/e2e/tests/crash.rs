//! Crash tests with real processes: the conformance server on a SQLite file is killed with
//! SIGKILL and started again on the same file; every task handle a client received must
//! still answer, with finished results unchanged and interrupted work settled honestly.

//!
//! The fixture runs with a one-second lease: after a restart, tasks of the killed process
//! are settled once their lease lapses.

mod support;

use serde_json::{Value, json};
use std::time::Duration;
use support::{Server, task_id, temp_db};

/// Long enough for a killed process's leases to lapse and be settled.
const SETTLE: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_survive_kill_9_with_honest_statuses() {
    let db = temp_db("settled");
    let mut s = Server::start(&db);

    let mut finished = Vec::new();
    for n in 0..5 {
        let r = s
            .request("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": format!("done-{n}")}}))
            .await;
        finished.push(task_id(&r));
    }
    let mut finished_results = Vec::new();
    for id in &finished {
        let mut r = Value::Null;
        for _ in 0..100 {
            r = s.get(id).await;
            if r["result"]["status"] == "completed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(r["result"]["status"], "completed", "{r}");
        finished_results.push(r["result"]["result"].clone());
    }
    let failed = task_id(
        &s.request("tools/call", json!({"name": "protocol_error_job"}))
            .await,
    );
    let mut failed_error = Value::Null;
    for _ in 0..100 {
        let r = s.get(&failed).await;
        if r["result"]["status"] == "failed" {
            failed_error = r["result"]["error"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(failed_error.is_object());

    let running: Vec<String> = {
        let mut ids = Vec::new();
        for _ in 0..3 {
            let r = s
                .request(
                    "tools/call",
                    json!({"name": "slow_compute", "arguments": {"seconds": 600}}),
                )
                .await;
            ids.push(task_id(&r));
        }
        ids
    };
    let waiting = task_id(
        &s.request(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "x"}}),
        )
        .await,
    );
    for _ in 0..100 {
        if s.get(&waiting).await["result"]["status"] == "input_required" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.get(&waiting).await["result"]["status"], "input_required");

    s.kill().await;
    let mut s = Server::start(&db);

    for (id, before) in finished.iter().zip(&finished_results) {
        let r = s.get(id).await;
        assert_eq!(r["result"]["status"], "completed", "{id}");
        assert_eq!(
            &r["result"]["result"], before,
            "a finished result is unchanged"
        );
    }
    let r = s.get(&failed).await;
    assert_eq!(r["result"]["status"], "failed");
    assert_eq!(r["result"]["error"], failed_error);
    for id in running.iter().chain([&waiting]) {
        let r = s
            .wait_for(id, &["failed", "completed", "cancelled"], SETTLE)
            .await;
        assert_eq!(r["result"]["status"], "failed", "{id}: {r}");
        assert_eq!(r["result"]["error"]["code"], -32603);
        assert!(
            r["result"]["statusMessage"]
                .as_str()
                .unwrap()
                .contains("restarted")
        );
    }
    s.kill().await;
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_handle_given_out_during_a_burst_survives_kill_9() {
    let db = temp_db("burst");
    let mut s = Server::start(&db);
    // Pipeline many creates without waiting, then kill while answers are still arriving.
    let mut sent = Vec::new();
    for n in 0..300 {
        sent.push(
            s.send("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 600, "label": format!("b{n}")}}))
                .await,
        );
    }
    let mut handles = Vec::new();
    while handles.len() < 100 {
        let m = s.recv().await.expect("answers arrive");
        if let Some(id) = m["result"]["taskId"].as_str() {
            handles.push(id.to_owned());
        }
    }
    s.kill().await;
    let mut s = Server::start(&db);
    for id in &handles {
        let r = s.get(id).await;
        assert!(
            r["result"]["status"].is_string(),
            "handle {id} was given out but is unknown after the crash: {r}"
        );
        let r = s
            .wait_for(id, &["failed", "completed", "cancelled"], SETTLE)
            .await;
        assert_eq!(r["result"]["status"], "failed");
    }
    s.kill().await;
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}
