use mcp_tasks::task_tool;

#[task_tool]
const fn tool() {}

fn main() {}
