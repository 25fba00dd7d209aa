//! Every injectable type at once, in any order among the input fields, plus a type of the
//! user's own that implements `FromTaskContext` and is marked `#[inject]`; and one that can
//! be rejected, taken as it is, as an `Option` and as a `Result`.

// Every injection at once is the point of this case.
#![allow(clippy::too_many_arguments)]

use mcp_tasks::__private::{ToolRegistration, inventory};
use mcp_tasks::FromTaskContext;
use mcp_tasks::prelude::*;
use serde_json::json;

/// Something the tool needs that is not part of its input.
struct ToolName(String);

impl FromTaskContext for ToolName {
    type Rejection = std::convert::Infallible;

    fn from_task_context(cx: &TaskContext) -> Result<Self, Self::Rejection> {
        Ok(ToolName(cx.tool_name().to_owned()))
    }
}

/// The caller's principal; a call without one is refused.
struct Principal(String);

impl FromTaskContext for Principal {
    type Rejection = ToolError;

    fn from_task_context(cx: &TaskContext) -> Result<Self, ToolError> {
        cx.principal()
            .map(|p| Principal(p.subject.clone()))
            .ok_or_else(|| ToolError::new("sign in first"))
    }
}

/// Only for callers with a principal.
#[task_tool]
async fn signed_in(#[inject] who: Principal) -> String {
    who.0
}

/// For anyone.
#[task_tool]
async fn anyone(#[inject] who: Option<Principal>) -> String {
    who.map_or_else(|| "anonymous".to_owned(), |p| p.0)
}

/// Says why not.
#[task_tool]
async fn why_not(#[inject] who: Result<Principal, ToolError>) -> String {
    match who {
        Ok(p) => p.0,
        Err(e) => format!("refused: {e}"),
    }
}

type Cx = mcp_tasks::TaskContext;

/// Use everything.
#[task_tool]
async fn everything(
    progress: Progress,
    first: u32,
    cx: mcp_tasks::TaskContext,
    client: Client,
    second: String,
    cancel: CancellationToken,
    #[inject] name: ToolName,
    #[inject] alias: Cx,
) -> String {
    progress.report(1.0, None);
    assert!(!client.supports("sampling"));
    assert!(!cancel.is_cancelled());
    assert_eq!(cx.tool_name(), alias.tool_name());
    format!("{} {first} {second}", name.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let tool = inventory::iter::<ToolRegistration>
        .into_iter()
        .find(|r| r.name == "everything")
        .unwrap();
    let schema = (tool.input_schema)();
    let properties = schema["properties"].as_object().unwrap();
    assert_eq!(properties.keys().collect::<Vec<_>>(), ["first", "second"]);
    assert_eq!(schema["additionalProperties"], json!(false));

    let args = json!({ "first": 1, "second": "two" })
        .as_object()
        .unwrap()
        .clone();
    let result = (tool.call)(TaskContext::detached("everything"), args)
        .await
        .unwrap();
    assert_eq!(result.content, vec![Content::text("everything 1 two")]);

    // Unknown arguments are refused before the function runs.
    let args = json!({ "first": 1, "second": "two", "third": 3 })
        .as_object()
        .unwrap()
        .clone();
    assert!(
        (tool.call)(TaskContext::detached("everything"), args)
            .await
            .is_err()
    );

    // A rejected injection is the call's error, and the tool does not run.
    let run = |name: &'static str| {
        let tool = inventory::iter::<ToolRegistration>
            .into_iter()
            .find(|r| r.name == name)
            .unwrap();
        (tool.call)(TaskContext::detached(name), Default::default())
    };
    let refused = run("signed_in").await.unwrap_err();
    assert_eq!(refused.to_string(), "sign in first");
    let anyone = run("anyone").await.unwrap();
    assert_eq!(anyone.content, vec![Content::text("anonymous")]);
    let why = run("why_not").await.unwrap();
    assert_eq!(why.content, vec![Content::text("refused: sign in first")]);
}
