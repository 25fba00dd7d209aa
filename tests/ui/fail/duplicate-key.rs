use mcp_tasks::task_tool;

#[task_tool(mode = "optional", mode = "required")]
async fn tool() {}

fn main() {}
