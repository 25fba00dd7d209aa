//! Crash tests with real processes: the conformance server on a SQLite file is killed with
//! SIGKILL and started again on the same file; every task handle a client received must
//! still answer, with finished results unchanged and interrupted work settled honestly.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test --workspace`, which builds the examples",
        path.display()
    );
    path
}

struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next: u64,
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}}},
    })
}

impl Server {
    fn start(db: &Path) -> Self {
        let mut child = Command::new(example("conformance-server"))
            .args(["--stdio", "--store"])
            .arg(format!("sqlite:{}", db.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the conformance server");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            child,
            stdin,
            lines,
            next: 0,
        }
    }

    async fn send(&mut self, method: &str, mut params: Value) -> u64 {
        self.next += 1;
        params["_meta"] = meta();
        let msg = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        self.stdin
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
        self.next
    }

    async fn recv(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("an answer within 30 s")
            .ok()??;
        Some(serde_json::from_str(&line).unwrap())
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        loop {
            let m = self.recv().await.expect("the server is alive");
            if m["id"] == id {
                return m;
            }
        }
    }

    async fn get(&mut self, id: &str) -> Value {
        self.request("tasks/get", json!({"taskId": id})).await
    }

    async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-crash-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tasks.db")
}

fn task_id(r: &Value) -> String {
    r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {r}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_survive_kill_9_with_honest_statuses() {
    let db = temp_db("settled");
    let mut s = Server::start(&db);

    let mut finished = Vec::new();
    for n in 0..5 {
        let r = s
            .request("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": format!("done-{n}")}}))
            .await;
        finished.push(task_id(&r));
    }
    let mut finished_results = Vec::new();
    for id in &finished {
        let mut r = Value::Null;
        for _ in 0..100 {
            r = s.get(id).await;
            if r["result"]["status"] == "completed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(r["result"]["status"], "completed", "{r}");
        finished_results.push(r["result"]["result"].clone());
    }
    let failed = task_id(
        &s.request("tools/call", json!({"name": "protocol_error_job"}))
            .await,
    );
    let mut failed_error = Value::Null;
    for _ in 0..100 {
        let r = s.get(&failed).await;
        if r["result"]["status"] == "failed" {
            failed_error = r["result"]["error"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(failed_error.is_object());

    let running: Vec<String> = {
        let mut ids = Vec::new();
        for _ in 0..3 {
            let r = s
                .request(
                    "tools/call",
                    json!({"name": "slow_compute", "arguments": {"seconds": 600}}),
                )
                .await;
            ids.push(task_id(&r));
        }
        ids
    };
    let waiting = task_id(
        &s.request(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "x"}}),
        )
        .await,
    );
    for _ in 0..100 {
        if s.get(&waiting).await["result"]["status"] == "input_required" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.get(&waiting).await["result"]["status"], "input_required");

    s.kill().await;
    let mut s = Server::start(&db);

    for (id, before) in finished.iter().zip(&finished_results) {
        let r = s.get(id).await;
        assert_eq!(r["result"]["status"], "completed", "{id}");
        assert_eq!(
            &r["result"]["result"], before,
            "a finished result is unchanged"
        );
    }
    let r = s.get(&failed).await;
    assert_eq!(r["result"]["status"], "failed");
    assert_eq!(r["result"]["error"], failed_error);
    for id in running.iter().chain([&waiting]) {
        let r = s.get(id).await;
        assert_eq!(r["result"]["status"], "failed", "{id}: {r}");
        assert_eq!(r["result"]["error"]["code"], -32603);
        assert!(
            r["result"]["statusMessage"]
                .as_str()
                .unwrap()
                .contains("restarted")
        );
    }
    s.kill().await;
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_handle_given_out_during_a_burst_survives_kill_9() {
    let db = temp_db("burst");
    let mut s = Server::start(&db);
    // Pipeline many creates without waiting, then kill while answers are still arriving.
    let mut sent = Vec::new();
    for n in 0..300 {
        sent.push(
            s.send("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 600, "label": format!("b{n}")}}))
                .await,
        );
    }
    let mut handles = Vec::new();
    while handles.len() < 100 {
        let m = s.recv().await.expect("answers arrive");
        if let Some(id) = m["result"]["taskId"].as_str() {
            handles.push(id.to_owned());
        }
    }
    s.kill().await;
    let mut s = Server::start(&db);
    for id in &handles {
        let r = s.get(id).await;
        assert!(
            r["result"]["status"].is_string(),
            "handle {id} was given out but is unknown after the crash: {r}"
        );
        assert_eq!(r["result"]["status"], "failed");
    }
    s.kill().await;
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}
