//! Task lifecycles in both protocol eras, through whole sessions, with paused time.

use mcp_tasks_runtime::model::{CallToolResult, Content, JsonObject, TaskSupport};
use mcp_tasks_runtime::{EngineConfig, ProtocolError, Server, Tool, ToolError};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use support::{Client, code, tasks_caps, text};

mod support;

fn tools() -> Vec<Tool> {
    vec![
        Tool::new("work", |cx, args: JsonObject| async move {
            let steps = args.get("steps").and_then(Value::as_u64).unwrap_or(3);
            for i in 1..=steps {
                cx.progress().report_with_message(
                    i as f64,
                    Some(steps as f64),
                    format!("step {i}"),
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            text(format!("worked {steps}"))
        })
        .task_support(TaskSupport::Optional)
        .poll_interval(Duration::from_millis(500)),
        Tool::new("fails", |_, _| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Err::<CallToolResult, _>(ToolError::new("no luck"))
        })
        .task_support(TaskSupport::Required),
        Tool::new("breaks", |_, _| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Err::<CallToolResult, _>(ProtocolError::new(-32050, "backend gone").into())
        })
        .task_support(TaskSupport::Required),
        Tool::new("panics", |_, _| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if true {
                panic!("boom");
            }
            text("unreachable")
        })
        .task_support(TaskSupport::Required),
        Tool::new("forever", |cx, _| async move {
            cx.cancellation().cancelled().await;
            text("stopped")
        })
        .task_support(TaskSupport::Optional),
        Tool::new("stubborn", |_, _| async {
            std::future::pending::<()>().await;
            text("never")
        })
        .task_support(TaskSupport::Optional),
        Tool::new("ask", |cx, _| async move {
            let client = cx.client();
            let a = client.elicit(
                "name?",
                json!({"type": "object", "properties": {"name": {"type": "string"}}}),
            );
            let b = client.elicit(
                "ok?",
                json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
            );
            let (a, b) = tokio::join!(a, b);
            let (a, b) = (a?, b?);
            text(format!(
                "{} {}",
                a.content.unwrap_or_default()["name"],
                b.content.unwrap_or_default()["ok"]
            ))
        })
        .task_support(TaskSupport::Required),
        Tool::new("prelude", |cx, _| async move {
            let a = cx
                .client()
                .elicit(
                    "name?",
                    json!({"type": "object", "properties": {"name": {"type": "string"}}}),
                )
                .await?;
            cx.detach().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            text(format!("hi {}", a.content.unwrap_or_default()["name"]))
        })
        .task_support(TaskSupport::Required)
        .prelude(true),
        Tool::new("quick", |_, args: JsonObject| async move {
            text(format!(
                "quick {}",
                args.get("n").and_then(Value::as_u64).unwrap_or(0)
            ))
        })
        .task_support(TaskSupport::Optional),
        Tool::new("sync_only", |_, _| async { text("sync") }),
    ]
}

fn server_with(config: EngineConfig) -> Server {
    let mut b = Server::builder().name("tasks-test").engine_config(config);
    for t in tools() {
        b = b.tool(t);
    }
    b.build().unwrap()
}

fn server() -> Server {
    server_with(EngineConfig {
        cancel_grace: Duration::from_secs(1),
        ..EngineConfig::default()
    })
}

/// A 2025-11-25 client; the server offers tasks for `tools/call`.
async fn stateful(server: &Server) -> Client {
    let (c, r) = Client::stateful(server).await;
    assert!(r["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object());
    c
}

// ---- 2025-11-25 ----

#[tokio::test(start_paused = true)]
async fn v1_create_poll_and_blocking_result() {
    let server = server();
    let mut c = stateful(&server).await;
    let r = c
        .request(
            "tools/call",
            json!({"name": "work", "arguments": {"steps": 3}, "task": {"ttl": 60000},
                   "_meta": {"progressToken": "tok"}}),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"], "working");
    assert_eq!(task["ttl"], 60000);
    assert_eq!(task["pollInterval"], 500);
    assert!(task["createdAt"].as_str().unwrap().ends_with('Z'));
    let id = task["taskId"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 36);

    let r = c.get(&id).await;
    assert_eq!(r["result"]["taskId"], id.as_str());
    assert!(r["result"].get("result").is_none());

    let r = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["result"]["content"][0]["text"], "worked 3");
    assert_eq!(
        r["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    let r = c.get(&id).await;
    assert_eq!(r["result"]["status"], "completed");

    let out = c.drain();
    let progress: Vec<_> = out
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(
        progress,
        vec![1.0, 2.0, 3.0],
        "progress on the original token"
    );
    assert!(
        out.iter()
            .all(|m| m["method"] != "notifications/progress"
                || m["params"]["progressToken"] == "tok")
    );
    let statuses: Vec<_> = out
        .iter()
        .filter(|m| m["method"] == "notifications/tasks/status")
        .map(|m| m["params"]["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(statuses.last().map(String::as_str), Some("completed"));
}

#[tokio::test(start_paused = true)]
async fn v1_tool_error_fails_the_task_and_result_returns_it_verbatim() {
    let mut c = stateful(&server()).await;
    let id = c
        .request("tools/call", json!({"name": "fails", "task": {}}))
        .await["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(r["result"]["content"][0]["text"], "no luck");
    let r = c.get(&id).await;
    assert_eq!(r["result"]["status"], "failed");
    assert!(
        r["result"]["statusMessage"]
            .as_str()
            .unwrap()
            .contains("no luck")
    );
}

#[tokio::test(start_paused = true)]
async fn v1_protocol_error_and_panic_come_back_as_errors() {
    let mut c = stateful(&server()).await;
    for (tool, want) in [("breaks", -32050), ("panics", -32603)] {
        let id = c
            .request("tools/call", json!({"name": tool, "task": {}}))
            .await["result"]["task"]["taskId"]
            .as_str()
            .unwrap()
            .to_owned();
        let r = c.request("tasks/result", json!({"taskId": id})).await;
        assert_eq!(code(&r), want, "{tool}");
        assert_eq!(c.get(&id).await["result"]["status"], "failed");
    }
    // The server is still serving.
    let r = c.request("tools/call", json!({"name": "sync_only"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "sync");
}

#[tokio::test(start_paused = true)]
async fn v1_cancel_working_then_cancel_again_is_rejected() {
    let mut c = stateful(&server()).await;
    let id = c
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = c.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(r["result"]["status"], "cancelled");
    assert_eq!(r["result"]["taskId"], id.as_str());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        c.get(&id).await["result"]["status"],
        "cancelled",
        "a late finish changes nothing"
    );
    let r = c.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(code(&r), -32602);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancelled")
    );
    let r = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(code(&r), -32603);
}

#[tokio::test(start_paused = true)]
async fn v1_cancel_drops_a_tool_that_ignores_its_token_after_the_grace_period() {
    let mut c = stateful(&server()).await;
    let id = c
        .request("tools/call", json!({"name": "stubborn", "task": {}}))
        .await["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        c.request("tasks/cancel", json!({"taskId": id})).await["result"]["status"],
        "cancelled"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(c.get(&id).await["result"]["status"], "cancelled");
}

#[tokio::test(start_paused = true)]
async fn v1_input_required_sends_tagged_elicitations_and_resumes() {
    let mut c = stateful(&server()).await;
    let id = c
        .request("tools/call", json!({"name": "ask", "task": {}}))
        .await["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = c.poll_until(&id, &["input_required"]).await;
    assert_eq!(r["result"]["status"], "input_required");
    let session = c.session.clone();
    let waiter = {
        let id = id.clone();
        tokio::spawn(async move {
            let msg = json!({"jsonrpc": "2.0", "id": "res", "method": "tasks/result", "params": {"taskId": id}});
            session.handle_text(&msg.to_string()).await
        })
    };
    let mut answered = 0;
    while answered < 2 {
        let msg: Value = serde_json::from_str(&c.outbound.recv().await.unwrap()).unwrap();
        if msg["method"] != "elicitation/create" {
            continue;
        }
        assert_eq!(
            msg["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            id.as_str()
        );
        let content = if msg["params"]["message"] == "name?" {
            json!({"name": "Ada"})
        } else {
            json!({"ok": true})
        };
        let reply = json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"action": "accept", "content": content}});
        assert!(c.session.handle_text(&reply.to_string()).await.is_none());
        answered += 1;
    }
    let r: Value = serde_json::from_str(&waiter.await.unwrap().unwrap()).unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "\"Ada\" true");
    assert_eq!(c.get(&id).await["result"]["status"], "completed");
}

#[tokio::test(start_paused = true)]
async fn v1_cancel_while_input_required() {
    let mut c = stateful(&server()).await;
    let id = c
        .request("tools/call", json!({"name": "ask", "task": {}}))
        .await["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    c.poll_until(&id, &["input_required"]).await;
    assert_eq!(
        c.request("tasks/cancel", json!({"taskId": id})).await["result"]["status"],
        "cancelled"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(c.get(&id).await["result"]["status"], "cancelled");
}

#[tokio::test(start_paused = true)]
async fn v1_task_modes_are_enforced() {
    let mut c = stateful(&server()).await;
    let r = c
        .request("tools/call", json!({"name": "sync_only", "task": {}}))
        .await;
    assert_eq!(code(&r), -32601);
    let r = c.request("tools/call", json!({"name": "fails"})).await;
    assert_eq!(code(&r), -32601);
    let r = c
        .request(
            "tools/call",
            json!({"name": "quick", "arguments": {"n": 2}}),
        )
        .await;
    assert_eq!(
        r["result"]["content"][0]["text"], "quick 2",
        "optional without task runs inline"
    );
    let r = c.request("tools/list", json!({})).await;
    let modes: Vec<_> = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["execution"]["taskSupport"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(modes.contains(&("sync_only".into(), "forbidden".into())));
    assert!(modes.contains(&("fails".into(), "required".into())));
    assert!(modes.contains(&("work".into(), "optional".into())));
}

#[tokio::test(start_paused = true)]
async fn v1_older_versions_have_no_tasks() {
    let server = server();
    let (session, _out) = server.session();
    let r: Value = serde_json::from_str(
        &session
            .handle_text(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}"#)
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(r["result"]["capabilities"].get("tasks").is_none());
    let r: Value = serde_json::from_str(
        &session
            .handle_text(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"quick","task":{}}}"#)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "quick 0");
    let r: Value = serde_json::from_str(
        &session
            .handle_text(r#"{"jsonrpc":"2.0","id":3,"method":"tasks/list","params":{}}"#)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(code(&r), -32601);
}

#[tokio::test(start_paused = true)]
async fn v1_tasks_are_scoped_to_their_session_when_strict() {
    let server = server_with(EngineConfig {
        cancel_grace: Duration::from_secs(1),
        strict_session_binding: true,
        ..EngineConfig::default()
    });
    let mut a = stateful(&server).await;
    let mut b = stateful(&server).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = a
            .request("tools/call", json!({"name": "forever", "task": {}}))
            .await;
        ids.push(r["result"]["task"]["taskId"].as_str().unwrap().to_owned());
    }
    let listed = a.request("tasks/list", json!({})).await;
    let listed: Vec<_> = listed["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, ids, "oldest first");
    assert_eq!(
        b.request("tasks/list", json!({})).await["result"]["tasks"],
        json!([])
    );
    for method in ["tasks/get", "tasks/cancel", "tasks/result"] {
        let r = b.request(method, json!({"taskId": ids[0]})).await;
        assert_eq!(code(&r), -32602, "{method}");
        assert_eq!(
            r["error"]["message"],
            b.request(method, json!({"taskId": "no-such-task"})).await["error"]["message"],
            "another owner's task answers like an unknown one"
        );
    }
    assert_eq!(a.get(&ids[0]).await["result"]["status"], "working");
    assert_eq!(
        code(&a.request("tasks/list", json!({"cursor": "junk"})).await),
        -32602
    );
}

/// A requestor over its live-task quota is refused with a clear error naming the limit; other
/// requestors are not affected, and the slot comes back when a task ends.
#[tokio::test(start_paused = true)]
async fn quotas_refuse_a_requestor_over_its_live_tasks() {
    let mut b =
        Server::builder()
            .name("tasks-test")
            .quotas(mcp_tasks_runtime::quota::QuotaConfig {
                max_live: 2,
                ..mcp_tasks_runtime::quota::QuotaConfig::unlimited()
            });
    for t in tools() {
        b = b.tool(t);
    }
    let server = b.build().unwrap();
    let mut a = stateful(&server).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = a
            .request("tools/call", json!({"name": "forever", "task": {}}))
            .await;
        ids.push(r["result"]["task"]["taskId"].as_str().unwrap().to_owned());
    }
    let r = a
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await;
    assert_eq!(code(&r), -32000, "{r}");
    assert_eq!(r["error"]["data"]["limit"], "liveTasks", "{r}");
    assert!(r["error"]["data"]["retryAfterMs"].as_u64().is_some(), "{r}");
    // Another session is another requestor.
    let mut b = stateful(&server).await;
    let r = b
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await;
    assert!(r["result"]["task"]["taskId"].is_string(), "{r}");
    // A cancelled task frees its slot.
    a.request("tasks/cancel", json!({"taskId": ids[0]})).await;
    let r = a
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await;
    assert!(r["result"]["task"]["taskId"].is_string(), "{r}");
}

/// A call over its requestor's quota starts nothing, not even the first poll of a tool
/// that may start before its task is stored (one declared idempotent).
#[tokio::test(start_paused = true)]
async fn a_call_over_its_quota_does_not_start_an_idempotent_tool() {
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&started);
    let server = Server::builder()
        .name("tasks-test")
        .quotas(mcp_tasks_runtime::quota::QuotaConfig {
            max_live: 1,
            ..mcp_tasks_runtime::quota::QuotaConfig::unlimited()
        })
        .tool(
            Tool::new("counted", move |cx, _| {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    cx.cancellation().cancelled().await;
                    text("stopped")
                }
            })
            .task_support(TaskSupport::Optional)
            .annotations(mcp_tasks_runtime::model::ToolAnnotations {
                idempotent_hint: Some(true),
                ..Default::default()
            }),
        )
        .build()
        .unwrap();
    let mut a = Client::stateless_as(&server, None, tasks_caps());
    let r = a.request("tools/call", json!({"name": "counted"})).await;
    task_id(&r);
    let r = a.request("tools/call", json!({"name": "counted"})).await;
    assert_eq!(r["error"]["data"]["limit"], "liveTasks", "{r}");
    assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// Without a transport that names the client (stdio, a `Session` of one's own), each
/// anonymous connection is a requestor of its own in the stateless era too.
#[tokio::test(start_paused = true)]
async fn v2_anonymous_connections_are_requestors_of_their_own() {
    let mut b =
        Server::builder()
            .name("tasks-test")
            .quotas(mcp_tasks_runtime::quota::QuotaConfig {
                max_live: 1,
                ..mcp_tasks_runtime::quota::QuotaConfig::unlimited()
            });
    for t in tools() {
        b = b.tool(t);
    }
    let server = b.build().unwrap();
    let mut a = Client::stateless_as(&server, None, tasks_caps());
    let r = a.request("tools/call", json!({"name": "forever"})).await;
    task_id(&r);
    let r = a.request("tools/call", json!({"name": "forever"})).await;
    assert_eq!(r["error"]["data"]["limit"], "liveTasks", "{r}");
    let mut other = Client::stateless_as(&server, None, tasks_caps());
    let r = other
        .request("tools/call", json!({"name": "forever"}))
        .await;
    task_id(&r);
}

/// Without a principal a task id is a bearer handle: another session (a client that
/// reconnected) reaches it by id, but lists only what it created itself.
#[tokio::test(start_paused = true)]
async fn v1_anonymous_task_ids_are_bearer_handles() {
    let server = server();
    let mut a = stateful(&server).await;
    let r = a
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await;
    let id = r["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    let mut b = stateful(&server).await;
    assert_eq!(b.get(&id).await["result"]["status"], "working");
    assert_eq!(
        b.request("tasks/list", json!({})).await["result"]["tasks"],
        json!([])
    );
    let r = b.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(r["result"]["status"], "cancelled", "{r}");
    assert_eq!(a.get(&id).await["result"]["status"], "cancelled");
    let r = b.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(code(&r), -32603, "{r}");
}

#[tokio::test(start_paused = true)]
async fn v1_expired_tasks_answer_as_unknown() {
    let server = server_with(EngineConfig {
        min_retention: Duration::ZERO,
        sweep_interval: Duration::from_millis(100),
        ..EngineConfig::default()
    });
    let mut c = stateful(&server).await;
    let r = c
        .request("tools/call", json!({"name": "quick", "task": {"ttl": 0}}))
        .await;
    let id = r["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(r["result"]["task"]["ttl"], 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(code(&c.get(&id).await), -32602);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_new_tasks_clearly() {
    let server = server_with(EngineConfig {
        max_running: 1,
        max_queued: 1,
        ..EngineConfig::default()
    });
    let mut c = stateful(&server).await;
    for _ in 0..2 {
        let r = c
            .request("tools/call", json!({"name": "forever", "task": {}}))
            .await;
        assert_eq!(r["result"]["task"]["status"], "working");
    }
    let r = c
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await;
    assert_eq!(code(&r), -32000);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many tasks")
    );
}

// ---- 2026-07-28 ----

fn task_id(r: &Value) -> String {
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    r["result"]["taskId"].as_str().unwrap().to_owned()
}

#[tokio::test(start_paused = true)]
async fn v2_create_is_flat_and_get_inlines_the_result() {
    let mut c = Client::stateless_as(&server(), None, tasks_caps());
    let r = c
        .request(
            "tools/call",
            json!({"name": "work", "arguments": {"steps": 2}, "task": {"ttl": 5}}),
        )
        .await;
    let res = &r["result"];
    let id = task_id(&r);
    assert!(res.get("task").is_none());
    for absent in [
        "result",
        "error",
        "inputRequests",
        "ttl",
        "pollInterval",
        "requestState",
    ] {
        assert!(res.get(absent).is_none(), "{absent}");
    }
    assert_eq!(res["pollIntervalMs"], 500);
    assert_eq!(res["ttlMs"], 3_600_000, "the legacy task param is ignored");
    let r = c.get(&id).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["status"], "working");
    let r = c.poll_until(&id, &["completed"]).await;
    assert_eq!(r["result"]["result"]["content"][0]["text"], "worked 2");
    assert!(
        r["result"]["result"].get("_meta").is_none(),
        "no related-task meta on the inlined result"
    );
    assert!(
        c.drain()
            .iter()
            .all(|m| m["method"] != "notifications/progress")
    );
}

#[tokio::test(start_paused = true)]
async fn v2_tool_error_completes_protocol_error_and_panic_fail() {
    let mut c = Client::stateless_as(&server(), None, tasks_caps());
    let id = task_id(&c.request("tools/call", json!({"name": "fails"})).await);
    let r = c.poll_until(&id, &["completed", "failed"]).await;
    assert_eq!(r["result"]["status"], "completed");
    assert_eq!(r["result"]["result"]["isError"], true);
    for (tool, want) in [("breaks", -32050), ("panics", -32603)] {
        let id = task_id(&c.request("tools/call", json!({"name": tool})).await);
        let r = c.poll_until(&id, &["completed", "failed"]).await;
        assert_eq!(r["result"]["status"], "failed", "{tool}");
        assert_eq!(r["result"]["error"]["code"], want);
        assert!(r["result"]["error"]["message"].is_string());
        assert!(r["result"].get("result").is_none());
        assert!(r["result"]["statusMessage"].is_string());
    }
}

#[tokio::test(start_paused = true)]
async fn v2_cancel_acks_empty_and_is_idempotent() {
    let mut c = Client::stateless_as(&server(), None, tasks_caps());
    let id = task_id(&c.request("tools/call", json!({"name": "forever"})).await);
    for _ in 0..2 {
        let r = c.request("tasks/cancel", json!({"taskId": id})).await;
        let res = r["result"].as_object().unwrap();
        assert_eq!(res["resultType"], "complete");
        for absent in ["taskId", "status", "result", "error", "inputRequests"] {
            assert!(!res.contains_key(absent), "{absent}");
        }
    }
    assert_eq!(
        c.poll_until(&id, &["cancelled"]).await["result"]["status"],
        "cancelled"
    );
}

#[tokio::test(start_paused = true)]
async fn v2_partial_input_keeps_input_required_with_read_your_writes() {
    let mut c = Client::stateless_as(&server(), None, tasks_caps());
    let id = task_id(&c.request("tools/call", json!({"name": "ask"})).await);
    let r = c.poll_until(&id, &["input_required"]).await;
    let requests = r["result"]["inputRequests"].as_object().unwrap().clone();
    assert_eq!(requests.len(), 2, "both questions are outstanding at once");
    let mut keys: Vec<_> = requests.keys().cloned().collect();
    keys.sort();
    let first = keys[0].clone();
    let answer = |req: &Value| {
        if req["params"]["message"] == "name?" {
            json!({"action": "accept", "content": {"name": "Ada"}})
        } else {
            json!({"action": "accept", "content": {"ok": true}})
        }
    };
    let r = c
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {
                first.clone(): answer(&requests[&first]),
                "never-issued": {"action": "accept"}
            }}),
        )
        .await;
    assert_eq!(r["result"]["resultType"], "complete");
    let r = c.get(&id).await;
    assert_eq!(r["result"]["status"], "input_required");
    assert!(r["result"]["inputRequests"].get(&first).is_none());
    assert!(r["result"]["inputRequests"].get(&keys[1]).is_some());
    c.request(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {keys[1].clone(): answer(&requests[&keys[1]])}}),
    )
    .await;
    let r = c.poll_until(&id, &["completed"]).await;
    assert_eq!(r["result"]["result"]["content"][0]["text"], "\"Ada\" true");
}

#[tokio::test(start_paused = true)]
async fn v2_cancel_while_input_required() {
    let mut c = Client::stateless_as(&server(), None, tasks_caps());
    let id = task_id(&c.request("tools/call", json!({"name": "ask"})).await);
    c.poll_until(&id, &["input_required"]).await;
    c.request("tasks/cancel", json!({"taskId": id})).await;
    let r = c.poll_until(&id, &["cancelled"]).await;
    assert!(r["result"].get("inputRequests").is_none());
}

#[tokio::test(start_paused = true)]
async fn v2_capability_gate_comes_before_the_unknown_id_check() {
    let server = server();
    let mut plain = Client::stateless_as(&server, None, json!({}));
    for (method, params) in [
        ("tasks/get", json!({"taskId": "gate-test"})),
        (
            "tasks/update",
            json!({"taskId": "gate-test", "inputResponses": {}}),
        ),
        ("tasks/cancel", json!({"taskId": "gate-test"})),
    ] {
        let r = plain.request(method, params).await;
        assert_eq!(code(&r), -32021, "{method}");
    }
    let r = plain.request("tools/call", json!({"name": "fails"})).await;
    assert_eq!(code(&r), -32021);
    assert_eq!(
        r["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );
    let r = plain
        .request(
            "tools/call",
            json!({"name": "quick", "arguments": {"n": 1}}),
        )
        .await;
    assert_eq!(
        r["result"]["resultType"], "complete",
        "optional tools run inline without the extension"
    );
    let mut tasks = Client::stateless_as(&server, None, tasks_caps());
    assert_eq!(code(&tasks.get("no-such").await), -32602);
    for method in ["tasks/result", "tasks/list"] {
        assert_eq!(
            code(&tasks.request(method, json!({"taskId": "x"})).await),
            -32601
        );
    }
    let r = tasks
        .request("tools/call", json!({"name": "sync_only"}))
        .await;
    assert_eq!(r["result"]["resultType"], "complete");
    // Per-request opt-in: the plain client declares the extension on this one call.
    let r = plain
        .request("tools/call", json!({"name": "quick", "_meta": {
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}}))
        .await;
    assert_eq!(r["result"]["resultType"], "task");
}

#[tokio::test(start_paused = true)]
async fn v2_prelude_rounds_come_before_task_creation() {
    let mut c = Client::stateless_as(&server(), None, tasks_caps());
    let r = c.request("tools/call", json!({"name": "prelude"})).await;
    assert_eq!(r["result"]["resultType"], "input_required");
    assert!(r["result"].get("taskId").is_none());
    let key = r["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let state = r["result"]["requestState"].clone();
    let r = c
        .request(
            "tools/call",
            json!({"name": "prelude", "requestState": state,
            "inputResponses": {key: {"action": "accept", "content": {"name": "Alice"}}}}),
        )
        .await;
    let id = task_id(&r);
    assert!(r["result"].get("requestState").is_none());
    assert!(r["result"].get("inputRequests").is_none());
    let r = c.poll_until(&id, &["completed"]).await;
    assert!(
        r["result"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Alice")
    );
}

#[tokio::test(start_paused = true)]
async fn v2_subscriptions_stream_detailed_tasks() {
    let server = server();
    let mut c = Client::stateless_as(&server, None, tasks_caps());
    let id = task_id(
        &c.request(
            "tools/call",
            json!({"name": "work", "arguments": {"steps": 1}}),
        )
        .await,
    );
    let session = c.session.clone();
    let listen = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen", "params": {
        "notifications": {"taskIds": [id, "unknown"]},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": tasks_caps()}}});
    let stream = tokio::spawn(async move { session.handle_text(&listen.to_string()).await });
    let mut seen = Vec::new();
    loop {
        let m: Value = serde_json::from_str(&c.outbound.recv().await.unwrap()).unwrap();
        if m["method"] == "notifications/subscriptions/acknowledged" {
            assert_eq!(m["params"]["notifications"]["taskIds"], json!([id]));
            assert_eq!(
                m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
                "sub-1"
            );
            continue;
        }
        assert_eq!(m["method"], "notifications/tasks");
        assert_eq!(
            m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "sub-1"
        );
        seen.push(m["params"]["status"].as_str().unwrap().to_owned());
        if m["params"]["status"] == "completed" {
            assert_eq!(m["params"]["result"]["content"][0]["text"], "worked 1");
            break;
        }
    }
    assert_eq!(seen.first().map(String::as_str), Some("working"));
    c.session
        .handle_text(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"sub-1"}}"#)
        .await;
    assert_eq!(stream.await.unwrap(), None);
    let mut plain = Client::stateless_as(&server, None, json!({}));
    let r = plain
        .request(
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [id]}}),
        )
        .await;
    assert_eq!(code(&r), -32021);
}

#[tokio::test(start_paused = true)]
async fn v2_tasks_belong_to_their_principal() {
    let server = server();
    let mut alice = Client::stateless_as(&server, Some("alice"), tasks_caps());
    let mut eve = Client::stateless_as(&server, Some("eve"), tasks_caps());
    let id = task_id(&alice.request("tools/call", json!({"name": "ask"})).await);
    alice.poll_until(&id, &["input_required"]).await;
    for (method, params) in [
        ("tasks/get", json!({"taskId": id})),
        (
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"elicit-1": {"action": "accept"}}}),
        ),
        ("tasks/cancel", json!({"taskId": id})),
    ] {
        let r = eve.request(method, params).await;
        assert_eq!(code(&r), -32602, "{method}");
    }
    assert_eq!(alice.get(&id).await["result"]["status"], "input_required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_short_tasks_all_finish_with_their_own_results() {
    // One client creating 10,000 tasks at once is what quotas refuse; lift them here.
    let mut b = Server::builder()
        .name("tasks-test")
        .quotas(mcp_tasks_runtime::quota::QuotaConfig::unlimited());
    for t in tools() {
        b = b.tool(t);
    }
    let server = b.build().unwrap();
    let (session, _out) = server.session();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": tasks_caps()});
    let mut handles = Vec::new();
    for n in 0..10_000u64 {
        let session = session.clone();
        let meta = meta.clone();
        handles.push(tokio::spawn(async move {
            let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                              "params": {"name": "quick", "arguments": {"n": n}, "_meta": meta}});
            let r: Value =
                serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap())
                    .unwrap();
            (n, r["result"]["taskId"].as_str().unwrap().to_owned())
        }));
    }
    let mut ids = Vec::new();
    for h in handles {
        ids.push(h.await.unwrap());
    }
    for (n, id) in ids {
        let mut done = None;
        for _ in 0..1000 {
            let get = json!({"jsonrpc": "2.0", "id": "g", "method": "tasks/get",
                             "params": {"taskId": id, "_meta": meta}});
            let r: Value =
                serde_json::from_str(&session.handle_text(&get.to_string()).await.unwrap())
                    .unwrap();
            if r["result"]["status"] == "completed" {
                done = Some(r);
                break;
            }
            tokio::task::yield_now().await;
        }
        let r = done.unwrap_or_else(|| panic!("task {n} did not finish"));
        assert_eq!(
            r["result"]["result"]["content"][0]["text"],
            format!("quick {n}")
        );
    }
}

// ---- restart ----

fn interrupted(id: &str, tool: &str) -> mcp_tasks_runtime::task::TaskRecord {
    let now = std::time::SystemTime::now();
    let arguments = json!({"n": 7}).as_object().unwrap().clone();
    let mut record = mcp_tasks_runtime::task::TaskRecord::new(id, tool, arguments, now);
    record.ttl = Some(Duration::from_secs(3600));
    // Left by a process that died: its lease has run out.
    record.lease = Some(mcp_tasks_runtime::task::Lease {
        worker: "gone".into(),
        until: now,
    });
    record.epoch = 1;
    record.version = 3;
    record
}

#[tokio::test(start_paused = true)]
async fn restart_reruns_idempotent_tools_and_fails_the_rest() {
    use mcp_tasks_runtime::store::{MemoryTaskStore, TaskStore};
    let store = MemoryTaskStore::new();
    for (id, tool) in [
        ("again", "redo"),
        ("lost", "quick"),
        ("orphan", "removed_tool"),
    ] {
        store.create(interrupted(id, tool)).await.unwrap();
    }
    let mut done = interrupted("finished", "quick");
    done.status = mcp_tasks_runtime::task::TaskStatus::Completed;
    done.outcome = Some(Box::new(mcp_tasks_runtime::CallOutcome::Result(
        CallToolResult::success(vec![Content::text("kept")]),
    )));
    store.create(done).await.unwrap();

    let redo = Tool::new("redo", |_, args: JsonObject| async move {
        text(format!("redone {}", args["n"]))
    })
    .task_support(TaskSupport::Optional)
    .annotations(mcp_tasks_runtime::model::ToolAnnotations {
        idempotent_hint: Some(true),
        ..Default::default()
    })
    .on_restart(mcp_tasks_runtime::RestartPolicy::Rerun);
    let mut b = Server::builder().store(store).tool(redo);
    for t in tools() {
        b = b.tool(t);
    }
    let server = b.build().unwrap();
    let report = server.recover().await.unwrap();
    assert_eq!((report.rerun, report.failed), (1, 2));
    assert_eq!(
        server.recover().await.unwrap(),
        Default::default(),
        "only once"
    );

    let mut c = Client::stateless_as(&server, None, tasks_caps());
    let r = c.poll_until("again", &["completed"]).await;
    assert_eq!(r["result"]["result"]["content"][0]["text"], "redone 7");
    for id in ["lost", "orphan"] {
        let r = c.get(id).await;
        assert_eq!(r["result"]["status"], "failed", "{id}");
        assert_eq!(r["result"]["error"]["code"], -32603);
        assert!(
            r["result"]["statusMessage"]
                .as_str()
                .unwrap()
                .contains("restarted")
        );
    }
    let r = c.get("finished").await;
    assert_eq!(r["result"]["result"]["content"][0]["text"], "kept");
}

#[tokio::test(start_paused = true)]
async fn a_principal_reaches_its_tasks_from_either_era() {
    let server = server();
    let mut legacy = Client::new_as(&server, "alice");
    legacy
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        )
        .await;
    let id = legacy
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut modern = Client::stateless_as(&server, Some("alice"), tasks_caps());
    assert_eq!(modern.get(&id).await["result"]["status"], "working");
    let mut eve = Client::stateless_as(&server, Some("eve"), tasks_caps());
    assert_eq!(code(&eve.get(&id).await), -32602);
    let mut anonymous = Client::stateless_as(&server, None, tasks_caps());
    assert_eq!(code(&anonymous.get(&id).await), -32602);
    modern.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(legacy.get(&id).await["result"]["status"], "cancelled");
}

/// An answer whose content does not match the question's `requestedSchema` is refused with
/// `-32602` naming the answer's key and the field; nothing is stored, so the question stays
/// open and a good answer still completes the task.
#[tokio::test(start_paused = true)]
async fn v2_an_answer_that_does_not_fit_its_question_is_refused_and_the_question_stays() {
    let mut c = Client::stateless_as(&server(), None, tasks_caps());
    let id = task_id(&c.request("tools/call", json!({"name": "ask"})).await);
    let r = c.poll_until(&id, &["input_required"]).await;
    let requests = r["result"]["inputRequests"].as_object().unwrap().clone();
    let key_of = |message: &str| {
        requests
            .iter()
            .find(|(_, q)| q["params"]["message"] == message)
            .map(|(k, _)| k.clone())
            .unwrap()
    };
    let (name, ok) = (key_of("name?"), key_of("ok?"));
    let r = c
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {
                ok.clone(): {"action": "accept", "content": {"ok": true}},
                name.clone(): {"action": "accept", "content": {"name": 5}},
            }}),
        )
        .await;
    assert_eq!(code(&r), -32602, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&name) && message.contains("/name"),
        "{message}"
    );
    let r = c.get(&id).await;
    assert_eq!(r["result"]["status"], "input_required");
    let open = r["result"]["inputRequests"].as_object().unwrap();
    assert!(open.contains_key(&name) && open.contains_key(&ok), "{r}");
    let r = c
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {
                ok: {"action": "accept", "content": {"ok": true}},
                name: {"action": "accept", "content": {"name": "Ada"}},
            }}),
        )
        .await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let r = c.poll_until(&id, &["completed"]).await;
    assert_eq!(r["result"]["result"]["content"][0]["text"], "\"Ada\" true");
}

/// A 2025-11-25 client answers `elicitation/create` with content that does not fit: the
/// tool never sees it, it gets an error naming the field instead.
#[tokio::test(start_paused = true)]
async fn v1_an_answer_that_does_not_fit_its_question_never_reaches_the_tool() {
    let mut c = stateful(&server()).await;
    let id = c
        .request("tools/call", json!({"name": "ask", "task": {}}))
        .await["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut answered = 0;
    while answered < 2 {
        let msg: Value = serde_json::from_str(&c.outbound.recv().await.unwrap()).unwrap();
        if msg["method"] != "elicitation/create" {
            continue;
        }
        let content = if msg["params"]["message"] == "name?" {
            json!({"name": ["not", "a", "string"]})
        } else {
            json!({"ok": true})
        };
        let reply = json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"action": "accept", "content": content}});
        assert!(c.session.handle_text(&reply.to_string()).await.is_none());
        answered += 1;
    }
    let r = c.poll_until(&id, &["failed"]).await;
    let message = r["result"]["statusMessage"].as_str().unwrap();
    assert!(
        message.contains("-32602") && message.contains("/name"),
        "{message}"
    );
}
