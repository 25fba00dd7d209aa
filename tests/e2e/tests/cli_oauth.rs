//! The `mcp-tasks` command line against a protected server and a real OpenID provider
//! (`oidc-provider`): `login` in a browser (played by HTTP requests) and `logout`, the
//! stored tokens used by `call` and `tasks`, client credentials, `--token` and
//! `MCP_TASKS_TOKEN`; no token ever printed.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;
use support::oidc::{Protected, Provider, sign_in};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// The bound on every wait of these tests.
const WITHIN: Duration = Duration::from_secs(30);
const UNAUTHORIZED: i32 = 8;

fn home(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("mcp-tasks-cli-oauth-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn cli(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mcp-tasks-cli"));
    c.env("MCP_TASKS_HOME", home)
        .env_remove("MCP_TASKS_TOKEN")
        .env_remove("MCP_TASKS_CLIENT_ID")
        .env_remove("MCP_TASKS_CLIENT_SECRET")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

/// Everything a run printed, for the check that no secret is in it.
#[derive(Default)]
struct Printed(String);

impl Printed {
    async fn run(&mut self, mut command: Command, args: &[&str]) -> Output {
        let out = tokio::time::timeout(WITHIN, command.args(args).output())
            .await
            .expect("the command ends in time")
            .unwrap();
        self.note(&out);
        out
    }

    fn note(&mut self, out: &Output) {
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        eprintln!("-> {:?}\n{stdout}{stderr}", out.status.code());
        self.0.push_str(&stdout);
        self.0.push_str(&stderr);
    }

    fn assert_without(&self, secrets: &[&str]) {
        for secret in secrets {
            assert!(!self.0.contains(secret), "a secret was printed");
        }
    }
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The token files of a home, read.
fn token_files(home: &Path) -> Vec<(PathBuf, Value)> {
    let Ok(entries) = std::fs::read_dir(home.join("tokens")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let v = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            (p, v)
        })
        .collect()
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_signs_in_in_a_browser_calls_and_signs_out() {
    let provider = Provider::fresh("cli-login");
    let server = Protected::start(&provider).await;
    let home = home("login");
    let url = server.url.as_str();
    let mut printed = Printed::default();

    // Not signed in, and no terminal to sign in from: exit 8, saying how.
    let out = printed
        .run(cli(&home), &["--url", url, "call", "whoami"])
        .await;
    assert_eq!(out.status.code(), Some(UNAUTHORIZED));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("mcp-tasks login {url}")),
        "the error says how to log in"
    );

    // `login` prints the address to open; the browser signs in and comes back.
    let mut login = cli(&home);
    let mut child = login
        .args(["login", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = String::new();
    let address = tokio::time::timeout(WITHIN, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            said.push_str(&line);
            said.push('\n');
            if let Some(address) = line.trim().strip_prefix("http") {
                return format!("http{address}");
            }
        }
        panic!("no address to open: {said}")
    })
    .await
    .unwrap();
    let page = sign_in(&address, "dana").await;
    assert!(page.contains("Signed in"), "{page}");
    let mut out = tokio::time::timeout(WITHIN, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    while let Ok(Some(line)) = lines.next_line().await {
        said.push_str(&line);
    }
    out.stderr = said.into_bytes();
    printed.note(&out);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out).starts_with(&format!("logged in to {url}")),
        "{}",
        text(&out)
    );

    // The stored tokens, owner-only, serve the commands that follow.
    let files = token_files(&home);
    assert_eq!(files.len(), 1);
    #[cfg(unix)]
    {
        assert_eq!(mode(&home.join("tokens")), 0o700);
        assert_eq!(mode(&files[0].0), 0o600);
    }
    let out = printed
        .run(cli(&home), &["--url", url, "call", "whoami"])
        .await;
    assert_eq!((out.status.code(), text(&out)), (Some(0), "dana".into()));
    let out = printed
        .run(
            cli(&home),
            &[
                "--url",
                url,
                "--era",
                "2025-11-25",
                "--json",
                "call",
                "whoami",
            ],
        )
        .await;
    let called: Value = serde_json::from_slice(&out.stdout).unwrap();
    let task = called["taskId"].as_str().expect("ran as a task");
    // A known task needs no --url: its handle names the server, whose tokens are used.
    let out = printed
        .run(cli(&home), &["--json", "tasks", "get", task])
        .await;
    assert_eq!(out.status.code(), Some(0));
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["status"], "completed");

    // Logging out forgets them.
    let out = printed.run(cli(&home), &["logout", url]).await;
    assert_eq!(
        (out.status.code(), text(&out)),
        (Some(0), format!("logged out of {url}"))
    );
    assert!(token_files(&home).is_empty());
    let out = printed
        .run(cli(&home), &["--url", url, "call", "whoami"])
        .await;
    assert_eq!(out.status.code(), Some(UNAUTHORIZED));

    let stored = &files[0].1;
    printed.assert_without(&[
        stored["access_token"].as_str().unwrap(),
        stored["refresh_token"].as_str().unwrap(),
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_takes_client_credentials_or_a_token() {
    let provider = Provider::fresh("cli-machine");
    let server = Protected::start(&provider).await;
    let url = server.url.as_str();
    let mut printed = Printed::default();

    // Client credentials on the command line, then in the environment.
    let home_flags = home("machine-flags");
    let out = printed
        .run(
            cli(&home_flags),
            &[
                "--url",
                url,
                "--client-id",
                "machine",
                "--client-secret",
                "secret",
                "call",
                "whoami",
            ],
        )
        .await;
    assert_eq!((out.status.code(), text(&out)), (Some(0), "machine".into()));
    let home_env = home("machine-env");
    let mut login = cli(&home_env);
    login
        .env("MCP_TASKS_CLIENT_ID", "machine")
        .env("MCP_TASKS_CLIENT_SECRET", "secret");
    let out = printed.run(login, &["--json", "login", url]).await;
    assert_eq!(out.status.code(), Some(0));
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["flow"], "client_credentials");
    assert_eq!(info["clientId"], "machine");
    assert_eq!(info["issuer"], provider.issuer.as_str());
    let out = printed
        .run(cli(&home_env), &["--url", url, "call", "whoami"])
        .await;
    assert_eq!((out.status.code(), text(&out)), (Some(0), "machine".into()));

    // A token given as is, by flag or environment; a bad one is refused without a retry.
    let token = provider
        .token("machine", "echo:write tasks:read", url)
        .await;
    let bare = home("token");
    let out = printed
        .run(
            cli(&bare),
            &["--url", url, "--token", &token, "call", "whoami"],
        )
        .await;
    assert_eq!((out.status.code(), text(&out)), (Some(0), "machine".into()));
    let mut with_env = cli(&bare);
    with_env.env("MCP_TASKS_TOKEN", &token);
    let out = printed
        .run(with_env, &["--url", url, "call", "whoami"])
        .await;
    assert_eq!((out.status.code(), text(&out)), (Some(0), "machine".into()));
    assert!(token_files(&bare).is_empty(), "a given token is not stored");
    let wrong = support::oidc::tampered(&token);
    let out = printed
        .run(
            cli(&bare),
            &["--url", url, "--token", &wrong, "call", "whoami"],
        )
        .await;
    assert_eq!(out.status.code(), Some(UNAUTHORIZED));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused the access token"));

    // `--help` does not show the values of the secret variables.
    let mut help = cli(&bare);
    help.env("MCP_TASKS_TOKEN", &token)
        .env("MCP_TASKS_CLIENT_SECRET", "a-client-secret-value");
    let out = printed.run(help, &["call", "--help"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("MCP_TASKS_TOKEN"));

    printed.assert_without(&[&token, &wrong, "a-client-secret-value"]);
    for (_, file) in token_files(&home_flags)
        .iter()
        .chain(&token_files(&home_env))
    {
        printed.assert_without(&[file["access_token"].as_str().unwrap()]);
    }
}
