// A tool with neither a doc comment nor `description = "..."` compiles with a warning on its
// name. The warning is denied here so that its text is in this case's snapshot.
#![deny(deprecated)]

use mcp_tasks::task_tool;

#[task_tool(mode = "forbidden")]
async fn undocumented() -> String {
    String::new()
}

/// Described: no warning.
#[task_tool]
async fn documented() {}

/// Left out on purpose: no warning.
#[task_tool(description = "")]
async fn on_purpose() {}

fn main() {}
