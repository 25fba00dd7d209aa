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

#[doc(inline)]
pub use mcp_tasks_macros::task_tool;
pub use mcp_tasks_runtime::*;

/// Everything a server with task tools usually needs.
pub mod prelude {
    pub use crate::task_tool;
    pub use mcp_tasks_runtime::model::{CallToolResult, Content, TaskSupport};
    pub use mcp_tasks_runtime::{
        CancellationToken, Client, Json, Progress, ProtocolError, Server, TaskContext, Tool,
        ToolError,
    };
}
