use mcp_tasks::task_tool;

#[task_tool]
async fn tool(#[arg(desc = "How many pages.")] _pages: u32) {}

fn main() {}
