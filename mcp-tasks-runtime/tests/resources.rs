//! Resources in both eras: listing, templates, reading, unknown URIs, subscriptions (2025-11-25
//! only), cache hints and an MRTR round on `resources/read` (2026-07-28).

use mcp_tasks_runtime::model::ResourceContents;
use mcp_tasks_runtime::{BuildError, Resource, ResourceDefError, ResourceTemplate, Server};
use serde_json::json;
use support::{meta, request};

mod support;

fn text(uri: String, text: String) -> Vec<ResourceContents> {
    vec![ResourceContents {
        uri,
        mime_type: Some("text/plain".into()),
        text: Some(text),
        blob: None,
    }]
}

fn server() -> Server {
    Server::builder()
        .resource(
            Resource::new("test://a", "a", |_, uri| async move {
                Ok(text(uri, "alpha".into()))
            })
            .description("The first letter.")
            .mime_type("text/plain"),
        )
        .resource(Resource::new("test://ask", "ask", |cx, uri| async move {
            let answer = cx
                .client()
                .elicit_keyed(
                    "who",
                    "Who?",
                    json!({"type": "object", "properties": {"name": {"type": "string"}}}),
                )
                .await?;
            let name = answer.content.unwrap_or_default()["name"].to_string();
            Ok(text(uri, name))
        }))
        .resource_template(
            ResourceTemplate::new("test://item/{id}/data", "item", |_, uri, vars| async move {
                Ok(text(uri, format!("item {}", vars["id"].as_str().unwrap())))
            })
            .mime_type("text/plain"),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn stateful_resources() {
    let (s, _out) = server().session();
    let r = request(
        &s,
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
    )
    .await;
    assert_eq!(
        r["result"]["capabilities"]["resources"],
        json!({"subscribe": true, "listChanged": false})
    );
    let r = request(&s, 2, "resources/list", json!({})).await;
    assert_eq!(
        r["result"]["resources"][0],
        json!({"uri": "test://a", "name": "a", "description": "The first letter.", "mimeType": "text/plain"})
    );
    assert_eq!(r["result"]["resources"].as_array().unwrap().len(), 2);
    let r = request(&s, 3, "resources/templates/list", json!({})).await;
    assert_eq!(
        r["result"]["resourceTemplates"],
        json!([{"uriTemplate": "test://item/{id}/data", "name": "item", "mimeType": "text/plain"}])
    );
    let r = request(&s, 4, "resources/read", json!({"uri": "test://a"})).await;
    assert_eq!(
        r["result"],
        json!({"contents": [{"uri": "test://a", "mimeType": "text/plain", "text": "alpha"}]})
    );
    let r = request(
        &s,
        5,
        "resources/read",
        json!({"uri": "test://item/42/data"}),
    )
    .await;
    assert_eq!(r["result"]["contents"][0]["text"], "item 42");
    assert_eq!(r["result"]["contents"][0]["uri"], "test://item/42/data");
    let r = request(&s, 6, "resources/read", json!({"uri": "test://nope"})).await;
    assert_eq!(r["error"]["code"], -32002);
    assert_eq!(r["error"]["data"], json!({"uri": "test://nope"}));
    let r = request(&s, 7, "resources/read", json!({})).await;
    assert_eq!(r["error"]["code"], -32602);
    let r = request(&s, 8, "resources/subscribe", json!({"uri": "test://a"})).await;
    assert_eq!(r["result"], json!({}));
    let r = request(&s, 9, "resources/unsubscribe", json!({"uri": "test://a"})).await;
    assert_eq!(r["result"], json!({}));
}

#[tokio::test]
async fn stateless_resources() {
    let (s, _out) = server().session();
    let r = request(&s, 1, "server/discover", json!({"_meta": meta(json!({}))})).await;
    assert_eq!(
        r["result"]["capabilities"]["resources"],
        json!({"listChanged": false})
    );
    for (id, method) in [(2, "resources/list"), (3, "resources/templates/list")] {
        let r = request(&s, id, method, json!({"_meta": meta(json!({}))})).await;
        assert_eq!(r["result"]["resultType"], "complete", "{method}");
        assert!(r["result"]["ttlMs"].is_u64(), "{method}");
        assert_eq!(r["result"]["cacheScope"], "public", "{method}");
    }
    let r = request(
        &s,
        4,
        "resources/read",
        json!({"_meta": meta(json!({})), "uri": "test://item/7/data"}),
    )
    .await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["cacheScope"], "public");
    assert!(r["result"]["ttlMs"].is_u64());
    assert_eq!(r["result"]["contents"][0]["text"], "item 7");
    let r = request(
        &s,
        5,
        "resources/read",
        json!({"_meta": meta(json!({})), "uri": "test://nope"}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["data"], json!({"uri": "test://nope"}));
    for (id, method) in [(6, "resources/subscribe"), (7, "resources/unsubscribe")] {
        let r = request(
            &s,
            id,
            method,
            json!({"_meta": meta(json!({})), "uri": "test://a"}),
        )
        .await;
        assert_eq!(r["error"]["code"], -32601, "{method}");
    }
}

#[tokio::test]
async fn stateless_read_asks_in_an_input_round() {
    let (s, _out) = server().session();
    let caps = json!({"elicitation": {}});
    let r = request(
        &s,
        1,
        "resources/read",
        json!({"_meta": meta(caps.clone()), "uri": "test://ask"}),
    )
    .await;
    assert_eq!(r["result"]["resultType"], "input_required");
    assert_eq!(
        r["result"]["inputRequests"]["who"]["method"],
        "elicitation/create"
    );
    let state = r["result"]["requestState"].clone();
    let r = request(
        &s,
        2,
        "resources/read",
        json!({"_meta": meta(caps), "uri": "test://ask", "requestState": state,
               "inputResponses": {"who": {"action": "accept", "content": {"name": "Ada"}}}}),
    )
    .await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["contents"][0]["text"], "\"Ada\"");
}

#[test]
fn duplicates_and_bad_templates_fail_the_build() {
    let res = || Resource::new("test://a", "a", |_, _| async { Ok(Vec::new()) });
    let err = Server::builder()
        .resource(res())
        .resource(res())
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        BuildError::Resource(ResourceDefError::DuplicateResource(_))
    ));
    let tpl = |t: &str| ResourceTemplate::new(t, "t", |_, _, _| async { Ok(Vec::new()) });
    let err = Server::builder()
        .resource_template(tpl("test://{a}"))
        .resource_template(tpl("test://{a}"))
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        BuildError::Resource(ResourceDefError::DuplicateResourceTemplate(_))
    ));
    let err = Server::builder()
        .resource_template(tpl("test://{a"))
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        BuildError::Resource(ResourceDefError::InvalidUriTemplate(_))
    ));
}
