use mcp_tasks::task_tool;
use std::rc::Rc;

async fn step() {}

/// A tool.
#[task_tool]
async fn tool() {
    let shared = Rc::new(1);
    step().await;
    drop(shared);
}

fn main() {}
