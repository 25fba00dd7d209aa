use mcp_tasks::prelude::*;

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Report {
    pages: u32,
}

/// A tool.
#[task_tool]
async fn tool() -> Result<Report, ToolError> {
    Ok(Report { pages: 1 })
}

fn main() {}
