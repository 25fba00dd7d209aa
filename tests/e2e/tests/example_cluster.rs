//! `examples/cluster` runs from start to end on the local PostgreSQL (the server that
//! `MCP_TASKS_TEST_POSTGRES` names): every step shows, the takeover after `kill -9` happens,
//! and the database it made is gone afterwards. Skipped, loudly, when
//! `MCP_TASKS_TEST_POSTGRES=skip`.

mod support;

use std::process::Stdio;
use std::time::Duration;
use support::example;

/// A bound on the whole run: the demo itself bounds each of its waits.
const WITHIN: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_example_runs_every_step_and_drops_its_database() {
    let admin = std::env::var("MCP_TASKS_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    if admin.trim() == "skip" {
        eprintln!(
            "\n!!! SKIPPED: the cluster example needs PostgreSQL and MCP_TASKS_TEST_POSTGRES=skip\n"
        );
        return;
    }
    let child = tokio::process::Command::new(example("cluster"))
        .args(["--database-url", &admin])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the cluster example");
    let output = tokio::time::timeout(WITHIN, child.wait_with_output())
        .await
        .expect("the cluster example ends in time")
        .expect("the cluster example runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{:?}\n{stdout}\n{stderr}",
        output.status
    );

    for caption in [
        "1. Create three tasks through server A; follow them through server B.",
        "2. A task created through A asks a question; B answers it.",
        "3. A task created through B is cancelled through A.",
        "4. kill -9 the worker in the middle of a task; the other worker takes it over.",
    ] {
        assert!(stdout.contains(caption), "{caption:?} missing:\n{stdout}");
    }
    // Every render ran on a worker that said so, and both servers only served.
    let rendered: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("→ rendered"))
        .collect();
    assert_eq!(rendered.len(), 3, "{stdout}");
    assert!(
        rendered.iter().all(|l| l.contains("on worker-")),
        "{stdout}"
    );
    assert!(
        stdout.contains("✓ answered yes through server B"),
        "{stdout}"
    );
    assert!(
        stdout.contains("→ published report.pdf on worker-"),
        "{stdout}"
    );
    assert!(stdout.contains("→ cancelled"), "{stdout}");

    // The task of step 4 ran on the killed worker and finished on the other one.
    let killed = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("kill -9 "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no kill in:\n{stdout}"));
    let survivor = if killed == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    assert!(
        stdout.contains(&format!("{survivor} took the task over")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("→ crunched for 3 s on {survivor}")),
        "{stdout}"
    );

    // The database is gone.
    let name = stdout
        .lines()
        .find_map(|l| l.strip_prefix("made the fresh database "))
        .unwrap_or_else(|| panic!("no database in:\n{stdout}"))
        .to_owned();
    assert!(
        stdout.contains(&format!("dropped the database {name}")),
        "{stdout}"
    );
    let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    let driver = tokio::spawn(connection);
    let left = client
        .query("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await
        .expect("query pg_database");
    assert!(left.is_empty(), "the database {name} is still there");
    drop(client);
    let _ = driver.await;
}
