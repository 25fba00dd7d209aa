use super::reads::UNFINISHED_BATCH;
use super::testing::{TestRedis, split_database};
use super::*;
use crate::store::testing::{check_recovers, check_store, sample_record};
use crate::task::TaskStatus;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

static PREFIXES: AtomicUsize = AtomicUsize::new(0);

async fn open(redis: &TestRedis, name: impl fmt::Display) -> RedisTaskStore {
    RedisTaskStore::connect_with(
        &redis.url(),
        RedisOptions::default()
            .key_prefix(format!("{}:{name}", redis.prefix()))
            .timeout(Duration::from_secs(5)),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot open the test store: {e}"))
}

fn fresh() -> String {
    format!("suite{}", PREFIXES.fetch_add(1, Ordering::Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_store_passes_the_suite() {
    let Some(redis) = TestRedis::create("suite") else {
        return;
    };
    check_store(|| open(&redis, fresh())).await;
}

#[tokio::test]
async fn redis_store_passes_the_suite_on_one_thread() {
    let Some(redis) = TestRedis::create("suite1") else {
        return;
    };
    check_store(|| open(&redis, fresh())).await;
}

#[test]
fn a_test_redis_url_may_name_its_database() {
    assert_eq!(
        split_database("redis://127.0.0.1:6379"),
        ("redis://127.0.0.1:6379".to_owned(), None)
    );
    assert_eq!(
        split_database(" redis://u:p@h:1/10/ "),
        ("redis://u:p@h:1".to_owned(), Some(10))
    );
}

#[test]
fn prefixes_and_urls_are_read_exactly() {
    assert_eq!(
        split_prefix("redis://h:1/2?prefix=a:b&protocol=resp3"),
        (
            "redis://h:1/2?protocol=resp3".to_owned(),
            Some("a:b".to_owned())
        )
    );
    assert_eq!(
        split_prefix("redis://h:1/2"),
        ("redis://h:1/2".to_owned(), None)
    );
    assert_eq!(
        describe("redis://user:secret@h:1/2?x=y", "p"),
        "redis://h:1/2 (prefix p)"
    );
    for good in ["mcp-tasks", "a:b.c_d-1"] {
        assert!(check_prefix(good).is_ok(), "{good}");
    }
    for bad in ["", "a b", "a*", "a?", &"a".repeat(101)] {
        assert!(check_prefix(bad).is_err(), "{bad:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_prefix_refuse_a_taken_unique_key() {
    let Some(redis) = TestRedis::create("unique") else {
        return;
    };
    let a = Arc::new(open(&redis, "unique").await);
    let b = Arc::new(open(&redis, "unique").await);
    crate::store::testing::check_unique_race(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_share_tasks_claims_and_changes_and_wake_each_other() {
    let Some(redis) = TestRedis::create("two") else {
        return;
    };
    let a = open(&redis, "two").await;
    let b = open(&redis, "two").await;
    crate::store::testing::check_shared_stores(&a, &b).await;
    // Another prefix on the same database sees none of it.
    let other = open(&redis, "other").await;
    assert_eq!(other.get("x").await.unwrap(), None);
    assert!(other.unfinished().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscriber_stays_connected_through_its_pings() {
    let Some(redis) = TestRedis::create("pings") else {
        return;
    };
    let store = open(&redis, "p").await;
    // Past two pings.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(store.shared.subscriptions.load(Ordering::Relaxed), 1);
    let wake = store.changed();
    store
        .create(sample_record("x", None, SystemTime::now()))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), wake)
        .await
        .expect("the store's own write wakes it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_feed_is_trimmed_to_its_length() {
    let Some(redis) = TestRedis::create("feed") else {
        return;
    };
    let store = RedisTaskStore::connect_with(
        &redis.url(),
        RedisOptions::default()
            .key_prefix(redis.prefix())
            .feed_len(10),
    )
    .await
    .unwrap();
    let start = store.changes(None, 100).await.unwrap().cursor;
    let now = SystemTime::now();
    for n in 0..30 {
        store
            .create(sample_record(&format!("t{n:02}"), None, now))
            .await
            .unwrap();
    }
    let got = store.changes(Some(start), 100).await.unwrap();
    let want: Vec<String> = (20..30).map(|n| format!("t{n}")).collect();
    assert_eq!(got.ids, want, "only the newest entries are kept");
    assert_eq!(got.cursor, start + 30);
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let kept: usize = conn
        .zcard(format!("{}:changes", redis.prefix()))
        .await
        .unwrap();
    assert_eq!(kept, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_config_access_connects_with_the_durability_unknown() {
    let Some(redis) = TestRedis::create("acl") else {
        return;
    };
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let user = format!("mcp-tasks-test-{}", &crate::task::random_id().unwrap()[..8]);
    let _: () = ::redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-config")
        .query_async(&mut conn)
        .await
        .unwrap();
    let server = redis.url();
    let server = server.replacen("redis://", &format!("redis://{user}:secret@"), 1);
    let checked = async {
        let store = RedisTaskStore::connect_with(
            &server,
            RedisOptions::default().key_prefix(redis.prefix()),
        )
        .await?;
        store
            .create(sample_record("x", None, SystemTime::now()))
            .await?;
        Ok::<_, StoreError>(store.durability().clone())
    }
    .await;
    // Deleting the user also ends its connections.
    let _: i64 = ::redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(checked, Ok(RedisDurability::Unknown));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_removes_an_expired_record_itself_and_the_sweep_cleans_up() {
    let Some(redis) = TestRedis::create("pexpire") else {
        return;
    };
    let store = RedisTaskStore::connect_with(
        &redis.url(),
        RedisOptions::default()
            .key_prefix(redis.prefix())
            .expiry_grace(Duration::ZERO),
    )
    .await
    .unwrap();
    let now = SystemTime::now();
    let mut done = sample_record("gone", Some("alice"), now);
    done.status = TaskStatus::Completed;
    done.ttl = Some(Duration::from_millis(200));
    store.create(done).await.unwrap();
    store
        .create(sample_record("kept", Some("alice"), now))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.get("gone").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "Redis never expired the record");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The sweep still reports it, and the listing no longer has it.
    let expired = store
        .expire(SystemTime::now() + Duration::from_secs(1), 10)
        .await
        .unwrap();
    assert_eq!(expired, ["gone"]);
    let page = store.list(Some("alice"), None, 10).await.unwrap();
    let ids: Vec<&str> = page.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["kept"]);
    assert!(
        store
            .expire(SystemTime::now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn unfinished_reads_queued_and_leased_tasks_in_batches_and_leaves_out_ended_ones() {
    let Some(redis) = TestRedis::create("unfinished") else {
        return;
    };
    let store = open(&redis, "unfinished").await;
    let now = SystemTime::now();
    let n = 2 * UNFINISHED_BATCH + 7;
    for i in 0..n {
        store
            .create(sample_record(&format!("t{i}"), None, now))
            .await
            .unwrap();
    }
    let leased = store
        .claim("w", now + Duration::from_secs(60), 3, &[])
        .await
        .unwrap();
    assert_eq!(leased.len(), 3);
    let ended: Vec<String> = (100..105).map(|i| format!("t{i}")).collect();
    for id in &ended {
        let mut done = store.get(id).await.unwrap().unwrap();
        let version = done.version;
        done.status = TaskStatus::Completed;
        assert!(store.compare_and_set(done, version).await.unwrap());
    }
    let got = store.unfinished().await.unwrap();
    let ids: std::collections::BTreeSet<&str> = got.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(got.len(), n - ended.len(), "each unfinished task once");
    assert_eq!(ids.len(), got.len());
    assert!(ended.iter().all(|id| !ids.contains(id.as_str())));
    for claimed in &leased {
        let read = got
            .iter()
            .find(|r| r.id == claimed.id)
            .expect("a leased task");
        assert_eq!(read.lease.as_ref().map(|l| l.worker.as_str()), Some("w"));
    }
    assert!(got.iter().all(|r| !r.status.is_terminal()));
}

#[tokio::test]
async fn a_task_that_moves_between_the_indexes_mid_scan_is_named_by_the_feed() {
    let Some(redis) = TestRedis::create("moves") else {
        return;
    };
    let store = open(&redis, "moves").await;
    let now = SystemTime::now();
    store.create(sample_record("b", None, now)).await.unwrap();
    let claimed = store
        .claim("w", now + Duration::from_secs(60), 1, &[])
        .await
        .unwrap();
    assert_eq!(claimed[0].id, "b");
    store.create(sample_record("a", None, now)).await.unwrap();
    // The scan's steps, with `b`'s lease given up between the two index scans: it moves
    // into the queue, which was read already, out of the leases, which are read next.
    let shared = &store.shared;
    let start = shared.feed_page(None, 0).await.unwrap().end;
    let queued = shared.members("queued").await.unwrap();
    let mut b = store.get("b").await.unwrap().unwrap();
    let version = b.version;
    b.lease = None;
    assert!(store.compare_and_set(b, version).await.unwrap());
    let leased = shared.members("leases").await.unwrap();
    assert_eq!((queued, leased), (vec!["a".to_owned()], vec![]));
    let written = shared.written_since(start).await.unwrap();
    assert_eq!(
        written,
        Some(vec!["b".to_owned()]),
        "the feed names the move"
    );
    let mut all: Vec<String> = store
        .unfinished()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    all.sort();
    assert_eq!(all, ["a", "b"]);
}

#[tokio::test]
async fn a_feed_trimmed_past_the_scan_s_start_is_told_apart() {
    let Some(redis) = TestRedis::create("trimmed") else {
        return;
    };
    let store = RedisTaskStore::connect_with(
        &redis.url(),
        RedisOptions::default()
            .key_prefix(format!("{}:trimmed", redis.prefix()))
            .feed_len(10),
    )
    .await
    .unwrap();
    let start = store.shared.feed_page(None, 0).await.unwrap().end;
    let now = SystemTime::now();
    for i in 0..5 {
        store
            .create(sample_record(&format!("t{i}"), None, now))
            .await
            .unwrap();
    }
    let written = store.shared.written_since(start).await.unwrap();
    assert_eq!(written.map(|ids| ids.len()), Some(5));
    for i in 5..20 {
        store
            .create(sample_record(&format!("t{i}"), None, now))
            .await
            .unwrap();
    }
    assert_eq!(store.shared.written_since(start).await.unwrap(), None);
    assert_eq!(store.unfinished().await.unwrap().len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_fails_at_connect_naming_the_problem() {
    let Some(redis) = TestRedis::create("config") else {
        return;
    };
    let quick = RedisOptions::default().timeout(Duration::from_secs(3));
    let fails = |url: String, options: RedisOptions| async move {
        RedisTaskStore::connect_with(&url, options)
            .await
            .expect_err(&format!("connecting to {url} succeeded"))
            .to_string()
    };
    let error = fails("redis://127.0.0.1:1/0".into(), quick.clone()).await;
    assert!(error.contains("unreachable"), "{error}");
    assert!(error.contains("Redis task store"), "{error}");
    let server = redis.url();
    let server = server.rsplit_once('/').map_or(server.as_str(), |(s, _)| s);
    let error = fails(format!("{server}/4000"), quick.clone()).await;
    assert!(error.contains("database number"), "{error}");
    let with_password = server.replacen("redis://", "redis://nobody:wrong@", 1);
    let error = fails(format!("{with_password}/0"), quick.clone()).await;
    assert!(error.contains("credentials"), "{error}");
    let error = fails("http://what".into(), quick.clone()).await;
    assert!(error.contains("invalid Redis URL"), "{error}");
    let error = fails(redis.url(), quick.clone().key_prefix("bad prefix")).await;
    assert!(error.contains("invalid key prefix"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_fail_in_bounded_time_while_connections_are_killed_then_recover() {
    let Some(redis) = TestRedis::create_in("outage", 13) else {
        return;
    };
    let store = open(&redis, "outage").await;
    let other = open(&redis, "outage").await;
    store
        .create(sample_record("before", None, SystemTime::now()))
        .await
        .unwrap();
    assert!(
        redis.kill_clients() >= 4,
        "both stores' connections were killed"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    check_recovers(&store, "before", Duration::from_secs(12), deadline).await;
    // The other store's subscriber comes back and is woken by later writes.
    let cursor = other.changes(None, 10).await.unwrap().cursor;
    loop {
        let wake = other.changed();
        store
            .create(sample_record(
                &random_suffix("later"),
                None,
                SystemTime::now(),
            ))
            .await
            .unwrap();
        if tokio::time::timeout(Duration::from_millis(500), wake)
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the subscriber did not come back"
        );
    }
    let got = other.changes(Some(cursor), 100).await.unwrap();
    assert!(!got.ids.is_empty(), "{got:?}");
}

fn random_suffix(name: &str) -> String {
    format!("{name}-{}", crate::task::random_id().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durability_of_the_server_s_settings_is_read() {
    let Some(redis) = TestRedis::create("durability") else {
        return;
    };
    let store = open(&redis, "d").await;
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let config: HashMap<String, String> = ::redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query_async(&mut conn)
        .await
        .unwrap();
    let want_durable = config.get("appendonly").is_some_and(|v| v == "yes");
    assert_eq!(
        !matches!(store.durability(), RedisDurability::NotDurable { .. }),
        want_durable,
        "{:?} with {config:?}",
        store.durability()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_store_leaves_nothing_running_and_its_keys_are_under_its_prefix() {
    let Some(redis) = TestRedis::create("prefix") else {
        return;
    };
    let store = RedisTaskStore::connect(&redis.store_url()).await.unwrap();
    assert!(store.redis().contains(redis.prefix()), "{}", store.redis());
    let mut done = sample_record("t", Some("o"), SystemTime::now());
    done.status = TaskStatus::Completed;
    done.ttl = Some(Duration::from_secs(3600));
    store.create(done).await.unwrap();
    assert!(redis.key_count() >= 5, "{}", redis.key_count());
    let weak = Arc::downgrade(&store.shared);
    drop(store);
    let deadline = Instant::now() + Duration::from_secs(10);
    while weak.strong_count() > 0 {
        assert!(
            Instant::now() < deadline,
            "the subscriber outlived the store"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_command_redis_refuses_keeps_its_error_as_the_source() {
    let Some(redis) = TestRedis::create("source") else {
        return;
    };
    let store = open(&redis, "source").await;
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    // A string where the task's hash belongs: Redis refuses to read it as a hash.
    let _: () = conn
        .set(format!("{}:source:task:x", redis.prefix()), "not a hash")
        .await
        .unwrap();
    let error = store.get("x").await.unwrap_err();
    let StoreError::Backend { message, source } = &error else {
        panic!("unexpected error {error:?}");
    };
    assert!(message.contains("cannot read a task"), "{message}");
    let source = source.as_deref().expect("the error keeps its source");
    assert!(
        source.downcast_ref::<::redis::RedisError>().is_some(),
        "{source:?}"
    );
}
