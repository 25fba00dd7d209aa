//! Tools declared with `#[task_tool]` are listed with their schemas and callable in both eras.

use mcp_tasks::Session;
use mcp_tasks::prelude::*;
use serde_json::{Value, json};

/// Add two numbers.
#[task_tool(mode = "forbidden", read_only)]
async fn add(
    #[arg(description = "The first addend.")] a: i64,
    #[arg(default = 1)] b: i64,
) -> Json<Sum> {
    Json(Sum { sum: a + b })
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Sum {
    sum: i64,
}

/// Slowly shout a word.
#[task_tool(mode = "optional", poll_interval = "250ms", ttl = "10m")]
async fn shout(word: String, progress: Progress) -> Result<String, ToolError> {
    progress.report(1.0, Some(1.0));
    if word.is_empty() {
        return Err(ToolError::new("nothing to shout"));
    }
    Ok(word.to_uppercase())
}

/// Fail with a context chain, through `anyhow::Result`.
#[task_tool(mode = "forbidden")]
async fn fail_anyhow(code: Option<i32>) -> anyhow::Result<String> {
    if let Some(code) = code {
        return Err(ProtocolError::new(code, "refused").into());
    }
    let parsed: anyhow::Result<i64> = "x".parse::<i64>().map_err(anyhow::Error::from);
    let n = anyhow::Context::context(parsed, "reading the count")?;
    Ok(n.to_string())
}

/// Fail with a boxed error.
#[task_tool(mode = "forbidden")]
async fn fail_boxed() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    Err(std::io::Error::other("disk unplugged").into())
}

/// Fail with an error type of its own.
#[task_tool(mode = "forbidden")]
async fn fail_own() -> Result<Json<Sum>, SheetJammed> {
    Err(SheetJammed)
}

/// Fail with `?` on an `anyhow::Error` inside a `ToolError` tool.
#[task_tool(mode = "forbidden")]
async fn fail_question_mark() -> Result<String, ToolError> {
    let step: anyhow::Result<()> = Err(anyhow::anyhow!("step two failed"));
    step?;
    Ok("unreachable".into())
}

/// Charge, then mail: two durable steps.
#[task_tool(mode = "optional", on_restart = "rerun")]
async fn charge_and_mail(order: String, steps: Steps) -> Result<String, ToolError> {
    let receipt: String = steps
        .run("charge", || async { Ok(format!("receipt-{order}")) })
        .await?;
    let mailed: bool = steps.run("mail", || async { Ok(true) }).await?;
    Ok(format!("{receipt} mailed: {mailed}"))
}

/// Rebuild an index, once per index and tenant at a time.
#[task_tool(mode = "optional", unique = ["index", "tenant"], unique_window = "10m")]
async fn rebuild(index: String, tenant: Option<String>, full: Option<bool>) -> String {
    let _ = full;
    format!("{}/{index}", tenant.unwrap_or_default())
}

/// Rebuild everything, once at a time.
#[task_tool(mode = "required", unique)]
async fn rebuild_all() {}

fn registration(name: &str) -> &'static mcp_tasks::__private::ToolRegistration {
    mcp_tasks::__private::inventory::iter::<mcp_tasks::__private::ToolRegistration>
        .into_iter()
        .find(|r| r.name == name)
        .expect(name)
}

#[derive(Debug)]
struct SheetJammed;

impl std::fmt::Display for SheetJammed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("sheet jammed")
    }
}

impl std::error::Error for SheetJammed {}

async fn call(session: &Session, id: u64, method: &str, params: Value) -> Value {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    serde_json::from_str(&session.handle_text(&msg.to_string()).await.unwrap()).unwrap()
}

fn meta(tasks: bool) -> Value {
    let caps = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": caps})
}

#[tokio::test]
async fn macro_tools_are_listed_with_their_schemas() {
    let server = Server::from_registry().unwrap();
    let (s, _out) = server.session();
    call(
        &s,
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
    )
    .await;
    let r = call(&s, 2, "tools/list", json!({})).await;
    let tools = r["result"]["tools"].as_array().unwrap();
    let add = tools.iter().find(|t| t["name"] == "add").unwrap();
    assert_eq!(add["description"], "Add two numbers.");
    assert_eq!(add["inputSchema"]["type"], "object");
    assert_eq!(add["inputSchema"]["required"], json!(["a"]));
    assert_eq!(
        add["inputSchema"]["properties"]["a"]["description"],
        "The first addend."
    );
    assert_eq!(add["inputSchema"]["properties"]["b"]["default"], 1);
    assert_eq!(add["outputSchema"]["properties"]["sum"]["type"], "integer");
    assert_eq!(add["annotations"]["readOnlyHint"], true);
    assert_eq!(add["execution"]["taskSupport"], "forbidden");
    let shout = tools.iter().find(|t| t["name"] == "shout").unwrap();
    assert_eq!(shout["execution"]["taskSupport"], "optional");
    assert!(shout.get("outputSchema").is_none());
}

#[tokio::test]
async fn macro_tools_are_callable_in_the_stateful_era() {
    let server = Server::from_registry().unwrap();
    let (s, _out) = server.session();
    call(
        &s,
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
    )
    .await;
    let r = call(
        &s,
        2,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 2}}),
    )
    .await;
    assert_eq!(r["result"]["structuredContent"], json!({"sum": 3}));
    let r = call(
        &s,
        3,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 2, "c": 1}}),
    )
    .await;
    assert_eq!(
        r["result"]["isError"], true,
        "unknown fields are refused: {r}"
    );
    let r = call(
        &s,
        4,
        "tools/call",
        json!({"name": "shout", "arguments": {"word": "hey"}, "task": {}}),
    )
    .await;
    let id = r["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(r["result"]["task"]["pollInterval"], 250);
    assert_eq!(r["result"]["task"]["ttl"], 600_000);
    let r = call(&s, 5, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["result"]["content"][0]["text"], "HEY");
    let r = call(
        &s,
        6,
        "tools/call",
        json!({"name": "shout", "arguments": {"word": ""}}),
    )
    .await;
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(r["result"]["content"][0]["text"], "nothing to shout");
}

#[tokio::test]
async fn macro_tools_are_callable_in_the_stateless_era() {
    let server = Server::from_registry().unwrap();
    let (s, _out) = server.session();
    let r = call(
        &s,
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 5, "b": 5}, "_meta": meta(false)}),
    )
    .await;
    assert_eq!(r["result"]["structuredContent"], json!({"sum": 10}));
    assert_eq!(r["result"]["resultType"], "complete");
    let r = call(
        &s,
        2,
        "tools/call",
        json!({"name": "shout", "arguments": {"word": "x"}, "_meta": meta(false)}),
    )
    .await;
    assert_eq!(r["result"]["content"][0]["text"], "X");
    let r = call(
        &s,
        3,
        "tools/call",
        json!({"name": "shout", "arguments": {"word": "y"}, "_meta": meta(true)}),
    )
    .await;
    assert_eq!(r["result"]["resultType"], "task");
    let id = r["result"]["taskId"].as_str().unwrap().to_owned();
    for n in 0..100 {
        let r = call(
            &s,
            10 + n,
            "tasks/get",
            json!({"taskId": id, "_meta": meta(true)}),
        )
        .await;
        if r["result"]["status"] == "completed" {
            assert_eq!(r["result"]["result"]["content"][0]["text"], "Y");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the task did not complete");
}

#[tokio::test]
async fn every_error_return_type_ends_as_a_readable_tool_error() {
    let server = Server::from_registry().unwrap();
    let (s, _out) = server.session();
    for (n, (name, arguments, text)) in [
        (
            "fail_anyhow",
            json!({}),
            "reading the count: invalid digit found in string",
        ),
        ("fail_boxed", json!({}), "disk unplugged"),
        ("fail_own", json!({}), "sheet jammed"),
        ("fail_question_mark", json!({}), "step two failed"),
    ]
    .into_iter()
    .enumerate()
    {
        let r = call(
            &s,
            n as u64,
            "tools/call",
            json!({"name": name, "arguments": arguments, "_meta": meta(false)}),
        )
        .await;
        assert_eq!(r["result"]["isError"], true, "{name}: {r}");
        assert_eq!(r["result"]["content"][0]["text"], text, "{name}: {r}");
    }
    // A `ProtocolError` carried by an `anyhow::Error` is still a JSON-RPC error.
    let r = call(
        &s,
        9,
        "tools/call",
        json!({"name": "fail_anyhow", "arguments": {"code": -32042}, "_meta": meta(false)}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32042, "{r}");
    assert_eq!(r["error"]["message"], "refused", "{r}");
}

#[tokio::test]
async fn a_steps_tool_is_declared_durable_and_runs_its_steps() {
    let reg = registration("charge_and_mail");
    assert!(reg.durable_steps && reg.rerun_on_restart);
    assert_eq!(
        reg.idempotent, None,
        "durable steps stand in for idempotence"
    );
    let server = Server::from_registry().unwrap();
    let (s, _out) = server.session();
    let r = call(
        &s,
        1,
        "tools/call",
        json!({"name": "charge_and_mail", "arguments": {"order": "A-1"}, "_meta": meta(false)}),
    )
    .await;
    assert_eq!(
        r["result"]["content"][0]["text"], "receipt-A-1 mailed: true",
        "{r}"
    );
    let r = call(
        &s,
        2,
        "tools/call",
        json!({"name": "charge_and_mail", "arguments": {"order": "A-2"}, "_meta": meta(true)}),
    )
    .await;
    let id = r["result"]["taskId"].as_str().unwrap().to_owned();
    let mut done = Value::Null;
    for _ in 0..500 {
        done = call(
            &s,
            3,
            "tasks/get",
            json!({"taskId": id, "_meta": meta(true)}),
        )
        .await;
        if done["result"]["status"] == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "receipt-A-2 mailed: true",
        "{done}"
    );
    let stored = server
        .tasks()
        .get(&mcp_tasks::Viewer::admin("test"), &id)
        .await
        .unwrap();
    let steps = stored.map(|task| task.steps).unwrap_or_default();
    assert_eq!(steps["charge"], "receipt-A-2");
    assert_eq!(steps["mail"], true);
}

#[test]
fn a_unique_tool_carries_its_arguments_and_window() {
    let reg = registration("rebuild");
    assert_eq!(reg.unique, Some(Some(&["index", "tenant"][..])));
    assert_eq!(reg.unique_window_ms, Some(600_000));
    assert!(!reg.durable_steps);
    let all = registration("rebuild_all");
    assert_eq!(all.unique, Some(None));
    assert_eq!(all.unique_window_ms, None);
    // The runtime's checks agree: the arguments named are the tool's.
    let server = Server::from_registry().unwrap();
    assert!(server.tools().get("rebuild").is_some());
}
