//! A question in a synchronous 2026-07-28 call resumes the call instead of running it again:
//! the conformance fixture server as a real process, over stdio and over Streamable HTTP, as a
//! client without the tasks extension sees it.

mod support;

use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use support::example;
use support::http::{self, HttpFixture};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// The longest any single exchange with the server may take.
const LIMIT: Duration = Duration::from_secs(30);

fn spawn(args: &[&str]) -> Child {
    Command::new(example("conformance-server"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the conformance server")
}

/// The params of a request from a client that can answer elicitations but has no tasks
/// extension, plus `extra`.
fn params(name: &str, extra: Value) -> Value {
    let mut params = json!({"name": name, "_meta": http::meta(json!({"elicitation": {}}))});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    params
}

/// A client of one transport: sends `tools/call` and returns the response.
trait Transport {
    async fn call(&mut self, id: u64, params: Value) -> Value;
}

/// The whole exchange the issue describes: a side effect, a question, the answer, and the
/// side effect counted once; then a replay of the same answer, which runs nothing.
async fn side_effect_runs_once(t: &mut impl Transport) {
    let label = json!({"arguments": {"label": "half"}});
    let r = t
        .call(1, params("side_effect_then_ask", label.clone()))
        .await;
    let result = &r["result"];
    assert_eq!(result["resultType"], "input_required", "{r}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1);
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );

    let mut retry = label.clone();
    retry["requestState"] = result["requestState"].clone();
    retry["inputResponses"] = json!({key: {"action": "accept", "content": {"confirm": true}}});
    let r = t
        .call(2, params("side_effect_then_ask", retry.clone()))
        .await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "confirmed half: true");

    let r = t.call(3, params("side_effect_count", json!({}))).await;
    assert_eq!(
        r["result"]["content"][0]["text"], "1",
        "the side effect before the question ran once"
    );

    let r = t.call(4, params("side_effect_then_ask", retry)).await;
    assert_eq!(
        r["error"]["code"], -32602,
        "a replayed state resumes nothing"
    );
    let r = t.call(5, params("side_effect_count", json!({}))).await;
    assert_eq!(r["result"]["content"][0]["text"], "1");
}

struct StdioClient {
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Transport for StdioClient {
    async fn call(&mut self, id: u64, params: Value) -> Value {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        self.stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
        let line = tokio::time::timeout(LIMIT, self.lines.next_line())
            .await
            .expect("a response in time")
            .unwrap()
            .expect("a response line");
        let response: Value = serde_json::from_str(&line).expect("stdout carries only JSON-RPC");
        assert_eq!(response["id"], id);
        response
    }
}

#[tokio::test]
async fn over_stdio_a_question_resumes_the_call() {
    let mut child = spawn(&["--stdio", "--store", "memory"]);
    let mut t = StdioClient {
        stdin: child.stdin.take().unwrap(),
        lines: BufReader::new(child.stdout.take().unwrap()).lines(),
    };
    side_effect_runs_once(&mut t).await;
    drop(t);
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("the server exits after stdin closes")
        .unwrap();
    assert!(status.success());
}

struct HttpClient {
    url: String,
}

impl Transport for HttpClient {
    async fn call(&mut self, id: u64, params: Value) -> Value {
        let response = http::stateless(&self.url, id, "tools/call", params, &[])
            .timeout(LIMIT)
            .send()
            .await
            .unwrap();
        let response = http::answer(response).await;
        assert_eq!(response["id"], id);
        response
    }
}

#[tokio::test]
async fn over_http_a_question_resumes_the_call() {
    let fixture = HttpFixture::start(&["--store", "memory"]).await;
    let url = fixture.url.clone();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let mut t = HttpClient { url };
    side_effect_runs_once(&mut t).await;
    fixture.kill().await;
}
