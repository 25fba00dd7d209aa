//! Bounded outbound messages: a client that does not read its session's messages loses only
//! the droppable ones (progress here), and nothing it must get is lost or left hanging.

use mcp_tasks_runtime::jsonrpc::Message;
use mcp_tasks_runtime::model::{CallToolResult, Content};
use mcp_tasks_runtime::{OUTBOUND_CAPACITY, Server, Session, Tool, ToolError};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc::Receiver;

/// Progress reports a flooding tool sends: well past the capacity.
const FLOOD: usize = 3 * OUTBOUND_CAPACITY;

fn server() -> Server {
    Server::builder()
        .name("backpressure")
        .version("0")
        .tool(Tool::new("flood", |cx, _| async move {
            let p = cx.progress();
            for n in 1..=FLOOD {
                p.report(n as f64, None);
            }
            Ok::<_, ToolError>(CallToolResult::success(vec![Content::text("flooded")]))
        }))
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
    let (session, outbound) = server().session();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "t", "version": "0"}}});
    let r = session.handle_text(&init.to_string()).await.unwrap();
    assert!(r.contains("\"result\""), "{r}");
    (session, outbound)
}

fn call(id: u64, name: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "_meta": {"progressToken": "p"}}})
    .to_string()
}

fn drain(outbound: &mut Receiver<String>) -> Vec<Value> {
    let mut out = Vec::new();
    while let Ok(m) = outbound.try_recv() {
        out.push(serde_json::from_str(&m).unwrap());
    }
    out
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
    assert_eq!(
        session.dropped_notifications(),
        (FLOOD - OUTBOUND_CAPACITY) as u64
    );
    // Read again, the session delivers again.
    session.handle_text(&call(2, "flood")).await.unwrap();
    assert_eq!(drain(&mut outbound).len(), OUTBOUND_CAPACITY);
}

#[tokio::test]
async fn a_response_stream_is_bounded_like_the_session() {
    let (session, _outbound) = server().session();
    let (stream, mut notes) = tokio::sync::mpsc::channel(4);
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "flood",
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": "p",
    }}});
    let Ok(Message::Request(request)) = Message::parse(&request.to_string()) else {
        panic!("not a request");
    };
    let response = session
        .handle_request_on(request, Some(stream))
        .await
        .unwrap();
    assert!(response.outcome.is_ok(), "{:?}", response.outcome);
    assert_eq!(drain(&mut notes).len(), 4);
    assert_eq!(session.dropped_notifications(), (FLOOD - 4) as u64);
}

#[tokio::test(start_paused = true)]
async fn a_question_waits_for_room_and_arrives_once_the_client_reads() {
    let (session, mut outbound) = stateful().await;
    let asking = tokio::spawn({
        let session = session.clone();
        async move { session.handle_text(&call(1, "flood_then_ask")).await }
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!asking.is_finished());
    assert_eq!(session.dropped_notifications(), 10);
    // The client reads: the progress that fitted, then the question, which was not lost.
    let mut progress = 0;
    let question = loop {
        let m: Value = serde_json::from_str(&outbound.recv().await.unwrap()).unwrap();
        if m["method"] == "notifications/progress" {
            progress += 1;
            continue;
        }
        break m;
    };
    assert_eq!(progress, OUTBOUND_CAPACITY);
    assert_eq!(question["method"], "elicitation/create");
    let reply = json!({"jsonrpc": "2.0", "id": question["id"],
                       "result": {"action": "accept", "content": {"name": "Ada"}}});
    assert_eq!(session.handle_text(&reply.to_string()).await, None);
    let r: Value = serde_json::from_str(&asking.await.unwrap().unwrap()).unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "\"Ada\"");
}

#[tokio::test(start_paused = true)]
async fn a_question_waiting_for_room_ends_when_the_session_closes() {
    let (session, _outbound) = stateful().await;
    let asking = tokio::spawn({
        let session = session.clone();
        async move { session.handle_text(&call(1, "flood_then_ask")).await }
    });
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
