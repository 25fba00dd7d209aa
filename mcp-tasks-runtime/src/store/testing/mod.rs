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
//! The suite needs nothing but the store traits. What the tests of a store on a server
//! open comes with that store's feature: `store::TestDatabase` (PostgreSQL),
//! `store::TestRedis` and `store::RedisServer` (Redis).
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
//! - `steps`, `unique_key` and `synchronous` survive every write and read. While a task is
//!   unfinished, `create` refuses another task with its unique key as
//!   [`StoreError::Taken`] (a duplicate id is [`StoreError::Duplicate`] first); the key is
//!   free again once its holder is terminal, deleted or expired. [`check_unique_race`]
//!   checks the refusal holds between two handles on one store.
//! - Records of synchronous calls are found by `get` and `unfinished` but left out of `list`
//!   and of every listing and count of [`ScanTasks`].

use super::{ClaimStore, ScanTasks, StoreError, TaskStore};
use crate::model::JsonObject;
use crate::task::{SettlePolicy, TaskRecord, TaskStatus};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A plain task for tests: `working` and queued (no lease), tool `sample` with arguments
/// `{"n": 1}`, settled `completed` by an error result, no TTL, a one-second poll interval,
/// `updated_at` equal to `created_at`, nothing else set and version 0. An owner `principal:NAME`
/// comes with the principal NAME (scopes, client and issuer), which a store must keep. Every
/// record carries a trace context and one status change in its history, which a store must
/// keep too.
pub fn sample_record(id: &str, owner: Option<&str>, created_at: SystemTime) -> TaskRecord {
    let mut arguments = JsonObject::new();
    arguments.insert("n".into(), json!(1));
    TaskRecord {
        id: id.to_owned(),
        owner: owner.map(str::to_owned),
        // A principal's task keeps who asked: every store must give it back.
        principal: owner
            .and_then(|o| o.strip_prefix("principal:"))
            .map(|subject| {
                Arc::new(
                    crate::principal::Principal::new(subject)
                        .with_scopes(["reports:read", "reports:write"])
                        .with_client_id("cli")
                        .with_issuer("https://id.example"),
                )
            }),
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
        steps: BTreeMap::new(),
        unique_key: None,
        synchronous: false,
        history: vec![crate::task::StatusChange {
            status: TaskStatus::Working,
            // Stores keep milliseconds.
            at: UNIX_EPOCH + Duration::from_millis(1_800_000_000_005),
            message: Some("started".into()),
            epoch: 1,
            process: Some("worker-a".into()),
        }],
        trace: crate::task::TraceContext::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("vendor=opaque"),
            None,
        )
        .map(Arc::new),
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

/// Checks that `store` comes back after its server went away: reads the stored task `id`
/// until it is found, each read answering (with the task or an error) within `bound`, and
/// panics when it is not found by `deadline`. For stores on a server, in tests that cut
/// their connections.
pub async fn check_recovers<S: TaskStore>(store: &S, id: &str, bound: Duration, deadline: Instant) {
    loop {
        let started = Instant::now();
        let got = store.get(id).await;
        assert!(started.elapsed() < bound, "a get hung");
        if let Ok(Some(_)) = got {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the store did not recover: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
        durable_fields_round_trip,
        unique_keys,
        synchronous_records_are_not_listed,
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

mod claims;
#[cfg(test)]
pub(crate) mod flawed;
mod listing;
mod records;
mod scan;
mod unique;

pub use unique::check_unique_race;

use claims::{changes_feed, claims, concurrent_claims, fenced_writes, lapsed_leases};
use listing::{
    expire, expire_follows_ttl_changes, list_pagination, list_scoping_and_order, unfinished,
};
use records::{
    compare_and_set, concurrent_compare_and_set, create_then_get, delete, fields_round_trip,
};
use scan::{counts, scan_filters_and_order, scan_sparse_matches};
use unique::{durable_fields_round_trip, synchronous_records_are_not_listed, unique_keys};

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
