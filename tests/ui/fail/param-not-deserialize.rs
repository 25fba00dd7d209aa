use mcp_tasks::task_tool;

#[derive(schemars::JsonSchema)]
struct Point {
    x: f64,
}

/// A tool.
#[task_tool]
async fn tool(_point: Point) {}

fn main() {}
