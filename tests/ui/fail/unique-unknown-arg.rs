use mcp_tasks::task_tool;

/// Rebuild an index.
#[task_tool(mode = "optional", unique = ["index", "tennant"])]
async fn rebuild(index: String, tenant: String) -> String {
    format!("{tenant}/{index}")
}

fn main() {}
