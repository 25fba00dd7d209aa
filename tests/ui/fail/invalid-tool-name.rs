use mcp_tasks::task_tool;

/// A tool.
#[task_tool(name = "render report")]
async fn tool() {}

fn main() {}
