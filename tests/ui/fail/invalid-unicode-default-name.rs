use mcp_tasks::task_tool;

// Rust accepts this identifier; the tool-name rule does not.
/// A tool.
#[task_tool]
async fn größe() {}

fn main() {}
