//! The suite's checks of the record fields a tool's durable work needs: step outputs, unique
//! keys and the records of synchronous calls.

use super::scan::scan_all;
use super::{Outcome, Step, at, create_all, ensure_same, get_some, list_ids, sample_record};
use crate::store::{ScanTasks, StoreError, TaskFilter, TaskStore};
use crate::task::{TaskRecord, TaskStatus};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// A `working` task of `owner` holding the unique key `key`, created `secs` after the origin.
fn keyed(id: &str, key: Option<&str>, secs: u64) -> TaskRecord {
    let mut record = sample_record(id, Some("alice"), at(secs));
    record.unique_key = key.map(str::to_owned);
    record
}

/// Writes `change` over the stored task `id` and checks the write landed.
async fn update<S: TaskStore>(
    store: &S,
    id: &str,
    change: impl FnOnce(&mut TaskRecord),
) -> Result<TaskRecord, String> {
    let mut record = get_some(store, id).await?;
    let version = record.version;
    change(&mut record);
    let written = store
        .compare_and_set(record.clone(), version)
        .await
        .step(&format!("compare_and_set({id:?})"))?;
    ensure!(
        written,
        "compare_and_set({id:?}) at the stored version failed"
    );
    record.version = version + 1;
    Ok(record)
}

/// Creates `record` and checks the store refuses it as `want`, storing nothing.
async fn refused<S: TaskStore>(store: &S, record: TaskRecord, want: StoreError) -> Outcome {
    let id = record.id.clone();
    let got = store.create(record).await;
    ensure_eq!(got, Err(want.clone()), "create({id:?})");
    if let StoreError::Taken(_) = want {
        let stored = store.get(&id).await.step(&format!("get({id:?})"))?;
        ensure!(
            stored.is_none(),
            "a create refused as taken stored the task {id:?}"
        );
    }
    Ok(())
}

/// Steps (nested JSON), the unique key and the synchronous mark survive create, get,
/// compare-and-set and list.
pub(super) async fn durable_fields_round_trip<S: TaskStore>(store: S) -> Outcome {
    let mut first = keyed("d1", Some("report:1"), 1);
    first.steps.insert(
        "fetch".into(),
        json!({"rows": [1, 2, {"nested": [true, null, "x"]}], "total": 1.5}),
    );
    first.steps.insert("empty".into(), json!({}));
    first
        .steps
        .insert("note".into(), json!("text with \"quotes\""));
    let mut second = sample_record("d2", Some("alice"), at(2));
    second.synchronous = true;
    second.steps.insert("only".into(), json!([null]));
    create_all(&store, &[first.clone(), second.clone()]).await?;
    ensure_same(&get_some(&store, "d1").await?, &first, "d1 after create")?;
    ensure_same(&get_some(&store, "d2").await?, &second, "d2 after create")?;

    let first = update(&store, "d1", |r| {
        r.steps
            .insert("send".into(), json!({"id": "m-1", "at": [2030, 1]}));
        r.steps.remove("empty");
        r.unique_key = Some("report:2".into());
        r.status = TaskStatus::InputRequired;
    })
    .await?;
    ensure_same(&get_some(&store, "d1").await?, &first, "d1 after a write")?;
    let second = update(&store, "d2", |r| {
        r.steps
            .insert("later".into(), json!({"deep": {"deeper": [1, [2, [3]]]}}));
        r.status = TaskStatus::Completed;
    })
    .await?;
    ensure_same(&get_some(&store, "d2").await?, &second, "d2 after a write")?;

    let page = store.list(Some("alice"), None, 10).await.step("list")?;
    ensure_eq!(page.tasks.len(), 1, "alice's listing (d2 is synchronous)");
    ensure_same(&page.tasks[0], &first, "d1 as listed")?;

    let first = update(&store, "d1", |r| {
        r.unique_key = None;
        r.steps.clear();
    })
    .await?;
    ensure_same(&get_some(&store, "d1").await?, &first, "d1 without a key")?;
    Ok(())
}

/// An unfinished task's unique key refuses a second one as taken, naming the holder, until
/// the holder is terminal, deleted or expired; a duplicate id is refused as a duplicate.
pub(super) async fn unique_keys<S: TaskStore>(store: S) -> Outcome {
    store
        .create(keyed("u1", Some("k"), 1))
        .await
        .step("create")?;
    refused(
        &store,
        keyed("u2", Some("k"), 2),
        StoreError::Taken("u1".into()),
    )
    .await?;
    refused(
        &store,
        keyed("u1", Some("k"), 2),
        StoreError::Duplicate("u1".into()),
    )
    .await?;
    refused(
        &store,
        keyed("u1", Some("x"), 2),
        StoreError::Duplicate("u1".into()),
    )
    .await?;
    let others = [
        keyed("u3", Some("other"), 3),
        keyed("u4", None, 4),
        keyed("u5", None, 5),
        keyed("u6", Some("K"), 6),
    ];
    create_all(&store, &others).await?;
    ensure_eq!(
        get_some(&store, "u1").await?.unique_key.as_deref(),
        Some("k"),
        "the holder's key"
    );

    // A write that would give a held key to a second unfinished task does not land.
    let mut thief = get_some(&store, "u4").await?;
    let version = thief.version;
    thief.unique_key = Some("k".into());
    let stole = store.compare_and_set(thief, version).await;
    ensure!(
        !matches!(stole, Ok(true)),
        "a write gave u1's unique key to u4: {stole:?}"
    );
    let kept = get_some(&store, "u4").await?;
    ensure_eq!(
        (kept.unique_key, kept.version),
        (None, version),
        "u4 after the refused write"
    );
    refused(
        &store,
        keyed("u2", Some("k"), 2),
        StoreError::Taken("u1".into()),
    )
    .await?;

    // An input-required holder still holds its key; a write that keeps it unfinished too.
    update(&store, "u1", |r| r.status = TaskStatus::InputRequired).await?;
    refused(
        &store,
        keyed("u2", Some("k"), 2),
        StoreError::Taken("u1".into()),
    )
    .await?;
    update(&store, "u1", |r| r.status = TaskStatus::Working).await?;
    refused(
        &store,
        keyed("u2", Some("k"), 2),
        StoreError::Taken("u1".into()),
    )
    .await?;

    // Freed when the holder becomes terminal.
    update(&store, "u1", |r| {
        r.status = TaskStatus::Completed;
        r.ttl = Some(Duration::from_secs(10));
    })
    .await?;
    store
        .create(keyed("u7", Some("k"), 7))
        .await
        .step("create(u7) after u1 completed")?;
    refused(
        &store,
        keyed("u8", Some("k"), 8),
        StoreError::Taken("u7".into()),
    )
    .await?;

    // Freed when the holder is deleted.
    ensure!(
        store.delete("u7").await.step("delete")?,
        "u7 was not deleted"
    );
    store
        .create(keyed("u8", Some("k"), 8))
        .await
        .step("create(u8) after u7 was deleted")?;

    // Expiring a terminal task of the same key leaves the new holder's hold alone.
    let expired = store.expire(at(100), 10).await.step("expire")?;
    ensure_eq!(expired, vec!["u1".to_owned()], "the expired tasks");
    refused(
        &store,
        keyed("u9", Some("k"), 9),
        StoreError::Taken("u8".into()),
    )
    .await?;

    // Freed when the holder, made terminal, expires.
    update(&store, "u8", |r| {
        r.status = TaskStatus::Failed;
        r.ttl = Some(Duration::from_secs(1));
    })
    .await?;
    store
        .create(keyed("u9", Some("k"), 9))
        .await
        .step("create(u9) after u8 failed")?;
    update(&store, "u9", |r| r.status = TaskStatus::Cancelled).await?;
    // Two terminal tasks share the key; a write to one of them takes nothing.
    update(&store, "u8", |r| r.status_message = Some("kept".into())).await?;
    store
        .create(keyed("u10", Some("k"), 10))
        .await
        .step("create(u10)")?;
    update(&store, "u9", |r| r.status_message = Some("kept".into())).await?;
    refused(
        &store,
        keyed("u11", Some("k"), 11),
        StoreError::Taken("u10".into()),
    )
    .await?;
    let expired = store.expire(at(200), 10).await.step("expire")?;
    ensure_eq!(expired, vec!["u8".to_owned()], "the expired tasks");
    refused(
        &store,
        keyed("u11", Some("k"), 11),
        StoreError::Taken("u10".into()),
    )
    .await?;
    update(&store, "u10", |r| {
        r.status = TaskStatus::Completed;
        r.ttl = Some(Duration::from_secs(1));
    })
    .await?;
    let expired = store.expire(at(300), 10).await.step("expire")?;
    ensure_eq!(expired, vec!["u10".to_owned()], "the expired tasks");
    store
        .create(keyed("u11", Some("k"), 11))
        .await
        .step("create(u11) after u10 expired")?;

    // Keys of other tasks never conflicted.
    for id in ["u3", "u4", "u5", "u6"] {
        get_some(&store, id).await?;
    }
    store
        .create(keyed("u12", None, 12))
        .await
        .step("create(u12) without a key")?;
    Ok(())
}

/// Records of synchronous calls are left out of the owner listing and of every listing and
/// count across owners, with pages still full; `get` and `unfinished` find them.
pub(super) async fn synchronous_records_are_not_listed<S: TaskStore + ScanTasks>(
    store: S,
) -> Outcome {
    let task = |id: &str, owner: Option<&str>, tool: &str, status, secs, synchronous| {
        let mut record = sample_record(id, owner, at(secs));
        record.tool = tool.to_owned();
        record.status = status;
        record.synchronous = synchronous;
        record
    };
    use TaskStatus::{Completed, Failed, Working};
    let records = [
        task("t1", Some("alice"), "render", Working, 1, false),
        task("s1", Some("alice"), "render", Working, 2, true),
        task("s2", None, "render", Completed, 3, true),
        task("t2", None, "render", Completed, 4, false),
        task("s3", Some("alice"), "mail", Failed, 5, true),
        task("s4", Some("alice"), "mail", Working, 6, true),
        task("t3", Some("alice"), "mail", Working, 7, false),
    ];
    create_all(&store, &records).await?;

    let (ids, _) = list_ids(&store, Some("alice"), None, 10).await?;
    ensure_eq!(ids, ["t1", "t3"], "alice's listing");
    let (ids, _) = list_ids(&store, None, None, 10).await?;
    ensure_eq!(ids, ["t2"], "the unowned listing");
    let (ids, cursor) = list_ids(&store, Some("alice"), None, 1).await?;
    ensure_eq!(ids, ["t1"], "alice's first page of one");
    let (ids, _) = list_ids(&store, Some("alice"), cursor.as_deref(), 1).await?;
    ensure_eq!(ids, ["t3"], "alice's second page of one (full)");

    let cases = [
        (TaskFilter::new(), vec!["t3", "t2", "t1"]),
        (TaskFilter::new().tool("render"), vec!["t2", "t1"]),
        (TaskFilter::new().owner("alice"), vec!["t3", "t1"]),
        (TaskFilter::new().status(Failed), vec![]),
        (TaskFilter::new().status(Working), vec!["t3", "t1"]),
    ];
    for (filter, want) in cases {
        let (ids, calls) = scan_all(&store, &filter, 1).await?;
        ensure_eq!(ids, want, "scan({filter:?})");
        ensure!(
            calls <= want.len() + 1,
            "scan({filter:?}) took {calls} pages of one for {} tasks",
            want.len()
        );
    }
    let counts = store.count().await.step("count")?;
    ensure_eq!(counts.total(), 3, "the count of tasks ({counts:?})");
    ensure_eq!(counts.of_status(Working), 2, "working tasks ({counts:?})");
    ensure_eq!(counts.of_status(Failed), 0, "failed tasks ({counts:?})");
    ensure_eq!(counts.of_tool("mail"), 1, "mail tasks ({counts:?})");

    for record in &records {
        ensure_same(&get_some(&store, &record.id).await?, record, "get")?;
    }
    let mut unfinished: Vec<String> = store
        .unfinished()
        .await
        .step("unfinished")?
        .into_iter()
        .map(|r| r.id)
        .collect();
    unfinished.sort();
    ensure_eq!(unfinished, ["s1", "s4", "t1", "t3"], "the unfinished tasks");

    // Still left out once written.
    update(&store, "s1", |r| r.status = Completed).await?;
    let (ids, _) = list_ids(&store, Some("alice"), None, 10).await?;
    ensure_eq!(ids, ["t1", "t3"], "alice's listing after a write");
    let counts = store.count().await.step("count")?;
    ensure_eq!(counts.total(), 3, "the count after a write ({counts:?})");
    ensure!(
        store.delete("s2").await.step("delete")?,
        "s2 was not deleted"
    );
    let counts = store.count().await.step("count")?;
    ensure_eq!(counts.total(), 3, "the count after a delete ({counts:?})");
    Ok(())
}

/// Checks two handles `a` and `b` on one shared store (two processes, in effect): many
/// concurrent creates of distinct ids with one unique key, from both, store exactly one
/// task, and every other create is refused as taken, naming that task. Runs a few rounds,
/// each with its own key, then one more with a key whose holder became terminal. Panics on
/// failure.
pub async fn check_unique_race<S: TaskStore>(a: Arc<S>, b: Arc<S>) {
    const EACH: usize = 12;
    for round in 0..4 {
        let key = if round == 3 {
            "race-0".to_owned()
        } else {
            format!("race-{round}")
        };
        let mut creates = tokio::task::JoinSet::new();
        for n in 0..EACH * 2 {
            let store = Arc::clone(if n % 2 == 0 { &a } else { &b });
            let mut record = sample_record(&format!("race-{round}-{n}"), None, at(n as u64));
            record.unique_key = Some(key.clone());
            creates.spawn(async move {
                let id = record.id.clone();
                (id, store.create(record).await)
            });
        }
        let mut won = Vec::new();
        let mut taken = Vec::new();
        while let Some(joined) = creates.join_next().await {
            let (id, result) = joined.expect("a create panicked");
            match result {
                Ok(()) => won.push(id),
                Err(StoreError::Taken(holder)) => taken.push((id, holder)),
                Err(error) => panic!("create({id:?}) failed: {error}"),
            }
        }
        assert_eq!(won.len(), 1, "round {round}: creates that won: {won:?}");
        let winner = &won[0];
        for (id, holder) in &taken {
            assert_eq!(
                holder, winner,
                "round {round}: {id} was refused naming another"
            );
            assert!(
                a.get(id).await.expect("get").is_none(),
                "round {round}: {id} was refused and stored"
            );
        }
        let mut record = b.get(winner).await.expect("get").expect("the winner");
        assert_eq!(record.unique_key.as_deref(), Some(key.as_str()));
        if round == 0 {
            let version = record.version;
            record.status = TaskStatus::Completed;
            assert!(
                a.compare_and_set(record, version).await.expect("cas"),
                "the winner's write"
            );
        }
    }
}
