//! What a running tool can reach: its progress reporter, its cancellation token, the client
//! (for elicitation, sampling and roots) and the log.
//!
//! The same types serve a plain call and a task in either protocol era. The runtime plugs in
//! a `CallBackend` that knows where progress goes and how a question reaches the client:
//! a server-to-client request (2025-11-25), an `InputRequiredResult` round (2026-07-28), or a
//! task parked in `input_required`.

use crate::error::ToolError;
use crate::model::{ElicitResult, InputRequest, JsonObject, LogLevel};
use crate::sync::LockExt;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
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
}

struct Inner {
    tool: Arc<str>,
    task_id: Mutex<Option<String>>,
    cancel: CancellationToken,
    client_capabilities: Arc<Value>,
    principal: Option<Arc<str>>,
    backend: Arc<dyn CallBackend>,
    last_progress: Mutex<Option<f64>>,
    state: crate::state::StateMap,
}

/// Everything a tool call can reach. Cheap to clone.
///
/// Take it as a parameter of a `#[task_tool]` function, or take only the parts you need:
/// [`Progress`], [`Client`] or [`CancellationToken`].
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
        principal: Option<Arc<str>>,
        backend: Arc<dyn CallBackend>,
        state: crate::state::StateMap,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                tool,
                task_id: Mutex::new(None),
                cancel,
                client_capabilities,
                principal,
                backend,
                last_progress: Mutex::new(None),
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

    pub(crate) fn set_task_id(&self, id: &str) {
        *self.inner.task_id.locked() = Some(id.to_owned());
    }

    /// The name of the tool being called.
    pub fn tool_name(&self) -> &str {
        &self.inner.tool
    }

    /// The task id when the call runs as a task.
    pub fn task_id(&self) -> Option<String> {
        self.inner.task_id.locked().clone()
    }

    /// The authenticated principal that made the call, if the transport has one.
    pub fn principal(&self) -> Option<&str> {
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
        let next = self
            .cx
            .inner
            .last_progress
            .locked()
            .map_or(0.0, |p| p + 1.0);
        self.send(next, None, Some(message.as_ref()));
    }

    fn send(&self, done: f64, total: Option<f64>, message: Option<&str>) {
        {
            let mut last = self.cx.inner.last_progress.locked();
            if last.is_some_and(|l| done <= l) || !done.is_finite() {
                return;
            }
            *last = Some(done);
        }
        self.cx.inner.backend.progress(done, total, message);
    }
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
        self.cx.inner.backend.input(request).await
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
    note = "injectable types: `Progress`, `TaskContext`, `Client`, `CancellationToken`, `State<T>`, and types of your own that implement `FromTaskContext` (marked `#[inject]`); other parameters become fields of the tool's input"
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

impl FromTaskContext for Client {
    type Rejection = Infallible;

    fn from_task_context(cx: &TaskContext) -> Result<Self, Infallible> {
        Ok(cx.client())
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
