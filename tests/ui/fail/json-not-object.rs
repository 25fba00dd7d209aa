use mcp_tasks::prelude::*;

/// List the files.
#[task_tool]
async fn list_files() -> Json<Vec<String>> {
    Json(vec!["a.txt".to_owned()])
}

/// Count the files.
#[task_tool]
async fn count_files() -> Result<Json<u32>, ToolError> {
    Ok(Json(1))
}

/// Maybe find a file.
#[task_tool]
async fn find_file() -> anyhow::Result<mcp_tasks::Json<Option<String>>> {
    Ok(mcp_tasks::Json(None))
}

fn main() {}
