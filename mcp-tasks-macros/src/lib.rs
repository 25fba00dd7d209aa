//! The `#[task_tool]` attribute of mcp-tasks.

use proc_macro::TokenStream;

/// Turns an `async fn` into an MCP tool.
#[proc_macro_attribute]
pub fn task_tool(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
