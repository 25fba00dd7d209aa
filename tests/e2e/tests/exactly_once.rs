//! Exactly once, with real processes on SQLite, PostgreSQL and Redis: a call retried with
//! its idempotency key runs once, whatever happened to the first try, and a rerun task runs
//! each of its finished durable steps once.
//!
//! The fixture's `charge_then_mail` appends `charge ORDER` and `mail ORDER` to the file named
//! by `MCP_TASKS_EFFECTS_FILE`, one line per side effect, in two durable steps; in each test
//! the side effects counted must equal the distinct keys used. Every wait is bounded.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{Server, Store, TERMINAL, task_id};

mod support;

/// A bound on every wait.
const WITHIN: Duration = Duration::from_secs(60);

/// How long a store stays frozen: longer than two of its timeouts (5 s each).
const FREEZE: Duration = Duration::from_secs(12);

/// A fresh, empty file of side effects.
fn effects_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-effects-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("effects.log")
}

/// How often each side effect (`charge ORDER`, `mail ORDER`) happened.
fn effects(path: &Path) -> BTreeMap<String, usize> {
    lines(path)
        .into_iter()
        .filter(|(line, _)| line.starts_with("charge ") || line.starts_with("mail "))
        .collect()
}

/// How often each line was written to the effects file (with the `between ORDER` marks).
fn lines(path: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        *counts.entry(line.to_owned()).or_default() += 1;
    }
    counts
}

/// Waits until `line` was written to the effects file.
async fn effect_seen(path: &Path, line: &str) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !lines(path).contains_key(line) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{line:?} never happened: {:?}",
            effects(path)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts that every order in `orders` was charged once and mailed once, and nothing else
/// happened.
fn each_once(path: &Path, orders: &[String]) {
    let want: BTreeMap<String, usize> = orders
        .iter()
        .flat_map(|o| [(format!("charge {o}"), 1), (format!("mail {o}"), 1)])
        .collect();
    assert_eq!(effects(path), want);
}

/// The params of a keyed `charge_then_mail` call.
fn charge(key: &str, order: &str, pause_ms: u64) -> Value {
    json!({
        "name": "charge_then_mail",
        "arguments": {"order": order, "pause_ms": pause_ms},
        "_meta": {"io.github.mcp-tasks/idempotencyKey": key},
    })
}

fn server(store: &Store, effects: &Path) -> Server {
    server_at(&store.arg(), effects, &[])
}

fn server_at(store: &str, effects: &Path, extra: &[&str]) -> Server {
    let args = [&["--no-quotas"], extra].concat();
    Server::spawn_env(store, &args, &[("MCP_TASKS_EFFECTS_FILE", effects)])
}

/// A server killed (`kill -9`) after storing a task whose answer the client never read, and
/// between the task's two steps: the client's retry with the key on another server gets the
/// same task, which is taken over and rerun, and each step's side effect happens once.
async fn a_retry_after_kill_9_gets_the_task_and_each_step_runs_once(store: &Store) {
    let file = effects_file(&format!("kill-{}", store.arg().len()));
    let mut first = server(store, &file);
    // The answer is never read: the client cannot tell whether the call ran.
    first.send("tools/call", charge("key-1", "o1", 2000)).await;
    // The charge is done and stored; the mail is not.
    effect_seen(&file, "between o1").await;
    first.kill().await;

    let mut second = server(store, &file);
    let retried = second
        .request("tools/call", charge("key-1", "o1", 2000))
        .await;
    let id = task_id(&retried);
    let done = second.wait_for(&id, TERMINAL, WITHIN).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    // Retried again once it ended: the same task, nothing new.
    let again = second
        .request("tools/call", charge("key-1", "o1", 2000))
        .await;
    assert_eq!(task_id(&again), id);
    each_once(&file, &["o1".to_owned()]);

    // The fixture's own count agrees.
    let counted = second
        .request(
            "tools/call",
            json!({"name": "side_effects", "arguments": {}}),
        )
        .await;
    let text = counted.to_string();
    assert!(text.contains("o1"), "{counted}");
    second.kill().await;
}

/// Two servers on one store get the same keyed call at once, for several keys: each key
/// makes one task, which both answer with, and runs once.
async fn two_servers_racing_one_key_start_one_run(store: &Store) {
    let file = effects_file(&format!("race-{}", store.arg().len()));
    let mut a = server(store, &file);
    let mut b = server(store, &file);
    let orders: Vec<String> = (0..6).map(|i| format!("r{i}")).collect();
    let mut ids = Vec::new();
    for order in &orders {
        let key = format!("race-{order}");
        let on_a = a.send("tools/call", charge(&key, order, 0)).await;
        let on_b = b.send("tools/call", charge(&key, order, 0)).await;
        let (from_a, from_b) = (
            a.response(on_a).await.unwrap(),
            b.response(on_b).await.unwrap(),
        );
        assert_eq!(task_id(&from_a), task_id(&from_b), "{from_a} {from_b}");
        ids.push(task_id(&from_a));
    }
    for id in &ids {
        let done = a.wait_for(id, TERMINAL, WITHIN).await;
        assert_eq!(done["result"]["status"], "completed", "{done}");
    }
    each_once(&file, &orders);
    a.kill().await;
    b.kill().await;
}

/// A synchronous call repeated with its key gets the first answer and charges once; when
/// the first call's server was killed before it answered, the repeat on another server
/// waits for its lease to lapse and gets the failure that says so, charging nothing more.
async fn a_synchronous_call_with_a_key_charges_once(store: &Store) {
    let file = effects_file(&format!("sync-{}", store.arg().len()));
    let call = |key: &str, order: &str, ms: u64| {
        json!({
            "name": "charge_now",
            "arguments": {"order": order, "ms": ms},
            "_meta": {"io.github.mcp-tasks/idempotencyKey": key},
        })
    };
    let mut a = server(store, &file);
    let first = a.request("tools/call", call("s1", "n1", 0)).await;
    assert_eq!(
        first["result"]["content"][0]["text"], "charged n1",
        "{first}"
    );
    let mut b = server(store, &file);
    let again = b.request("tools/call", call("s1", "n1", 0)).await;
    assert_eq!(again["result"], first["result"], "{again}");

    // Killed while it waits to charge: never answered, never charged.
    a.send("tools/call", call("s2", "n2", 60_000)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.kill().await;
    let repeat = b.request("tools/call", call("s2", "n2", 60_000)).await;
    let text = repeat.to_string();
    assert!(
        text.contains("interrupted") && text.contains("new key"),
        "the repeat learns the first call was interrupted: {repeat}"
    );
    let counts = effects(&file);
    assert_eq!(counts.get("charge n1"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("charge n2"), None, "{counts:?}");
    b.kill().await;
}

on_every_store!(
    a_retry_after_kill_9_gets_the_task_and_each_step_runs_once,
    two_servers_racing_one_key_start_one_run,
    a_synchronous_call_with_a_key_charges_once,
);

/// Creates a keyed task for each order, retrying every error answer with the same key
/// (for at most [`WITHIN`] per order); returns the task ids and how many answers were
/// errors.
async fn create_retrying(server: &mut Server, orders: &[String]) -> (Vec<String>, usize) {
    let (mut ids, mut errors) = (Vec::new(), 0);
    for order in orders {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let r = server
                .request("tools/call", charge(&format!("frozen-{order}"), order, 0))
                .await;
            if let Some(id) = r["result"]["taskId"].as_str() {
                ids.push(id.to_owned());
                break;
            }
            errors += 1;
            assert!(
                tokio::time::Instant::now() < deadline,
                "no task for {order}: {r}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    (ids, errors)
}

/// A burst of keyed creates while the store is frozen for longer than its timeout: some are
/// answered with errors, the client retries each with its key, and every order runs once.
///
/// `freeze` gets a sender to signal once the store is frozen; it stays frozen for
/// [`FREEZE`], longer than two store timeouts (the server's own second try of a create of
/// unknown outcome included), so that some creates are answered with errors.
async fn burst_through_a_freeze<F>(
    store: &str,
    file: &Path,
    freeze: impl FnOnce(tokio::sync::oneshot::Sender<()>) -> F,
) where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    // A lease long enough that the runs keep trying to store their steps and outcomes
    // through the freeze (a run tries for ten leases).
    let mut server = server_at(store, file, &["--lease-ms", "5000"]);
    let orders: Vec<String> = (0..24).map(|i| format!("f{i}")).collect();
    // A few before the freeze, the rest during and after it.
    let (mut ids, _) = create_retrying(&mut server, &orders[..4]).await;
    let (engaged, frozen_now) = tokio::sync::oneshot::channel();
    let frozen = tokio::spawn(freeze(engaged));
    frozen_now.await.expect("the store froze");
    let (more, errors) = create_retrying(&mut server, &orders[4..]).await;
    ids.extend(more);
    frozen.await.unwrap();
    eprintln!("{errors} error answers during the freeze, each retried with its key");
    assert!(
        errors > 0,
        "the freeze made no create fail: it tests nothing"
    );
    for id in &ids {
        let done = server.wait_for(id, TERMINAL, WITHIN).await;
        assert_eq!(done["result"]["status"], "completed", "{done}");
        let text = done["result"]["result"]["content"][0]["text"].as_str();
        assert!(text.is_some_and(|t| t.ends_with("mailed")), "{done}");
    }
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), orders.len());
    each_once(file, &orders);
    server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_burst_through_a_locked_database_runs_each_key_once() {
    let store = Store::sqlite("frozen_burst");
    let file = effects_file("frozen-sqlite");
    let Store::Sqlite(path) = &store else {
        panic!("a SQLite store");
    };
    // Opened once the first server made the schema.
    let path = path.clone();
    burst_through_a_freeze(&store.arg(), &file, |engaged| async move {
        tokio::task::spawn_blocking(move || {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
            engaged.send(()).unwrap();
            std::thread::sleep(FREEZE);
            conn.execute_batch("COMMIT").unwrap();
        })
        .await
        .unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_burst_through_held_inserts_runs_each_key_once() {
    let Some(store) = Store::postgres("frozen_burst") else {
        return;
    };
    let file = effects_file("frozen-postgres");
    let url = store.database().unwrap().url();
    // The schema is made by the first server; the hold is set up at the freeze.
    burst_through_a_freeze(&store.arg(), &file, |engaged| async move {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(
                "CREATE FUNCTION mcp_tasks.hold() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$; \
                 CREATE TRIGGER hold BEFORE INSERT ON mcp_tasks.tasks \
                 FOR EACH ROW EXECUTE FUNCTION mcp_tasks.hold(); \
                 SELECT pg_advisory_lock(4242)",
            )
            .await
            .unwrap();
        engaged.send(()).unwrap();
        tokio::time::sleep(FREEZE).await;
        client
            .batch_execute("SELECT pg_advisory_unlock(4242)")
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_burst_through_paused_writes_runs_each_key_once() {
    let Some(redis) = mcp_tasks_runtime::store::RedisServer::start("frozen_burst") else {
        return;
    };
    let redis = std::sync::Arc::new(redis);
    let store_url = format!("{}/0?prefix=frozen", redis.url());
    let file = effects_file("frozen-redis");
    let paused = std::sync::Arc::clone(&redis);
    burst_through_a_freeze(&store_url, &file, |engaged| async move {
        paused.pause_writes(FREEZE);
        engaged.send(()).unwrap();
        tokio::time::sleep(FREEZE).await;
    })
    .await;
}
