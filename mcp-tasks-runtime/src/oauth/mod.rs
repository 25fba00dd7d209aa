//! An OAuth 2.1 resource server (feature `oauth`), as MCP authorization asks of a server
//! that authorizes its requests.
//!
//! [`ResourceServer`] validates bearer access tokens that are JWTs:
//!
//! - Signing keys come from each trusted issuer's JWKS, found through RFC 8414
//!   authorization server metadata (or OpenID Connect discovery), cached, and fetched again
//!   when a token names a key id the cache does not know (at most once per
//!   [`key_refresh_interval`](OAuthConfig::key_refresh_interval)). Every fetch is bounded by
//!   [`fetch_timeout`](OAuthConfig::fetch_timeout).
//! - Only the configured issuers are trusted, and their keys are the only ones fetched: a
//!   token cannot make the server fetch anything by naming another issuer.
//! - The token must be issued for this server: its `aud` names the server's canonical
//!   resource URI (RFC 8707); `iss`, `exp` and `sub` are required, `exp` and `nbf` are checked
//!   with a small [`leeway`](OAuthConfig::leeway).
//! - Only asymmetric algorithms from an allow-list are accepted (`none` and HMAC never), and a
//!   key's own `alg`, when it names one, must be the token's.
//! - Opaque tokens, with [`Introspection`] configured, are introspected (RFC 7662) and the
//!   answer held to the same rules (active, a trusted issuer, this resource, not expired),
//!   then kept for a short while under the token's SHA-256.
//!
//! It also answers for the server: the RFC 9728 Protected Resource Metadata document
//! ([`metadata`](ResourceServer::metadata), served at
//! [`metadata_path`](ResourceServer::metadata_path)) and the `WWW-Authenticate` challenges
//! of a `401` or a `403` ([`challenge`](ResourceServer::challenge),
//! [`insufficient_scope`](ResourceServer::insufficient_scope)).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_tasks_runtime::oauth::{OAuthConfig, ResourceServer};
//!
//! let server = ResourceServer::new(
//!     OAuthConfig::new("https://mcp.example.com/mcp", "https://id.example.com")
//!         .scopes_supported(["reports:read", "reports:write"]),
//! )?;
//! let principal = server.authenticate("eyJhbGciOi…").await?;
//! println!("{} may {:?}", principal.subject, principal.scopes);
//! # Ok(())
//! # }
//! ```

//!
//! As the HTTP transport's authenticator ([`HttpConfig::authenticate`]) it makes the server
//! a resource server: a `401` with the challenge for a request without a valid token, a
//! `503` while the issuer's keys cannot be fetched, the token's
//! [`Principal`] (subject, scopes, client, issuer) for the
//! tools and their scopes, a `403` with `error="insufficient_scope"` for a call of a tool
//! whose scopes the token lacks, and the metadata served beside the endpoint.
//!
//! ```no_run
//! use mcp_tasks_runtime::oauth::{OAuthConfig, ResourceServer};
//! use mcp_tasks_runtime::transport::http::HttpConfig;
//!
//! # async fn run(server: mcp_tasks_runtime::Server) -> Result<(), Box<dyn std::error::Error>> {
//! let rs = ResourceServer::new(
//!     OAuthConfig::new("https://mcp.example.com/mcp", "https://id.example.com")
//!         .scopes_supported(["reports:write"]),
//! )?;
//! let handle = server.serve_http(HttpConfig::new().authenticate(rs)).await?;
//! # handle.wait().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Mounted in an axum app, [`require_bearer`] in front of other routes checks the same
//! tokens; a request it lets through carries the principal to the MCP endpoint.
//!
//! [`HttpConfig::authenticate`]: crate::transport::http::HttpConfig::authenticate

mod config;
mod introspect;
mod keys;
mod layer;
mod metadata;
mod token;

pub use config::{ConfigError, DEFAULT_ALGORITHMS, OAuthConfig};
pub use introspect::Introspection;
pub use jsonwebtoken::Algorithm;
pub use layer::require_bearer;
pub use metadata::WELL_KNOWN;
pub use token::TokenError;

use crate::principal::Principal;
use keys::IssuerKeys;
use std::sync::Arc;

/// Validates access tokens for one protected resource and describes it to clients.
///
/// Cheap to clone: clones share the key caches.
#[derive(Clone, Debug)]
pub struct ResourceServer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: OAuthConfig,
    issuers: Vec<IssuerKeys>,
    http: reqwest::Client,
    introspected: introspect::Cache,
}

impl ResourceServer {
    /// A resource server with `config`; refused when a URI in it is not `https` (plain `http`
    /// is accepted on loopback hosts only) or has a fragment.
    pub fn new(config: OAuthConfig) -> Result<Self, ConfigError> {
        config.check()?;
        let http = reqwest::Client::builder()
            .timeout(config.fetch_timeout)
            .connect_timeout(config.fetch_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ConfigError::Client(e.to_string()))?;
        let issuers = config
            .issuers
            .iter()
            .map(|issuer| IssuerKeys::new(issuer.clone(), http.clone()))
            .collect();
        install_crypto();
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                issuers,
                http,
                introspected: introspect::Cache::default(),
            }),
        })
    }

    /// The settings it was made with.
    pub fn config(&self) -> &OAuthConfig {
        &self.inner.config
    }

    /// Validates a bearer access token; the principal it names. A JWT is checked here; with
    /// [`OAuthConfig::introspection`], any other token is introspected (its answer kept for
    /// a short while, under the token's hash).
    pub async fn authenticate(&self, token: &str) -> Result<Principal, TokenError> {
        let inner = &self.inner;
        match &inner.config.introspection {
            Some(introspection) if introspect::is_opaque(token) => {
                introspect::introspect(
                    &inner.config,
                    introspection,
                    &inner.http,
                    &inner.introspected,
                    token,
                )
                .await
            }
            _ => token::validate(&inner.config, &inner.issuers, token).await,
        }
    }
}

/// Makes RustCrypto the provider `jsonwebtoken` verifies with, unless the application chose
/// one already.
fn install_crypto() {
    // An error means a provider is installed already: the application's, or ours.
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
}
