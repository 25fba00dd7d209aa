use mcp_tasks::prelude::*;

#[task_tool]
async fn tool(_progress: Progress, _again: Progress) {}

fn main() {}
