//! Full sessions over `tokio::io::duplex`, the same code path stdio uses.

use mcp_tasks_runtime::model::{CallToolResult, Content};
use mcp_tasks_runtime::transport::serve_io;
use mcp_tasks_runtime::{Server, Tool};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn server() -> Server {
    Server::builder()
        .tool(Tool::new("wait", |cx, _| async move {
            cx.cancellation().cancelled().await;
            Ok(CallToolResult::default())
        }))
        .tool(Tool::new("hello", |_, _| async {
            Ok(CallToolResult::success(vec![Content::text("hello")]))
        }))
        .build()
        .unwrap()
}

struct Pipe {
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    server: tokio::task::JoinHandle<Result<(), mcp_tasks_runtime::transport::TransportError>>,
}

fn open() -> Pipe {
    let (client, server_end) = tokio::io::duplex(4096);
    let (r, w) = tokio::io::split(server_end);
    let server = tokio::spawn(serve_io(server(), r, w));
    let (read, write) = tokio::io::split(client);
    Pipe {
        write,
        lines: BufReader::new(read).lines(),
        server,
    }
}

impl Pipe {
    async fn send(&mut self, text: &str) {
        self.write
            .write_all(format!("{text}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(5), self.lines.next_line())
            .await
            .expect("a line within 5 s")
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }
}

#[tokio::test]
async fn stateful_session_over_a_pipe() {
    let mut p = open();
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#).await;
    assert_eq!(p.recv().await["result"]["protocolVersion"], "2025-11-25");
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    // A long call does not block the requests behind it.
    p.send(r#"{"jsonrpc":"2.0","id":"w","method":"tools/call","params":{"name":"wait"}}"#)
        .await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(p.recv().await["id"], 2);
    p.send("").await;
    p.send("garbage").await;
    assert_eq!(p.recv().await["error"]["code"], -32700);
    p.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"hello"}}"#)
        .await;
    assert_eq!(p.recv().await["result"]["content"][0]["text"], "hello");
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"w"}}"#)
        .await;
    p.send(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#).await;
    // The cancelled call is never answered: the next line is the ping's response.
    assert_eq!(p.recv().await["id"], 4);
    p.write.shutdown().await.unwrap();
    assert!(p.lines.next_line().await.unwrap().is_none());
    p.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn stateless_session_over_a_pipe() {
    let mut p = open();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    p.send(
        &json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": meta}})
            .to_string(),
    )
    .await;
    assert_eq!(p.recv().await["result"]["resultType"], "complete");
    p.send(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hello","_meta": meta}}).to_string()).await;
    let r = p.recv().await;
    assert_eq!(r["result"]["content"][0]["text"], "hello");
    assert_eq!(r["result"]["resultType"], "complete");
    p.send(
        &json!({"jsonrpc":"2.0","id":3,"method":"initialize","params":{"_meta": meta}}).to_string(),
    )
    .await;
    assert_eq!(p.recv().await["error"]["code"], -32601);
    p.write.shutdown().await.unwrap();
    p.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn eof_with_a_call_in_flight_ends_cleanly() {
    let mut p = open();
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#).await;
    p.recv().await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait"}}"#)
        .await;
    p.write.shutdown().await.unwrap();
    p.server.await.unwrap().unwrap();
}
