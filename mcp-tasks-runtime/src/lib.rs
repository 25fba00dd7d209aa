//! The runtime of mcp-tasks: JSON-RPC routing, both MCP
//! protocol eras (2025-11-25 stateful, 2026-07-28 stateless), tools, tasks, task stores and
//! transports.
//!
//! Most users depend on the `mcp-tasks` facade crate and write tools with `#[task_tool]`.
//! This crate is what runs them.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "admin")]
pub mod admin;
#[cfg(feature = "client")]
pub mod client;
pub mod context;
pub mod creation;
pub mod engine;
pub mod error;
pub mod idempotency;
pub mod jsonrpc;
pub mod lifecycle;
pub mod model;
mod notify;
#[cfg(feature = "oauth")]
pub mod oauth;
#[cfg(any(feature = "oauth", feature = "client"))]
mod oauth_urls;
mod ops;
#[cfg(feature = "otel")]
pub mod otel;
pub mod principal;
pub mod prompt;
pub mod quota;
pub mod resource;
mod router;
mod run;
pub mod schema;
pub mod server;
mod session;
mod spans;
mod state;
pub mod store;
mod suspended;
mod sync;
pub mod task;
pub mod tasks;
pub mod tool;
mod trace_context;
pub mod transport;
pub mod wire;
mod worker;

#[doc(hidden)]
pub mod __private;

/// The axum version the HTTP transport is built on (feature `http`): mount
/// [`Server::http_router`] in an app made with it, and add routes and layers of your own,
/// without a separate axum dependency that must match.
#[cfg(feature = "http")]
pub use axum;
pub use context::{
    Client, FromTaskContext, MAX_STEP_NAME_CHARS, MAX_STEP_OUTPUT_BYTES, Progress, StepError,
    Steps, TaskContext,
};
pub use creation::TaskCreation;
pub use engine::{EngineConfig, HandOff, Recovery};
pub use error::{CallOutcome, Error, ProtocolError, ToolError};
pub use idempotency::{IDEMPOTENCY_KEY_META, IdempotencyKey, MAX_IDEMPOTENCY_KEY};
pub use principal::Principal;
pub use prompt::{GetPromptResult, Prompt, PromptDefError, PromptMessage};
pub use resource::{Resource, ResourceDefError, ResourceTemplate};
pub use router::Session;
pub use server::{BuildError, Implementation, Server, ServerBuilder};
pub use session::OUTBOUND_CAPACITY;
pub use state::{State, StateRequirement};
pub use tasks::{Tasks, Viewer};
pub use tokio_util::sync::CancellationToken;
pub use tool::{
    IntoToolResult, Json, Registry, RestartPolicy, ResumePolicy, Tool, ToolDefError, ToolInput,
    Unique,
};
/// Multi round-trip requests of 2026-07-28 and their signed `requestState` (see
/// [`wire::v2026_07_28::mrtr`]).
pub use wire::v2026_07_28::mrtr;
pub use worker::Worker;
