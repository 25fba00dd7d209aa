use mcp_tasks::task_tool;

/// Publish a report.
#[task_tool(mode = "optional", scopes = ["reports:write", 7, "", "reports read", "reports:write"])]
async fn publish(title: String) -> String {
    title
}

/// Publish to nobody in particular.
#[task_tool(scopes = [])]
async fn publish_nowhere() {}

/// Publish with one scope written as a string.
#[task_tool(scopes = "reports:write")]
async fn publish_once() {}

/// Publish with a scope that is not a literal.
const SCOPE: &str = "reports:write";
#[task_tool(scopes = [SCOPE])]
async fn publish_const() {}

fn main() {}
