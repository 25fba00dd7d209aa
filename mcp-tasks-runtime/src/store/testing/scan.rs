//! The suite's checks of [`ScanTasks`]: listing across owners with filters and cursors, and
//! counts by status and tool.

use super::{Outcome, Step, at, create_all, sample_record};
use crate::store::{ScanTasks, TaskFilter, TaskStore};
use crate::task::{TaskRecord, TaskStatus};
use std::collections::BTreeSet;
use std::time::Duration;

/// A task of `tool` and `owner` in `status`, created `secs` after the origin.
fn task(id: &str, owner: Option<&str>, tool: &str, status: TaskStatus, secs: u64) -> TaskRecord {
    let mut record = sample_record(id, owner, at(secs));
    record.tool = tool.to_owned();
    record.status = status;
    record
}

/// Every page of `filter`, `limit` at a time: the ids in order, and the number of calls.
pub(super) async fn scan_all<S: ScanTasks>(
    store: &S,
    filter: &TaskFilter,
    limit: usize,
) -> Result<(Vec<String>, usize), String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    let mut calls = 0;
    loop {
        calls += 1;
        if calls > 10_000 {
            return Err(format!("scan({filter:?}) did not end after 10,000 pages"));
        }
        let page = store
            .scan(filter, cursor.as_deref(), limit)
            .await
            .step(&format!("scan({filter:?}, {cursor:?}, {limit})"))?;
        if page.tasks.len() > limit {
            return Err(format!(
                "scan returned {} tasks for a limit of {limit}",
                page.tasks.len()
            ));
        }
        for record in &page.tasks {
            if !filter.matches(record) {
                return Err(format!(
                    "scan({filter:?}) returned {record:?}, which does not match"
                ));
            }
        }
        ids.extend(page.tasks.into_iter().map(|t| t.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok((ids, calls)),
        }
    }
}

fn strings(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| (*id).to_owned()).collect()
}

/// Filters by status, tool, owner and time; newest first; pages that meet end to end.
pub(super) async fn scan_filters_and_order<S: TaskStore + ScanTasks>(store: S) -> Outcome {
    use TaskStatus::{Cancelled, Completed, Failed, InputRequired, Working};
    let tasks = [
        task("a", Some("principal:ann"), "render", Working, 1),
        task("b", None, "render", Completed, 2),
        task("c", Some("principal:bob"), "mail", Failed, 3),
        task("d", Some("principal:ann"), "mail", InputRequired, 4),
        task("e", Some("session:s1"), "render", Failed, 5),
        task("f", None, "charge", Cancelled, 6),
        task("g", Some("principal:bob"), "render", Working, 7),
    ];
    create_all(&store, &tasks).await?;
    let cases: Vec<(TaskFilter, Vec<&str>)> = vec![
        (TaskFilter::new(), vec!["g", "f", "e", "d", "c", "b", "a"]),
        (TaskFilter::new().status(Working), vec!["g", "a"]),
        (
            TaskFilter::new().status(Failed).status(Completed),
            vec!["e", "c", "b"],
        ),
        (TaskFilter::new().tool("render"), vec!["g", "e", "b", "a"]),
        (TaskFilter::new().tool("render").status(Failed), vec!["e"]),
        (TaskFilter::new().owner("principal:ann"), vec!["d", "a"]),
        (
            TaskFilter::new().owner("principal:bob").status(Working),
            vec!["g"],
        ),
        (TaskFilter::new().tool("nothing"), vec![]),
        (TaskFilter::new().owner("principal:nobody"), vec![]),
        (
            TaskFilter::new().created_after(at(3)).created_before(at(6)),
            vec!["e", "d", "c"],
        ),
        (
            TaskFilter::new().status(Working).created_after(at(2)),
            vec!["g"],
        ),
        (TaskFilter::new().updated_before(at(2)), vec!["a"]),
    ];
    for (filter, want) in &cases {
        for limit in [1, 2, 100] {
            let (got, _) = scan_all(&store, filter, limit).await?;
            if got != strings(want) {
                return Err(format!(
                    "scan({filter:?}) {limit} at a time\n   got: {got:?}\n  want: {want:?}"
                ));
            }
        }
    }

    // A status change moves the task between the statuses' listings.
    let mut d = store
        .get("d")
        .await
        .step("get(\"d\")")?
        .ok_or("d is gone")?;
    let version = d.version;
    d.status = Completed;
    ensure!(
        store
            .compare_and_set(d, version)
            .await
            .step("compare_and_set")?,
        "compare_and_set of d lost"
    );
    let (waiting, _) = scan_all(&store, &TaskFilter::new().status(InputRequired), 10).await?;
    ensure_eq!(
        waiting,
        Vec::<String>::new(),
        "d still listed as input_required"
    );
    let (done, _) = scan_all(&store, &TaskFilter::new().status(Completed), 10).await?;
    ensure_eq!(done, strings(&["d", "b"]), "completed after d finished");

    // A deleted task is listed no more.
    ensure!(
        store.delete("g").await.step("delete")?,
        "delete(g) found nothing"
    );
    let (all, _) = scan_all(&store, &TaskFilter::new(), 3).await?;
    ensure_eq!(
        all,
        strings(&["f", "e", "d", "c", "b", "a"]),
        "after deleting g"
    );

    // A cursor the store did not make is refused.
    let bad = store
        .scan(&TaskFilter::new(), Some("not a cursor"), 10)
        .await;
    ensure!(
        matches!(bad, Err(crate::store::StoreError::InvalidCursor(_))),
        "a made-up cursor gave {bad:?}"
    );
    // A limit of 0 lists nothing.
    let empty = store
        .scan(&TaskFilter::new(), None, 0)
        .await
        .step("scan(limit 0)")?;
    ensure!(empty.tasks.is_empty(), "a limit of 0 listed tasks");
    Ok(())
}

/// Many tasks that the index reads but the filter leaves out: every call stays bounded, and
/// the pages still hold every match exactly once, newest first.
pub(super) async fn scan_sparse_matches<S: TaskStore + ScanTasks>(store: S) -> Outcome {
    let mut records = Vec::new();
    let mut want = Vec::new();
    for n in 0..3000u64 {
        let id = format!("t{n:05}");
        let mut record = task(&id, None, "bulk", TaskStatus::Completed, n);
        // One in 500 was written in the window the filter asks for.
        if n % 500 == 7 {
            record.updated_at = at(100_000) + Duration::from_secs(n);
            want.push(id.clone());
        }
        records.push(record);
    }
    create_all(&store, &records).await?;
    want.reverse();
    let filter = TaskFilter::new()
        .status(TaskStatus::Completed)
        .updated_after(at(100_000));
    let (got, calls) = scan_all(&store, &filter, 10).await?;
    ensure_eq!(got, want, "the sparse matches, newest first");
    ensure!(calls >= 1, "no call made");
    let distinct: BTreeSet<&String> = got.iter().collect();
    ensure_eq!(distinct.len(), got.len(), "a task listed twice");
    Ok(())
}

/// Counts by status and tool follow creates, status changes and deletes.
pub(super) async fn counts<S: TaskStore + ScanTasks>(store: S) -> Outcome {
    use TaskStatus::{Completed, Failed, Working};
    let empty = store.count().await.step("count")?;
    ensure_eq!(empty.total(), 0, "an empty store's count");
    let tasks = [
        task("a", None, "render", Working, 1),
        task("b", Some("principal:ann"), "render", Working, 2),
        task("c", None, "render", Failed, 3),
        task("d", Some("principal:bob"), "mail", Working, 4),
    ];
    create_all(&store, &tasks).await?;
    let mut b = store
        .get("b")
        .await
        .step("get(\"b\")")?
        .ok_or("b is gone")?;
    let version = b.version;
    b.status = Completed;
    ensure!(
        store
            .compare_and_set(b, version)
            .await
            .step("compare_and_set")?,
        "compare_and_set of b lost"
    );
    ensure!(
        store.delete("c").await.step("delete")?,
        "delete(c) found nothing"
    );
    let counts = store.count().await.step("count")?;
    let got: Vec<(TaskStatus, String, u64)> = counts
        .by_status_and_tool
        .iter()
        .map(|((s, t), n)| (*s, t.clone(), *n))
        .collect();
    ensure_eq!(
        got,
        vec![
            (Working, "mail".to_owned(), 1),
            (Working, "render".to_owned(), 1),
            (Completed, "render".to_owned(), 1),
        ],
        "counts after a status change and a delete"
    );
    ensure_eq!(counts.total(), 3, "total");
    ensure_eq!(counts.of_status(Working), 2, "working");
    ensure_eq!(counts.of_tool("render"), 2, "render");
    Ok(())
}
