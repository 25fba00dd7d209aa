//! Load over loopback HTTP: sync tool calls, task creates and `tasks/get`, for both protocol
//! eras, at 1, 16 and 64 concurrent clients (each with its own keep-alive connection).
//!
//! ```text
//! cargo bench --bench http                 # the full table (a few seconds per row)
//! MCP_BENCH_SECS=0.5 cargo bench --bench http
//! ```
//!
//! Prints a Markdown table: requests per second and latency percentiles per row.

use mcp_tasks::prelude::*;
use mcp_tasks::transport::http::HttpConfig;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Answers at once.
#[task_tool(mode = "forbidden")]
async fn echo(text: String) -> String {
    text
}

/// A task that finishes at once.
#[task_tool(mode = "required", poll_interval = "1s")]
async fn quick_job() -> &'static str {
    "done"
}

const V2026: &str = "2026-07-28";
const V2025: &str = "2025-11-25";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Era {
    Stateless,
    Stateful,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    SyncCall,
    TaskCreate,
    TaskGet,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::SyncCall => "sync tools/call",
            Op::TaskCreate => "task create",
            Op::TaskGet => "tasks/get",
        }
    }
}

/// One client: its own connection, and for 2025-11-25 its own session.
struct Client {
    http: reqwest::Client,
    url: String,
    era: Era,
    session: Option<String>,
    task_id: String,
    next_id: u64,
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        }
    })
}

impl Client {
    async fn new(url: &str, era: Era) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        let mut client = Self {
            http,
            url: url.to_owned(),
            era,
            session: None,
            task_id: String::new(),
            next_id: 0,
        };
        if era == Era::Stateful {
            let response = client
                .http
                .post(&client.url)
                .header("content-type", "application/json")
                .body(
                    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                        "protocolVersion": V2025, "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "1"}}})
                    .to_string(),
                )
                .send()
                .await
                .unwrap();
            client.session = Some(
                response.headers()["mcp-session-id"]
                    .to_str()
                    .unwrap()
                    .to_owned(),
            );
            response.bytes().await.unwrap();
        }
        let created = client.call(Op::TaskCreate).await;
        client.task_id = match era {
            Era::Stateless => created["result"]["taskId"].as_str(),
            Era::Stateful => created["result"]["task"]["taskId"].as_str(),
        }
        .unwrap_or_else(|| panic!("no task created: {created}"))
        .to_owned();
        client
    }

    async fn call(&mut self, op: Op) -> Value {
        self.next_id += 1;
        let (method, mut params, name) = match op {
            Op::SyncCall => (
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "hi"}}),
                "echo".to_owned(),
            ),
            Op::TaskCreate => (
                "tools/call",
                json!({"name": "quick_job", "arguments": {}}),
                "quick_job".to_owned(),
            ),
            Op::TaskGet => (
                "tasks/get",
                json!({"taskId": self.task_id}),
                self.task_id.clone(),
            ),
        };
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        match self.era {
            Era::Stateless => {
                params["_meta"] = meta();
                request = request
                    .header("mcp-protocol-version", V2026)
                    .header("mcp-method", method)
                    .header("mcp-name", name);
            }
            Era::Stateful => {
                if matches!(op, Op::TaskCreate) {
                    params["task"] = json!({"ttl": 60_000});
                }
                request = request
                    .header("mcp-protocol-version", V2025)
                    .header("mcp-session-id", self.session.as_deref().unwrap());
            }
        }
        let body =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let response = request.body(body.to_string()).send().await.unwrap();
        let bytes = response.bytes().await.unwrap();
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(value.get("result").is_some(), "{op:?}: {value}");
        value
    }
}

struct Row {
    requests: usize,
    latencies: Vec<Duration>,
}

async fn measure(url: &str, era: Era, op: Op, clients: usize, secs: f64) -> Row {
    let mut workers = Vec::new();
    let start_line = std::sync::Arc::new(tokio::sync::Barrier::new(clients));
    for _ in 0..clients {
        let url = url.to_owned();
        let barrier = std::sync::Arc::clone(&start_line);
        workers.push(tokio::spawn(async move {
            let mut client = Client::new(&url, era).await;
            for _ in 0..20 {
                client.call(op).await;
            }
            barrier.wait().await;
            let until = Instant::now() + Duration::from_secs_f64(secs);
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let t = Instant::now();
                client.call(op).await;
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for w in workers {
        latencies.extend(w.await.unwrap());
    }
    latencies.sort();
    Row {
        requests: latencies.len(),
        latencies,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let secs: f64 = std::env::var("MCP_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // The load generator is one requestor: lift the per-requestor quotas.
        let server = Server::builder()
            .name("http-bench")
            .registry_tools()
            .quotas(mcp_tasks::quota::QuotaConfig::unlimited())
            .build()
            .unwrap();
        let handle = server
            .serve_http(
                // Every client of the load generator is one anonymous requestor: lift the
                // per-client session share as well as the table's size.
                HttpConfig::new()
                    .max_sessions(1_000)
                    .max_sessions_per_client(1_000),
            )
            .await
            .unwrap();
        let url = handle.url("/mcp");
        println!("| era | operation | clients | requests/s | p50 | p99 |");
        println!("| --- | --- | ---: | ---: | ---: | ---: |");
        for era in [Era::Stateless, Era::Stateful] {
            for op in [Op::SyncCall, Op::TaskCreate, Op::TaskGet] {
                for clients in [1, 16, 64] {
                    let row = measure(&url, era, op, clients, secs).await;
                    let era_label = match era {
                        Era::Stateless => V2026,
                        Era::Stateful => V2025,
                    };
                    println!(
                        "| {era_label} | {} | {clients} | {:.0} | {:.2} ms | {:.2} ms |",
                        op.label(),
                        row.requests as f64 / secs,
                        percentile(&row.latencies, 0.50).as_secs_f64() * 1e3,
                        percentile(&row.latencies, 0.99).as_secs_f64() * 1e3,
                    );
                }
            }
        }
        handle.shutdown().await.unwrap();
    });
}
