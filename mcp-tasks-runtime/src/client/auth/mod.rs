//! Authorization with protected servers over Streamable HTTP, as MCP authorization asks of
//! a client: bearer tokens, and the OAuth 2.1 flows that get them.
//!
//! A fixed token ([`ClientBuilder::bearer_token`](super::ClientBuilder::bearer_token)) is
//! sent as `Authorization: Bearer` with every request. An [`OAuth`] session
//! ([`ClientBuilder::oauth`](super::ClientBuilder::oauth)) gets its tokens itself:
//!
//! - A `401` names the server's Protected Resource Metadata (RFC 9728) in its
//!   `WWW-Authenticate: Bearer resource_metadata="…"` challenge (or the well-known URLs are
//!   tried); it names the authorization server, whose metadata (RFC 8414, or OpenID Connect
//!   discovery) names its endpoints.
//! - A machine with [`client_credentials`](OAuth::client_credentials) gets its token by
//!   that grant. A user signs in with the authorization code flow with PKCE (S256): the
//!   client listens on `127.0.0.1` on a port of the system's choosing, hands the URL to open
//!   to the [`browser`](OAuth::browser) callback, and takes the code from the redirect.
//!   Without a [`client id`](OAuth::client), it registers itself (RFC 7591) when the
//!   authorization server offers it.
//! - Every token request names the MCP server as its `resource` (RFC 8707), so the token is
//!   for this server alone; the challenge's `scope` (else the resource's
//!   `scopes_supported`) is asked for.
//! - Tokens are kept in a [`TokenStore`] (owner-only files), refreshed before they expire
//!   (refresh token, or client credentials again), and a `401` with a token sent renews it
//!   once and sends the request again.
//!
//! No token, secret or code is ever logged, nor quoted in an error: the types that hold
//! one print it as `[redacted]`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), mcp_tasks_runtime::client::ClientError> {
//! use mcp_tasks_runtime::client::{McpClient, OAuth, TokenStore};
//!
//! let url = "https://mcp.example.com/mcp";
//! let oauth = OAuth::new(url)
//!     .store(TokenStore::open("/home/me/.local/state/mcp-tasks/tokens")?)
//!     .browser(|url| eprintln!("open {url} to sign in"));
//! let client = McpClient::builder().http(url).oauth(oauth).connect().await?;
//! # Ok(()) }
//! ```

mod discovery;
mod flows;
mod tokens;

pub use tokens::TokenStore;

pub(crate) use discovery::Challenge;

use super::AuthError;
use discovery::Discovered;
use flows::{ClientAuth, Loopback, SignIn};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokens::Grant;

/// A bearer token or client secret: printed as `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(pub(crate) String);

impl Secret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// How the HTTP transport authorizes its requests.
#[derive(Clone, Debug)]
pub(crate) enum Auth {
    /// One fixed token.
    Bearer(Secret),
    /// Tokens an OAuth session gets and renews.
    OAuth(OAuth),
}

impl Auth {
    /// The token to send now, if any.
    pub(crate) async fn token(&self) -> Result<Option<Secret>, AuthError> {
        match self {
            Self::Bearer(token) => Ok(Some(token.clone())),
            Self::OAuth(oauth) => oauth.current().await,
        }
    }

    /// After a `401` to a request that carried `sent`: a token to send the request again
    /// with, or why there is none.
    pub(crate) async fn refused(
        &self,
        server: &str,
        sent: Option<&Secret>,
        challenge: Option<&Challenge>,
    ) -> Result<Secret, AuthError> {
        match self {
            Self::Bearer(_) => Err(AuthError::Rejected {
                server: server.to_owned(),
                reason: challenge.and_then(Challenge::reason),
            }),
            Self::OAuth(oauth) => oauth.after_refusal(sent, challenge).await,
        }
    }
}

/// The URL-opening callback of the authorization code flow.
type Browser = Arc<dyn Fn(&str) + Send + Sync>;

/// An OAuth 2.1 session with one protected MCP server: it discovers the authorization
/// server, gets tokens by client credentials or by the authorization code flow, keeps them
/// in a [`TokenStore`] (or in memory) and renews them. Cheap to clone; clones share the
/// tokens.
#[derive(Clone)]
pub struct OAuth {
    server: String,
    store: Option<TokenStore>,
    client_id: Option<String>,
    client_secret: Option<Secret>,
    machine: bool,
    scope: Option<String>,
    browser: Option<Browser>,
    login_timeout: Duration,
    refresh_margin: Option<Duration>,
    client_name: String,
    http: reqwest::Client,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// Held while tokens are got or renewed, so that concurrent requests renew once.
    busy: tokio::sync::Mutex<()>,
    /// The grant, when there is no store.
    memory: Mutex<Option<Grant>>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("server", &self.server)
            .field("store", &self.store)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret)
            .field("machine", &self.machine)
            .field("scope", &self.scope)
            .field("browser", &self.browser.is_some())
            .finish_non_exhaustive()
    }
}

/// What a session holds for its server, without the tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenInfo {
    /// The MCP endpoint.
    pub server: String,
    /// The resource the token is for.
    pub resource: String,
    /// The authorization server that issued it.
    pub issuer: String,
    /// The client it was issued to.
    pub client_id: String,
    /// `authorization_code` or `client_credentials`.
    pub flow: String,
    /// The scopes granted, as the authorization server said.
    pub scope: Option<String>,
    /// When the access token expires, if it said.
    pub expires_at: Option<SystemTime>,
    /// Whether it can be renewed without the user (a refresh token, or client credentials).
    pub renewable: bool,
}

impl TokenInfo {
    fn of(grant: &Grant) -> Self {
        Self {
            server: grant.server.clone(),
            resource: grant.resource.clone(),
            issuer: grant.issuer.clone(),
            client_id: grant.client_id.clone(),
            flow: grant.flow.clone(),
            scope: grant.scope.clone(),
            expires_at: grant
                .expires_at
                .map(|s| UNIX_EPOCH + Duration::from_secs(s)),
            renewable: grant.refresh_token.is_some()
                || (grant.flow == "client_credentials" && grant.client_secret.is_some()),
        }
    }
}

impl OAuth {
    /// A session for the MCP endpoint `server` (`https://mcp.example.com/mcp`), with its
    /// tokens in memory and no way to get one yet: give it a [`store`](Self::store), and
    /// [`client_credentials`](Self::client_credentials) or a [`browser`](Self::browser).
    pub fn new(server: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            store: None,
            client_id: None,
            client_secret: None,
            machine: false,
            scope: None,
            browser: None,
            login_timeout: Duration::from_secs(300),
            refresh_margin: None,
            client_name: "mcp-tasks".into(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .connect_timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
            state: Arc::default(),
        }
    }

    /// Keeps the tokens in `store`, where other sessions and later processes find them.
    #[must_use]
    pub fn store(mut self, store: TokenStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Gets tokens by client credentials, as the client `id` with `secret` (a machine,
    /// no user).
    #[must_use]
    pub fn client_credentials(mut self, id: impl Into<String>, secret: impl Into<String>) -> Self {
        self.client_id = Some(id.into());
        self.client_secret = Some(Secret(secret.into()));
        self.machine = true;
        self
    }

    /// Signs users in as a client registered beforehand (`secret` for a confidential one),
    /// instead of registering one dynamically.
    #[must_use]
    pub fn client(mut self, id: impl Into<String>, secret: Option<String>) -> Self {
        self.client_id = Some(id.into());
        self.client_secret = secret.map(Secret);
        self.machine = false;
        self
    }

    /// The scopes to ask for, instead of the challenge's (or the resource's
    /// `scopes_supported`).
    #[must_use]
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// Allows the authorization code flow: `open` is called with the URL the user opens in
    /// a browser (print it, or start a browser).
    #[must_use]
    pub fn browser(mut self, open: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.browser = Some(Arc::new(open));
        self
    }

    /// How long the sign-in in the browser may take (default five minutes).
    #[must_use]
    pub fn login_timeout(mut self, timeout: Duration) -> Self {
        self.login_timeout = timeout;
        self
    }

    /// Renews a token once less than `margin` of its life is left (default: a quarter of
    /// its life, at most a minute).
    #[must_use]
    pub fn refresh_margin(mut self, margin: Duration) -> Self {
        self.refresh_margin = Some(margin);
        self
    }

    /// The name a dynamically registered client gets (default `mcp-tasks`).
    #[must_use]
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// The MCP endpoint.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// What is held for the server, if anything (without the tokens).
    pub fn status(&self) -> Result<Option<TokenInfo>, AuthError> {
        Ok(self.load()?.as_ref().map(TokenInfo::of))
    }

    /// Gets a token now: asks the server (without a token) for its challenge, discovers its
    /// authorization server, and signs in by client credentials or in the browser.
    pub async fn login(&self) -> Result<TokenInfo, AuthError> {
        let _busy = self.state.busy.lock().await;
        let _lock = self.lock().await?;
        let challenge = self.probe().await?;
        let grant = self.get_new(challenge.as_ref(), true).await?;
        Ok(TokenInfo::of(&grant))
    }

    /// Forgets the server's tokens, after asking the authorization server to revoke them
    /// (when it offers revocation); whether there were any.
    pub async fn logout(&self) -> Result<bool, AuthError> {
        let _busy = self.state.busy.lock().await;
        let _lock = self.lock().await?;
        let Some(grant) = self.load()? else {
            return Ok(false);
        };
        flows::revoke(&self.http, &grant).await;
        match &self.store {
            Some(store) => store.forget(&self.server)?,
            None => self.state.memory.lock().map(|mut m| m.take()).is_ok(),
        };
        Ok(true)
    }

    /// The token to send now: the stored one, renewed first when it is about to expire.
    async fn current(&self) -> Result<Option<Secret>, AuthError> {
        match self.load()? {
            // Nothing to renew: the request goes without a token, and a refusal signs in.
            None => return Ok(None),
            Some(grant) if grant.fresh(self.refresh_margin) => {
                return Ok(Some(Secret(grant.access_token)));
            }
            Some(_) => {}
        }
        let _busy = self.state.busy.lock().await;
        let _lock = self.lock().await?;
        let Some(grant) = self.load()? else {
            return Ok(None);
        };
        if grant.fresh(self.refresh_margin) {
            return Ok(Some(Secret(grant.access_token)));
        }
        match flows::renew(&self.http, &grant).await {
            Ok(Some(renewed)) => {
                self.save(&renewed)?;
                Ok(Some(Secret(renewed.access_token)))
            }
            // Not renewable, or refused: the token may still be good; the server says.
            Ok(None) | Err(AuthError::Refused { .. }) => Ok(Some(Secret(grant.access_token))),
            Err(e) => Err(e),
        }
    }

    /// After the server refused `sent` (or no token): renew or get a new token.
    async fn after_refusal(
        &self,
        sent: Option<&Secret>,
        challenge: Option<&Challenge>,
    ) -> Result<Secret, AuthError> {
        let _busy = self.state.busy.lock().await;
        let _lock = self.lock().await?;
        let stored = self.load()?;
        if let Some(grant) = &stored {
            // Renewed meanwhile by another request or process.
            if Some(grant.access_token.as_str()) != sent.map(Secret::expose)
                && grant.fresh(self.refresh_margin)
            {
                return Ok(Secret(grant.access_token.clone()));
            }
            if sent.is_some() {
                match flows::renew(&self.http, grant).await {
                    Ok(Some(renewed)) => {
                        self.save(&renewed)?;
                        return Ok(Secret(renewed.access_token));
                    }
                    Ok(None) | Err(AuthError::Refused { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        match self.get_new(challenge, false).await {
            Ok(grant) => Ok(Secret(grant.access_token)),
            Err(AuthError::LoginNeeded { server, .. }) if sent.is_some() => {
                Err(AuthError::Rejected {
                    server,
                    reason: challenge.and_then(Challenge::reason),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// A new grant by client credentials or in the browser, stored.
    async fn get_new(
        &self,
        challenge: Option<&Challenge>,
        asked: bool,
    ) -> Result<Grant, AuthError> {
        let login_needed = || AuthError::LoginNeeded {
            server: self.server.clone(),
            reason: challenge.and_then(Challenge::reason),
        };
        if !self.machine && self.browser.is_none() {
            return Err(if asked {
                AuthError::LoginNeeded {
                    server: self.server.clone(),
                    reason: Some("signing in needs client credentials or a browser to open".into()),
                }
            } else {
                login_needed()
            });
        }
        let mut discovered = discovery::discover(&self.http, &self.server, challenge).await?;
        if let Some(scope) = &self.scope {
            discovered.scope = Some(scope.clone());
        }
        let secret = self.client_secret.as_ref().map(|s| s.expose().to_owned());
        let grant = if self.machine {
            let id = self.client_id.clone().unwrap_or_default();
            let client = ClientAuth::new(id, secret, &discovered.server);
            flows::client_credentials(&self.http, &self.server, &discovered, &client).await?
        } else {
            self.sign_in(&mut discovered, secret).await?
        };
        self.save(&grant)?;
        tracing::debug!(server = %self.server, flow = %grant.flow, "access token obtained");
        Ok(grant)
    }

    /// The authorization code flow, with this client, a stored registered one, or a newly
    /// registered one.
    async fn sign_in(
        &self,
        discovered: &mut Discovered,
        secret: Option<String>,
    ) -> Result<Grant, AuthError> {
        let open = self.browser.clone().expect("checked by the caller");
        let loopback = Loopback::bind().await?;
        // Refresh tokens come with `offline_access` from servers that have it.
        let offline = "offline_access";
        if discovered
            .server
            .scopes_supported
            .iter()
            .any(|s| s == offline)
            && let Some(scope) = &mut discovered.scope
            && !scope.split(' ').any(|s| s == offline)
        {
            scope.push_str(" offline_access");
        }
        let previous = self.load()?;
        let client = match (&self.client_id, previous) {
            (Some(id), _) => ClientAuth::new(id.clone(), secret, &discovered.server),
            (None, Some(p)) if p.registered && p.issuer == discovered.server.issuer => ClientAuth {
                id: p.client_id,
                secret: p.client_secret,
                method: p.auth_method,
                registered: true,
            },
            (None, _) => {
                flows::register(
                    &self.http,
                    &discovered.server,
                    &loopback.redirect_uri,
                    &self.client_name,
                )
                .await?
            }
        };
        let sign_in = SignIn {
            loopback,
            client,
            open: &*open,
            timeout: self.login_timeout,
        };
        flows::authorization_code(&self.http, &self.server, discovered, sign_in).await
    }

    /// Posts a JSON-RPC ping without a token: the server's challenge, if it answers `401`.
    async fn probe(&self) -> Result<Option<Challenge>, AuthError> {
        let response = self
            .http
            .post(&self.server)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .body(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#)
            .send()
            .await
            .map_err(|e| {
                AuthError::Discovery(format!("{}: {}", self.server, discovery::describe(&e)))
            })?;
        Ok(match response.status().as_u16() {
            401 => Some(
                response
                    .headers()
                    .get_all(reqwest::header::WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find_map(Challenge::parse)
                    .unwrap_or_default(),
            ),
            _ => None,
        })
    }

    async fn lock(&self) -> Result<Option<std::fs::File>, AuthError> {
        match &self.store {
            Some(store) => store.lock(&self.server).await.map(Some),
            None => Ok(None),
        }
    }

    fn load(&self) -> Result<Option<Grant>, AuthError> {
        match &self.store {
            Some(store) => store.load(&self.server),
            None => Ok(self
                .state
                .memory
                .lock()
                .map(|m| m.clone())
                .unwrap_or_default()),
        }
    }

    fn save(&self, grant: &Grant) -> Result<(), AuthError> {
        match &self.store {
            Some(store) => store.save(grant),
            None => {
                if let Ok(mut memory) = self.state.memory.lock() {
                    *memory = Some(grant.clone());
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ClientError, McpClient};
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on loopback that answers every request with `response` (or hangs up, when it
    /// is empty) and hands back the first bytes it received.
    async fn answering(response: &'static str) -> (u16, tokio::sync::oneshot::Receiver<Vec<u8>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut first = Some(tx);
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
                if let Some(tx) = first.take() {
                    let _ = tx.send(buf[..n].to_vec());
                }
            }
        });
        (port, rx)
    }

    #[tokio::test]
    async fn https_endpoints_are_reached_over_tls() {
        // A peer that reads the client's first bytes and hangs up.
        let (port, served) = answering("").await;
        let url = format!("https://127.0.0.1:{port}/mcp");
        let failed = McpClient::builder().http(&url).connect().await.unwrap_err();
        assert!(matches!(failed, ClientError::Connect { .. }), "{failed}");
        // 0x16: a TLS handshake record, the client hello.
        let first = tokio::time::timeout(Duration::from_secs(10), served).await;
        assert_eq!(first.expect("a connection").unwrap().first(), Some(&0x16));
    }

    #[tokio::test]
    async fn refusals_say_what_the_server_wants_without_quoting_the_token() {
        let challenge = "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer error=\"invalid_token\", error_description=\"the access token has expired\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        let (port, served) = answering(challenge).await;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let refused = McpClient::builder()
            .http(&url)
            .bearer_token("t0ken-value")
            .connect()
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, ClientError::Auth(AuthError::Rejected { reason: Some(r), .. }) if r == "the access token has expired"),
            "{refused}"
        );
        assert!(!refused.to_string().contains("t0ken-value"));
        let sent = tokio::time::timeout(Duration::from_secs(10), served).await;
        let sent = String::from_utf8(sent.unwrap().unwrap()).unwrap();
        assert!(sent.contains("authorization: Bearer t0ken-value"), "{sent}");

        // Without a token to give: log in.
        let (port, _) = answering(challenge).await;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let refused = McpClient::builder().http(&url).connect().await.unwrap_err();
        assert!(
            matches!(&refused, ClientError::Auth(AuthError::LoginNeeded { .. })),
            "{refused}"
        );
        assert!(
            refused
                .to_string()
                .contains(&format!("mcp-tasks login {url}"))
        );

        // A scope missing: which one.
        let forbidden = "HTTP/1.1 403 Forbidden\r\nwww-authenticate: Bearer error=\"insufficient_scope\", scope=\"reports:write\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        let (port, _) = answering(forbidden).await;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let refused = McpClient::builder()
            .http(&url)
            .bearer_token("t0ken-value")
            .connect()
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, ClientError::Auth(AuthError::InsufficientScope { scope, .. }) if scope == "reports:write"),
            "{refused}"
        );
    }

    #[test]
    fn secrets_print_redacted() {
        let oauth = OAuth::new("https://mcp.example/mcp").client_credentials("id", "s3cret");
        let auth = Auth::Bearer(Secret("t0ken".into()));
        let printed = format!("{oauth:?} {auth:?}");
        assert!(
            !printed.contains("s3cret") && !printed.contains("t0ken"),
            "{printed}"
        );
        assert!(printed.contains("[redacted]"));
    }
}
