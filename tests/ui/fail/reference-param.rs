use mcp_tasks::task_tool;

#[task_tool]
async fn tool(_text: &'static str) {}

fn main() {}
