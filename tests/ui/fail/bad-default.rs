use mcp_tasks::task_tool;

/// A tool.
#[task_tool]
async fn tool(#[arg(default = "ten")] _pages: u32) {}

fn main() {}
