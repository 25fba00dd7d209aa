//! A cluster on one PostgreSQL database: two HTTP servers and two workers, each an OS
//! process of its own, and a client that uses them all.
//!
//! ```text
//! cargo run -p mcp-tasks-e2e --example cluster
//! cargo run -p mcp-tasks-e2e --example cluster -- --database-url postgres://me@db.internal:5432/postgres
//! ```
//!
//! The example makes a fresh database on the PostgreSQL server, starts the four processes on
//! it (this same binary, with an internal `--role`), and then, as a client of the servers:
//! creates tasks through server A and follows them through server B, answers a task's
//! question through the server that did not create it, cancels a task through the other
//! server, and finally `kill -9`s the worker in the middle of a task, so the other worker
//! takes it over once the lease (2 s here) lapses. The tools say in their status messages
//! and results which process ran them. At the end (or on Ctrl-C, or a failure) the
//! processes are killed and the database is dropped.
//!
//! `RUST_LOG` (say `RUST_LOG=mcp_tasks_runtime=debug`) turns on the processes' logs.

use anyhow::{Context as _, bail};
use mcp_tasks::EngineConfig;
use mcp_tasks::client::{Called, FnHandler, McpClient, Question, TaskHandle, TaskOutcome};
use mcp_tasks::model::ElicitAction;
use mcp_tasks::prelude::*;
use mcp_tasks::store::PostgresTaskStore;
use mcp_tasks::transport::http::HttpConfig;
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// How long a lease lasts unless renewed: a task whose worker died is taken over about this
/// long after.
const LEASE: Duration = Duration::from_secs(2);

/// The bound on every wait of the demo.
const WITHIN: Duration = Duration::from_secs(30);

/// The bound on the whole demo.
const DEMO_WITHIN: Duration = Duration::from_secs(180);

/// The PostgreSQL server the fresh database is made on, unless `--database-url` says.
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

const USAGE: &str = "\
usage: cluster [--database-url URL]

Starts two HTTP servers and two workers, each a process of its own, on a fresh database of
a PostgreSQL server, drives them as a client, and drops the database at the end.

options:
  --database-url URL    the PostgreSQL server to make the database on, as the URL of a
                        database there that the user may connect to and create databases
                        from (default postgres://postgres@127.0.0.1:5432/postgres)
  -h, --help            print this help and exit

RUST_LOG (say RUST_LOG=mcp_tasks_runtime=debug) turns on the processes' logs.
";

// ---- The tools, run by the workers ----

/// The process a tool runs in, so its results can say so.
#[derive(Debug)]
struct Process {
    name: String,
}

impl Process {
    fn label(&self) -> String {
        format!("{} (pid {})", self.name, std::process::id())
    }
}

/// Render `pages` pages, 300 ms each.
#[task_tool(mode = "required", poll_interval = "100ms")]
async fn render(
    pages: u32,
    process: State<Process>,
    progress: Progress,
    cancel: CancellationToken,
) -> Result<String, ToolError> {
    for page in 1..=pages {
        let message = format!("page {page}/{pages} on {}", process.label());
        progress.report_with_message(f64::from(page - 1), Some(f64::from(pages)), message);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
            () = cancel.cancelled() => return Err(ToolError::cancelled()),
        }
    }
    Ok(format!("rendered {pages} pages on {}", process.label()))
}

/// Ask the user before publishing `document`.
#[task_tool(mode = "required", poll_interval = "100ms")]
async fn publish(
    document: String,
    process: State<Process>,
    client: Client,
) -> Result<String, ToolError> {
    let answer = client
        .elicit(
            format!("Publish {document}? (asked by {})", process.label()),
            json!({"type": "object", "properties": {"confirm": {"type": "boolean"}},
                   "required": ["confirm"]}),
        )
        .await?;
    let confirmed = answer.action == ElicitAction::Accept
        && answer.content.as_ref().and_then(|c| c["confirm"].as_bool()) == Some(true);
    Ok(match confirmed {
        true => format!("published {document} on {}", process.label()),
        false => format!("kept {document} unpublished on {}", process.label()),
    })
}

/// Work for `seconds`, in quarter-second steps. Safe to run again after its process died,
/// so a task whose worker is gone is run again, under the same id, by another worker.
#[task_tool(
    mode = "required",
    poll_interval = "100ms",
    idempotent,
    on_restart = "rerun"
)]
async fn crunch(
    seconds: u32,
    process: State<Process>,
    progress: Progress,
    cancel: CancellationToken,
) -> Result<String, ToolError> {
    let steps = seconds * 4;
    for step in 1..=steps {
        let message = format!("step {step}/{steps} on {}", process.label());
        progress.report_with_message(f64::from(step - 1), Some(f64::from(steps)), message);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
            () = cancel.cancelled() => return Err(ToolError::cancelled()),
        }
    }
    Ok(format!("crunched for {seconds} s on {}", process.label()))
}

// ---- The processes ----

/// Runs one process of the cluster: `server NAME` serves HTTP without running tools,
/// `worker NAME` runs tools and serves nobody. Both stop when stdin closes, so they never
/// outlive the demo.
async fn run_role(role: &str, name: &str, url: &str) -> anyhow::Result<()> {
    let store = PostgresTaskStore::connect(url).await?;
    let config = EngineConfig {
        lease: LEASE,
        execute: role == "worker",
        ..EngineConfig::default()
    };
    let server = Server::builder()
        .name("mcp-tasks-cluster")
        .state(Process { name: name.into() })
        .engine_config(config)
        .registry_tools()
        .store(store)
        .build()?;
    let stdin_closed = async {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(_)) = lines.next_line().await {}
    };
    match role {
        "server" => {
            let http = server
                .serve_http(HttpConfig::new().bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0))))
                .await?;
            println!("ready {}", http.url("/mcp"));
            stdin_closed.await;
            http.shutdown().await?;
        }
        "worker" => {
            let stop = CancellationToken::new();
            let worker = Worker::new(server)
                .shutdown_signal(stop.clone())
                .shutdown_grace(Duration::from_secs(1));
            println!("ready {}", worker.id());
            let run = tokio::spawn(worker.run());
            stdin_closed.await;
            stop.cancel();
            run.await??;
        }
        other => bail!("unknown role {other:?}"),
    }
    Ok(())
}

/// A process of the cluster, killed when dropped.
struct Member {
    name: String,
    child: Child,
    /// The server's endpoint, or the worker's id.
    ready: String,
}

impl Member {
    async fn start(role: &str, name: &str, url: &str) -> anyhow::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--role", role, name, url])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let stdout = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(WITHIN, lines.next_line())
            .await
            .with_context(|| format!("{name} did not start within {WITHIN:?}"))??
            .and_then(|line| line.strip_prefix("ready ").map(str::to_owned));
        let Some(ready) = ready else {
            bail!(
                "{name} exited before it was ready: {:?}",
                child.wait().await?
            );
        };
        Ok(Self {
            name: name.into(),
            child,
            ready,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or_default()
    }
}

/// A fresh database on the PostgreSQL server, dropped (with every connection to it) when
/// this is dropped.
struct Database {
    admin: String,
    name: String,
}

impl Database {
    async fn create(admin: &str) -> anyhow::Result<Self> {
        let name = format!("mcp_tasks_cluster_{}", std::process::id());
        run_sql(admin, &format!("CREATE DATABASE {name}"))
            .await
            .with_context(|| format!("cannot make the database {name} on {admin}"))?;
        Ok(Self {
            admin: admin.into(),
            name,
        })
    }

    /// The URL of the database: the admin URL with its database name replaced.
    fn url(&self) -> String {
        let (base, query) = match self.admin.split_once('?') {
            Some((base, query)) => (base, format!("?{query}")),
            None => (self.admin.as_str(), String::new()),
        };
        let authority_at = base.find("://").map_or(0, |i| i + 3);
        let base = match base[authority_at..].find('/') {
            Some(slash) => &base[..authority_at + slash],
            None => base,
        };
        format!("{base}/{}{query}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Its own thread and runtime: this runs during an unwind too, inside or outside one.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(run_sql(
                &admin,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            ))
        })
        .join();
        match dropped {
            Ok(Ok(())) => println!("\ndropped the database {}", self.name),
            Ok(Err(e)) => eprintln!("cannot drop the database {}: {e:#}", self.name),
            Err(_) => eprintln!("cannot drop the database {}", self.name),
        }
    }
}

/// Runs one statement on the database at `url`, within [`WITHIN`].
async fn run_sql(url: &str, sql: &str) -> anyhow::Result<()> {
    let work = async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(connection);
        let done = client.batch_execute(sql).await;
        drop(client);
        let _ = driver.await;
        done?;
        anyhow::Ok(())
    };
    tokio::time::timeout(WITHIN, work)
        .await
        .with_context(|| format!("no answer from {url} within {WITHIN:?}"))?
}

/// The four processes and their database. The processes are killed (`kill_on_drop`) before
/// the database is dropped: fields drop in order.
struct Cluster {
    members: Vec<Member>,
    database: Database,
}

impl Cluster {
    fn member(&self, name: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.name == name)
            .expect("a member")
    }

    /// `kill -9` of one member.
    async fn kill(&mut self, name: &str) -> anyhow::Result<()> {
        let at = self
            .members
            .iter()
            .position(|m| m.name == name)
            .expect("a member");
        let mut member = self.members.remove(at);
        member.child.start_kill()?;
        member.child.wait().await?;
        Ok(())
    }
}

// ---- The client ----

/// Prints a step's caption.
fn step(n: u32, caption: &str) {
    println!("\n{n}. {caption}");
}

/// The first 8 characters of a task id, enough to tell tasks apart in the output.
fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// A client of `url` that answers questions by accepting, saying so.
async fn connect(url: &str, name: &'static str) -> anyhow::Result<McpClient> {
    let handler = FnHandler(move |question: Question| async move {
        println!(
            "   ? {:?} (task {})",
            question.message().unwrap_or_default(),
            question.task_id.as_deref().map(short).unwrap_or("-")
        );
        println!("   ✓ answered yes through {name}");
        Ok(json!({"action": "accept", "content": {"confirm": true}}))
    });
    let client = McpClient::builder()
        .http(url)
        .handler(handler)
        .connect()
        .await
        .with_context(|| format!("cannot connect to {name} at {url}"))?;
    Ok(client)
}

/// Calls a task tool and returns the task's handle.
async fn start(client: &McpClient, tool: &str, arguments: Value) -> anyhow::Result<TaskHandle> {
    match client.call_tool(tool, arguments).await? {
        Called::Task(task) => Ok(task),
        Called::Done(output) => bail!("{tool} answered at once: {}", output.text()),
    }
}

/// The text of a completed task, or why it did not complete.
fn describe(outcome: &TaskOutcome) -> String {
    match outcome {
        TaskOutcome::Completed(output) => output.text(),
        TaskOutcome::Failed { code, message, .. } => format!("failed ({code}): {message}"),
        TaskOutcome::Cancelled => "cancelled".into(),
    }
}

/// Polls the task until its status message satisfies `want`, and returns that message.
async fn status_until(
    task: &TaskHandle,
    mut want: impl FnMut(&str) -> bool,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let state = task.status().await?;
        if let Some(message) = state.status_message.filter(|m| want(m)) {
            return Ok(message);
        }
        if state.status != "working" && state.status != "input_required" {
            bail!(
                "task {} ended {} before it was seen",
                task.id(),
                state.status
            );
        }
        if Instant::now() > deadline {
            bail!("task {} did not get there within {WITHIN:?}", task.id());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The worker a status message or result names.
fn worker_in(text: &str) -> Option<&'static str> {
    ["worker-1", "worker-2"]
        .into_iter()
        .find(|w| text.contains(w))
}

async fn demo(cluster: &mut Cluster) -> anyhow::Result<()> {
    let (url_a, url_b) = (
        cluster.member("server-a").ready.clone(),
        cluster.member("server-b").ready.clone(),
    );
    let a = connect(&url_a, "server A").await?;
    let b = connect(&url_b, "server B").await?;
    println!(
        "client: connected to server A and server B ({})",
        a.negotiated()
    );
    let deadline = || Some(Instant::now() + WITHIN);

    step(
        1,
        "Create three tasks through server A; follow them through server B.",
    );
    let mut tasks = Vec::new();
    for pages in [2, 3, 4] {
        let task = start(&a, "render", json!({"pages": pages})).await?;
        println!(
            "   A created task {} (render {pages} pages)",
            short(task.id())
        );
        tasks.push(task);
    }
    for task in &tasks {
        let on_b = b.task(task.id());
        let outcome = on_b.wait(deadline()).await?;
        println!("   B: task {} → {}", short(task.id()), describe(&outcome));
    }

    step(2, "A task created through A asks a question; B answers it.");
    let task = start(&a, "publish", json!({"document": "report.pdf"})).await?;
    println!(
        "   A created task {} (publish report.pdf)",
        short(task.id())
    );
    let outcome = b.task(task.id()).wait(deadline()).await?;
    println!("   B: task {} → {}", short(task.id()), describe(&outcome));

    step(3, "A task created through B is cancelled through A.");
    let task = start(&b, "crunch", json!({"seconds": 60})).await?;
    println!("   B created task {} (crunch for 60 s)", short(task.id()));
    let running = status_until(&task, |m| worker_in(m).is_some()).await?;
    println!("   B: {running}");
    let on_a = a.task(task.id());
    let sent = Instant::now();
    on_a.cancel().await?;
    println!("   A asked to cancel it");
    let outcome = on_a.wait(deadline()).await?;
    println!(
        "   A: task {} → {} ({} ms after the request)",
        short(task.id()),
        describe(&outcome),
        sent.elapsed().as_millis()
    );

    step(
        4,
        "kill -9 the worker in the middle of a task; the other worker takes it over.",
    );
    let task = start(&a, "crunch", json!({"seconds": 3})).await?;
    println!("   A created task {} (crunch for 3 s)", short(task.id()));
    let running = status_until(&task, |m| worker_in(m).is_some()).await?;
    let victim = worker_in(&running).expect("a worker's name");
    let survivor = if victim == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    println!("   A: {running}");
    // Well into the task, and past a renewal of its lease.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let pid = cluster.member(victim).pid();
    cluster.kill(victim).await?;
    let killed = Instant::now();
    println!("   kill -9 {victim} (pid {pid})");
    let on_b = b.task(task.id());
    let mut seen = String::new();
    status_until(&on_b, |m| {
        if m != seen {
            println!("   B: {m}");
            seen = m.to_owned();
        }
        m.contains(survivor)
    })
    .await?;
    println!(
        "   {survivor} took the task over {:.1} s after the kill (lease {} s)",
        killed.elapsed().as_secs_f64(),
        LEASE.as_secs()
    );
    let outcome = on_b.wait(deadline()).await?;
    println!("   B: task {} → {}", short(task.id()), describe(&outcome));
    Ok(())
}

async fn run_demo(admin: &str) -> anyhow::Result<()> {
    println!("A cluster on PostgreSQL: two HTTP servers and two workers, each its own process.");
    let mut cluster = Cluster {
        members: Vec::new(),
        database: Database::create(admin).await?,
    };
    println!("made the fresh database {}", cluster.database.name);
    let url = cluster.database.url();
    let started = tokio::join!(
        Member::start("server", "server-a", &url),
        Member::start("server", "server-b", &url),
        Member::start("worker", "worker-1", &url),
        Member::start("worker", "worker-2", &url),
    );
    for member in [started.0?, started.1?, started.2?, started.3?] {
        match member.name.as_str() {
            "server-a" | "server-b" => println!(
                "started {} (pid {}), serving only (runs no tools): {}",
                member.name,
                member.pid(),
                member.ready
            ),
            _ => println!(
                "started {} (pid {}), running tools as {}",
                member.name,
                member.pid(),
                member.ready
            ),
        }
        cluster.members.push(member);
    }
    let mut interrupted = false;
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(DEMO_WITHIN, demo(&mut cluster)) => {
            outcome.with_context(|| format!("the demo did not end within {DEMO_WITHIN:?}"))
        }
        _ = tokio::signal::ctrl_c() => {
            interrupted = true;
            Ok(Ok(()))
        }
    };
    let names: Vec<String> = cluster.members.iter().map(|m| m.name.clone()).collect();
    if interrupted {
        println!("\ninterrupted");
    }
    println!("\nstopping {}", names.join(", "));
    drop(cluster);
    if interrupted {
        std::process::exit(130);
    }
    outcome?
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let mut args = std::env::args().skip(1);
    let mut admin = DEFAULT_DATABASE_URL.to_owned();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--role" => {
                let (Some(role), Some(name), Some(url)) = (args.next(), args.next(), args.next())
                else {
                    bail!("--role takes ROLE NAME URL");
                };
                return run_role(&role, &name, &url).await;
            }
            "--database-url" => match args.next() {
                Some(url) => admin = url,
                None => {
                    eprintln!("--database-url takes a URL\n\n{USAGE}");
                    std::process::exit(2);
                }
            },
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => {
                eprintln!("unexpected argument {other:?}\n\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    run_demo(&admin).await
}
