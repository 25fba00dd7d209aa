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
//! Mounted in an axum app, [`require_bearer`] in front of the MCP endpoint makes the server
//! a resource server: a `401` with the challenge for a request without a valid token, a
//! `503` while the issuer's keys cannot be fetched, and the token's owner as the
//! [`Principal`](crate::transport::http::Principal) that owns the tasks it creates;
//! [`metadata_router`](ResourceServer::metadata_router) serves the metadata beside it.
//!
//! ```no_run
//! use mcp_tasks_runtime::axum::{Router, middleware};
//! use mcp_tasks_runtime::oauth::{OAuthConfig, ResourceServer, require_bearer};
//! use mcp_tasks_runtime::transport::http::HttpConfig;
//!
//! # fn app(server: mcp_tasks_runtime::Server) -> Result<Router, Box<dyn std::error::Error>> {
//! let rs = ResourceServer::new(OAuthConfig::new("https://mcp.example.com/mcp", "https://id.example.com"))?;
//! let app = Router::new()
//!     .merge(server.http_router(HttpConfig::new().path("/mcp")))
//!     .layer(middleware::from_fn_with_state(rs.clone(), require_bearer))
//!     .merge(rs.metadata_router());
//! # Ok(app)
//! # }
//! ```

mod config;
mod keys;
mod layer;
mod metadata;
mod token;

pub use config::{ConfigError, DEFAULT_ALGORITHMS, OAuthConfig};
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
            inner: Arc::new(Inner { config, issuers }),
        })
    }

    /// The settings it was made with.
    pub fn config(&self) -> &OAuthConfig {
        &self.inner.config
    }

    /// Validates a bearer access token; the principal it names.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, TokenError> {
        token::validate(&self.inner.config, &self.inner.issuers, token).await
    }
}

/// Makes RustCrypto the provider `jsonwebtoken` verifies with, unless the application chose
/// one already.
fn install_crypto() {
    // An error means a provider is installed already: the application's, or ours.
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
}
