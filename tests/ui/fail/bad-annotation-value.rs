use mcp_tasks::task_tool;

#[task_tool(read_only = "yes")]
async fn tool() {}

fn main() {}
