//! Every schema the conformance fixture lists is standard JSON Schema: no format outside the
//! 2020-12 vocabulary (schemars' `uint64`, `int32`, `double`, ... make Ajv-based clients such
//! as the MCP Inspector warn), with integer bounds in their place.

mod support;

use serde_json::{Value, json};
use std::process::Stdio;
use support::example;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// The formats JSON Schema 2020-12 defines.
const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Every `(path, format)` in a schema.
fn walk(value: &Value, path: &str, formats: &mut Vec<(String, String)>) {
    match value {
        Value::Object(obj) => {
            if let Some(Value::String(format)) = obj.get("format") {
                formats.push((path.to_owned(), format.clone()));
            }
            for (key, child) in obj {
                walk(child, &format!("{path}/{key}"), formats);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk(child, &format!("{path}/{i}"), formats);
            }
        }
        _ => {}
    }
}

#[tokio::test]
async fn every_fixture_tool_schema_uses_standard_formats_only() {
    let mut child = Command::new(example("conformance-server"))
        .args(["--stdio", "--store", "memory"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the conformance server");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });

    let mut tools = Vec::new();
    let mut cursor: Option<Value> = None;
    for id in 1.. {
        let mut params = json!({ "_meta": meta });
        if let Some(cursor) = &cursor {
            params["cursor"] = cursor.clone();
        }
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params});
        stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap();
        let line = lines.next_line().await.unwrap().expect("an answer");
        let answer: Value = serde_json::from_str(&line).unwrap();
        let result = &answer["result"];
        tools.extend(result["tools"].as_array().expect("tools").iter().cloned());
        match result.get("nextCursor") {
            Some(next) if !next.is_null() => cursor = Some(next.clone()),
            _ => break,
        }
    }
    assert!(
        tools.len() > 10,
        "the fixture lists its tools: {}",
        tools.len()
    );

    // MCP requires both schemas to be objects at the root; a tool whose structured output is
    // an array or a string breaks clients' `tools/list` (the MCP Inspector refuses the whole
    // list) or is silently dropped.
    for tool in &tools {
        let name = tool["name"].as_str().unwrap_or_default();
        assert_eq!(tool["inputSchema"]["type"], "object", "{name}: {tool}");
        if let Some(output) = tool.get("outputSchema") {
            assert_eq!(output["type"], "object", "{name}: {tool}");
        }
    }

    let mut formats = Vec::new();
    for tool in &tools {
        let name = tool["name"].as_str().unwrap_or_default();
        for key in ["inputSchema", "outputSchema"] {
            if let Some(schema) = tool.get(key) {
                walk(schema, &format!("{name}/{key}"), &mut formats);
            }
        }
    }
    let odd: Vec<_> = formats
        .iter()
        .filter(|(_, f)| !STANDARD_FORMATS.contains(&f.as_str()))
        .collect();
    assert!(odd.is_empty(), "non-standard formats: {odd:?}");
    let seconds = tools
        .iter()
        .find(|t| t["inputSchema"]["properties"]["seconds"].is_object())
        .map(|t| &t["inputSchema"]["properties"]["seconds"])
        .expect("a tool with an unsigned `seconds` argument");
    assert_eq!(seconds["minimum"], 0, "{seconds}");
    assert_eq!(seconds["maximum"], u64::MAX, "{seconds}");
}
