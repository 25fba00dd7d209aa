//! Every key of `#[task_tool(...)]` and the registration field it sets.

use mcp_tasks::__private::{ToolRegistration, inventory};
use mcp_tasks::model::TaskSupport;
use mcp_tasks::task_tool;

#[task_tool(
    mode = "forbidden",
    poll_interval = "2m",
    ttl = "90s",
    name = "keys.v1-all_set",
    title = "All keys",
    description = "Overrides the doc comment.",
    read_only = false,
    destructive,
    idempotent,
    open_world = true,
    on_restart = "fail",
    on_unresumable = "rerun",
    crate = ::mcp_tasks,
)]
/// Never used as the description.
async fn all_keys() {}

/// Nothing set.
#[task_tool]
async fn defaults() {}

fn registration(name: &str) -> &'static ToolRegistration {
    inventory::iter::<ToolRegistration>
        .into_iter()
        .find(|r| r.name == name)
        .expect(name)
}

fn main() {
    let tool = registration("keys.v1-all_set");
    assert_eq!(tool.task_support, TaskSupport::Forbidden);
    assert_eq!(tool.poll_interval_ms, 120_000);
    assert_eq!(tool.ttl_ms, Some(90_000));
    assert_eq!(tool.title, Some("All keys"));
    assert_eq!(tool.description, "Overrides the doc comment.");
    assert_eq!(tool.read_only, Some(false));
    assert_eq!(tool.destructive, Some(true));
    assert_eq!(tool.idempotent, Some(true));
    assert_eq!(tool.open_world, Some(true));
    assert!(!tool.rerun_on_restart);
    assert!(tool.rerun_unresumable);
    assert_eq!((tool.output_schema)(), None);

    let tool = registration("defaults");
    assert_eq!(tool.task_support, TaskSupport::Optional);
    assert_eq!(tool.poll_interval_ms, 1_000);
    assert_eq!(tool.ttl_ms, Some(3_600_000));
    assert_eq!(tool.title, None);
    assert_eq!(tool.description, "Nothing set.");
    assert_eq!(tool.read_only, None);
    assert!(!tool.rerun_on_restart);
    assert!(!tool.rerun_unresumable);
    let schema = (tool.input_schema)();
    assert_eq!(schema["type"], "object");

    let server = mcp_tasks::Server::from_registry().unwrap();
    assert_eq!(server.tools().len(), 2);
}
