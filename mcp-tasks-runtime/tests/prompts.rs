//! Prompts in both eras: listing, arguments, errors and an MRTR round on `prompts/get`.

use mcp_tasks_runtime::model::Content;
use mcp_tasks_runtime::{GetPromptResult, Prompt, PromptMessage, Server};
use serde_json::{Value, json};
use support::{meta, request};

mod support;

fn server() -> Server {
    Server::builder()
        .prompt(
            Prompt::new("greeting", |_, args| async move {
                let who = args["who"].as_str().unwrap_or_default().to_owned();
                Ok(GetPromptResult {
                    description: Some("a greeting".into()),
                    messages: vec![PromptMessage::user(Content::text(format!("Greet {who}.")))],
                })
            })
            .description("Greet someone.")
            .argument("who", "Who to greet.", true),
        )
        .prompt(Prompt::new("context", |cx, _| async move {
            let answer = cx
                .client()
                .elicit_keyed(
                    "ctx",
                    "Which context?",
                    json!({"type": "object", "properties": {"c": {"type": "string"}}}),
                )
                .await?;
            Ok(GetPromptResult {
                description: None,
                messages: vec![PromptMessage::assistant(Content::text(format!(
                    "context: {}",
                    answer.content.unwrap_or_default()["c"]
                )))],
            })
        }))
        .build()
        .unwrap()
}

#[tokio::test]
async fn stateful_prompts_list_get_and_errors() {
    let (s, mut out) = server().session();
    let r = request(
        &s,
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}}),
    )
    .await;
    assert_eq!(
        r["result"]["capabilities"]["prompts"],
        json!({"listChanged": false})
    );
    let r = request(&s, 2, "prompts/list", json!({})).await;
    let names: Vec<_> = r["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("context"), json!("greeting")]);
    assert_eq!(
        r["result"]["prompts"][1]["arguments"][0],
        json!({"name": "who", "description": "Who to greet.", "required": true})
    );
    let r = request(
        &s,
        3,
        "prompts/get",
        json!({"name": "greeting", "arguments": {"who": "Ada"}}),
    )
    .await;
    assert_eq!(
        r["result"]["messages"][0],
        json!({"role": "user", "content": {"type": "text", "text": "Greet Ada."}})
    );
    assert_eq!(r["result"]["description"], "a greeting");
    for (params, why) in [
        (json!({"name": "greeting"}), "missing required argument"),
        (
            json!({"name": "greeting", "arguments": {"who": 3}}),
            "non-string argument",
        ),
        (json!({"name": "nope"}), "unknown prompt"),
    ] {
        assert_eq!(
            request(&s, 4, "prompts/get", params).await["error"]["code"],
            -32602,
            "{why}"
        );
    }
    // In the stateful era the question is a server-to-client request.
    let session = s.clone();
    let pending = tokio::spawn(async move {
        request(&session, 5, "prompts/get", json!({"name": "context"})).await
    });
    let ask: Value = serde_json::from_str(&out.recv().await.unwrap()).unwrap();
    assert_eq!(ask["method"], "elicitation/create");
    let reply = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"c": "docs"}}});
    assert!(s.handle_text(&reply.to_string()).await.is_none());
    let r = pending.await.unwrap();
    assert_eq!(
        r["result"]["messages"][0]["content"]["text"],
        "context: \"docs\""
    );
}

#[tokio::test]
async fn stateless_prompts_carry_cache_hints_and_use_mrtr() {
    let (s, _out) = server().session();
    let r = request(&s, 1, "server/discover", json!({"_meta": meta(json!({}))})).await;
    assert!(r["result"]["capabilities"]["prompts"].is_object());
    let r = request(&s, 2, "prompts/list", json!({"_meta": meta(json!({}))})).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["cacheScope"], "public");
    let caps = json!({"elicitation": {}});
    let r = request(
        &s,
        3,
        "prompts/get",
        json!({"name": "context", "_meta": meta(caps.clone())}),
    )
    .await;
    assert_eq!(r["result"]["resultType"], "input_required");
    assert_eq!(
        r["result"]["inputRequests"]["ctx"]["method"],
        "elicitation/create"
    );
    let state = r["result"]["requestState"].clone();
    let r = request(
        &s,
        4,
        "prompts/get",
        json!({"name": "context", "requestState": state, "_meta": meta(caps.clone()),
        "inputResponses": {"ctx": {"action": "accept", "content": {"c": "tests"}}}}),
    )
    .await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["messages"][0]["role"], "assistant");
    assert_eq!(
        r["result"]["messages"][0]["content"]["text"],
        "context: \"tests\""
    );
    // A state made for a prompt is refused by a tool call and the other way round.
    let r = request(&s, 5, "prompts/get", json!({"name": "greeting", "arguments": {"who": "x"}, "requestState": state, "_meta": meta(caps)})).await;
    assert_eq!(r["error"]["code"], -32602);
    let r = request(
        &s,
        6,
        "prompts/get",
        json!({"name": "context", "_meta": meta(json!({}))}),
    )
    .await;
    assert_eq!(
        r["error"]["code"], -32021,
        "no elicitation capability, no question"
    );
}

#[tokio::test]
async fn completion_suggests_argument_values_in_both_eras() {
    let server = Server::builder()
        .prompt(
            Prompt::new("trip", |_, _| async { Ok(GetPromptResult::default()) })
                .argument("city", "Where to.", true)
                .complete_with("city", ["Paris", "Parma", "Rome"]),
        )
        .build()
        .unwrap();
    let (s, _out) = server.session();
    let r = request(
        &s,
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
    )
    .await;
    assert_eq!(r["result"]["capabilities"]["completions"], json!({}));
    let ask = |value: &str| json!({"ref": {"type": "ref/prompt", "name": "trip"}, "argument": {"name": "city", "value": value}});
    let r = request(&s, 2, "completion/complete", ask("par")).await;
    assert_eq!(
        r["result"]["completion"],
        json!({"values": ["Paris", "Parma"], "total": 2, "hasMore": false})
    );
    let r = request(&s, 3, "completion/complete", json!({"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "city", "value": ""}})).await;
    assert_eq!(r["error"]["code"], -32602);
    let r = request(
        &s,
        4,
        "completion/complete",
        json!({"ref": {"type": "ref/tool"}, "argument": {"name": "x", "value": ""}}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
    let (s, _out) = server.session();
    let mut params = ask("R");
    params["_meta"] = meta(json!({}));
    let r = request(&s, 5, "completion/complete", params).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["completion"]["values"], json!(["Rome"]));
}
