//! Tool calls: the era's `tools/call`, the idempotency key a call carries, and the repeats
//! of a call whose answer was lost.
//!
//! A call to a tool that may become a task carries a fresh idempotency key in its `_meta`
//! ([`IDEMPOTENCY_KEY_META`]); a caller may bring its own with
//! [`McpClient::call_tool_with_key`]. With a key, the call is recorded in the handle store
//! before it is sent, and a failure that leaves its outcome unknown (the connection dropped
//! before the answer, the server busy or unsure whether it stored the task) is sent again,
//! the same call with the same key, up to [`CALL_ATTEMPTS`] times in all, after a backoff
//! that doubles from a quarter second (or the server's `retryAfterMs`), plus up to a fifth
//! more. A server that already took the call answers a repeat with the first call's task or
//! result. Once an answer came the record goes; while the outcome stays unknown it stays, for
//! [`McpClient::pending_calls`] to find.

use super::store::{self, Handle, PendingCall, args_digest};
use super::{
    Called, ClientError, Era, MAX_INPUT_ROUNDS, McpClient, Question, TaskEvent, TaskHandle,
    TaskState, ToolOutput,
};
use crate::idempotency::{IDEMPOTENCY_KEY_META, IdempotencyKey};
use crate::sync::LockExt;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// How many times in all a call with an idempotency key is sent before its outcome is left
/// unknown.
pub const CALL_ATTEMPTS: usize = 4;
/// The wait before a call's first repeat; each later one waits twice as long as the one
/// before.
const CALL_RETRY_BASE: Duration = Duration::from_millis(250);
/// The longest wait before a repeat, whatever the server asks.
const CALL_RETRY_MAX: Duration = Duration::from_secs(30);

impl McpClient {
    /// Calls a tool. The server decides (2026-07-28), or the tool's task support does
    /// (2025-11-25: a task whenever the tool allows one), whether it runs as a task.
    ///
    /// A call to a tool that may become a task carries a fresh idempotency key and is sent
    /// again with it when its outcome is unknown (see the [module docs](super)).
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Called, ClientError> {
        self.call_tool_keyed(name, arguments, None, |_| {}).await
    }

    /// [`McpClient::call_tool`], telling `on_event` about the progress the tool reports
    /// while the call is open (a task's own progress comes through its handle).
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Value,
        on_event: impl FnMut(TaskEvent) + Send,
    ) -> Result<Called, ClientError> {
        self.call_tool_keyed(name, arguments, None, on_event).await
    }

    /// [`McpClient::call_tool`] with the caller's own idempotency key, sent whatever the
    /// tool's task support: a call repeated with the key of an earlier one (a
    /// [`PendingCall`] of a client that crashed, say) gets that call's task or result, and
    /// starts nothing new.
    pub async fn call_tool_with_key(
        &self,
        name: &str,
        arguments: Value,
        key: IdempotencyKey,
    ) -> Result<Called, ClientError> {
        self.call_tool_keyed(name, arguments, Some(key), |_| {})
            .await
    }

    /// The call all the others make: with `key`, or without one the client's default (a
    /// fresh key when the tool may become a task), telling `on_event` about the progress
    /// the tool reports while the call is open.
    ///
    /// The call has a span of its own (`tools/call {name}`, kind client) whose trace
    /// context the request carries in its `_meta`, so the server's spans join its trace.
    pub async fn call_tool_keyed(
        &self,
        name: &str,
        arguments: Value,
        key: Option<IdempotencyKey>,
        on_event: impl FnMut(TaskEvent) + Send,
    ) -> Result<Called, ClientError> {
        let call = self.call_tool_in_span(name, arguments, key, on_event);
        spans::traced("tools/call", Some(name), call).await
    }

    async fn call_tool_in_span(
        &self,
        name: &str,
        arguments: Value,
        key: Option<IdempotencyKey>,
        mut on_event: impl FnMut(TaskEvent) + Send,
    ) -> Result<Called, ClientError> {
        let arguments = match arguments {
            Value::Null => json!({}),
            Value::Object(o) => Value::Object(o),
            other => {
                return Err(ClientError::Arguments(format!(
                    "tool arguments must be a JSON object, not {other}"
                )));
            }
        };
        let key = match key {
            Some(key) => Some(key),
            None if self.may_become_task(name).await? => {
                Some(IdempotencyKey::random().map_err(|e| ClientError::Random(e.to_string()))?)
            }
            None => None,
        };
        let server = &self.inner.server_key;
        let store = self.inner.store.as_ref().filter(|_| key.is_some());
        if let (Some(store), Some(key)) = (store, &key) {
            store.begin_call(server, key, name, &arguments)?;
        }
        let called = match self.inner.negotiated.era {
            Era::V2026_07_28 => {
                self.call_2026(name, arguments, key.as_ref(), &mut on_event)
                    .await
            }
            Era::V2025_11_25 => {
                self.call_2025(name, arguments, key.as_ref(), &mut on_event)
                    .await
            }
        };
        if let (Some(store), Some(key)) = (store, &key) {
            match &called {
                Err(e) if outcome_unknown(e) => {
                    tracing::warn!(tool = name, key = %key, error = %e, "the outcome of the call is unknown; repeat it with the same idempotency key");
                }
                _ => {
                    if let Err(e) = store.end_call(server, key) {
                        tracing::warn!(error = %e, "cannot update the handle store");
                    }
                }
            }
        }
        called
    }

    /// The calls to this server whose outcome stayed unknown, from the handle store (none
    /// without one), oldest first: [`McpClient::call_tool_with_key`] repeats one safely.
    pub fn pending_calls(&self) -> Result<Vec<PendingCall>, ClientError> {
        match &self.inner.store {
            Some(store) => Ok(store.pending_calls(Some(&self.inner.server_key))?),
            None => Ok(Vec::new()),
        }
    }

    /// Whether a call to `name` may become a task, so that it gets a key: on 2025-11-25
    /// when the listing says `optional` or `required`; on 2026-07-28, where the server
    /// decides per call, unless the listing (when the client has fetched it) says
    /// `forbidden`. Never on a connection without tasks.
    async fn may_become_task(&self, name: &str) -> Result<bool, ClientError> {
        if !self.inner.negotiated.tasks {
            return Ok(false);
        }
        Ok(match self.inner.negotiated.era {
            Era::V2025_11_25 => matches!(
                self.tool(name).await?.task_support.as_deref(),
                Some("optional" | "required")
            ),
            Era::V2026_07_28 => {
                let listed = self.inner.tools.locked().as_ref().and_then(|tools| {
                    tools
                        .iter()
                        .find(|t| t.name == name)
                        .map(|t| t.task_support.clone())
                });
                listed.flatten().as_deref() != Some("forbidden")
            }
        })
    }

    /// Sends a `tools/call` with a progress token (and `key`, if any) and reports its
    /// progress notifications until the answer comes. With a key, a failure that leaves the
    /// outcome unknown sends the same request again, up to [`CALL_ATTEMPTS`] times in all.
    async fn open_call(
        &self,
        mut params: Value,
        key: Option<&IdempotencyKey>,
        on_event: &mut (impl FnMut(TaskEvent) + Send),
    ) -> Result<(Value, Value), ClientError> {
        let token = json!(format!("call-{}", self.inner.wire.next_id()));
        params["_meta"] = json!({ "progressToken": token });
        if let Some(key) = key {
            params["_meta"][IDEMPOTENCY_KEY_META] = json!(key.as_str());
        }
        let mut notifications = self.inner.wire.notifications();
        let mut report = |n: &Value| {
            if n["method"] == "notifications/progress" && n["params"]["progressToken"] == token {
                on_event(TaskEvent::Progress {
                    progress: n["params"]["progress"].as_f64().unwrap_or(0.0),
                    total: n["params"]["total"].as_f64(),
                    message: n["params"]["message"].as_str().map(str::to_owned),
                });
            }
        };
        let mut attempt = 1;
        let result = loop {
            let answer = self.request("tools/call", params.clone());
            tokio::pin!(answer);
            let result = loop {
                tokio::select! {
                    result = &mut answer => break result,
                    n = notifications.recv() => match n {
                        Ok(n) => report(&n),
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break (&mut answer).await,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    },
                }
            };
            match result {
                Err(e) if key.is_some() && attempt < CALL_ATTEMPTS && self.repeatable(&e) => {
                    let wait = backoff(attempt, retry_after(&e));
                    tracing::info!(attempt, error = %e, wait_ms = wait.as_millis() as u64, "sending the call again with the same idempotency key");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                other => break other,
            }
        };
        // Notifications sent before the answer are already queued: report them too.
        while let Ok(n) = notifications.try_recv() {
            report(&n);
        }
        Ok((result?, token))
    }

    /// Whether a call that failed with `e` is worth sending again: its outcome is unknown,
    /// and the connection can carry it (a closed stdio connection stays closed).
    fn repeatable(&self, e: &ClientError) -> bool {
        outcome_unknown(e) && (!matches!(e, ClientError::Closed(_)) || self.inner.wire.reconnects())
    }

    async fn call_2026(
        &self,
        name: &str,
        arguments: Value,
        key: Option<&IdempotencyKey>,
        on_event: &mut (impl FnMut(TaskEvent) + Send),
    ) -> Result<Called, ClientError> {
        let mut params = json!({"name": name, "arguments": arguments});
        for _ in 0..MAX_INPUT_ROUNDS {
            let (result, _) = self.open_call(params.clone(), key, on_event).await?;
            match result["resultType"].as_str() {
                Some("task") => {
                    let handle = self.created(&result, name, &arguments)?;
                    return Ok(Called::Task(handle));
                }
                Some("input_required") => {
                    let mut responses = Map::new();
                    for (key, request) in result["inputRequests"].as_object().into_iter().flatten()
                    {
                        let question = Question {
                            method: request["method"].as_str().unwrap_or_default().to_owned(),
                            params: request.get("params").cloned().unwrap_or_default(),
                            task_id: None,
                        };
                        responses.insert(key.clone(), self.ask(&question, None).await?);
                    }
                    params["inputResponses"] = Value::Object(responses);
                    match result.get("requestState") {
                        Some(state) => params["requestState"] = state.clone(),
                        None => {
                            params
                                .as_object_mut()
                                .expect("object")
                                .remove("requestState");
                        }
                    }
                }
                _ => return Ok(Called::Done(ToolOutput::from_value(result)?)),
            }
        }
        Err(ClientError::Protocol(format!(
            "tool `{name}` asked for input more than {MAX_INPUT_ROUNDS} times"
        )))
    }

    async fn call_2025(
        &self,
        name: &str,
        arguments: Value,
        key: Option<&IdempotencyKey>,
        on_event: &mut (impl FnMut(TaskEvent) + Send),
    ) -> Result<Called, ClientError> {
        let support = self.tool(name).await?.task_support;
        let as_task = match (self.inner.negotiated.tasks, support.as_deref()) {
            (true, Some("optional" | "required")) => true,
            (false, Some("required")) => return Err(ClientError::ToolRequiresTasks(name.into())),
            _ => false,
        };
        let mut params = json!({"name": name, "arguments": arguments});
        if as_task {
            params["task"] = json!({});
        }
        let (result, token) = self.open_call(params, key, on_event).await?;
        match result.get("task") {
            Some(task) if as_task => {
                let mut handle = self.created(task, name, &arguments)?;
                handle.progress_token = Some(token);
                Ok(Called::Task(handle))
            }
            _ => Ok(Called::Done(ToolOutput::from_value(result)?)),
        }
    }

    /// Makes the handle of a task the server just created, and records it first of all.
    fn created(
        &self,
        task: &Value,
        tool: &str,
        arguments: &Value,
    ) -> Result<TaskHandle, ClientError> {
        let state = TaskState::from_value(task)?;
        if let Some(store) = &self.inner.store {
            store.record(&Handle {
                server: self.inner.server_key.clone(),
                era: self.inner.negotiated.era,
                task_id: state.task_id.clone(),
                tool: tool.to_owned(),
                args_digest: args_digest(tool, arguments),
                created_at_ms: store::now_ms(),
                status: state.status.clone(),
                finished: state.is_terminal(),
            })?;
        }
        Ok(TaskHandle::new(self.clone(), state, Some(tool.to_owned())))
    }
}

/// Whether a call that failed with `e` may or may not have been taken by the server: the
/// connection failed or dropped before the answer, the server answered HTTP 429, 502, 503
/// or 504 or JSON-RPC `-32000` (busy, try later), or its error says the outcome is unknown.
pub(crate) fn outcome_unknown(e: &ClientError) -> bool {
    match e {
        ClientError::Connect { .. } | ClientError::Closed(_) => true,
        ClientError::Http { status, .. } => matches!(status, 429 | 502 | 503 | 504),
        ClientError::Rpc { code, message, .. } => {
            *code == crate::jsonrpc::SERVER_BUSY || says_unknown(message)
        }
        _ => false,
    }
}

/// Whether an error message says the server cannot tell what became of the call.
fn says_unknown(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "outcome is unknown",
        "unknown outcome",
        "outcome unknown",
        "cannot tell whether",
        "retry with the same key",
        "same idempotency key",
    ]
    .iter()
    .any(|phrase| message.contains(phrase))
}

/// The wait the server asked for: a busy error's `data.retryAfterMs`, or the `Retry-After`
/// header of an HTTP answer without a JSON-RPC message.
pub(super) fn retry_after(e: &ClientError) -> Option<Duration> {
    match e {
        ClientError::Rpc { data: Some(d), .. } => {
            d["retryAfterMs"].as_u64().map(Duration::from_millis)
        }
        ClientError::Http { retry_after, .. } => *retry_after,
        _ => None,
    }
}

/// The wait before sending a call again after its `attempt`-th send failed: what the server
/// asked for, else a quarter second doubled for each send before, at most
/// [`CALL_RETRY_MAX`], plus up to a fifth more.
fn backoff(attempt: usize, asked: Option<Duration>) -> Duration {
    let doubled = CALL_RETRY_BASE.saturating_mul(1 << attempt.saturating_sub(1).min(16));
    let base = asked.unwrap_or(doubled).min(CALL_RETRY_MAX);
    base + base.mul_f64(f64::from(getrandom::u32().unwrap_or(0) % 1000) / 5000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_outcomes_are_told_from_answers() {
        let rpc = |code: i32, message: &str| ClientError::Rpc {
            method: "tools/call".into(),
            code,
            message: message.into(),
            data: None,
        };
        let http = |status: u16| ClientError::Http {
            url: "http://x/mcp".into(),
            status,
            body: String::new(),
            retry_after: None,
        };
        for unknown in [
            ClientError::Closed(String::new()),
            ClientError::Connect {
                url: "http://x/mcp".into(),
                reason: "connection reset".into(),
            },
            http(429),
            http(502),
            http(503),
            http(504),
            rpc(-32000, "server busy"),
            rpc(-32603, "the outcome is unknown: retry with the same key"),
            rpc(-32603, "Cannot tell whether task t was created"),
        ] {
            assert!(outcome_unknown(&unknown), "{unknown}");
        }
        for known in [
            http(400),
            http(500),
            rpc(-32602, "another call has this key"),
            rpc(-32603, "the tool panicked"),
            ClientError::UnknownTool("t".into()),
        ] {
            assert!(!outcome_unknown(&known), "{known}");
        }
    }

    #[test]
    fn the_wait_asked_for_comes_from_the_error_data_or_the_retry_after_header() {
        let busy = ClientError::Rpc {
            method: "tools/call".into(),
            code: -32000,
            message: "draining".into(),
            data: Some(serde_json::json!({"retryAfterMs": 1500})),
        };
        assert_eq!(retry_after(&busy), Some(Duration::from_millis(1500)));
        let balancer = ClientError::Http {
            url: "http://x/mcp".into(),
            status: 503,
            body: "no healthy upstream".into(),
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(retry_after(&balancer), Some(Duration::from_secs(3)));
        let asked = backoff(1, retry_after(&balancer));
        assert!(asked >= Duration::from_secs(3) && asked <= Duration::from_millis(3600));
        assert_eq!(retry_after(&ClientError::Closed(String::new())), None);
    }

    #[test]
    fn backoff_doubles_from_a_quarter_second_or_waits_as_asked() {
        for (attempt, ms) in [(1, 250), (2, 500), (3, 1000), (60, 30_000)] {
            let wait = backoff(attempt, None);
            let base = Duration::from_millis(ms);
            assert!(
                wait >= base && wait <= base + base / 5,
                "{attempt}: {wait:?}"
            );
        }
        let asked = backoff(1, Some(Duration::from_millis(40)));
        assert!(asked >= Duration::from_millis(40) && asked <= Duration::from_millis(48));
        assert!(backoff(1, Some(Duration::from_secs(600))) <= CALL_RETRY_MAX * 6 / 5);
    }
}

/// The spans of the requests the client sends.
pub(super) mod spans {
    use tracing::field::Empty;

    /// The span of a request the client sends: `{method} {target}`, kind client.
    fn span(method: &str, target: Option<&str>) -> tracing::Span {
        let span = tracing::info_span!(
            "call",
            otel.name = Empty,
            otel.kind = "client",
            otel.status_code = Empty,
            mcp.method.name = method,
            gen_ai.tool.name = target.filter(|_| method == "tools/call"),
            gen_ai.operation.name = target.filter(|_| method == "tools/call").map(|_| "execute_tool"),
            error.type = Empty,
        );
        if !span.is_disabled() {
            match target {
                Some(target) => span.record("otel.name", format!("{method} {target}")),
                None => span.record("otel.name", method),
            };
        }
        span
    }

    /// Runs `request` in the span of `method` on `target`, and records there whether it
    /// failed.
    pub(in crate::client) async fn traced<T>(
        method: &str,
        target: Option<&str>,
        request: impl Future<Output = Result<T, super::ClientError>>,
    ) -> Result<T, super::ClientError> {
        let span = span(method, target);
        let answer = tracing::Instrument::instrument(request, span.clone()).await;
        if let Err(e) = &answer {
            failed(&span, e);
        }
        answer
    }

    /// Records on a client span that its request failed.
    fn failed(span: &tracing::Span, error: &super::ClientError) {
        span.record("otel.status_code", "error");
        let kind = match error {
            super::ClientError::Rpc { code, .. } => code.to_string(),
            _ => "client_error".to_owned(),
        };
        span.record("error.type", kind);
    }
}
