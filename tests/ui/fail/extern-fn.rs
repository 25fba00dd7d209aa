use mcp_tasks::task_tool;

#[task_tool]
async extern "C" fn tool() {}

fn main() {}
