//! Router-level tests: whole requests through a `Session`, with no transport.

use mcp_tasks_runtime::model::{CallToolResult, JsonObject};
use mcp_tasks_runtime::{ProtocolError, Server, Tool, ToolError};
use serde_json::{Value, json};
use std::time::Duration;
use support::{Client, code, meta, text};

mod support;

fn server() -> Server {
    Server::builder()
        .name("test-server")
        .version("1.2.3")
        .instructions("be nice")
        .page_size(2)
        .tool(
            Tool::new("echo", |_, args: JsonObject| async move {
                text(args["text"].as_str().unwrap_or_default())
            })
            .description("Echo.")
            .input_schema(json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]
            })),
        )
        .tool(Tool::new("fails", |_, _| async {
            Err::<CallToolResult, _>(ToolError::new("the disk is full"))
        }))
        .tool(Tool::new("protocol", |_, _| async {
            Err::<CallToolResult, _>(ProtocolError::new(-32000, "backend down").into())
        }))
        .tool(Tool::new("panics", |_, _| async {
            if true {
                panic!("boom");
            }
            text("unreachable")
        }))
        .tool(Tool::new("progress", |cx, _| async move {
            let p = cx.progress();
            p.report(1.0, Some(2.0));
            p.report(1.0, Some(2.0)); // not increasing: dropped
            p.report_with_message(2.0, Some(2.0), "done");
            cx.info("logged");
            text("ok")
        }))
        .tool(Tool::new("slow", |cx, _| async move {
            cx.cancellation().cancelled().await;
            text("cancelled")
        }))
        .tool(Tool::new("ask", |cx, _| async move {
            let client = cx.client();
            let first = client
                .elicit(
                    "name?",
                    json!({"type": "object", "properties": {"name": {"type": "string"}}}),
                )
                .await?;
            let second = client
                .elicit(
                    "sure?",
                    json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
                )
                .await?;
            text(format!(
                "{} {}",
                first.content.unwrap_or_default()["name"],
                second.content.unwrap_or_default()["ok"]
            ))
        }))
        .tool(
            Tool::new("structured", |_, _| async {
                Ok(CallToolResult {
                    content: vec![],
                    structured_content: Some(json!({"n": "not a number"})),
                    is_error: false,
                })
            })
            .output_schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}})),
        )
        .build()
        .unwrap()
}

async fn stateful() -> Client {
    Client::stateful(&server()).await.0
}

#[tokio::test]
async fn parse_errors_and_malformed_envelopes_keep_the_session_alive() {
    let c = Client::new(&server());
    let r = c.raw("{oops").await.unwrap();
    assert_eq!(code(&r), -32700);
    assert_eq!(r["id"], Value::Null);
    let r = c
        .raw(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#)
        .await
        .unwrap();
    assert_eq!(code(&r), -32600);
    let r = c
        .raw(r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":1}"#)
        .await
        .unwrap();
    assert_eq!(code(&r), -32600);
    assert_eq!(r["id"], "a");
    let r = c
        .raw(r#"{"jsonrpc":"2.0","id":"7","method":"ping"}"#)
        .await
        .unwrap();
    assert_eq!(r["id"], "7");
    assert_eq!(r["result"], json!({}));
}

#[tokio::test]
async fn requests_before_initialize_are_rejected() {
    let mut c = Client::new(&server());
    let r = c.request("tools/list", json!({})).await;
    assert_eq!(code(&r), -32600);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("initialize")
    );
}

#[tokio::test]
async fn initialize_negotiates_the_version() {
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("2024-01-01", "2025-11-25"),
    ] {
        let mut c = Client::new(&server());
        let r = c
            .request(
                "initialize",
                json!({"protocolVersion": asked, "capabilities": {}}),
            )
            .await;
        assert_eq!(r["result"]["protocolVersion"], answered);
        assert_eq!(
            r["result"]["serverInfo"],
            json!({"name": "test-server", "version": "1.2.3"})
        );
        assert_eq!(r["result"]["instructions"], "be nice");
        assert!(r["result"]["capabilities"]["tools"].is_object());
    }
    let mut c = Client::new(&server());
    let r = c.request("initialize", json!({"capabilities": {}})).await;
    assert_eq!(code(&r), -32602);
}

#[tokio::test]
async fn a_second_initialize_is_an_invalid_request() {
    let mut c = stateful().await;
    let r = c
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        )
        .await;
    assert_eq!(code(&r), -32600);
}

#[tokio::test]
async fn stateful_unknown_and_stateless_methods_are_not_found() {
    let mut c = stateful().await;
    for method in ["nope", "server/discover", "tasks/update"] {
        assert_eq!(
            code(&c.request(method, json!({})).await),
            -32601,
            "{method}"
        );
    }
    assert_eq!(c.request("ping", json!({})).await["result"], json!({}));
}

#[tokio::test]
async fn tools_list_paginates_with_opaque_cursors() {
    let mut c = stateful().await;
    let mut names = Vec::new();
    let mut cursor = None;
    loop {
        let params = cursor.map_or(json!({}), |c: String| json!({"cursor": c}));
        let r = c.request("tools/list", params).await;
        let tools = r["result"]["tools"].as_array().unwrap();
        assert!(tools.len() <= 2);
        names.extend(tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
        match r["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(names.len(), 8);
    assert!(names.windows(2).all(|w| w[0] < w[1]));
    let r = c.request("tools/list", json!({"cursor": "bogus"})).await;
    assert_eq!(code(&r), -32602);
    let echo = c.request("tools/list", json!({})).await["result"]["tools"][0].clone();
    assert_eq!(echo["name"], "ask");
}

#[tokio::test]
async fn tools_call_results_and_errors() {
    let mut c = stateful().await;
    let r = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(
        r["result"]["content"],
        json!([{"type": "text", "text": "hi"}])
    );
    assert_eq!(r["result"]["isError"], false);

    let r = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": 3}}),
        )
        .await;
    assert_eq!(r["result"]["isError"], true);
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("invalid arguments")
    );

    let r = c.request("tools/call", json!({"name": "fails"})).await;
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(r["result"]["content"][0]["text"], "the disk is full");

    let r = c.request("tools/call", json!({"name": "protocol"})).await;
    assert_eq!(code(&r), -32000);
    assert_eq!(r["error"]["message"], "backend down");

    assert_eq!(
        code(&c.request("tools/call", json!({"name": "missing"})).await),
        -32602
    );
    assert_eq!(code(&c.request("tools/call", json!({})).await), -32602);
    assert_eq!(
        code(
            &c.request("tools/call", json!({"name": "echo", "arguments": [1]}))
                .await
        ),
        -32602
    );
}

#[tokio::test]
async fn a_panicking_tool_is_an_internal_error_and_the_server_lives_on() {
    let mut c = stateful().await;
    let r = c.request("tools/call", json!({"name": "panics"})).await;
    assert_eq!(code(&r), -32603);
    let r = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "alive"}}),
        )
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "alive");
}

#[tokio::test]
async fn structured_output_is_checked_against_the_output_schema() {
    let mut c = stateful().await;
    let r = c.request("tools/call", json!({"name": "structured"})).await;
    assert_eq!(code(&r), -32603);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("output schema")
    );
}

#[tokio::test]
async fn progress_and_logs_reach_the_client() {
    let mut c = stateful().await;
    let r = c
        .request(
            "tools/call",
            json!({"name": "progress", "_meta": {"progressToken": "p1"}}),
        )
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "ok");
    let out = c.drain();
    let progress: Vec<_> = out
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| {
            (
                m["params"]["progressToken"].clone(),
                m["params"]["progress"].clone(),
            )
        })
        .collect();
    assert_eq!(
        progress,
        vec![(json!("p1"), json!(1.0)), (json!("p1"), json!(2.0))]
    );
    assert!(out.iter().any(|m| m["method"] == "notifications/message"
        && m["params"]["level"] == "info"
        && m["params"]["data"] == "logged"));

    let r = c
        .request("logging/setLevel", json!({"level": "error"}))
        .await;
    assert_eq!(r["result"], json!({}));
    c.request("tools/call", json!({"name": "progress"})).await;
    assert!(
        c.drain().is_empty(),
        "no token, level error: nothing is sent"
    );
    assert_eq!(
        code(
            &c.request("logging/setLevel", json!({"level": "loud"}))
                .await
        ),
        -32602
    );
}

#[tokio::test]
async fn notifications_cancelled_stops_a_call_without_an_answer() {
    let c = stateful().await;
    let session = c.session.clone();
    let call = tokio::spawn(async move {
        session
            .handle_text(
                r#"{"jsonrpc":"2.0","id":"slow-1","method":"tools/call","params":{"name":"slow"}}"#,
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    c.raw(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow-1"}}"#,
    )
    .await;
    assert_eq!(call.await.unwrap(), None);
}

#[tokio::test]
async fn elicitation_is_a_server_request_in_the_stateful_era() {
    let mut c = stateful().await;
    let session = c.session.clone();
    let call = tokio::spawn(async move {
        session
            .handle_text(
                r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"ask"}}"#,
            )
            .await
    });
    for answer in [json!({"name": "Ada"}), json!({"ok": true})] {
        let req: Value = serde_json::from_str(&c.outbound.recv().await.unwrap()).unwrap();
        assert_eq!(req["method"], "elicitation/create");
        assert_eq!(req["params"]["mode"], "form");
        let reply = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "accept", "content": answer}});
        assert_eq!(c.raw(&reply.to_string()).await, None);
    }
    let r: Value = serde_json::from_str(&call.await.unwrap().unwrap()).unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "\"Ada\" true");
}

#[tokio::test]
async fn a_tool_never_asks_for_an_undeclared_capability() {
    let mut c = Client::new(&server());
    c.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
    )
    .await;
    let r = c.request("tools/call", json!({"name": "ask"})).await;
    assert_eq!(code(&r), -32021);
    assert_eq!(
        r["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );
    assert!(c.drain().is_empty());
}

// ---- 2026-07-28 ----

#[tokio::test]
async fn discover_describes_the_server() {
    let mut c = Client::new(&server());
    let r = c
        .request("server/discover", json!({"_meta": meta(json!({}))}))
        .await;
    let res = &r["result"];
    assert_eq!(res["resultType"], "complete");
    assert_eq!(res["supportedVersions"], json!(["2026-07-28"]));
    assert!(res["capabilities"]["tools"].is_object());
    assert_eq!(
        res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "test-server"
    );
    assert_eq!(res["cacheScope"], "public");
    assert!(res["ttlMs"].is_u64());
    assert_eq!(res["instructions"], "be nice");
}

#[tokio::test]
async fn every_stateless_request_is_validated() {
    let mut c = Client::new(&server());
    c.request("server/discover", json!({"_meta": meta(json!({}))}))
        .await;
    let r = c.request("tools/list", json!({})).await;
    assert_eq!(code(&r), -32602);
    let r = c
        .request(
            "tools/list",
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
        )
        .await;
    assert_eq!(code(&r), -32602, "client capabilities are required");
    let r = c
        .request(
            "tools/list",
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                             "io.modelcontextprotocol/clientCapabilities": {}}}),
        )
        .await;
    assert_eq!(code(&r), -32022);
    assert_eq!(r["error"]["data"]["requested"], "2099-01-01");
    assert_eq!(r["error"]["data"]["supported"], json!(["2026-07-28"]));
}

#[tokio::test]
async fn removed_and_unknown_methods_are_not_found_in_the_stateless_era() {
    let mut c = Client::new(&server());
    c.request("server/discover", json!({"_meta": meta(json!({}))}))
        .await;
    for method in ["initialize", "ping", "logging/setLevel", "nope"] {
        let r = c.request(method, json!({"_meta": meta(json!({}))})).await;
        assert_eq!(code(&r), -32601, "{method}");
    }
}

#[tokio::test]
async fn stateless_results_carry_result_type_and_cache_hints() {
    let mut c = Client::new(&server());
    let r = c
        .request("tools/list", json!({"_meta": meta(json!({}))}))
        .await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["cacheScope"], "public");
    assert!(r["result"]["ttlMs"].is_u64());
    assert!(r["result"]["tools"][0].get("execution").is_none());
    let r = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}, "_meta": meta(json!({}))}),
        )
        .await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["content"][0]["text"], "x");
}

#[tokio::test]
async fn stateless_logs_follow_the_request_log_level() {
    let mut c = Client::new(&server());
    c.request(
        "tools/call",
        json!({"name": "progress", "_meta": meta(json!({}))}),
    )
    .await;
    assert!(
        c.drain().is_empty(),
        "no log level, no token: nothing is sent"
    );
    let mut m = meta(json!({}));
    m["io.modelcontextprotocol/logLevel"] = json!("debug");
    m["progressToken"] = json!(5);
    c.request("tools/call", json!({"name": "progress", "_meta": m}))
        .await;
    let out = c.drain();
    assert_eq!(out.len(), 3, "{out:?}");
}

#[tokio::test]
async fn mrtr_rounds_collect_answers_then_finish() {
    let mut c = Client::new(&server());
    let caps = json!({"elicitation": {}});
    let call = |extra: Value| {
        let mut p = json!({"name": "ask", "_meta": meta(caps.clone())});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    let r = c.request("tools/call", call(json!({}))).await;
    let res = &r["result"];
    assert_eq!(res["resultType"], "input_required");
    let keys: Vec<_> = res["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, vec!["elicit-1"]);
    assert_eq!(
        res["inputRequests"]["elicit-1"]["method"],
        "elicitation/create"
    );
    let state = res["requestState"].as_str().unwrap().to_owned();

    let r = c
        .request(
            "tools/call",
            call(json!({"requestState": state,
                        "inputResponses": {"elicit-1": {"action": "accept", "content": {"name": "Ada"}}}})),
        )
        .await;
    let res = &r["result"];
    assert_eq!(res["resultType"], "input_required");
    assert!(res["inputRequests"].get("elicit-2").is_some());
    let state = res["requestState"].as_str().unwrap().to_owned();

    let r = c
        .request(
            "tools/call",
            call(json!({"requestState": state,
                        "inputResponses": {"elicit-2": {"action": "accept", "content": {"ok": true}}}})),
        )
        .await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["content"][0]["text"], "\"Ada\" true");
    assert!(
        c.drain().is_empty(),
        "MRTR never sends server-to-client requests"
    );
}

#[tokio::test]
async fn tampered_or_foreign_request_state_is_rejected() {
    let mut c = Client::new(&server());
    let caps = json!({"elicitation": {}});
    let r = c
        .request(
            "tools/call",
            json!({"name": "ask", "_meta": meta(caps.clone())}),
        )
        .await;
    let state = r["result"]["requestState"].as_str().unwrap().to_owned();
    let mut forged = state.clone();
    forged.insert(0, 'x');
    for (name, s) in [("ask", forged), ("echo", state)] {
        let r = c
            .request(
                "tools/call",
                json!({"name": name, "arguments": {"text": "x"}, "requestState": s, "_meta": meta(caps.clone())}),
            )
            .await;
        assert_eq!(code(&r), -32602, "{name}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("requestState")
        );
    }
}

#[tokio::test]
async fn mrtr_never_asks_for_an_undeclared_capability() {
    let mut c = Client::new(&server());
    let r = c
        .request(
            "tools/call",
            json!({"name": "ask", "_meta": meta(json!({}))}),
        )
        .await;
    assert_eq!(code(&r), -32021);
    assert_eq!(
        r["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );
}
