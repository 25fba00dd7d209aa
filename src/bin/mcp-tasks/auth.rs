//! Protected servers: `--token`, client credentials, `login` and `logout`, and the stored
//! tokens every other command uses.

use crate::{COMPLETED, Context, Failure, UNAUTHORIZED, USAGE, interactive};
use clap::Args;
use mcp_tasks::client::{AuthError, ClientBuilder, OAuth, TokenInfo, TokenStore};
use serde_json::json;
use std::time::{SystemTime, UNIX_EPOCH};

/// How to authorize with a protected HTTP server.
#[derive(Args)]
pub struct AuthArgs {
    /// Send this bearer token with every HTTP request, instead of the stored tokens of
    /// `mcp-tasks login`.
    #[arg(
        long,
        global = true,
        value_name = "TOKEN",
        env = "MCP_TASKS_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// The OAuth client: with --client-secret, tokens come by client credentials (a
    /// machine, no user); alone, a browser sign-in uses this registered client instead of
    /// registering one.
    #[arg(long, global = true, value_name = "ID", env = "MCP_TASKS_CLIENT_ID")]
    client_id: Option<String>,
    /// The OAuth client's secret (prefer the environment variable: a command line is
    /// visible to other users).
    #[arg(
        long,
        global = true,
        value_name = "SECRET",
        env = "MCP_TASKS_CLIENT_SECRET",
        hide_env_values = true,
        requires = "client_id"
    )]
    client_secret: Option<String>,
    /// The OAuth scopes to ask for, space-separated (default: those the server names).
    #[arg(long, global = true, value_name = "SCOPES")]
    scope: Option<String>,
}

impl std::fmt::Debug for AuthArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthArgs")
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("scope", &self.scope)
            .finish()
    }
}

impl From<AuthError> for Failure {
    fn from(e: AuthError) -> Self {
        let code = match e {
            AuthError::Store(_) => crate::FAILED,
            _ => UNAUTHORIZED,
        };
        Failure(code, e.to_string())
    }
}

/// The OAuth session of `url`, with its tokens beside the handle store; the browser
/// sign-in is offered when `browser` (a terminal, or `login`).
fn session(cx: &Context, url: &str, browser: bool) -> Result<OAuth, Failure> {
    let args = &cx.cli.server.auth;
    let store = TokenStore::beside(&cx.store_path)?;
    let mut oauth = OAuth::new(url).store(store);
    oauth = match (&args.client_id, &args.client_secret) {
        (Some(id), Some(secret)) => oauth.client_credentials(id, secret),
        (Some(id), None) => oauth.client(id, None),
        _ => oauth,
    };
    if let Some(scope) = &args.scope {
        oauth = oauth.scope(scope);
    }
    if browser {
        oauth = oauth.browser(|address| {
            eprintln!("to sign in, open this address in a browser:\n\n  {address}\n");
            eprintln!("waiting for the sign-in…");
        });
    }
    Ok(oauth)
}

/// Authorizes the connection to `url`: `--token`, else the stored tokens (a sign-in in the
/// browser when in a terminal, client credentials when given).
pub fn authorize(
    cx: &Context,
    builder: ClientBuilder,
    url: &str,
) -> Result<ClientBuilder, Failure> {
    Ok(match &cx.cli.server.auth.token {
        Some(token) => builder.bearer_token(token),
        None => builder.oauth(session(cx, url, interactive(cx))?),
    })
}

fn endpoint<'a>(cx: &'a Context, url: Option<&'a str>, verb: &str) -> Result<&'a str, Failure> {
    if cx.cli.server.auth.token.is_some() {
        return Err(Failure(
            USAGE,
            format!("--token (or MCP_TASKS_TOKEN) is used as given: there is nothing to {verb}"),
        ));
    }
    url.or(cx.cli.server.url.as_deref())
        .ok_or_else(|| Failure(USAGE, format!("name the server: `mcp-tasks {verb} URL`")))
}

/// `mcp-tasks login URL`.
pub async fn login(cx: &Context, url: Option<&str>) -> Result<u8, Failure> {
    let url = endpoint(cx, url, "login")?;
    let info = session(cx, url, true)?.login().await?;
    print_info(cx, &info);
    Ok(COMPLETED)
}

/// `mcp-tasks logout URL`.
pub async fn logout(cx: &Context, url: Option<&str>) -> Result<u8, Failure> {
    let url = endpoint(cx, url, "logout")?;
    let forgot = session(cx, url, false)?.logout().await?;
    if cx.cli.json {
        println!("{}", json!({"server": url, "loggedOut": forgot}));
    } else if forgot {
        println!("logged out of {url}");
    } else {
        println!("no tokens were kept for {url}");
    }
    Ok(COMPLETED)
}

fn print_info(cx: &Context, info: &TokenInfo) {
    let expires = info
        .expires_at
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    if cx.cli.json {
        println!(
            "{}",
            json!({"server": info.server, "resource": info.resource, "issuer": info.issuer,
                   "clientId": info.client_id, "flow": info.flow, "scope": info.scope,
                   "expiresAt": expires, "renewable": info.renewable})
        );
        return;
    }
    let left = info
        .expires_at
        .and_then(|t| t.duration_since(SystemTime::now()).ok())
        .map(|d| format!(", expires in {} s", d.as_secs()))
        .unwrap_or_default();
    println!(
        "logged in to {} ({} by {}{}{}{})",
        info.server,
        info.flow.replace('_', " "),
        info.issuer,
        info.scope
            .as_ref()
            .map(|s| format!(", scopes: {s}"))
            .unwrap_or_default(),
        left,
        if info.renewable {
            ", renewed as needed"
        } else {
            ""
        }
    );
}
