//! Task handles: watching a task to its end in either era.
//!
//! 2026-07-28: `tasks/get` until the task is terminal, reading the result or error inline and
//! answering `inputRequests` with `tasks/update`, and listening for the task's
//! `notifications/tasks` (`subscriptions/listen`) where the server has them. 2025-11-25: `tasks/get` until terminal,
//! then `tasks/result` for the payload; on `input_required`, `tasks/result` at once, so the
//! server can ask its questions, which the client's handler answers as they come. In both,
//! the wait between polls is the server's latest interval plus up to a fifth more, never past
//! the caller's deadline; status notifications cut a wait short (and, once subscribed, the
//! polls that remain as a safety net come less often).

use super::{ClientError, Era, McpClient, Question};
use crate::model::CallToolResult;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

/// How long to wait between polls when the server gives no interval.
const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// How much longer the waits between polls get while status notifications come.
const SUBSCRIBED_SLOWDOWN: u32 = 5;
/// The `_meta` key that ties a notification to its `subscriptions/listen` request.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The shortest wait between polls, whatever the server says.
const MIN_POLL: Duration = Duration::from_millis(10);

/// A tool's result, with the JSON it came in.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    /// The result.
    pub result: CallToolResult,
    /// The result as the server sent it (with `_meta` and any extra fields).
    pub raw: Value,
}

impl ToolOutput {
    /// Reads a `CallToolResult`.
    pub fn from_value(raw: Value) -> Result<Self, ClientError> {
        let result = serde_json::from_value(raw.clone())
            .map_err(|e| ClientError::Protocol(format!("not a CallToolResult ({e}): {raw}")))?;
        Ok(Self { result, raw })
    }

    /// The text blocks, one per line.
    pub fn text(&self) -> String {
        self.raw["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `true` when the tool reported an error (`isError`).
    pub fn is_error(&self) -> bool {
        self.result.is_error
    }
}

/// A task's status as the server last reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskState {
    /// The task id.
    pub task_id: String,
    /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// The status message, if any.
    pub status_message: Option<String>,
    /// The suggested wait between polls.
    pub poll_interval: Option<Duration>,
    /// The retention from creation; `None` when unlimited or not said.
    pub ttl: Option<Duration>,
    /// The task's JSON as the server sent it.
    pub raw: Value,
}

impl TaskState {
    /// Reads a task of either era (`ttl`/`pollInterval` or `ttlMs`/`pollIntervalMs`).
    pub fn from_value(task: &Value) -> Result<Self, ClientError> {
        let task_id = task["taskId"]
            .as_str()
            .ok_or_else(|| ClientError::Protocol(format!("a task without a taskId: {task}")))?;
        let ms = |a: &str, b: &str| {
            task.get(a)
                .or_else(|| task.get(b))
                .and_then(Value::as_u64)
                .map(Duration::from_millis)
        };
        Ok(Self {
            task_id: task_id.to_owned(),
            status: task["status"].as_str().unwrap_or("working").to_owned(),
            status_message: task["statusMessage"].as_str().map(str::to_owned),
            poll_interval: ms("pollIntervalMs", "pollInterval"),
            ttl: ms("ttlMs", "ttl"),
            raw: task.clone(),
        })
    }

    /// `true` for `completed`, `failed` and `cancelled`.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled")
    }
}

/// Something that happened while waiting.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TaskEvent {
    /// The status or its message changed.
    Status {
        /// The status.
        status: String,
        /// The status message.
        message: Option<String>,
    },
    /// Progress: a progress notification in 2025-11-25; in 2026-07-28, which has no
    /// progress for tasks, a status message that starts with `done/total` (as the server
    /// writes a task's progress, `3/10` or `3/10 files`; the message itself comes with the
    /// [`TaskEvent::Status`] before it).
    Progress {
        /// Work done.
        progress: f64,
        /// Work in all, if known.
        total: Option<f64>,
        /// What is being done.
        message: Option<String>,
    },
    /// The task asks a question (2026-07-28; in 2025-11-25 questions go to the handler
    /// directly).
    Question(Question),
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskOutcome {
    /// The tool answered (its result may still be a tool error, `is_error`).
    Completed(ToolOutput),
    /// The task failed with a JSON-RPC error.
    Failed {
        /// The error code.
        code: i64,
        /// The error message.
        message: String,
        /// The error's data, if any (for `-32021`, the `requiredCapabilities`).
        data: Option<Value>,
    },
    /// The task was cancelled.
    Cancelled,
}

/// A task on the server: wait for it, watch it, cancel it.
#[derive(Clone, Debug)]
pub struct TaskHandle {
    client: McpClient,
    id: String,
    pub(crate) tool: Option<String>,
    poll: Option<Duration>,
    pub(crate) progress_token: Option<Value>,
    /// Just created: the first poll waits the creation's interval.
    fresh: bool,
}

/// A request kept in flight while a watch awaits other things (a `tasks/result` that waits
/// for the end of the task, a `subscriptions/listen` stream). It runs as a task of its own, so
/// it goes on reading its stream and releases what it holds (the token store's lock, say)
/// without being polled by the watch, which may meanwhile wait for the same things; it is
/// aborted when dropped.
struct InFlight(AbortOnDropHandle<Result<Value, ClientError>>);

impl InFlight {
    fn spawn(request: impl Future<Output = Result<Value, ClientError>> + Send + 'static) -> Self {
        Self(AbortOnDropHandle::new(tokio::spawn(request)))
    }
}

impl Future for InFlight {
    type Output = Result<Value, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|joined| {
            joined.unwrap_or_else(|e| {
                Err(ClientError::Closed(format!(
                    ": the request in flight ended early ({e})"
                )))
            })
        })
    }
}

impl TaskHandle {
    pub(crate) fn new(client: McpClient, state: TaskState, tool: Option<String>) -> Self {
        Self {
            client,
            id: state.task_id,
            tool,
            poll: state.poll_interval,
            progress_token: None,
            fresh: true,
        }
    }

    pub(crate) fn known(client: McpClient, id: String) -> Self {
        Self {
            client,
            id,
            tool: None,
            poll: None,
            progress_token: None,
            fresh: false,
        }
    }

    /// The task id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The tool that made the task, when known.
    pub fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }

    /// The poll interval the server last suggested.
    pub fn poll_interval(&self) -> Option<Duration> {
        self.poll
    }

    /// Reads the task's status once (`tasks/get`).
    pub async fn status(&self) -> Result<TaskState, ClientError> {
        let r = self
            .client
            .request("tasks/get", json!({"taskId": self.id}))
            .await
            .map_err(|e| self.not_found(e))?;
        TaskState::from_value(&r)
    }

    /// One `tasks/get` while watching: a busy or rate-limited answer (`-32000`, HTTP 429 or
    /// 503) means "later", so it is asked again after the server's `retryAfterMs` (or the
    /// poll interval), until the deadline.
    async fn poll_once(
        &self,
        poll: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Value, ClientError> {
        loop {
            match self
                .client
                .request("tasks/get", json!({"taskId": self.id}))
                .await
            {
                Ok(r) => return Ok(r),
                Err(e @ ClientError::Rpc { code, .. }) if code == crate::jsonrpc::SERVER_BUSY => {
                    let after = super::call::retry_after(&e);
                    sleep_until_next(after.or(poll), deadline, &self.id).await?;
                }
                Err(
                    e @ ClientError::Http {
                        status: 429 | 503, ..
                    },
                ) => {
                    let after = super::call::retry_after(&e);
                    sleep_until_next(after.or(poll), deadline, &self.id).await?;
                }
                Err(e) => return Err(self.not_found(e)),
            }
        }
    }

    /// Asks the server to cancel the task. In 2026-07-28 the cancel is cooperative: keep
    /// waiting to see how the task really ended.
    pub async fn cancel(&self) -> Result<(), ClientError> {
        self.client
            .request("tasks/cancel", json!({"taskId": self.id}))
            .await
            .map_err(|e| self.not_found(e))?;
        Ok(())
    }

    /// Waits for the task to end, until `deadline` at most.
    pub async fn wait(&self, deadline: Option<Instant>) -> Result<TaskOutcome, ClientError> {
        self.watch(deadline, |_| {}).await
    }

    /// [`TaskHandle::wait`], telling `on_event` about status changes, progress and questions.
    pub async fn watch(
        &self,
        deadline: Option<Instant>,
        mut on_event: impl FnMut(TaskEvent) + Send,
    ) -> Result<TaskOutcome, ClientError> {
        let outcome = match self.client.negotiated().era {
            Era::V2026_07_28 => self.watch_2026(deadline, &mut on_event).await,
            Era::V2025_11_25 => self.watch_2025(deadline, &mut on_event).await,
        };
        match &outcome {
            Ok(o) => {
                let status = match o {
                    TaskOutcome::Completed(_) => "completed",
                    TaskOutcome::Failed { .. } => "failed",
                    TaskOutcome::Cancelled => "cancelled",
                };
                self.client.note(&self.id, status, true);
            }
            Err(ClientError::TaskNotFound(_)) => self.client.note(&self.id, "expired", true),
            Err(_) => {}
        }
        outcome
    }

    async fn watch_2026(
        &self,
        deadline: Option<Instant>,
        on_event: &mut (impl FnMut(TaskEvent) + Send),
    ) -> Result<TaskOutcome, ClientError> {
        let mut answered = HashSet::new();
        let mut seen: Option<(String, Option<String>)> = None;
        let mut poll = self.poll;
        // Status notifications through `subscriptions/listen` where the server has them; the
        // polls go on, less often once the server acknowledged the subscription.
        let mut notifications = self.client.wire().notifications();
        let listen_id = self.client.wire().next_id();
        let mut listen = Some(InFlight::spawn(self.client.request_as(
            listen_id.clone(),
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [self.id]}}),
        )));
        let _stop = StopListening(self.client.clone(), listen_id.clone());
        let mut subscribed = false;
        // A task just created is polled after its interval, not at once.
        let mut notified = None;
        if self.fresh {
            notified = self
                .wait_2026(
                    poll,
                    deadline,
                    &mut listen,
                    &listen_id,
                    &mut subscribed,
                    &mut notifications,
                )
                .await?;
        }
        loop {
            let r = match notified.take() {
                Some(task) => task,
                None => self.poll_once(poll, deadline).await?,
            };
            let state = TaskState::from_value(&r)?;
            poll = state.poll_interval.or(poll);
            let before = seen.as_ref().and_then(|s| s.1.clone());
            self.report(&state, &mut seen, on_event);
            if let Some(message) = &state.status_message
                && before.as_ref() != Some(message)
                && state.status == "working"
                && let Some((progress, total)) = progress_in(message)
            {
                on_event(TaskEvent::Progress {
                    progress,
                    total: Some(total),
                    message: None,
                });
            }
            match state.status.as_str() {
                "completed" => {
                    return Ok(TaskOutcome::Completed(ToolOutput::from_value(
                        r.get("result").cloned().unwrap_or_default(),
                    )?));
                }
                "failed" => return Ok(failed(&r["error"], &state)),
                "cancelled" => return Ok(TaskOutcome::Cancelled),
                "input_required" => {
                    let mut responses = serde_json::Map::new();
                    for (key, request) in r["inputRequests"].as_object().into_iter().flatten() {
                        if answered.contains(key) {
                            continue;
                        }
                        let question = Question {
                            method: request["method"].as_str().unwrap_or_default().to_owned(),
                            params: request.get("params").cloned().unwrap_or_default(),
                            task_id: Some(self.id.clone()),
                        };
                        on_event(TaskEvent::Question(question.clone()));
                        let answer = self.client.ask(&question, Some(&self.id)).await?;
                        responses.insert(key.clone(), answer);
                    }
                    if !responses.is_empty() {
                        answered.extend(responses.keys().cloned());
                        self.client
                            .request(
                                "tasks/update",
                                json!({"taskId": self.id, "inputResponses": responses}),
                            )
                            .await
                            .map_err(|e| self.not_found(e))?;
                    }
                }
                _ => {}
            }
            notified = self
                .wait_2026(
                    poll,
                    deadline,
                    &mut listen,
                    &listen_id,
                    &mut subscribed,
                    &mut notifications,
                )
                .await?;
        }
    }

    /// Waits for the next poll: `None` after the interval, or the task as a status
    /// notification brought it (what `tasks/get` would have answered).
    async fn wait_2026(
        &self,
        poll: Option<Duration>,
        deadline: Option<Instant>,
        listen: &mut Option<InFlight>,
        listen_id: &Value,
        subscribed: &mut bool,
        notifications: &mut tokio::sync::broadcast::Receiver<Value>,
    ) -> Result<Option<Value>, ClientError> {
        let interval = poll.map(|p| {
            if *subscribed {
                p * SUBSCRIBED_SLOWDOWN
            } else {
                p
            }
        });
        let sleep = tokio::time::sleep(next_wait(interval, deadline, &self.id)?);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => return Ok(None),
                _ = async { listen.as_mut().expect("guarded").await }, if listen.is_some() => {
                    // The subscription ended or is not offered: polling alone from now on.
                    *listen = None;
                    if std::mem::take(subscribed) {
                        return Ok(None);
                    }
                }
                n = notifications.recv() => match n {
                    Ok(n) => {
                        let params = &n["params"];
                        let ours = params["_meta"][SUBSCRIPTION_ID] == *listen_id;
                        match n["method"].as_str() {
                            Some("notifications/subscriptions/acknowledged") if ours => {
                                *subscribed = params["notifications"]["taskIds"]
                                    .as_array()
                                    .is_some_and(|ids| ids.iter().any(|i| i == self.id.as_str()));
                            }
                            Some("notifications/tasks")
                                if ours && params["taskId"] == self.id.as_str() =>
                            {
                                return Ok(Some(params.clone()));
                            }
                            _ => {}
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return Ok(None),
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        sleep.as_mut().await;
                        return Ok(None);
                    }
                },
            }
        }
    }

    async fn watch_2025(
        &self,
        deadline: Option<Instant>,
        on_event: &mut (impl FnMut(TaskEvent) + Send),
    ) -> Result<TaskOutcome, ClientError> {
        let mut notifications = self.client.wire().notifications();
        let mut seen: Option<(String, Option<String>)> = None;
        let mut poll = self.poll;
        let mut payload: Option<InFlight> = None;
        if self.fresh {
            sleep_until_next(poll, deadline, &self.id).await?;
        }
        loop {
            let state = TaskState::from_value(&self.poll_once(poll, deadline).await?)?;
            poll = state.poll_interval.or(poll);
            self.report(&state, &mut seen, on_event);
            if state.status == "cancelled" {
                return Ok(TaskOutcome::Cancelled);
            }
            if state.is_terminal() {
                let result = match payload.take() {
                    Some(p) => p.await,
                    None => self.payload().await,
                };
                return self.finish(result, &state);
            }
            if state.status == "input_required" && payload.is_none() {
                if !self.client.has_handler() {
                    return Err(ClientError::InputNeeded {
                        task: self.id.clone(),
                        method: "a question".into(),
                    });
                }
                payload = Some(InFlight::spawn(self.payload()));
            }
            let wait = next_wait(poll, deadline, &self.id)?;
            let sleep = tokio::time::sleep(wait);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    () = &mut sleep => break,
                    result = async { payload.as_mut().expect("guarded").await }, if payload.is_some() => {
                        let state = self.status().await?;
                        self.report(&state, &mut seen, on_event);
                        if state.status == "cancelled" {
                            return Ok(TaskOutcome::Cancelled);
                        }
                        return self.finish(result, &state);
                    }
                    n = notifications.recv() => match n {
                        Ok(n) => match n["method"].as_str() {
                            Some("notifications/tasks/status") if n["params"]["taskId"] == self.id.as_str() => break,
                            Some("notifications/progress")
                                if self.progress_token.is_some()
                                    && n["params"]["progressToken"] == *self.progress_token.as_ref().expect("some") =>
                            {
                                on_event(TaskEvent::Progress {
                                    progress: n["params"]["progress"].as_f64().unwrap_or(0.0),
                                    total: n["params"]["total"].as_f64(),
                                    message: n["params"]["message"].as_str().map(str::to_owned),
                                });
                            }
                            _ => {}
                        },
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                            sleep.as_mut().await;
                            break;
                        }
                    },
                }
            }
        }
    }

    /// `tasks/result`, as a future that owns what it needs.
    fn payload(&self) -> impl Future<Output = Result<Value, ClientError>> + Send + 'static {
        let client = self.client.clone();
        let id = self.id.clone();
        async move {
            client
                .request("tasks/result", json!({ "taskId": id }))
                .await
        }
    }

    fn finish(
        &self,
        payload: Result<Value, ClientError>,
        state: &TaskState,
    ) -> Result<TaskOutcome, ClientError> {
        match payload {
            Ok(v) => Ok(TaskOutcome::Completed(ToolOutput::from_value(v)?)),
            Err(ClientError::Rpc {
                code,
                message,
                data,
                ..
            }) if state.status == "failed" => Ok(TaskOutcome::Failed {
                code: code.into(),
                message,
                data,
            }),
            // The task failed for want of a capability (the error was read as the request's
            // own): the same outcome as in 2026-07-28.
            Err(ClientError::MissingCapability { required, .. }) if state.status == "failed" => {
                Ok(TaskOutcome::Failed {
                    code: crate::jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY.into(),
                    message: state
                        .status_message
                        .clone()
                        .unwrap_or_else(|| "missing required client capability".into()),
                    data: Some(json!({ "requiredCapabilities": required })),
                })
            }
            Err(e) => Err(self.not_found(e)),
        }
    }

    fn report(
        &self,
        state: &TaskState,
        seen: &mut Option<(String, Option<String>)>,
        on_event: &mut (impl FnMut(TaskEvent) + Send),
    ) {
        let now = (state.status.clone(), state.status_message.clone());
        if seen.as_ref() != Some(&now) {
            if seen.as_ref().map(|s| &s.0) != Some(&now.0) {
                self.client
                    .note(&self.id, &state.status, state.is_terminal());
            }
            on_event(TaskEvent::Status {
                status: now.0.clone(),
                message: now.1.clone(),
            });
            *seen = Some(now);
        }
    }

    fn not_found(&self, e: ClientError) -> ClientError {
        match e {
            ClientError::Rpc { code, .. } if code == crate::jsonrpc::INVALID_PARAMS => {
                ClientError::TaskNotFound(self.id.clone())
            }
            other => other,
        }
    }
}

/// Ends a `subscriptions/listen` request when the watch that made it ends.
struct StopListening(McpClient, Value);

impl Drop for StopListening {
    fn drop(&mut self) {
        let client = self.0.clone();
        let id = self.1.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = client
                    .wire()
                    .notify("notifications/cancelled", json!({ "requestId": id }))
                    .await;
            });
        }
    }
}

fn failed(error: &Value, state: &TaskState) -> TaskOutcome {
    TaskOutcome::Failed {
        code: error["code"]
            .as_i64()
            .unwrap_or(crate::jsonrpc::INTERNAL_ERROR.into()),
        message: error["message"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| state.status_message.clone())
            .unwrap_or_else(|| "the task failed".into()),
        data: error.get("data").filter(|d| !d.is_null()).cloned(),
    }
}

/// The progress a status message starts with, `done/total` (`3/10`, `2.5/4 MB`): how
/// the server words a task's progress where the era carries no progress for tasks.
fn progress_in(message: &str) -> Option<(f64, f64)> {
    fn number(s: &str) -> Option<(f64, &str)> {
        let end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let n = s[..end].parse::<f64>().ok()?;
        Some((n, &s[end..]))
    }
    let (done, rest) = number(message.trim_start())?;
    let (total, rest) = number(rest.strip_prefix('/')?)?;
    let ends = rest.chars().next().is_none_or(|c| !c.is_alphanumeric());
    (ends && total > 0.0 && done <= total).then_some((done, total))
}

/// The wait before the next poll: the interval plus up to 20 % jitter, cut at the deadline.
fn next_wait(
    poll: Option<Duration>,
    deadline: Option<Instant>,
    id: &str,
) -> Result<Duration, ClientError> {
    let base = poll.unwrap_or(DEFAULT_POLL).max(MIN_POLL);
    let jitter = base.mul_f64(f64::from(getrandom::u32().unwrap_or(0) % 1000) / 5000.0);
    let wait = base + jitter;
    match deadline {
        None => Ok(wait),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                Err(ClientError::Deadline(id.to_owned()))
            } else {
                Ok(wait.min(left))
            }
        }
    }
}

async fn sleep_until_next(
    poll: Option<Duration>,
    deadline: Option<Instant>,
    id: &str,
) -> Result<(), ClientError> {
    tokio::time::sleep(next_wait(poll, deadline, id)?).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A request kept in flight that took a lock and then waits finishes and lets the lock
    /// go while the watch itself waits for that lock (a request left half-polled in the
    /// watch would hold it for ever).
    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_goes_on_while_the_watch_waits_for_what_it_holds() {
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        let (go, gone) = tokio::sync::oneshot::channel::<()>();
        let held = lock.clone();
        let mut in_flight = InFlight::spawn(async move {
            let _held = held.lock().await;
            let _ = gone.await;
            Ok(json!("answered"))
        });
        // Polled once by the watch, as a `select!` does: the request takes the lock and waits.
        std::future::poll_fn(|cx| {
            let _ = Pin::new(&mut in_flight).poll(cx);
            Poll::Ready(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(lock.try_lock().is_err(), "the request holds the lock");
        // What it waits for comes while the watch waits for the lock, not polling it.
        go.send(()).unwrap();
        let taken = tokio::time::timeout(Duration::from_secs(5), lock.lock()).await;
        assert!(taken.is_ok(), "the request in flight never let the lock go");
        drop(taken);
        assert_eq!((&mut in_flight).await.unwrap(), json!("answered"));
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_a_request_in_flight_ends_it() {
        let (_keep, never) = tokio::sync::oneshot::channel::<()>();
        let ended = Arc::new(());
        let alive = ended.clone();
        let in_flight = InFlight::spawn(async move {
            let _alive = alive;
            let _ = never.await;
            Ok(Value::Null)
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(Arc::strong_count(&ended), 2);
        drop(in_flight);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(Arc::strong_count(&ended), 1, "the request was not aborted");
    }

    #[test]
    fn waits_are_the_interval_plus_at_most_a_fifth() {
        for _ in 0..100 {
            let w = next_wait(Some(Duration::from_millis(500)), None, "t").unwrap();
            assert!(
                w >= Duration::from_millis(500) && w < Duration::from_millis(600),
                "{w:?}"
            );
        }
    }

    #[test]
    fn a_passed_deadline_ends_the_wait() {
        let past = Instant::now() - Duration::from_millis(1);
        assert!(matches!(
            next_wait(None, Some(past), "t"),
            Err(ClientError::Deadline(id)) if id == "t"
        ));
    }

    #[test]
    fn progress_is_read_from_a_status_message_that_starts_with_done_of_total() {
        assert_eq!(progress_in("3/10"), Some((3.0, 10.0)));
        assert_eq!(progress_in("1/60 s"), Some((1.0, 60.0)));
        assert_eq!(progress_in(" 2.5/4: copying"), Some((2.5, 4.0)));
        assert_eq!(progress_in("0/3 files"), Some((0.0, 3.0)));
        for not in [
            "working",
            "3 of 10",
            "3/",
            "/10",
            "3/0",
            "11/10",
            "2026/12/02 backup",
            "1/2x",
            "",
        ] {
            assert_eq!(progress_in(not), None, "{not:?}");
        }
    }
}
