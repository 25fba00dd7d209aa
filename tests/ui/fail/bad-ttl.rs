use mcp_tasks::task_tool;

#[task_tool(ttl = "forever")]
async fn tool() {}

fn main() {}
