use mcp_tasks::task_tool;

#[task_tool]
async fn tool() -> impl std::fmt::Display {
    1
}

fn main() {}
