//! Running a tool call: the context backends of each era, panic isolation, cancellation and
//! the check of structured output; and the suspended synchronous calls of 2026-07-28 (see
//! [`crate::mrtr`]).

use crate::context::{BoxFuture, CallBackend, TaskContext};
use crate::error::{CallOutcome, Error, ToolError};
use crate::model::{CallToolResult, InputRequest, JsonObject, LogLevel, ResourceContents};
use crate::prompt::GetPromptResult;
use crate::session::{Connection, Sink, progress_key};
use crate::sync::LockExt;
use crate::tool::Tool;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use tokio::sync::oneshot;
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

/// Where a plain (non-task) call sends its notifications, for as long as its request runs:
/// dropped, it settles the request's progress (what is held back for a slow client goes now
/// or never, so that none follows the response).
#[derive(Debug)]
pub(crate) struct Notifier {
    pub(crate) sink: Sink,
    pub(crate) progress_token: Option<Value>,
    pub(crate) log: LogGate,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(token) = &self.progress_token {
            self.sink.settle(&progress_key(token));
        }
    }
}

/// Sends a `notifications/progress` for `token` on `sink`.
pub(crate) fn send_progress(
    sink: &Sink,
    token: &Value,
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
) {
    let mut params = json!({ "progressToken": token, "progress": progress });
    if let Some(total) = total {
        params["total"] = total.into();
    }
    if let Some(message) = message {
        params["message"] = message.into();
    }
    sink.notify_latest(progress_key(token), "notifications/progress", params);
}

impl Notifier {
    pub(crate) fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(token) = &self.progress_token {
            send_progress(&self.sink, token, progress, total, message);
        }
    }

    pub(crate) fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if !self.log.allows(level) {
            return;
        }
        let mut params = json!({ "level": level, "data": data });
        if let Some(logger) = logger {
            params["logger"] = logger.into();
        }
        self.sink.notify_droppable("notifications/message", params);
    }
}

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

#[derive(Default)]
struct Questions {
    /// Answers given before their question was asked (a rerun's earlier answers, or
    /// `inputResponses` on the first round).
    given: BTreeMap<String, Value>,
    /// Questions asked and not answered yet, with where their answer goes.
    open: BTreeMap<String, (InputRequest, oneshot::Sender<Value>)>,
    /// Every answer the call received, by key.
    used: BTreeMap<String, Value>,
}

impl Questions {
    /// Forgets questions nobody waits for any more (the tool stopped awaiting them).
    fn prune(&mut self) {
        self.open.retain(|_, (_, tx)| !tx.is_closed());
    }
}

/// 2026-07-28 plain call: a question the client has not answered yet suspends the call, and
/// the retry's `inputResponses` resume it. Keys are numbered in the order the tool asks, so a
/// rerun that asks the same questions in the same order finds the answers it was given.
pub(crate) struct MrtrBackend {
    questions: Mutex<Questions>,
    counter: AtomicUsize,
    notifier: Mutex<Notifier>,
    cancel: CancellationToken,
}

impl MrtrBackend {
    pub(crate) fn new(
        given: BTreeMap<String, Value>,
        notifier: Notifier,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            questions: Mutex::new(Questions {
                given,
                ..Questions::default()
            }),
            counter: AtomicUsize::new(0),
            notifier: Mutex::new(notifier),
            cancel,
        }
    }

    fn questions(&self) -> std::sync::MutexGuard<'_, Questions> {
        self.questions.locked()
    }

    /// Sends this round's progress and logs to this round's request.
    pub(crate) fn set_notifier(&self, notifier: Notifier) {
        *self.notifier.locked() = notifier;
    }

    /// This round's answer (its questions) is going out: the progress it held back for a
    /// slow client is settled, and what the call reports until the next round begins goes
    /// nowhere, since no request of the client's waits for it.
    pub(crate) fn end_round(&self) {
        let mut notifier = self.notifier.locked();
        let sink = notifier.sink.clone();
        *notifier = Notifier {
            sink,
            progress_token: None,
            log: LogGate::Request(None),
        };
    }

    /// Hands the retry's answers to the questions waiting for them; answers to keys that are
    /// not open (never asked, already answered) are ignored.
    pub(crate) fn answer(&self, responses: &JsonObject) {
        let mut q = self.questions();
        for (key, answer) in responses {
            if let Some((_, tx)) = q.open.remove(key)
                && tx.send(answer.clone()).is_ok()
            {
                q.used.insert(key.clone(), answer.clone());
            }
        }
    }

    /// Checks a retry's answers against the open questions they answer (see
    /// [`check_answer`](crate::schema::check_answer)); `Err` names the key and the field.
    pub(crate) fn check(&self, responses: &JsonObject) -> Result<(), Error> {
        let q = self.questions();
        for (key, answer) in responses {
            if let Some((question, _)) = q.open.get(key)
                && let Err(problem) = crate::schema::check_answer(question, answer)
            {
                return Err(Error::InvalidParams(format!(
                    "`inputResponses[{key:?}]`: {problem}"
                )));
            }
        }
        Ok(())
    }

    /// Every question still waiting for an answer.
    pub(crate) fn open_questions(&self) -> BTreeMap<String, InputRequest> {
        let mut q = self.questions();
        q.prune();
        q.open
            .iter()
            .map(|(k, (request, _))| (k.clone(), request.clone()))
            .collect()
    }

    fn has_open(&self) -> bool {
        let mut q = self.questions();
        q.prune();
        !q.open.is_empty()
    }

    /// Every answer the call received, to carry into a rerun.
    pub(crate) fn used_answers(&self) -> BTreeMap<String, Value> {
        self.questions().used.clone()
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
        let mut q = self.questions();
        // An answer given ahead (a rerun's) that does not fit is not used: the question is
        // asked again.
        if let Some(answer) = q.given.remove(&key)
            && crate::schema::check_answer(&request, &answer).is_ok()
        {
            q.used.insert(key, answer.clone());
            return Box::pin(async move { Ok(answer) });
        }
        q.prune();
        if q.open.contains_key(&key) {
            return Box::pin(async move {
                Err(ToolError::new(format!(
                    "two open questions of one call share the key {key:?}"
                )))
            });
        }
        let (tx, rx) = oneshot::channel();
        q.open.insert(key, (request, tx));
        let cancel = self.cancel.clone();
        Box::pin(async move {
            tokio::select! {
                answer = rx => answer.map_err(|_| ToolError::cancelled()),
                () = cancel.cancelled() => Err(ToolError::cancelled()),
            }
        })
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.notifier.locked().progress(progress, total, message);
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        self.notifier.locked().log(level, logger, data);
    }
}

/// The backend of a call with a prelude (2026-07-28): questions suspend it like a plain call
/// until it becomes a task; after that they go to the task.
pub(crate) struct Prelude {
    pub(crate) mrtr: Arc<MrtrBackend>,
    pub(crate) task: OnceLock<Arc<dyn CallBackend>>,
}

impl CallBackend for Prelude {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        match self.task.get() {
            Some(task) => task.input(request),
            None => self.mrtr.input(request),
        }
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        match self.task.get() {
            Some(task) => task.progress(progress, total, message),
            None => self.mrtr.progress(progress, total, message),
        }
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        match self.task.get() {
            Some(task) => task.log(level, logger, data),
            None => self.mrtr.log(level, logger, data),
        }
    }

    fn detach(&self) -> BoxFuture<'_, ()> {
        if self.task.get().is_some() {
            return Box::pin(async {});
        }
        // Not a task yet: give up one poll, which turns the call into one.
        let mut yielded = false;
        Box::pin(std::future::poll_fn(move |cx| {
            if yielded || self.task.get().is_some() {
                Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }))
    }
}

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
    pub(crate) principal: Option<Arc<str>>,
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

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
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
const SYNC_CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

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
