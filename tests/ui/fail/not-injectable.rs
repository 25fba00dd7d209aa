use mcp_tasks::task_tool;

struct Database;

#[task_tool]
async fn tool(#[inject] _db: Database) {}

fn main() {}
