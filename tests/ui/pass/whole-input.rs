//! `#[input]` takes one parameter as the whole input; its type brings its own schema.

use mcp_tasks::__private::{ToolRegistration, inventory};
use mcp_tasks::prelude::*;
use serde_json::json;

/// The arguments of `resize`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Resize {
    /// Width in pixels.
    width: u32,
    /// Height in pixels.
    height: u32,
}

/// Resize the canvas.
#[task_tool]
async fn resize(#[input] Resize { width, height }: Resize, progress: Progress) -> String {
    progress.report(1.0, Some(1.0));
    format!("{width}x{height}")
}

fn registration(name: &str) -> &'static ToolRegistration {
    inventory::iter::<ToolRegistration>
        .into_iter()
        .find(|r| r.name == name)
        .expect(name)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let tool = registration("resize");
    let schema = (tool.input_schema)();
    assert_eq!(
        schema["properties"]["width"]["description"],
        json!("Width in pixels.")
    );
    assert_eq!(schema["required"], json!(["width", "height"]));

    let args = json!({ "width": 3, "height": 4 });
    let result = (tool.call)(
        TaskContext::detached("resize"),
        args.as_object().unwrap().clone(),
    )
    .await
    .unwrap();
    assert_eq!(result.content, vec![Content::text("3x4")]);

    // The function itself is untouched and stays callable.
    assert_eq!(
        resize(
            Resize {
                width: 1,
                height: 2
            },
            Progress::noop()
        )
        .await,
        "1x2"
    );
    Server::from_registry().unwrap();
}
