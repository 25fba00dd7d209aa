//! Serves the tools of this crate to one MCP client on stdin and stdout.
//!
//! stdout carries MCP messages only, so everything else goes to stderr.
//!
//! It stops gracefully at SIGTERM or Ctrl-C (and when stdin closes, on stdio): it creates no
//! new tasks, lets the running ones finish for up to 30 s (`ServerBuilder::shutdown_grace`),
//! then hands the rest off; a second signal stops it at once. SIGUSR1 pauses task creation
//! and SIGUSR2 resumes it.
//!
//! Tasks are kept in a SQLite database in `data/` under the working directory, so they outlive
//! a restart. The environment variable in `DATA_VAR` sets another directory.

use std::path::PathBuf;

/// The environment variable that names the directory of the task database.
const DATA_VAR: &str = "HELLO_TASKS_DATA_DIR";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr, never stdout (which carries MCP on stdio); RUST_LOG sets the level.
    // With OTEL_EXPORTER_OTLP_ENDPOINT set, traces and metrics go there too, over OTLP.
    let _otel = mcp_tasks::otel::init_from_env()?;
    let dir = data_dir();
    let store = hello_tasks::open_store(&dir)?;
    eprintln!("keeping tasks in {}", std::path::absolute(&dir)?.display());
    let server = hello_tasks::server(store)?;
    eprintln!("serving MCP on stdin and stdout until stdin closes or SIGTERM");
    server.serve_stdio().await?;
    Ok(())
}

/// The directory of the task database: the one `DATA_VAR` names, or `data`.
fn data_dir() -> PathBuf {
    std::env::var_os(DATA_VAR).map_or_else(|| PathBuf::from("data"), PathBuf::from)
}
