//! The runtime's metrics reach an installed recorder, and its logs carry the task (the logs
//! themselves: `tests/logs.rs`).

use mcp_tasks::prelude::*;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test]
async fn tasks_are_counted_by_tool_and_status() {
    let exporter = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let server = Server::builder()
        .tool(
            Tool::new("ok", |_, _| async { Ok(CallToolResult::default()) })
                .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("boom", |_, _| async {
                Err(ToolError::protocol(-32603, "no"))
            })
            .task_support(TaskSupport::Optional),
        )
        .build()
        .unwrap();
    let (session, _out) = server.session();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    for (n, tool) in ["ok", "ok", "boom"].into_iter().enumerate() {
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": tool, "arguments": {}, "_meta": meta}});
        let answer: Value =
            serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap();
        assert!(answer["result"]["taskId"].is_string(), "{answer}");
    }
    let mut text = String::new();
    for _ in 0..100 {
        text = exporter.render();
        if text.contains(r#"mcp_tasks_finished_total{tool="boom",status="failed"} 1"#) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        text.contains(r#"mcp_tasks_created_total{tool="ok"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"mcp_tasks_finished_total{tool="ok",status="completed"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"mcp_tasks_finished_total{tool="boom",status="failed"} 1"#),
        "{text}"
    );
    assert!(text.contains("mcp_tasks_running 0"), "{text}");
}
