//! Running a tool call: the context backends of each era, panic isolation, cancellation and
//! the check of structured output.

use crate::context::{BoxFuture, CallBackend, TaskContext};
use crate::error::{CallOutcome, Error, ToolError};
use crate::model::{CallToolResult, InputRequest, JsonObject, LogLevel};
use crate::session::{Connection, RequestAborted, Sink};
use crate::tool::Tool;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio_util::sync::CancellationToken;

/// Who decides whether a log line reaches the client.
#[derive(Clone, Debug)]
pub(crate) enum LogGate {
    /// The connection's level, set with `logging/setLevel` (2025-11-25).
    Connection(Arc<Connection>),
    /// The request's `_meta` log level; `None` sends nothing (2026-07-28).
    Request(Option<LogLevel>),
}

impl LogGate {
    fn allows(&self, level: LogLevel) -> bool {
        match self {
            Self::Connection(c) => c.wants_log(level),
            Self::Request(min) => min.is_some_and(|m| level >= m),
        }
    }
}

/// Where a plain (non-task) call sends its notifications.
#[derive(Clone, Debug)]
pub(crate) struct Notifier {
    pub(crate) sink: Sink,
    pub(crate) progress_token: Option<Value>,
    pub(crate) log: LogGate,
}

impl Notifier {
    pub(crate) fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut params = json!({ "progressToken": token, "progress": progress });
        if let Some(total) = total {
            params["total"] = total.into();
        }
        if let Some(message) = message {
            params["message"] = message.into();
        }
        self.sink.notify("notifications/progress", params);
    }

    pub(crate) fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if !self.log.allows(level) {
            return;
        }
        let mut params = json!({ "level": level, "data": data });
        if let Some(logger) = logger {
            params["logger"] = logger.into();
        }
        self.sink.notify("notifications/message", params);
    }
}

/// 2025-11-25 plain call: questions are server-to-client requests on the same connection.
pub(crate) struct DirectBackend {
    pub(crate) conn: Arc<Connection>,
    pub(crate) notifier: Notifier,
    pub(crate) cancel: CancellationToken,
}

impl CallBackend for DirectBackend {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            match self
                .conn
                .request(
                    &self.notifier.sink,
                    &request.method,
                    request.params,
                    &self.cancel,
                )
                .await
            {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(e)) => Err(ToolError::new(format!(
                    "the client answered {} with an error: {}",
                    request.method, e.message
                ))),
                Err(RequestAborted::Cancelled) => Err(ToolError::cancelled()),
                Err(RequestAborted::Closed) => Err(ToolError::new("the client went away")),
            }
        })
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.notifier.progress(progress, total, message);
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        self.notifier.log(level, logger, data);
    }
}

/// 2026-07-28 plain call: questions stop the call and go back as `inputRequests`; the retry
/// brings the answers. Keys are numbered in the order the tool asks, so a tool that asks the
/// same questions in the same order finds its answers on every round.
pub(crate) struct MrtrBackend {
    pub(crate) answers: BTreeMap<String, Value>,
    pub(crate) asked: Mutex<BTreeMap<String, InputRequest>>,
    pub(crate) used: Mutex<BTreeMap<String, Value>>,
    pub(crate) counter: AtomicUsize,
    pub(crate) notifier: Notifier,
}

impl MrtrBackend {
    pub(crate) fn new(answers: BTreeMap<String, Value>, notifier: Notifier) -> Self {
        Self {
            answers,
            asked: Mutex::default(),
            used: Mutex::default(),
            counter: AtomicUsize::new(0),
            notifier,
        }
    }

    /// The questions the tool asked that have no answer yet.
    pub(crate) fn take_asked(&self) -> BTreeMap<String, InputRequest> {
        std::mem::take(&mut *self.asked.lock().expect("asked lock"))
    }

    /// The answers the tool consumed, to carry into the next round.
    pub(crate) fn used_answers(&self) -> BTreeMap<String, Value> {
        self.used.lock().expect("used lock").clone()
    }
}

pub(crate) fn input_key(method: &str, n: usize) -> String {
    let kind = match method {
        "elicitation/create" => "elicit",
        "sampling/createMessage" => "sample",
        _ => "roots",
    };
    format!("{kind}-{n}")
}

impl CallBackend for MrtrBackend {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let key = request
            .key
            .clone()
            .unwrap_or_else(|| input_key(&request.method, n));
        let result = match self.answers.get(&key) {
            Some(answer) => {
                self.used
                    .lock()
                    .expect("used lock")
                    .insert(key, answer.clone());
                Ok(answer.clone())
            }
            None => {
                self.asked.lock().expect("asked lock").insert(key, request);
                Err(ToolError::input_required())
            }
        };
        Box::pin(async move { result })
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.notifier.progress(progress, total, message);
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        self.notifier.log(level, logger, data);
    }
}

/// Polls a future, turning a panic inside it into `Err(message)`.
pub(crate) struct CatchUnwind<F> {
    inner: Pin<Box<F>>,
}

impl<F> CatchUnwind<F> {
    pub(crate) fn new(future: F) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.inner.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_owned());
                Poll::Ready(Err(message))
            }
        }
    }
}

/// How a run of a tool's future ended.
#[derive(Debug)]
pub(crate) enum RunEnd {
    /// The tool returned.
    Returned(Result<CallToolResult, ToolError>),
    /// The tool panicked (the message is logged, never sent to the client).
    Panicked,
    /// The call was cancelled and the future dropped.
    Cancelled,
}

/// How long a cancelled plain call may go on cleaning up before it is dropped.
const SYNC_CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Checks the arguments, then runs the tool until it returns, panics or is cancelled.
pub(crate) async fn run_tool(
    tool: &Tool,
    cx: TaskContext,
    args: JsonObject,
    cancel: &CancellationToken,
) -> RunEnd {
    if let Err(e) = tool.check_arguments(&args) {
        return RunEnd::Returned(Err(e));
    }
    let mut future = CatchUnwind::new((tool.handler)(cx, args));
    tokio::select! {
        end = &mut future => match end {
            Ok(result) => RunEnd::Returned(result),
            Err(message) => {
                tracing::error!(tool = %tool.name, panic = %message, "tool panicked");
                RunEnd::Panicked
            }
        },
        () = cancel.cancelled() => {
            // Cooperative first: the tool sees its token fire and may clean up, briefly.
            let _ = tokio::time::timeout(SYNC_CANCEL_GRACE, &mut future).await;
            RunEnd::Cancelled
        }
    }
}

/// The outcome of a finished run, with the output checked against the tool's output schema.
/// `None` when the tool stopped for MRTR input.
pub(crate) fn outcome_of(tool: &Tool, end: RunEnd) -> Option<CallOutcome> {
    match end {
        RunEnd::Returned(result) => {
            let outcome = CallOutcome::from_tool(result)?;
            Some(check_output(tool, outcome))
        }
        RunEnd::Panicked => Some(CallOutcome::Error(
            Error::ToolPanicked(tool.name.to_string()).into(),
        )),
        RunEnd::Cancelled => Some(CallOutcome::Error(Error::Cancelled.into())),
    }
}

fn check_output(tool: &Tool, outcome: CallOutcome) -> CallOutcome {
    let CallOutcome::Result(result) = &outcome else {
        return outcome;
    };
    if result.is_error {
        return outcome;
    }
    let Some(validator) = tool.output_validator() else {
        return outcome;
    };
    let problem = match &result.structured_content {
        None => Some("it has an output schema but returned no structuredContent".to_owned()),
        Some(value) => validator.validate(value).err().map(|e| e.to_string()),
    };
    match problem {
        None => outcome,
        Some(problem) => {
            tracing::error!(tool = %tool.name, %problem, "tool output does not match its output schema");
            CallOutcome::Error(
                Error::Internal(format!(
                    "tool {:?} broke its output schema: {problem}",
                    &*tool.name
                ))
                .into(),
            )
        }
    }
}
