use mcp_tasks::task_tool;

#[task_tool(mode = "optional", on_unresumable = "rerun")]
async fn tool() {}

fn main() {}
