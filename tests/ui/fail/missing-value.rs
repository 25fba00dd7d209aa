use mcp_tasks::task_tool;

#[task_tool(mode)]
async fn tool() {}

fn main() {}
