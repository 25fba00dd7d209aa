use mcp_tasks::task_tool;

#[derive(serde::Deserialize)]
struct Args {
    pages: u32,
}

/// A tool.
#[task_tool]
async fn tool(#[input] _args: Args) {}

fn main() {}
