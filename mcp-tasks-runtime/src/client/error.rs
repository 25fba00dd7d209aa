//! What can go wrong on the client side, each with the fix in its message.

use serde_json::Value;

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server command could not be started.
    #[error(
        "cannot start the server command `{command}`: {source}; check the command and your PATH"
    )]
    Spawn {
        /// The command line.
        command: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The server command line is empty or badly quoted.
    #[error("bad server command `{0}`: give a program and its arguments, quoted like a shell")]
    BadCommand(String),
    /// The HTTP endpoint could not be reached.
    #[error(
        "cannot reach the server at {url}: {reason}; check the URL and that the server is running"
    )]
    Connect {
        /// The endpoint.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// The HTTP endpoint answered with a status and no JSON-RPC message.
    #[error("the server at {url} answered HTTP {status}: {body}")]
    Http {
        /// The endpoint.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The connection ended (the server exited or closed the stream).
    #[error("the connection to the server closed{0}")]
    Closed(String),
    /// The server sent something that is not MCP.
    #[error("the server sent an invalid message: {0}")]
    Protocol(String),
    /// Neither era could be negotiated.
    #[error("the server speaks neither MCP 2026-07-28 nor 2025-11-25: {0}")]
    Negotiation(String),
    /// The server answered a request with a JSON-RPC error.
    #[error("the server refused `{method}`: {message} (code {code})")]
    Rpc {
        /// The request's method.
        method: String,
        /// The JSON-RPC error code.
        code: i32,
        /// The error message.
        message: String,
        /// The error's data, if any.
        data: Option<Value>,
    },
    /// The server needs a client capability this client did not declare.
    #[error(
        "the server needs the client capability {required} for `{method}`; register an input handler that answers it"
    )]
    MissingCapability {
        /// The request's method.
        method: String,
        /// The capabilities the server asked for, as JSON.
        required: Value,
    },
    /// The tool can only run as a task and the server offers no task protocol to this client.
    #[error(
        "tool `{0}` requires tasks, but the server does not offer them on this protocol version; connect with a version that has tasks"
    )]
    ToolRequiresTasks(String),
    /// The tool does not exist.
    #[error("the server has no tool `{0}`; `mcp-tasks tools` lists the ones it has")]
    UnknownTool(String),
    /// The server does not know the task (never created, or expired and purged).
    #[error(
        "task {0} is unknown to the server or has expired; its result is gone (servers keep tasks for their ttl only)"
    )]
    TaskNotFound(String),
    /// The server offers no tasks, so task operations are meaningless.
    #[error("the server offers no tasks on {0}")]
    NoTasks(&'static str),
    /// The operation is not part of the negotiated protocol.
    #[error("{0} is not offered on {1}")]
    NotOffered(&'static str, &'static str),
    /// The caller's deadline passed before the task ended.
    #[error(
        "task {0} did not finish before the deadline; it is still running (resume or cancel it later)"
    )]
    Deadline(String),
    /// A question arrived and no handler can answer it.
    #[error("task {task} needs input ({method}) and no input handler is registered")]
    InputNeeded {
        /// The task.
        task: String,
        /// What the server asked for.
        method: String,
    },
    /// The input handler failed.
    #[error("the input handler failed: {0}")]
    Handler(String),
    /// The handle store failed.
    #[error("the handle store failed: {0}")]
    Store(#[from] StoreError),
    /// Arguments could not be used.
    #[error("invalid arguments: {0}")]
    Arguments(String),
}

/// Why the durable handle store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// SQLite failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored row could not be read back.
    #[error("corrupt handle row: {0}")]
    Corrupt(String),
}
