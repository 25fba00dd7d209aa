//! The client against a protected server and a real OpenID provider (`oidc-provider`): it
//! discovers the authorization server from the `401`, gets tokens by client credentials and
//! by the authorization code flow with PKCE on a loopback redirect (registering itself, or
//! as a client registered beforehand), keeps them in owner-only files, refreshes them before
//! they expire, renews a refused one once, and never logs one.

mod support;

use mcp_tasks::client::{
    AuthError, Called, ClientError, Era, McpClient, OAuth, TaskOutcome, TokenStore,
};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use support::oidc::{Protected, Provider, sign_in};

/// The bound on every wait of these tests.
const WITHIN: Duration = Duration::from_secs(30);

/// Everything the runtime logs, at every level, while these tests run.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("mcp_tasks_runtime=trace,mcp_tasks=trace")
            .with_ansi(false)
            .with_writer(move || Capture(writer.clone()))
            .finish();
        tracing_subscriber::util::SubscriberInitExt::init(subscriber);
        buffer
    })
    .clone()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Fails if a secret of `file` (tokens, client secret) is in the logs.
fn assert_not_logged(file: &Value) {
    let logs = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    assert!(!logs.is_empty(), "the runtime logged something");
    for key in ["access_token", "refresh_token", "client_secret"] {
        if let Some(secret) = file[key].as_str() {
            assert!(!logs.contains(secret), "{key} is in the logs");
        }
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mcp-tasks-client-oauth-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The one token file of `store`, read.
fn stored(store: &TokenStore, server: &str) -> Value {
    serde_json::from_slice(&std::fs::read(store.file(server)).unwrap()).unwrap()
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Calls `whoami`: what it answered, and whether it ran as a task.
async fn whoami_task(client: &McpClient) -> (String, bool) {
    match client.call_tool("whoami", json!({})).await.unwrap() {
        Called::Done(output) => (output.text(), false),
        Called::Task(task) => {
            let deadline = Some(tokio::time::Instant::now() + WITHIN);
            match task.wait(deadline).await.unwrap() {
                TaskOutcome::Completed(output) => (output.text(), true),
                other => panic!("{other:?}"),
            }
        }
    }
}

async fn whoami(client: &McpClient) -> String {
    whoami_task(client).await.0
}

async fn connect(url: &str, oauth: OAuth, era: Option<Era>) -> Result<McpClient, ClientError> {
    let mut builder = McpClient::builder().http(url).oauth(oauth);
    if let Some(era) = era {
        builder = builder.era(era);
    }
    tokio::time::timeout(WITHIN, builder.connect())
        .await
        .expect("connects in time")
}

/// An [`OAuth`] session whose browser is [`sign_in`] as `login`.
fn browser_session(url: &str, store: &TokenStore, login: &'static str) -> OAuth {
    let mut encoded = reqwest::Url::parse("http://x/").unwrap();
    encoded.query_pairs_mut().append_pair("resource", url);
    let resource = encoded.query().unwrap().to_owned();
    OAuth::new(url)
        .store(store.clone())
        .login_timeout(WITHIN)
        .browser(move |address| {
            let address = address.to_owned();
            assert!(address.contains("code_challenge_method=S256"), "{address}");
            assert!(address.contains(&resource), "{address}");
            tokio::spawn(async move { sign_in(&address, login).await });
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_gets_its_token_by_client_credentials_and_calls_a_task_tool() {
    logs();
    let provider = Provider::fresh("client-cc");
    let server = Protected::start(&provider).await;
    let store = TokenStore::open(temp_dir("cc")).unwrap();

    // Without a way to get a token, the 401 says to log in.
    let refused = connect(&server.url, OAuth::new(&server.url), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ClientError::Auth(AuthError::LoginNeeded { server: s, .. }) if *s == server.url),
        "{refused}"
    );

    for era in [Era::V2026_07_28, Era::V2025_11_25] {
        let oauth = OAuth::new(&server.url)
            .store(store.clone())
            .client_credentials("machine", "secret");
        let client = connect(&server.url, oauth, Some(era)).await.unwrap();
        let (who, as_task) = whoami_task(&client).await;
        assert_eq!(who, "machine", "{era}");
        // 2025-11-25 runs a tool with optional task support as a task: `tasks/get` and
        // `tasks/result` carry the token too.
        assert!(as_task || era == Era::V2026_07_28);
        client.close(Duration::from_secs(1)).await;
    }
    // One discovery from the first 401; the token was kept and used since.
    assert_eq!(
        server.refusals(),
        2,
        "the two first requests without a token"
    );
    let file = stored(&store, &server.url);
    assert_eq!(file["flow"], "client_credentials");
    assert_eq!(file["resource"], server.url.as_str());
    assert_eq!(file["issuer"], provider.issuer.as_str());
    // Another session on the same store needs no credentials while the token lasts.
    let client = connect(
        &server.url,
        OAuth::new(&server.url).store(store.clone()),
        None,
    )
    .await
    .unwrap();
    assert_eq!(whoami(&client).await, "machine");
    assert_not_logged(&file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_signs_in_with_pkce_on_a_loopback_redirect_after_registering_the_client() {
    logs();
    let provider = Provider::fresh("client-code");
    let server = Protected::start(&provider).await;
    let dir = temp_dir("code");
    let store = TokenStore::beside(dir.join("handles.db")).unwrap();
    let client = connect(
        &server.url,
        browser_session(&server.url, &store, "alice"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(whoami(&client).await, "alice");
    let file = stored(&store, &server.url);
    assert_eq!(file["flow"], "authorization_code");
    assert_eq!(
        file["registered"], true,
        "registered dynamically: {}",
        file["client_id"]
    );
    assert_eq!(file["auth_method"], "none");
    assert!(
        file["refresh_token"].is_string(),
        "offline_access was asked for"
    );
    let scope = file["scope"].as_str().unwrap();
    assert!(
        scope.contains("echo:write") && scope.contains("tasks:read"),
        "{scope}"
    );
    #[cfg(unix)]
    {
        assert_eq!(mode(&dir.join("tokens")), 0o700);
        assert_eq!(mode(&store.file(&server.url)), 0o600);
    }

    // Signing in again reuses the registered client.
    let oauth = browser_session(&server.url, &store, "bob");
    let info = tokio::time::timeout(WITHIN, oauth.login())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.client_id, file["client_id"].as_str().unwrap());
    assert!(info.renewable);
    let client = connect(&server.url, oauth.clone(), None).await.unwrap();
    assert_eq!(whoami(&client).await, "bob");
    assert_not_logged(&stored(&store, &server.url));

    // Logging out revokes and forgets the tokens: the refresh token is dead.
    let revoked = stored(&store, &server.url);
    assert!(oauth.logout().await.unwrap());
    assert!(!store.file(&server.url).exists());
    assert!(!oauth.logout().await.unwrap());
    let response = reqwest::Client::new()
        .post(format!("{}/token", provider.issuer))
        .form(&[
            ("grant_type", "refresh_token"),
            ("client_id", revoked["client_id"].as_str().unwrap()),
            ("refresh_token", revoked["refresh_token"].as_str().unwrap()),
        ])
        .send()
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(answer["error"], "invalid_grant", "{answer}");
    assert_not_logged(&revoked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_refreshed_before_they_expire_without_a_refusal() {
    logs();
    let provider = Provider::fresh("client-refresh");
    let server = Protected::start(&provider).await;
    let store = TokenStore::open(temp_dir("refresh")).unwrap();
    // A client registered beforehand: no registration.
    let oauth = browser_session(&server.url, &store, "carol").client("native", None);
    tokio::time::timeout(WITHIN, oauth.login())
        .await
        .unwrap()
        .unwrap();
    let first = stored(&store, &server.url);
    assert_eq!(first["client_id"], "native");
    assert_eq!(first["registered"], false);
    let refusals = server.refusals();

    // Tokens that have less than the margin left are refreshed before they are sent: with
    // a margin longer than their life, every use refreshes.
    let eager = OAuth::new(&server.url)
        .store(store.clone())
        .refresh_margin(Duration::from_secs(3600));
    let client = connect(&server.url, eager, Some(Era::V2025_11_25))
        .await
        .unwrap();
    let after_connect = stored(&store, &server.url);
    assert_ne!(after_connect["access_token"], first["access_token"]);
    assert_ne!(
        after_connect["refresh_token"], first["refresh_token"],
        "the provider rotates a public client's refresh token"
    );
    assert_eq!(whoami(&client).await, "carol");
    assert_ne!(
        stored(&store, &server.url)["access_token"],
        after_connect["access_token"]
    );
    assert_eq!(server.refusals(), refusals, "no request was refused");
    assert_not_logged(&first);
    assert_not_logged(&after_connect);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_renewed_once_and_the_request_sent_again() {
    logs();
    let provider = Provider::fresh("client-retry");
    let server = Protected::start(&provider).await;
    let store = TokenStore::open(temp_dir("retry")).unwrap();
    let oauth = OAuth::new(&server.url)
        .store(store.clone())
        .client_credentials("machine", "secret");
    oauth.login().await.unwrap();

    // A token the server refuses, though it has not expired.
    let path = store.file(&server.url);
    let mut file = stored(&store, &server.url);
    let good = file["access_token"].as_str().unwrap().to_owned();
    let bad = support::oidc::tampered(&good);
    file["access_token"] = json!(bad);
    std::fs::write(&path, file.to_string()).unwrap();
    let before = server.refusals();
    let client = connect(&server.url, oauth.clone(), Some(Era::V2026_07_28))
        .await
        .unwrap();
    assert_eq!(whoami(&client).await, "machine");
    assert_eq!(server.refusals(), before + 1, "refused once, then renewed");
    let renewed = stored(&store, &server.url);
    assert_ne!(renewed["access_token"], json!(bad));

    // A token that stays refused after its renewal ends the request: one retry, no loop.
    let fixed = McpClient::builder().http(&server.url).bearer_token(
        provider
            .token("machine", "echo:write", "http://127.0.0.1:9/other")
            .await,
    );
    let before = server.refusals();
    let refused = fixed.connect().await.unwrap_err();
    assert!(
        matches!(&refused, ClientError::Auth(AuthError::Rejected { reason: Some(r), .. }) if r.contains("not issued for this resource")),
        "{refused}"
    );
    assert_eq!(server.refusals(), before + 1);
    assert_not_logged(&file);
    assert_not_logged(&renewed);
}
