//! A user type that happens to be called `Progress` would be taken for the runtime's
//! injectable `Progress`; `#[arg]` marks it as an input field instead.

use mcp_tasks::__private::{ToolRegistration, inventory};
use mcp_tasks::task_tool;
use serde_json::json;

/// How far the caller says it got.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Progress {
    done: u32,
}

/// Resume from where the caller left off.
#[task_tool]
async fn resume(#[arg] progress: Progress, reporter: mcp_tasks::Progress) -> String {
    reporter.report(progress.done as f64, None);
    format!("resuming at {}", progress.done)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let tool = inventory::iter::<ToolRegistration>
        .into_iter()
        .find(|r| r.name == "resume")
        .unwrap();
    let schema = (tool.input_schema)();
    assert_eq!(schema["required"], json!(["progress"]));
    let args = json!({ "progress": { "done": 4 } })
        .as_object()
        .unwrap()
        .clone();
    let result = (tool.call)(mcp_tasks::TaskContext::detached("resume"), args)
        .await
        .unwrap();
    assert_eq!(
        result.content,
        vec![mcp_tasks::model::Content::text("resuming at 4")]
    );
}
