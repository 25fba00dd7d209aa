//! `crate = path` points the generated code at a re-export of `mcp_tasks`, for crates that
//! rename it or wrap it in a facade of their own.

mod facade {
    pub use mcp_tasks::*;
}

use mcp_tasks as rt;
use serde_json::json;

/// Echo the text.
#[rt::task_tool(crate = crate::rt)]
async fn echo(text: String) -> String {
    text
}

/// Shout the text.
#[rt::task_tool(crate = "crate::facade", name = "shout")]
async fn shout(text: String, progress: rt::Progress) -> String {
    progress.message("shouting");
    text.to_uppercase()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let server = rt::Server::from_registry().unwrap();
    assert!(server.tools().get("echo").is_some());
    assert!(server.tools().get("shout").is_some());
    let tool = rt::__private::inventory::iter::<rt::__private::ToolRegistration>
        .into_iter()
        .find(|r| r.name == "shout")
        .unwrap();
    let args = json!({ "text": "hi" }).as_object().unwrap().clone();
    let result = (tool.call)(rt::TaskContext::detached("shout"), args)
        .await
        .unwrap();
    assert_eq!(result.content, vec![rt::model::Content::text("HI")]);
}
