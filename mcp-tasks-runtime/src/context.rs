//! What a running tool can reach: its progress reporter, its cancellation token, the client
//! (for elicitation, sampling and roots), its durable steps and the log.
//!
//! The same types serve a plain call and a task in either protocol era. The runtime plugs in
//! a `CallBackend` that knows where progress goes and how a question reaches the client:
//! a server-to-client request (2025-11-25), an `InputRequiredResult` round (2026-07-28), or a
//! task parked in `input_required`.

use crate::error::ToolError;
use crate::model::{ElicitResult, InputRequest, JsonObject, LogLevel};
use crate::sync::LockExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a call's progress, log lines and questions go. Implemented by the runtime.
pub(crate) trait CallBackend: Send + Sync {
    /// Asks the client something and waits for the answer.
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>>;
    /// Reports progress. `progress` has already been checked to increase.
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>);
    /// Sends a log line to the client, if the client asked for that level.
    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value);
    /// Waits until the call may continue as a background task (2026-07-28 only).
    fn detach(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    /// The output an earlier run of the task stored for the durable step `name`. `None`
    /// outside a task: a plain call stores nothing.
    fn step_output(&self, _name: &str) -> Option<Value> {
        None
    }
    /// Stores the output of the durable step `name`, fenced by the task's lease. Outside a
    /// task there is nothing to store.
    fn store_step(&self, _name: &str, _output: Value) -> BoxFuture<'_, Result<(), StepError>> {
        Box::pin(async { Ok(()) })
    }
}

/// [`Inner::last_progress`] before any progress was sent: the bits of a NaN, which no
/// progress sent can be (it is finite).
const NO_PROGRESS: u64 = u64::MAX;

struct Inner {
    tool: Arc<str>,
    /// Its task's id, and the steps done in this run, under one lock (a running task keeps
    /// its context as long as it runs: one lock costs less than two).
    learned: Mutex<Learned>,
    cancel: CancellationToken,
    client_capabilities: Arc<Value>,
    principal: Option<Arc<crate::principal::Principal>>,
    backend: Arc<dyn CallBackend>,
    /// The last progress sent, as the bits of an `f64`; [`NO_PROGRESS`] before the first.
    last_progress: AtomicU64,
    state: crate::state::StateMap,
}

/// What a call's context learns as it goes.
#[derive(Default)]
struct Learned {
    /// Its task's id, once it is a task.
    task_id: Option<Arc<str>>,
    /// The durable steps that produced an output in this run, by name; made by the first
    /// (most tools have none).
    #[allow(clippy::box_collection)] // a pointer rather than an empty set's 24 bytes
    steps_done: Option<Box<BTreeSet<String>>>,
}

/// Everything a tool call can reach. Cheap to clone.
///
/// Take it as a parameter of a `#[task_tool]` function, or take only the parts you need:
/// [`Progress`], [`Steps`], [`Client`] or [`CancellationToken`].
#[derive(Clone)]
pub struct TaskContext {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("tool", &self.inner.tool)
            .field("task_id", &self.task_id())
            .field("cancelled", &self.inner.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl TaskContext {
    pub(crate) fn new(
        tool: Arc<str>,
        cancel: CancellationToken,
        client_capabilities: Arc<Value>,
        principal: Option<Arc<crate::principal::Principal>>,
        backend: Arc<dyn CallBackend>,
        state: crate::state::StateMap,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                tool,
                learned: Mutex::default(),
                cancel,
                client_capabilities,
                principal,
                backend,
                last_progress: AtomicU64::new(NO_PROGRESS),
                state,
            }),
        }
    }

    /// The application state of type `T` registered on the server
    /// ([`ServerBuilder::state`](crate::ServerBuilder::state)), if any. A tool that declares
    /// it needs it ([`Tool::requires_state`](crate::Tool::requires_state), or a `State<T>`
    /// parameter of a `#[task_tool]` function) always finds it.
    pub fn state<T: Send + Sync + 'static>(&self) -> Option<crate::State<T>> {
        self.inner.state.get::<T>()
    }

    /// A context that is not connected to any client, for unit tests of tool functions.
    ///
    /// Progress and logs go nowhere; every question to the client fails as unsupported.
    pub fn detached(tool: &str) -> Self {
        Self::new(
            tool.into(),
            CancellationToken::new(),
            Arc::new(json!({})),
            None,
            Arc::new(NoClient),
            crate::state::StateMap::default(),
        )
    }

    pub(crate) fn set_task_id(&self, id: &Arc<str>) {
        self.inner.learned.locked().task_id = Some(Arc::clone(id));
    }

    /// The name of the tool being called.
    pub fn tool_name(&self) -> &str {
        &self.inner.tool
    }

    /// The task id when the call runs as a task.
    pub fn task_id(&self) -> Option<String> {
        self.inner
            .learned
            .locked()
            .task_id
            .as_deref()
            .map(str::to_owned)
    }

    /// The authenticated principal that made the call, if the transport has one: its
    /// subject, scopes, client and issuer (claims and expiry only while the call runs in the
    /// request that made it; a task run elsewhere has what its record keeps, see
    /// [`Principal::for_record`](crate::principal::Principal::for_record)).
    pub fn principal(&self) -> Option<&crate::principal::Principal> {
        self.inner.principal.as_deref()
    }

    /// The token that fires when the client cancels the call or the task.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// `true` once the call or task has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Progress reporting for this call.
    pub fn progress(&self) -> Progress {
        Progress { cx: self.clone() }
    }

    /// The durable steps of this call (see [`Steps`]).
    pub fn steps(&self) -> Steps {
        Steps { cx: self.clone() }
    }

    /// The client, for elicitation, sampling and roots.
    pub fn client(&self) -> Client {
        Client { cx: self.clone() }
    }

    /// Sends a log line to the client (when it asked for logs of this level).
    pub fn log(&self, level: LogLevel, message: impl Into<String>) {
        self.inner
            .backend
            .log(level, Some(&self.inner.tool), Value::String(message.into()));
    }

    /// Sends an `info` log line to the client.
    pub fn info(&self, message: impl Into<String>) {
        self.log(LogLevel::Info, message);
    }

    /// Lets the call continue as a background task.
    ///
    /// In the 2026-07-28 era a task-mode call runs inline until its first real suspension:
    /// questions asked before that are answered in synchronous rounds (MRTR) and only then is
    /// the task created. Awaiting `detach` marks that point explicitly. Everywhere else it
    /// returns at once.
    pub async fn detach(&self) {
        self.inner.backend.detach().await;
    }

    /// The client capabilities this call was made with.
    pub fn client_capabilities(&self) -> &Value {
        &self.inner.client_capabilities
    }
}

/// Reports how far a call has come.
///
/// In a task, progress updates the task's `statusMessage`; in the 2025-11-25 era it is also
/// sent as `notifications/progress` when the client gave a progress token. Values that do not
/// increase are dropped, as the spec requires.
#[derive(Clone, Debug)]
pub struct Progress {
    cx: TaskContext,
}

impl Progress {
    /// A progress reporter connected to nothing, for unit tests.
    pub fn noop() -> Self {
        TaskContext::detached("test").progress()
    }

    /// Reports `done` out of `total` (if known).
    pub fn report(&self, done: f64, total: Option<f64>) {
        self.send(done, total, None);
    }

    /// Reports `done` out of `total` with a human-readable message.
    pub fn report_with_message(&self, done: f64, total: Option<f64>, message: impl AsRef<str>) {
        self.send(done, total, Some(message.as_ref()));
    }

    /// Updates the status message without a number (progress counts up by one).
    pub fn message(&self, message: impl AsRef<str>) {
        let next = match self.cx.inner.last_progress.load(Ordering::Acquire) {
            NO_PROGRESS => 0.0,
            last => f64::from_bits(last) + 1.0,
        };
        self.send(next, None, Some(message.as_ref()));
    }

    fn send(&self, done: f64, total: Option<f64>, message: Option<&str>) {
        if !done.is_finite() {
            return;
        }
        let moved_on =
            self.cx
                .inner
                .last_progress
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                    (last == NO_PROGRESS || done > f64::from_bits(last)).then_some(done.to_bits())
                });
        if moved_on.is_err() {
            return;
        }
        self.cx.inner.backend.progress(done, total, message);
    }
}

/// The longest a durable step's output may be, in bytes of serialized JSON (64 KiB).
///
/// A step's output is stored in the task's record, next to its arguments and its result, and
/// read back with it: keep it to what the rest of the run needs (an id, a receipt, a short
/// summary) and put anything bigger somewhere of its own. A larger output is refused with
/// [`StepError::OutputTooLarge`].
pub const MAX_STEP_OUTPUT_BYTES: usize = 64 * 1024;

/// The longest a durable step's name may be, in characters. A longer name is refused with
/// [`StepError::NameTooLong`].
pub const MAX_STEP_NAME_CHARS: usize = 200;

/// Why a durable step could not run or keep its output ([`Steps::run`]). The tool sees it as
/// a [`ToolError`] with the same message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// The step's name is empty.
    #[error("a step needs a name: the empty name is not one")]
    EmptyName,
    /// The step's name is longer than [`MAX_STEP_NAME_CHARS`].
    #[error(
        "the step name {start:?}… is {chars} characters long; at most {MAX_STEP_NAME_CHARS} are allowed"
    )]
    NameTooLong {
        /// The name's first characters.
        start: String,
        /// Its length in characters.
        chars: usize,
    },
    /// A step of this name already produced an output in this run. Each step of a run needs
    /// a name of its own (`format!("mail-{recipient}")` in a loop): on a rerun, a name finds
    /// the one output stored under it.
    #[error("the step {0:?} already ran in this run: give each step of a run a name of its own")]
    Repeated(String),
    /// The step's output is larger than [`MAX_STEP_OUTPUT_BYTES`] as JSON.
    #[error(
        "the output of step {name:?} is {bytes} bytes of JSON; at most {MAX_STEP_OUTPUT_BYTES} can be stored"
    )]
    OutputTooLarge {
        /// The step.
        name: String,
        /// The output's size as JSON.
        bytes: usize,
    },
    /// The step's output cannot be turned into JSON.
    #[error("cannot serialize the output of step {name:?}: {message}")]
    Serialize {
        /// The step.
        name: String,
        /// What serde said.
        message: String,
    },
    /// The output an earlier run stored for the step does not read back as the type asked
    /// for (the tool changed between the runs, say).
    #[error("the stored output of step {name:?} does not read back: {message}")]
    Deserialize {
        /// The step.
        name: String,
        /// What serde said.
        message: String,
    },
    /// Another process took the task over (this process's lease lapsed): the run stops, and
    /// neither the step's output nor the run's outcome is stored.
    #[error(
        "the task was taken over by another process: the output of step {0:?} was not stored and this run stops"
    )]
    LeaseLost(String),
    /// The task ended (it was cancelled, say) before the step's output could be stored.
    #[error("the task ended before the output of step {0:?} could be stored")]
    TaskEnded(String),
    /// The store did not take the step's output: it was out of reach, or the task kept
    /// changing, for a whole lease.
    #[error("cannot store the output of step {name:?}: {message}")]
    Store {
        /// The step.
        name: String,
        /// What went wrong.
        message: String,
    },
}

impl From<StepError> for ToolError {
    fn from(error: StepError) -> Self {
        ToolError::new(error)
    }
}

/// Durable steps: the parts of a task's run whose outputs are kept, so that a run of the task
/// after a restart does not do them again.
///
/// [`run`](Self::run) a step by name: when the task's record already holds an output for that
/// name (an earlier run of the same task finished the step), the output is read back and the
/// step does not run again; otherwise the step runs and its output is stored in the record
/// before `run` returns. A tool made of steps can therefore rerun after a restart
/// ([`RestartPolicy::Rerun`](crate::RestartPolicy::Rerun)) without being idempotent as a
/// whole: declare it with [`Tool::durable_steps`](crate::Tool::durable_steps) (a
/// `#[task_tool]` function that takes `Steps` is declared so by the macro). Each step is
/// still done at least once and may be done again when the process dies between doing it and
/// storing its output, so a step on its own should be idempotent, or made so with a key of
/// the task (its id, [`TaskContext::task_id`]).
///
/// The output is stored with a compare-and-set fenced by the run's lease: when another
/// process has taken the task over meanwhile, nothing is stored, `run` fails with
/// [`StepError::LeaseLost`] and the run stops without storing its outcome, as any run that
/// lost its lease.
///
/// Rules, each a [`StepError`]: a name has 1 to [`MAX_STEP_NAME_CHARS`] characters, an
/// output at most [`MAX_STEP_OUTPUT_BYTES`] of JSON, and a name gives one output per run (a
/// step that failed may be tried again under its name). A step that fails stores nothing.
///
/// Outside a task (a synchronous call, or the prelude of a 2026-07-28 call before it
/// becomes a task) there is nothing to store: every step simply runs, under the same rules.
///
/// ```
/// use mcp_tasks_runtime::{Steps, TaskContext, ToolError};
///
/// async fn order(steps: &Steps, order: &str) -> Result<String, ToolError> {
///     let receipt: String = steps
///         .run("charge", || async { Ok(format!("receipt for {order}")) })
///         .await?;
///     steps
///         .run("mail", || async { Ok(format!("mailed {receipt}")) })
///         .await
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let steps = TaskContext::detached("order").steps();
/// assert_eq!(order(&steps, "A-1").await.unwrap(), "mailed receipt for A-1");
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct Steps {
    cx: TaskContext,
}

impl Steps {
    /// Steps connected to no task, for unit tests: every step runs.
    pub fn detached() -> Self {
        TaskContext::detached("test").steps()
    }

    /// Runs the step `name` once per task: returns the output an earlier run of the task
    /// stored under `name`, or runs `step` and stores its output (see [`Steps`]).
    ///
    /// An error of `step` is returned as it is, and nothing is stored: a later run does the
    /// step again.
    pub async fn run<T, F, Fut>(&self, name: impl Into<String>, step: F) -> Result<T, ToolError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, ToolError>>,
    {
        let name = name.into();
        check_step_name(&name)?;
        let repeated = (self.cx.inner.learned.locked().steps_done.as_ref())
            .is_some_and(|done| done.contains(&name));
        if repeated {
            return Err(StepError::Repeated(name).into());
        }
        let backend = &self.cx.inner.backend;
        if let Some(stored) = backend.step_output(&name) {
            let output = serde_json::from_value(stored).map_err(|e| StepError::Deserialize {
                name: name.clone(),
                message: e.to_string(),
            })?;
            self.done(name)?;
            return Ok(output);
        }
        let output = step().await?;
        let value = serde_json::to_value(&output).map_err(|e| StepError::Serialize {
            name: name.clone(),
            message: e.to_string(),
        })?;
        let bytes = json_size(&value);
        if bytes > MAX_STEP_OUTPUT_BYTES {
            return Err(StepError::OutputTooLarge { name, bytes }.into());
        }
        backend.store_step(&name, value).await?;
        self.done(name)?;
        Ok(output)
    }

    /// Marks `name` as having given its output in this run.
    fn done(&self, name: String) -> Result<(), StepError> {
        let mut learned = self.cx.inner.learned.locked();
        let done = learned.steps_done.get_or_insert_default();
        if done.contains(&name) {
            return Err(StepError::Repeated(name));
        }
        done.insert(name);
        Ok(())
    }
}

/// Checks a step name against the rules: 1 to [`MAX_STEP_NAME_CHARS`] characters.
fn check_step_name(name: &str) -> Result<(), StepError> {
    if name.is_empty() {
        return Err(StepError::EmptyName);
    }
    let chars = name.chars().count();
    if chars > MAX_STEP_NAME_CHARS {
        return Err(StepError::NameTooLong {
            start: name.chars().take(40).collect(),
            chars,
        });
    }
    Ok(())
}

/// The size of `value` as compact JSON, in bytes.
fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` into a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The client that made the call: ask it questions (elicitation), for a completion (sampling)
/// or for its roots. Each method fails with a clear error when the client did not declare the
/// capability, and never sends it a request it cannot handle.
#[derive(Clone, Debug)]
pub struct Client {
    cx: TaskContext,
}

impl Client {
    /// `true` when the client declared the capability (`elicitation`, `sampling`, `roots`).
    pub fn supports(&self, capability: &str) -> bool {
        self.cx
            .inner
            .client_capabilities
            .get(capability)
            .is_some_and(|v| !v.is_null())
    }

    /// Sends any input request (`elicitation/create`, `sampling/createMessage`, `roots/list`)
    /// and returns the client's raw answer.
    pub async fn request(&self, request: InputRequest) -> Result<Value, ToolError> {
        let capability = request.capability();
        if !self.supports(capability) {
            return Err(ToolError::missing_capability(capability));
        }
        if self.cx.is_cancelled() {
            return Err(ToolError::cancelled());
        }
        let mut request = request;
        crate::spans::asking(&request.method, &mut request.params);
        let method = request.method.clone();
        let answer = self.cx.inner.backend.input(request).await;
        crate::spans::answered(&method, answer.is_ok());
        answer
    }

    /// Asks the user to fill in a form described by `requested_schema` (a flat JSON Schema
    /// object of primitive properties).
    pub async fn elicit(
        &self,
        message: impl Into<String>,
        requested_schema: Value,
    ) -> Result<ElicitResult, ToolError> {
        self.elicit_form(None, message.into(), requested_schema)
            .await
    }

    /// Like [`Client::elicit`], with the key the question is filed under in `inputRequests`
    /// (2026-07-28). Keys must be unique within one call or task.
    pub async fn elicit_keyed(
        &self,
        key: impl Into<String>,
        message: impl Into<String>,
        requested_schema: Value,
    ) -> Result<ElicitResult, ToolError> {
        self.elicit_form(Some(key.into()), message.into(), requested_schema)
            .await
    }

    async fn elicit_form(
        &self,
        key: Option<String>,
        message: String,
        requested_schema: Value,
    ) -> Result<ElicitResult, ToolError> {
        let answer = self
            .request(InputRequest {
                method: "elicitation/create".into(),
                params: json!({
                    "mode": "form",
                    "message": message,
                    "requestedSchema": requested_schema,
                }),
                key,
            })
            .await?;
        serde_json::from_value(answer).map_err(|e| {
            ToolError::new(format!(
                "the client sent an invalid elicitation result: {e}"
            ))
        })
    }

    /// Asks the user to fill in a form shaped like `T` and reads the answer into `T`.
    ///
    /// Returns `Ok(None)` when the user declined or cancelled.
    pub async fn elicit_as<T>(&self, message: impl Into<String>) -> Result<Option<T>, ToolError>
    where
        T: DeserializeOwned + schemars::JsonSchema + 'static,
    {
        let schema = crate::schema::elicitation_schema::<T>();
        let result = self.elicit(message, Value::Object(schema)).await?;
        match (result.action, result.content) {
            (crate::model::ElicitAction::Accept, Some(content)) => {
                serde_json::from_value(Value::Object(content))
                    .map(Some)
                    .map_err(|e| {
                        ToolError::new(format!("the client's answer does not fit the form: {e}"))
                    })
            }
            _ => Ok(None),
        }
    }

    /// Asks the client's model for a completion (`sampling/createMessage`) and returns the
    /// raw result (`{role, content, model, stopReason}`).
    pub async fn sample(&self, params: JsonObject) -> Result<Value, ToolError> {
        self.request(InputRequest {
            method: "sampling/createMessage".into(),
            params: Value::Object(params),
            key: None,
        })
        .await
    }

    /// Asks the client's model a single text question and returns the text of its answer.
    pub async fn sample_text(
        &self,
        prompt: impl Into<String>,
        max_tokens: u32,
    ) -> Result<String, ToolError> {
        let mut params = JsonObject::new();
        params.insert(
            "messages".into(),
            json!([{ "role": "user", "content": { "type": "text", "text": prompt.into() } }]),
        );
        params.insert("maxTokens".into(), max_tokens.into());
        let result = self.sample(params).await?;
        let content = &result["content"];
        let text = if let Some(items) = content.as_array() {
            items
                .iter()
                .filter_map(|c| c["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        } else {
            content["text"].as_str().unwrap_or_default().to_owned()
        };
        Ok(text)
    }

    /// Asks the client for its roots (`roots/list`) and returns the raw result (`{roots}`).
    pub async fn list_roots(&self) -> Result<Value, ToolError> {
        self.request(InputRequest {
            method: "roots/list".into(),
            params: json!({}),
            key: None,
        })
        .await
    }
}

/// A type a `#[task_tool]` function can take as a parameter without it becoming part of the
/// tool's input.
///
/// Building the value may fail, as axum's `FromRequestParts` may: the [`Rejection`] is
/// what the caller is told, as a tool error, and the tool does not run. A parameter that
/// may be absent takes `Option<T>` (`None` instead of the rejection) or
/// `Result<T, T::Rejection>` (the tool decides), with no `Option` inside `T` and no panic.
///
/// [`Rejection`]: FromTaskContext::Rejection
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be injected into a `#[task_tool]` function",
    note = "injectable types: `Progress`, `Steps`, `TaskContext`, `Client`, `CancellationToken`, `Principal`, `State<T>`, and types of your own that implement `FromTaskContext` (marked `#[inject]`); other parameters become fields of the tool's input"
)]
pub trait FromTaskContext: Sized {
    /// Why the value could not be built; the caller sees it as the call's tool error.
    /// `Infallible` for a value that is always there.
    type Rejection: Into<ToolError>;

    /// Builds the value from the call's context.
    fn from_task_context(cx: &TaskContext) -> Result<Self, Self::Rejection>;

    /// The application state the value needs, checked when the server is built.
    fn required_state() -> Option<crate::state::StateRequirement> {
        None
    }
}

impl<T: Send + Sync + 'static> FromTaskContext for crate::State<T> {
    /// Only when the tool runs outside a server that checked its state (`build()` refuses
    /// a server whose tools need state it was not given).
    type Rejection = ToolError;

    fn from_task_context(cx: &TaskContext) -> Result<Self, ToolError> {
        cx.state::<T>().ok_or_else(|| {
            ToolError::new(format!(
                "no state of type {} is registered on this server",
                std::any::type_name::<T>()
            ))
        })
    }

    fn required_state() -> Option<crate::state::StateRequirement> {
        Some(crate::state::StateRequirement::of::<T>())
    }
}

impl FromTaskContext for TaskContext {
    type Rejection = Infallible;

    fn from_task_context(cx: &TaskContext) -> Result<Self, Infallible> {
        Ok(cx.clone())
    }
}

impl FromTaskContext for Progress {
    type Rejection = Infallible;

    fn from_task_context(cx: &TaskContext) -> Result<Self, Infallible> {
        Ok(cx.progress())
    }
}

impl FromTaskContext for Steps {
    type Rejection = Infallible;

    fn from_task_context(cx: &TaskContext) -> Result<Self, Infallible> {
        Ok(cx.steps())
    }
}

impl FromTaskContext for Client {
    type Rejection = Infallible;

    fn from_task_context(cx: &TaskContext) -> Result<Self, Infallible> {
        Ok(cx.client())
    }
}

/// The caller, for a tool that needs one: an anonymous call is refused with a tool error
/// (take `Option<Principal>` where anonymous calls are allowed).
impl FromTaskContext for crate::principal::Principal {
    type Rejection = ToolError;

    fn from_task_context(cx: &TaskContext) -> Result<Self, ToolError> {
        cx.principal().cloned().ok_or_else(|| {
            ToolError::new("this tool needs an authenticated caller, and the call is anonymous")
        })
    }
}

impl FromTaskContext for CancellationToken {
    type Rejection = Infallible;

    fn from_task_context(cx: &TaskContext) -> Result<Self, Infallible> {
        Ok(cx.cancellation().clone())
    }
}

/// `None` where `T` is rejected: for values a call may lack (a principal, say).
impl<T: FromTaskContext> FromTaskContext for Option<T> {
    type Rejection = Infallible;

    fn from_task_context(cx: &TaskContext) -> Result<Self, Infallible> {
        Ok(T::from_task_context(cx).ok())
    }
}

/// `T`'s rejection handed to the tool, to decide for itself.
impl<T: FromTaskContext> FromTaskContext for Result<T, T::Rejection> {
    type Rejection = Infallible;

    fn from_task_context(cx: &TaskContext) -> Result<Self, Infallible> {
        Ok(T::from_task_context(cx))
    }
}

/// The backend of a context that reaches no client.
struct NoClient;

impl CallBackend for NoClient {
    fn input(&self, request: InputRequest) -> BoxFuture<'_, Result<Value, ToolError>> {
        let capability = request.capability();
        Box::pin(async move { Err(ToolError::missing_capability(capability)) })
    }

    fn progress(&self, _: f64, _: Option<f64>, _: Option<&str>) {}

    fn log(&self, _: LogLevel, _: Option<&str>, _: Value) {}
}
