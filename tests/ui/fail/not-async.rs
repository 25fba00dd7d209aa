use mcp_tasks::task_tool;

#[task_tool]
fn tool() {}

fn main() {}
