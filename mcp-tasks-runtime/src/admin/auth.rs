//! Who may use the console, and the checks every request passes first.

use crate::context::BoxFuture;
use axum::http::{HeaderMap, Method, StatusCode, header};
use sha2::{Digest, Sha256};
use std::fmt;

/// Decides whether a request may use the console, and names the operator it comes from
/// (the name kept with what the operator does: who cancelled, who answered).
///
/// [`AdminToken`] admits one bearer token; `AdminScope` (with the `oauth` feature) admits
/// OAuth access tokens that carry a scope; an implementation may check anything the
/// headers carry (a proxy's verified identity, say).
pub trait AdminAuth: Send + Sync {
    /// The operator making the request, or why it is refused.
    fn authorize<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<String, AdminAuthError>>;
}

/// Why a request may not use the console.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminAuthError {
    /// No `Authorization: Bearer` header (`401`).
    #[error("an admin bearer token is needed")]
    Missing,
    /// A token that is not the admin's, or not valid (`401`).
    #[error("the admin token is not valid")]
    Invalid,
    /// A valid token without the scope the console needs, named here (`403`).
    #[error("the token lacks the scope {0}")]
    InsufficientScope(String),
    /// The token could not be checked now, its issuer being out of reach (`503`).
    #[error("the token cannot be checked now: {0}")]
    Unavailable(String),
}

/// The bearer token of a request's `Authorization` header.
fn bearer(headers: &HeaderMap) -> Result<&str, AdminAuthError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or(AdminAuthError::Missing)?;
    let (scheme, token) = value.split_once(' ').ok_or(AdminAuthError::Missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AdminAuthError::Missing);
    }
    Ok(token.trim())
}

/// An admin token that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminTokenError {
    /// The token is empty, too short (under 16 characters) or holds whitespace.
    #[error("an admin token must be at least 16 characters long, without whitespace")]
    Weak,
}

/// One bearer token that admits an operator (named `admin` unless
/// [`AdminToken::operator`] names it). The token is kept only as its SHA-256 digest, and a
/// request's token is compared digest to digest.
#[derive(Clone)]
pub struct AdminToken {
    digest: [u8; 32],
    operator: String,
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminToken")
            .field("operator", &self.operator)
            .finish_non_exhaustive()
    }
}

impl AdminToken {
    /// Admits requests with `Authorization: Bearer TOKEN`. A token shorter than 16
    /// characters, or with whitespace, is refused.
    pub fn new(token: impl AsRef<str>) -> Result<Self, AdminTokenError> {
        let token = token.as_ref();
        if token.chars().count() < 16 || token.chars().any(char::is_whitespace) {
            return Err(AdminTokenError::Weak);
        }
        Ok(Self {
            digest: Sha256::digest(token.as_bytes()).into(),
            operator: "admin".into(),
        })
    }

    /// Names the operator this token admits (default `admin`).
    pub fn operator(mut self, name: impl Into<String>) -> Self {
        self.operator = name.into();
        self
    }
}

impl AdminToken {
    /// The operator a request's token names, or why it is refused.
    fn check(&self, headers: &HeaderMap) -> Result<String, AdminAuthError> {
        let given: [u8; 32] = Sha256::digest(bearer(headers)?.as_bytes()).into();
        if given == self.digest {
            Ok(self.operator.clone())
        } else {
            Err(AdminAuthError::Invalid)
        }
    }
}

impl AdminAuth for AdminToken {
    fn authorize<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<String, AdminAuthError>> {
        Box::pin(std::future::ready(self.check(headers)))
    }
}

/// Admits requests whose OAuth access token the resource server accepts and which carry
/// `scope` (cargo features `admin` and `oauth`); the operator is the token's subject, as
/// the resource server names owners. Tokens are checked as on the MCP endpoint: issuer,
/// audience (the resource), lifetime, signature, or introspection.
///
/// ```no_run
/// # fn run(server: &mcp_tasks_runtime::Server, rs: mcp_tasks_runtime::oauth::ResourceServer) {
/// use mcp_tasks_runtime::admin::AdminScope;
/// let console = server.admin_router(AdminScope::new(rs, "tasks:admin"));
/// # }
/// ```
#[cfg(feature = "oauth")]
#[derive(Clone, Debug)]
pub struct AdminScope {
    server: crate::oauth::ResourceServer,
    scope: String,
}

#[cfg(feature = "oauth")]
impl AdminScope {
    /// Admits the tokens `server` accepts that carry `scope`.
    pub fn new(server: crate::oauth::ResourceServer, scope: impl Into<String>) -> Self {
        Self {
            server,
            scope: scope.into(),
        }
    }
}

#[cfg(feature = "oauth")]
impl AdminAuth for AdminScope {
    fn authorize<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<String, AdminAuthError>> {
        Box::pin(async move {
            let token = bearer(headers)?;
            match self.server.authenticate(token).await {
                Ok(principal) if principal.has_scope(&self.scope) => {
                    Ok(self.server.owner_name(&principal))
                }
                Ok(_) => Err(AdminAuthError::InsufficientScope(self.scope.clone())),
                Err(e) if e.is_unavailable() => Err(AdminAuthError::Unavailable(e.to_string())),
                Err(_) => Err(AdminAuthError::Invalid),
            }
        })
    }
}

/// The header a request that changes something must carry (with the value `1`).
pub(super) const CSRF_HEADER: &str = "x-mcp-tasks-admin";

/// The checks of `Host`, `Origin` and of requests that change something.
pub(super) struct Guard {
    pub(super) allowed_hosts: Vec<String>,
    pub(super) allowed_origins: Vec<String>,
    pub(super) any_host: bool,
}

impl Guard {
    /// `Err` (a status and why) unless the request names an allowed host and comes from
    /// an allowed origin; for a request that changes something, also unless it proves it
    /// is no cross-site form.
    pub(super) fn check(
        &self,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<(), (StatusCode, &'static str)> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let allowed = self.any_host
            || is_loopback_host(&host)
            || self
                .allowed_hosts
                .iter()
                .any(|a| *a == host || host_name(&host) == a);
        if !allowed {
            return Err((StatusCode::FORBIDDEN, "Host not allowed"));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            let own = ["http://", "https://"]
                .iter()
                .any(|scheme| origin.strip_prefix(scheme) == Some(host.as_str()));
            if !own && !self.allowed_origins.iter().any(|a| a == origin) {
                return Err((StatusCode::FORBIDDEN, "Origin not allowed"));
            }
        }
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return Ok(());
        }
        if let Some(site) = headers.get("sec-fetch-site")
            && !matches!(site.to_str().unwrap_or_default(), "same-origin" | "none")
        {
            return Err((StatusCode::FORBIDDEN, "cross-site request refused"));
        }
        if headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()) != Some("1") {
            return Err((
                StatusCode::FORBIDDEN,
                "a request that changes something needs the header X-Mcp-Tasks-Admin: 1",
            ));
        }
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.trim_start().starts_with("application/json"));
        if !json {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a request that changes something takes Content-Type: application/json",
            ));
        }
        Ok(())
    }
}

/// The host without its port: `example.com:80` → `example.com`, `[::1]:3000` → `::1`.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

fn is_loopback_host(host: &str) -> bool {
    matches!(host_name(host), "localhost" | "127.0.0.1" | "::1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn a_token_admits_only_itself() {
        assert!(matches!(
            AdminToken::new("short"),
            Err(AdminTokenError::Weak)
        ));
        assert!(matches!(
            AdminToken::new("0123456789 abcdef"),
            Err(AdminTokenError::Weak)
        ));
        let token = AdminToken::new("0123456789abcdef-secret")
            .unwrap()
            .operator("ops");
        assert_eq!(
            token.check(&headers(&[(
                "authorization",
                "Bearer 0123456789abcdef-secret"
            )])),
            Ok("ops".into())
        );
        assert_eq!(
            token.check(&headers(&[(
                "authorization",
                "Bearer 0123456789abcdef-secreT"
            )])),
            Err(AdminAuthError::Invalid)
        );
        assert_eq!(
            token.check(&headers(&[(
                "authorization",
                "Basic 0123456789abcdef-secret"
            )])),
            Err(AdminAuthError::Missing)
        );
        assert_eq!(token.check(&HeaderMap::new()), Err(AdminAuthError::Missing));
    }

    #[test]
    fn writes_need_the_header_json_and_the_own_origin() {
        let guard = Guard {
            allowed_hosts: vec!["ops.example.com".into()],
            allowed_origins: Vec::new(),
            any_host: false,
        };
        let get = |h| guard.check(&Method::GET, &headers(h)).map_err(|e| e.0);
        let post = |h| guard.check(&Method::POST, &headers(h)).map_err(|e| e.0);
        assert_eq!(get(&[("host", "127.0.0.1:3000")]), Ok(()));
        assert_eq!(get(&[("host", "ops.example.com:443")]), Ok(()));
        assert_eq!(get(&[("host", "evil.example")]), Err(StatusCode::FORBIDDEN));
        assert_eq!(
            get(&[
                ("host", "127.0.0.1:3000"),
                ("origin", "http://evil.example")
            ]),
            Err(StatusCode::FORBIDDEN)
        );
        let good = [
            ("host", "127.0.0.1:3000"),
            ("origin", "http://127.0.0.1:3000"),
            ("x-mcp-tasks-admin", "1"),
            ("content-type", "application/json"),
        ];
        assert_eq!(post(&good), Ok(()));
        assert_eq!(post(&good[..3]), Err(StatusCode::UNSUPPORTED_MEDIA_TYPE));
        let no_header = [good[0], good[1], good[3]];
        assert_eq!(post(&no_header), Err(StatusCode::FORBIDDEN));
        let mut cross = good.to_vec();
        cross.push(("sec-fetch-site", "cross-site"));
        assert_eq!(post(&cross), Err(StatusCode::FORBIDDEN));
    }
}
