//! What the runtime's integration tests share: a client of an in-process session in either
//! protocol era, the request metadata of 2026-07-28, and small helpers for tools and replies.
//!
//! Each test binary includes this module with `mod support;` and uses a part of it.
#![allow(dead_code)]

use mcp_tasks_runtime::model::{CallToolResult, Content};
use mcp_tasks_runtime::{Server, Session, Tool, ToolError};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc::Receiver;

/// The stateful era's version.
pub const STATEFUL: &str = "2025-11-25";

/// The stateless era's version.
pub const STATELESS: &str = "2026-07-28";

/// A text result.
pub fn text(s: impl Into<String>) -> Result<CallToolResult, ToolError> {
    Ok(CallToolResult::success(vec![Content::text(s)]))
}

/// The `_meta` a 2026-07-28 request carries, declaring `caps`.
pub fn meta(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// Client capabilities with elicitation and the tasks extension (2026-07-28).
pub fn tasks_caps() -> Value {
    json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// The error code of a JSON-RPC error response.
pub fn code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {response}"))
}

/// Sends one request with this `id` on `session` and parses its response.
pub async fn request(session: &Session, id: u64, method: &str, params: Value) -> Value {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let reply = session
        .handle_text(&msg.to_string())
        .await
        .expect("a response");
    serde_json::from_str(&reply).unwrap()
}

/// A tool that asks one question (a `field` of JSON type `kind`) and answers
/// `"{prefix}{value}"` with the value given.
pub fn asking_tool(
    name: &str,
    question: &'static str,
    field: &'static str,
    kind: &'static str,
    prefix: &'static str,
) -> Tool {
    Tool::new(name, move |cx, _| async move {
        let answer = cx
            .client()
            .elicit(
                question,
                json!({"type": "object", "properties": {field: {"type": kind}}}),
            )
            .await?;
        text(format!(
            "{prefix}{}",
            answer.content.unwrap_or_default()[field]
        ))
    })
}

/// Polls `done` every 10 ms until it holds, for at most ten seconds.
pub async fn eventually(mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..1000 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the condition never held");
}

/// A client of one in-process session: numbers its requests and, in the stateless era, adds
/// the request metadata to each.
pub struct Client {
    /// The session.
    pub session: Session,
    /// What the server sends outside responses.
    pub outbound: Receiver<String>,
    next: i64,
    meta: Option<Value>,
}

impl Client {
    /// A session on which nothing was sent yet.
    pub fn new(server: &Server) -> Self {
        let (session, outbound) = server.session();
        Self {
            session,
            outbound,
            next: 0,
            meta: None,
        }
    }

    /// A session of `principal` on which nothing was sent yet.
    pub fn new_as(server: &Server, principal: &str) -> Self {
        let (session, outbound) = server.session_for(Some(principal.to_owned()));
        Self {
            session,
            outbound,
            next: 0,
            meta: None,
        }
    }

    /// A 2026-07-28 client declaring `caps`.
    pub fn stateless(server: &Server, caps: Value) -> Self {
        Self::stateless_as(server, None, caps)
    }

    /// A 2026-07-28 client of `principal` declaring `caps`.
    pub fn stateless_as(server: &Server, principal: Option<&str>, caps: Value) -> Self {
        let (session, outbound) = server.session_for(principal.map(str::to_owned));
        Self {
            session,
            outbound,
            next: 0,
            meta: Some(meta(caps)),
        }
    }

    /// A 2025-11-25 client with elicitation, initialized; also the `initialize` response.
    pub async fn stateful(server: &Server) -> (Self, Value) {
        let mut c = Self::new(server);
        let r = c
            .request(
                "initialize",
                json!({"protocolVersion": STATEFUL, "capabilities": {"elicitation": {}},
                       "clientInfo": {"name": "t", "version": "0"}}),
            )
            .await;
        assert_eq!(r["result"]["protocolVersion"], STATEFUL, "{r}");
        c.raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        (c, r)
    }

    /// Sends a raw message; the response, if any.
    pub async fn raw(&self, text: &str) -> Option<Value> {
        self.session
            .handle_text(text)
            .await
            .map(|t| serde_json::from_str(&t).unwrap())
    }

    /// The next request as text, with its id; the stateless metadata merged into `_meta`
    /// (keys already there win).
    pub fn message(&mut self, method: &str, mut params: Value) -> (i64, String) {
        self.next += 1;
        if let Some(meta) = &self.meta {
            let m = params
                .as_object_mut()
                .expect("params are an object")
                .entry("_meta")
                .or_insert(json!({}));
            for (k, v) in meta.as_object().unwrap() {
                m.as_object_mut()
                    .unwrap()
                    .entry(k.clone())
                    .or_insert(v.clone());
            }
        }
        let msg = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        (self.next, msg.to_string())
    }

    /// Sends a request and returns its response, checking that it answers this request.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let (id, msg) = self.message(method, params);
        let response = self.raw(&msg).await.expect("a response");
        assert_eq!(response["id"], json!(id), "{response}");
        response
    }

    /// `tools/call` of `name` with `arguments`.
    pub async fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// `tools/call` of `name` with no arguments, `params` added to (or replacing) the call's
    /// (`arguments`, `requestState`, `inputResponses`, `task` …).
    pub async fn call_with(&mut self, name: &str, params: Value) -> Value {
        let mut all = json!({"name": name, "arguments": {}});
        all.as_object_mut()
            .unwrap()
            .extend(params.as_object().expect("params are an object").clone());
        self.request("tools/call", all).await
    }

    /// `tasks/get` of task `id`.
    pub async fn get(&mut self, id: &str) -> Value {
        self.request("tasks/get", json!({"taskId": id})).await
    }

    /// Polls `tasks/get` every 100 ms (of paused or real time) until the status is one of
    /// `want`, at most 200 times.
    pub async fn poll_until(&mut self, id: &str, want: &[&str]) -> Value {
        for _ in 0..200 {
            let r = self.get(id).await;
            let status = r["result"]["status"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}"));
            if want.contains(&status) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("task {id} never reached {want:?}");
    }

    /// The next message the server sends outside responses, waiting at most ten seconds.
    pub async fn next_outbound(&mut self) -> Value {
        let text = tokio::time::timeout(Duration::from_secs(10), self.outbound.recv())
            .await
            .expect("a message within ten seconds")
            .expect("the session is open");
        serde_json::from_str(&text).unwrap()
    }

    /// What the server has sent outside responses so far.
    pub fn drain(&mut self) -> Vec<Value> {
        drain(&mut self.outbound)
    }
}

/// What `outbound` holds now, read as JSON.
pub fn drain(outbound: &mut Receiver<String>) -> Vec<Value> {
    let mut out = Vec::new();
    while let Ok(m) = outbound.try_recv() {
        out.push(serde_json::from_str(&m).unwrap());
    }
    out
}
