//! The runtime's metrics, exported in the Prometheus text format.
//!
//! The runtime records through the `metrics` facade and depends on no exporter: install the
//! one you use. This example installs `metrics-exporter-prometheus`, runs a few tasks and
//! prints what a scrape would see.
//!
//! ```text
//! cargo run -p mcp-tasks-e2e --example metrics
//! ```
//!
//! What the runtime records:
//!
//! | name | kind | labels |
//! | --- | --- | --- |
//! | `mcp_tasks_created_total` | counter | `tool` |
//! | `mcp_tasks_claimed_total` | counter | `tool` (tasks this process took from the queue) |
//! | `mcp_tasks_finished_total` | counter | `tool`, `status` |
//! | `mcp_tasks_lapsed_total` | counter | `tool`, `policy` (`fail` or `rerun`) |
//! | `mcp_tasks_run_seconds` | histogram | `tool` |
//! | `mcp_tasks_running` | gauge | |
//! | `mcp_tasks_queued` | gauge | (tasks this process created that wait for a slot) |

use mcp_tasks::prelude::*;
use serde_json::{Value, json};
use std::time::Duration;

/// Sleeps a moment, then answers.
#[task_tool(mode = "optional", poll_interval = "100ms")]
async fn nap(millis: u64) -> String {
    tokio::time::sleep(Duration::from_millis(millis)).await;
    format!("slept {millis} ms")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let exporter = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let server = Server::from_registry()?;
    let (session, _outbound) = server.session();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let mut ids = Vec::new();
    for n in 0..5 {
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "nap", "arguments": {"millis": 20 * n}, "_meta": meta}});
        let answer: Value = serde_json::from_str(
            &session
                .handle_text(&call.to_string())
                .await
                .unwrap_or_default(),
        )?;
        ids.push(
            answer["result"]["taskId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!("{}", exporter.render());
    Ok(())
}
