use mcp_tasks::task_tool;

#[task_tool]
async fn tool(_count: u32, _: ...) {}

fn main() {}
