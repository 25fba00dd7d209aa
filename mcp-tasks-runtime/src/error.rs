//! Errors, and the one place where they become JSON-RPC errors.
//!
//! - [`Error`] is what the server answers with: every variant maps to exactly one JSON-RPC
//!   code in `impl From<Error> for ErrorObject` below.
//! - [`ToolError`] is what a tool returns when it fails; it is itself a `std::error::Error`.
//!   It converts with `?` from `anyhow::Error`, `Box<dyn Error + Send + Sync>`,
//!   `std::io::Error`, `serde_json::Error`, `String` and `&str`; such errors become a tool
//!   result with `isError: true`. A [`ProtocolError`] (or [`ToolError::protocol`]) becomes a
//!   JSON-RPC error instead. A tool may also return `Result<T, E>` for any error type `E`
//!   (its own, `anyhow::Error`, a boxed error), which converts the same way.

use crate::jsonrpc::{self, ErrorObject};
use crate::model::{CallToolResult, Content};
use serde_json::{Value, json};

/// An error the server answers a request with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request is not a valid JSON-RPC request for this method.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The method does not exist in the request's protocol era.
    #[error("method not found: {0}")]
    MethodNotFound(String),
    /// The params are missing or malformed.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// `tools/call` named a tool the server does not have.
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// `resources/read` named a URI no resource or template serves: `-32602` with the URI in
    /// `data` (SEP-2164), which the 2025-11-25 wire answers with its conventional `-32002`.
    #[error("resource not found: {0}")]
    ResourceNotFound(String),
    /// A stateful session sent a request before `initialize`.
    #[error("server not initialized: send `initialize` first")]
    NotInitialized,
    /// The request's protocol version is not one the server supports.
    #[error("unsupported protocol version {requested:?}")]
    UnsupportedVersion {
        /// The version the client asked for.
        requested: String,
        /// The versions the server supports.
        supported: Vec<String>,
    },
    /// The request needs a client capability it did not declare.
    #[error("missing required client capability")]
    MissingCapability {
        /// The capabilities needed, shaped like `ClientCapabilities`.
        required: Value,
    },
    /// An HTTP header disagrees with the request body.
    #[error("header mismatch: {0}")]
    HeaderMismatch(String),
    /// A tool asked for a JSON-RPC error.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// A tool panicked.
    #[error("tool {0:?} panicked")]
    ToolPanicked(String),
    /// The request was cancelled before it finished.
    #[error("request cancelled")]
    Cancelled,
    /// The server cannot take more work right now.
    #[error("server busy: {0}")]
    Busy(String),
    /// The requestor is over one of its task quotas (`-32000` like [`Error::Busy`], with
    /// `data: {"limit": "liveTasks" | "retainedTasks" | "creationRate", "retryAfterMs": n}`).
    #[error("rate limited: {0}")]
    RateLimited(#[from] crate::quota::QuotaError),
    /// The task store failed: it cannot be reached, timed out or refused the operation
    /// (`-32000` like [`Error::Busy`], with `data: {"retryAfterMs": n}`; on the 2026-07-28
    /// HTTP wire a 503 with `Retry-After`). The request may succeed later.
    #[error("task store unavailable: {0}")]
    StoreUnavailable(String),
    /// This process creates no task of the tool now: its kill switch is on, or the process
    /// is draining for a shutdown (see [`creation`](crate::creation)). `-32000` like
    /// [`Error::Busy`], with `data: {"creation": "paused" | "draining", "retryAfterMs": n}`;
    /// on the 2026-07-28 HTTP wire a 503 with `Retry-After`. Another process, or this one
    /// later, may take the call.
    #[error("{}", creation_off_message(*.0, .1))]
    CreationOff(crate::creation::CreationOff, String),
    /// No task with this id is visible to the caller (unknown, expired or another owner's).
    #[error("failed to retrieve task: task not found")]
    TaskNotFound,
    /// The caller's principal lacks scopes the tool needs (at its call, or at a later request
    /// about one of its tasks); an anonymous caller holds none.
    #[error("insufficient scope: this needs the scope {}", .0.join(" "))]
    InsufficientScope(Vec<String>),
    /// `tasks/cancel` on a task that already ended (2025-11-25).
    #[error("cannot cancel task: already in terminal status '{0}'")]
    TaskTerminal(String),
    /// The store was asked to create the task, then its answer was lost (a timeout, or the
    /// connection dropped before the commit was confirmed), and reading it back did not
    /// settle whether it was stored: the task may exist and run. `-32603` with
    /// `data: {"taskId": id}`, so a client can poll the task; calling the tool again may
    /// create a second task.
    #[error(
        "internal error: cannot tell whether task {task_id} was created: it may exist and \
         run (poll it with tasks/get), and calling the tool again may create a second \
         task: {cause}"
    )]
    TaskOutcomeUnknown {
        /// The id the task has if it was stored.
        task_id: String,
        /// What the store said.
        cause: String,
    },
    /// Anything else that went wrong inside the server.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The retry hint of an answer refused because the task store failed.
const STORE_RETRY_AFTER_MS: u64 = 1000;

/// The retry hint of an answer refused because task creation is off here.
const CREATION_RETRY_AFTER_MS: u64 = 1000;

fn creation_off_message(off: crate::creation::CreationOff, tool: &str) -> String {
    match off {
        crate::creation::CreationOff::Draining => format!(
            "server unavailable: this server is shutting down and creates no task of {tool:?}; try again (another server takes the call)"
        ),
        crate::creation::CreationOff::Paused => format!(
            "server unavailable: task creation is paused for {tool:?} on this server; try again later"
        ),
    }
}

/// The operating system's random number generator failed, so no id could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the operating system's random number generator failed: {0}")]
pub struct RandomError(String);

impl RandomError {
    /// The failure, as the operating system described it.
    pub(crate) fn new(message: String) -> Self {
        Self(message)
    }
}

impl From<RandomError> for Error {
    fn from(error: RandomError) -> Self {
        Self::Internal(error.to_string())
    }
}

impl From<Error> for ErrorObject {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            Error::InvalidRequest(_) | Error::NotInitialized => {
                ErrorObject::new(jsonrpc::INVALID_REQUEST, message)
            }
            Error::MethodNotFound(_) => ErrorObject::new(jsonrpc::METHOD_NOT_FOUND, message),
            Error::Busy(_) => ErrorObject::new(jsonrpc::SERVER_BUSY, message),
            Error::StoreUnavailable(_) => ErrorObject::new(jsonrpc::SERVER_BUSY, message)
                .with_data(json!({ "retryAfterMs": STORE_RETRY_AFTER_MS })),
            Error::CreationOff(off, _) => ErrorObject::new(jsonrpc::SERVER_BUSY, message)
                .with_data(json!({
                    "creation": off.as_str(),
                    "retryAfterMs": CREATION_RETRY_AFTER_MS,
                })),
            Error::RateLimited(quota) => ErrorObject::new(jsonrpc::SERVER_BUSY, message)
                .with_data(json!({
                    "limit": quota.limit_name(),
                    "retryAfterMs": u64::try_from(quota.retry_after().as_nanos().div_ceil(1_000_000))
                        .unwrap_or(u64::MAX),
                })),
            Error::InvalidParams(_)
            | Error::UnknownTool(_)
            | Error::TaskNotFound
            | Error::TaskTerminal(_) => ErrorObject::new(jsonrpc::INVALID_PARAMS, message),
            Error::ResourceNotFound(uri) => {
                ErrorObject::new(jsonrpc::INVALID_PARAMS, message).with_data(json!({ "uri": uri }))
            }
            Error::UnsupportedVersion {
                requested,
                supported,
            } => ErrorObject::new(jsonrpc::UNSUPPORTED_PROTOCOL_VERSION, message)
                .with_data(json!({ "supported": supported, "requested": requested })),
            Error::MissingCapability { required } => {
                ErrorObject::new(jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY, message)
                    .with_data(json!({ "requiredCapabilities": required }))
            }
            Error::HeaderMismatch(_) => ErrorObject::new(jsonrpc::HEADER_MISMATCH, message),
            Error::InsufficientScope(scopes) => {
                ErrorObject::new(jsonrpc::INSUFFICIENT_SCOPE, message)
                    .with_data(json!({ "error": "insufficient_scope", "requiredScopes": scopes }))
            }
            Error::Protocol(p) => ErrorObject {
                code: p.code,
                message: p.message,
                data: p.data,
            },
            Error::TaskOutcomeUnknown { task_id, .. } => {
                ErrorObject::new(jsonrpc::INTERNAL_ERROR, message)
                    .with_data(json!({ "taskId": task_id }))
            }
            Error::ToolPanicked(_) | Error::Cancelled | Error::Internal(_) => {
                ErrorObject::new(jsonrpc::INTERNAL_ERROR, message)
            }
        }
    }
}

/// A JSON-RPC error raised by a tool: the call fails with this code instead of a tool result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ProtocolError {
    /// The JSON-RPC error code.
    pub code: i32,
    /// The message.
    pub message: String,
    /// Extra data.
    pub data: Option<Value>,
}

impl ProtocolError {
    /// A protocol error with a code and a message.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// What a tool returns when it fails.
///
/// The call then ends with a tool result that has `isError: true` and the error's message as
/// text, which the model can read and act on. Use [`ToolError::protocol`] (or return a
/// [`ProtocolError`]) for a JSON-RPC error instead.
///
/// `?` converts `anyhow::Error`, `Box<dyn Error + Send + Sync>`, `std::io::Error`,
/// `serde_json::Error`, `String` and `&str` into a `ToolError`. For other error types,
/// return `Result<T, YourError>` from the tool (any `std::error::Error + Send + Sync`
/// converts) or use [`ToolError::new`]. `ToolError` is a `std::error::Error` itself, so it
/// also goes into an `anyhow::Error` and comes back out unchanged.
#[derive(Debug)]
pub struct ToolError {
    pub(crate) kind: ToolErrorKind,
}

#[derive(Debug)]
pub(crate) enum ToolErrorKind {
    /// A tool-level failure: `isError: true` with this content.
    Failed(Vec<Content>),
    /// The arguments did not match the input schema.
    InvalidArguments(String),
    /// A JSON-RPC error.
    Protocol(ProtocolError),
    /// The call was cancelled.
    Cancelled,
    /// The tool needs a client capability the client did not declare.
    MissingCapability(&'static str),
}

impl ToolError {
    /// A tool failure with a message for the model.
    pub fn new(message: impl std::fmt::Display) -> Self {
        Self::with_content(vec![Content::text(message.to_string())])
    }

    /// A tool failure with arbitrary content.
    pub fn with_content(content: Vec<Content>) -> Self {
        Self {
            kind: ToolErrorKind::Failed(content),
        }
    }

    /// Arguments that do not fit the tool's input schema.
    pub fn invalid_arguments(message: impl std::fmt::Display) -> Self {
        Self {
            kind: ToolErrorKind::InvalidArguments(message.to_string()),
        }
    }

    /// A JSON-RPC error with this code and message instead of a tool result.
    pub fn protocol(code: i32, message: impl Into<String>) -> Self {
        ProtocolError::new(code, message).into()
    }

    /// The call was cancelled by the client.
    pub fn cancelled() -> Self {
        Self {
            kind: ToolErrorKind::Cancelled,
        }
    }

    pub(crate) fn missing_capability(capability: &'static str) -> Self {
        Self {
            kind: ToolErrorKind::MissingCapability(capability),
        }
    }

    /// `true` when this error stands for a cancelled call.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.kind, ToolErrorKind::Cancelled)
    }

    /// The JSON-RPC error this tool error stands for, if it is one.
    pub fn as_protocol(&self) -> Option<&ProtocolError> {
        match &self.kind {
            ToolErrorKind::Protocol(p) => Some(p),
            _ => None,
        }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            ToolErrorKind::Failed(content) => {
                let text: Vec<&str> = content.iter().filter_map(Content::as_text).collect();
                if text.is_empty() {
                    f.write_str("tool failed")
                } else {
                    f.write_str(&text.join("\n"))
                }
            }
            ToolErrorKind::InvalidArguments(m) => write!(f, "invalid arguments: {m}"),
            ToolErrorKind::Protocol(p) => write!(f, "{} ({})", p.message, p.code),
            ToolErrorKind::Cancelled => f.write_str("cancelled"),
            ToolErrorKind::MissingCapability(c) => {
                write!(f, "the client does not support {c}")
            }
        }
    }
}

impl std::error::Error for ToolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ToolErrorKind::Protocol(p) => Some(p),
            _ => None,
        }
    }
}

/// What is never made: lets `?` and [`FromTaskContext`](crate::FromTaskContext) treat a value
/// that cannot fail like one that can.
impl From<std::convert::Infallible> for ToolError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

impl From<ProtocolError> for ToolError {
    fn from(error: ProtocolError) -> Self {
        Self {
            kind: ToolErrorKind::Protocol(error),
        }
    }
}

/// A boxed error keeps what it stands for: a boxed [`ToolError`] is unboxed, a
/// [`ProtocolError`] stays a JSON-RPC error, and anything else becomes a tool failure whose
/// text is the error's message followed by its sources (`reading config: file not found`).
impl From<Box<dyn std::error::Error + Send + Sync>> for ToolError {
    fn from(error: Box<dyn std::error::Error + Send + Sync>) -> Self {
        let error = match error.downcast::<ToolError>() {
            Ok(tool) => return *tool,
            Err(other) => other,
        };
        let error = match error.downcast::<ProtocolError>() {
            Ok(protocol) => return Self::from(*protocol),
            Err(other) => other,
        };
        Self::new(chain_message(&*error))
    }
}

/// Like a boxed error: an `anyhow::Error` made from a [`ToolError`] or a [`ProtocolError`]
/// (with or without `.context(...)`) is that error again, and any other becomes a tool
/// failure whose text is the whole context chain.
impl From<anyhow::Error> for ToolError {
    fn from(error: anyhow::Error) -> Self {
        let error = match error.downcast::<ToolError>() {
            Ok(tool) => return tool,
            Err(other) => other,
        };
        match error.downcast::<ProtocolError>() {
            Ok(protocol) => Self::from(protocol),
            Err(other) => Self::new(chain_message(other.as_ref())),
        }
    }
}

impl ToolError {
    /// The error a tool's `Err(error)` stands for. An `anyhow::Error` is converted by its own
    /// `From` impl (boxing it would hide the error inside from a downcast); anything else is
    /// boxed first.
    pub(crate) fn from_returned<E>(error: E) -> Self
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let mut slot = Some(error);
        let any: &mut dyn std::any::Any = &mut slot;
        if let Some(anyhow) = any
            .downcast_mut::<Option<anyhow::Error>>()
            .and_then(Option::take)
        {
            return Self::from(anyhow);
        }
        match slot {
            Some(error) => Self::from(error.into()),
            None => Self::new("tool failed"),
        }
    }
}

impl From<std::io::Error> for ToolError {
    fn from(error: std::io::Error) -> Self {
        Self::new(chain_message(&error))
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(error: serde_json::Error) -> Self {
        Self::new(error)
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// An error's message followed by those of its sources, `: `-separated, skipping a source
/// whose message the text already ends with (error types that print their source too).
fn chain_message(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !message.is_empty() && !text.ends_with(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

/// How a finished tool call ends, independent of the protocol era.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CallOutcome {
    /// The tool returned a result (possibly with `isError: true`).
    Result(CallToolResult),
    /// The call ended with a JSON-RPC error.
    Error(ErrorObject),
}

impl CallOutcome {
    /// The outcome of a tool's return value (every return value has one).
    pub(crate) fn from_tool(result: Result<CallToolResult, ToolError>) -> Option<Self> {
        Some(match result {
            Ok(r) => Self::Result(r),
            Err(e) => match e.kind {
                ToolErrorKind::Failed(content) => Self::Result(CallToolResult {
                    content,
                    structured_content: None,
                    is_error: true,
                }),
                ToolErrorKind::InvalidArguments(m) => Self::Result(CallToolResult::error_text(
                    format!("invalid arguments: {m}"),
                )),
                ToolErrorKind::Protocol(p) => Self::Error(Error::Protocol(p).into()),
                ToolErrorKind::Cancelled => Self::Error(Error::Cancelled.into()),
                ToolErrorKind::MissingCapability(cap) => Self::Error(
                    Error::MissingCapability {
                        required: json!({ cap: {} }),
                    }
                    .into(),
                ),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(error: ToolError) -> String {
        match CallOutcome::from_tool(Err(error)) {
            Some(CallOutcome::Result(r)) if r.is_error => r.content[0].as_text().unwrap().into(),
            other => panic!("not a tool failure: {other:?}"),
        }
    }

    #[test]
    fn a_protocol_error_survives_anyhow_and_boxing() {
        let through_anyhow = anyhow::Error::from(ProtocolError::new(-32042, "refused"));
        let through_context = through_anyhow.context("while asking");
        let boxed: Box<dyn std::error::Error + Send + Sync> =
            Box::new(ProtocolError::new(-32042, "refused"));
        for error in [
            ToolError::from(through_context),
            ToolError::from(boxed),
            ToolError::from_returned(ProtocolError::new(-32042, "refused")),
        ] {
            assert_eq!(error.as_protocol().map(|p| p.code), Some(-32042));
        }
    }

    #[test]
    fn a_tool_error_survives_anyhow_and_boxing() {
        let cancelled = anyhow::Error::from(ToolError::cancelled());
        assert!(ToolError::from(cancelled).is_cancelled());
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(ToolError::cancelled());
        assert!(ToolError::from(boxed).is_cancelled());
        assert!(
            ToolError::from_returned(anyhow::Error::from(ToolError::cancelled())).is_cancelled()
        );
    }

    #[test]
    fn other_errors_read_as_their_source_chain() {
        let io = std::io::Error::other("no such printer");
        let error = anyhow::Error::from(io).context("printing page 2");
        assert_eq!(
            text(ToolError::from(error)),
            "printing page 2: no such printer"
        );
        assert_eq!(
            text(ToolError::from_returned(String::from("plain"))),
            "plain"
        );
    }

    #[test]
    fn a_source_the_message_already_ends_with_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot load: {0}")]
        struct Load(#[source] std::io::Error);
        let error = Load(std::io::Error::other("gone"));
        assert_eq!(text(ToolError::from_returned(error)), "cannot load: gone");
    }
}
