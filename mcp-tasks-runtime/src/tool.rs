//! Tools: their definition, how their return values become results, and the registry that
//! collects `#[task_tool]` functions from the whole binary.

use crate::context::{BoxFuture, TaskContext};
use crate::error::ToolError;
use crate::model::{CallToolResult, JsonObject, TaskSupport, ToolAnnotations};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

mod result;
pub use result::{IntoToolResult, Json};

/// The future a tool handler returns.
pub type ToolFuture = BoxFuture<'static, Result<CallToolResult, ToolError>>;

/// The function behind a tool: context and raw arguments in, result out.
pub type ToolHandler = Arc<dyn Fn(TaskContext, JsonObject) -> ToolFuture + Send + Sync>;

/// What happens to a task of this tool that was still running when the server stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RestartPolicy {
    /// The task ends `failed` with `-32603` ("interrupted by a server restart").
    #[default]
    Fail,
    /// The task runs again from its stored arguments, keeping its id: for tools declared
    /// idempotent, or made of durable steps ([`Tool::durable_steps`]), whose finished steps
    /// are not done again.
    Rerun,
}

/// What a 2026-07-28 synchronous call does when the client answers a question but the call
/// that asked it can no longer be resumed: it timed out while waiting, the server restarted,
/// or the retry reached another server process.
///
/// While the suspended call is still there the answer always resumes it; this policy only
/// decides what a retry does once it is gone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResumePolicy {
    /// The retry is answered with a `-32602` error that says the interaction expired and must
    /// start over (without `requestState`). Nothing the tool did runs twice.
    #[default]
    Fail,
    /// The tool runs again from the start and finds every answer given so far (idempotent
    /// tools only: whatever it did before its first question happens again).
    Rerun,
}

/// Which calls of a unique tool are the same task ([`Tool::unique`]).
///
/// A call equal to an unfinished task of the same tool and the same owner gets that task back,
/// and nothing new starts (as River's unique jobs and BullMQ's deduplication do). Calls are
/// equal when the arguments [`by`](Self::by) names are equal (all of them, by default); an
/// argument that is missing counts as `null`. With a [`window`](Self::within), a call also
/// gets back an equal task created in the same window, finished or not: windows are counted
/// from the Unix epoch, so `within(1 hour)` makes at most one task an hour per set of equal
/// arguments. Uniqueness holds across every process sharing the store, and never across
/// owners: a caller only ever gets back a task it could already see.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unique {
    /// The arguments compared; `None` compares all of them.
    pub args: Option<Vec<String>>,
    /// The window; `None` covers unfinished tasks only.
    pub window: Option<Duration>,
}

impl Unique {
    /// Calls with equal arguments (all of them) are the same task while it is unfinished.
    pub fn all() -> Self {
        Self::default()
    }

    /// Calls equal in the arguments `names` are the same task while it is unfinished.
    pub fn by<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            args: Some(names.into_iter().map(Into::into).collect()),
            window: None,
        }
    }

    /// Equal calls in the same `window` (counted from the Unix epoch) are the same task,
    /// whether it has finished or not.
    pub fn within(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }
}

/// Why a tool definition or a set of tools is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolDefError {
    /// The name breaks the `[A-Za-z0-9_.-]{1,64}` rule.
    #[error("invalid tool name {0:?}: use 1 to 64 of `A-Z a-z 0-9 _ - .`")]
    InvalidName(String),
    /// The input schema's root is not `type: object`.
    #[error("the input schema of tool {0:?} must have `\"type\": \"object\"` at its root")]
    InputNotObject(String),
    /// The output schema's root is not `type: object`: MCP requires `structuredContent` to be
    /// a JSON object.
    #[error(
        "the output schema of tool {0:?} must have `\"type\": \"object\"` at its root, as MCP \
         requires of structured output: wrap the value in a struct with named fields"
    )]
    OutputNotObject(String),
    /// Two tools share a name.
    #[error("duplicate tool name {name:?}: defined at {first} and at {second}")]
    DuplicateTool {
        /// The shared name.
        name: String,
        /// Where the first one was defined.
        first: String,
        /// Where the second one was defined.
        second: String,
    },
    /// `rerun` after a restart was asked of a tool neither declared idempotent nor made of
    /// durable steps.
    #[error(
        "tool {0:?} can only rerun after a restart when it is declared idempotent or uses durable steps"
    )]
    RerunNotIdempotent(String),
    /// `rerun` of a call that can no longer be resumed was asked of a tool not declared
    /// idempotent.
    #[error(
        "tool {0:?} can only rerun a call it can no longer resume when it is declared idempotent"
    )]
    RerunUnresumableNotIdempotent(String),
    /// [`Unique::args`] names an argument the tool's input schema does not have.
    #[error(
        "tool {tool:?} is unique by the argument {arg:?}, which is not a property of its input schema"
    )]
    UniqueArgUnknown {
        /// The tool.
        tool: String,
        /// The argument named.
        arg: String,
    },
    /// A scope the tool needs is empty or holds whitespace (an OAuth scope is one token).
    #[error(
        "tool {tool:?} needs the scope {scope:?}, which is not a scope: scopes are non-empty and hold no whitespace"
    )]
    InvalidScope {
        /// The tool.
        tool: String,
        /// The scope named.
        scope: String,
    },
    /// A tool that never runs as a task (task support `forbidden`) was made unique: only a
    /// task can be handed back to an equal call.
    #[error(
        "tool {0:?} is unique, but it never runs as a task (task support \"forbidden\"): only tasks can be unique"
    )]
    UniqueForbidden(String),
}

/// Checks a tool name: 1 to 64 characters of `A-Z a-z 0-9 _ - .`.
///
/// This is the only copy of the rule: tool registration checks it at runtime, and the code
/// `#[task_tool]` generates checks it at compile time (a `const` that calls this function).
pub const fn is_valid_tool_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > 64 {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')) {
            return false;
        }
        i += 1;
    }
    true
}

/// A tool: its metadata and its handler.
#[derive(Clone)]
pub struct Tool {
    pub(crate) name: Arc<str>,
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) input_schema: Arc<JsonObject>,
    pub(crate) output_schema: Option<Arc<JsonObject>>,
    pub(crate) annotations: ToolAnnotations,
    pub(crate) task_support: TaskSupport,
    pub(crate) poll_interval: Duration,
    pub(crate) ttl: Option<Duration>,
    pub(crate) on_restart: RestartPolicy,
    pub(crate) on_unresumable: ResumePolicy,
    pub(crate) deadline: Option<Duration>,
    pub(crate) max_concurrency: Option<usize>,
    pub(crate) prelude: bool,
    pub(crate) durable_steps: bool,
    pub(crate) unique: Option<Unique>,
    pub(crate) scopes: Vec<String>,
    pub(crate) handler: ToolHandler,
    pub(crate) validator: Option<Arc<jsonschema::Validator>>,
    pub(crate) output_validator: Option<Arc<jsonschema::Validator>>,
    pub(crate) defined_at: String,
    /// The application state the handler needs, checked when the server is built.
    pub(crate) state: Vec<crate::state::StateRequirement>,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("task_support", &self.task_support)
            .field("defined_at", &self.defined_at)
            .finish_non_exhaustive()
    }
}

/// The default interval a client is asked to poll a task at.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The default time a task is kept, counted from its creation.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);

impl Tool {
    /// Starts a tool with raw JSON arguments. The arguments are validated against the input
    /// schema before the handler runs; a mismatch is a tool error the model can read.
    ///
    /// ```
    /// use mcp_tasks_runtime::{Tool, model::{CallToolResult, Content}};
    /// let tool = Tool::new("echo", |_cx, args| async move {
    ///     let text = args.get("text").and_then(|v| v.as_str()).unwrap_or_default();
    ///     Ok(CallToolResult::success(vec![Content::text(text)]))
    /// })
    /// .description("Echo the text back.")
    /// .input_schema(serde_json::json!({
    ///     "type": "object",
    ///     "properties": { "text": { "type": "string" } },
    ///     "required": ["text"]
    /// }));
    /// assert_eq!(tool.name(), "echo");
    /// ```
    pub fn new<F, Fut>(name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(TaskContext, JsonObject) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<CallToolResult, ToolError>> + Send + 'static,
    {
        let handler: ToolHandler = Arc::new(move |cx, args| Box::pin(handler(cx, args)));
        let mut schema = JsonObject::new();
        schema.insert("type".into(), "object".into());
        Self {
            name: name.into().into(),
            title: None,
            description: None,
            input_schema: Arc::new(schema),
            output_schema: None,
            annotations: ToolAnnotations::default(),
            task_support: TaskSupport::Forbidden,
            poll_interval: DEFAULT_POLL_INTERVAL,
            ttl: Some(DEFAULT_TTL),
            on_restart: RestartPolicy::Fail,
            on_unresumable: ResumePolicy::Fail,
            deadline: None,
            max_concurrency: None,
            prelude: false,
            durable_steps: false,
            unique: None,
            scopes: Vec::new(),
            handler,
            validator: None,
            output_validator: None,
            defined_at: "the server builder".into(),
            state: Vec::new(),
        }
        .validated()
    }

    /// Starts a tool whose arguments deserialize into `A`; the input schema comes from `A`.
    pub fn typed<A, R, F, Fut>(name: impl Into<String>, handler: F) -> Self
    where
        A: ToolInput,
        R: IntoToolResult,
        F: Fn(TaskContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let mut tool = Self::new(name, move |cx, args| {
            let handler = Arc::clone(&handler);
            async move {
                let args = A::parse(args)?;
                handler(cx, args).await.into_tool_result()
            }
        });
        tool.input_schema = Arc::new(A::input_schema());
        tool.output_schema = R::output_schema().map(Arc::new);
        tool.output_validator = compile(tool.output_schema.as_deref());
        tool.validator = None;
        tool
    }

    fn validated(mut self) -> Self {
        self.validator = jsonschema::validator_for(&Value::Object((*self.input_schema).clone()))
            .ok()
            .map(Arc::new);
        self
    }

    pub(crate) fn output_validator(&self) -> Option<&jsonschema::Validator> {
        self.output_validator.as_deref()
    }

    /// Whether `other` is this tool as far as a run of it goes (a copy of it): the same
    /// name, function, deadline and output schema.
    pub(crate) fn is_same(&self, other: &Tool) -> bool {
        fn same<T: ?Sized>(a: &Arc<T>, b: &Arc<T>) -> bool {
            std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
        }
        self.name == other.name
            && same(&self.handler, &other.handler)
            && self.deadline == other.deadline
            && match (&self.output_validator, &other.output_validator) {
                (Some(a), Some(b)) => same(a, b),
                (None, None) => true,
                _ => false,
            }
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The task mode.
    pub fn mode(&self) -> TaskSupport {
        self.task_support
    }

    /// Sets a display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the description the model reads.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the input schema (its root must be `type: object`).
    pub fn input_schema(mut self, schema: Value) -> Self {
        if let Value::Object(obj) = schema {
            self.input_schema = Arc::new(obj);
        }
        self.validated()
    }

    /// Sets the output schema; `structuredContent` is then checked against it.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = schema.as_object().cloned().map(Arc::new);
        self.output_validator = compile(self.output_schema.as_deref());
        self
    }

    /// Sets the behaviour hints.
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// Sets whether the tool runs as a task.
    pub fn task_support(mut self, mode: TaskSupport) -> Self {
        self.task_support = mode;
        self
    }

    /// Sets the poll interval suggested to clients of this tool's tasks.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets how long this tool's tasks are kept after creation (`None`: until deleted).
    pub fn ttl(mut self, ttl: Option<Duration>) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets a deadline for one run of a task of this tool: past it the task is cancelled and
    /// ends `failed`. Separate from the TTL, which only says how long the task is kept.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Declares that the handler takes application state of type `T`
    /// ([`TaskContext::state`]); building a server without it registered fails, naming this
    /// tool and the type.
    pub fn requires_state<T: Send + Sync + 'static>(mut self) -> Self {
        let requirement = crate::state::StateRequirement::of::<T>();
        if !self.state.contains(&requirement) {
            self.state.push(requirement);
        }
        self
    }

    /// Sets how many tasks of this tool may run at once (others wait in the queue).
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = Some(n.max(1));
        self
    }

    /// Declares a synchronous prelude: in the 2026-07-28 era a call runs inline, asking its
    /// questions in `InputRequiredResult` rounds, until it awaits
    /// [`TaskContext::detach`](crate::TaskContext::detach); only then does it become a task.
    pub fn prelude(mut self, prelude: bool) -> Self {
        self.prelude = prelude;
        self
    }

    /// Declares that the tool keeps its progress in durable steps ([`Steps`](crate::Steps)):
    /// a rerun finds the outputs of the steps an earlier run finished and does not do them
    /// again. Such a tool may rerun after a restart ([`RestartPolicy::Rerun`]) without being
    /// declared idempotent. A `#[task_tool]` function that takes `Steps` is declared so.
    ///
    /// ```
    /// use mcp_tasks_runtime::{RestartPolicy, Tool, model::{CallToolResult, TaskSupport}};
    /// let tool = Tool::new("order", |cx, _| async move {
    ///     let steps = cx.steps();
    ///     let receipt: String = steps.run("charge", || async { Ok("r-1".to_owned()) }).await?;
    ///     steps.run("mail", || async { Ok(()) }).await?;
    ///     Ok(CallToolResult::default())
    /// })
    /// .task_support(TaskSupport::Required)
    /// .durable_steps(true)
    /// .on_restart(RestartPolicy::Rerun);
    /// assert_eq!(tool.name(), "order");
    /// ```
    pub fn durable_steps(mut self, durable_steps: bool) -> Self {
        self.durable_steps = durable_steps;
        self
    }

    /// Whether running the tool again does no harm: it is declared idempotent, or made of
    /// durable steps. Such a tool may rerun after a restart, and may start before its
    /// task is stored (a create that then fails is answered with an error, and the call
    /// sent again runs it again).
    pub(crate) fn may_run_again(&self) -> bool {
        self.annotations.idempotent_hint == Some(true) || self.durable_steps
    }

    /// Makes the tool unique: a call equal to an unfinished task of this tool (and of the
    /// same owner) gets that task back instead of starting another (see [`Unique`]).
    ///
    /// ```
    /// use mcp_tasks_runtime::{Tool, Unique, model::CallToolResult};
    /// use std::time::Duration;
    /// let tool = Tool::new("reindex", |_, _| async { Ok(CallToolResult::default()) })
    ///     .unique(Unique::by(["index"]).within(Duration::from_secs(600)));
    /// assert_eq!(tool.name(), "reindex");
    /// ```
    pub fn unique(mut self, unique: Unique) -> Self {
        self.unique = Some(unique);
        self
    }

    /// Lets only callers whose principal holds every scope of `scopes` call the tool, and
    /// only while they hold them read, answer or cancel its tasks: a call without them is
    /// refused (over HTTP `403` with `error="insufficient_scope"` naming them), and so is
    /// every later `tasks/get`, `tasks/result`, `tasks/update` and `tasks/cancel` of its
    /// tasks made with a token that lost one. Anonymous callers never hold a scope.
    ///
    /// ```
    /// use mcp_tasks_runtime::{Tool, model::CallToolResult};
    /// let tool = Tool::new("publish", |_, _| async { Ok(CallToolResult::default()) })
    ///     .scopes(["reports:write"]);
    /// assert_eq!(tool.required_scopes(), ["reports:write"]);
    /// ```
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for scope in scopes {
            let scope = scope.into();
            if !self.scopes.contains(&scope) {
                self.scopes.push(scope);
            }
        }
        self
    }

    /// The scopes a caller needs (see [`scopes`](Self::scopes)); empty for a public tool.
    pub fn required_scopes(&self) -> &[String] {
        &self.scopes
    }

    /// `true` when `principal` may call the tool: it needs no scope, or the principal holds
    /// every one it needs.
    pub fn permits(&self, principal: Option<&crate::principal::Principal>) -> bool {
        self.scopes.is_empty() || principal.is_some_and(|p| p.has_scopes(&self.scopes))
    }

    /// Refuses a call by `principal` when it lacks a scope the tool needs, naming those.
    pub(crate) fn check_caller(
        &self,
        principal: Option<&crate::principal::Principal>,
    ) -> Result<(), crate::error::Error> {
        if self.permits(principal) {
            return Ok(());
        }
        let missing = self
            .scopes
            .iter()
            .filter(|s| !principal.is_some_and(|p| p.has_scope(s)))
            .cloned()
            .collect();
        Err(crate::error::Error::InsufficientScope(missing))
    }

    /// Sets what happens to this tool's interrupted tasks after a restart.
    pub fn on_restart(mut self, policy: RestartPolicy) -> Self {
        self.on_restart = policy;
        self
    }

    /// Sets what a 2026-07-28 synchronous call does when the client answers a question after
    /// the suspended call is gone (see [`ResumePolicy`]). [`ResumePolicy::Rerun`] needs the
    /// tool to be declared idempotent (`annotations.idempotent_hint`).
    ///
    /// ```
    /// use mcp_tasks_runtime::{ResumePolicy, Tool, model::{CallToolResult, ToolAnnotations}};
    /// let tool = Tool::new("lookup", |_, _| async { Ok(CallToolResult::default()) })
    ///     .annotations(ToolAnnotations { idempotent_hint: Some(true), ..Default::default() })
    ///     .on_unresumable(ResumePolicy::Rerun);
    /// assert_eq!(tool.name(), "lookup");
    /// ```
    pub fn on_unresumable(mut self, policy: ResumePolicy) -> Self {
        self.on_unresumable = policy;
        self
    }

    pub(crate) fn check(&self) -> Result<(), ToolDefError> {
        if !is_valid_tool_name(&self.name) {
            return Err(ToolDefError::InvalidName(self.name.to_string()));
        }
        if self.input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(ToolDefError::InputNotObject(self.name.to_string()));
        }
        if let Some(schema) = &self.output_schema
            && schema.get("type").and_then(Value::as_str) != Some("object")
        {
            return Err(ToolDefError::OutputNotObject(self.name.to_string()));
        }
        if self.on_restart == RestartPolicy::Rerun && !self.may_run_again() {
            return Err(ToolDefError::RerunNotIdempotent(self.name.to_string()));
        }
        if self.on_unresumable == ResumePolicy::Rerun
            && self.annotations.idempotent_hint != Some(true)
        {
            return Err(ToolDefError::RerunUnresumableNotIdempotent(
                self.name.to_string(),
            ));
        }
        if let Some(unique) = &self.unique {
            self.check_unique(unique)?;
        }
        if let Some(bad) = self
            .scopes
            .iter()
            .find(|s| s.is_empty() || s.chars().any(char::is_whitespace))
        {
            return Err(ToolDefError::InvalidScope {
                tool: self.name.to_string(),
                scope: bad.clone(),
            });
        }
        Ok(())
    }

    /// A unique tool runs as a task, and is unique by arguments it has.
    fn check_unique(&self, unique: &Unique) -> Result<(), ToolDefError> {
        if self.task_support == TaskSupport::Forbidden {
            return Err(ToolDefError::UniqueForbidden(self.name.to_string()));
        }
        let properties = self
            .input_schema
            .get("properties")
            .and_then(Value::as_object);
        let has = |arg: &str| properties.is_some_and(|p| p.contains_key(arg));
        match unique.args.iter().flatten().find(|arg| !has(arg)) {
            Some(unknown) => Err(ToolDefError::UniqueArgUnknown {
                tool: self.name.to_string(),
                arg: unknown.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Checks raw arguments against the input schema, when the handler does not parse them
    /// into a typed struct itself; hands them back unchanged when they pass.
    pub(crate) fn check_arguments(&self, args: JsonObject) -> Result<JsonObject, ToolError> {
        check_arguments(self.validator.as_deref(), args)
    }

    /// What a call needs of this tool to run it, without a copy of the tool.
    pub(crate) fn runner(&self) -> Runner {
        Runner {
            handler: Arc::clone(&self.handler),
            validator: self.validator.clone(),
        }
    }

    /// The tool as listed in `tools/list` (without era-specific fields).
    pub(crate) fn describe(&self) -> JsonObject {
        let mut obj = JsonObject::new();
        obj.insert("name".into(), Value::String(self.name.to_string()));
        if let Some(title) = &self.title {
            obj.insert("title".into(), title.clone().into());
        }
        if let Some(d) = &self.description {
            obj.insert("description".into(), d.clone().into());
        }
        obj.insert(
            "inputSchema".into(),
            Value::Object((*self.input_schema).clone()),
        );
        if let Some(schema) = &self.output_schema {
            obj.insert("outputSchema".into(), Value::Object((**schema).clone()));
        }
        if !self.annotations.is_empty() {
            obj.insert(
                "annotations".into(),
                serde_json::to_value(&self.annotations).unwrap_or_default(),
            );
        }
        obj
    }
}

fn compile(schema: Option<&JsonObject>) -> Option<Arc<jsonschema::Validator>> {
    let schema = Value::Object(schema?.clone());
    jsonschema::validator_for(&schema).ok().map(Arc::new)
}

/// Reads raw arguments into a typed struct; a mismatch is a tool error that says what is wrong.
pub fn parse_arguments<A: DeserializeOwned>(args: JsonObject) -> Result<A, ToolError> {
    serde_json::from_value(Value::Object(args)).map_err(ToolError::invalid_arguments)
}

/// A type a tool's arguments are read into as a whole: the `#[input]` parameter of a
/// `#[task_tool]`, or the argument type of [`Tool::typed`]. Every type that derives
/// `serde::Deserialize` and `schemars::JsonSchema` is one; the input schema comes from
/// `JsonSchema`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the input of a tool",
    label = "the tool's arguments are read into this type",
    note = "a tool's input type needs `#[derive(serde::Deserialize, schemars::JsonSchema)]`"
)]
pub trait ToolInput: Sized + 'static {
    /// The tool's input schema.
    fn input_schema() -> JsonObject;

    /// Reads the raw arguments; a mismatch is a tool error that says what is wrong.
    fn parse(args: JsonObject) -> Result<Self, ToolError>;
}

#[diagnostic::do_not_recommend]
impl<T: DeserializeOwned + schemars::JsonSchema + 'static> ToolInput for T {
    fn input_schema() -> JsonObject {
        crate::schema::input_schema::<T>()
    }

    fn parse(args: JsonObject) -> Result<Self, ToolError> {
        parse_arguments(args)
    }
}

/// A type a parameter of a `#[task_tool]` function may have when it becomes one field of the
/// tool's input: every `schemars::JsonSchema` type (with `serde::Deserialize` for reading it).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a field of a tool's input: it has no JSON Schema",
    label = "this parameter becomes a field of the tool's input",
    note = "add `#[derive(serde::Deserialize, schemars::JsonSchema)]` to `{Self}`"
)]
pub trait InputField {
    /// The field's schema.
    fn field_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema;
}

#[diagnostic::do_not_recommend]
impl<T: schemars::JsonSchema> InputField for T {
    fn field_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        generator.subschema_for::<T>()
    }
}

/// A tool registered by `#[task_tool]`, collected with `inventory`.
#[doc(hidden)]
#[derive(Debug)]
pub struct ToolRegistration {
    pub name: &'static str,
    pub title: Option<&'static str>,
    pub description: &'static str,
    pub task_support: TaskSupport,
    pub poll_interval_ms: u64,
    /// `None`: kept until deleted.
    pub ttl_ms: Option<u64>,
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
    pub rerun_on_restart: bool,
    /// `on_unresumable = "rerun"`.
    pub rerun_unresumable: bool,
    pub prelude: bool,
    /// The function takes `Steps`.
    pub durable_steps: bool,
    /// `unique`: `Some(None)` compares every argument, `Some(Some(names))` those named.
    pub unique: Option<Option<&'static [&'static str]>>,
    /// `unique_window`, in milliseconds.
    pub unique_window_ms: Option<u64>,
    /// `scopes`: what a caller's principal must hold.
    pub scopes: &'static [&'static str],
    pub input_schema: fn() -> JsonObject,
    pub output_schema: fn() -> Option<JsonObject>,
    /// The application state the function's parameters need.
    pub state: fn() -> Vec<crate::state::StateRequirement>,
    pub call: fn(TaskContext, JsonObject) -> ToolFuture,
    pub module_path: &'static str,
    pub file: &'static str,
    pub line: u32,
}

inventory::collect!(ToolRegistration);

impl ToolRegistration {
    /// The tool this registration describes.
    pub fn to_tool(&self) -> Tool {
        let call = self.call;
        let output_schema = (self.output_schema)().map(Arc::new);
        Tool {
            output_validator: compile(output_schema.as_deref()),
            name: self.name.into(),
            title: self.title.map(str::to_owned),
            description: Some(self.description.to_owned()).filter(|d| !d.is_empty()),
            input_schema: Arc::new((self.input_schema)()),
            output_schema,
            annotations: ToolAnnotations {
                title: None,
                read_only_hint: self.read_only,
                destructive_hint: self.destructive,
                idempotent_hint: self.idempotent,
                open_world_hint: self.open_world,
            },
            task_support: self.task_support,
            poll_interval: Duration::from_millis(self.poll_interval_ms),
            ttl: self.ttl_ms.map(Duration::from_millis),
            on_restart: if self.rerun_on_restart {
                RestartPolicy::Rerun
            } else {
                RestartPolicy::Fail
            },
            on_unresumable: if self.rerun_unresumable {
                ResumePolicy::Rerun
            } else {
                ResumePolicy::Fail
            },
            deadline: None,
            max_concurrency: None,
            prelude: self.prelude,
            durable_steps: self.durable_steps,
            unique: self.unique.map(|args| {
                let unique = match args {
                    Some(names) => Unique::by(names.iter().copied()),
                    None => Unique::all(),
                };
                match self.unique_window_ms {
                    Some(ms) => unique.within(Duration::from_millis(ms)),
                    None => unique,
                }
            }),
            scopes: self.scopes.iter().map(|s| (*s).to_owned()).collect(),
            handler: Arc::new(call),
            validator: None,
            defined_at: format!("{} ({}:{})", self.module_path, self.file, self.line),
            state: (self.state)(),
        }
    }
}

/// A tool's handler and its argument check: what one call needs to run the tool.
#[derive(Clone)]
pub(crate) struct Runner {
    handler: ToolHandler,
    validator: Option<Arc<jsonschema::Validator>>,
}

impl Runner {
    /// Checks the arguments and starts the handler on them.
    pub(crate) fn call(self, cx: TaskContext, args: JsonObject) -> ToolFuture {
        match check_arguments(self.validator.as_deref(), args) {
            Ok(args) => (self.handler)(cx, args),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// Checks arguments against an input schema's validator. The arguments are validated in
/// place (wrapped as a JSON value and unwrapped again), never copied.
fn check_arguments(
    validator: Option<&jsonschema::Validator>,
    args: JsonObject,
) -> Result<JsonObject, ToolError> {
    let Some(validator) = validator else {
        return Ok(args);
    };
    let value = Value::Object(args);
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{path}: {e}")
            }
        })
        .collect();
    if !problems.is_empty() {
        return Err(ToolError::invalid_arguments(problems.join("; ")));
    }
    match value {
        Value::Object(args) => Ok(args),
        _ => unreachable!("the arguments were wrapped as an object above"),
    }
}

/// Every tool of a server, by name.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    tools: BTreeMap<Arc<str>, Tool>,
}

impl Registry {
    /// Every `#[task_tool]` function linked into this binary.
    pub fn from_inventory() -> Result<Self, ToolDefError> {
        let mut registry = Self::default();
        for registration in inventory::iter::<ToolRegistration> {
            registry.insert(registration.to_tool())?;
        }
        Ok(registry)
    }

    /// Adds a tool; a second tool with the same name is an error naming both.
    pub fn insert(&mut self, tool: Tool) -> Result<(), ToolDefError> {
        tool.check()?;
        if let Some(existing) = self.tools.get(&tool.name) {
            return Err(ToolDefError::DuplicateTool {
                name: tool.name.to_string(),
                first: existing.defined_at.clone(),
                second: tool.defined_at.clone(),
            });
        }
        self.tools.insert(Arc::clone(&tool.name), tool);
        Ok(())
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// All tools, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values()
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// `true` when there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[cfg(test)]
mod tests;
