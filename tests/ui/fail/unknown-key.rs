use mcp_tasks::task_tool;

#[task_tool(interval = "2s")]
async fn tool() {}

fn main() {}
