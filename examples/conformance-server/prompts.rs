//! The prompts of the conformance suite's "everything server".

use mcp_tasks::model::Content;
use mcp_tasks::{GetPromptResult, Prompt, PromptMessage, ToolError};
use serde_json::{Value, json};

fn arg(args: &mcp_tasks::model::JsonObject, name: &str) -> String {
    args.get(name)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn messages(messages: Vec<PromptMessage>) -> Result<GetPromptResult, ToolError> {
    Ok(GetPromptResult {
        description: None,
        messages,
    })
}

/// Every fixture prompt.
pub fn prompts() -> Vec<Prompt> {
    vec![
        Prompt::new("test_simple_prompt", |_, _| async {
            messages(vec![PromptMessage::user(Content::text(
                "This is a simple prompt for testing.",
            ))])
        })
        .description("A simple prompt without arguments."),
        Prompt::new("test_prompt_with_arguments", |_, args| async move {
            messages(vec![PromptMessage::user(Content::text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                arg(&args, "arg1"),
                arg(&args, "arg2")
            )))])
        })
        .description("A prompt with two arguments.")
        .argument("arg1", "First test argument", true)
        .argument("arg2", "Second test argument", true)
        .complete_with("arg1", ["paris", "park", "party", "test", "testing"]),
        Prompt::new("test_prompt_with_embedded_resource", |_, args| async move {
            messages(vec![
                PromptMessage::user(Content::embedded_text(
                    arg(&args, "resourceUri"),
                    "text/plain",
                    "Embedded resource content for testing.",
                )),
                PromptMessage::user(Content::text("Please process the embedded resource above.")),
            ])
        })
        .description("A prompt that embeds a resource.")
        .argument("resourceUri", "URI of the resource to embed", true),
        Prompt::new("test_prompt_with_image", |_, _| async {
            messages(vec![
                PromptMessage::user(Content::image(crate::PNG, "image/png")),
                PromptMessage::user(Content::text("Please analyze the image above.")),
            ])
        })
        .description("A prompt with an image."),
        Prompt::new("test_input_required_result_prompt", |cx, _| async move {
            let answer = cx
                .client()
                .elicit_keyed(
                    "user_context",
                    "What context should the prompt use?",
                    json!({"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}),
                )
                .await?;
            let context = answer
                .content
                .as_ref()
                .and_then(|c| c.get("context"))
                .and_then(Value::as_str)
                .unwrap_or("no context")
                .to_owned();
            messages(vec![PromptMessage::user(Content::text(format!(
                "Use this context: {context}"
            )))])
        })
        .description("A prompt that asks the user for context first."),
    ]
}
