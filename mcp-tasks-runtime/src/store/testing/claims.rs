//! The suite's checks of [`ClaimStore`]: claims and leases, the lapsed-lease scan, fenced
//! writes and the change feed.

use super::{Outcome, Step, at, create_all, ensure_same, get_some, id_set, sample_record};
use crate::store::{ClaimStore, StoreError, TaskStore};
use crate::task::{Lease, TaskRecord, TaskStatus};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::SystemTime;

pub(super) fn leased(mut record: TaskRecord, worker: &str, until: SystemTime) -> TaskRecord {
    record.lease = Some(Lease {
        worker: worker.into(),
        until,
    });
    record.epoch = 1;
    record
}

/// Claims take queued tasks oldest first, skip tools, and lease what they return.
pub(super) async fn claims<S: TaskStore + ClaimStore>(store: S) -> Outcome {
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
pub(super) async fn concurrent_claims<S: TaskStore + ClaimStore>(store: S) -> Outcome {
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
pub(super) async fn lapsed_leases<S: TaskStore + ClaimStore>(store: S) -> Outcome {
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
pub(super) async fn fenced_writes<S: TaskStore + ClaimStore>(store: S) -> Outcome {
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
pub(super) async fn changes_feed<S: TaskStore + ClaimStore>(store: S) -> Outcome {
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
