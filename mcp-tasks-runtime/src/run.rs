//! The era-neutral core of running a tool: panic isolation, cancellation with a grace
//! period, and the check of structured output against the tool's output schema.

use crate::context::TaskContext;
use crate::error::{CallOutcome, Error, ToolError};
use crate::model::{CallToolResult, JsonObject};
use crate::tool::Tool;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio_util::sync::CancellationToken;

/// The message of a panic's payload, for the log.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}

/// Polls a future, turning a panic inside it into `Err(message)`.
pub(crate) struct CatchUnwind<F: ?Sized> {
    inner: Pin<Box<F>>,
}

impl<F> CatchUnwind<F> {
    pub(crate) fn new(future: F) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<F: ?Sized> CatchUnwind<F> {
    /// Over a future already on the heap, without boxing it again.
    pub(crate) fn pinned(inner: Pin<Box<F>>) -> Self {
        Self { inner }
    }
}

impl<F: Future + ?Sized> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.inner.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
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
pub(crate) const SYNC_CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Checks the arguments, then runs the tool until it returns, panics or is cancelled.
pub(crate) async fn run_tool(
    tool: &Tool,
    cx: TaskContext,
    args: JsonObject,
    cancel: &CancellationToken,
) -> RunEnd {
    let args = match tool.check_arguments(args) {
        Ok(args) => args,
        Err(e) => return RunEnd::Returned(Err(e)),
    };
    let mut future = CatchUnwind::new((tool.handler)(cx, args));
    tokio::select! {
        end = &mut future => match end {
            Ok(result) => RunEnd::Returned(result),
            Err(message) => {
                tracing::warn!(tool = %tool.name, panic = %message, "the tool panicked");
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
/// (Every end has one; the `Option` is what the task engine matches on.)
pub(crate) fn outcome_of(tool: &Tool, end: RunEnd) -> Option<CallOutcome> {
    match end {
        RunEnd::Returned(result) => {
            let outcome = check_output(tool, CallOutcome::from_tool(result)?);
            match &outcome {
                CallOutcome::Result(r) if r.is_error => tracing::warn!(
                    tool = %tool.name,
                    error = r.first_text().unwrap_or("(no text)"),
                    "the tool returned an error"
                ),
                CallOutcome::Error(e) => tracing::warn!(
                    tool = %tool.name,
                    code = e.code,
                    error = %e.message,
                    "the tool failed"
                ),
                CallOutcome::Result(_) => {}
            }
            Some(outcome)
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
