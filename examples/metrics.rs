//! The runtime's metrics, exported in the Prometheus text format.
//!
//! The runtime records through the `metrics` facade and depends on no exporter: install the
//! one you use. This example installs `metrics-exporter-prometheus`, runs five tasks of the
//! `nap` tool, says what happened and prints what a scrape would see.
//! With `--serve`, it then serves the MCP endpoint at `/mcp` and the metrics at `/metrics` in
//! one axum app, until Ctrl-C.
//!
//! ```text
//! cargo run -p mcp-tasks-e2e --example metrics
//! cargo run -p mcp-tasks-e2e --example metrics -- --serve 127.0.0.1:3000
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

use mcp_tasks::axum::{self, Router, routing::get};
use mcp_tasks::prelude::*;
use mcp_tasks::transport::http::HttpConfig;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

/// Sleeps `millis` milliseconds, then answers.
#[task_tool(mode = "optional", poll_interval = "100ms")]
async fn nap(millis: u64) -> String {
    tokio::time::sleep(Duration::from_millis(millis)).await;
    format!("slept {millis} ms")
}

const USAGE: &str = "usage: cargo run -p mcp-tasks-e2e --example metrics -- [--serve ADDR]";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let serve: Option<SocketAddr> = match args.as_slice() {
        [] => None,
        [flag, addr] if flag == "--serve" => Some(addr.parse()?),
        [flag] if flag == "--help" || flag == "-h" => {
            println!("{USAGE}");
            return Ok(());
        }
        _ => anyhow::bail!("{USAGE}"),
    };
    let exporter = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let server = Server::from_registry()?;

    // Five calls of a 2026-07-28 client that asks for tasks, in this process.
    let (session, _outbound) = server.session();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    for (n, millis) in [0, 20, 40, 60, 80].into_iter().enumerate() {
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "nap", "arguments": {"millis": millis}, "_meta": meta}});
        let reply = session.handle_text(&call.to_string()).await;
        let answer: Value = serde_json::from_str(&reply.unwrap_or_default())?;
        anyhow::ensure!(answer["result"]["taskId"].is_string(), "no task: {answer}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    println!(
        "Five `nap` calls became tasks, slept from 0 to 80 ms and completed. The runtime
counted them through the `metrics` facade, and the Prometheus exporter installed above
renders what a scrape of /metrics returns:

  mcp_tasks_created_total{{tool=\"nap\"}}                     the tasks created (5)
  mcp_tasks_finished_total{{tool=\"nap\",status=\"completed\"}} the tasks that completed (5);
                                                            `failed` and `cancelled` count apart
  mcp_tasks_run_seconds{{tool=\"nap\",quantile=...}}           how long their runs took
  mcp_tasks_running                                         the tasks running now (0)
"
    );
    println!("{}", exporter.render());

    let Some(addr) = serve else {
        println!(
            "To serve these beside the MCP endpoint, run with `--serve 127.0.0.1:3000`: one axum
app with /mcp (`Server::http_router`) and /metrics (the exporter's `render`). Its code is
in {}.",
            file!()
        );
        return Ok(());
    };
    // One axum app: the MCP endpoint and the scrape endpoint, on one port.
    let app = Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(exporter.render())),
        )
        .merge(server.http_router(HttpConfig::new().path("/mcp")));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    println!("MCP on http://{local}/mcp, metrics on http://{local}/metrics (Ctrl-C stops)");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
