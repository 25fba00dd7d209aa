use super::row::json_has_nul;
use super::testing::TestDatabase;
use super::*;
use crate::store::testing::{check_recovers, check_store, sample_record};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, UNIX_EPOCH};

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

fn fresh_schema() -> String {
    format!("suite_{}", SCHEMAS.fetch_add(1, Ordering::Relaxed))
}

async fn open(db: &TestDatabase, schema: impl Into<String>) -> PostgresTaskStore {
    PostgresTaskStore::connect_with(
        &db.url(),
        PostgresOptions::default()
            .schema(schema)
            .pool_size(4)
            .timeout(Duration::from_secs(5)),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot open the test store: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_passes_the_suite() {
    let Some(db) = TestDatabase::create("suite") else {
        return;
    };
    check_store(|| open(&db, fresh_schema())).await;
}

#[tokio::test]
async fn postgres_store_passes_the_suite_on_one_thread() {
    let Some(db) = TestDatabase::create("suite1") else {
        return;
    };
    check_store(|| open(&db, fresh_schema())).await;
}

#[test]
fn nul_escapes_are_found_exactly() {
    assert!(json_has_nul(r#"{"a":"x\u0000y"}"#));
    assert!(json_has_nul(r#"{"a":"\\\u0000"}"#));
    assert!(!json_has_nul(r#"{"a":"\\u0000"}"#));
    assert!(!json_has_nul(r#"{"a":"\\\\u0000"}"#));
    assert!(!json_has_nul(r#"{"a":"u0000"}"#));
}

#[test]
fn schema_names_are_checked() {
    for good in ["mcp_tasks", "_x", "a1_b2"] {
        assert!(check_schema_name(good).is_ok(), "{good}");
    }
    for bad in ["", "1a", "A", "a-b", "a b", "a\"b", "pg_x", &"a".repeat(41)] {
        assert!(check_schema_name(bad).is_err(), "{bad:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_is_refused_clearly_and_changes_nothing() {
    let Some(db) = TestDatabase::create("nul") else {
        return;
    };
    let store = open(&db, "nul").await;
    let now = SystemTime::now();
    let mut record = sample_record("nul", None, now);
    record.status_message = Some("a\0b".into());
    let error = store.create(record).await.unwrap_err().to_string();
    assert!(error.contains("NUL"), "{error}");
    let mut record = sample_record("nul", None, now);
    record
        .arguments
        .insert("x".into(), Value::String("\0".into()));
    assert!(store.create(record).await.is_err());
    assert_eq!(store.get("nul").await.unwrap(), None);
    // Creates batched with a refused one are unaffected.
    store.create(sample_record("ok", None, now)).await.unwrap();
    assert!(store.get("ok").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_batch_and_each_is_committed_once() {
    let Some(db) = TestDatabase::create("batch") else {
        return;
    };
    let store = Arc::new(open(&db, "batch").await);
    let now = SystemTime::now();
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..400u32 {
        let store = Arc::clone(&store);
        // Every id twice: exactly one of each pair wins.
        let id = format!("t{}", n / 2);
        calls.spawn(async move { store.create(sample_record(&id, None, now)).await });
    }
    let (mut ok, mut duplicate) = (0, 0);
    while let Some(joined) = calls.join_next().await {
        match joined.unwrap() {
            Ok(()) => ok += 1,
            Err(StoreError::Duplicate(_)) => duplicate += 1,
            Err(e) => panic!("a create failed: {e}"),
        }
    }
    assert_eq!((ok, duplicate), (200, 200));
    let page = store.list(None, None, 1000).await.unwrap();
    assert_eq!(page.tasks.len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_compare_and_sets_batch_and_each_gets_its_own_answer() {
    let Some(db) = TestDatabase::create("setbatch") else {
        return;
    };
    let store = Arc::new(open(&db, "setbatch").await);
    let now = SystemTime::now();
    for n in 0..100u32 {
        let mut record = sample_record(&format!("t{n}"), None, now);
        if n == 8 {
            record.unique_key = Some("k".into());
        }
        store.create(record).await.unwrap();
    }
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..400u32 {
        let store = Arc::clone(&store);
        // Four writes of each task expecting version 0: exactly one of them wins. The
        // writes of t7 take the unique key t8 keeps, which PostgreSQL refuses: those fail alone.
        let id = format!("t{}", n % 100);
        calls.spawn(async move {
            let mut record = sample_record(&id, None, now);
            record.status_message = Some(format!("write {n}"));
            if n % 100 == 7 || n % 100 == 8 {
                record.unique_key = Some("k".into());
            }
            (n, store.compare_and_set(record, 0).await)
        });
    }
    let mut won = std::collections::HashMap::new();
    while let Some(joined) = calls.join_next().await {
        match joined.unwrap() {
            (n, result) if n % 100 == 7 => assert!(result.is_err(), "a taken key was stored"),
            (n, Ok(true)) => assert!(won.insert(n % 100, n).is_none(), "two writes won"),
            (_, Ok(false)) => {}
            (n, Err(e)) => panic!("write {n} failed: {e}"),
        }
    }
    assert_eq!(won.len(), 99, "every other task was written once");
    assert_eq!(store.get("t7").await.unwrap().unwrap().version, 0);
    for (task, n) in won {
        let record = store.get(&format!("t{task}")).await.unwrap().unwrap();
        assert_eq!(record.version, 1);
        assert_eq!(record.status_message, Some(format!("write {n}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_gets_batch_and_each_caller_gets_the_task_it_asked_for() {
    let Some(db) = TestDatabase::create("getbatch") else {
        return;
    };
    let store = Arc::new(open(&db, "getbatch").await);
    let now = SystemTime::now();
    for n in 0..50u32 {
        let mut record = sample_record(&format!("t{n}"), None, now);
        record.status_message = Some(format!("message {n}"));
        store.create(record).await.unwrap();
    }
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..600u32 {
        let store = Arc::clone(&store);
        // Each id several times, and ten ids that do not exist.
        let id = format!("t{}", n % 60);
        calls.spawn(async move { (n % 60, store.get(&id).await) });
    }
    while let Some(joined) = calls.join_next().await {
        let (n, got) = joined.unwrap();
        let got = got.unwrap_or_else(|e| panic!("a get failed: {e}"));
        if n < 50 {
            let record = got.unwrap_or_else(|| panic!("t{n} was not found"));
            assert_eq!(record.id, format!("t{n}"));
            assert_eq!(record.status_message, Some(format!("message {n}")));
        } else {
            assert_eq!(got, None, "t{n} does not exist");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_share_tasks_claims_and_changes_and_wake_each_other() {
    let Some(db) = TestDatabase::create("two") else {
        return;
    };
    let a = open(&db, "two").await;
    let b = open(&db, "two").await;
    crate::store::testing::check_shared_stores(&a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_catches_up_after_its_connection_is_killed() {
    let Some(db) = TestDatabase::create("catchup") else {
        return;
    };
    let a = open(&db, "catchup").await;
    let b = open(&db, "catchup").await;
    let cursor = b.changes(None, 100).await.unwrap().cursor;
    // Kill b's listener (the only connection listening on b's sync channel), then write
    // while it is down.
    db.execute(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%{}%'",
        b.shared.sync_channel
    ))
    .await;
    a.create(sample_record("missed", None, SystemTime::now()))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    let mut cursor = cursor;
    while !seen.iter().any(|id| id == "missed") {
        assert!(Instant::now() < deadline, "the listener never caught up");
        if let Ok(got) = b.changes(Some(cursor), 100).await {
            cursor = got.cursor;
            seen.extend(got.ids);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_store_closes_its_connections() {
    let Some(db) = TestDatabase::create("drop") else {
        return;
    };
    let store = open(&db, "dropped").await;
    store
        .create(sample_record("x", None, SystemTime::now()))
        .await
        .unwrap();
    assert!(store.changes(None, 10).await.is_ok());
    drop(store);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (client, connection) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
        let driver = tokio::spawn(connection);
        let others: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        drop(client);
        let _ = driver.await;
        if others == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{others} connections still open after the store was dropped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_schema_refuse_a_taken_unique_key() {
    let Some(db) = TestDatabase::create("unique") else {
        return;
    };
    let a = Arc::new(open(&db, "unique").await);
    let b = Arc::new(open(&db, "unique").await);
    crate::store::testing::check_unique_race(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_schema_with_a_task_upgrades_to_durable_fields() {
    let Some(db) = TestDatabase::create("upgrade") else {
        return;
    };
    let old_schema: String = MIGRATIONS[..2]
        .iter()
        .map(|migration| migration.replace("{s}", "\"upgrade\""))
        .collect::<Vec<_>>()
        .join(";\n");
    db.execute(&format!(
        "CREATE SCHEMA upgrade; \
         CREATE TABLE upgrade.meta (key text PRIMARY KEY, value bigint NOT NULL); \
         INSERT INTO upgrade.meta (key, value) VALUES ('schema_version', 2); \
         {old_schema}; \
         INSERT INTO upgrade.tasks (id, owner, tool, settle, status, created_at, updated_at, \
            poll_interval_ms, version, input_seq, arguments, input_requests, input_responses, \
            client, epoch) \
         VALUES ('old', 'alice', 'sample', 'complete', 'working', 1800000000000, \
            1800000000000, 1000, 0, 0, '{{\"n\": 1}}', '{{}}', '{{}}', '{{}}', 0);"
    ))
    .await;
    // Two stores open at once: one migrates under the lock, the other then finds it done.
    let (a, b) = tokio::join!(open(&db, "upgrade"), open(&db, "upgrade"));
    let created = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut want = sample_record("old", Some("alice"), created);
    // Written before tasks kept a journal: no history, no trace.
    want.history.clear();
    want.trace = None;
    let old = b.get("old").await.unwrap().expect("the old task");
    assert_eq!(old, want);
    assert_eq!(a.list(Some("alice"), None, 10).await.unwrap().tasks, [want]);

    // The old task can take a key, and then holds it.
    let mut keyed = old;
    keyed.unique_key = Some("k".into());
    keyed
        .steps
        .insert("s".into(), serde_json::json!({"n": [1]}));
    assert!(a.compare_and_set(keyed.clone(), 0).await.unwrap());
    let mut second = sample_record("new", Some("alice"), created);
    second.unique_key = Some("k".into());
    assert_eq!(b.create(second).await, Err(StoreError::Taken("old".into())));
    keyed.version = 1;
    assert_eq!(b.get("old").await.unwrap(), Some(keyed));
    drop((a, b));
    let (client, connection) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
    let driver = tokio::spawn(connection);
    let version: i64 = client
        .query_one(
            "SELECT value FROM upgrade.meta WHERE key = 'schema_version'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, PostgresTaskStore::SCHEMA_VERSION);
    assert_eq!(version, 4);
    drop(client);
    let _ = driver.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_once_and_a_newer_schema_is_refused() {
    let Some(db) = TestDatabase::create("migrate") else {
        return;
    };
    let store = open(&db, "versions").await;
    store
        .create(sample_record("kept", None, SystemTime::now()))
        .await
        .unwrap();
    drop(store);
    // Opening again keeps the data.
    let store = open(&db, "versions").await;
    assert!(store.get("kept").await.unwrap().is_some());
    drop(store);
    db.execute("UPDATE versions.meta SET value = 99 WHERE key = 'schema_version'")
        .await;
    let error =
        PostgresTaskStore::connect_with(&db.url(), PostgresOptions::default().schema("versions"))
            .await
            .unwrap_err()
            .to_string();
    assert!(
        error.contains("schema version 99") || error.contains("version 99"),
        "{error}"
    );
    assert!(error.contains("newer version"), "{error}");
    // Another application's schema is refused too.
    db.execute("CREATE SCHEMA theirs; CREATE TABLE theirs.accounts (id int)")
        .await;
    let error =
        PostgresTaskStore::connect_with(&db.url(), PostgresOptions::default().schema("theirs"))
            .await
            .unwrap_err()
            .to_string();
    assert!(error.contains("another application"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_fails_at_connect_naming_the_problem() {
    let Some(db) = TestDatabase::create("config") else {
        return;
    };
    let quick = PostgresOptions::default().timeout(Duration::from_secs(3));
    let fails = |url: String, options: PostgresOptions| async move {
        PostgresTaskStore::connect_with(&url, options)
            .await
            .expect_err(&format!("connecting to {url} succeeded"))
            .to_string()
    };
    // Nothing listens on port 1.
    let error = fails(
        "postgres://postgres@127.0.0.1:1/postgres".into(),
        quick.clone(),
    )
    .await;
    assert!(error.contains("unreachable"), "{error}");
    let error = fails(db.url_for("no_such_role_here", "postgres"), quick.clone()).await;
    assert!(error.contains("credentials"), "{error}");
    let error = fails(
        db.url_for("postgres", "no_such_database_here"),
        quick.clone(),
    )
    .await;
    assert!(error.contains("database does not exist"), "{error}");
    let error = fails("mysql://what".into(), quick.clone()).await;
    assert!(error.contains("invalid PostgreSQL URL"), "{error}");
    let error = fails(db.url(), quick.clone().schema("Bad-Name")).await;
    assert!(error.contains("invalid schema name"), "{error}");
    // A role that may connect but not create anything.
    let role = format!("{}_weak", db.name());
    db.execute(&format!(
        "CREATE ROLE {role} LOGIN; REVOKE CREATE ON DATABASE {} FROM PUBLIC; \
         REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        db.name()
    ))
    .await;
    let error = fails(db.url_for(&role, &db.name()), quick.clone()).await;
    db.execute(&format!("DROP ROLE {role}")).await;
    assert!(error.contains("insufficient privileges"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_fail_in_bounded_time_while_connections_are_killed_then_recover() {
    let Some(db) = TestDatabase::create("outage") else {
        return;
    };
    let store = open(&db, "outage").await;
    store
        .create(sample_record("before", None, SystemTime::now()))
        .await
        .unwrap();
    db.terminate_connections().await;
    // Whatever each call answers, it answers within the timeout and the store
    // recovers without being reopened.
    let deadline = Instant::now() + Duration::from_secs(30);
    check_recovers(&store, "before", Duration::from_secs(12), deadline).await;
    store
        .create(sample_record("after", None, SystemTime::now()))
        .await
        .unwrap();
    let cursor = loop {
        match store.changes(None, 10).await {
            Ok(c) => break c.cursor,
            Err(_) => {
                assert!(Instant::now() < deadline, "the listener did not come back");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    store
        .create(sample_record("later", None, SystemTime::now()))
        .await
        .unwrap();
    let got = store.changes(Some(cursor), 10).await.unwrap();
    assert!(got.ids.contains(&"later".to_owned()), "{got:?}");
}

#[tokio::test]
async fn a_statement_the_database_refuses_keeps_its_error_as_the_source() {
    let Some(db) = TestDatabase::create("source") else {
        return;
    };
    let store = open(&db, "source").await;
    db.execute("ALTER TABLE source.tasks ADD CONSTRAINT no_refused CHECK (tool <> 'refused')")
        .await;
    let mut record = sample_record("r", None, SystemTime::now());
    record.tool = "refused".into();
    let error = store.create(record).await.unwrap_err();
    let StoreError::Backend { message, source } = &error else {
        panic!("unexpected error {error:?}");
    };
    assert!(message.contains("no_refused"), "{message}");
    let source = source.as_deref().expect("the error keeps its source");
    assert!(
        source.downcast_ref::<tokio_postgres::Error>().is_some(),
        "{source:?}"
    );
}
