use mcp_tasks::task_tool;

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Report {
    pages: u32,
}

/// A tool.
#[task_tool]
async fn tool() -> Report {
    Report { pages: 1 }
}

fn main() {}
