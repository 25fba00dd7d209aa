//! A tool deep in a module tree registers itself just the same, with its module path and the
//! line of its `fn` recorded for duplicate-name errors.

use mcp_tasks::__private::{ToolRegistration, inventory};

mod reports {
    pub mod quarterly {
        use mcp_tasks::prelude::*;

        /// Render the quarterly report.
        ///
        /// Pages are rendered in order.
        #[task_tool(mode = "required", poll_interval = "250ms")]
        pub async fn render(pages: u32) -> Result<String, ToolError> {
            if pages == 0 {
                return Err(ToolError::new("nothing to render"));
            }
            Ok(format!("{pages} pages"))
        }

        pub const RENDER_LINE: u32 = line!() - 7;
    }
}

fn main() {
    let tool = inventory::iter::<ToolRegistration>
        .into_iter()
        .find(|r| r.name == "render")
        .unwrap();
    assert!(
        tool.module_path.ends_with("::reports::quarterly"),
        "{}",
        tool.module_path
    );
    assert_eq!(tool.line, reports::quarterly::RENDER_LINE);
    assert!(tool.file.ends_with("nested-module.rs"), "{}", tool.file);
    assert_eq!(
        tool.description,
        "Render the quarterly report.\n\nPages are rendered in order."
    );
    assert_eq!(tool.task_support, mcp_tasks::model::TaskSupport::Required);
    assert_eq!(tool.poll_interval_ms, 250);
    // The function is still an ordinary `pub` function of its module.
    let _ = reports::quarterly::render;
    mcp_tasks::Server::from_registry().unwrap();
}
