//! `#[arg(description, default, rename)]` shape the input schema and the parsing; `Option`
//! parameters may be left out.

use mcp_tasks::__private::{ToolRegistration, inventory};
use mcp_tasks::prelude::*;
use serde_json::json;

const DEFAULT_DEPTH: u32 = 3;

/// What the crawl was given.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Crawled {
    fields: Vec<String>,
}

/// Crawl a site.
#[task_tool(read_only, idempotent = true, open_world = false, on_restart = "rerun")]
async fn crawl(
    #[arg(description = "The page to start from.")] url: String,
    #[arg(default = DEFAULT_DEPTH * 2, description = "How deep to follow links.")] depth: u32,
    #[arg(rename = "userAgent")] user_agent: Option<String>,
    #[arg(rename = "type")] r#type: Option<String>,
    #[arg] note: Option<String>,
) -> Json<Crawled> {
    Json(Crawled {
        fields: vec![
            url,
            depth.to_string(),
            user_agent.unwrap_or_default(),
            r#type.unwrap_or_default(),
            note.unwrap_or_default(),
        ],
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let tool = inventory::iter::<ToolRegistration>
        .into_iter()
        .find(|r| r.name == "crawl")
        .unwrap();
    assert_eq!(tool.read_only, Some(true));
    assert_eq!(tool.idempotent, Some(true));
    assert_eq!(tool.open_world, Some(false));
    assert_eq!(tool.destructive, None);
    assert!(tool.rerun_on_restart);

    let schema = (tool.input_schema)();
    let properties = &schema["properties"];
    assert_eq!(
        properties["url"]["description"],
        json!("The page to start from.")
    );
    assert_eq!(
        properties["depth"]["description"],
        json!("How deep to follow links.")
    );
    assert_eq!(properties["depth"]["default"], json!(6));
    assert!(properties.get("userAgent").is_some());
    assert!(properties.get("type").is_some());
    assert!(properties.get("user_agent").is_none());
    assert_eq!(schema["required"], json!(["url"]));
    assert!((tool.output_schema)().is_some());

    let args = json!({ "url": "https://example.com", "userAgent": "bot", "type": "html" })
        .as_object()
        .unwrap()
        .clone();
    let result = (tool.call)(TaskContext::detached("crawl"), args)
        .await
        .unwrap();
    assert_eq!(
        result.structured_content,
        Some(json!({"fields": ["https://example.com", "6", "bot", "html", ""]}))
    );
    mcp_tasks::Server::from_registry().unwrap();
}
