//! A real OpenID provider (`oidc-provider`, started from `tests/oauth` with its pinned lock
//! file) and an HTTP client of a protected server, for the OAuth tests.
//!
//! Each test binary includes this module with `mod provider;` and uses a part of it.
#![allow(dead_code)]

use mcp_tasks_runtime::oauth::{OAuthConfig, ResourceServer};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::Duration;

/// The resource the tokens are asked for.
pub const RESOURCE: &str = "http://127.0.0.1:9/mcp";

/// A bound on anything that waits: a test that would hang fails instead.
pub const WITHIN: Duration = Duration::from_secs(30);

/// `tests/oauth` of the repository, found from the crate that runs the test.
pub fn provider_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("tests/oauth"))
        .find(|dir| dir.join("provider.mjs").is_file())
        .expect("tests/oauth/provider.mjs above the crate")
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
pub struct Provider {
    child: Child,
    pub issuer: String,
    pub keys: PathBuf,
}

impl Provider {
    /// A provider signing with the keys in `keys` (made if missing), on `port` (0: any).
    pub fn start(keys: &Path, port: u16) -> Self {
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

    pub fn fresh(name: &str) -> Self {
        let keys = std::env::temp_dir().join(format!(
            "mcp-tasks-oauth-{name}-{}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&keys);
        Self::start(&keys, 0)
    }

    pub fn port(&self) -> u16 {
        self.issuer.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// An access token for `resource` by client credentials, as `client`.
    pub async fn token(&self, client: &str, scope: &str, resource: &str) -> String {
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

    pub fn resource_server(&self) -> ResourceServer {
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

/// Reads a response body as JSON (the runtime builds `reqwest` without its `json` feature).
pub trait JsonValue {
    async fn json_value(self) -> Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> Value {
        serde_json::from_slice(&self.bytes().await.unwrap()).unwrap()
    }
}

/// A 2025-11-25 client of the protected server, with `token` (if any).
pub struct Caller {
    pub base: String,
    pub token: Option<String>,
    pub session: Option<String>,
    http: reqwest::Client,
}

impl Caller {
    pub fn new(base: &str, token: Option<String>) -> Self {
        Self {
            base: base.to_owned(),
            token,
            session: None,
            http: reqwest::Client::new(),
        }
    }

    pub async fn post(&self, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .http
            .post(format!("{}/mcp", self.base.trim_end_matches("/mcp")))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        let response = tokio::time::timeout(WITHIN, request.send())
            .await
            .expect("an answer in time")
            .unwrap();
        let (status, headers) = (response.status().as_u16(), response.headers().clone());
        let bytes = response.bytes().await.unwrap();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, headers, body)
    }

    /// Initializes a session; the HTTP status.
    pub async fn initialize(&mut self) -> u16 {
        let (status, headers, _) = self
            .post(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}}),
            )
            .await;
        self.session = headers
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        if self.session.is_some() {
            self.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await;
        }
        status
    }

    /// Sends a request: its status, headers and body.
    pub async fn send(
        &self,
        method: &str,
        params: Value,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        self.post(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .await
    }

    pub async fn call(&self, method: &str, params: Value) -> Value {
        let (status, _, body) = self
            .post(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }
}

/// The `_meta` of a 2026-07-28 request that declares elicitation and the tasks extension.
pub fn stateless_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    })
}

/// Sends a 2026-07-28 request to `url` (the MCP endpoint) with `token` (if any): its
/// status, headers and JSON body. `name` is the `Mcp-Name` header (a tool or a task id).
pub async fn stateless(
    url: &str,
    token: Option<&str>,
    method: &str,
    name: Option<&str>,
    mut params: Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    params["_meta"] = stateless_meta();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(body.to_string());
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = tokio::time::timeout(WITHIN, request.send())
        .await
        .expect("an answer in time")
        .unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let bytes = response.bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, body)
}

/// The `WWW-Authenticate` header of an answer, or `""`.
pub fn challenge(headers: &reqwest::header::HeaderMap) -> String {
    headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The first `taskId` anywhere in `value`.
pub fn task_id(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => map
            .get("taskId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| map.values().find_map(task_id)),
        Value::Array(items) => items.iter().find_map(task_id),
        _ => None,
    }
}
