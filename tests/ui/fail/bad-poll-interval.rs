use mcp_tasks::task_tool;

#[task_tool(poll_interval = "2x")]
async fn tool() {}

fn main() {}
