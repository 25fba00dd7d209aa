use mcp_tasks::task_tool;

/// A tool.
#[task_tool]
async fn tool() -> u32 {
    1
}

fn main() {}
