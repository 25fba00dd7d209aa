//! The suite's checks of an owner's listing, expiry and the unfinished scan.

use super::{
    Outcome, Step, at, create_all, ensure_same, expire_ids, get_some, id_set, list_ids,
    sample_record,
};
use crate::store::{StoreError, TaskStore};
use crate::task::{TaskRecord, TaskStatus};
use std::collections::BTreeSet;
use std::time::Duration;

/// Owners see only their own tasks, oldest first.
pub(super) async fn list_scoping_and_order<S: TaskStore>(store: S) -> Outcome {
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
pub(super) async fn list_pagination<S: TaskStore>(store: S) -> Outcome {
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
pub(super) async fn expire<S: TaskStore>(store: S) -> Outcome {
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
pub(super) async fn expire_follows_ttl_changes<S: TaskStore>(store: S) -> Outcome {
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
pub(super) async fn unfinished<S: TaskStore>(store: S) -> Outcome {
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
