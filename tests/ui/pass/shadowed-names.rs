//! Generated code names everything through absolute paths, so user items called `Result`,
//! `Option`, `Box`, `Send`, `String`, `TaskContext`, `JsonObject`, `core`, `std`, `serde`,
//! `schemars` or `inventory` change nothing.
//!
//! (Shadowing `Some` or a primitive such as `u64` breaks the serde and schemars derives
//! themselves, so it is not tested here.)

#![allow(dead_code)]

use mcp_tasks::__private::ToolRegistration;
use mcp_tasks::task_tool;
use serde_json::json;

struct Result;
struct Option;
struct Box;
struct Send;
struct String;
struct TaskContext;
struct JsonObject;
mod core {}
mod std {}
mod serde {}
mod schemars {}
mod inventory {}

/// Count to `to`.
#[task_tool(ttl = "none", title = "Count")]
async fn count(
    to: ::std::primitive::u32,
    label: ::std::option::Option<::std::string::String>,
) -> ::std::result::Result<::std::string::String, mcp_tasks::ToolError> {
    ::std::result::Result::Ok(::std::format!("{}{to}", label.unwrap_or_default()))
}

fn registration(name: &str) -> &'static ToolRegistration {
    mcp_tasks::__private::inventory::iter::<ToolRegistration>
        .into_iter()
        .find(|r| r.name == name)
        .expect(name)
}

fn main() {
    let tool = registration("count");
    assert_eq!(tool.title, ::std::option::Option::Some("Count"));
    assert_eq!(tool.ttl_ms, ::std::option::Option::None);
    let schema = (tool.input_schema)();
    assert_eq!(schema["required"], json!(["to"]));
    mcp_tasks::Server::from_registry().unwrap();
}
