use mcp_tasks::task_tool;

struct Database;

/// A tool.
#[task_tool]
async fn tool(#[inject] _db: Database) {}

fn main() {}
