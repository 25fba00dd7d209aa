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
        /// The wait the server asked for in a `Retry-After` header given in seconds (a 429
        /// or 503 of a draining server or a balancer); an HTTP date is not read.
        retry_after: Option<std::time::Duration>,
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
    /// No random idempotency key could be made (the system's random source failed).
    #[error("cannot make a random idempotency key: {0}")]
    Random(String),
    /// Arguments could not be used.
    #[error("invalid arguments: {0}")]
    Arguments(String),
    /// The server wants an access token this client does not have or could not get.
    #[error(transparent)]
    Auth(#[from] AuthError),
}

/// Why a protected server could not be authorized. The messages never quote a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The server answered `401` and no token can be had without the user.
    #[error(
        "the server at {server} needs authorization{}: log in (`mcp-tasks login {server}`), or give a token or client credentials",
        .reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
    )]
    LoginNeeded {
        /// The MCP endpoint.
        server: String,
        /// What the server's challenge said, if anything.
        reason: Option<String>,
    },
    /// The server refused the token it was given, and a fresh one as well.
    #[error("the server at {server} refused the access token{}", .reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Rejected {
        /// The MCP endpoint.
        server: String,
        /// What the server's challenge said, if anything.
        reason: Option<String>,
    },
    /// The token lacks a scope the request needs (`403`, `insufficient_scope`).
    #[error(
        "the server at {server} needs the scope `{scope}` for this; log in again asking for it (`--scope`)"
    )]
    InsufficientScope {
        /// The MCP endpoint.
        server: String,
        /// The scopes the server named.
        scope: String,
    },
    /// The protected resource or authorization server metadata could not be found or is
    /// not usable.
    #[error("cannot discover how to authorize: {0}")]
    Discovery(String),
    /// Dynamic client registration failed, or the authorization server offers none.
    #[error("cannot register this client with the authorization server: {0}")]
    Registration(String),
    /// The authorization server answered an OAuth error.
    #[error("the authorization server refused: {error}{}", .description.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused {
        /// The OAuth error code (`invalid_grant`, `access_denied`, …).
        error: String,
        /// Its description, if any.
        description: Option<String>,
    },
    /// The authorization server could not be reached, or answered something that is not
    /// OAuth.
    #[error("the authorization server at {url} failed: {reason}")]
    Endpoint {
        /// The endpoint.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The browser sign-in did not come back in time, or came back wrong.
    #[error("the sign-in did not complete: {0}")]
    SignIn(String),
    /// The token file could not be read or written.
    #[error("the token store failed: {0}")]
    Store(String),
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
