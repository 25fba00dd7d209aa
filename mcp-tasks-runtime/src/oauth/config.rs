//! The resource server's settings.

use jsonwebtoken::Algorithm;
use reqwest::Url;
use std::time::Duration;

/// The settings of a [`ResourceServer`](super::ResourceServer): which resource it protects,
/// which authorization servers it trusts, and how it checks their tokens.
#[derive(Clone, Debug)]
pub struct OAuthConfig {
    pub(super) resource: String,
    pub(super) issuers: Vec<String>,
    pub(super) algorithms: Vec<Algorithm>,
    pub(super) leeway: Duration,
    pub(super) fetch_timeout: Duration,
    pub(super) key_refresh_interval: Duration,
    pub(super) scopes_supported: Vec<String>,
    pub(super) resource_name: Option<String>,
    pub(super) kept_claims: Vec<String>,
    pub(super) introspection: Option<super::Introspection>,
}

/// Why a [`ResourceServer`](super::ResourceServer) could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A URI that is not an absolute `https` URI without a fragment (`http` only on
    /// loopback).
    #[error("{what} `{uri}` is not usable: {why}")]
    Uri {
        /// Which setting.
        what: &'static str,
        /// Its value.
        uri: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// No algorithm is allowed, or one that is not asymmetric.
    #[error("algorithms: {0}")]
    Algorithms(String),
    /// The HTTP client for key fetches could not be made.
    #[error("cannot make the HTTP client that fetches signing keys: {0}")]
    Client(String),
}

/// The asymmetric algorithms accepted unless [`OAuthConfig::algorithms`] says otherwise.
pub const DEFAULT_ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

impl OAuthConfig {
    /// Protects `resource`, the server's canonical URI (the MCP endpoint, e.g.
    /// `https://mcp.example.com/mcp`), with tokens from the authorization server `issuer`.
    ///
    /// Defaults: the asymmetric algorithms of [`DEFAULT_ALGORITHMS`], 30 s of leeway on
    /// `exp` and `nbf`, 5 s per key fetch, at most one key refresh per 30 s.
    pub fn new(resource: impl Into<String>, issuer: impl Into<String>) -> Self {
        Self {
            resource: resource.into(),
            issuers: vec![issuer.into()],
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            leeway: Duration::from_secs(30),
            fetch_timeout: Duration::from_secs(5),
            key_refresh_interval: Duration::from_secs(30),
            scopes_supported: Vec::new(),
            resource_name: None,
            kept_claims: Vec::new(),
            introspection: None,
        }
    }

    /// Trusts another authorization server as well.
    #[must_use]
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuers.push(issuer.into());
        self
    }

    /// The signature algorithms accepted: asymmetric ones only (HMAC and `none` are refused
    /// when the server is made).
    #[must_use]
    pub fn algorithms(mut self, algorithms: impl IntoIterator<Item = Algorithm>) -> Self {
        self.algorithms = algorithms.into_iter().collect();
        self
    }

    /// How far `exp` and `nbf` may be off (clock skew between the servers).
    #[must_use]
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// The bound on each metadata or key fetch, connection included.
    #[must_use]
    pub fn fetch_timeout(mut self, timeout: Duration) -> Self {
        self.fetch_timeout = timeout;
        self
    }

    /// The least time between two fetches of an issuer's keys: a token naming an unknown key
    /// fetches them again only this long after the last fetch, so that made-up key ids cannot
    /// flood the issuer.
    #[must_use]
    pub fn key_refresh_interval(mut self, interval: Duration) -> Self {
        self.key_refresh_interval = interval;
        self
    }

    /// The scopes the server knows, listed in its metadata (`scopes_supported`) and in the
    /// challenge of a request without a token.
    #[must_use]
    pub fn scopes_supported<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes_supported = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// A name for people, in the metadata (`resource_name`).
    #[must_use]
    pub fn resource_name(mut self, name: impl Into<String>) -> Self {
        self.resource_name = Some(name.into());
        self
    }

    /// Token claims kept in [`Principal::claims`](crate::principal::Principal::claims) (for
    /// example `email` or a tenant), besides the standard ones read into its fields.
    #[must_use]
    pub fn keep_claims<I, S>(mut self, claims: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.kept_claims = claims.into_iter().map(Into::into).collect();
        self
    }

    /// Accepts opaque access tokens (those that are not JWTs) by asking the authorization
    /// server about them (RFC 7662 introspection); JWTs are still validated locally.
    #[must_use]
    pub fn introspection(mut self, introspection: super::Introspection) -> Self {
        self.introspection = Some(introspection);
        self
    }

    /// The protected resource's canonical URI.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The trusted authorization servers.
    pub fn issuers(&self) -> &[String] {
        &self.issuers
    }

    pub(super) fn check(&self) -> Result<(), ConfigError> {
        check_uri("resource", &self.resource)?;
        for issuer in &self.issuers {
            check_uri("issuer", issuer)?;
        }
        if let Some(introspection) = &self.introspection {
            introspection.check()?;
        }
        if self.algorithms.is_empty() {
            return Err(ConfigError::Algorithms("none is allowed".into()));
        }
        if let Some(symmetric) = self
            .algorithms
            .iter()
            .find(|a| matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
        {
            return Err(ConfigError::Algorithms(format!(
                "{symmetric:?} is symmetric: a resource server accepts only signatures it cannot make"
            )));
        }
        Ok(())
    }
}

/// An absolute `https` URI without a fragment, or `http` on a loopback host.
pub(super) fn check_uri(what: &'static str, uri: &str) -> Result<Url, ConfigError> {
    crate::oauth_urls::usable(uri).map_err(|why| ConfigError::Uri {
        what,
        uri: uri.to_owned(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_must_be_https_or_loopback_http_without_fragments() {
        assert!(check_uri("resource", "https://mcp.example.com/mcp").is_ok());
        assert!(check_uri("resource", "http://127.0.0.1:8080/mcp").is_ok());
        assert!(check_uri("resource", "http://localhost/mcp").is_ok());
        assert!(check_uri("resource", "http://[::1]:9/mcp").is_ok());
        for bad in [
            "http://mcp.example.com/mcp",
            "https://mcp.example.com/mcp#top",
            "/mcp",
            "ftp://mcp.example.com",
        ] {
            assert!(check_uri("resource", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_asymmetric_algorithms_are_allowed() {
        let config = OAuthConfig::new("https://a.example/mcp", "https://id.example");
        assert!(config.check().is_ok());
        let hmac = config
            .clone()
            .algorithms([Algorithm::ES256, Algorithm::HS256]);
        assert!(matches!(hmac.check(), Err(ConfigError::Algorithms(_))));
        let none = config.algorithms([]);
        assert!(matches!(none.check(), Err(ConfigError::Algorithms(_))));
    }
}
