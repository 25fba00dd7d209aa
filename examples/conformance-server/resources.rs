//! The resources of the conformance suite's "everything server".

use mcp_tasks::model::ResourceContents;
use mcp_tasks::{Resource, ResourceTemplate};
use serde_json::{Value, json};

fn text(uri: String, mime_type: &str, text: impl Into<String>) -> Vec<ResourceContents> {
    vec![ResourceContents {
        uri,
        mime_type: Some(mime_type.into()),
        text: Some(text.into()),
        blob: None,
    }]
}

/// Every fixture resource.
pub fn resources() -> Vec<Resource> {
    vec![
        Resource::new("test://static-text", "static-text", |_, uri| async move {
            Ok(text(
                uri,
                "text/plain",
                "This is the content of the static text resource.",
            ))
        })
        .description("A static text resource.")
        .mime_type("text/plain"),
        Resource::new(
            "test://static-binary",
            "static-binary",
            |_, uri| async move {
                Ok(vec![ResourceContents {
                    uri,
                    mime_type: Some("image/png".into()),
                    text: None,
                    blob: Some(crate::PNG.into()),
                }])
            },
        )
        .description("A static binary resource (a PNG image).")
        .mime_type("image/png"),
        Resource::new(
            "test://watched-resource",
            "watched-resource",
            |_, uri| async move { Ok(text(uri, "text/plain", "Watched resource content.")) },
        )
        .description("A resource clients can subscribe to.")
        .mime_type("text/plain"),
    ]
}

/// Every fixture resource template.
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(
            "test://template/{id}/data",
            "template-data",
            |_, uri, vars| async move {
                let id = vars.get("id").and_then(Value::as_str).unwrap_or_default();
                // Written by hand to keep the suite's key order.
                let data = format!(
                    r#"{{"id":{},"templateTest":true,"data":{}}}"#,
                    json!(id),
                    json!(format!("Data for ID: {id}"))
                );
                Ok(text(uri, "application/json", data))
            },
        )
        .description("A template that substitutes `{id}`.")
        .mime_type("application/json"),
    ]
}
