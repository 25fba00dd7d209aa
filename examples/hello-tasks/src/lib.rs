//! hello-tasks: an MCP server whose tools can run as background tasks.
//!
//! Every `#[task_tool]` function of this crate is a tool of [`server`], and `src/main.rs`
//! serves it to one client on stdin and stdout.
//! To add a tool, write another `#[task_tool]` function: nothing else needs to change.

use anyhow::Context as _;
use mcp_tasks::prelude::*;
use mcp_tasks::store::{ClaimStore, SqliteTaskStore};
use std::path::Path;
use std::time::Duration;

// A plain tool: `mode = "forbidden"` means every call answers at once, never as a task.
// The doc comment is the tool's description, which the model reads.

/// Greet someone by name.
#[task_tool(mode = "forbidden", read_only)]
pub async fn greet(#[arg(description = "Who to greet.")] name: String) -> String {
    format!("Hello, {name}!")
}

// A task tool: with `mode = "optional"`, a client that supports tasks gets a task at once and
// polls it for progress and the result, while any other client waits for the answer.
// `Progress` and `CancellationToken` are injected by the runtime; `to` is the tool's input.

/// Count from 1 to `to`, one number every 100 ms, reporting progress on the way.
#[task_tool(mode = "optional", poll_interval = "200ms")]
pub async fn count(
    #[arg(description = "The number to count to, from 1 to 600.")] to: u32,
    progress: Progress,
    cancel: CancellationToken,
) -> Result<String, ToolError> {
    if !(1..=600).contains(&to) {
        return Err(ToolError::invalid_arguments("`to` must be from 1 to 600"));
    }
    for n in 1..=to {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            () = cancel.cancelled() => return Err(ToolError::cancelled()),
        }
        progress.report_with_message(f64::from(n), Some(f64::from(to)), format!("{n} of {to}"));
    }
    Ok(format!("counted to {to}"))
}

/// The server: every `#[task_tool]` function of this crate, with its tasks kept in `store`.
pub fn server(store: impl ClaimStore) -> anyhow::Result<Server> {
    let server = Server::builder()
        .name(env!("CARGO_PKG_NAME"))
        .version(env!("CARGO_PKG_VERSION"))
        .registry_tools()
        .store(store)
        .build()?;
    Ok(server)
}

/// The file name of the task database.
pub const DATABASE: &str = concat!(env!("CARGO_PKG_NAME"), ".db");

/// Opens (or creates) the task database [`DATABASE`] in `dir`, creating `dir` if needed.
pub fn open_store(dir: &Path) -> anyhow::Result<SqliteTaskStore> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let store = SqliteTaskStore::open(dir.join(DATABASE))?;
    Ok(store)
}
