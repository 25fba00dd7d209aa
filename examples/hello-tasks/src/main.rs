//! Serves the tools of this crate to one MCP client on stdin and stdout.
//!
//! stdout carries MCP messages only, so everything else goes to stderr.

use mcp_tasks::store::MemoryTaskStore;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let store = MemoryTaskStore::new();
    let server = hello_tasks::server(store)?;
    eprintln!("serving MCP on stdin and stdout until stdin closes");
    server.serve_stdio().await?;
    Ok(())
}
