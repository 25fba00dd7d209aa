//! Fixture processes on one PostgreSQL database, under faults: every connection killed
//! during a burst of creates, two servers and two workers under load, and bad settings at
//! startup. Each test makes a database of its own and drops it afterwards; with
//! `MCP_TASKS_TEST_POSTGRES=skip` they are skipped (loudly).
//!
//! Every wait is bounded; nothing here asserts how fast anything is.

mod support;

use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::{Server, Store, burst, refused};

/// A bound on any cross-process wait.
const WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_survive_every_connection_being_killed_during_a_burst() {
    let Some(store) = Store::postgres("burst_kill") else {
        return;
    };
    let db = store.database().expect("a PostgreSQL store");
    // Both serve before the connections are killed: the faults are the burst's, not startup's.
    let (a, b) = tokio::join!(Server::on(&store).ready(), Server::on(&store).ready());
    let stop = AtomicBool::new(false);
    let killer = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for _ in 0..5 {
            db.terminate_connections().await;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, Ordering::Release);
    };
    let ((mut a, handles_a, errors_a), (mut b, handles_b, errors_b), ()) =
        tokio::join!(burst(a, "a", 20, &stop), burst(b, "b", 20, &stop), killer);
    eprintln!(
        "creates answered with a handle: {}, with an error: {}",
        handles_a.len() + handles_b.len(),
        errors_a.len() + errors_b.len()
    );

    support::check_after_burst(
        &mut a,
        &mut b,
        &handles_a,
        &handles_b,
        &errors_a,
        &errors_b,
        "PostgreSQL task store",
    )
    .await;
    a.kill().await;
    b.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_and_two_workers_settle_every_task_once_with_its_own_result() {
    let Some(store) = Store::postgres("load") else {
        return;
    };
    support::settle_every_task_once_under_load(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_store_settings_fail_at_startup_naming_the_problem() {
    let Some(store) = Store::postgres("startup") else {
        return;
    };
    let db = store.database().expect("a PostgreSQL store");
    let stderr = refused("postgres://postgres@127.0.0.1:1/postgres", WITHIN).await;
    assert!(stderr.contains("unreachable"), "{stderr}");
    let stderr = refused(&db.url_for("postgres", "no_such_database_here"), WITHIN).await;
    assert!(stderr.contains("database does not exist"), "{stderr}");
    let stderr = refused(&db.url_for("no_such_role_here", &db.name()), WITHIN).await;
    assert!(stderr.contains("credentials"), "{stderr}");
    // A role that may log in (trust auth) but may create nothing in the database: no schema
    // for the tasks can be made. Roles belong to the whole server, so this one is dropped
    // before anything is asserted.
    let role = format!("{}_weak", db.name());
    db.execute(&format!(
        "CREATE ROLE {role} LOGIN; REVOKE CREATE ON DATABASE {} FROM PUBLIC; \
         REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        db.name()
    ))
    .await;
    let url = db.url_for(&role, &db.name());
    let attempt = tokio::spawn(async move { refused(&url, WITHIN).await }).await;
    db.execute(&format!("DROP ROLE {role}")).await;
    let stderr = attempt.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    assert!(stderr.contains("insufficient privileges"), "{stderr}");
    assert!(
        stderr.contains(&role),
        "the message names the role: {stderr}"
    );
    // The server starts on the real database.
    let mut server = Server::on(&store);
    let r = server
        .request(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "pg"}}),
        )
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "Hello, pg!", "{r}");
    server.kill().await;
}
