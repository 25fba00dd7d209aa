//! The shared task store test suite (cargo feature `testing`). Every backend must pass
//! [`check_store`] unchanged.
//!
//! ```no_run
//! use mcp_tasks_runtime::store::{MemoryTaskStore, testing::check_store};
//!
//! #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
//! async fn memory_store_passes_the_suite() {
//!     check_store(|| async { MemoryTaskStore::new() }).await;
//! }
//! ```
//!
//! What the suite holds a backend to, beyond the [`TaskStore`] docs:
//!
//! - Every field of a [`TaskRecord`] survives a write and a read, including `None` versus
//!   `Some` for `owner`, `status_message`, `ttl` (also `Some(0)`), `outcome` and the data of a
//!   JSON-RPC error. Durations are compared exactly (the suite uses whole milliseconds).
//! - `created_at` and `updated_at` need only millisecond precision: a time read back must be
//!   less than a millisecond away from the one written, so a backend may truncate or round
//!   sub-millisecond digits.
//! - A task expires at `created_at + ttl`, inclusive; the current `ttl` counts, so a
//!   compare-and-set that changes it moves the task in the expiry order. `expire` may return
//!   expired tasks in any order.
//! - `list` returns tasks in creation order (the suite creates them with increasing
//!   `created_at`), and a cursor stays valid when the task it follows is deleted.
//! - An id can be created again once its task is deleted.
//! - Claims ([`ClaimStore::claim`]) take queued tasks oldest first, skip the tools asked,
//!   bump `epoch` and `version` by one, and never hand one task to two concurrent claims;
//!   [`ClaimStore::lapsed`] returns exactly the unfinished tasks whose lease ended; a
//!   shared store reports every write in [`ClaimStore::changes`].

use super::{ClaimStore, ScanTasks, StoreError, TaskStore};
use crate::error::CallOutcome;
use crate::jsonrpc::ErrorObject;
use crate::model::{CallToolResult, Content, InputRequest, JsonObject};
use crate::task::{CancelRequest, Lease, SettlePolicy, TaskRecord, TaskStatus};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A plain task for tests: `working` and queued (no lease), tool `sample` with arguments
/// `{"n": 1}`, settled `completed` by an error result, no TTL, a one-second poll interval,
/// `updated_at` equal to `created_at`, nothing else set and version 0.
pub fn sample_record(id: &str, owner: Option<&str>, created_at: SystemTime) -> TaskRecord {
    let mut arguments = JsonObject::new();
    arguments.insert("n".into(), json!(1));
    TaskRecord {
        id: id.to_owned(),
        owner: owner.map(str::to_owned),
        tool: "sample".into(),
        arguments,
        settle: SettlePolicy::Complete,
        status: TaskStatus::Working,
        status_message: None,
        created_at,
        updated_at: created_at,
        ttl: None,
        poll_interval: Duration::from_secs(1),
        outcome: None,
        input_requests: BTreeMap::new(),
        input_responses: BTreeMap::new(),
        input_seq: 0,
        client_capabilities: Arc::new(json!({})),
        lease: None,
        epoch: 0,
        cancel_requested: None,
        version: 0,
    }
}

/// Checks two handles `a` and `b` on one shared store (two processes, in effect): a task
/// `a` creates wakes `b` ([`ClaimStore::changed`]) and shows in `b`'s change feed, `b`
/// claims it, `a` then finds nothing to claim, and `a` reads it as held by `b`. For stores
/// with a wake-up hook; `b` must see no task named `x` before.
pub async fn check_shared_stores<S: TaskStore + ClaimStore>(a: &S, b: &S) {
    let start = b.changes(None, 100).await.unwrap();
    let wake = b.changed();
    a.create(sample_record("x", Some("alice"), SystemTime::now()))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), wake)
        .await
        .expect("a write of one store wakes the other");
    let got = b.changes(Some(start.cursor), 100).await.unwrap();
    assert_eq!(got.ids, ["x"]);
    let claimed = b
        .claim("wb", SystemTime::now() + Duration::from_secs(30), 10, &[])
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(
        a.claim("wa", SystemTime::now(), 10, &[])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(a.get("x").await.unwrap().unwrap().is_held_by("wb", 1));
}

/// Runs every check of the suite, each against a fresh store from `make`, and panics naming
/// every check that failed.
///
/// `make` must return an empty store each time. Call this from a multi-threaded tokio
/// runtime so the concurrent compare-and-set check races for real; it also runs, with
/// interleaving only at `.await` points, on a current-thread runtime.
pub async fn check_store<S, F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
    S: TaskStore + ClaimStore + ScanTasks,
{
    let mut failures = Vec::new();
    let mut total = 0;
    macro_rules! run {
        ($($check:ident),* $(,)?) => {$(
            total += 1;
            let store = make().await;
            // Spawned so a panic inside the backend is reported under the check's name too.
            if let Err(message) = settle(tokio::spawn($check(store)).await) {
                failures.push(format!("`{}`: {message}", stringify!($check)));
            }
        )*};
    }
    run!(
        create_then_get,
        compare_and_set,
        concurrent_compare_and_set,
        fields_round_trip,
        delete,
        list_scoping_and_order,
        list_pagination,
        expire,
        expire_follows_ttl_changes,
        unfinished,
        claims,
        concurrent_claims,
        lapsed_leases,
        fenced_writes,
        changes_feed,
        scan_filters_and_order,
        scan_sparse_matches,
        counts,
    );
    if !failures.is_empty() {
        panic!(
            "the task store failed {} of {total} checks:\n\n{}",
            failures.len(),
            failures.join("\n\n")
        );
    }
}

type Outcome = Result<(), String>;

fn settle(joined: Result<Outcome, tokio::task::JoinError>) -> Outcome {
    match joined {
        Ok(outcome) => outcome,
        Err(error) if error.is_panic() => {
            let payload = error.into_panic();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".into());
            Err(format!("panicked: {message}"))
        }
        Err(error) => Err(error.to_string()),
    }
}

macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err(format!($($message)+));
        }
    };
}

macro_rules! ensure_eq {
    ($got:expr, $want:expr, $($message:tt)+) => {
        match (&$got, &$want) {
            (got, want) => {
                if got != want {
                    return Err(format!(
                        "{}\n   got: {got:?}\n  want: {want:?}",
                        format_args!($($message)+)
                    ));
                }
            }
        }
    };
}

mod scan;
use scan::{counts, scan_filters_and_order, scan_sparse_matches};

/// Turns a store error into a check failure that says which call failed.
trait Step<T> {
    fn step(self, call: &str) -> Result<T, String>;
}

impl<T> Step<T> for Result<T, StoreError> {
    fn step(self, call: &str) -> Result<T, String> {
        self.map_err(|e| format!("{call} returned an error: {e}"))
    }
}

/// A point in time `secs` seconds after an arbitrary whole-second origin.
fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

fn same_time(a: SystemTime, b: SystemTime) -> bool {
    let apart = a.duration_since(b).unwrap_or_else(|e| e.duration());
    apart < Duration::from_millis(1)
}

/// Fails unless `got` equals `want`, comparing timestamps at millisecond precision.
fn ensure_same(got: &TaskRecord, want: &TaskRecord, what: &str) -> Outcome {
    ensure!(
        same_time(got.created_at, want.created_at),
        "{what}: created_at {:?} is a millisecond or more away from {:?}",
        got.created_at,
        want.created_at
    );
    ensure!(
        same_time(got.updated_at, want.updated_at),
        "{what}: updated_at {:?} is a millisecond or more away from {:?}",
        got.updated_at,
        want.updated_at
    );
    let mut got = got.clone();
    got.created_at = want.created_at;
    got.updated_at = want.updated_at;
    ensure_eq!(got, *want, "{what}: the record differs");
    Ok(())
}

async fn get_some<S: TaskStore>(store: &S, id: &str) -> Result<TaskRecord, String> {
    store
        .get(id)
        .await
        .step(&format!("get({id:?})"))?
        .ok_or_else(|| format!("get({id:?}) returned None for a stored task"))
}

async fn create_all<S: TaskStore>(store: &S, records: &[TaskRecord]) -> Outcome {
    for record in records {
        store
            .create(record.clone())
            .await
            .step(&format!("create({:?})", record.id))?;
    }
    Ok(())
}

async fn list_ids<S: TaskStore>(
    store: &S,
    owner: Option<&str>,
    cursor: Option<&str>,
    limit: usize,
) -> Result<(Vec<String>, Option<String>), String> {
    let page = store
        .list(owner, cursor, limit)
        .await
        .step(&format!("list({owner:?}, {cursor:?}, {limit})"))?;
    let ids = page.tasks.into_iter().map(|t| t.id).collect();
    Ok((ids, page.next_cursor))
}

async fn expire_ids<S: TaskStore>(
    store: &S,
    now: SystemTime,
    limit: usize,
) -> Result<BTreeSet<String>, String> {
    let ids = store.expire(now, limit).await.step("expire")?;
    let count = ids.len();
    let set: BTreeSet<String> = ids.into_iter().collect();
    ensure_eq!(set.len(), count, "expire returned an id twice");
    Ok(set)
}

fn id_set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|id| (*id).to_owned()).collect()
}

/// Create then get returns an equal record; unknown ids are `None`; a duplicate id is refused.
async fn create_then_get<S: TaskStore>(store: S) -> Outcome {
    let record = sample_record("task-1", Some("alice"), at(0));
    store.create(record.clone()).await.step("create")?;
    ensure_same(
        &get_some(&store, "task-1").await?,
        &record,
        "get after create",
    )?;
    ensure!(
        store.get("no-such-task").await.step("get")?.is_none(),
        "get of an unknown id returned a task"
    );

    let duplicate = sample_record("task-1", Some("bob"), at(5));
    match store.create(duplicate).await {
        Err(StoreError::Duplicate(id)) => {
            ensure_eq!(id, "task-1", "Duplicate names the wrong id");
        }
        other => return Err(format!("create of an existing id returned {other:?}")),
    }
    ensure_same(
        &get_some(&store, "task-1").await?,
        &record,
        "the task after a refused duplicate create",
    )?;

    let mut versioned = sample_record("task-2", None, at(1));
    versioned.version = 7;
    store.create(versioned.clone()).await.step("create")?;
    ensure_same(
        &get_some(&store, "task-2").await?,
        &versioned,
        "create must keep the given version",
    )
}

/// Compare-and-set writes only at the right version, bumps it by one and is read back.
async fn compare_and_set<S: TaskStore>(store: S) -> Outcome {
    let record = sample_record("task-1", Some("alice"), at(0));
    store.create(record.clone()).await.step("create")?;

    let mut next = record.clone();
    next.status = TaskStatus::InputRequired;
    next.status_message = Some("waiting".into());
    next.updated_at = at(1);
    next.version = 41;
    ensure!(
        store
            .compare_and_set(next.clone(), 0)
            .await
            .step("compare_and_set")?,
        "compare_and_set with the current version returned false"
    );
    let mut want = next.clone();
    want.version = 1;
    ensure_same(
        &get_some(&store, "task-1").await?,
        &want,
        "get right after a successful compare_and_set (the version must become expected + 1)",
    )?;

    let mut stale = want.clone();
    stale.status_message = Some("stale".into());
    for version in [0, 2, 41] {
        ensure!(
            !store
                .compare_and_set(stale.clone(), version)
                .await
                .step("compare_and_set")?,
            "compare_and_set with version {version} while the stored version is 1 returned true"
        );
    }
    ensure_same(
        &get_some(&store, "task-1").await?,
        &want,
        "a refused compare_and_set changed the task",
    )?;

    let mut done = want.clone();
    done.status = TaskStatus::Completed;
    done.status_message = None;
    done.outcome = Some(CallOutcome::Result(CallToolResult::success(vec![
        Content::text("done"),
    ])));
    ensure!(
        store
            .compare_and_set(done.clone(), 1)
            .await
            .step("compare_and_set")?,
        "a second compare_and_set with the new version returned false"
    );
    done.version = 2;
    ensure_same(
        &get_some(&store, "task-1").await?,
        &done,
        "get after a second compare_and_set",
    )?;

    let ghost = sample_record("ghost", Some("alice"), at(0));
    ensure!(
        !store
            .compare_and_set(ghost, 0)
            .await
            .step("compare_and_set")?,
        "compare_and_set of a missing task returned true"
    );
    ensure!(
        store.get("ghost").await.step("get")?.is_none(),
        "compare_and_set of a missing task created it"
    );
    Ok(())
}

const WORKERS: u64 = 16;
const INCREMENTS: u64 = 25;

/// Concurrent read-modify-write loops lose no update.
async fn concurrent_compare_and_set<S: TaskStore>(store: S) -> Outcome {
    let store = Arc::new(store);
    let mut record = sample_record("counter", None, at(0));
    record.status_message = Some("0".into());
    store.create(record).await.step("create")?;

    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..WORKERS {
        let store = Arc::clone(&store);
        workers.spawn(async move {
            for _ in 0..INCREMENTS {
                loop {
                    let current = get_some(&*store, "counter").await?;
                    let text = current.status_message.as_deref().unwrap_or_default();
                    let n: u64 = text
                        .parse()
                        .map_err(|_| format!("the counter holds {text:?}, not a number"))?;
                    let mut next = current.clone();
                    next.status_message = Some((n + 1).to_string());
                    // Let the other workers read the same version, so writes conflict even
                    // on a current-thread runtime.
                    tokio::task::yield_now().await;
                    if store
                        .compare_and_set(next, current.version)
                        .await
                        .step("compare_and_set")?
                    {
                        break;
                    }
                }
            }
            Ok::<(), String>(())
        });
    }
    while let Some(joined) = workers.join_next().await {
        settle(joined)?;
    }

    let last = get_some(&*store, "counter").await?;
    let want = WORKERS * INCREMENTS;
    ensure_eq!(
        last.status_message,
        Some(want.to_string()),
        "{WORKERS} workers incrementing {INCREMENTS} times each lost updates"
    );
    ensure_eq!(
        last.version,
        want,
        "each successful compare_and_set must add exactly one to the version"
    );
    Ok(())
}

/// A task using every field, with sub-millisecond timestamps.
fn full_record(id: &str) -> TaskRecord {
    let mut record = sample_record(
        id,
        Some("alice@example.com"),
        at(0) + Duration::from_nanos(123_456_789),
    );
    record.tool = "deep_research".into();
    record.arguments = json!({
        "query": "héllo \"wörld\" \\ ✓\n",
        "n": -3,
        "big": u64::MAX,
        "ratio": 1.5,
        "nested": { "list": [1, null, true, "x", { "empty": {} }] },
        "none": null,
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    record.settle = SettlePolicy::Fail;
    record.status = TaskStatus::Completed;
    record.status_message = Some("50% — done, 'quoted' \"twice\"\nsecond line".into());
    record.updated_at = at(7) + Duration::from_nanos(987_654_321);
    record.ttl = Some(Duration::from_millis(86_400_123));
    record.poll_interval = Duration::from_millis(1_500);
    record.outcome = Some(CallOutcome::Result(CallToolResult {
        content: vec![
            Content::text("the answer"),
            Content::image("aGVsbG8=", "image/png"),
            Content::resource_link("file:///tmp/report.md", "report"),
        ],
        structured_content: Some(json!({ "total": 3, "items": ["a", "b"] })),
        is_error: false,
    }));
    record.input_requests.insert(
        "input-2".into(),
        InputRequest {
            method: "elicitation/create".into(),
            params: json!({
                "message": "Which one?",
                "requestedSchema": { "type": "object", "properties": { "pick": { "type": "string" } } },
            }),
            key: None,
        },
    );
    record.input_requests.insert(
        "input-3".into(),
        InputRequest {
            method: "roots/list".into(),
            params: json!({}),
            key: None,
        },
    );
    record.input_responses.insert(
        "input-1".into(),
        json!({ "action": "accept", "content": { "pick": "b" } }),
    );
    record.input_seq = 3;
    record.client_capabilities = Arc::new(json!({ "elicitation": { "form": {} }, "sampling": {} }));
    record.lease = Some(Lease {
        worker: "worker-✓".into(),
        until: at(9),
    });
    record.epoch = 4;
    record.cancel_requested = Some(CancelRequest {
        at: at(8),
        by: Some("principal:alice".into()),
    });
    record.version = 12;
    record
}

/// Every field survives create and compare-and-set, including clearing optional fields.
async fn fields_round_trip<S: TaskStore>(store: S) -> Outcome {
    let full = full_record("full");

    let mut error_with_data = sample_record("error-with-data", Some("bob"), at(1));
    error_with_data.status = TaskStatus::Failed;
    error_with_data.outcome = Some(CallOutcome::Error(
        ErrorObject::new(-32602, "bad argument `n`")
            .with_data(json!({ "field": "n", "codes": [1, 2], "nested": { "ok": false } })),
    ));

    let mut error_without_data = sample_record("error-without-data", None, at(2));
    error_without_data.status = TaskStatus::Failed;
    error_without_data.outcome = Some(CallOutcome::Error(ErrorObject::new(
        -32603,
        "internal error",
    )));

    let mut tool_error = sample_record("tool-error", None, at(3));
    tool_error.status = TaskStatus::Completed;
    tool_error.outcome = Some(CallOutcome::Result(CallToolResult::error_text("nope")));

    let mut zero_ttl = sample_record("zero-ttl", None, at(4));
    zero_ttl.ttl = Some(Duration::ZERO);
    zero_ttl.poll_interval = Duration::from_millis(250);

    let minimal = sample_record("minimal", None, at(5));

    let records = [
        full.clone(),
        error_with_data,
        error_without_data,
        tool_error,
        zero_ttl,
        minimal.clone(),
    ];
    create_all(&store, &records).await?;
    for record in &records {
        ensure_same(
            &get_some(&store, &record.id).await?,
            record,
            &format!("the round trip of {:?}", record.id),
        )?;
    }

    // Fill every field of the minimal task, then clear them again.
    let mut filled = full_record("minimal");
    filled.version = 0;
    ensure!(
        store
            .compare_and_set(filled.clone(), 0)
            .await
            .step("compare_and_set")?,
        "compare_and_set filling every field returned false"
    );
    filled.version = 1;
    ensure_same(
        &get_some(&store, "minimal").await?,
        &filled,
        "the round trip of a compare_and_set that fills every field",
    )?;
    let mut cleared = minimal;
    cleared.version = 1;
    ensure!(
        store
            .compare_and_set(cleared.clone(), 1)
            .await
            .step("compare_and_set")?,
        "compare_and_set clearing every field returned false"
    );
    cleared.version = 2;
    ensure_same(
        &get_some(&store, "minimal").await?,
        &cleared,
        "the round trip of a compare_and_set that clears every optional field",
    )
}

/// Delete reports whether the task existed and removes it from reads and listings.
async fn delete<S: TaskStore>(store: S) -> Outcome {
    let mut doomed = sample_record("doomed", Some("alice"), at(0));
    doomed.ttl = Some(Duration::from_secs(10));
    let kept = sample_record("kept", Some("alice"), at(1));
    create_all(&store, &[doomed.clone(), kept.clone()]).await?;

    ensure!(
        store.delete("doomed").await.step("delete")?,
        "delete of a stored task returned false"
    );
    ensure!(
        !store.delete("doomed").await.step("delete")?,
        "a second delete of the same task returned true"
    );
    ensure!(
        !store.delete("never-existed").await.step("delete")?,
        "delete of an unknown id returned true"
    );
    ensure!(
        store.get("doomed").await.step("get")?.is_none(),
        "get after delete returned the task"
    );
    ensure_same(
        &get_some(&store, "kept").await?,
        &kept,
        "deleting one task changed another",
    )?;
    let (ids, _) = list_ids(&store, Some("alice"), None, 10).await?;
    ensure_eq!(ids, ["kept"], "list after delete");
    ensure!(
        expire_ids(&store, at(100), 10).await?.is_empty(),
        "expire returned a task that had been deleted"
    );

    store
        .create(doomed.clone())
        .await
        .step("create of a deleted id")?;
    ensure_same(
        &get_some(&store, "doomed").await?,
        &doomed,
        "a task created again after delete",
    )
}

/// Owners see only their own tasks, oldest first.
async fn list_scoping_and_order<S: TaskStore>(store: S) -> Outcome {
    let plan: [(&str, Option<&str>); 9] = [
        ("t-5", Some("alice")),
        ("t-3", Some("bob")),
        ("t-9", None),
        ("t-1", Some("alice")),
        ("t-6", Some("alice-2")),
        ("t-7", None),
        ("t-4", Some("alice")),
        ("t-2", Some("bob")),
        ("t-8", Some("alice")),
    ];
    let records: Vec<TaskRecord> = plan
        .iter()
        .zip(0..)
        .map(|((id, owner), n)| sample_record(id, *owner, at(n)))
        .collect();
    create_all(&store, &records).await?;

    for (owner, want) in [
        (Some("alice"), &["t-5", "t-1", "t-4", "t-8"][..]),
        (Some("bob"), &["t-3", "t-2"][..]),
        (Some("alice-2"), &["t-6"][..]),
        (None, &["t-9", "t-7"][..]),
        (Some("ali"), &[][..]),
        (Some("carol"), &[][..]),
    ] {
        let (ids, next) = list_ids(&store, owner, None, 100).await?;
        ensure_eq!(ids, want, "list({owner:?}) in creation order");
        ensure_eq!(
            next,
            None,
            "list({owner:?}) has a next cursor on its only page"
        );
    }

    let page = store.list(Some("bob"), None, 100).await.step("list(bob)")?;
    for (got, want) in page.tasks.iter().zip([&records[1], &records[7]]) {
        ensure_same(got, want, "a listed task")?;
    }
    Ok(())
}

/// Pages of a fixed size cover an owner's tasks exactly once; cursors are checked.
async fn list_pagination<S: TaskStore>(store: S) -> Outcome {
    let alice = ["p-e", "p-b", "p-d", "p-a", "p-c"];
    let bob = ["q-4", "q-1", "q-3", "q-2"];
    let mut records = Vec::new();
    for (n, id) in (0..).zip(alice) {
        records.push(sample_record(id, Some("alice"), at(3 * n)));
        if let Some(id) = bob.get(n as usize) {
            records.push(sample_record(id, Some("bob"), at(3 * n + 1)));
        }
        records.push(sample_record(&format!("r-{n}"), None, at(3 * n + 2)));
    }
    create_all(&store, &records).await?;

    let (first, cursor) = list_ids(&store, Some("alice"), None, 2).await?;
    ensure_eq!(first, alice[..2], "alice's first page");
    let Some(cursor) = cursor else {
        return Err("alice's first page of 2 out of 5 has no next cursor".into());
    };
    let (second, cursor) = list_ids(&store, Some("alice"), Some(&cursor), 2).await?;
    ensure_eq!(second, alice[2..4], "alice's second page");
    let Some(cursor) = cursor else {
        return Err("alice's second page of 2 out of 5 has no next cursor".into());
    };
    let (third, cursor) = list_ids(&store, Some("alice"), Some(&cursor), 2).await?;
    ensure_eq!(third, alice[4..], "alice's third page");
    ensure_eq!(cursor, None, "alice's last page has a next cursor");

    let (first, cursor) = list_ids(&store, Some("bob"), None, 2).await?;
    ensure_eq!(first, bob[..2], "bob's first page");
    let (second, cursor) = list_ids(&store, Some("bob"), cursor.as_deref(), 2).await?;
    ensure_eq!(second, bob[2..], "bob's second page");
    ensure_eq!(
        cursor,
        None,
        "a page that ends exactly at the last task has a next cursor"
    );

    let (all, cursor) = list_ids(&store, Some("alice"), None, 5).await?;
    ensure_eq!(all, alice, "a page as large as the listing");
    ensure_eq!(
        cursor,
        None,
        "a page as large as the listing has a next cursor"
    );

    // The cursor must not depend on the task it follows still existing.
    let (_, cursor) = list_ids(&store, Some("alice"), None, 2).await?;
    ensure!(
        store.delete(alice[1]).await.step("delete")?,
        "delete of a listed task returned false"
    );
    let (after_delete, _) = list_ids(&store, Some("alice"), cursor.as_deref(), 2).await?;
    ensure_eq!(
        after_delete,
        alice[2..4],
        "the page after a cursor whose task was deleted"
    );

    match store.list(Some("alice"), Some("not-a-cursor"), 2).await {
        Err(StoreError::InvalidCursor(cursor)) => {
            ensure_eq!(
                cursor,
                "not-a-cursor",
                "InvalidCursor names the wrong cursor"
            );
        }
        other => return Err(format!("list with a made-up cursor returned {other:?}")),
    }
    Ok(())
}

/// Expire deletes exactly the expired tasks, at most `limit` a call.
async fn expire<S: TaskStore>(store: S) -> Outcome {
    let now = at(1000);
    let ttl = |id: &str, owner: Option<&str>, created: u64, ttl: Duration| {
        let mut record = sample_record(id, owner, at(created));
        record.ttl = Some(ttl);
        record.status = TaskStatus::Completed;
        record
    };
    let secs = Duration::from_secs;
    let mut failed = ttl("e-2", None, 10, secs(500));
    failed.status = TaskStatus::Failed;
    // Running work is never deleted, however old: it expires once it is terminal.
    let mut running = ttl("k-running", Some("alice"), 0, secs(1));
    running.status = TaskStatus::Working;
    let records = [
        ttl("e-1", Some("alice"), 0, secs(100)),
        failed,
        ttl("e-3", Some("alice"), 900, secs(100)),
        ttl("e-4", None, 0, secs(999)),
        ttl("e-5", Some("bob"), 500, Duration::ZERO),
        sample_record("k-no-ttl", Some("alice"), at(0)),
        ttl(
            "k-1ms-later",
            Some("alice"),
            0,
            secs(1000) + Duration::from_millis(1),
        ),
        ttl("k-later", None, 999, secs(2)),
        running,
        ttl("d-deleted", Some("alice"), 0, secs(10)),
    ];
    create_all(&store, &records).await?;
    ensure!(
        store.delete("d-deleted").await.step("delete")?,
        "delete returned false"
    );
    let expired = id_set(&["e-1", "e-2", "e-3", "e-4", "e-5"]);

    ensure!(
        expire_ids(&store, now, 0).await?.is_empty(),
        "expire with limit 0 deleted tasks"
    );
    let mut seen = BTreeSet::new();
    for (call, want) in [2, 2, 1, 0].into_iter().enumerate() {
        let ids = expire_ids(&store, now, 2).await?;
        ensure_eq!(
            ids.len(),
            want,
            "call {} of expire(limit 2) with 5 expired tasks returned {ids:?}",
            call + 1
        );
        ensure!(
            ids.is_subset(&expired),
            "expire returned {ids:?}, not all of which had expired (expired: {expired:?})"
        );
        ensure!(ids.is_disjoint(&seen), "expire returned {ids:?} again");
        for id in &ids {
            ensure!(
                store.get(id).await.step("get")?.is_none(),
                "expire returned {id:?} but did not delete it"
            );
        }
        seen.extend(ids);
    }
    ensure_eq!(seen, expired, "the tasks expire deleted");

    for record in &records[5..9] {
        ensure_same(
            &get_some(&store, &record.id).await?,
            record,
            "a task that had not expired",
        )?;
    }
    ensure_eq!(
        expire_ids(&store, at(1001), 100).await?,
        id_set(&["k-1ms-later", "k-later"]),
        "expire one second later"
    );
    ensure!(
        store.get("k-no-ttl").await.step("get")?.is_some(),
        "a task without a TTL expired"
    );
    ensure!(
        store.get("k-running").await.step("get")?.is_some(),
        "a running task expired"
    );
    let mut done = get_some(&store, "k-running").await?;
    let version = done.version;
    done.status = TaskStatus::Cancelled;
    ensure!(
        store
            .compare_and_set(done, version)
            .await
            .step("compare_and_set")?,
        "compare_and_set of k-running returned false"
    );
    ensure_eq!(
        expire_ids(&store, at(1001), 100).await?,
        id_set(&["k-running"]),
        "expire after the running task ended"
    );
    Ok(())
}

/// A compare-and-set that changes the TTL moves the task in the expiry order.
async fn expire_follows_ttl_changes<S: TaskStore>(store: S) -> Outcome {
    let with_ttl = |id: &str, ttl: Option<u64>| {
        let mut record = sample_record(id, Some("alice"), at(0));
        record.ttl = ttl.map(Duration::from_secs);
        record
    };
    let changes = [
        ("extended", Some(100), Some(10_000)),
        ("shortened", Some(10_000), Some(100)),
        ("made-permanent", Some(100), None),
        ("given-a-ttl", None, Some(100)),
        ("ttl-kept", Some(100), Some(100)),
    ];
    for (id, before, after) in changes {
        let record = with_ttl(id, before);
        store.create(record.clone()).await.step("create")?;
        let mut next = record;
        next.ttl = after.map(Duration::from_secs);
        // Expiry counts from creation, not from the last update.
        next.updated_at = at(900);
        next.status = TaskStatus::Completed;
        ensure!(
            store
                .compare_and_set(next, 0)
                .await
                .step("compare_and_set")?,
            "compare_and_set of {id:?} returned false"
        );
    }
    ensure_eq!(
        expire_ids(&store, at(1000), 100).await?,
        id_set(&["given-a-ttl", "shortened", "ttl-kept"]),
        "expire after compare_and_set changed TTLs"
    );
    ensure_eq!(
        expire_ids(&store, at(20_000), 100).await?,
        id_set(&["extended"]),
        "expire after the extended TTL"
    );
    ensure!(
        store.get("made-permanent").await.step("get")?.is_some(),
        "a task whose TTL was removed expired"
    );
    Ok(())
}

/// The restart scan returns exactly the tasks that are not terminal.
async fn unfinished<S: TaskStore>(store: S) -> Outcome {
    ensure!(
        store.unfinished().await.step("unfinished")?.is_empty(),
        "unfinished on an empty store returned tasks"
    );
    let statuses = [
        ("working", TaskStatus::Working),
        ("input-required", TaskStatus::InputRequired),
        ("completed", TaskStatus::Completed),
        ("failed", TaskStatus::Failed),
        ("cancelled", TaskStatus::Cancelled),
        ("finishes-later", TaskStatus::Working),
        ("resumes-later", TaskStatus::InputRequired),
    ];
    let mut records = Vec::new();
    for ((id, status), n) in statuses.into_iter().zip(0..) {
        let owner = (n % 2 == 0).then_some("alice");
        let mut record = sample_record(id, owner, at(n));
        record.status = status;
        records.push(record);
    }
    create_all(&store, &records).await?;
    for (id, status) in [
        ("finishes-later", TaskStatus::Completed),
        ("resumes-later", TaskStatus::Working),
    ] {
        let mut next = get_some(&store, id).await?;
        next.status = status;
        ensure!(
            store
                .compare_and_set(next, 0)
                .await
                .step("compare_and_set")?,
            "compare_and_set of {id:?} returned false"
        );
    }

    let mut got = store.unfinished().await.step("unfinished")?;
    got.sort_by(|a, b| a.id.cmp(&b.id));
    let ids: Vec<&str> = got.iter().map(|r| r.id.as_str()).collect();
    ensure_eq!(
        ids,
        ["input-required", "resumes-later", "working"],
        "unfinished"
    );
    for record in &got {
        ensure_same(
            record,
            &get_some(&store, &record.id).await?,
            "an unfinished task",
        )?;
    }
    Ok(())
}

fn leased(mut record: TaskRecord, worker: &str, until: SystemTime) -> TaskRecord {
    record.lease = Some(Lease {
        worker: worker.into(),
        until,
    });
    record.epoch = 1;
    record
}

/// Claims take queued tasks oldest first, skip tools, and lease what they return.
async fn claims<S: TaskStore + ClaimStore>(store: S) -> Outcome {
    ensure!(
        store
            .claim("w1", at(100), 10, &[])
            .await
            .step("claim")?
            .is_empty(),
        "claim on an empty store returned tasks"
    );
    let mut records = Vec::new();
    for n in 0..6 {
        let mut record = sample_record(&format!("q{n}"), Some("alice"), at(n));
        if n == 1 {
            record.tool = "other".into();
        }
        records.push(record);
    }
    records.push(leased(sample_record("held", None, at(10)), "w0", at(1000)));
    let mut done = sample_record("done", None, at(11));
    done.status = TaskStatus::Completed;
    records.push(done);
    create_all(&store, &records).await?;

    let first = store
        .claim("w1", at(100), 2, &["other".into()])
        .await
        .step("claim")?;
    let ids: Vec<&str> = first.iter().map(|r| r.id.as_str()).collect();
    ensure_eq!(
        ids,
        ["q0", "q2"],
        "the first claim (oldest first, skipping `other`)"
    );
    for record in &first {
        ensure_eq!(
            record.lease,
            Some(Lease {
                worker: "w1".into(),
                until: at(100)
            }),
            "a claimed task's lease"
        );
        ensure_eq!((record.epoch, record.version), (1, 1), "epoch and version");
        ensure_same(
            record,
            &get_some(&store, &record.id).await?,
            "a claimed task",
        )?;
    }
    let second = store.claim("w2", at(200), 10, &[]).await.step("claim")?;
    let ids: Vec<&str> = second.iter().map(|r| r.id.as_str()).collect();
    ensure_eq!(ids, ["q1", "q3", "q4", "q5"], "the second claim");
    ensure!(
        store
            .claim("w3", at(300), 10, &[])
            .await
            .step("claim")?
            .is_empty(),
        "a claim found work after every queued task was taken"
    );

    // A task whose lease is given back is queued again, under a new epoch when claimed.
    let mut back = get_some(&store, "q0").await?;
    back.lease = None;
    ensure!(
        store
            .compare_and_set(back, 1)
            .await
            .step("compare_and_set")?,
        "giving a lease back failed"
    );
    let again = store.claim("w3", at(300), 10, &[]).await.step("claim")?;
    ensure_eq!(
        again.len(),
        1,
        "tasks claimed after one lease was given back"
    );
    ensure_eq!(
        (again[0].id.as_str(), again[0].epoch, again[0].version),
        ("q0", 2, 3),
        "the task claimed again"
    );
    Ok(())
}

/// Concurrent claims never hand out one task twice, and together take every queued task.
async fn concurrent_claims<S: TaskStore + ClaimStore>(store: S) -> Outcome {
    const TASKS: usize = 60;
    let records: Vec<TaskRecord> = (0..TASKS)
        .map(|n| sample_record(&format!("c{n:02}"), None, at(n as u64)))
        .collect();
    create_all(&store, &records).await?;
    let store = Arc::new(store);
    let mut claimers = Vec::new();
    for w in 0..6 {
        let store = Arc::clone(&store);
        claimers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store.claim(&format!("w{w}"), at(1000), 4, &[]).await?;
                if got.is_empty() {
                    return Ok::<_, StoreError>(mine);
                }
                mine.extend(got.into_iter().map(|r| r.id));
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut all = Vec::new();
    for claimer in claimers {
        let ids = claimer
            .await
            .map_err(|e| format!("a claimer failed: {e}"))?
            .step("claim")?;
        all.extend(ids);
    }
    let count = all.len();
    let unique: BTreeSet<String> = all.into_iter().collect();
    ensure_eq!(unique.len(), count, "a task was claimed twice");
    ensure_eq!(count, TASKS, "tasks claimed in all");
    Ok(())
}

/// `lapsed` returns exactly the unfinished tasks whose lease ended, earliest first.
async fn lapsed_leases<S: TaskStore + ClaimStore>(store: S) -> Outcome {
    let mut done = leased(sample_record("done", None, at(0)), "w", at(5));
    done.status = TaskStatus::Failed;
    let mut asking = leased(sample_record("asking", None, at(1)), "w", at(20));
    asking.status = TaskStatus::InputRequired;
    let records = [
        leased(sample_record("late", None, at(2)), "w", at(30)),
        leased(sample_record("early", None, at(3)), "w", at(10)),
        asking,
        leased(sample_record("running", None, at(4)), "w", at(500)),
        sample_record("queued", None, at(5)),
        done,
    ];
    create_all(&store, &records).await?;
    let ids = |got: Vec<TaskRecord>| got.into_iter().map(|r| r.id).collect::<Vec<_>>();
    ensure!(
        store.lapsed(at(9), 10).await.step("lapsed")?.is_empty(),
        "lapsed returned a task whose lease runs on"
    );
    ensure_eq!(
        ids(store.lapsed(at(30), 10).await.step("lapsed")?),
        ["early", "asking", "late"],
        "lapsed at 30 s"
    );
    ensure_eq!(
        ids(store.lapsed(at(30), 2).await.step("lapsed")?),
        ["early", "asking"],
        "lapsed with a limit"
    );
    // A renewal moves the task out of the lapsed set.
    let mut renewed = get_some(&store, "early").await?;
    renewed.lease = Some(Lease {
        worker: "w".into(),
        until: at(400),
    });
    ensure!(
        store
            .compare_and_set(renewed, 0)
            .await
            .step("compare_and_set")?,
        "renewing a lease failed"
    );
    ensure_eq!(
        ids(store.lapsed(at(30), 10).await.step("lapsed")?),
        ["asking", "late"],
        "lapsed after a renewal"
    );
    Ok(())
}

/// A holder that lost its lease cannot write over the task that was taken over: its
/// compare-and-set, made from the record it read under its lease, fails.
async fn fenced_writes<S: TaskStore + ClaimStore>(store: S) -> Outcome {
    store
        .create(sample_record("t", None, at(0)))
        .await
        .step("create")?;
    let mine = store.claim("old", at(10), 1, &[]).await.step("claim")?;
    ensure_eq!(mine.len(), 1, "claimed tasks");
    let mine = mine
        .into_iter()
        .next()
        .unwrap_or_else(|| sample_record("t", None, at(0)));
    ensure!(
        mine.is_held_by("old", 1),
        "the claim is not held by its claimer"
    );
    // The lease lapsed; another process takes the task over under a new epoch.
    let mut taken = get_some(&store, "t").await?;
    taken.lease = Some(Lease {
        worker: "new".into(),
        until: at(100),
    });
    taken.epoch = 2;
    ensure!(
        store
            .compare_and_set(taken.clone(), mine.version)
            .await
            .step("compare_and_set")?,
        "the takeover failed"
    );
    // The old holder wakes up and tries to settle the task from what it read.
    let mut late = mine.clone();
    late.status = TaskStatus::Completed;
    ensure!(
        !store
            .compare_and_set(late, mine.version)
            .await
            .step("compare_and_set")?,
        "a stale lease holder overwrote a task taken over by another process"
    );
    let now = get_some(&store, "t").await?;
    ensure!(now.is_held_by("new", 2), "the new holder lost the task");
    ensure!(
        !now.is_held_by("old", 1),
        "the old holder still holds the task"
    );
    Ok(())
}

/// A shared store reports every write after the cursor.
async fn changes_feed<S: TaskStore + ClaimStore>(store: S) -> Outcome {
    let start = store.changes(None, 100).await.step("changes")?;
    ensure!(start.ids.is_empty(), "changes(None) returned ids");
    store
        .create(sample_record("a", None, at(0)))
        .await
        .step("create")?;
    store
        .create(sample_record("b", None, at(1)))
        .await
        .step("create")?;
    let mut b = get_some(&store, "b").await?;
    b.status = TaskStatus::Completed;
    ensure!(
        store.compare_and_set(b, 0).await.step("compare_and_set")?,
        "compare_and_set returned false"
    );
    let got = store
        .changes(Some(start.cursor), 100)
        .await
        .step("changes")?;
    if !store.is_shared() {
        ensure!(
            got.ids.is_empty(),
            "a store that is not shared reported changes"
        );
        return Ok(());
    }
    ensure_eq!(
        got.ids.iter().cloned().collect::<BTreeSet<_>>(),
        id_set(&["a", "b"]),
        "the tasks written after the cursor"
    );
    let quiet = store.changes(Some(got.cursor), 100).await.step("changes")?;
    ensure!(
        quiet.ids.is_empty(),
        "changes repeated writes it had reported"
    );
    ensure_eq!(quiet.cursor, got.cursor, "the cursor moved without writes");
    let claimed = store.claim("w", at(50), 10, &[]).await.step("claim")?;
    ensure_eq!(claimed.len(), 1, "claimed tasks");
    let after = store.changes(Some(got.cursor), 100).await.step("changes")?;
    ensure_eq!(after.ids, ["a"], "a claim is a change");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryTaskStore, TaskCounts, TaskFilter, TaskPage, TimeRange};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn memory_store_passes_the_suite() {
        check_store(|| async { MemoryTaskStore::new() }).await;
    }

    #[tokio::test]
    async fn memory_store_passes_the_suite_on_one_thread() {
        check_store(|| async { MemoryTaskStore::new() }).await;
    }

    /// A memory store with one deliberate bug, to show the suite catches it.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Flaw {
        CasIgnoresVersion,
        CasNotAtomic,
        LosesErrorData,
        TruncatesToSeconds,
        ExpireIgnoresLimit,
        ListIgnoresCursor,
        UnfinishedIncludesTerminal,
        ClaimIgnoresSkip,
        LapsedIgnoresTime,
        ClaimTwice,
        ScanIgnoresCursor,
        ScanIgnoresTimes,
        CountIgnoresDeletes,
    }

    #[derive(Debug)]
    struct Flawed {
        inner: MemoryTaskStore,
        flaw: Flaw,
    }

    impl Flawed {
        fn damage(&self, mut record: TaskRecord) -> TaskRecord {
            if self.flaw == Flaw::LosesErrorData
                && let Some(CallOutcome::Error(error)) = &mut record.outcome
            {
                error.data = None;
            }
            if self.flaw == Flaw::TruncatesToSeconds {
                let secs = |t: SystemTime| {
                    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                    UNIX_EPOCH + Duration::from_secs(since.as_secs())
                };
                record.created_at = secs(record.created_at);
                record.updated_at = secs(record.updated_at);
            }
            record
        }
    }

    impl TaskStore for Flawed {
        async fn create(&self, record: TaskRecord) -> Result<(), StoreError> {
            self.inner.create(record).await
        }

        async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
            Ok(self.inner.get(id).await?.map(|r| self.damage(r)))
        }

        async fn compare_and_set(
            &self,
            record: TaskRecord,
            expected: u64,
        ) -> Result<bool, StoreError> {
            let Some(stored) = self.inner.get(&record.id).await? else {
                return Ok(false);
            };
            match self.flaw {
                Flaw::CasIgnoresVersion => self.inner.compare_and_set(record, stored.version).await,
                Flaw::CasNotAtomic => {
                    if stored.version != expected {
                        return Ok(false);
                    }
                    tokio::task::yield_now().await;
                    let now = self.inner.get(&record.id).await?.map_or(0, |r| r.version);
                    self.inner.compare_and_set(record, now).await
                }
                _ => self.inner.compare_and_set(record, expected).await,
            }
        }

        async fn delete(&self, id: &str) -> Result<bool, StoreError> {
            self.inner.delete(id).await
        }

        async fn list(
            &self,
            owner: Option<&str>,
            cursor: Option<&str>,
            limit: usize,
        ) -> Result<super::super::TaskPage, StoreError> {
            let cursor = if self.flaw == Flaw::ListIgnoresCursor {
                None
            } else {
                cursor
            };
            self.inner.list(owner, cursor, limit).await
        }

        async fn expire(&self, now: SystemTime, limit: usize) -> Result<Vec<String>, StoreError> {
            let limit = if self.flaw == Flaw::ExpireIgnoresLimit {
                usize::MAX
            } else {
                limit
            };
            self.inner.expire(now, limit).await
        }

        async fn unfinished(&self) -> Result<Vec<TaskRecord>, StoreError> {
            if self.flaw != Flaw::UnfinishedIncludesTerminal {
                return self.inner.unfinished().await;
            }
            let mut all = Vec::new();
            for owner in [None, Some("alice")] {
                all.extend(self.inner.list(owner, None, usize::MAX).await?.tasks);
            }
            Ok(all)
        }
    }

    impl ClaimStore for Flawed {
        async fn claim(
            &self,
            worker: &str,
            until: SystemTime,
            limit: usize,
            skip: &[String],
        ) -> Result<Vec<TaskRecord>, StoreError> {
            match self.flaw {
                Flaw::ClaimIgnoresSkip => self.inner.claim(worker, until, limit, &[]).await,
                Flaw::ClaimTwice => {
                    // Reads the queue, then claims what it read, without atomicity.
                    let queued: Vec<TaskRecord> = self
                        .inner
                        .unfinished()
                        .await?
                        .into_iter()
                        .filter(|r| r.is_queued() && !skip.contains(&r.tool))
                        .take(limit)
                        .collect();
                    tokio::task::yield_now().await;
                    let mut claimed = Vec::new();
                    for mut r in queued {
                        let version = self.inner.get(&r.id).await?.map_or(0, |s| s.version);
                        r.lease = Some(Lease {
                            worker: worker.into(),
                            until,
                        });
                        r.epoch += 1;
                        if self.inner.compare_and_set(r.clone(), version).await? {
                            r.version = version + 1;
                            claimed.push(r);
                        }
                    }
                    Ok(claimed)
                }
                _ => self.inner.claim(worker, until, limit, skip).await,
            }
        }

        async fn lapsed(
            &self,
            now: SystemTime,
            limit: usize,
        ) -> Result<Vec<TaskRecord>, StoreError> {
            let now = if self.flaw == Flaw::LapsedIgnoresTime {
                now + Duration::from_secs(1_000_000)
            } else {
                now
            };
            self.inner.lapsed(now, limit).await
        }

        async fn changes(
            &self,
            cursor: Option<u64>,
            limit: usize,
        ) -> Result<super::super::Changes, StoreError> {
            self.inner.changes(cursor, limit).await
        }

        fn is_shared(&self) -> bool {
            self.inner.is_shared()
        }
    }

    impl ScanTasks for Flawed {
        async fn scan(
            &self,
            filter: &TaskFilter,
            cursor: Option<&str>,
            limit: usize,
        ) -> Result<TaskPage, StoreError> {
            match self.flaw {
                Flaw::ScanIgnoresCursor => self.inner.scan(filter, None, limit).await,
                Flaw::ScanIgnoresTimes => {
                    let mut wide = filter.clone();
                    wide.created = TimeRange::default();
                    wide.updated = TimeRange::default();
                    self.inner.scan(&wide, cursor, limit).await
                }
                _ => self.inner.scan(filter, cursor, limit).await,
            }
        }

        async fn count(&self) -> Result<TaskCounts, StoreError> {
            let mut counts = self.inner.count().await?;
            if self.flaw == Flaw::CountIgnoresDeletes {
                counts.add(TaskStatus::Failed, "render", 1);
            }
            Ok(counts)
        }
    }

    #[tokio::test]
    async fn the_suite_catches_broken_stores() {
        let cases = [
            (
                Flaw::CasIgnoresVersion,
                &[
                    "compare_and_set",
                    "concurrent_compare_and_set",
                    "fenced_writes",
                ][..],
            ),
            (Flaw::CasNotAtomic, &["concurrent_compare_and_set"][..]),
            (Flaw::LosesErrorData, &["fields_round_trip"][..]),
            (Flaw::TruncatesToSeconds, &["fields_round_trip"][..]),
            (Flaw::ExpireIgnoresLimit, &["expire"][..]),
            (Flaw::ListIgnoresCursor, &["list_pagination"][..]),
            (Flaw::UnfinishedIncludesTerminal, &["unfinished"][..]),
            (Flaw::ClaimIgnoresSkip, &["claims"][..]),
            (Flaw::LapsedIgnoresTime, &["lapsed_leases"][..]),
            (Flaw::ClaimTwice, &["claims", "concurrent_claims"][..]),
            (Flaw::ScanIgnoresCursor, &["scan_filters_and_order"][..]),
            (
                Flaw::ScanIgnoresTimes,
                &["scan_filters_and_order", "scan_sparse_matches"][..],
            ),
            (Flaw::CountIgnoresDeletes, &["counts"][..]),
        ];
        for (flaw, failing) in cases {
            let run = tokio::spawn(check_store(move || async move {
                Flawed {
                    inner: MemoryTaskStore::new(),
                    flaw,
                }
            }));
            let Err(error) = run.await else {
                panic!("the suite passed a store with {flaw:?}");
            };
            let message = *error.into_panic().downcast::<String>().expect("a message");
            assert!(
                message.contains(&format!("failed {} of 18 checks", failing.len())),
                "{flaw:?}: {message}"
            );
            for check in failing {
                assert!(
                    message.contains(&format!("`{check}`:")),
                    "{flaw:?}: {message}"
                );
            }
        }
    }
}
