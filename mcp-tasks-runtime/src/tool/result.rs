//! How a tool's return value becomes its result, and the output schema it implies.

use crate::error::ToolError;
use crate::model::{CallToolResult, Content, JsonObject};
use serde::Serialize;

/// Structured output: the value becomes `structuredContent` (and a JSON text block), and
/// the tool's output schema is derived from `T`.
///
/// MCP requires structured content to be a JSON object, so `T` is a struct with named fields
/// (or a map with string keys). A list or a plain value goes in such a struct:
///
/// ```
/// # use mcp_tasks_runtime::Json;
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Files {
///     files: Vec<String>,
/// }
///
/// fn list() -> Json<Files> {
///     Json(Files { files: vec!["a.txt".into()] })
/// }
/// # let _ = list();
/// ```
///
/// A `#[task_tool]` returning `Json<Vec<String>>` (or `Json` of a string, a number, an
/// `Option`, ...) fails to compile, saying so; any other `T` whose schema is not an object
/// makes [`ServerBuilder::build`](crate::ServerBuilder::build) fail with
/// [`ToolDefError::OutputNotObject`](super::ToolDefError::OutputNotObject) naming the tool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Json<T>(pub T);

/// A value a tool may return.
///
/// | return type | result |
/// | --- | --- |
/// | `String`, `&'static str` | one text block |
/// | `Content`, `Vec<Content>` | those blocks |
/// | `CallToolResult` | as is |
/// | `Json<T>` | `structuredContent` + its JSON as text; output schema from `T` |
/// | `()` | no content |
/// | `Result<T, E>` | `T` as above; `E` (a [`ToolError`], `anyhow::Error`, `Box<dyn Error + Send + Sync>` or any `Error + Send + Sync` type) via [`ToolError`]: `isError: true`, or a JSON-RPC error for a [`ProtocolError`](crate::ProtocolError) |
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be returned from a tool",
    label = "not a tool result",
    note = "for structured output return `Json<T>`, where `T` is a struct with named fields (MCP requires a JSON object) with `#[derive(serde::Serialize, schemars::JsonSchema)]`; wrap a list or a plain value in such a struct",
    note = "a tool returns `String`, `&'static str`, `Content`, `Vec<Content>`, `CallToolResult`, `Json<T>`, `()`, or a `Result` of one of them"
)]
pub trait IntoToolResult {
    /// The result.
    fn into_tool_result(self) -> Result<CallToolResult, ToolError>;

    /// The output schema this return type implies.
    fn output_schema() -> Option<JsonObject> {
        None
    }
}

impl IntoToolResult for CallToolResult {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(self)
    }
}

impl IntoToolResult for String {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::success(vec![Content::text(self)]))
    }
}

impl IntoToolResult for &'static str {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::success(vec![Content::text(self)]))
    }
}

impl IntoToolResult for Content {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::success(vec![self]))
    }
}

impl IntoToolResult for Vec<Content> {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::success(self))
    }
}

impl IntoToolResult for () {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::success(Vec::new()))
    }
}

impl<T: Serialize + schemars::JsonSchema + 'static> IntoToolResult for Json<T> {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        let value = serde_json::to_value(&self.0)
            .map_err(|e| ToolError::new(format!("cannot serialize the tool's output: {e}")))?;
        Ok(CallToolResult {
            content: vec![Content::text(value.to_string())],
            structured_content: Some(value),
            is_error: false,
        })
    }

    fn output_schema() -> Option<JsonObject> {
        Some(crate::schema::output_schema::<T>())
    }
}

/// `E` is any error that boxes into `Box<dyn Error + Send + Sync>`: [`ToolError`] itself,
/// [`ProtocolError`](crate::ProtocolError), `anyhow::Error`, a boxed error, `String`, or any
/// `std::error::Error + Send + Sync + 'static` of your own. It becomes a [`ToolError`] through
/// the `From` conversions of [`ToolError`].
impl<T, E> IntoToolResult for Result<T, E>
where
    T: IntoToolResult,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        self.map_err(ToolError::from_returned)
            .and_then(IntoToolResult::into_tool_result)
    }

    fn output_schema() -> Option<JsonObject> {
        T::output_schema()
    }
}
