use mcp_tasks::task_tool;

/// Rebuild an index.
#[task_tool(mode = "forbidden", unique)]
async fn rebuild(index: String) -> String {
    index
}

fn main() {}
