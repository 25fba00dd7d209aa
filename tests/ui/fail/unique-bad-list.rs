use mcp_tasks::task_tool;

/// Rebuild an index.
#[task_tool(mode = "optional", unique = ["index", 2, "index"])]
async fn rebuild(index: String) -> String {
    index
}

/// Rebuild every index.
#[task_tool(mode = "optional", unique = [])]
async fn rebuild_all() {}

fn main() {}
