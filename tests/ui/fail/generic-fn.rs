use mcp_tasks::task_tool;

#[task_tool]
async fn tool<T>(_value: T) {}

fn main() {}
