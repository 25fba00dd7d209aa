use mcp_tasks::task_tool;

/// Rebuild an index.
#[task_tool(mode = "optional", unique_window = "1h")]
async fn rebuild(index: String) -> String {
    index
}

fn main() {}
