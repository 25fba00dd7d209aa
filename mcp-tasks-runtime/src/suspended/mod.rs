//! Synchronous calls that may be suspended on their questions (the multi round-trip requests
//! of 2026-07-28, see [`mrtr`](crate::mrtr)): the call's future, where its questions go,
//! driving it round by round, and the server's parked calls waiting for the client's retry.
//!
//! Nothing here knows a wire name: the era's adapter decodes the retry, checks its signed
//! `requestState` and encodes the questions. It sits below `server`, which owns the parked
//! calls, so that the server does not depend on the wire.

mod backend;
mod parking;

pub(crate) use backend::{MrtrBackend, Prelude};
pub(crate) use parking::{Parking, Resuming, Taken};

use crate::context::{BoxFuture, CallBackend, TaskContext};
use crate::error::ToolError;
use crate::model::{CallToolResult, ResourceContents};
use crate::notify::Notifier;
use crate::prompt::GetPromptResult;
use crate::run::{CatchUnwind, RunEnd, SYNC_CANCEL_GRACE, panic_message};
use crate::tool::Tool;
use serde_json::Value;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use tokio_util::sync::CancellationToken;

/// What a synchronous 2026-07-28 call produces: a tool result, a filled-in prompt or the
/// contents of a resource.
pub(crate) enum Produced {
    Tool(CallToolResult),
    Prompt(GetPromptResult),
    Resource(Vec<ResourceContents>),
}

impl Produced {
    pub(crate) fn into_tool(self) -> Result<CallToolResult, ToolError> {
        match self {
            Self::Tool(r) => Ok(r),
            _ => Err(ToolError::protocol(
                crate::jsonrpc::INTERNAL_ERROR,
                "a suspended call produced something other than a tool result",
            )),
        }
    }
}

/// The future of a synchronous 2026-07-28 call.
pub(crate) type WorkFuture = BoxFuture<'static, Result<Produced, ToolError>>;

/// A synchronous 2026-07-28 call that may be suspended on its questions: its future (which
/// holds its context), where its questions go, and its cancellation token.
pub(crate) struct Suspended {
    future: WorkFuture,
    pub(crate) backend: Arc<MrtrBackend>,
    pub(crate) cancel: CancellationToken,
    pub(crate) cx: TaskContext,
    /// Set for a call with a prelude, which may become a task.
    pub(crate) prelude: Option<Arc<Prelude>>,
}

/// Who a synchronous call is and what it may see.
pub(crate) struct Caller {
    pub(crate) name: Arc<str>,
    pub(crate) client_capabilities: Arc<Value>,
    pub(crate) principal: Option<Arc<crate::principal::Principal>>,
    pub(crate) notifier: Notifier,
    pub(crate) state: crate::state::StateMap,
}

impl Suspended {
    /// Starts a call; `given` are answers it finds when it asks (nothing runs until it is
    /// driven).
    pub(crate) fn start(
        caller: Caller,
        given: BTreeMap<String, Value>,
        prelude: bool,
        work: impl FnOnce(TaskContext) -> WorkFuture,
    ) -> Self {
        let cancel = CancellationToken::new();
        let backend = Arc::new(MrtrBackend::new(given, caller.notifier, cancel.clone()));
        let prelude = prelude.then(|| {
            Arc::new(Prelude {
                mrtr: Arc::clone(&backend),
                task: OnceLock::new(),
            })
        });
        let cx_backend: Arc<dyn CallBackend> = match &prelude {
            Some(p) => Arc::clone(p) as _,
            None => Arc::clone(&backend) as _,
        };
        let cx = TaskContext::new(
            caller.name,
            cancel.clone(),
            caller.client_capabilities,
            caller.principal,
            cx_backend,
            caller.state,
        );
        Self {
            future: work(cx.clone()),
            backend,
            cancel,
            cx,
            prelude,
        }
    }

    /// The call's future as a tool's, for the task engine to run.
    pub(crate) fn into_tool_future(self) -> crate::tool::ToolFuture {
        let future = self.future;
        Box::pin(async move { future.await.and_then(Produced::into_tool) })
    }

    /// Cancels the call and lets it clean up briefly in the background, as a cancelled
    /// request does.
    pub(crate) fn abandon(self) {
        self.cancel.cancel();
        let mut future = CatchUnwind::new(self.future);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(SYNC_CANCEL_GRACE, &mut future).await;
        });
    }
}

/// How a synchronous call ended.
pub(crate) enum Ended {
    /// It returned.
    Returned(Result<Produced, ToolError>),
    /// It panicked, with this message (logged, never sent to the client).
    Panicked(String),
    /// The request was cancelled and the call dropped.
    Cancelled,
}

impl Ended {
    /// The end of a tool's call, as the tool runner reports it.
    pub(crate) fn into_run_end(self, tool: &Tool) -> RunEnd {
        match self {
            Self::Returned(r) => RunEnd::Returned(r.and_then(Produced::into_tool)),
            Self::Panicked(message) => {
                tracing::warn!(tool = %tool.name, panic = %message, "the tool panicked");
                RunEnd::Panicked
            }
            Self::Cancelled => RunEnd::Cancelled,
        }
    }
}

/// Where a round of a synchronous call stopped.
pub(crate) enum Step {
    /// The call ended.
    Ended(Ended),
    /// The call waits for answers to its open questions.
    Asked(Suspended),
    /// A call with a prelude reached its first suspension that is not a question: it goes on
    /// as a task.
    Detached(Suspended),
}

/// Runs a call until it ends, waits on a question the client has not answered, or (with a
/// prelude) first waits on anything else. `request` is the token of the request driving this
/// round: when it fires the call is cancelled.
pub(crate) async fn drive(mut call: Suspended, request: &CancellationToken) -> Step {
    let detach = call.prelude.is_some();
    let polled = {
        let backend = Arc::clone(&call.backend);
        let future = &mut call.future;
        let step = std::future::poll_fn(|cx| {
            match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
                Ok(Poll::Ready(result)) => Poll::Ready(Some(Ok(result))),
                Err(payload) => Poll::Ready(Some(Err(panic_message(payload.as_ref())))),
                Ok(Poll::Pending) if detach || backend.has_open() => Poll::Ready(None),
                Ok(Poll::Pending) => Poll::Pending,
            }
        });
        tokio::select! {
            biased;
            step = step => Some(step),
            () = request.cancelled() => None,
        }
    };
    match polled {
        Some(Some(Ok(result))) => Step::Ended(Ended::Returned(result)),
        Some(Some(Err(message))) => Step::Ended(Ended::Panicked(message)),
        Some(None) if call.backend.has_open() => Step::Asked(call),
        Some(None) => Step::Detached(call),
        None => {
            // Cooperative first: the call sees its token fire and may clean up, briefly.
            call.cancel.cancel();
            let mut future = CatchUnwind::new(call.future);
            let _ = tokio::time::timeout(SYNC_CANCEL_GRACE, &mut future).await;
            Step::Ended(Ended::Cancelled)
        }
    }
}
