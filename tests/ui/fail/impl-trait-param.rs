use mcp_tasks::task_tool;

#[task_tool]
async fn tool(_name: impl Into<String>) {}

fn main() {}
