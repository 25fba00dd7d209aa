//! Bounded outbound messages: a client that does not read its session's messages loses only
//! the droppable ones (progress here, of which it still gets the latest once it reads), and
//! nothing it must get is lost or left hanging.

use mcp_tasks_runtime::jsonrpc::Message;
use mcp_tasks_runtime::model::{CallToolResult, Content, TaskSupport};
use mcp_tasks_runtime::{OUTBOUND_CAPACITY, Server, Session, Tool, ToolError};
use serde_json::{Value, json};
use std::time::Duration;
use support::{Client, drain, meta};
use tokio::sync::mpsc::Receiver;

mod support;

/// Progress reports a flooding tool sends: well past the capacity.
const FLOOD: usize = 3 * OUTBOUND_CAPACITY;

fn server() -> Server {
    server_with(OUTBOUND_CAPACITY)
}

/// The test server, with outbound channels of `capacity` messages.
fn server_with(capacity: usize) -> Server {
    Server::builder()
        .outbound_capacity(capacity)
        .name("backpressure")
        .version("0")
        .tool(Tool::new("flood", |cx, _| async move {
            let p = cx.progress();
            for n in 1..=FLOOD {
                p.report(n as f64, None);
            }
            Ok::<_, ToolError>(CallToolResult::success(vec![Content::text("flooded")]))
        }))
        .tool(
            Tool::new("flood_then_wait", |cx, _| async move {
                let p = cx.progress();
                for n in 1..=FLOOD {
                    p.report(n as f64, None);
                }
                // Long enough for the client to read what was sent.
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok::<_, ToolError>(CallToolResult::success(vec![Content::text("flooded")]))
            })
            .task_support(TaskSupport::Optional),
        )
        .tool(Tool::new("flood_then_ask", |cx, _| async move {
            let p = cx.progress();
            for n in 1..=OUTBOUND_CAPACITY + 10 {
                p.report(n as f64, None);
            }
            let answer = cx
                .client()
                .elicit(
                    "name?",
                    json!({"type": "object", "properties": {"name": {"type": "string"}}}),
                )
                .await?;
            let name = answer.content.unwrap_or_default()["name"].clone();
            Ok(CallToolResult::success(vec![Content::text(
                name.to_string(),
            )]))
        }))
        .build()
        .unwrap()
}

async fn stateful() -> (Session, Receiver<String>) {
    stateful_on(&server()).await
}

/// A 2025-11-25 session of `server`, initialized.
async fn stateful_on(server: &Server) -> (Session, Receiver<String>) {
    let (client, _) = Client::stateful(server).await;
    (client.session, client.outbound)
}

fn call(id: u64, name: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "_meta": {"progressToken": "p"}}})
    .to_string()
}

/// Calls `name` (as request 1) in a task of its own; the task ends with the response.
fn call_in_background(session: &Session, name: &str) -> tokio::task::JoinHandle<Option<String>> {
    let (session, request) = (session.clone(), call(1, name));
    tokio::spawn(async move { session.handle_text(&request).await })
}

/// The next message on `rx`, read as JSON.
async fn next(rx: &mut Receiver<String>) -> Value {
    serde_json::from_str(&rx.recv().await.expect("a message")).unwrap()
}

/// The progress values among `messages`, in order.
fn progress_of(messages: &[Value]) -> Vec<f64> {
    messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_session_nobody_reads_drops_progress_past_its_capacity_and_still_answers() {
    let (session, mut outbound) = stateful().await;
    let r: Value =
        serde_json::from_str(&session.handle_text(&call(1, "flood")).await.unwrap()).unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "flooded");
    // The channel never held more than its capacity: the first reports, in order.
    let queued = drain(&mut outbound);
    assert_eq!(queued.len(), OUTBOUND_CAPACITY);
    assert!(
        queued
            .iter()
            .all(|m| m["method"] == "notifications/progress")
    );
    assert_eq!(queued[0]["params"]["progress"], 1.0);
    // The latest report, held back while the channel was full, was still held as the call
    // ended, so it was dropped too: no progress follows the response.
    assert_eq!(
        session.dropped_notifications(),
        (FLOOD - OUTBOUND_CAPACITY) as u64
    );
    // Read again, the session delivers again.
    session.handle_text(&call(2, "flood")).await.unwrap();
    assert_eq!(drain(&mut outbound).len(), OUTBOUND_CAPACITY);
}

/// A 2026-07-28 call of `name` with a progress token.
fn stateless_call(name: &str) -> mcp_tasks_runtime::jsonrpc::Request {
    let mut request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": name,
    "_meta": meta(json!({}))}});
    request["params"]["_meta"]["progressToken"] = json!("p");
    let Ok(Message::Request(request)) = Message::parse(&request.to_string()) else {
        panic!("not a request");
    };
    request
}

#[tokio::test]
async fn a_session_holds_what_its_server_s_outbound_capacity_says() {
    let server = server_with(16);
    assert_eq!(server.outbound_capacity(), 16);
    let (session, mut outbound) = stateful_on(&server).await;
    session.handle_text(&call(1, "flood")).await.unwrap();
    assert_eq!(drain(&mut outbound).len(), 16);
    assert_eq!(session.dropped_notifications(), (FLOOD - 16) as u64);
}

#[tokio::test]
async fn a_response_stream_is_bounded_like_the_session() {
    let (session, _outbound) = server().session();
    let (stream, mut notes) = tokio::sync::mpsc::channel(4);
    let response = session
        .handle_request_on(stateless_call("flood"), Some(stream))
        .await
        .unwrap();
    assert!(response.outcome.is_ok(), "{:?}", response.outcome);
    assert_eq!(drain(&mut notes).len(), 4);
    // The latest report, held back while the stream was full, was still held as the call
    // ended: dropped too.
    assert_eq!(session.dropped_notifications(), (FLOOD - 4) as u64);
}

#[tokio::test(start_paused = true)]
async fn a_response_stream_read_meanwhile_gets_the_latest_progress_before_the_response() {
    let (session, _outbound) = server().session();
    let (stream, mut notes) = tokio::sync::mpsc::channel(4);
    let answering = tokio::spawn(async move {
        session
            .handle_request_on(stateless_call("flood_then_wait"), Some(stream))
            .await
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut progress = Vec::new();
    for _ in 0..5 {
        let m = next(&mut notes).await;
        progress.push(m["params"]["progress"].as_f64().unwrap());
    }
    assert_eq!(progress, [1.0, 2.0, 3.0, 4.0, FLOOD as f64]);
    let response = answering.await.unwrap().unwrap();
    assert!(response.outcome.is_ok(), "{:?}", response.outcome);
    assert!(notes.try_recv().is_err(), "nothing follows the response");
}

#[tokio::test(start_paused = true)]
async fn a_question_waits_for_room_and_arrives_once_the_client_reads() {
    let (session, mut outbound) = stateful().await;
    let asking = call_in_background(&session, "flood_then_ask");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!asking.is_finished());
    // The latest progress is held back; the nine before it, which it replaced, are dropped.
    assert_eq!(session.dropped_notifications(), 9);
    // The client reads: the progress that fitted, the question, which was not lost, and the
    // latest progress.
    let mut progress = Vec::new();
    let mut question = None;
    while progress.len() < OUTBOUND_CAPACITY + 1 || question.is_none() {
        let m = next(&mut outbound).await;
        if m["method"] == "notifications/progress" {
            progress.push(m["params"]["progress"].as_f64().unwrap());
        } else {
            assert!(question.is_none(), "asked once: {m}");
            question = Some(m);
        }
    }
    let question = question.unwrap();
    assert_eq!(question["method"], "elicitation/create");
    let expected: Vec<f64> = (1..=OUTBOUND_CAPACITY)
        .chain([OUTBOUND_CAPACITY + 10])
        .map(|n| n as f64)
        .collect();
    assert_eq!(progress, expected);
    let reply = json!({"jsonrpc": "2.0", "id": question["id"],
                       "result": {"action": "accept", "content": {"name": "Ada"}}});
    assert_eq!(session.handle_text(&reply.to_string()).await, None);
    let r: Value = serde_json::from_str(&asking.await.unwrap().unwrap()).unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "\"Ada\"");
    assert!(outbound.try_recv().is_err(), "nothing follows the response");
}

#[tokio::test(start_paused = true)]
async fn a_client_that_catches_up_sees_the_latest_progress_before_the_response() {
    let (session, mut outbound) = stateful().await;
    let calling = call_in_background(&session, "flood_then_wait");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!calling.is_finished());
    let mut progress = Vec::new();
    while progress.len() < OUTBOUND_CAPACITY + 1 {
        let m = next(&mut outbound).await;
        assert_eq!(m["method"], "notifications/progress");
        progress.push(m["params"]["progress"].as_f64().unwrap());
    }
    // The first reports, in order, then the last one: none in between, none stale.
    assert_eq!(progress[OUTBOUND_CAPACITY - 1], OUTBOUND_CAPACITY as f64);
    assert_eq!(progress[OUTBOUND_CAPACITY], FLOOD as f64);
    assert_eq!(
        session.dropped_notifications(),
        (FLOOD - OUTBOUND_CAPACITY - 1) as u64
    );
    let r: Value = serde_json::from_str(&calling.await.unwrap().unwrap()).unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "flooded");
    assert!(outbound.try_recv().is_err(), "nothing follows the response");
}

#[tokio::test(start_paused = true)]
async fn a_question_waiting_for_room_ends_when_the_session_closes() {
    let (session, _outbound) = stateful().await;
    let asking = call_in_background(&session, "flood_then_ask");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!asking.is_finished());
    session.close();
    let answered = tokio::time::timeout(Duration::from_secs(1), asking)
        .await
        .expect("the call ends with its session");
    // The call was cancelled with its session: it is not answered.
    assert_eq!(answered.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_question_for_a_client_that_went_away_fails_at_once() {
    let (session, outbound) = stateful().await;
    drop(outbound);
    let r = tokio::time::timeout(
        Duration::from_secs(1),
        session.handle_text(&call(1, "flood_then_ask")),
    )
    .await
    .expect("nothing waits for a reader that is gone")
    .unwrap();
    let r: Value = serde_json::from_str(&r).unwrap();
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(session.dropped_notifications(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_task_read_late_gets_its_latest_progress_and_status_and_no_progress_after_its_end() {
    let (session, mut outbound) = stateful().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "flood_then_wait", "task": {"ttl": 600_000}, "_meta": {"progressToken": "p"}}});
    let created: Value =
        serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap();
    assert_eq!(created["result"]["task"]["status"], "working", "{created}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Read while the task waits, then after it ended.
    let mut messages = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(60), outbound.recv()).await {
        messages.push(serde_json::from_str::<Value>(&m).unwrap());
    }
    let progress = progress_of(&messages);
    assert_eq!(
        progress.last(),
        Some(&(FLOOD as f64)),
        "the latest progress"
    );
    assert!(progress.is_sorted(), "never a stale one");
    assert_eq!(
        session.dropped_notifications(),
        (FLOOD - progress.len()) as u64
    );
    let ended = messages
        .iter()
        .position(|m| m["params"]["status"] == "completed")
        .expect("the task's end");
    assert!(
        messages[ended..]
            .iter()
            .all(|m| m["method"] != "notifications/progress"),
        "no progress after the task's end"
    );
}

#[tokio::test(start_paused = true)]
async fn a_round_that_asks_sends_no_progress_after_its_answer() {
    // 2026-07-28 over a session's own channel (as stdio): the call floods, then asks, so
    // its round is answered with its question while the channel is still full.
    let (session, mut outbound) = server().session();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "flood_then_ask",
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "progressToken": "p",
    }}});
    let answer: Value =
        serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap();
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    // The latest report was held back, then dropped as the round answered: none follows.
    assert_eq!(session.dropped_notifications(), 10);
    let mut messages = drain(&mut outbound);
    tokio::time::sleep(Duration::from_secs(1)).await;
    messages.extend(drain(&mut outbound));
    assert_eq!(
        progress_of(&messages),
        (1..=OUTBOUND_CAPACITY)
            .map(|n| n as f64)
            .collect::<Vec<_>>()
    );
}
