//! The operator's console of the fixture (`--admin-token`) over real HTTP: who is refused
//! (and that a refused request changes nothing), what the API lists, shows and does, the
//! feed of changes, and a worker's task seen by a server that only serves.

mod support;

use mcp_tasks::admin::Controls as _;
use serde_json::{Value, json};
use std::time::Duration;
use support::Store;
use support::http::{HttpFixture, TASKS_EXT, json_of, meta, stateless_with};

const TOKEN: &str = "console-test-token-0123456789";
/// The bound on every wait of these tests.
const WITHIN: Duration = Duration::from_secs(30);

/// The fixture with its console, on `store`, with `extra` arguments.
async fn fixture(store: &str, extra: &[&str]) -> (HttpFixture, String) {
    let mut args = vec!["--store", store, "--admin-token", TOKEN];
    args.extend_from_slice(extra);
    let f = HttpFixture::start(&args).await;
    let base = f.url.trim_end_matches("/mcp").to_owned();
    (f, base)
}

/// Starts `tool` as a task over MCP (2026-07-28, tasks extension), as `owner`'s bearer.
async fn start_task(mcp: &str, tool: &str, arguments: Value) -> String {
    let call = json!({"name": tool, "arguments": arguments});
    let meta = meta(json!({"elicitation": {}, "extensions": {TASKS_EXT: {}}}));
    let (status, created) = json_of(
        stateless_with(mcp, 1, "tools/call", call, meta, &[("mcp-name", tool)])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {created}"))
        .to_owned()
}

fn admin_get(url: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .get(url)
        .header("authorization", format!("Bearer {TOKEN}"))
}

fn admin_post(url: &str, body: &Value) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("x-mcp-tasks-admin", "1")
        .header("content-type", "application/json")
        .body(body.to_string())
}

async fn get_json(url: &str) -> Value {
    let (status, body) = json_of(admin_get(url).send().await.unwrap()).await;
    assert_eq!(status, 200, "{url}: {body}");
    body
}

/// Waits (bounded) until the task's detail satisfies `done`.
async fn until(base: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let last = std::sync::Mutex::new(Value::Null);
    tokio::time::timeout(WITHIN, async {
        loop {
            let task = get_json(&format!("{base}/admin/api/tasks/{id}")).await;
            if done(&task) {
                return task;
            }
            *last.lock().unwrap() = task;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "task {id} did not get there in time: {}",
            last.lock().unwrap()
        )
    })
}

#[tokio::test]
async fn refused_requests_see_and_change_nothing() {
    let (f, base) = fixture("memory", &[]).await;
    let id = start_task(&f.url, "slow_compute", json!({"seconds": 30})).await;
    let api = format!("{base}/admin/api");
    let http = reqwest::Client::new();

    // No token, a wrong one, another scheme: 401, and nothing listed.
    for auth in [
        None,
        Some("Bearer wrong-token-0123456789"),
        Some("Basic Zm9vOmJhcg=="),
    ] {
        let mut request = http.get(format!("{api}/tasks?status=working"));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{auth:?}");
        assert!(response.headers().contains_key("www-authenticate"));
        let body = response.text().await.unwrap();
        assert!(!body.contains(&id), "{body}");
    }
    // A cross-site form post, with and without the token: refused.
    let form = |token: bool| {
        let mut r = http
            .post(format!("{api}/tasks/{id}/cancel"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", "http://evil.example")
            .header("sec-fetch-site", "cross-site")
            .body("confirm=yes");
        if token {
            r = r.header("authorization", format!("Bearer {TOKEN}"));
        }
        r
    };
    assert_eq!(form(false).send().await.unwrap().status(), 403);
    assert_eq!(form(true).send().await.unwrap().status(), 403);
    // The right token from a foreign origin: refused, for reads and writes.
    let foreign = admin_post(&format!("{api}/tasks/{id}/cancel"), &json!({}))
        .header("origin", "http://evil.example");
    assert_eq!(foreign.send().await.unwrap().status(), 403);
    let foreign_read = admin_get(&format!("{api}/tasks")).header("origin", "https://evil.example");
    assert_eq!(foreign_read.send().await.unwrap().status(), 403);
    // A same-origin post without the console's header (what a form could send): refused.
    let formlike = http
        .post(format!("{api}/tasks/{id}/cancel"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "text/plain")
        .body("{}");
    assert_eq!(formlike.send().await.unwrap().status(), 403);
    // The header without a JSON body type: refused.
    let plain = http
        .post(format!("{api}/tasks/{id}/cancel"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("x-mcp-tasks-admin", "1")
        .header("content-type", "text/plain")
        .body("{}");
    assert_eq!(plain.send().await.unwrap().status(), 415);
    // A Host that is not the server's (DNS rebinding): refused.
    let rebound = admin_get(&format!("{api}/tasks")).header("host", "evil.example");
    assert_eq!(rebound.send().await.unwrap().status(), 403);

    // Nothing changed: the task still runs; the right request cancels it.
    let task = get_json(&format!("{api}/tasks/{id}")).await;
    assert_eq!(task["status"], "working", "{task}");
    let (status, cancelled) = json_of(
        admin_post(&format!("{api}/tasks/{id}/cancel"), &json!({}))
            .header("origin", base.as_str())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["cancelled"], true);
    assert_eq!(cancelled["task"]["status"], "cancelled");
    f.kill().await;
}

#[tokio::test]
async fn the_api_lists_shows_cancels_reruns_and_answers_across_owners() {
    let (f, base) = fixture("memory", &[]).await;
    let api = format!("{base}/admin/api");
    let slow = start_task(
        &f.url,
        "slow_compute",
        json!({"seconds": 30, "label": "console"}),
    )
    .await;
    let failing = start_task(&f.url, "protocol_error_job", json!({})).await;
    let asking = start_task(&f.url, "confirm_delete", json!({"filename": "a.txt"})).await;
    let durable = start_task(
        &f.url,
        "durable_sleep",
        json!({"seconds": 0, "label": "again"}),
    )
    .await;

    // The page and the OpenAPI document.
    let page = reqwest::get(format!("{base}/admin")).await.unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(page.text().await.unwrap().contains("mcp-tasks console"));
    let openapi: Value = serde_json::from_str(
        &reqwest::get(format!("{api}/openapi.json"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(openapi["openapi"], "3.1.0");
    assert!(openapi["paths"]["/tasks/{id}/answer"]["post"].is_object());

    // The working tasks of every owner, each with its id, status, tool and owner.
    let working = get_json(&format!("{api}/tasks?status=working")).await;
    let row = working["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["taskId"] == slow.as_str())
        .unwrap_or_else(|| panic!("{working}"));
    assert_eq!(row["status"], "working");
    assert_eq!(row["tool"], "slow_compute");
    assert!(row.get("owner").is_some());
    // Filters: by tool, by a status that does not match, by search, by a time range, paged.
    let by_tool = get_json(&format!("{api}/tasks?tool=protocol_error_job")).await;
    assert_eq!(by_tool["tasks"].as_array().unwrap().len(), 1, "{by_tool}");
    assert_eq!(by_tool["tasks"][0]["taskId"], failing.as_str());
    let searched = get_json(&format!("{api}/tasks?q={slow}")).await;
    assert_eq!(searched["tasks"][0]["taskId"], slow.as_str(), "{searched}");
    let future = get_json(&format!("{api}/tasks?createdAfter=2999-01-01T00:00:00Z")).await;
    assert_eq!(future["tasks"], json!([]));
    let first = get_json(&format!("{api}/tasks?limit=1")).await;
    let cursor = first["nextCursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let second = get_json(&format!("{api}/tasks?limit=1&cursor={cursor}")).await;
    assert_ne!(first["tasks"][0]["taskId"], second["tasks"][0]["taskId"]);
    let (status, bad) = json_of(
        admin_get(&format!("{api}/tasks?status=sleeping"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{bad}");

    // The detail of a running task: arguments, progress, lease and epoch, history.
    let running = until(&base, &slow, |t| {
        !t["progress"].is_null() && !t["lease"].is_null()
    })
    .await;
    assert_eq!(
        running["arguments"],
        json!({"seconds": 30, "label": "console"})
    );
    assert!(running["epoch"].as_u64().unwrap() >= 1, "{running}");
    assert_eq!(running["history"][0]["event"], "created");
    // A failed task's error.
    let failed = until(&base, &failing, |t| t["status"] == "failed").await;
    assert_eq!(failed["error"], "the job hit an internal error", "{failed}");
    let failed_list = get_json(&format!("{api}/tasks?status=failed")).await;
    assert_eq!(
        failed_list["tasks"][0]["error"],
        "the job hit an internal error"
    );

    // Answer a question on the user's behalf: the stored answer says who and when.
    let waiting = until(&base, &asking, |t| t["status"] == "input_required").await;
    let key = waiting["questions"][0]["key"].as_str().unwrap().to_owned();
    let (status, refused) = json_of(
        admin_post(
            &format!("{api}/tasks/{asking}/answer"),
            &json!({"responses": {&key: {"action": "accept", "content": {"confirm": "yes"}}}}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        status, 400,
        "an answer that does not fit is refused: {refused}"
    );
    let (status, answered) = json_of(
        admin_post(
            &format!("{api}/tasks/{asking}/answer"),
            &json!({"responses": {&key: {"action": "accept", "content": {"confirm": true}}}}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["answeredBy"], "admin");
    let done = until(&base, &asking, |t| t["status"] == "completed").await;
    assert_eq!(
        done["outcome"]["result"]["content"][0]["text"], "deleted a.txt",
        "{done}"
    );

    // Rerun: a tool that reruns gets a new task; one that does not is refused.
    until(&base, &durable, |t| t["status"] == "completed").await;
    let (status, rerun) = json_of(
        admin_post(&format!("{api}/tasks/{durable}/rerun"), &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{rerun}");
    let again = rerun["task"]["taskId"].as_str().unwrap().to_owned();
    assert_ne!(again, durable);
    until(&base, &again, |t| t["status"] == "completed").await;
    let (status, _) = json_of(
        admin_post(&format!("{api}/tasks/{failing}/rerun"), &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);

    // Cancel, then counts and rates.
    let (status, _) = json_of(
        admin_post(&format!("{api}/tasks/{slow}/cancel"), &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let cancelled = get_json(&format!("{api}/tasks/{slow}")).await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(
        cancelled["cancelRequested"]["by"], "admin:admin",
        "{cancelled}"
    );
    let stats = get_json(&format!("{api}/stats")).await;
    assert_eq!(stats["byStatus"]["cancelled"], 1, "{stats}");
    assert_eq!(stats["byStatus"]["failed"], 1, "{stats}");
    assert_eq!(stats["byTool"]["durable_sleep"], 2, "{stats}");
    assert_eq!(stats["rates"]["sparkline"].as_array().unwrap().len(), 60);
    // The fixture gives the console its kill switch: pausing a tool turns its task
    // creation off in that process, and resuming turns it back on.
    let (status, paused) = json_of(
        admin_post(&format!("{api}/tools/slow_compute/pause"), &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["paused"], json!(["slow_compute"]), "{paused}");
    let (status, resumed) = json_of(
        admin_post(&format!("{api}/tools/slow_compute/resume"), &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["paused"], json!([]), "{resumed}");
    let (status, _) = json_of(
        admin_get(&format!("{api}/tasks/no-such-task"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    f.kill().await;
}

/// Reads server-sent events from the console's feed until `done` holds for a `task` event.
async fn feed_until(base: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut response = admin_get(&format!("{base}/admin/api/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut buffer = String::new();
    tokio::time::timeout(WITHIN, async {
        loop {
            let chunk = response
                .chunk()
                .await
                .unwrap()
                .expect("the feed stays open");
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(cut) = buffer.find("\n\n") {
                let block: String = buffer.drain(..cut + 2).collect();
                if !block.contains("event: task") {
                    continue;
                }
                let data = block
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap();
                let task: Value = serde_json::from_str(data).unwrap();
                if done(&task) {
                    return task;
                }
            }
        }
    })
    .await
    .expect("the feed told of it in time")
}

#[tokio::test]
async fn a_serve_only_console_follows_a_workers_task_through_the_store() {
    let store = Store::sqlite("console-worker");
    let (f, base) = fixture(&store.arg(), &["--no-execute"]).await;
    let worker = support::Worker::start(&store, &[]);
    let id = start_task(&f.url, "slow_compute", json!({"seconds": 3})).await;
    // The worker runs it: the serve-only server's feed shows its progress and its end.
    let moving = feed_until(&base, |t| {
        t["taskId"] == id.as_str() && t["progress"]["done"].as_f64() >= Some(1.0)
    })
    .await;
    assert!(moving["lease"]["worker"].is_string(), "{moving}");
    feed_until(&base, |t| {
        t["taskId"] == id.as_str() && t["status"] == "completed"
    })
    .await;
    assert!(worker.claimed(&id), "the worker ran it");
    // The stored history: created, then completed by the worker's process, under its
    // claim.
    let task = get_json(&format!("{base}/admin/api/tasks/{id}")).await;
    let history = task["history"].as_array().unwrap();
    assert_eq!(history[0]["event"], "created", "{task}");
    let last = history.last().unwrap();
    assert_eq!(last["status"], "completed", "{task}");
    assert_eq!(last["process"], moving["lease"]["worker"], "{task}");
    assert_eq!(last["epoch"], 1, "{task}");
    worker.kill().await;
    f.kill().await;
}

/// Runs `mcp-tasks admin ...` (the command line), with a private handle store.
fn admin_cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let home = std::env::temp_dir().join(format!("mcp-tasks-admin-cli-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks-cli"));
    command
        .env("MCP_TASKS_HOME", &home)
        .env_remove("MCP_TASKS_ADMIN_TOKEN")
        .args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("run mcp-tasks");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_commands_over_the_api_and_read_only_on_the_store() {
    let store = Store::sqlite("console-cli");
    let (f, base) = fixture(&store.arg(), &[]).await;
    let slow = start_task(&f.url, "slow_compute", json!({"seconds": 30})).await;
    let failing = start_task(&f.url, "protocol_error_job", json!({})).await;
    until(&base, &failing, |t| t["status"] == "failed").await;
    let console = format!("{base}/admin");

    // A table of the working tasks, then JSON.
    let (code, out, err) = tokio::task::block_in_place(|| {
        admin_cli(
            &[
                "--url",
                &console,
                "admin",
                "--admin-token",
                TOKEN,
                "list",
                "--status",
                "working",
            ],
            &[],
        )
    });
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("TASK"), "{out}");
    assert!(out.contains(&slow) && !out.contains(&failing), "{out}");
    let (code, out, err) = tokio::task::block_in_place(|| {
        admin_cli(
            &[
                "--url",
                &console,
                "--json",
                "admin",
                "list",
                "--tool",
                "protocol_error_job",
            ],
            &[("MCP_TASKS_ADMIN_TOKEN", TOKEN)],
        )
    });
    assert_eq!(code, 0, "{err}");
    let page: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(page["tasks"][0]["taskId"], failing.as_str(), "{page}");
    assert_eq!(page["tasks"][0]["status"], "failed");
    let (code, out, _) = tokio::task::block_in_place(|| {
        admin_cli(
            &[
                "--url",
                &console,
                "--json",
                "admin",
                "--admin-token",
                TOKEN,
                "get",
                &failing,
            ],
            &[],
        )
    });
    assert_eq!(code, 0);
    let task: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(task["error"], "the job hit an internal error", "{task}");

    // Refused: a wrong token (nothing changes), no controls, an unknown task.
    let (code, _, err) = tokio::task::block_in_place(|| {
        admin_cli(
            &[
                "--url",
                &console,
                "admin",
                "--admin-token",
                "not-the-token-0123456789",
                "cancel",
                &slow,
            ],
            &[],
        )
    });
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("401"), "{err}");
    assert_eq!(
        get_json(&format!("{base}/admin/api/tasks/{slow}")).await["status"],
        "working"
    );
    let (code, _, err) = tokio::task::block_in_place(|| {
        admin_cli(
            &[
                "--url",
                &console,
                "admin",
                "--admin-token",
                TOKEN,
                "pause",
                "slow_compute",
            ],
            &[],
        )
    });
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = tokio::task::block_in_place(|| {
        admin_cli(
            &[
                "--url",
                &console,
                "admin",
                "--admin-token",
                TOKEN,
                "resume",
                "slow_compute",
            ],
            &[],
        )
    });
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = tokio::task::block_in_place(|| {
        admin_cli(
            &[
                "--url",
                &console,
                "admin",
                "--admin-token",
                TOKEN,
                "get",
                "no-such-task",
            ],
            &[],
        )
    });
    assert_eq!(code, 7);

    // Read-only, straight from the SQLite file: lists and shows, never changes.
    let path = store.arg();
    let (code, out, err) = tokio::task::block_in_place(|| {
        admin_cli(&["--json", "admin", "--task-store", &path, "list"], &[])
    });
    assert_eq!(code, 0, "{err}");
    let page: Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    assert!(
        ids.contains(&slow.as_str()) && ids.contains(&failing.as_str()),
        "{page}"
    );
    let (code, out, _) = tokio::task::block_in_place(|| {
        admin_cli(&["admin", "--task-store", &path, "get", &slow], &[])
    });
    assert_eq!(code, 0);
    assert!(out.contains("status: working"), "{out}");
    let (code, _, err) = tokio::task::block_in_place(|| {
        admin_cli(&["admin", "--task-store", &path, "cancel", &slow], &[])
    });
    assert_eq!(code, 2, "{err}");

    // Cancel over the API.
    let (code, out, err) = tokio::task::block_in_place(|| {
        admin_cli(
            &[
                "--url",
                &console,
                "admin",
                "--admin-token",
                TOKEN,
                "cancel",
                &slow,
            ],
            &[],
        )
    });
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("cancelled:"), "{out}");
    assert_eq!(
        get_json(&format!("{base}/admin/api/tasks/{slow}")).await["status"],
        "cancelled"
    );
    f.kill().await;
}

/// Switches that only remember what the console asked for: what the console hands on.
#[derive(Default)]
struct Switches {
    paused: std::sync::Mutex<std::collections::BTreeSet<String>>,
    draining: std::sync::atomic::AtomicBool,
}

impl mcp_tasks::admin::Controls for Switches {
    fn pause_tool(&self, tool: &str) {
        self.paused.lock().unwrap().insert(tool.to_owned());
    }
    fn resume_tool(&self, tool: &str) {
        self.paused.lock().unwrap().remove(tool);
    }
    fn paused_tools(&self) -> Vec<String> {
        self.paused.lock().unwrap().iter().cloned().collect()
    }
    fn drain(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
    fn undrain(&self) {
        self.draining
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
    fn draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[tokio::test]
async fn pause_resume_and_drain_reach_the_controls_the_server_gives() {
    let server = mcp_tasks::Server::builder().build().unwrap();
    let switches = std::sync::Arc::new(Switches::default());
    let admin = server
        .admin_router(
            mcp_tasks::admin::AdminToken::new(TOKEN)
                .unwrap()
                .operator("ops"),
        )
        .with_controls(switches.clone());
    let app = mcp_tasks::axum::Router::new().nest("/admin", admin.into_router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}/admin/api", listener.local_addr().unwrap());
    tokio::spawn(async move { mcp_tasks::axum::serve(listener, app).await });

    // A cross-site request to pause is refused and pauses nothing.
    let forged = reqwest::Client::new()
        .post(format!("{api}/tools/render/pause"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("go=1");
    assert_eq!(forged.send().await.unwrap().status(), 403);
    assert!(switches.paused_tools().is_empty());

    let (status, body) = json_of(
        admin_post(&format!("{api}/tools/render/pause"), &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"paused": ["render"], "draining": false}));
    assert_eq!(
        get_json(&format!("{api}/controls")).await["paused"],
        json!(["render"])
    );
    assert_eq!(
        get_json(&format!("{api}/stats")).await["paused"],
        json!(["render"])
    );
    let (_, body) = json_of(
        admin_post(&format!("{api}/drain"), &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["draining"], true);
    assert!(switches.draining());
    let (_, body) = json_of(
        admin_post(&format!("{api}/undrain"), &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["draining"], false);
    let (_, body) = json_of(
        admin_post(&format!("{api}/tools/render/resume"), &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["paused"], json!([]));
}
