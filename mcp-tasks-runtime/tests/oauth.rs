//! The OAuth resource server against a real OpenID provider (`oidc-provider`, started from
//! `tests/oauth` with its pinned lock file): tokens it issues by client credentials are
//! accepted, and every way a token can be wrong is refused with its own reason, as is an
//! issuer whose keys cannot be fetched, within a bound.

#![cfg(feature = "oauth")]

use base64::Engine as _;
use mcp_tasks_runtime::oauth::{OAuthConfig, ResourceServer, TokenError};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::Duration;

/// The resource the tokens are asked for.
const RESOURCE: &str = "http://127.0.0.1:9/mcp";

/// A bound on anything that waits: a test that would hang fails instead.
const WITHIN: Duration = Duration::from_secs(30);

fn provider_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/oauth")
}

/// Installs the provider from its lock file once per test run.
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let dir = provider_dir();
        if dir.join("node_modules/oidc-provider").is_dir() {
            return;
        }
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .expect("npm, to install the OpenID provider the OAuth tests use");
        assert!(status.success(), "npm ci in {} failed", dir.display());
    });
}

/// A running provider, stopped when dropped.
struct Provider {
    child: Child,
    issuer: String,
    keys: PathBuf,
}

impl Provider {
    /// A provider signing with the keys in `keys` (made if missing), on `port` (0: any).
    fn start(keys: &Path, port: u16) -> Self {
        install();
        let mut child = Command::new("node")
            .arg(provider_dir().join("provider.mjs"))
            .args(["--keys", &keys.display().to_string()])
            .args(["--port", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node, to run the OpenID provider");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let started: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("the provider did not start: {line:?}"));
        Self {
            child,
            issuer: started["issuer"].as_str().unwrap().to_owned(),
            keys: keys.to_owned(),
        }
    }

    fn fresh(name: &str) -> Self {
        let keys = std::env::temp_dir().join(format!(
            "mcp-tasks-oauth-{name}-{}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&keys);
        Self::start(&keys, 0)
    }

    fn port(&self) -> u16 {
        self.issuer.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// An access token for `resource` by client credentials, as `client`.
    async fn token(&self, client: &str, scope: &str, resource: &str) -> String {
        let response = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some("secret"))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", scope),
                ("resource", resource),
            ])
            .send()
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        body["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token: {body}"))
            .to_owned()
    }

    fn resource_server(&self) -> ResourceServer {
        ResourceServer::new(OAuthConfig::new(RESOURCE, &self.issuer).leeway(Duration::ZERO))
            .unwrap()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn check(server: &ResourceServer, token: &str) -> Result<Value, TokenError> {
    let principal = tokio::time::timeout(WITHIN, server.authenticate(token))
        .await
        .expect("validation ends")?;
    Ok(json!({
        "sub": principal.subject,
        "scopes": principal.scopes,
        "client": principal.client_id,
        "iss": principal.issuer,
        "expires": principal.expires_at.is_some(),
    }))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(part: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_the_trusted_issuer_for_this_resource_are_accepted() {
    let provider = Provider::fresh("accept");
    let server = provider.resource_server();
    let token = provider.token("machine", "echo:write", RESOURCE).await;
    assert_eq!(
        check(&server, &token).await.unwrap(),
        json!({"sub": "machine", "scopes": ["echo:write"], "client": "machine",
               "iss": provider.issuer, "expires": true})
    );
    let rsa = provider
        .token("rsa", "echo:write tasks:read", RESOURCE)
        .await;
    let principal = check(&server, &rsa).await.unwrap();
    assert_eq!(principal["scopes"], json!(["echo:write", "tasks:read"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_wrong_token_is_refused_with_its_reason() {
    let provider = Provider::fresh("refuse");
    let server = provider.resource_server();
    let good = provider.token("machine", "echo:write", RESOURCE).await;
    let parts: Vec<&str> = good.split('.').collect();

    // Issued for another resource.
    let elsewhere = provider
        .token("machine", "echo:write", "http://127.0.0.1:9/other")
        .await;
    assert_eq!(
        check(&server, &elsewhere).await,
        Err(TokenError::WrongAudience)
    );

    // Not valid for an hour yet.
    let future = provider.token("future", "echo:write", RESOURCE).await;
    assert_eq!(check(&server, &future).await, Err(TokenError::NotYetValid));

    // A changed signature, and changed claims under the old signature.
    let mut signature = unb64(parts[2]);
    signature[10] ^= 1;
    let tampered = format!("{}.{}.{}", parts[0], parts[1], b64(&signature));
    assert_eq!(
        check(&server, &tampered).await,
        Err(TokenError::BadSignature)
    );
    let mut claims: Value = serde_json::from_slice(&unb64(parts[1])).unwrap();
    claims["scope"] = json!("echo:write admin");
    let widened = format!(
        "{}.{}.{}",
        parts[0],
        b64(claims.to_string().as_bytes()),
        parts[2]
    );
    assert_eq!(
        check(&server, &widened).await,
        Err(TokenError::BadSignature)
    );

    // `alg: none`, with the real claims and no signature.
    let none = format!("{}.{}.", b64(br#"{"alg":"none","typ":"at+jwt"}"#), parts[1]);
    assert!(matches!(
        check(&server, &none).await,
        Err(TokenError::Algorithm(_))
    ));

    // HS256 keyed with the issuer's public key (the classic confusion).
    let jwks: Value = reqwest::get(format!("{}/jwks", provider.issuer))
        .await
        .unwrap()
        .json_value()
        .await;
    let public = jwks["keys"][0].to_string();
    let hmac = jsonwebtoken::encode(
        &jsonwebtoken::Header {
            kid: jwks["keys"][0]["kid"].as_str().map(str::to_owned),
            ..jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256)
        },
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(public.as_bytes()).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        check(&server, &hmac).await,
        Err(TokenError::Algorithm(_))
    ));

    // A key id the issuer does not have.
    let mut header: Value = serde_json::from_slice(&unb64(parts[0])).unwrap();
    header["kid"] = json!("made-up");
    let unknown = format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        parts[1],
        parts[2]
    );
    assert_eq!(
        check(&server, &unknown).await,
        Err(TokenError::UnknownKey(Some("made-up".into())))
    );

    // Another issuer's token, and garbage.
    let other = Provider::fresh("refuse-other");
    let foreign = other.token("machine", "echo:write", RESOURCE).await;
    assert_eq!(
        check(&server, &foreign).await,
        Err(TokenError::UntrustedIssuer)
    );
    assert!(matches!(
        check(&server, "not a token").await,
        Err(TokenError::Malformed(_))
    ));

    // Expired: valid for 2 s, checked without leeway once they are over.
    let short = provider.token("short", "echo:write", RESOURCE).await;
    assert!(check(&server, &short).await.is_ok());
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(check(&server, &short).await, Err(TokenError::Expired));

    // The good one still passes.
    assert!(check(&server, &good).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_keys_are_fetched_again_and_the_old_ones_stop_working() {
    let first = Provider::fresh("rotate");
    let (port, keys) = (first.port(), first.keys.clone());
    let server = ResourceServer::new(
        OAuthConfig::new(RESOURCE, &first.issuer).key_refresh_interval(Duration::ZERO),
    )
    .unwrap();
    let old = first.token("machine", "echo:write", RESOURCE).await;
    assert!(check(&server, &old).await.is_ok());
    drop(first);
    // The same issuer, with new keys.
    std::fs::remove_file(&keys).unwrap();
    let second = Provider::start(&keys, port);
    let new = second.token("machine", "echo:write", RESOURCE).await;
    assert!(check(&server, &new).await.is_ok(), "the new key is fetched");
    assert!(matches!(
        check(&server, &old).await,
        Err(TokenError::UnknownKey(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_that_is_down_or_silent_is_an_error_in_bounded_time() {
    let provider = Provider::fresh("down");
    let token = provider.token("machine", "echo:write", RESOURCE).await;
    let issuer = provider.issuer.clone();
    drop(provider);
    // Nobody listens at the issuer any more.
    let server = provider_less(&issuer);
    assert!(matches!(
        check(&server, &token).await,
        Err(TokenError::KeysUnavailable(_))
    ));

    // An issuer that accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_issuer = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let claims =
        json!({"iss": silent_issuer, "sub": "x", "aud": RESOURCE, "exp": 4_000_000_000u64});
    let forged = format!(
        "{}.{}.{}",
        b64(br#"{"alg":"ES256","kid":"k"}"#),
        b64(claims.to_string().as_bytes()),
        b64(b"sig")
    );
    let server = ResourceServer::new(
        OAuthConfig::new(RESOURCE, &silent_issuer).fetch_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let refused = check(&server, &forged).await;
    assert!(
        matches!(&refused, Err(e @ TokenError::KeysUnavailable(_)) if e.is_unavailable()),
        "{refused:?}"
    );
    held.abort();
}

fn provider_less(issuer: &str) -> ResourceServer {
    ResourceServer::new(OAuthConfig::new(RESOURCE, issuer).fetch_timeout(Duration::from_secs(2)))
        .unwrap()
}

/// Reads a response body as JSON (the runtime builds `reqwest` without its `json` feature).
trait JsonValue {
    async fn json_value(self) -> Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> Value {
        serde_json::from_slice(&self.bytes().await.unwrap()).unwrap()
    }
}
