//! A retried call starts no second run: a `tools/call` repeated with its idempotency key gets
//! the first call's task (or result), in both eras, synchronous or task; the same key with
//! other arguments is refused; repeats racing the first call wait for it; keys are scoped to
//! the caller; and a unique tool hands back an equal unfinished task.

use mcp_tasks_runtime::model::{CallToolResult, TaskSupport};
use mcp_tasks_runtime::{IDEMPOTENCY_KEY_META, Server, Tool, ToolError, Unique};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use support::{Client, code, tasks_caps, text};
use tokio::sync::Notify;

mod support;

/// The runs of each fixture tool.
#[derive(Default)]
struct Runs {
    slow: AtomicUsize,
    quick: AtomicUsize,
    reindex: AtomicUsize,
}

/// `slow` (optional task) waits for `go`; `quick` (plain) answers at once; `reindex`
/// (optional task, unique by `index`) waits for `go`. Each counts its runs.
fn server(runs: &Arc<Runs>, go: &Arc<Notify>) -> Server {
    let (r1, r2, r3) = (Arc::clone(runs), Arc::clone(runs), Arc::clone(runs));
    let (g1, g3) = (Arc::clone(go), Arc::clone(go));
    Server::builder()
        .tool(
            Tool::new("slow", move |_, args| {
                let (runs, go) = (Arc::clone(&r1), Arc::clone(&g1));
                async move {
                    runs.slow.fetch_add(1, Ordering::SeqCst);
                    go.notified().await;
                    text(format!("slow {}", args["n"]))
                }
            })
            .task_support(TaskSupport::Optional),
        )
        .tool(
            Tool::new("quick", move |_, args| {
                let runs = Arc::clone(&r2);
                async move {
                    let n = runs.quick.fetch_add(1, Ordering::SeqCst) + 1;
                    if args.get("fail") == Some(&json!(true)) {
                        return Err::<CallToolResult, _>(ToolError::new(format!(
                            "failed in run {n}"
                        )));
                    }
                    text(format!("quick {} in run {n}", args["n"]))
                }
            })
            .task_support(TaskSupport::Forbidden),
        )
        .tool(
            Tool::new("reindex", move |_, args| {
                let (runs, go) = (Arc::clone(&r3), Arc::clone(&g3));
                async move {
                    runs.reindex.fetch_add(1, Ordering::SeqCst);
                    go.notified().await;
                    text(format!("reindexed {}", args["index"]))
                }
            })
            .input_schema(json!({
                "type": "object",
                "properties": {"index": {"type": "string"}, "note": {"type": "string"}}
            }))
            .task_support(TaskSupport::Optional)
            .unique(Unique::by(["index"])),
        )
        .build()
        .unwrap()
}

fn keyed(key: &str, arguments: Value) -> Value {
    json!({"arguments": arguments, "_meta": {IDEMPOTENCY_KEY_META: key}})
}

fn keyed_task(key: &str, arguments: Value) -> Value {
    json!({"arguments": arguments, "task": {}, "_meta": {IDEMPOTENCY_KEY_META: key}})
}

/// The task id of a 2026-07-28 `CreateTaskResult`.
fn task_2026(r: &Value) -> String {
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    r["result"]["taskId"].as_str().unwrap().to_owned()
}

/// The task id of a 2025-11-25 `CreateTaskResult`.
fn task_2025(r: &Value) -> String {
    r["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned()
}

#[tokio::test]
async fn a_task_call_repeated_with_its_key_gets_the_same_task_in_both_eras() {
    let (runs, go) = (Arc::<Runs>::default(), Arc::new(Notify::new()));
    let server = server(&runs, &go);
    let mut a = Client::stateless(&server, tasks_caps());
    let first = task_2026(&a.call_with("slow", keyed("k-2026", json!({"n": 1}))).await);
    // Another client (the same anonymous caller after a reconnect) repeats it.
    let mut b = Client::stateless(&server, tasks_caps());
    let again = task_2026(&b.call_with("slow", keyed("k-2026", json!({"n": 1}))).await);
    assert_eq!(again, first);
    // Other arguments under the same key are refused, saying so.
    let r = b.call_with("slow", keyed("k-2026", json!({"n": 2}))).await;
    assert_eq!(code(&r), -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("other arguments"),
        "{r}"
    );
    // Another key is another call.
    let other = task_2026(&b.call_with("slow", keyed("k-other", json!({"n": 1}))).await);
    assert_ne!(other, first);

    // 2025-11-25: two sessions, one key.
    let (mut s1, _) = Client::stateful(&server).await;
    let (mut s2, _) = Client::stateful(&server).await;
    let t1 = task_2025(
        &s1.call_with("slow", keyed_task("k-2025", json!({"n": 3})))
            .await,
    );
    let t2 = task_2025(
        &s2.call_with("slow", keyed_task("k-2025", json!({"n": 3})))
            .await,
    );
    assert_eq!(t1, t2);
    assert_ne!(t1, first);
    let r = s2
        .call_with("slow", keyed_task("k-2025", json!({"n": 4})))
        .await;
    assert_eq!(code(&r), -32602, "{r}");

    support::eventually(async || runs.slow.load(Ordering::SeqCst) == 3).await;
    go.notify_waiters();
    let done = a.poll_until(&first, &["completed"]).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    // A repeat after the task ended still gets it, ended, and runs nothing.
    let after = task_2026(&b.call_with("slow", keyed("k-2026", json!({"n": 1}))).await);
    assert_eq!(after, first);
    assert_eq!(runs.slow.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn keys_are_scoped_to_the_principal() {
    let (runs, go) = (Arc::<Runs>::default(), Arc::new(Notify::new()));
    let server = server(&runs, &go);
    let mut ann = Client::stateless_as(&server, Some("ann"), tasks_caps());
    let mut bob = Client::stateless_as(&server, Some("bob"), tasks_caps());
    let a = task_2026(
        &ann.call_with("slow", keyed("shared", json!({"n": 1})))
            .await,
    );
    let b = task_2026(
        &bob.call_with("slow", keyed("shared", json!({"n": 1})))
            .await,
    );
    assert_ne!(a, b, "one principal's key never finds another's task");
    // Nor do other arguments under one principal's key clash with the other's.
    let b2 = bob
        .call_with("slow", keyed("only-ann", json!({"n": 9})))
        .await;
    let a2 = ann
        .call_with("slow", keyed("only-ann", json!({"n": 8})))
        .await;
    assert_ne!(task_2026(&a2), task_2026(&b2));
    support::eventually(async || runs.slow.load(Ordering::SeqCst) == 4).await;
    go.notify_waiters();
}

#[tokio::test]
async fn repeats_racing_the_first_call_wait_for_it_and_share_its_task() {
    let (runs, go) = (Arc::<Runs>::default(), Arc::new(Notify::new()));
    let server = server(&runs, &go);
    let mut clients: Vec<Client> = (0..8)
        .map(|_| Client::stateless(&server, tasks_caps()))
        .collect();
    let calls = clients
        .iter_mut()
        .map(|c| c.call_with("slow", keyed("raced", json!({"n": 5}))));
    let answers = futures_join_all(calls).await;
    let ids: std::collections::BTreeSet<String> = answers.iter().map(task_2026).collect();
    assert_eq!(ids.len(), 1, "{answers:?}");
    support::eventually(async || runs.slow.load(Ordering::SeqCst) == 1).await;
    go.notify_waiters();
    let id = ids.into_iter().next().unwrap();
    clients[0].poll_until(&id, &["completed"]).await;
    assert_eq!(runs.slow.load(Ordering::SeqCst), 1);
}

/// Awaits every future, all at once on this task.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let handles: Vec<_> = futures.map(Box::pin).collect();
    let mut outputs = Vec::new();
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.extend(results.into_iter().map(Option::unwrap));
    outputs
}

#[tokio::test]
async fn a_synchronous_call_repeated_with_its_key_gets_the_first_result_in_both_eras() {
    let (runs, go) = (Arc::<Runs>::default(), Arc::new(Notify::new()));
    let server = server(&runs, &go);
    let mut c = Client::stateless(&server, tasks_caps());
    let first = c.call_with("quick", keyed("q1", json!({"n": 1}))).await;
    assert_eq!(
        first["result"]["content"][0]["text"], "quick 1 in run 1",
        "{first}"
    );
    let again = c.call_with("quick", keyed("q1", json!({"n": 1}))).await;
    assert_eq!(
        again["result"]["content"], first["result"]["content"],
        "{again}"
    );
    let r = c.call_with("quick", keyed("q1", json!({"n": 2}))).await;
    assert_eq!(code(&r), -32602, "{r}");
    // A tool error is kept too: the repeat does not run the tool again.
    let failed = c
        .call_with("quick", keyed("q-fail", json!({"n": 1, "fail": true})))
        .await;
    let failed_again = c
        .call_with("quick", keyed("q-fail", json!({"n": 1, "fail": true})))
        .await;
    assert_eq!(failed["result"], failed_again["result"], "{failed_again}");
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    assert_eq!(runs.quick.load(Ordering::SeqCst), 2);
    // Without a key, each call runs.
    c.call("quick", json!({"n": 1})).await;
    c.call("quick", json!({"n": 1})).await;
    assert_eq!(runs.quick.load(Ordering::SeqCst), 4);

    // 2025-11-25, from another session.
    let (mut s1, _) = Client::stateful(&server).await;
    let (mut s2, _) = Client::stateful(&server).await;
    let one = s1.call_with("quick", keyed("q2025", json!({"n": 7}))).await;
    let two = s2.call_with("quick", keyed("q2025", json!({"n": 7}))).await;
    assert_eq!(one["result"]["content"], two["result"]["content"], "{two}");
    assert_eq!(runs.quick.load(Ordering::SeqCst), 5);
    // The kept result is no task: it is not listed, and tasks/get does not find it.
    let listed = s1.request("tasks/list", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let counts = server.tasks();
    let admin = mcp_tasks_runtime::Viewer::admin("ops");
    let page = counts
        .list(&admin, &Default::default(), None, 100)
        .await
        .unwrap();
    assert!(page.tasks.is_empty(), "{:?}", page.tasks);
}

#[tokio::test]
async fn a_bad_key_is_refused() {
    let (runs, go) = (Arc::<Runs>::default(), Arc::new(Notify::new()));
    let server = server(&runs, &go);
    let mut c = Client::stateless(&server, tasks_caps());
    let long = "k".repeat(mcp_tasks_runtime::MAX_IDEMPOTENCY_KEY + 1);
    for bad in [json!(""), json!(long), json!("a b"), json!(7)] {
        let r = c
            .call_with(
                "quick",
                json!({"arguments": {}, "_meta": {IDEMPOTENCY_KEY_META: bad}}),
            )
            .await;
        assert_eq!(code(&r), -32602, "{r}");
    }
    let (mut s, _) = Client::stateful(&server).await;
    let r = s.call_with("quick", keyed("a b", json!({}))).await;
    assert_eq!(code(&r), -32602, "{r}");
    assert_eq!(runs.quick.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_unique_tool_hands_back_an_equal_unfinished_task() {
    let (runs, go) = (Arc::<Runs>::default(), Arc::new(Notify::new()));
    let server = server(&runs, &go);
    let mut c = Client::stateless(&server, tasks_caps());
    let call = |index: &str, note: &str| json!({"arguments": {"index": index, "note": note}});
    let a = task_2026(&c.call_with("reindex", call("a", "first")).await);
    // Equal in `index`, whatever the rest says: the same task.
    let a2 = task_2026(&c.call_with("reindex", call("a", "second")).await);
    assert_eq!(a2, a);
    let b = task_2026(&c.call_with("reindex", call("b", "first")).await);
    assert_ne!(b, a);
    support::eventually(async || runs.reindex.load(Ordering::SeqCst) == 2).await;
    go.notify_waiters();
    c.poll_until(&a, &["completed"]).await;
    c.poll_until(&b, &["completed"]).await;
    // Once it ended, an equal call is a new task.
    let a3 = task_2026(&c.call_with("reindex", call("a", "third")).await);
    assert_ne!(a3, a);
    support::eventually(async || runs.reindex.load(Ordering::SeqCst) == 3).await;
    go.notify_waiters();
    c.poll_until(&a3, &["completed"]).await;
}
