//! `cargo xtask interop`: the fixture server driven by real MCP clients, over stdio and
//! Streamable HTTP, in each protocol era the client has.
//!
//! | client | pinned in `tests/interop/` | eras |
//! | --- | --- | --- |
//! | TypeScript SDK `@modelcontextprotocol/sdk` 1.32.2 (`typescript_client.mjs`) | `package-lock.json` | 2025-11-25 (Tasks utility) |
//! | TypeScript SDK 2.x `@modelcontextprotocol/client` 2.4.0 with `@modelcontextprotocol/ext-tasks` 0.2.2 (`ext_tasks_client.mjs`) | `package-lock.json` | 2025-11-25 (Tasks utility) |
//! | MCP Inspector CLI `@modelcontextprotocol/inspector` 2.12.0 (`--cli`) | `package-lock.json` | both |
//! | Python SDK `mcp` 2.3.0 (`python_client.py`) | `requirements.txt` | both |
//! | TypeScript SDK 1.32.2's OAuth client (`typescript_oauth_client.mjs`) | `package-lock.json` | 2025-11-25 (Tasks utility) |
//!
//! The OAuth checks run against a second fixture instance, an OAuth resource server
//! (`--oauth-issuer`) for a real OpenID provider (`oidc-provider` from `tests/oauth`, its own
//! lock file): the client holds only a client id and secret, and must find its way from the
//! fixture's 401 to a token (RFC 9728 metadata, authorization server discovery, client
//! credentials), then run a task and call the scoped tool `scoped_echo`, which the `reader`
//! client (no `echo:write`) must be refused with 403.
//!
//! 1. Node 24 from PyPI (the Inspector needs Node >= 22.19) and the Python SDK, in a venv
//!    under `target/interop/venv`; the npm packages with `npm ci` into
//!    `tests/interop/node_modules` (and `tests/oauth/node_modules` for the OAuth checks). Each
//!    is reinstalled only when its lock file changes.
//! 2. `cargo build -p mcp-tasks-e2e --example conformance-server`; one instance serves HTTP on a free loopback
//!    port for the whole run, and each stdio check starts its own. The OAuth checks have the
//!    provider and their own instance, started only when one of them is to run.
//! 3. One line per check, then `N passed, N failed`; the command fails on any failure. Each
//!    check's output is kept under `target/interop/logs`.

use crate::conformance::{Server, build_server, exec, free_port, install_node};
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest one check may take before it is killed and counted as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(180);

const USAGE: &str = "\
cargo xtask interop [--only TEXT]...

  --only TEXT   run only the checks whose label contains TEXT (for example `typescript`,
                `stdio`, `2026-07-28` or `elicitation`)
";

pub(crate) fn run(args: Vec<String>) -> Result<()> {
    let mut only = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--only" => only.push(args.next().context("--only needs a text")?),
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }

    let root = crate::project_root();
    let clients = root.join("tests").join("interop");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let work = target.join("interop");
    fs::create_dir_all(&work)?;

    let node = install_node(&work)?;
    let python = install_python_sdk(&work, &clients)?;
    install_npm_packages(&work, &clients, &node)?;
    let server_bin = build_server(&root, &target)?;

    let logs = work.join("logs");
    if logs.exists() {
        fs::remove_dir_all(&logs)?;
    }
    fs::create_dir_all(&logs)?;
    let home = work.join("home");
    fs::create_dir_all(&home)?;

    let port = free_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let server_log = work.join("server.log");
    let mut server = Server::start(&server_bin, addr, &server_log)?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    eprintln!(
        "interop: fixture server on {url} (log: {})",
        server_log.display()
    );

    let wants_oauth = only.is_empty()
        || OAUTH_CLIENTS
            .iter()
            .any(|c| only.iter().any(|o| oauth_label(c).contains(o.as_str())));
    let mut oauth = if wants_oauth {
        Some(OAuthFixture::start(&root, &work, &node, &server_bin)?)
    } else {
        None
    };

    let plan = Plan {
        clients: &clients,
        node: &node.node,
        python: &python,
        server_bin: &server_bin,
        url: &url,
        home: &home,
        oauth: oauth.as_ref(),
    };
    let checks: Vec<Check> = plan
        .checks()
        .into_iter()
        .filter(|c| only.is_empty() || only.iter().any(|o| c.label.contains(o.as_str())))
        .collect();
    if checks.is_empty() {
        bail!("no check matches {only:?}");
    }

    let (mut passed, mut failed) = (0, 0);
    for check in &checks {
        let started = Instant::now();
        let outcome = check.run(&clients, &logs);
        let secs = started.elapsed().as_secs_f64();
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("ok    {} ({secs:.1} s)", check.label);
            }
            Err(e) => {
                failed += 1;
                println!("FAIL  {} ({secs:.1} s): {e:#}", check.label);
            }
        }
        if let Some(exit) = server.exited()? {
            bail!(
                "the HTTP fixture server stopped during `{}` ({exit}); see {}",
                check.label,
                server_log.display()
            );
        }
        if let Some(oauth) = &mut oauth {
            oauth.check_running(&check.label)?;
        }
    }
    server.stop();
    drop(oauth);
    println!("\ninterop: {passed} passed, {failed} failed");
    if failed > 0 {
        bail!(
            "{failed} interop checks failed; their output is in {}",
            logs.display()
        );
    }
    Ok(())
}

/// The venv's Python, with the SDK of `requirements.txt` installed.
fn install_python_sdk(work: &Path, clients: &Path) -> Result<PathBuf> {
    let venv = work.join("venv");
    let python = if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    };
    let requirements = clients.join("requirements.txt");
    reinstall_on_change(
        &requirements,
        &work.join("installed-requirements.txt"),
        || {
            eprintln!("interop: pip install -r {}", requirements.display());
            exec(
                Command::new(&python)
                    .args([
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                        "-r",
                    ])
                    .arg(&requirements),
            )
        },
    )?;
    Ok(python)
}

/// `npm ci` in `tests/interop`, with the PyPI Node first on `PATH`.
fn install_npm_packages(
    work: &Path,
    clients: &Path,
    node: &crate::conformance::Node,
) -> Result<()> {
    let lock = clients.join("package-lock.json");
    let marker = work.join("installed-package-lock.json");
    if !clients.join("node_modules").exists() {
        let _ = fs::remove_file(&marker);
    }
    reinstall_on_change(&lock, &marker, || {
        eprintln!("interop: npm ci in {}", clients.display());
        exec(
            Command::new(&node.node)
                .arg(&node.npm_cli)
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(clients)
                .env("PATH", path_with(&node.node)?),
        )
    })
}

/// The clients of `tests/oauth/provider.mjs` the OAuth checks run as: `machine` may ask for
/// `echo:write tasks:read`, `reader` for `tasks:read` only.
const OAUTH_CLIENTS: [&str; 2] = ["machine", "reader"];

fn oauth_label(client: &str) -> String {
    format!("typescript-oauth http   2025-11-25  {client}")
}

/// The OpenID provider and the fixture as an OAuth resource server of it, both stopped when
/// dropped.
struct OAuthFixture {
    provider: Child,
    provider_log: PathBuf,
    server: Server,
    server_log: PathBuf,
    issuer: String,
    url: String,
}

impl OAuthFixture {
    /// `npm ci` in `tests/oauth` when its lock file changed, then the provider (fresh keys,
    /// a free port) and the fixture on another free port, requiring its tokens.
    fn start(
        root: &Path,
        work: &Path,
        node: &crate::conformance::Node,
        server_bin: &Path,
    ) -> Result<Self> {
        let dir = root.join("tests").join("oauth");
        let marker = work.join("installed-oauth-package-lock.json");
        if !dir.join("node_modules").exists() {
            let _ = fs::remove_file(&marker);
        }
        reinstall_on_change(&dir.join("package-lock.json"), &marker, || {
            eprintln!("interop: npm ci in {}", dir.display());
            exec(
                Command::new(&node.node)
                    .arg(&node.npm_cli)
                    .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                    .current_dir(&dir)
                    .env("PATH", path_with(&node.node)?),
            )
        })?;

        let oauth_work = work.join("oauth");
        fs::create_dir_all(&oauth_work)?;
        let keys = oauth_work.join("keys.json");
        let _ = fs::remove_file(&keys);
        let provider_log = oauth_work.join("provider.log");
        let mut provider = Command::new(&node.node)
            .arg(dir.join("provider.mjs"))
            .arg("--keys")
            .arg(&keys)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&provider_log)?)
            .spawn()
            .context("cannot start the OpenID provider")?;
        // Its first stdout line names the issuer; the line is read by a thread so that a
        // provider that never prints cannot hold the run.
        let stdout = provider
            .stdout
            .take()
            .context("no stdout of the provider")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut line = String::new();
            let _ = stdout.read_line(&mut line);
            let _ = tx.send(line);
            // Whatever follows is dropped, so the provider never writes to a closed pipe.
            let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        });
        let issuer = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => serde_json::from_str::<Value>(&line)
                .ok()
                .and_then(|v| v["issuer"].as_str().map(str::to_owned)),
            Err(_) => None,
        };
        let Some(issuer) = issuer else {
            let _ = provider.kill();
            let _ = provider.wait();
            bail!(
                "the OpenID provider did not start within 30 s; see {}",
                provider_log.display()
            );
        };

        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let url = format!("http://127.0.0.1:{port}/mcp");
        let server_log = oauth_work.join("server.log");
        let server = Server::start_with(
            server_bin,
            addr,
            &server_log,
            None,
            &["--oauth-issuer", &issuer, "--resource", &url],
        );
        let server = match server {
            Ok(server) => server,
            Err(e) => {
                let _ = provider.kill();
                let _ = provider.wait();
                return Err(e);
            }
        };
        eprintln!(
            "interop: OpenID provider at {issuer} (log: {}), its resource server on {url} (log: {})",
            provider_log.display(),
            server_log.display()
        );
        Ok(Self {
            provider,
            provider_log,
            server,
            server_log,
            issuer,
            url,
        })
    }

    /// Fails when the provider or the fixture stopped during the check `label`.
    fn check_running(&mut self, label: &str) -> Result<()> {
        if let Some(exit) = self.provider.try_wait()? {
            bail!(
                "the OpenID provider stopped during `{label}` ({exit}); see {}",
                self.provider_log.display()
            );
        }
        if let Some(exit) = self.server.exited()? {
            bail!(
                "the OAuth fixture server stopped during `{label}` ({exit}); see {}",
                self.server_log.display()
            );
        }
        Ok(())
    }
}

impl Drop for OAuthFixture {
    fn drop(&mut self) {
        self.server.stop();
        let _ = self.provider.kill();
        let _ = self.provider.wait();
    }
}

/// Runs `install` unless `marker` holds a copy of `lock` from the last successful install.
fn reinstall_on_change(
    lock: &Path,
    marker: &Path,
    install: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let wanted = fs::read(lock).with_context(|| format!("cannot read {}", lock.display()))?;
    if fs::read(marker).is_ok_and(|had| had == wanted) {
        return Ok(());
    }
    install()?;
    fs::write(marker, wanted)?;
    Ok(())
}

/// `PATH` with the directory of `program` first.
fn path_with(program: &Path) -> Result<OsString> {
    let dir = program.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(std::env::join_paths(std::iter::once(dir).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))?)
}

/// What the checks are run with.
struct Plan<'a> {
    clients: &'a Path,
    node: &'a Path,
    python: &'a Path,
    server_bin: &'a Path,
    url: &'a str,
    home: &'a Path,
    /// The provider and its resource server, when an OAuth check is to run.
    oauth: Option<&'a OAuthFixture>,
}

impl Plan<'_> {
    /// The fixture as a stdio command line, or the HTTP endpoint.
    fn target(&self, transport: Transport) -> Vec<OsString> {
        match transport {
            Transport::Stdio => vec![
                self.server_bin.into(),
                "--stdio".into(),
                "--store".into(),
                "memory".into(),
            ],
            Transport::Http => vec![self.url.into()],
        }
    }

    fn checks(&self) -> Vec<Check> {
        let mut checks = Vec::new();
        let script = |name: &str| self.clients.join(name).into_os_string();
        for transport in [Transport::Stdio, Transport::Http] {
            // `elicitation-once`: 30 sessions, 6 at a time, each asked one question by
            // `confirm_delete`; the handler must run once per question.
            for name in [
                "list",
                "call",
                "tasks",
                "cancel",
                "elicitation",
                "elicitation-once",
            ] {
                let mut args = vec![script("typescript_client.mjs"), name.into()];
                args.extend(self.target(transport));
                checks.push(Check {
                    label: format!("typescript-sdk  {}  2025-11-25  {name}", transport.name()),
                    program: self.node.to_path_buf(),
                    args,
                    envs: Vec::new(),
                    expect: Expect::ExitZero,
                });
            }
        }
        for transport in [Transport::Stdio, Transport::Http] {
            // `elicitation-order`: 40 sessions, 8 at a time, each running `confirm_delete`
            // as a task; ext-tasks answers a question it cannot match to a task it knows
            // (one that came before the response creating the task) with "cancel".
            let name = "elicitation-order";
            let mut args = vec![script("ext_tasks_client.mjs"), name.into()];
            args.extend(self.target(transport));
            checks.push(Check {
                label: format!("ext-tasks       {}  2025-11-25  {name}", transport.name()),
                program: self.node.to_path_buf(),
                args,
                envs: Vec::new(),
                expect: Expect::ExitZero,
            });
        }
        for transport in [Transport::Stdio, Transport::Http] {
            for era in [Era::V2025, Era::V2026] {
                for name in ["list", "call", "input-required"] {
                    let mut args = vec![
                        script("python_client.py"),
                        name.into(),
                        era.version().into(),
                    ];
                    args.extend(self.target(transport));
                    checks.push(Check {
                        label: format!(
                            "python-sdk      {}  {}  {name}",
                            transport.name(),
                            era.version()
                        ),
                        program: self.python.to_path_buf(),
                        args,
                        envs: Vec::new(),
                        expect: Expect::ExitZero,
                    });
                }
            }
        }
        let inspector = self
            .clients
            .join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
        for transport in [Transport::Stdio, Transport::Http] {
            for era in [Era::V2025, Era::V2026] {
                for (name, expect) in [
                    ("list", Expect::ToolsList(era)),
                    ("call", Expect::Greeting(era)),
                ] {
                    let mut args: Vec<OsString> = vec![
                        inspector.clone().into(),
                        "--cli".into(),
                        "--format".into(),
                        "json".into(),
                        "--quiet".into(),
                        "--protocol-era".into(),
                        era.inspector_era().into(),
                    ];
                    if name == "list" {
                        args.extend(["--method".into(), "tools/list".into()]);
                    } else {
                        args.extend([
                            "--method".into(),
                            "tools/call".into(),
                            "--tool-name".into(),
                            "greet".into(),
                            "--tool-args-json".into(),
                            r#"{"name":"inspector"}"#.into(),
                        ]);
                    }
                    args.extend(self.target(transport));
                    checks.push(Check {
                        label: format!(
                            "inspector-cli   {}  {}  {name}",
                            transport.name(),
                            era.version()
                        ),
                        program: self.node.to_path_buf(),
                        args,
                        // The Inspector keeps its settings under the home directory.
                        envs: vec![
                            ("HOME".into(), self.home.into()),
                            ("USERPROFILE".into(), self.home.into()),
                        ],
                        expect,
                    });
                }
            }
        }
        if let Some(oauth) = self.oauth {
            // The SDK's own OAuth client, from the 401 to a token; `reader` lacks
            // `echo:write`, so its `scoped_echo` call must be refused.
            for client in OAUTH_CLIENTS {
                checks.push(Check {
                    label: oauth_label(client),
                    program: self.node.to_path_buf(),
                    args: vec![
                        script("typescript_oauth_client.mjs"),
                        client.into(),
                        oauth.issuer.clone().into(),
                        oauth.url.clone().into(),
                    ],
                    envs: Vec::new(),
                    expect: Expect::ExitZero,
                });
            }
        }
        checks
    }
}

#[derive(Clone, Copy)]
enum Transport {
    Stdio,
    Http,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Self::Stdio => "stdio",
            Self::Http => "http ",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Era {
    V2025,
    V2026,
}

impl Era {
    fn version(self) -> &'static str {
        match self {
            Self::V2025 => "2025-11-25",
            Self::V2026 => "2026-07-28",
        }
    }

    fn inspector_era(self) -> &'static str {
        match self {
            Self::V2025 => "legacy",
            Self::V2026 => "modern",
        }
    }
}

/// How a check's outcome is judged.
#[derive(Clone, Copy)]
enum Expect {
    /// The client script checks the answers itself and exits 0 when they are right.
    ExitZero,
    /// The Inspector's JSON output of `tools/list` in this era.
    ToolsList(Era),
    /// The Inspector's JSON output of `tools/call greet {"name": "inspector"}` in this era.
    Greeting(Era),
}

impl Expect {
    fn judge(self, stdout: &str) -> Result<()> {
        let era = match self {
            Self::ExitZero => return Ok(()),
            Self::ToolsList(era) | Self::Greeting(era) => era,
        };
        let output: Value = serde_json::from_str(stdout.trim())
            .with_context(|| format!("the Inspector printed no JSON: {stdout:?}"))?;
        let result = &output["result"];
        match self {
            Self::ToolsList(_) => {
                let tools = result["tools"].as_array().context("no `tools` array")?;
                for name in ["greet", "slow_compute", "confirm_delete"] {
                    if !tools.iter().any(|t| t["name"] == name) {
                        bail!("tools/list lacks `{name}`");
                    }
                }
            }
            _ => {
                let text = &result["content"][0]["text"];
                if text != "Hello, inspector!" || result["isError"] != false {
                    bail!("tools/call greet answered {result}");
                }
                // Only 2026-07-28 results carry `resultType`.
                let modern = result.get("resultType").is_some();
                if modern != (era == Era::V2026) {
                    bail!("the answer is not of {}: {result}", era.version());
                }
            }
        }
        Ok(())
    }
}

/// One client process and what it must do.
struct Check {
    label: String,
    program: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    expect: Expect,
}

impl Check {
    fn run(&self, clients: &Path, logs: &Path) -> Result<()> {
        let stem: String = self.label.split_whitespace().collect::<Vec<_>>().join("-");
        let out_path = logs.join(format!("{stem}.out"));
        let err_path = logs.join(format!("{stem}.err"));
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .current_dir(clients)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out_path)?)
            .stderr(fs::File::create(&err_path)?)
            .spawn()
            .with_context(|| format!("cannot start {}", self.program.display()))?;
        let deadline = Instant::now() + CHECK_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "no answer within {} s; see {}",
                    CHECK_TIMEOUT.as_secs(),
                    err_path.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stdout = fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = fs::read_to_string(&err_path).unwrap_or_default();
        if !status.success() {
            // The client scripts name themselves on the line that says what was wrong.
            let said = stderr
                .lines()
                .find(|l| {
                    ["typescript-sdk: ", "ext-tasks: ", "python-sdk: "]
                        .iter()
                        .any(|p| l.starts_with(p))
                })
                .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
                .unwrap_or("(nothing on stderr)");
            bail!("{said} ({status}; see {})", err_path.display());
        }
        self.expect.judge(&stdout)
    }
}
