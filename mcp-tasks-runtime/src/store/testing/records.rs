//! The suite's checks of single tasks: create and get, compare-and-set (also concurrent),
//! every field's round trip, and delete.

use super::{
    Outcome, Step, at, create_all, ensure_same, expire_ids, get_some, list_ids, sample_record,
    settle,
};
use crate::error::CallOutcome;
use crate::jsonrpc::ErrorObject;
use crate::model::{CallToolResult, Content, InputRequest};
use crate::store::{StoreError, TaskStore};
use crate::task::{CancelRequest, Lease, SettlePolicy, TaskRecord, TaskStatus};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Create then get returns an equal record; unknown ids are `None`; a duplicate id is refused.
pub(super) async fn create_then_get<S: TaskStore>(store: S) -> Outcome {
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
pub(super) async fn compare_and_set<S: TaskStore>(store: S) -> Outcome {
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
    done.outcome = Some(Box::new(CallOutcome::Result(CallToolResult::success(
        vec![Content::text("done")],
    ))));
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
pub(super) async fn concurrent_compare_and_set<S: TaskStore>(store: S) -> Outcome {
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
pub(super) fn full_record(id: &str) -> TaskRecord {
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
    record.outcome = Some(Box::new(CallOutcome::Result(CallToolResult {
        content: vec![
            Content::text("the answer"),
            Content::image("aGVsbG8=", "image/png"),
            Content::resource_link("file:///tmp/report.md", "report"),
        ],
        structured_content: Some(json!({ "total": 3, "items": ["a", "b"] })),
        is_error: false,
    })));
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
    record.cancel_requested = Some(Box::new(CancelRequest {
        at: at(8),
        by: Some("principal:alice".into()),
    }));
    record.version = 12;
    record
}

/// Every field survives create and compare-and-set, including clearing optional fields.
pub(super) async fn fields_round_trip<S: TaskStore>(store: S) -> Outcome {
    let full = full_record("full");

    let mut error_with_data = sample_record("error-with-data", Some("bob"), at(1));
    error_with_data.status = TaskStatus::Failed;
    error_with_data.outcome = Some(Box::new(CallOutcome::Error(
        ErrorObject::new(-32602, "bad argument `n`")
            .with_data(json!({ "field": "n", "codes": [1, 2], "nested": { "ok": false } })),
    )));

    let mut error_without_data = sample_record("error-without-data", None, at(2));
    error_without_data.status = TaskStatus::Failed;
    error_without_data.outcome = Some(Box::new(CallOutcome::Error(ErrorObject::new(
        -32603,
        "internal error",
    ))));

    let mut tool_error = sample_record("tool-error", None, at(3));
    tool_error.status = TaskStatus::Completed;
    tool_error.outcome = Some(Box::new(CallOutcome::Result(CallToolResult::error_text(
        "nope",
    ))));

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
pub(super) async fn delete<S: TaskStore>(store: S) -> Outcome {
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
