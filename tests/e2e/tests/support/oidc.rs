//! A real OpenID provider (`oidc-provider`, from `tests/oauth` with its pinned lock file), a
//! server behind the OAuth resource server layer, and a browser made of HTTP requests that
//! signs in on the provider's development login and consent pages.

use mcp_tasks_runtime::axum::{Router, middleware};
use mcp_tasks_runtime::model::{CallToolResult, Content, TaskSupport};
use mcp_tasks_runtime::oauth::{OAuthConfig, ResourceServer, require_bearer};
use mcp_tasks_runtime::transport::http::HttpConfig;
use mcp_tasks_runtime::{Server, TaskContext, Tool};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The OpenID provider the runtime's OAuth tests start, and their HTTP client of a
/// protected server.
#[path = "../../../../mcp-tasks-runtime/tests/provider/mod.rs"]
pub mod provider;
pub use provider::Provider;

/// A server with one tool, `whoami` (it answers with the caller's name, as a task when the
/// client asks), behind [`require_bearer`] for tokens of `provider`, on loopback.
pub struct Protected {
    /// The MCP endpoint, which is also the protected resource.
    pub url: String,
    /// How many requests were answered `401`.
    pub unauthorized: Arc<AtomicUsize>,
}

impl Protected {
    pub async fn start(provider: &Provider) -> Self {
        let whoami = |cx: TaskContext, _| async move {
            let who = cx
                .principal()
                .map_or("nobody", |p| p.subject.as_str())
                .to_owned();
            Ok(CallToolResult::success(vec![Content::text(who)]))
        };
        let server = Server::builder()
            .tool(Tool::new("whoami", whoami).task_support(TaskSupport::Optional))
            .build()
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let rs = ResourceServer::new(
            OAuthConfig::new(&url, &provider.issuer).scopes_supported(["echo:write", "tasks:read"]),
        )
        .unwrap();
        let unauthorized = Arc::new(AtomicUsize::new(0));
        let counted = unauthorized.clone();
        let count = move |request: mcp_tasks_runtime::axum::extract::Request,
                          next: middleware::Next| {
            let counted = counted.clone();
            async move {
                let response = next.run(request).await;
                if response.status().as_u16() == 401 {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                response
            }
        };
        let app = Router::new()
            .merge(server.http_router(HttpConfig::new().path("/mcp")))
            .layer(middleware::from_fn_with_state(rs.clone(), require_bearer))
            .merge(rs.metadata_router())
            .layer(middleware::from_fn(count));
        tokio::spawn(async move { mcp_tasks_runtime::axum::serve(listener, app).await });
        Self { url, unauthorized }
    }

    pub fn refusals(&self) -> usize {
        self.unauthorized.load(Ordering::SeqCst)
    }
}

/// Plays the user's browser: opens `address` (an authorization request), signs in as
/// `login` on the provider's development login page, consents, and follows the redirect
/// back to the client's loopback listener; the last page's body.
pub async fn sign_in(address: &str, login: &str) -> String {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut cookies = BTreeMap::<String, String>::new();
    let mut url = reqwest::Url::parse(address).unwrap();
    let mut form: Option<Vec<(&str, String)>> = None;
    for _ in 0..20 {
        let jar: Vec<String> = cookies.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let request = match form.take() {
            Some(fields) => http.post(url.clone()).form(&fields),
            None => http.get(url.clone()),
        };
        let response = request
            .header("cookie", jar.join("; "))
            .send()
            .await
            .unwrap();
        for set in response.headers().get_all("set-cookie") {
            let pair = set.to_str().unwrap().split(';').next().unwrap();
            if let Some((name, value)) = pair.split_once('=') {
                if value.is_empty() {
                    cookies.remove(name);
                } else {
                    cookies.insert(name.to_owned(), value.to_owned());
                }
            }
        }
        if response.status().is_redirection() {
            let location = response.headers()["location"].to_str().unwrap();
            url = url.join(location).unwrap();
            continue;
        }
        let body = response.text().await.unwrap();
        let action = body
            .split("action=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .map(|a| url.join(a).unwrap());
        if body.contains(r#"name="prompt" value="login""#) {
            url = action.unwrap();
            form = Some(vec![
                ("prompt", "login".into()),
                ("login", login.into()),
                ("password", "any".into()),
            ]);
        } else if body.contains(r#"name="prompt" value="consent""#) {
            url = action.unwrap();
            form = Some(vec![("prompt", "consent".into())]);
        } else {
            return body;
        }
    }
    panic!("the sign-in did not end");
}

/// `token` with a character of its signature changed (not the last, whose low bits may not
/// count).
pub fn tampered(token: &str) -> String {
    let at = token.len() - 10;
    let old = &token[at..=at];
    let new = if old == "A" { "B" } else { "A" };
    format!("{}{new}{}", &token[..at], &token[at + 1..])
}
