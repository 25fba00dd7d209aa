//! Application state: a value registered on the builder reaches `State<T>` parameters, in
//! sync calls and in tasks; a tool whose state nobody registered stops the build.

use mcp_tasks::prelude::*;
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Stands in for a connection pool: shared by every call.
#[derive(Default)]
struct Pool {
    queries: AtomicU64,
}

impl Pool {
    fn query(&self, sql: &str) -> String {
        let n = self.queries.fetch_add(1, Ordering::Relaxed) + 1;
        format!("query {n}: {sql}")
    }
}

struct Config {
    greeting: String,
}

/// Runs a query on the shared pool.
#[task_tool(mode = "optional")]
async fn run_query(sql: String, pool: State<Pool>, config: State<Config>) -> String {
    format!("{}, {}", config.greeting, pool.query(&sql))
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}})
}

#[tokio::test]
async fn state_reaches_sync_calls_and_tasks() {
    let server = Server::builder()
        .registry_tools()
        .state(Pool::default())
        .state(Config {
            greeting: "hi".into(),
        })
        .build()
        .unwrap();
    let (session, _out) = server.session();
    // A plain call (no tasks extension declared).
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "run_query", "arguments": {"sql": "select 1"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let r: Value =
        serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap();
    assert_eq!(
        r["result"]["content"][0]["text"], "hi, query 1: select 1",
        "{r}"
    );
    // A task: the same pool.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "run_query", "arguments": {"sql": "select 2"}, "_meta": meta()}});
    let r: Value =
        serde_json::from_str(&session.handle_text(&call.to_string()).await.unwrap()).unwrap();
    let id = r["result"]["taskId"].as_str().expect("a task").to_owned();
    let text = Mutex::new(Value::Null);
    for _ in 0..200 {
        let get = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
            "params": {"taskId": id, "_meta": meta()}});
        let r: Value =
            serde_json::from_str(&session.handle_text(&get.to_string()).await.unwrap()).unwrap();
        if r["result"]["status"] == "completed" {
            *text.lock().unwrap() = r["result"]["result"]["content"][0]["text"].clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(*text.lock().unwrap(), "hi, query 2: select 2");
}

#[test]
fn a_tool_whose_state_is_not_registered_stops_the_build() {
    let error = Server::builder()
        .registry_tools()
        .state(Pool::default())
        .build()
        .unwrap_err()
        .to_string();
    assert!(error.contains("\"run_query\""), "{error}");
    assert!(error.contains("Config"), "{error}");
    assert!(error.contains("ServerBuilder::state"), "{error}");

    // The same check holds for builder tools that declare what they need.
    let error = Server::builder()
        .tool(
            Tool::new("plain", |_, _| async { Ok(CallToolResult::default()) })
                .requires_state::<Pool>(),
        )
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("\"plain\"") && error.contains("Pool"),
        "{error}"
    );
}
