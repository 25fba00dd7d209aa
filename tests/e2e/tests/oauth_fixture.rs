//! The conformance fixture as an OAuth resource server (`--oauth-issuer`, `--resource`),
//! against a real OpenID provider: its public tools stay public, `scoped_echo` needs
//! `echo:write` in both eras, and with every log level on, no bearer token, `Authorization`
//! header or elicitation answer reaches its logs, and task ids at `info` are short.

mod support;

use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::example;
use support::oidc::provider::{Caller, Provider, RESOURCE, challenge, stateless, task_id};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The fixture serving HTTP behind `issuer`, logging at `RUST_LOG=level` into `logs`.
async fn fixture(issuer: &str, level: &str, logs: Arc<Mutex<Vec<String>>>) -> (Child, String) {
    let mut child = Command::new(example("conformance-server"))
        .args(["--http", "127.0.0.1:0", "--store", "memory"])
        .args(["--oauth-issuer", issuer, "--resource", RESOURCE])
        .env("RUST_LOG", level)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the conformance server");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            logs.lock().unwrap().push(line.clone());
            if let Some(url) = line.strip_prefix("listening on ") {
                return url.trim().to_owned();
            }
        }
        panic!("the fixture exited before it listened");
    })
    .await
    .expect("the fixture listens within 30 s");
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            logs.lock().unwrap().push(line);
        }
    });
    (child, url)
}

fn text(body: &Value) -> String {
    body["result"]["content"][0]["text"]
        .as_str()
        .or_else(|| body["result"]["result"]["content"][0]["text"].as_str())
        .unwrap_or_else(|| panic!("no text: {body}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixture_protects_scoped_echo_and_logs_no_secret() {
    let provider = Provider::fresh("fixture");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let (mut child, url) = fixture(&provider.issuer, "trace", Arc::clone(&logs)).await;
    let full = provider
        .token("machine", "echo:write tasks:read", RESOURCE)
        .await;
    let reader = provider.token("reader", "tasks:read", RESOURCE).await;
    let echo = json!({"name": "scoped_echo", "arguments": {"text": "hello"}});

    // No token: 401 with the challenge naming the metadata and echo:write.
    let (status, headers, _) = stateless(&url, None, "tools/list", None, json!({})).await;
    assert_eq!(status, 401);
    let c = challenge(&headers);
    assert!(
        c.contains(
            "resource_metadata=\"http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp\""
        ) && c.contains("scope=\"echo:write\""),
        "{c}"
    );

    // 2026-07-28: a public tool for anyone with a token; scoped_echo with the scope only.
    let greet = json!({"name": "greet", "arguments": {"name": "reader"}});
    let (status, _, body) =
        stateless(&url, Some(&reader), "tools/call", Some("greet"), greet).await;
    assert_eq!((status, text(&body)), (200, "Hello, reader!".to_owned()));
    let (status, headers, body) = stateless(
        &url,
        Some(&reader),
        "tools/call",
        Some("scoped_echo"),
        echo.clone(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(challenge(&headers).contains("error=\"insufficient_scope\", scope=\"echo:write\""));
    let (status, _, body) = stateless(
        &url,
        Some(&full),
        "tools/call",
        Some("scoped_echo"),
        echo.clone(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let body = match task_id(&body) {
        Some(id) => settled(&url, &full, &id).await,
        None => body,
    };
    assert_eq!(text(&body), "hello");

    // 2025-11-25: the same.
    let mut weak = Caller::new(&url, Some(reader.clone()));
    assert_eq!(weak.initialize().await, 200);
    let (status, headers, _) = weak.send("tools/call", echo.clone()).await;
    assert_eq!(status, 403);
    assert!(challenge(&headers).contains("scope=\"echo:write\""));
    let mut strong = Caller::new(&url, Some(full.clone()));
    assert_eq!(strong.initialize().await, 200);
    let r = strong.call("tools/call", echo.clone()).await;
    assert_eq!(text(&r), "hello");

    // An elicitation answered with a secret, in a task (2026-07-28).
    let secret = "answer-that-must-not-be-logged-7f3a";
    let (_, _, body) = stateless(
        &url,
        Some(&full),
        "tools/call",
        Some("multi_input"),
        json!({"name": "multi_input", "arguments": {}}),
    )
    .await;
    let id = task_id(&body).unwrap_or_else(|| panic!("a task: {body}"));
    let mut last = Value::Null;
    for _ in 0..1500 {
        let (_, _, got) = stateless(
            &url,
            Some(&full),
            "tasks/get",
            Some(&id),
            json!({"taskId": id}),
        )
        .await;
        last = got;
        if last["result"]["status"] != "working" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let asked = last;
    assert_eq!(asked["result"]["status"], "input_required", "{asked}");
    let requests = asked["result"]["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("input requests: {asked}"));
    let mut responses = serde_json::Map::new();
    for (key, request) in requests {
        let message = request["params"]["message"].as_str().unwrap_or_default();
        let content = if message.contains("name") {
            json!({"name": secret})
        } else {
            json!({"confirm": true})
        };
        responses.insert(key.clone(), json!({"action": "accept", "content": content}));
    }
    let (status, _, body) = stateless(
        &url,
        Some(&full),
        "tasks/update",
        Some(&id),
        json!({"taskId": id, "inputResponses": responses}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let done = settled(&url, &full, &id).await;
    assert!(text(&done).contains(secret), "{done}");

    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let logs = logs.lock().unwrap().join("\n");
    assert!(logs.len() > 1000, "trace logs were written: {logs}");
    for (what, needle) in [
        ("a bearer token", full.as_str()),
        ("a bearer token", reader.as_str()),
        ("a token's signature", full.rsplit('.').next().unwrap()),
        ("an elicitation answer", secret),
    ] {
        assert!(!logs.contains(needle), "{what} in the logs");
    }
    assert!(
        !logs.to_ascii_lowercase().contains("authorization: bearer")
            && !logs.to_ascii_lowercase().contains("\"authorization\""),
        "an Authorization header in the logs"
    );
}

/// The full task id never appears in an `info` line: only a short prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_ids_at_info_are_short() {
    let provider = Provider::fresh("fixture-info");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let (mut child, url) = fixture(&provider.issuer, "info", Arc::clone(&logs)).await;
    let full = provider
        .token("machine", "echo:write tasks:read", RESOURCE)
        .await;
    let mut ids = Vec::new();
    for name in ["slow_compute", "failing_job"] {
        let (_, _, body) = stateless(
            &url,
            Some(&full),
            "tools/call",
            Some(name),
            json!({"name": name, "arguments": {"seconds": 0}}),
        )
        .await;
        let id = task_id(&body).unwrap_or_else(|| panic!("a task: {body}"));
        settled(&url, &full, &id).await;
        ids.push(id);
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let logs = logs.lock().unwrap().join("\n");
    for id in &ids {
        assert!(
            !logs.contains(id.as_str()),
            "task {id} in full at info: {logs}"
        );
    }
}

/// Reads a 2026-07-28 task until it is no longer `working` (at most 30 s).
async fn settled(url: &str, token: &str, id: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let (status, _, body) = stateless(
                url,
                Some(token),
                "tasks/get",
                Some(id),
                json!({"taskId": id}),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            if !matches!(
                body["result"]["status"].as_str(),
                Some("working" | "input_required")
            ) {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the task ends")
}
