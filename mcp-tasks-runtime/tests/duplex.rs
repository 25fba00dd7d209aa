//! Full sessions over `tokio::io::duplex`, the same code path stdio uses.

use mcp_tasks_runtime::model::{CallToolResult, Content};
use mcp_tasks_runtime::transport::serve_io;
use mcp_tasks_runtime::{Server, Tool};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Calls of `wait_counted` that saw their cancellation.
static WAITS_CANCELLED: AtomicUsize = AtomicUsize::new(0);

fn server() -> Server {
    Server::builder()
        .tool(Tool::new("wait", |cx, _| async move {
            cx.cancellation().cancelled().await;
            Ok(CallToolResult::default())
        }))
        .tool(Tool::new("wait_counted", |cx, _| async move {
            cx.cancellation().cancelled().await;
            WAITS_CANCELLED.fetch_add(1, Ordering::SeqCst);
            Ok(CallToolResult::default())
        }))
        .tool(Tool::new("hello", |_, _| async {
            Ok(CallToolResult::success(vec![Content::text("hello")]))
        }))
        .build()
        .unwrap()
}

struct Pipe {
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    server: tokio::task::JoinHandle<Result<(), mcp_tasks_runtime::transport::TransportError>>,
}

fn open() -> Pipe {
    open_with(server())
}

/// `server` serving a pipe of `buffer` bytes each way.
fn pipe(server: Server, buffer: usize) -> Pipe {
    let (client, server_end) = tokio::io::duplex(buffer);
    let (r, w) = tokio::io::split(server_end);
    let server = tokio::spawn(serve_io(server, r, w));
    let (read, write) = tokio::io::split(client);
    Pipe {
        write,
        lines: BufReader::new(read).lines(),
        server,
    }
}

impl Pipe {
    async fn send(&mut self, text: &str) {
        self.write
            .write_all(format!("{text}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(5), self.lines.next_line())
            .await
            .expect("a line within 5 s")
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }
}

#[tokio::test]
async fn stateful_session_over_a_pipe() {
    let mut p = open();
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#).await;
    assert_eq!(p.recv().await["result"]["protocolVersion"], "2025-11-25");
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    // A long call does not block the requests behind it.
    p.send(r#"{"jsonrpc":"2.0","id":"w","method":"tools/call","params":{"name":"wait"}}"#)
        .await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(p.recv().await["id"], 2);
    p.send("").await;
    p.send("garbage").await;
    assert_eq!(p.recv().await["error"]["code"], -32700);
    p.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"hello"}}"#)
        .await;
    assert_eq!(p.recv().await["result"]["content"][0]["text"], "hello");
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"w"}}"#)
        .await;
    p.send(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#).await;
    // The cancelled call is never answered: the next line is the ping's response.
    assert_eq!(p.recv().await["id"], 4);
    p.write.shutdown().await.unwrap();
    assert!(p.lines.next_line().await.unwrap().is_none());
    p.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_reused_id_is_refused_while_its_request_is_in_flight_and_it_stays_cancellable() {
    let mut p = open();
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#).await;
    p.recv().await;
    p.send(
        r#"{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"wait_counted"}}"#,
    )
    .await;
    p.send(r#"{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"hello"}}"#)
        .await;
    let refused = p.recv().await;
    assert_eq!(refused["id"], "dup");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("in use"), "{message}");
    // The id of a request that ended is free again; numbers and strings are different ids.
    p.send(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#).await;
    assert_eq!(p.recv().await["id"], 5);
    p.send(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#).await;
    assert!(p.recv().await.get("result").is_some());

    // The first request still gets its cancellation.
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"dup"}}"#)
        .await;
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while WAITS_CANCELLED.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the first request was cancelled");
    p.write.shutdown().await.unwrap();
    p.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn stateless_session_over_a_pipe() {
    let mut p = open();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    p.send(
        &json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": meta}})
            .to_string(),
    )
    .await;
    assert_eq!(p.recv().await["result"]["resultType"], "complete");
    p.send(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hello","_meta": meta}}).to_string()).await;
    let r = p.recv().await;
    assert_eq!(r["result"]["content"][0]["text"], "hello");
    assert_eq!(r["result"]["resultType"], "complete");
    p.send(
        &json!({"jsonrpc":"2.0","id":3,"method":"initialize","params":{"_meta": meta}}).to_string(),
    )
    .await;
    assert_eq!(p.recv().await["error"]["code"], -32601);
    p.write.shutdown().await.unwrap();
    p.server.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn eof_with_a_call_in_flight_ends_cleanly() {
    let mut p = open();
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#).await;
    p.recv().await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait"}}"#)
        .await;
    p.write.shutdown().await.unwrap();
    p.server.await.unwrap().unwrap();
}

fn task_server() -> Server {
    use mcp_tasks_runtime::model::TaskSupport;
    Server::builder()
        .tool(
            Tool::new("confirm", |cx, _| async move {
                cx.progress().report(1.0, Some(2.0));
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                let answer = cx
                    .client()
                    .elicit(
                        "go?",
                        json!({"type": "object", "properties": {"go": {"type": "boolean"}}}),
                    )
                    .await?;
                Ok(CallToolResult::success(vec![Content::text(format!(
                    "go={}",
                    answer.content.unwrap_or_default()["go"]
                ))]))
            })
            .task_support(TaskSupport::Optional),
        )
        .build()
        .unwrap()
}

fn open_with(server: Server) -> Pipe {
    pipe(server, 4096)
}

#[tokio::test(start_paused = true)]
async fn v1_task_lifecycle_over_a_pipe() {
    let mut p = open_with(task_server());
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}}}}"#).await;
    p.recv().await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"confirm","task":{"ttl":1000},"_meta":{"progressToken":7}}}"#).await;
    let mut id = None;
    let mut asked = None;
    // The create result, progress on token 7, then (while input is required) the tagged question.
    while asked.is_none() {
        let m = p.recv().await;
        if m["id"] == 2 {
            id = Some(m["result"]["task"]["taskId"].as_str().unwrap().to_owned());
            let get =
                json!({"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId": id}});
            p.send(&get.to_string()).await;
        } else if m["method"] == "notifications/progress" {
            assert_eq!(m["params"]["progressToken"], 7);
        } else if m["method"] == "elicitation/create" {
            assert_eq!(
                m["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
                json!(id)
            );
            asked = Some(m["id"].clone());
        }
    }
    let reply =
        json!({"jsonrpc":"2.0","id": asked, "result": {"action":"accept","content":{"go":true}}});
    p.send(&reply.to_string()).await;
    loop {
        let m = p.recv().await;
        if m["id"] == 3 {
            assert_eq!(m["result"]["content"][0]["text"], "go=true");
            assert_eq!(
                m["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
                json!(id)
            );
            break;
        }
    }
    p.write.shutdown().await.unwrap();
    p.server.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn v2_task_lifecycle_over_a_pipe() {
    let mut p = open_with(task_server());
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"elicitation": {},
                          "extensions": {"io.modelcontextprotocol/tasks": {}}}});
    p.send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"confirm","_meta": meta}}).to_string()).await;
    let r = p.recv().await;
    assert_eq!(r["result"]["resultType"], "task");
    let id = r["result"]["taskId"].clone();
    let mut n = 1;
    let key = loop {
        n += 1;
        p.send(&json!({"jsonrpc":"2.0","id":n,"method":"tasks/get","params":{"taskId": id, "_meta": meta}}).to_string()).await;
        let r = p.recv().await;
        if r["result"]["status"] == "input_required" {
            break r["result"]["inputRequests"]
                .as_object()
                .unwrap()
                .keys()
                .next()
                .unwrap()
                .clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    p.send(&json!({"jsonrpc":"2.0","id":"u","method":"tasks/update","params":{"taskId": id, "_meta": meta,
        "inputResponses": {key: {"action": "accept", "content": {"go": false}}}}}).to_string()).await;
    assert_eq!(
        p.recv().await["result"],
        json!({"resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks-server", "version": env!("CARGO_PKG_VERSION")}}})
    );
    loop {
        n += 1;
        p.send(&json!({"jsonrpc":"2.0","id":n,"method":"tasks/get","params":{"taskId": id, "_meta": meta}}).to_string()).await;
        let r = p.recv().await;
        if r["result"]["status"] == "completed" {
            assert_eq!(r["result"]["result"]["content"][0]["text"], "go=false");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    p.write.shutdown().await.unwrap();
    p.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_request_sent_just_before_eof_is_still_answered() {
    let mut p = open();
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hello","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#).await;
    p.write.shutdown().await.unwrap();
    assert_eq!(p.recv().await["result"]["content"][0]["text"], "hello");
    p.server.await.unwrap().unwrap();
}

/// The first four messages of a client that does not wait for `initialize` to be answered,
/// written at once.
const PIPELINED: &str = concat!(
    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"eager","version":"1"}}}"#,
    "\n",
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    "\n",
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    "\n",
    r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"hello"}}"#,
    "\n",
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_pipelined_after_initialize_are_served_in_order() {
    for run in 0..200 {
        let mut p = open();
        p.write.write_all(PIPELINED.as_bytes()).await.unwrap();
        let mut answers = std::collections::BTreeMap::new();
        while answers.len() < 3 {
            let m = p.recv().await;
            answers.insert(m["id"].as_u64().expect("a response"), m);
        }
        assert_eq!(
            answers[&1]["result"]["protocolVersion"], "2025-11-25",
            "run {run}: {}",
            answers[&1]
        );
        assert!(
            answers[&2]["result"]["tools"].is_array(),
            "run {run}: {}",
            answers[&2]
        );
        assert_eq!(
            answers[&3]["result"]["content"][0]["text"], "hello",
            "run {run}: {}",
            answers[&3]
        );
        p.write.shutdown().await.unwrap();
        p.server.await.unwrap().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn eof_ends_the_session_while_its_task_runs_on() {
    // A running 2025-11-25 task holds on to its session (to ask questions, to report
    // progress); the end of input still ends `serve_io`, once the blocking `tasks/result`
    // read before it has had its grace period.
    let server = Server::builder()
        .tool(
            Tool::new("forever", |cx, _| async move {
                cx.cancellation().cancelled().await;
                Ok(CallToolResult::default())
            })
            .task_support(mcp_tasks_runtime::model::TaskSupport::Required),
        )
        .build()
        .unwrap();
    let mut p = open_with(server);
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#).await;
    p.recv().await;
    p.send(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"forever","task":{}}}"#,
    )
    .await;
    let r = p.recv().await;
    let id = r["result"]["task"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    p.send(
        &json!({"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId": id}})
            .to_string(),
    )
    .await;
    p.write.shutdown().await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(60), p.server)
        .await
        .expect("serve_io returns after end of input")
        .unwrap()
        .unwrap();
}

/// A task's question, status and progress never reach the client before the response that
/// names the task: a client cannot tell what they belong to before it (the TypeScript
/// SDK's task extension answers such a question "cancel"). The tool asks at once, on
/// another thread than the one answering, many times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_about_a_task_precedes_the_response_that_creates_it() {
    use mcp_tasks_runtime::model::TaskSupport;
    let server = Server::builder()
        .tool(
            Tool::new("ask_now", |cx, _| async move {
                cx.progress().report(1.0, Some(2.0));
                let answer = cx
                    .client()
                    .elicit(
                        "Go on?",
                        json!({"type": "object", "properties": {"go": {"type": "boolean"}}}),
                    )
                    .await?;
                Ok(CallToolResult::success(vec![Content::text(format!(
                    "go: {}",
                    answer.content.unwrap_or_default()["go"]
                ))]))
            })
            .task_support(TaskSupport::Required),
        )
        .build()
        .unwrap();
    let mut p = pipe(server, 1 << 16);
    p.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}}}}"#).await;
    assert_eq!(p.recv().await["result"]["protocolVersion"], "2025-11-25");
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let mut known = std::collections::HashSet::new();
    for run in 1..=40 {
        let call = json!({"jsonrpc": "2.0", "id": run, "method": "tools/call", "params": {
            "name": "ask_now", "task": {}, "_meta": {"progressToken": run}}});
        p.send(&call.to_string()).await;
        let mut task = None;
        let mut answered = false;
        while !answered {
            let m = p.recv().await;
            if m["id"] == run && m.get("method").is_none() {
                let id = m["result"]["task"]["taskId"].as_str().unwrap().to_owned();
                known.insert(id.clone());
                // As a client does, it polls the task it learnt of.
                let get = json!({"jsonrpc": "2.0", "id": format!("get-{run}"),
                    "method": "tasks/get", "params": {"taskId": id}});
                p.send(&get.to_string()).await;
                task = Some(id);
                continue;
            }
            let about = match m["method"].as_str() {
                Some("elicitation/create") => {
                    m["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"].clone()
                }
                Some("notifications/tasks/status") => m["params"]["taskId"].clone(),
                Some("notifications/progress") => {
                    let token = m["params"]["progressToken"].as_i64().unwrap();
                    assert!(
                        token < run || task.is_some(),
                        "run {run}: progress before the response that creates its task: {m}"
                    );
                    continue;
                }
                _ => continue,
            };
            let about = about.as_str().unwrap_or_default();
            assert!(
                known.contains(about),
                "run {run}: {m} before the response that creates its task"
            );
            if task.as_deref() != Some(about) {
                // A late status notification of an earlier run's task.
                continue;
            }
            if m["method"] == "elicitation/create" {
                let answer = json!({"jsonrpc": "2.0", "id": m["id"],
                    "result": {"action": "accept", "content": {"go": true}}});
                p.send(&answer.to_string()).await;
                answered = true;
            }
        }
    }
    p.write.shutdown().await.unwrap();
    p.server.await.unwrap().unwrap();
}
