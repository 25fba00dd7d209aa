use mcp_tasks::task_tool;

#[task_tool(on_restart = "rerun")]
async fn tool() {}

fn main() {}
