use mcp_tasks::task_tool;

#[task_tool]
async fn tool((_width, _height): (u32, u32)) {}

fn main() {}
