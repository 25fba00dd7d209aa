//! A 2025-11-25 client without a principal resumes its tasks by id after a reconnect, and
//! after the server restarted in between: the task id is a bearer handle. Over stdio and
//! over HTTP, with the fixture as a real process on a SQLite file.

mod support;

use serde_json::{Value, json};
use std::time::Duration;
use support::http::{HttpFixture, V2025, answer, post, session_post};
use support::{Server, temp_db};

fn init_params() -> Value {
    support::http::init_params("t", json!({}))
}

/// A fresh 2025-11-25 session on a stdio process.
async fn stdio_session(server: &mut Server) {
    let r = server.raw_request("initialize", init_params()).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
    server.notify("notifications/initialized").await;
}

async fn stdio_resume(restart: bool) {
    let db = temp_db(if restart { "resume-restart" } else { "resume" });
    let mut first = Server::start(&db);
    stdio_session(&mut first).await;
    let r = first
        .raw_request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "kept"}, "task": {}}),
        )
        .await;
    let id = r["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let (mut second, first) = if restart {
        // The task finishes before the restart, so its result is what is resumed.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        first.kill().await;
        (Server::start(&db), None)
    } else {
        // The client reconnects, to another copy of the server on the same store, while
        // the first copy still runs the task.
        (Server::start(&db), Some(first))
    };
    stdio_session(&mut second).await;
    let r = second.raw_request("tasks/get", json!({"taskId": id})).await;
    assert!(r["result"]["status"].is_string(), "{r}");
    let r = second
        .raw_request("tasks/result", json!({"taskId": id}))
        .await;
    assert_eq!(
        r["result"]["content"][0]["text"], "kept finished after 1 s",
        "{r}"
    );
    // Listing stays per session: the new session created nothing.
    let r = second.raw_request("tasks/list", json!({})).await;
    assert_eq!(r["result"]["tasks"], json!([]), "{r}");
    second.kill().await;
    if let Some(first) = first {
        first.kill().await;
    }
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_client_resumes_its_task_after_a_reconnect() {
    stdio_resume(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_client_resumes_its_task_after_a_restart() {
    stdio_resume(true).await;
}

/// The fixture serving HTTP on a free loopback port, on the SQLite file `db`.
async fn http_fixture(db: &std::path::Path) -> HttpFixture {
    let store = format!("sqlite:{}", db.display());
    let lease = support::LEASE_MS.to_string();
    HttpFixture::start(&["--store", &store, "--lease-ms", &lease]).await
}

/// A POST of `body`, in `session` when there is one.
fn post_in(url: &str, session: Option<&str>, body: Value) -> reqwest::RequestBuilder {
    let client = reqwest::Client::new();
    match session {
        Some(session) => session_post(&client, url, session, V2025, &body),
        None => post(&client, url, &body),
    }
}

async fn http_session(url: &str) -> String {
    let response = post_in(
        url,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params()}),
    )
    .send()
    .await
    .unwrap();
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    post_in(
        url,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .send()
    .await
    .unwrap();
    session
}

async fn http_request(url: &str, session: &str, id: u64, method: &str, params: Value) -> Value {
    answer(
        post_in(
            url,
            Some(session),
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await
}

async fn http_resume(restart: bool) {
    let db = temp_db(if restart {
        "resume-http-restart"
    } else {
        "resume-http"
    });
    let first = http_fixture(&db).await;
    let session = http_session(&first.url).await;
    let r = http_request(
        &first.url,
        &session,
        2,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "kept"}, "task": {}}),
    )
    .await;
    let id = r["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let server = if restart {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        first.kill().await;
        http_fixture(&db).await
    } else {
        first
    };
    let again = http_session(&server.url).await;
    let r = http_request(
        &server.url,
        &again,
        3,
        "tasks/result",
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(
        r["result"]["content"][0]["text"], "kept finished after 1 s",
        "{r}"
    );
    let r = http_request(&server.url, &again, 4, "tasks/list", json!({})).await;
    assert_eq!(r["result"]["tasks"], json!([]), "{r}");
    server.kill().await;
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_client_resumes_its_task_in_a_new_session() {
    http_resume(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_client_resumes_its_task_after_a_restart() {
    http_resume(true).await;
}
