//! Every error type a tool may return compiles: `ToolError`, `anyhow::Result`, a boxed error,
//! an error type of the user's own, and `?` on an `anyhow::Error` or an `std::io::Error` inside
//! a tool that returns `ToolError`. Each one fails with the error's text.

use mcp_tasks::__private::{ToolRegistration, inventory};
use mcp_tasks::prelude::*;
use serde_json::json;

#[derive(Debug)]
struct Jammed {
    sheet: u32,
}

impl std::fmt::Display for Jammed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sheet {} jammed", self.sheet)
    }
}

impl std::error::Error for Jammed {}

/// `anyhow::Result<T>` as the return type.
#[task_tool]
async fn with_anyhow(fail: bool) -> anyhow::Result<String> {
    anyhow::ensure!(!fail, "anyhow failed");
    Ok("fine".into())
}

/// A boxed error as the return type.
#[task_tool]
async fn with_box(fail: bool) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    if fail {
        return Err("boxed failed".into());
    }
    Ok("fine".into())
}

/// The user's own error type.
#[task_tool]
async fn with_own(fail: bool) -> Result<Json<Printed>, Jammed> {
    if fail {
        return Err(Jammed { sheet: 3 });
    }
    Ok(Json(Printed { sheets: 1 }))
}

/// What `with_own` printed.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Printed {
    sheets: u32,
}

/// `?` on an `anyhow::Error` and on an `std::io::Error` in a `ToolError` tool.
#[task_tool]
async fn with_question_mark(fail: bool) -> Result<String, ToolError> {
    fn step(fail: bool) -> anyhow::Result<()> {
        anyhow::ensure!(!fail, "step failed");
        Ok(())
    }
    fn io(fail: bool) -> std::io::Result<()> {
        if fail {
            Err(std::io::Error::other("io failed"))
        } else {
            Ok(())
        }
    }
    step(fail)?;
    io(fail)?;
    Ok("fine".into())
}

fn registration(name: &str) -> &'static ToolRegistration {
    inventory::iter::<ToolRegistration>
        .into_iter()
        .find(|r| r.name == name)
        .expect(name)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    for (name, message) in [
        ("with_anyhow", "anyhow failed"),
        ("with_box", "boxed failed"),
        ("with_own", "sheet 3 jammed"),
        ("with_question_mark", "step failed"),
    ] {
        let tool = registration(name);
        let call = |fail: bool| {
            (tool.call)(
                TaskContext::detached(name),
                json!({ "fail": fail }).as_object().unwrap().clone(),
            )
        };
        let ok = call(false).await.expect(name);
        assert!(!ok.is_error, "{name}");
        let failed = call(true).await.expect_err(name);
        assert_eq!(failed.to_string(), message, "{name}");
    }
    assert!((registration("with_own").output_schema)().is_some());
}
