use mcp_tasks::task_tool;

#[task_tool]
async unsafe fn tool() {}

fn main() {}
