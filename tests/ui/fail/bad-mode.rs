use mcp_tasks::task_tool;

#[task_tool(mode = "sometimes")]
async fn tool() {}

fn main() {}
