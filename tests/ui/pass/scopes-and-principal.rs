//! Scopes on a tool reach its definition, and `Principal` and `Option<Principal>` are
//! injected without `#[inject]`.

use mcp_tasks::prelude::*;

/// Publish under the caller's name.
#[task_tool(mode = "optional", scopes = ["reports:write", "reports:read"])]
async fn publish(title: String, who: Principal) -> String {
    format!("{title} by {}", who.subject)
}

/// Read, signed in or not.
#[task_tool]
async fn read(title: String, who: Option<mcp_tasks::Principal>) -> String {
    let name = who.map_or_else(|| "anyone".to_owned(), |p| p.subject);
    format!("{title} for {name}")
}

fn main() {
    let registry = mcp_tasks::tool::Registry::from_inventory().unwrap();
    let publish = registry.get("publish").unwrap();
    assert_eq!(publish.required_scopes(), ["reports:write", "reports:read"]);
    assert!(!publish.permits(None));
    let writer = Principal::new("ann").with_scopes(["reports:write", "reports:read"]);
    assert!(publish.permits(Some(&writer)));
    let read = registry.get("read").unwrap();
    assert!(read.required_scopes().is_empty() && read.permits(None));
}
