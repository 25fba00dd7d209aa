//! The client against real servers: the conformance fixture as a process over stdio and over
//! HTTP, in both eras, and a `Server` in this process.

mod support;

use mcp_tasks::client::{
    Called, ClientError, Era, FnHandler, HandleStore, McpClient, Question, Scripted, TaskEvent,
    TaskOutcome,
};
use mcp_tasks::prelude::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::http::HttpFixture;
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;

/// The bound on every wait of these tests.
const WITHIN: Duration = Duration::from_secs(30);

fn fixture_stdio() -> String {
    format!(
        "{} --stdio --store memory",
        support::example("conformance-server").display()
    )
}

/// A fixture process serving HTTP on a free port with tasks in memory.
async fn fixture_http() -> HttpFixture {
    HttpFixture::start(&["--store", "memory"]).await
}

fn deadline() -> Option<Instant> {
    Some(Instant::now() + WITHIN)
}

async fn connect_stdio(era: Option<Era>, answers: Option<Scripted>) -> McpClient {
    let mut b = McpClient::builder().stdio(fixture_stdio());
    if let Some(era) = era {
        b = b.era(era);
    }
    if let Some(a) = answers {
        b = b.handler(a);
    }
    b.connect().await.expect("connect")
}

fn task(called: Called) -> mcp_tasks::client::TaskHandle {
    match called {
        Called::Task(t) => t,
        Called::Done(r) => panic!("expected a task, got {r:?}"),
    }
}

fn completed_text(outcome: TaskOutcome) -> String {
    match outcome {
        TaskOutcome::Completed(r) => r.text(),
        other => panic!("expected a result, got {other:?}"),
    }
}

/// Sync results, task results with status events, and a scripted question, on one client.
async fn exercise(client: &McpClient) {
    match client
        .call_tool("greet", json!({"name": "Ada"}))
        .await
        .unwrap()
    {
        Called::Done(r) => assert_eq!(r.text(), "Hello, Ada!"),
        Called::Task(t) => panic!("greet is forbidden as a task, got {}", t.id()),
    }

    let t = task(
        client
            .call_tool("slow_compute", json!({"seconds": 1, "label": "sum"}))
            .await
            .unwrap(),
    );
    assert_eq!(t.poll_interval(), Some(Duration::from_millis(200)));
    let mut statuses = Vec::new();
    let outcome = t
        .watch(deadline(), |e| {
            if let TaskEvent::Status { status, .. } = e {
                statuses.push(status);
            }
        })
        .await
        .unwrap();
    assert_eq!(completed_text(outcome), "sum finished after 1 s");
    assert_eq!(statuses.last().map(String::as_str), Some("completed"));

    let t = task(
        client
            .call_tool("confirm_delete", json!({"filename": "a.txt"}))
            .await
            .unwrap(),
    );
    assert_eq!(
        completed_text(t.wait(deadline()).await.unwrap()),
        "deleted a.txt"
    );

    let t = task(client.call_tool("failing_job", json!({})).await.unwrap());
    match t.wait(deadline()).await.unwrap() {
        TaskOutcome::Completed(r) => {
            assert!(r.is_error());
            assert_eq!(r.text(), "the job failed on purpose");
        }
        other => panic!("a tool error is a result with isError, got {other:?}"),
    }
    let t = task(
        client
            .call_tool("protocol_error_job", json!({}))
            .await
            .unwrap(),
    );
    match t.wait(deadline()).await.unwrap() {
        TaskOutcome::Failed { code, message, .. } => {
            assert_eq!(code, -32603);
            assert_eq!(message, "the job hit an internal error");
        }
        other => panic!("a JSON-RPC error fails the task, got {other:?}"),
    }
}

/// Cancelling a long task ends it cancelled; a deadline ends the wait, not the task.
async fn cancel_and_deadline(client: &McpClient) {
    let t = task(
        client
            .call_tool("slow_compute", json!({"seconds": 60}))
            .await
            .unwrap(),
    );
    let soon = Some(Instant::now() + Duration::from_millis(500));
    match t.wait(soon).await {
        Err(ClientError::Deadline(id)) => assert_eq!(id, t.id()),
        other => panic!("expected the deadline to pass, got {other:?}"),
    }
    assert_eq!(t.status().await.unwrap().status, "working");
    t.cancel().await.unwrap();
    assert_eq!(t.wait(deadline()).await.unwrap(), TaskOutcome::Cancelled);
}

fn answers() -> Scripted {
    Scripted::new().accept(json!({"confirm": true}))
}

#[tokio::test]
async fn stdio_2026_results_tasks_questions_cancel_and_deadline() {
    let client = connect_stdio(None, Some(answers())).await;
    assert_eq!(
        client.negotiated().to_string(),
        "2026-07-28 with the tasks extension"
    );
    exercise(&client).await;
    cancel_and_deadline(&client).await;
}

#[tokio::test]
async fn stdio_2025_results_tasks_questions_cancel_and_deadline() {
    let client = connect_stdio(Some(Era::V2025_11_25), Some(answers())).await;
    assert_eq!(client.negotiated().to_string(), "2025-11-25 with tasks");
    exercise(&client).await;
    cancel_and_deadline(&client).await;
}

#[tokio::test]
async fn http_2026_results_tasks_questions_cancel_and_deadline() {
    let fixture = fixture_http().await;
    let client = McpClient::builder()
        .http(&fixture.url)
        .handler(answers())
        .connect()
        .await
        .unwrap();
    assert_eq!(client.negotiated().era, Era::V2026_07_28);
    exercise(&client).await;
    cancel_and_deadline(&client).await;
}

#[tokio::test]
async fn http_2025_results_tasks_questions_cancel_and_deadline() {
    let fixture = fixture_http().await;
    let client = McpClient::builder()
        .http(&fixture.url)
        .era(Era::V2025_11_25)
        .handler(answers())
        .connect()
        .await
        .unwrap();
    assert_eq!(client.negotiated().to_string(), "2025-11-25 with tasks");
    exercise(&client).await;
    cancel_and_deadline(&client).await;
}

#[tokio::test]
async fn both_questions_of_a_task_get_answered_by_a_handler_function() {
    for era in [Era::V2026_07_28, Era::V2025_11_25] {
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        let client = McpClient::builder()
            .stdio(fixture_stdio())
            .era(era)
            .handler(FnHandler(move |q: Question| {
                log.lock().unwrap().push(q.clone());
                async move {
                    let props = &q.params["requestedSchema"]["properties"];
                    if props.get("name").is_some() {
                        Ok(json!({"action": "accept", "content": {"name": "Ada"}}))
                    } else {
                        Ok(json!({"action": "accept", "content": {"confirm": false}}))
                    }
                }
            }))
            .connect()
            .await
            .unwrap();
        let t = task(client.call_tool("multi_input", json!({})).await.unwrap());
        let text = completed_text(t.wait(deadline()).await.unwrap());
        assert_eq!(text, "name: \"Ada\", confirm: false", "{era}");
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 2, "{era}");
        assert!(asked.iter().all(|q| q.task_id.as_deref() == Some(t.id())));
    }
}

/// `test_tool_with_task` asks before it becomes a task: a multi round-trip `tools/call` in
/// 2026-07-28, a server request in 2025-11-25.
#[tokio::test]
async fn a_question_before_the_task_is_answered_too() {
    for era in [Era::V2026_07_28, Era::V2025_11_25] {
        let answers = Arc::new(Scripted::new().accept(json!({"name": "Ada"})));
        let client = McpClient::builder()
            .stdio(fixture_stdio())
            .era(era)
            .shared_handler(answers.clone())
            .connect()
            .await
            .unwrap();
        let t = task(
            client
                .call_tool("test_tool_with_task", json!({}))
                .await
                .unwrap(),
        );
        let text = completed_text(t.wait(deadline()).await.unwrap());
        assert_eq!(text, "Hello, Ada! (from a task)", "{era}");
        assert_eq!(answers.asked().len(), 1, "{era}");
        assert_eq!(answers.asked()[0].message(), Some("What is your name?"));
    }
}

#[tokio::test]
async fn a_question_without_a_handler_is_a_clear_error() {
    let client = connect_stdio(None, None).await;
    match client.call_tool("confirm_delete", json!({})).await {
        Err(e @ ClientError::MissingCapability { .. }) => {
            assert!(e.to_string().contains("elicitation"), "{e}");
        }
        // The fixture asks from inside the task, so the task fails for want of it.
        Ok(Called::Task(t)) => match t.wait(deadline()).await {
            Ok(TaskOutcome::Failed { code: -32021, .. }) | Err(ClientError::InputNeeded { .. }) => {
            }
            other => panic!("expected a missing capability, got {other:?}"),
        },
        other => panic!("expected a missing capability, got {other:?}"),
    }
}

/// A task that fails for want of a client capability says which one in both eras: the
/// error's data comes with the failed outcome.
#[tokio::test]
async fn a_task_that_fails_for_want_of_a_capability_names_it_in_both_eras() {
    for era in [Era::V2025_11_25, Era::V2026_07_28] {
        let client = connect_stdio(Some(era), None).await;
        let t = task(
            client
                .call_tool("confirm_delete", json!({"filename": "a.txt"}))
                .await
                .unwrap(),
        );
        match t.wait(deadline()).await {
            Ok(TaskOutcome::Failed {
                code: -32021,
                data: Some(data),
                ..
            }) => assert_eq!(
                data["requiredCapabilities"],
                json!({"elicitation": {}}),
                "{era}"
            ),
            other => panic!("{era}: expected a missing capability, got {other:?}"),
        }
    }
}

/// A client that declares the capabilities without a handler defers the question: the
/// wait ends with `InputNeeded` and the task keeps waiting for its answer.
#[tokio::test]
async fn declared_capabilities_without_a_handler_leave_the_question_waiting() {
    for era in [Era::V2025_11_25, Era::V2026_07_28] {
        let client = McpClient::builder()
            .stdio(fixture_stdio())
            .era(era)
            .capabilities(json!({"elicitation": {"form": {}}}))
            .connect()
            .await
            .unwrap();
        let t = task(
            client
                .call_tool("confirm_delete", json!({"filename": "a.txt"}))
                .await
                .unwrap(),
        );
        match t.wait(deadline()).await {
            Err(ClientError::InputNeeded { task, .. }) => assert_eq!(task, t.id(), "{era}"),
            other => panic!("{era}: expected InputNeeded, got {other:?}"),
        }
        assert_eq!(t.status().await.unwrap().status, "input_required", "{era}");
    }
}

#[tokio::test]
async fn unknown_tools_and_expired_tasks_say_so() {
    let client = connect_stdio(Some(Era::V2025_11_25), None).await;
    let e = client.call_tool("nope", json!({})).await.unwrap_err();
    assert!(
        matches!(e, ClientError::UnknownTool(ref n) if n == "nope"),
        "{e}"
    );
    let e = client
        .task("no-such-task")
        .wait(deadline())
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::TaskNotFound(_)), "{e}");
    assert!(e.to_string().contains("expired"), "{e}");

    let client = connect_stdio(None, None).await;
    let e = client.task("no-such-task").status().await.unwrap_err();
    assert!(matches!(e, ClientError::TaskNotFound(_)), "{e}");
}

#[tokio::test]
async fn a_missing_server_command_names_the_command() {
    let e = McpClient::builder()
        .stdio("/nonexistent/mcp-server --stdio")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Spawn { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/mcp-server"), "{e}");
}

#[tokio::test]
async fn the_handle_store_remembers_tasks_and_resume_calls_nothing_again() {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-client-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(HandleStore::open(dir.join("handles.db")).unwrap());
    let fixture = fixture_http().await;
    let connect = || {
        McpClient::builder()
            .http(&fixture.url)
            .store(store.clone())
            .connect()
    };
    let first = connect().await.unwrap();
    let mut ids = Vec::new();
    for seconds in [1, 2] {
        let t = task(
            first
                .call_tool("slow_compute", json!({ "seconds": seconds }))
                .await
                .unwrap(),
        );
        ids.push(t.id().to_owned());
    }
    drop(first);

    // A new client, as after a crash: it finds the tasks and finishes watching them.
    let second = connect().await.unwrap();
    let known = second.resume().unwrap();
    let known_ids: Vec<&str> = known.iter().map(|h| h.id()).collect();
    assert_eq!(known_ids, ids);
    assert!(known.iter().all(|h| h.tool() == Some("slow_compute")));
    let outcomes = second.resume_all(deadline()).await.unwrap();
    let texts: Vec<String> = outcomes
        .into_iter()
        .map(|(_, o)| completed_text(o.unwrap()))
        .collect();
    assert_eq!(
        texts,
        ["compute finished after 1 s", "compute finished after 2 s"]
    );
    let all = store.list(None, false).unwrap();
    assert_eq!(all.len(), 2, "two calls, two handles: {all:?}");
    assert!(all.iter().all(|h| h.finished && h.status == "completed"));
    assert!(second.resume().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- In process, against a `Server` of this test's own tools ----

/// Asks the model, then the user, then for the client's roots, then answers.
#[task_tool(mode = "required", poll_interval = "20ms")]
async fn plan_trip(city: String, client: mcp_tasks::Client) -> Result<String, ToolError> {
    let idea = client
        .sample_text(format!("an idea for {city}"), 50)
        .await?;
    let ok = client
        .elicit(
            format!("Go with {idea}?"),
            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
        )
        .await?;
    let ok = ok.content.and_then(|c| c["ok"].as_bool()) == Some(true);
    let roots = client.list_roots().await?;
    let root = roots["roots"][0]["uri"]
        .as_str()
        .unwrap_or("nowhere")
        .to_owned();
    Ok(format!(
        "{city}: {idea} ({}), notes in {root}",
        if ok { "booked" } else { "skipped" }
    ))
}

#[tokio::test]
async fn in_process_scripted_answers_in_both_eras() {
    let server = Server::builder().registry_tools().build().unwrap();
    for era in [Era::V2026_07_28, Era::V2025_11_25] {
        let answers = Arc::new(
            Scripted::new()
                .sample_text("a museum")
                .accept(json!({"ok": true}))
                .roots(&["file:///trips"]),
        );
        let client = McpClient::builder()
            .in_process(server.clone())
            .era(era)
            .shared_handler(answers.clone())
            .connect()
            .await
            .unwrap();
        let t = task(
            client
                .call_tool("plan_trip", json!({"city": "Oslo"}))
                .await
                .unwrap(),
        );
        let text = completed_text(t.wait(deadline()).await.unwrap());
        assert_eq!(
            text, "Oslo: a museum (booked), notes in file:///trips",
            "{era}"
        );
        let asked: Vec<String> = answers.asked().into_iter().map(|q| q.method).collect();
        assert_eq!(
            asked,
            ["sampling/createMessage", "elicitation/create", "roots/list"],
            "{era}"
        );
    }
}

/// Works for a while, polled every 50 ms by default.
#[task_tool(mode = "required", poll_interval = "50ms")]
async fn long_haul() -> String {
    tokio::time::sleep(Duration::from_secs(3)).await;
    "hauled".into()
}

/// Polls seen by a [`relay`], with their times.
type Polls = Arc<std::sync::Mutex<Vec<Instant>>>;

/// A client talking to `server` through a relay that sets `pollIntervalMs` to `created` on
/// the created task and to `later` on every other task it passes on (answers and
/// notifications), notes when each `tasks/get` passes, and, unless `listen`, answers
/// `subscriptions/listen` itself with "method not found", as a server without it would.
async fn relay(created: u64, later: u64, listen: bool) -> (McpClient, Polls) {
    let refused: &[&str] = if listen {
        &[]
    } else {
        &["subscriptions/listen"]
    };
    relay_with(created, later, refused, false, 0).await
}

/// [`relay`], refusing the methods `refused`; with `strip_tasks`, removing the `tasks`
/// capability from the `initialize` answer; and answering the first `busy` polls with a
/// busy error that asks for 300 ms.
async fn relay_with(
    created: u64,
    later: u64,
    refused: &'static [&'static str],
    strip_tasks: bool,
    mut busy: usize,
) -> (McpClient, Polls) {
    use tokio::io::{AsyncWriteExt, BufReader};
    let server = Server::builder().registry_tools().build().unwrap();
    let (client_end, relay_client) = tokio::io::duplex(1 << 16);
    let (relay_server, server_end) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_end);
    tokio::spawn(mcp_tasks::transport::serve_io(
        server,
        server_read,
        server_write,
    ));

    let polls = Polls::default();
    let (from_client, mut to_client) = tokio::io::split(relay_client);
    let (from_server, mut to_server) = tokio::io::split(relay_server);
    let (back, mut backwards) = tokio::sync::mpsc::unbounded_channel::<serde_json::Value>();
    let seen = polls.clone();
    let refuse = back.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_client).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let m: serde_json::Value = serde_json::from_str(&line).unwrap();
            if m["method"] == "tasks/get" {
                seen.lock().unwrap().push(Instant::now());
                if busy > 0 {
                    busy -= 1;
                    let error = json!({"code": -32000, "message": "server busy",
                                       "data": {"retryAfterMs": 300}});
                    refuse
                        .send(json!({"jsonrpc": "2.0", "id": m["id"], "error": error}))
                        .unwrap();
                    continue;
                }
            }
            if refused.iter().any(|r| m["method"] == *r) {
                let error = json!({"code": -32601, "message": "method not found"});
                refuse
                    .send(json!({"jsonrpc": "2.0", "id": m["id"], "error": error}))
                    .unwrap();
                continue;
            }
            to_server
                .write_all(format!("{line}\n").as_bytes())
                .await
                .unwrap();
        }
    });
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_server).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut m: serde_json::Value = serde_json::from_str(&line).unwrap();
            if strip_tasks && let Some(caps) = m["result"].get_mut("capabilities") {
                caps.as_object_mut().unwrap().remove("tasks");
            }
            for part in ["result", "params"] {
                let Some(task) = m.get_mut(part) else {
                    continue;
                };
                if task["resultType"] == "task" {
                    task["pollIntervalMs"] = json!(created);
                } else if task.get("taskId").is_some() {
                    task["pollIntervalMs"] = json!(later);
                }
            }
            back.send(m).unwrap();
        }
    });
    tokio::spawn(async move {
        while let Some(m) = backwards.recv().await {
            to_client
                .write_all(format!("{m}\n").as_bytes())
                .await
                .unwrap();
        }
    });
    let (read, write) = tokio::io::split(client_end);
    let client = McpClient::builder()
        .io("relay", read, write)
        .connect()
        .await
        .unwrap();
    (client, polls)
}

/// The client waits as long as the latest answer says, though the server changes its mind
/// (100 ms at creation, 700 ms after), when it has only polling.
#[tokio::test(start_paused = true)]
async fn a_changed_poll_interval_is_honoured() {
    let (client, polls) = relay(100, 700, false).await;
    let created = Instant::now();
    let t = task(client.call_tool("long_haul", json!({})).await.unwrap());
    assert_eq!(t.poll_interval(), Some(Duration::from_millis(100)));
    let text = completed_text(t.wait(deadline()).await.unwrap());
    assert_eq!(text, "hauled");

    let polls = polls.lock().unwrap();
    assert!(polls.len() >= 3, "{polls:?}");
    let gaps: Vec<Duration> = polls.windows(2).map(|w| w[1] - w[0]).collect();
    // The first poll waits the 100 ms of creation; later ones the 700 ms of the answer before
    // them (plus jitter), never the tool's 50 ms.
    let first = polls[0] - created;
    assert!(
        first >= Duration::from_millis(100) && first < Duration::from_millis(700),
        "{first:?}"
    );
    for gap in &gaps {
        assert!(*gap >= Duration::from_millis(700), "{gaps:?}");
        assert!(*gap < Duration::from_millis(700 * 6 / 5 + 50), "{gaps:?}");
    }
}

/// With `subscriptions/listen`, the task's notifications end the watch long before a poll
/// interval of a minute would have.
#[tokio::test(start_paused = true)]
async fn status_notifications_cut_a_long_poll_interval_short() {
    let (client, polls) = relay(60_000, 60_000, true).await;
    let created = Instant::now();
    let t = task(client.call_tool("long_haul", json!({})).await.unwrap());
    let text = completed_text(t.wait(deadline()).await.unwrap());
    assert_eq!(text, "hauled");
    let took = created.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(60),
        "{took:?}"
    );
    assert!(polls.lock().unwrap().is_empty(), "no poll was needed");
}

/// A server without 2026-07-28 gets 2025-11-25 with tasks; one without tasks gets plain
/// calls, and a tool that needs a task says so.
#[tokio::test(start_paused = true)]
async fn negotiation_falls_back_to_2025_then_to_plain_calls() {
    let (client, _) = relay_with(100, 100, &["server/discover"], false, 0).await;
    assert_eq!(client.negotiated().to_string(), "2025-11-25 with tasks");
    let t = task(client.call_tool("long_haul", json!({})).await.unwrap());
    assert_eq!(completed_text(t.wait(deadline()).await.unwrap()), "hauled");

    let (client, _) = relay_with(100, 100, &["server/discover"], true, 0).await;
    assert_eq!(
        client.negotiated().to_string(),
        "2025-11-25 without tasks (plain calls)"
    );
    let e = client.call_tool("long_haul", json!({})).await.unwrap_err();
    assert!(
        matches!(e, ClientError::ToolRequiresTasks(ref t) if t == "long_haul"),
        "{e}"
    );
    assert!(e.to_string().contains("requires tasks"), "{e}");
    match client.call_tool("plan_trip", json!({"city": "Oslo"})).await {
        Err(ClientError::ToolRequiresTasks(_)) => {}
        other => panic!("plan_trip requires a task too: {other:?}"),
    }
}

/// A busy server's polls are retried after the time it asks for, not given up on.
#[tokio::test(start_paused = true)]
async fn busy_polls_are_retried_after_the_server_says() {
    let (client, polls) = relay_with(100, 100, &["subscriptions/listen"], false, 2).await;
    let t = task(client.call_tool("long_haul", json!({})).await.unwrap());
    assert_eq!(completed_text(t.wait(deadline()).await.unwrap()), "hauled");
    let polls = polls.lock().unwrap();
    assert!(
        polls[1] - polls[0] >= Duration::from_millis(300),
        "{polls:?}"
    );
    assert!(
        polls[2] - polls[1] >= Duration::from_millis(300),
        "{polls:?}"
    );
}

/// Progress a tool reports during a plain call reaches the caller, in both eras.
#[tokio::test]
async fn progress_of_a_plain_call_is_reported() {
    for era in [Era::V2026_07_28, Era::V2025_11_25] {
        let client = connect_stdio(Some(era), None).await;
        let mut seen = Vec::new();
        let called = client
            .call_tool_with("test_tool_with_progress", json!({}), |e| {
                if let TaskEvent::Progress {
                    progress, total, ..
                } = e
                {
                    seen.push((progress, total));
                }
            })
            .await
            .unwrap();
        match called {
            Called::Done(r) => assert_eq!(r.text(), "Progress test completed"),
            Called::Task(t) => panic!("{era}: not a task tool, got {}", t.id()),
        }
        assert_eq!(
            seen,
            [
                (0.0, Some(100.0)),
                (50.0, Some(100.0)),
                (100.0, Some(100.0))
            ],
            "{era}"
        );
    }
}
