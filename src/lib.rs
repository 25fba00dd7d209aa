//! # mcp-tasks
//!
//! Write MCP servers whose tools run as durable background tasks, served to clients of both
//! MCP task protocols (2025-11-25 and the 2026-07-28 `io.modelcontextprotocol/tasks`
//! extension) from one declaration.
//!
//! ```no_run
//! use mcp_tasks::prelude::*;
//!
//! /// Render a report.
//! #[task_tool(mode = "optional", poll_interval = "2s")]
//! async fn render_report(pages: u32, progress: Progress) -> Result<String, ToolError> {
//!     for page in 1..=pages {
//!         progress.report(page as f64, Some(pages as f64));
//!     }
//!     Ok(format!("rendered {pages} pages"))
//! }
//!
//! #[tokio::main]
//! async fn main() -> anyhow::Result<()> {
//!     Server::from_registry()?.serve_stdio().await?;
//!     Ok(())
//! }
//! ```
//!
//! Start with [`task_tool`], the manual: its arguments, the parameters it injects
//! ([`Progress`], [`TaskContext`], [`Client`], [`CancellationToken`]), the return types it
//! accepts and the mistakes it reports. [`Server`] serves the tools; [`Tool`] declares one
//! without the macro.
//!
//! # Cargo features
//!
//! | feature | what it adds |
//! | --- | --- |
//! | (none) | `#[task_tool]`, the [`Tool`] builder, both protocol eras, [`transport::serve_io`] and stdio, tasks in memory ([`store::MemoryTaskStore`]) |
//! | `http` | the Streamable HTTP transport (`transport::http`, with its `Authenticator`) |
//! | `sqlite` | the durable SQLite task store (`store::SqliteTaskStore`) |
//! | `testing` | the shared test suite for task stores (`store::testing`) |

#![cfg_attr(docsrs, feature(doc_cfg))]

// The manual lives in the macro crate; the link definitions below make its links intra-doc
// links here, where the items it names are in scope.
/// [`Progress`]: crate::Progress
/// [`TaskContext`]: crate::TaskContext
/// [`TaskContext::detach`]: crate::TaskContext::detach
/// [`Client`]: crate::Client
/// [`State<T>`]: crate::State
/// [`ServerBuilder::parked_call_timeout`]: crate::ServerBuilder::parked_call_timeout
/// [`ServerBuilder::max_parked_calls`]: crate::ServerBuilder::max_parked_calls
/// [`CancellationToken`]: crate::CancellationToken
/// [`FromTaskContext`]: crate::FromTaskContext
/// [`IntoToolResult`]: crate::IntoToolResult
/// [`ToolError`]: crate::ToolError
/// [`ToolError::new`]: crate::ToolError::new
/// [`TaskSupport`]: crate::model::TaskSupport
/// [`is_valid_tool_name`]: crate::tool::is_valid_tool_name
/// [`Server::from_registry`]: crate::Server::from_registry
/// [Json]: crate::Json
#[doc(inline)]
pub use mcp_tasks_macros::task_tool;
pub use mcp_tasks_runtime::*;

/// Everything a server with task tools usually needs.
pub mod prelude {
    pub use crate::task_tool;
    pub use mcp_tasks_runtime::model::{CallToolResult, Content, TaskSupport};
    pub use mcp_tasks_runtime::{
        CancellationToken, Client, Json, Progress, ProtocolError, Server, State, TaskContext, Tool,
        ToolError, Worker,
    };
}
