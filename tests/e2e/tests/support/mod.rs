//! Drives the conformance fixture as a real process over stdio, on the 2026-07-28 wire,
//! on a SQLite file, a PostgreSQL database or a key prefix in Redis; [`http`] speaks
//! Streamable HTTP.
//!
//! Each test binary uses a part of this module, so what it leaves unused is allowed.

#![allow(dead_code)]

pub mod http;
pub mod oidc;

use mcp_tasks_runtime::store::{TestDatabase, TestRedis};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Where fixture processes keep their tasks: a fresh SQLite file, a fresh PostgreSQL
/// database or a fresh Redis key prefix, removed when this is dropped.
pub enum Store {
    /// A SQLite file in a temporary directory.
    Sqlite(PathBuf),
    /// A PostgreSQL database made for the test.
    Postgres(TestDatabase),
    /// A key prefix in Redis made for the test.
    Redis(TestRedis),
}

impl Store {
    /// A fresh SQLite file.
    pub fn sqlite(name: &str) -> Self {
        Self::Sqlite(temp_db(name))
    }

    /// A fresh PostgreSQL database, or `None` when `MCP_TASKS_TEST_POSTGRES=skip`.
    pub fn postgres(name: &str) -> Option<Self> {
        TestDatabase::create(name).map(Self::Postgres)
    }

    /// A fresh key prefix in database 0 of the test Redis, or `None` when
    /// `MCP_TASKS_TEST_REDIS=skip`.
    pub fn redis(name: &str) -> Option<Self> {
        TestRedis::create(name).map(Self::Redis)
    }

    /// [`Store::redis`] in database `db`, for a test that kills every connection of it.
    pub fn redis_in(name: &str, db: u32) -> Option<Self> {
        TestRedis::create_in(name, db).map(Self::Redis)
    }

    /// The fixture's `--store` argument.
    pub fn arg(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite:{}", path.display()),
            Self::Postgres(db) => db.url(),
            Self::Redis(redis) => redis.store_url(),
        }
    }

    /// The test database, on PostgreSQL.
    pub fn database(&self) -> Option<&TestDatabase> {
        match self {
            Self::Postgres(db) => Some(db),
            Self::Sqlite(_) | Self::Redis(_) => None,
        }
    }

    /// The test's key prefix, on Redis.
    pub fn redis_prefix(&self) -> Option<&TestRedis> {
        match self {
            Self::Redis(redis) => Some(redis),
            Self::Sqlite(_) | Self::Postgres(_) => None,
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Self::Sqlite(path) = self
            && let Some(dir) = path.parent()
        {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Generates, for each named `async fn NAME(store: &Store)`, a test on SQLite
/// (`sqlite::NAME`), one on PostgreSQL (`postgres::NAME`) and one on Redis (`redis::NAME`).
#[macro_export]
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&$crate::support::Store::sqlite(stringify!($name))).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(store) = $crate::support::Store::postgres(stringify!($name)) else {
                        return;
                    };
                    super::$name(&store).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(store) = $crate::support::Store::redis(stringify!($name)) else {
                        return;
                    };
                    super::$name(&store).await;
                }
            )*
        }
    };
}

/// Lines a process wrote to stderr, gathered as it runs.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    /// Gathers what `stderr` says, line by line, as the process runs.
    pub fn gather(&self, stderr: tokio::process::ChildStderr) {
        let lines = Arc::clone(&self.0);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().unwrap().push(line);
            }
        });
    }

    /// Adds a line, as if the process had written it.
    pub fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    /// The first `n` lines, and every panic message with the line after it.
    pub fn summary(&self, n: usize) -> Vec<String> {
        let lines = self.0.lock().unwrap();
        let mut out: Vec<String> = lines.iter().take(n).cloned().collect();
        for (i, line) in lines.iter().enumerate().skip(n) {
            if line.contains("panicked at") {
                out.extend(lines[i..].iter().take(2).cloned());
            }
        }
        out
    }

    /// The lines so far that contain every one of `words`.
    pub fn lines_with(&self, words: &[&str]) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|line| words.iter().all(|w| line.contains(w)))
            .cloned()
            .collect()
    }
}

/// A fixture process that runs tasks and serves nobody (`--worker`), logging at debug
/// level so a test can see what it claimed.
pub struct Worker {
    pub child: Child,
    pub log: Log,
}

impl Worker {
    pub fn start(store: &Store, extra: &[&str]) -> Self {
        let mut child = Command::new(example("conformance-server"))
            .args(["--worker", "--store", &store.arg()])
            .args(["--lease-ms", &LEASE_MS.to_string()])
            .args(extra)
            .env("RUST_LOG", "mcp_tasks_runtime=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn a worker");
        let log = Log::default();
        log.gather(child.stderr.take().unwrap());
        Self { child, log }
    }

    /// Whether this worker claimed the task.
    pub fn claimed(&self, id: &str) -> bool {
        !self.log.lines_with(&["claimed a task", id]).is_empty()
    }

    /// `kill -9`.
    pub async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

/// The statuses a task ends in.
pub const TERMINAL: &[&str] = &["completed", "failed", "cancelled"];

/// The lease the tests give fixture processes: short, so takeovers happen quickly.
pub const LEASE_MS: u64 = 1000;

/// An example's executable. The tour is also a binary of this package, which cargo builds
/// for its tests; the other examples are built beside the tests by `cargo test`.
pub fn example(name: &str) -> PathBuf {
    if name == "tour" {
        return PathBuf::from(env!("CARGO_BIN_EXE_tour"));
    }
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test -p mcp-tasks-e2e` or `cargo test --workspace`, which build the examples",
        path.display()
    );
    path
}

/// The 2026-07-28 `_meta` of a client that answers elicitations and speaks the tasks
/// extension.
pub fn meta() -> Value {
    http::meta(json!({"elicitation": {}, "extensions": {http::TASKS_EXT: {}}}))
}

/// A fixture process serving stdio.
pub struct Server {
    pub child: Child,
    /// What the process wrote to stderr.
    pub log: Log,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    /// Messages read while waiting for a response, for [`Server::recv`] to return first.
    held: std::collections::VecDeque<Value>,
    next: u64,
}

impl Server {
    /// Serves stdio on the SQLite file `db`, with a short lease.
    pub fn start(db: &Path) -> Self {
        Self::start_with(db, &[])
    }

    /// [`Server::start`] with more arguments.
    pub fn start_with(db: &Path, extra: &[&str]) -> Self {
        Self::spawn(&format!("sqlite:{}", db.display()), extra)
    }

    /// Serves stdio on `store`, with a short lease.
    pub fn on(store: &Store) -> Self {
        Self::spawn(&store.arg(), &[])
    }

    /// [`Server::on`] with more arguments.
    pub fn on_with(store: &Store, extra: &[&str]) -> Self {
        Self::spawn(&store.arg(), extra)
    }

    fn spawn(store: &str, extra: &[&str]) -> Self {
        Self::spawn_env(store, extra, &[])
    }

    /// Serves stdio on the store named by the fixture's `--store` argument `store`, with
    /// more arguments and environment variables.
    pub fn spawn_env(store: &str, extra: &[&str], env: &[(&str, &Path)]) -> Self {
        let mut child = Command::new(example("conformance-server"))
            .args(["--stdio", "--store", store])
            .args(["--lease-ms", &LEASE_MS.to_string()])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the conformance server");
        let log = Log::default();
        log.gather(child.stderr.take().unwrap());
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            child,
            log,
            stdin,
            lines,
            held: Default::default(),
            next: 0,
        }
    }

    /// Sends a 2026-07-28 request: the request metadata is merged into the params' own
    /// `_meta` (an idempotency key, say). Returns its id.
    pub async fn send(&mut self, method: &str, mut params: Value) -> u64 {
        self.next += 1;
        let mut full = meta();
        if let Some(Value::Object(own)) = params.get("_meta") {
            for (k, v) in own {
                full[k] = v.clone();
            }
        }
        params["_meta"] = full;
        let msg = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        self.stdin
            .as_mut()
            .expect("stdin is open")
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
        self.next
    }

    /// Writes one JSON-RPC message as a line.
    pub async fn write(&mut self, message: &Value) {
        self.stdin
            .as_mut()
            .expect("stdin is open")
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }

    /// A request without the 2026-07-28 `_meta` (a 2025-11-25 session), answered.
    pub async fn raw_request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.response(id).await.expect("the server is alive")
    }

    /// Reads until the response to request `id`; what comes before it (a server-to-client
    /// request, a notification) is kept for [`Server::recv`]. `None` once the server exited.
    pub async fn response(&mut self, id: u64) -> Option<Value> {
        loop {
            let m = self.read().await?;
            if m["id"] == id && m.get("method").is_none() {
                return Some(m);
            }
            self.held.push_back(m);
        }
    }

    /// A notification without parameters.
    pub async fn notify(&mut self, method: &str) {
        self.write(&json!({"jsonrpc": "2.0", "method": method}))
            .await;
    }

    /// Answers a server-to-client request.
    pub async fn respond(&mut self, id: &Value, result: Value) {
        self.write(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    /// The next message from the server, those kept by a request first.
    pub async fn recv(&mut self) -> Option<Value> {
        match self.held.pop_front() {
            Some(m) => Some(m),
            None => self.read().await,
        }
    }

    async fn read(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("an answer within 30 s")
            .ok()??;
        Some(serde_json::from_str(&line).unwrap())
    }

    /// Waits until the server answers (it has opened its store): faults injected after
    /// this hit its work, not its startup.
    pub async fn ready(mut self) -> Self {
        let found = self.request("server/discover", json!({})).await;
        assert!(found.get("result").is_some(), "{found}");
        self
    }

    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        let Some(m) = self.response(id).await else {
            panic!("the server exited; its stderr: {:#?}", self.log.summary(10));
        };
        m
    }

    pub async fn get(&mut self, id: &str) -> Value {
        self.request("tasks/get", json!({"taskId": id})).await
    }

    /// Polls the task until its status is one of `want`, for at most `within`.
    pub async fn wait_for(&mut self, id: &str, want: &[&str], within: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let r = self.get(id).await;
            if r["result"]["status"]
                .as_str()
                .is_some_and(|s| want.contains(&s))
            {
                return r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {id} did not reach {want:?} within {within:?}: {r}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts a tool call as a task and returns its id.
    pub async fn start_task(&mut self, tool: &str, arguments: Value) -> String {
        let r = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        task_id(&r)
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    /// Sends a signal (`kill -STOP`, `kill -CONT`, …) to the process.
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// `kill -9`.
    pub async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

pub fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tasks.db")
}

pub fn task_id(r: &Value) -> String {
    r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {r}"))
        .to_owned()
}

/// The text of a terminal task's result.
pub fn result_text(r: &Value) -> String {
    r["result"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result: {r}"))
        .to_owned()
}

/// Creates `durable_sleep` tasks on `server` until `stop` is set (and at least `min`),
/// returning the `(task id, label)` of every create that was answered with a handle and
/// every error answer.
pub async fn burst(
    mut server: Server,
    name: &str,
    min: usize,
    stop: &AtomicBool,
) -> (Server, Vec<(String, String)>, Vec<Value>) {
    let (mut handles, mut errors) = (Vec::new(), Vec::new());
    let mut n = 0;
    while n < min || !stop.load(Ordering::Acquire) {
        let label = format!("{name}-{n}");
        let r = server
            .request(
                "tools/call",
                json!({"name": "durable_sleep", "arguments": {"seconds": 0, "label": label}}),
            )
            .await;
        match r["result"]["taskId"].as_str() {
            Some(id) => handles.push((id.to_owned(), label)),
            None => errors.push(r),
        }
        n += 1;
    }
    (server, handles, errors)
}

/// `(epoch, worker)` of every claim of each task, from the workers' logs.
pub fn claims(workers: &[&Worker]) -> BTreeMap<String, Vec<(String, usize)>> {
    let mut claims: BTreeMap<String, Vec<(String, usize)>> = BTreeMap::new();
    for (n, worker) in workers.iter().enumerate() {
        for line in worker.log.lines_with(&["claimed a task"]) {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|word| word.strip_prefix(name))
                    .unwrap_or_default()
                    .to_owned()
            };
            claims
                .entry(field("task="))
                .or_default()
                .push((field("epoch="), n));
        }
    }
    claims
}

/// Two servers (serving only) and two workers on `store` under a bounded load: every task
/// reaches a terminal status once, with its own result, read the same from either server;
/// each claim of a task holds a lease of its own epoch; both workers run tasks.
pub async fn settle_every_task_once_under_load(store: &Store) {
    const WITHIN: Duration = Duration::from_secs(30);
    const TASKS: usize = 80;
    // A lease long enough that a busy machine does not lapse it.
    let lease = ["--no-execute", "--lease-ms", "5000"];
    let mut servers = [
        Server::on_with(store, &lease),
        Server::on_with(store, &lease),
    ];
    let workers = [
        Worker::start(store, &lease[1..]),
        Worker::start(store, &lease[1..]),
    ];
    let mut tasks = Vec::new();
    for n in 0..TASKS {
        let label = format!("job-{n}");
        let seconds = n % 2;
        let id = servers[n % 2]
            .start_task("durable_sleep", json!({"seconds": seconds, "label": label}))
            .await;
        tasks.push((id, format!("slept {seconds}s: {label}")));
    }
    let mut settled = Vec::new();
    for (n, (id, want)) in tasks.iter().enumerate() {
        let r = servers[(n + 1) % 2].wait_for(id, TERMINAL, WITHIN).await;
        assert_eq!(r["result"]["status"], "completed", "{r}");
        assert_eq!(
            &result_text(&r),
            want,
            "task {id} has another task's result"
        );
        settled.push(r["result"].clone());
    }
    // Terminal means final: the tasks read the same from the other server afterwards.
    for (n, (id, _)) in tasks.iter().enumerate() {
        assert_eq!(servers[n % 2].get(id).await["result"], settled[n]);
    }
    // Each claim of a task holds a lease of its own epoch: no two workers ever ran one
    // task under the same lease, and a second claim only follows a lapse.
    let claims = claims(&[&workers[0], &workers[1]]);
    for (id, _) in &tasks {
        let of_task = claims.get(id).cloned().unwrap_or_default();
        assert!(!of_task.is_empty(), "task {id} was never claimed");
        let epochs: BTreeSet<&String> = of_task.iter().map(|(epoch, _)| epoch).collect();
        assert_eq!(
            epochs.len(),
            of_task.len(),
            "task {id} was claimed twice under one epoch: {of_task:?}"
        );
    }
    assert!(
        claims.values().flatten().any(|(_, w)| *w == 0)
            && claims.values().flatten().any(|(_, w)| *w == 1),
        "one worker ran every task"
    );
    let [a, b] = servers;
    a.kill().await;
    b.kill().await;
    let [w0, w1] = workers;
    w0.kill().await;
    w1.kill().await;
}

/// Starts the fixture on `url` and returns what it wrote to stderr once it exited, which it
/// must do, with a failure, within `within`.
pub async fn refused(url: &str, within: Duration) -> String {
    let child = tokio::process::Command::new(example("conformance-server"))
        .args(["--stdio", "--store", url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the conformance server");
    let out = tokio::time::timeout(within, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the server on {url} neither started nor failed"))
        .unwrap();
    assert!(!out.status.success(), "the server on {url} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// After a [`burst`] of creates on `a` and `b` while their store's connections were being
/// killed: every create that failed failed clearly, as an internal error naming the store
/// (`store`, as its messages name it); every create that got a handle is there and runs to
/// its own result, seen from either server; and both servers carry on without a restart.
pub async fn check_after_burst(
    a: &mut Server,
    b: &mut Server,
    handles_a: &[(String, String)],
    handles_b: &[(String, String)],
    errors_a: &[Value],
    errors_b: &[Value],
    store: &str,
) {
    const WITHIN: Duration = Duration::from_secs(30);
    // A create that failed failed clearly, as an internal error naming the store.
    for error in errors_a.iter().chain(errors_b) {
        assert_eq!(error["error"]["code"], -32603, "{error}");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(store), "{error}");
    }
    // Every create that got a handle is there, and runs to its own result, seen from
    // either server.
    for (id, label) in handles_a.iter().chain(handles_b) {
        let r = a.wait_for(id, TERMINAL, WITHIN).await;
        assert_eq!(r["result"]["status"], "completed", "{r}");
        assert_eq!(result_text(&r), format!("slept 0s: {label}"));
        assert_eq!(b.get(id).await["result"], r["result"]);
    }
    // Both servers carry on without a restart.
    for s in [a, b] {
        let id = s
            .start_task("durable_sleep", json!({"seconds": 0, "label": "after"}))
            .await;
        let r = s.wait_for(&id, TERMINAL, WITHIN).await;
        assert_eq!(result_text(&r), "slept 0s: after");
    }
}
