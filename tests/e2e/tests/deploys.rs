//! Deploys that lose nothing, with real processes on PostgreSQL and Redis.
//!
//! - A rolling restart: two HTTP servers and two workers share a store, under a bounded load
//!   of clients that create tasks and poll them; each process in turn gets `SIGTERM` and is
//!   replaced. No task is lost or stuck, none runs twice, and the clients see only
//!   retryable errors (a 503 with `Retry-After`, a refused connection).
//! - A takeover after `SIGTERM`: a worker whose grace is over hands its task off, and the
//!   other worker runs it long before the lease (30 s) would have lapsed.
//! - A worker frozen (`SIGSTOP`) around the claim of a task, thawed (`SIGCONT`) after
//!   another process settled the task, never starts its tool.
//!
//! The fixture's `mark` and `mark_once` tools write `start KEY` and `done KEY` lines to
//! the effects file of `MCP_TASKS_EFFECTS_FILE`; counting them counts the runs. The
//! timings they print are what `docs/PERFORMANCE.md` records; nothing asserts a speed.
//! Every wait is bounded.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::http::{stateless_with, tasks_meta};
use support::{Log, Store, TERMINAL, example};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

mod support;

/// A bound on every wait.
const WITHIN: Duration = Duration::from_secs(60);

/// A fresh, empty effects file.
fn effects_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-deploys-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("effects.log")
}

/// The lines of the effects file, from byte `from` on.
fn effect_lines(path: &Path, from: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// How often each line was written to the effects file.
fn effect_counts(path: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in effect_lines(path, 0) {
        *counts.entry(line).or_default() += 1;
    }
    counts
}

/// A fixture process: an HTTP server (with its URL) or a worker.
struct Proc {
    child: Child,
    log: Log,
    url: Option<String>,
}

impl Proc {
    /// The fixture with `args`, its effects going to `effects`; an HTTP server is waited
    /// for until it listens.
    async fn spawn(args: &[&str], effects: &Path) -> Self {
        let mut child = Command::new(example("conformance-server"))
            .args(args)
            .env("MCP_TASKS_EFFECTS_FILE", effects)
            .env("RUST_LOG", "mcp_tasks_runtime=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the fixture");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log = Log::default();
        let mut url = None;
        if args.contains(&"--http") {
            let found = tokio::time::timeout(WITHIN, async {
                while let Some(line) = lines.next_line().await.unwrap() {
                    if let Some(url) = line.strip_prefix("listening on ") {
                        return url.trim().to_owned();
                    }
                }
                panic!("the fixture exited before it listened");
            })
            .await
            .expect("the fixture listens");
            url = Some(found);
        }
        let gathered = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                gathered.push(line);
            }
        });
        Self { child, log, url }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// `SIGTERM`, then waits for the process to exit on its own (bounded); how long it took.
    async fn terminate(mut self) -> Duration {
        let began = Instant::now();
        self.signal("TERM");
        let status = tokio::time::timeout(WITHIN, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the process did not stop after SIGTERM: {:?}",
                    self.log.summary(40)
                )
            })
            .unwrap();
        assert!(status.success(), "{status}: {:?}", self.log.summary(40));
        began.elapsed()
    }
}

/// The fixture's store arguments, with a lease of `lease_ms`.
fn store_args(store: &Store, lease_ms: u64) -> Vec<String> {
    vec![
        "--store".into(),
        store.arg(),
        "--lease-ms".into(),
        lease_ms.to_string(),
        "--no-quotas".into(),
    ]
}

async fn http_server(store: &Store, effects: &Path, lease_ms: u64, grace_ms: u64) -> Proc {
    let mut args: Vec<String> = vec!["--http".into(), "127.0.0.1:0".into(), "--no-execute".into()];
    args.extend(store_args(store, lease_ms));
    args.extend(["--shutdown-grace-ms".into(), grace_ms.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Proc::spawn(&args, effects).await
}

async fn worker(store: &Store, effects: &Path, lease_ms: u64, grace_ms: u64) -> Proc {
    let mut args: Vec<String> = vec!["--worker".into()];
    args.extend(store_args(store, lease_ms));
    args.extend(["--shutdown-grace-ms".into(), grace_ms.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Proc::spawn(&args, effects).await
}

/// What a client saw of one request.
enum Answer {
    /// A JSON-RPC answer.
    Json(Value),
    /// Refused for now: a 503 with `Retry-After`, or no connection (the process is gone).
    Retry,
}

/// One 2026-07-28 request to `url`, of a client that speaks the tasks extension; `key` is
/// the call's idempotency key. Any answer that is neither JSON-RPC nor retryable is pushed
/// to `bad`.
async fn ask(
    url: &str,
    method: &str,
    params: Value,
    key: Option<&str>,
    bad: &Mutex<Vec<String>>,
) -> Answer {
    let mut meta = tasks_meta();
    if let Some(key) = key {
        meta["io.github.mcp-tasks/idempotencyKey"] = key.into();
    }
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let request = stateless_with(url, 1, method, params, meta, &[("mcp-name", &name)])
        .timeout(Duration::from_secs(20));
    let response = match request.send().await {
        Ok(r) => r,
        // No connection, or one closed before any answer (a connection still waiting to be
        // accepted when a stopping server closes its listener is reset): nothing was
        // answered, and a create is retried with its idempotency key, so it is safe.
        Err(e) if e.is_connect() || (e.is_request() && !e.is_timeout()) => return Answer::Retry,
        Err(e) => {
            bad.lock().unwrap().push(format!("{method} to {url}: {e}"));
            return Answer::Retry;
        }
    };
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").is_some();
    let text = match response.text().await {
        Ok(t) => t,
        Err(e) => {
            bad.lock().unwrap().push(format!("{method} to {url}: {e}"));
            return Answer::Retry;
        }
    };
    if status == 503 && retry_after {
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        if v["error"]["code"] == -32000 {
            return Answer::Retry;
        }
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if status == 200 && v.get("result").is_some() => Answer::Json(v),
        _ => {
            bad.lock()
                .unwrap()
                .push(format!("{method} to {url}: {status} {text}"));
            Answer::Retry
        }
    }
}

/// What the load saw.
#[derive(Default)]
struct Seen {
    /// The tasks created: key, id.
    created: Mutex<Vec<(String, String)>>,
    /// The tasks seen completed, with when (since the start of the load).
    completed: Mutex<Vec<(String, Duration)>>,
    /// The tasks not completed in time, with their last status.
    stuck: Mutex<Vec<(String, String)>>,
    /// Answers that were neither results nor retryable refusals.
    bad: Mutex<Vec<String>>,
    /// Retryable refusals and refused connections.
    retried: AtomicUsize,
}

/// One client: creates a `mark` task, polls it until it completes, and again, until `stop`;
/// each request goes to the next server of `urls`, and is retried on the next one when
/// refused for now.
async fn client(
    n: usize,
    urls: Arc<Mutex<Vec<String>>>,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
    began: Instant,
) {
    let mut turn = n;
    let mut next_url = move || {
        turn += 1;
        let urls = urls.lock().unwrap();
        urls[turn % urls.len()].clone()
    };
    let mut i = 0;
    while !stop.load(Ordering::Acquire) {
        i += 1;
        let key = format!("c{n}-{i}");
        let params = json!({"name": "mark", "arguments": {"key": key, "ms": 200}});
        let deadline = Instant::now() + Duration::from_secs(30);
        let id = loop {
            let url = next_url();
            match ask(&url, "tools/call", params.clone(), Some(&key), &seen.bad).await {
                Answer::Json(v) => match v["result"]["taskId"].as_str() {
                    Some(id) => break Some(id.to_owned()),
                    None => {
                        seen.bad.lock().unwrap().push(format!("not a task: {v}"));
                        break None;
                    }
                },
                Answer::Retry => {
                    seen.retried.fetch_add(1, Ordering::Relaxed);
                    if Instant::now() > deadline {
                        seen.bad
                            .lock()
                            .unwrap()
                            .push(format!("{key}: never created"));
                        break None;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let Some(id) = id else { continue };
        seen.created.lock().unwrap().push((key.clone(), id.clone()));
        let mut last = String::new();
        loop {
            if Instant::now() > deadline {
                seen.stuck.lock().unwrap().push((id.clone(), last));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let url = next_url();
            match ask(&url, "tasks/get", json!({"taskId": id}), None, &seen.bad).await {
                Answer::Json(v) => {
                    last = v["result"]["status"].as_str().unwrap_or("?").to_owned();
                    if last == "completed" {
                        seen.completed
                            .lock()
                            .unwrap()
                            .push((id.clone(), began.elapsed()));
                        break;
                    }
                    if TERMINAL.contains(&last.as_str()) {
                        seen.stuck.lock().unwrap().push((id.clone(), v.to_string()));
                        break;
                    }
                }
                Answer::Retry => {
                    seen.retried.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Completions per second in windows of `width`, from the start of the load.
fn throughput(completed: &[(String, Duration)], width: Duration, until: Duration) -> Vec<f64> {
    let n = (until.as_secs_f64() / width.as_secs_f64()).ceil() as usize;
    let mut buckets = vec![0usize; n.max(1)];
    for (_, at) in completed {
        let i = (at.as_secs_f64() / width.as_secs_f64()) as usize;
        if let Some(b) = buckets.get_mut(i) {
            *b += 1;
        }
    }
    buckets
        .into_iter()
        .map(|c| c as f64 / width.as_secs_f64())
        .collect()
}

/// Two HTTP servers (serving only) and two workers, under the load of four clients; each
/// process in turn gets `SIGTERM` and is replaced once it stopped.
async fn rolling_restart(store: &Store, label: &str) {
    const LEASE_MS: u64 = 5000;
    let effects = effects_file(&format!("rolling-{label}"));
    let mut servers = vec![
        http_server(store, &effects, LEASE_MS, 3000).await,
        http_server(store, &effects, LEASE_MS, 3000).await,
    ];
    let mut workers = vec![
        worker(store, &effects, LEASE_MS, 10_000).await,
        worker(store, &effects, LEASE_MS, 10_000).await,
    ];
    let urls = Arc::new(Mutex::new(
        servers
            .iter()
            .map(|s| s.url.clone().unwrap())
            .collect::<Vec<_>>(),
    ));
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let began = Instant::now();
    let clients: Vec<_> = (0..4)
        .map(|n| {
            tokio::spawn(client(
                n,
                Arc::clone(&urls),
                Arc::clone(&seen),
                Arc::clone(&stop),
                began,
            ))
        })
        .collect();
    let settle = Duration::from_secs(3);
    tokio::time::sleep(settle).await;
    let mut restarts = Vec::new();
    for i in 0..4 {
        let at = began.elapsed();
        let stopped = if i < 2 {
            let old = servers.remove(0);
            let old_url = old.url.clone().unwrap();
            let took = old.terminate().await;
            let new = http_server(store, &effects, LEASE_MS, 3000).await;
            let mut list = urls.lock().unwrap();
            let at = list.iter().position(|u| *u == old_url).unwrap();
            list[at] = new.url.clone().unwrap();
            drop(list);
            servers.push(new);
            took
        } else {
            let took = workers.remove(0).terminate().await;
            workers.push(worker(store, &effects, LEASE_MS, 10_000).await);
            took
        };
        restarts.push((if i < 2 { "server" } else { "worker" }, at, stopped));
        tokio::time::sleep(settle).await;
    }
    let total = began.elapsed();
    stop.store(true, Ordering::Release);
    for c in clients {
        tokio::time::timeout(WITHIN, c)
            .await
            .expect("the clients stop")
            .unwrap();
    }

    let created = seen.created.lock().unwrap().clone();
    let completed = seen.completed.lock().unwrap().clone();
    let stuck = seen.stuck.lock().unwrap().clone();
    let bad = seen.bad.lock().unwrap().clone();
    let rates = throughput(&completed, Duration::from_millis(500), total);
    let steady = &rates[2..(settle.as_secs() as usize * 2).min(rates.len())];
    let baseline = steady.iter().sum::<f64>() / steady.len().max(1) as f64;
    let lowest = rates[2..].iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!(
        "[{label}] rolling restart: {} tasks created, {} completed, {} stuck, {} retried requests in {:.1} s",
        created.len(),
        completed.len(),
        stuck.len(),
        seen.retried.load(Ordering::Relaxed),
        total.as_secs_f64()
    );
    for (what, at, took) in &restarts {
        // The completions of the second after the signal.
        let first = (at.as_secs_f64() * 2.0) as usize;
        let after: Vec<f64> = rates.iter().skip(first).take(2).copied().collect();
        eprintln!(
            "[{label}]   {what} restarted at {:.1} s: stopped {:.0} ms after SIGTERM; {:.1} completions/s in the second after it",
            at.as_secs_f64(),
            took.as_secs_f64() * 1000.0,
            after.iter().sum::<f64>() / after.len().max(1) as f64
        );
    }
    eprintln!(
        "[{label}]   completions/s per 0.5 s: {:?}; steady {baseline:.1}/s, lowest {lowest:.1}/s",
        rates.iter().map(|r| *r as u32).collect::<Vec<_>>()
    );

    assert!(bad.is_empty(), "answers that were not retryable: {bad:?}");
    assert!(stuck.is_empty(), "tasks not completed in 30 s: {stuck:?}");
    assert!(
        created.len() > 20,
        "the load made too few tasks to say much"
    );
    // 0 lost: every task created completed.
    let done: BTreeSet<&str> = completed.iter().map(|(id, _)| id.as_str()).collect();
    for (key, id) in &created {
        assert!(done.contains(id.as_str()), "task {id} ({key}) was lost");
    }
    // 0 runs twice: each key started and finished exactly once.
    let counts = effect_counts(&effects);
    for (key, _) in &created {
        assert_eq!(counts.get(&format!("start {key}")), Some(&1), "{key}");
        assert_eq!(counts.get(&format!("done {key}")), Some(&1), "{key}");
    }
    let keys: BTreeSet<String> = created.iter().map(|(k, _)| format!("start {k}")).collect();
    for line in counts.keys().filter(|l| l.starts_with("start ")) {
        assert!(keys.contains(line), "a task nobody created ran: {line}");
    }
    for p in servers.into_iter().chain(workers) {
        p.terminate().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rolling_restart_loses_nothing_and_runs_nothing_twice() {
    let Some(store) = Store::postgres("rolling_restart") else {
        return;
    };
    rolling_restart(&store, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rolling_restart_loses_nothing_and_runs_nothing_twice() {
    let Some(store) = Store::redis("rolling_restart") else {
        return;
    };
    rolling_restart(&store, "redis").await;
}

/// Polls `tasks/get` of `id` on `url` until its status is one of `want`; the task.
async fn wait_status(url: &str, id: &str, want: &[&str]) -> Value {
    let bad = Mutex::new(Vec::new());
    let deadline = Instant::now() + WITHIN;
    let mut last = Value::Null;
    loop {
        if let Answer::Json(v) = ask(url, "tasks/get", json!({"taskId": id}), None, &bad).await {
            if want.contains(&v["result"]["status"].as_str().unwrap_or_default()) {
                return v;
            }
            last = v;
        }
        assert!(
            Instant::now() < deadline,
            "task {id} never reached {want:?}: {last} {bad:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Creates a task of `tool` on `url`; its id.
async fn create(url: &str, tool: &str, key: &str, ms: u64) -> String {
    let bad = Mutex::new(Vec::new());
    let params = json!({"name": tool, "arguments": {"key": key, "ms": ms}});
    match ask(url, "tools/call", params, None, &bad).await {
        Answer::Json(v) => v["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("not a task: {v}"))
            .to_owned(),
        Answer::Retry => panic!("refused: {bad:?}"),
    }
}

/// Waits until `line` is in the effects file; how long that took.
async fn effect_seen(effects: &Path, line: &str) -> Duration {
    let began = Instant::now();
    while !effect_lines(effects, 0).iter().any(|l| l == line) {
        assert!(began.elapsed() < WITHIN, "{line:?} never happened");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    began.elapsed()
}

/// A worker whose grace is over at `SIGTERM` hands its task off: a `rerun` task is run by
/// the other worker, a `fail` task is settled, both long before the lease (30 s) lapses.
async fn a_task_is_taken_over_at_once_after_sigterm(store: &Store, label: &str) {
    const LEASE_MS: u64 = 30_000;
    let effects = effects_file(&format!("takeover-{label}"));
    let server = http_server(store, &effects, LEASE_MS, 0).await;
    let url = server.url.clone().unwrap();
    let mut first = worker(store, &effects, LEASE_MS, 0).await;
    let mut requeued = Vec::new();
    let mut failed = Vec::new();
    for round in 0..3 {
        let key = format!("t{round}");
        let id = create(&url, "mark", &key, 600_000).await;
        let once = format!("f{round}");
        let once_id = create(&url, "mark_once", &once, 600_000).await;
        effect_seen(&effects, &format!("start {key}")).await;
        effect_seen(&effects, &format!("start {once}")).await;
        let second = worker(store, &effects, LEASE_MS, 0).await;
        // The second worker is up (it reads the store) before the first stops.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let began = Instant::now();
        first.signal("TERM");
        tokio::time::timeout(
            Duration::from_secs(10),
            effect_seen_twice(&effects, &format!("start {key}")),
        )
        .await
        .expect("the other worker runs the task well before its lease would lapse");
        requeued.push(began.elapsed());
        wait_status(&url, &once_id, &["failed"]).await;
        failed.push(began.elapsed());
        let status = tokio::time::timeout(WITHIN, first.child.wait())
            .await
            .expect("the worker stops")
            .unwrap();
        assert!(status.success(), "{status}");
        // The task handed off runs on to its end elsewhere; cancel it.
        let bad = Mutex::new(Vec::new());
        ask(&url, "tasks/cancel", json!({"taskId": id}), None, &bad).await;
        first = second;
    }
    let ms = |d: &Vec<Duration>| d.iter().map(|d| d.as_millis() as u64).collect::<Vec<_>>();
    eprintln!(
        "[{label}] takeover after SIGTERM (ms): rerun task started elsewhere {:?}; fail task settled {:?}",
        ms(&requeued),
        ms(&failed)
    );
    first.terminate().await;
    server.terminate().await;
}

/// Waits until `line` is in the effects file twice.
async fn effect_seen_twice(effects: &Path, line: &str) {
    while effect_lines(effects, 0)
        .iter()
        .filter(|l| *l == line)
        .count()
        < 2
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_task_is_taken_over_at_once_after_sigterm() {
    let Some(store) = Store::postgres("takeover") else {
        return;
    };
    a_task_is_taken_over_at_once_after_sigterm(&store, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_task_is_taken_over_at_once_after_sigterm() {
    let Some(store) = Store::redis("takeover") else {
        return;
    };
    a_task_is_taken_over_at_once_after_sigterm(&store, "redis").await;
}

/// A worker is frozen (`SIGSTOP`) at varying moments around the claim of a few tasks, and
/// thawed (`SIGCONT`) once the server settled the tasks it held: it never starts the tool
/// of a task settled meanwhile.
async fn a_frozen_worker_never_starts_a_settled_task(store: &Store, label: &str) {
    const LEASE_MS: u64 = 1000;
    let effects = effects_file(&format!("frozen-{label}"));
    let server = http_server(store, &effects, LEASE_MS, 0).await;
    let url = server.url.clone().unwrap();
    let w = worker(store, &effects, LEASE_MS, 0).await;
    let mut taken_over = 0;
    let mut window = 0;
    for round in 0..10u64 {
        let mut ids = Vec::new();
        for i in 0..4 {
            let key = format!("r{round}-{i}");
            ids.push((key.clone(), create(&url, "mark_once", &key, 300).await));
        }
        // Frozen at a different moment of the claim each round.
        tokio::time::sleep(Duration::from_millis(round * 7)).await;
        w.signal("STOP");
        // Past the lease: the server settles what the frozen worker held.
        tokio::time::sleep(Duration::from_millis(2 * LEASE_MS + 500)).await;
        let mut settled = BTreeSet::new();
        let bad = Mutex::new(Vec::new());
        for (key, id) in &ids {
            if let Answer::Json(v) = ask(&url, "tasks/get", json!({"taskId": id}), None, &bad).await
            {
                let status = v["result"]["status"].as_str().unwrap_or_default();
                if TERMINAL.contains(&status) {
                    settled.insert(key.clone());
                }
                if status == "failed" {
                    taken_over += 1;
                }
            }
        }
        let offset = std::fs::read_to_string(&effects).unwrap_or_default().len();
        // The tools the worker had started before it froze (it says so once its last check
        // passed) may go on once it thaws: that is the window the check leaves, between it
        // and the tool's first effect.
        let started_before: Vec<String> = w.log.lines_with(&["the tool starts"]);
        w.signal("CONT");
        tokio::time::sleep(Duration::from_millis(LEASE_MS + 500)).await;
        for line in effect_lines(&effects, offset) {
            if let Some(key) = line.strip_prefix("start ") {
                let id = &ids
                    .iter()
                    .find(|(k, _)| k == key)
                    .expect("a task of the round")
                    .1;
                if started_before.iter().any(|l| l.contains(id.as_str())) {
                    window += 1;
                    continue;
                }
                assert!(
                    !settled.contains(key),
                    "round {round}: the thawed worker started {key}, settled meanwhile: {:?}",
                    w.log.lines_with(&[id.as_str()])
                );
            }
        }
        for (_, id) in &ids {
            wait_status(&url, id, TERMINAL).await;
        }
    }
    eprintln!(
        "[{label}] frozen worker: {taken_over} tasks settled while it was frozen; {window} had started their tool before it froze"
    );
    assert!(
        taken_over > 0,
        "the worker never held a task when it froze: the test proved nothing"
    );
    w.terminate().await;
    server.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_frozen_worker_never_starts_a_settled_task() {
    let Some(store) = Store::postgres("frozen") else {
        return;
    };
    a_frozen_worker_never_starts_a_settled_task(&store, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_frozen_worker_never_starts_a_settled_task() {
    let Some(store) = Store::redis("frozen") else {
        return;
    };
    a_frozen_worker_never_starts_a_settled_task(&store, "redis").await;
}

/// Calls `tool` with `arguments` on `url`: the answer, and the HTTP status.
async fn call_status(url: &str, tool: &str, arguments: Value) -> (u16, bool, Value) {
    let name = tool.to_owned();
    let params = json!({"name": tool, "arguments": arguments});
    let response = stateless_with(
        url,
        1,
        "tools/call",
        params,
        tasks_meta(),
        &[("mcp-name", &name)],
    )
    .send()
    .await
    .expect("the server answers");
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").is_some();
    let text = response.text().await.unwrap();
    (status, retry_after, serde_json::from_str(&text).unwrap())
}

/// Waits until a call of `tool` on `url` is answered as `wanted` says.
async fn until_call(
    url: &str,
    tool: &str,
    arguments: Value,
    wanted: impl Fn(u16, &Value) -> bool,
) -> Value {
    let deadline = Instant::now() + WITHIN;
    loop {
        let (status, _, v) = call_status(url, tool, arguments.clone()).await;
        if wanted(status, &v) {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {status} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The rollback recipe of the README, step by step, on SQLite: a pause file blocks new task
/// starts of the tools it names on every process, the tasks already created are served and
/// watched (a running one runs to its end, a queued one waits), the processes are
/// restarted, and removing the file lets the queued task start. Signals pause and resume
/// the whole process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_rollback_recipe_works() {
    let store = Store::sqlite("rollback_recipe");
    let effects = effects_file("rollback");
    let pause = effects.with_file_name("pause");
    let pause_arg = pause.to_str().unwrap().to_owned();
    let with_pause = |mut args: Vec<String>| {
        args.extend(["--pause-file".into(), pause_arg.clone()]);
        args
    };
    let mut server_args: Vec<String> =
        vec!["--http".into(), "127.0.0.1:0".into(), "--no-execute".into()];
    server_args.extend(store_args(&store, 1000));
    let server_args = with_pause(server_args);
    let mut worker_args: Vec<String> = vec!["--worker".into()];
    worker_args.extend(store_args(&store, 1000));
    let worker_args = with_pause(worker_args);
    let as_str = |v: &Vec<String>| v.iter().map(String::to_owned).collect::<Vec<_>>();
    let spawn = |args: Vec<String>, effects: PathBuf| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Proc::spawn(&args, &effects).await
    };
    let server = spawn(as_str(&server_args), effects.clone()).await;
    let url = server.url.clone().unwrap();
    let mut w = spawn(as_str(&worker_args), effects.clone()).await;

    // A task running when the rollback starts.
    let running = create(&url, "mark", "running", 3000).await;
    effect_seen(&effects, "start running").await;

    // 1. Block new task starts of the tools being rolled back.
    std::fs::write(&pause, "mark\nmark_once  # the tools of the bad release\n").unwrap();
    // An optional tool runs synchronously; a tool that needs a task is refused, retryably.
    let sync = until_call(&url, "mark", json!({"key": "probe"}), |_, v| {
        v["result"]["content"].is_array()
    })
    .await;
    assert_eq!(
        sync["result"]["content"][0]["text"], "marked probe",
        "{sync}"
    );
    let (status, retry_after, refused) = call_status(&url, "mark_once", json!({"key": "x"})).await;
    assert_eq!((status, retry_after), (503, true), "{refused}");
    assert_eq!(refused["error"]["data"]["creation"], "paused", "{refused}");
    // Other tools make tasks as before.
    let (_, _, other) = call_status(&url, "failing_job", json!({})).await;
    assert!(other["result"]["taskId"].is_string(), "{other}");
    // The worker reads the file too (every second).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // A process that has not switched yet still takes a `mark` call: its task waits in the
    // queue, since no worker starts it.
    let mut unpaused_args: Vec<String> =
        vec!["--http".into(), "127.0.0.1:0".into(), "--no-execute".into()];
    unpaused_args.extend(store_args(&store, 1000));
    let unpaused = spawn(unpaused_args, effects.clone()).await;
    let queued = create(unpaused.url.as_deref().unwrap(), "mark", "queued", 0).await;
    unpaused.terminate().await;

    // 2. The tasks already created are served and watched: the running one runs to its end,
    // the queued one waits.
    let done = wait_status(&url, &running, &["completed"]).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let waiting = wait_status(&url, &queued, &["working"]).await;
    assert_eq!(waiting["result"]["status"], "working", "{waiting}");
    assert!(!effect_counts(&effects).contains_key("start queued"));

    // Signals pause and resume every tool of a process.
    server.signal("USR1");
    until_call(&url, "failing_job", json!({}), |status, v| {
        status == 503 && v["error"]["data"]["creation"] == "paused"
    })
    .await;
    server.signal("USR2");
    until_call(&url, "failing_job", json!({}), |_, v| {
        v["result"]["taskId"].is_string()
    })
    .await;

    // 3. Roll the processes back one at a time.
    w.terminate().await;
    w = spawn(as_str(&worker_args), effects.clone()).await;
    let server_url_before = url.clone();
    server.terminate().await;
    let server = spawn(as_str(&server_args), effects.clone()).await;
    let url = server.url.clone().unwrap();
    assert_ne!(url, server_url_before);
    let waiting = wait_status(&url, &queued, &["working"]).await;
    assert_eq!(waiting["result"]["status"], "working", "{waiting}");

    // 4. Creation back on: the queued task starts, new calls make tasks again.
    std::fs::remove_file(&pause).unwrap();
    let done = wait_status(&url, &queued, &["completed"]).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    until_call(&url, "mark", json!({"key": "probe"}), |_, v| {
        v["result"]["taskId"].is_string()
    })
    .await;
    let counts = effect_counts(&effects);
    assert_eq!(counts.get("start running"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("start queued"), Some(&1), "{counts:?}");
    w.terminate().await;
    server.terminate().await;
}

/// A worker whose task would outlast its grace (a minute) is still running it after the
/// first `SIGTERM`, still serving it; a second `SIGTERM` stops it at once, handing the task
/// off to the queue, where another worker runs it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_cuts_the_grace_short() {
    let store = Store::sqlite("second_sigterm");
    let effects = effects_file("second-sigterm");
    let server = http_server(&store, &effects, 30_000, 0).await;
    let url = server.url.clone().unwrap();
    let mut first = worker(&store, &effects, 30_000, 60_000).await;
    let id = create(&url, "mark", "long", 600_000).await;
    effect_seen(&effects, "start long").await;

    first.signal("TERM");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        first.child.try_wait().unwrap().is_none(),
        "the worker waits for its task through the grace"
    );
    let still = wait_status(&url, &id, &["working"]).await;
    assert_eq!(still["result"]["status"], "working", "{still}");

    first.signal("TERM");
    let status = tokio::time::timeout(Duration::from_secs(20), first.child.wait())
        .await
        .expect("a second SIGTERM stops the worker well within its grace")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        !first
            .log
            .lines_with(&["handed the task off", "queued to run again"])
            .is_empty(),
        "{:?}",
        first.log.summary(40)
    );
    let second = worker(&store, &effects, 30_000, 0).await;
    tokio::time::timeout(
        Duration::from_secs(20),
        effect_seen_twice(&effects, "start long"),
    )
    .await
    .expect("another worker runs the task handed off");
    let bad = Mutex::new(Vec::new());
    ask(&url, "tasks/cancel", json!({"taskId": id}), None, &bad).await;
    second.terminate().await;
    server.terminate().await;
}
