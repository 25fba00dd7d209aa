//! The resource server in front of a mounted MCP endpoint, as axum middleware.

use super::ResourceServer;
use super::metadata::WELL_KNOWN;
use crate::context::BoxFuture;
use crate::principal::Principal;
use crate::transport::http::response::plain_error;
use crate::transport::http::{AuthError, Authenticate, RequestParts};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use std::time::Duration;

impl ResourceServer {
    /// A router that serves the metadata document at [`metadata_path`](Self::metadata_path)
    /// (and at the bare well-known path, for clients that look there first). Merge it into
    /// the app beside the MCP endpoint; it needs no token. An endpoint whose authenticator is
    /// this resource server ([`HttpConfig::authenticate`]) serves it already: do not merge it
    /// again.
    ///
    /// [`HttpConfig::authenticate`]: crate::transport::http::HttpConfig::authenticate
    pub fn metadata_router(&self) -> Router {
        let body = self.metadata().to_string();
        let serve = move || {
            let body = body.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], body) }
        };
        let path = self.metadata_path();
        let mut router = Router::new().route(&path, get(serve.clone()));
        if path != WELL_KNOWN {
            router = router.route(WELL_KNOWN, get(serve));
        }
        router
    }

    /// The name a validated token's principal owns tasks under: its subject, qualified by
    /// its issuer when several issuers are trusted (two issuers may use the same subject).
    pub fn owner_name(&self, principal: &crate::principal::Principal) -> String {
        match (&principal.issuer, self.inner.config.issuers.len()) {
            (Some(issuer), n) if n > 1 => format!("{issuer}#{}", principal.subject),
            _ => principal.subject.clone(),
        }
    }
}

impl ResourceServer {
    /// Who makes a request with these headers: the principal of its valid bearer token
    /// (owning its tasks under [`owner_name`](Self::owner_name)), or the refusal to answer.
    ///
    /// - No token: `401` with a challenge naming the metadata and the scopes supported.
    /// - A token refused: `401` with `error="invalid_token"` and the reason.
    /// - The issuer's keys out of reach: `503` with `Retry-After`.
    ///
    /// The token is never logged.
    pub async fn authenticate_request(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<Principal, AuthError> {
        let Some(token) = request.bearer_token() else {
            tracing::debug!("request refused: no bearer token");
            return Err(AuthError::Unauthorized {
                message: "this server needs a bearer access token".into(),
                challenge: Some(self.challenge(None, &[])),
            });
        };
        match self.authenticate(token).await {
            Ok(principal) => {
                let name = self.owner_name(&principal);
                Ok(if name == principal.subject {
                    principal
                } else {
                    principal.with_owner(name)
                })
            }
            Err(e) if e.is_unavailable() => {
                tracing::warn!(reason = %e, "a bearer token could not be checked");
                Err(AuthError::Unavailable {
                    message: e.to_string(),
                    retry_after: RETRY_AFTER,
                })
            }
            Err(e) => {
                tracing::debug!(reason = %e, "request refused: bearer token");
                Err(AuthError::Unauthorized {
                    message: e.to_string(),
                    challenge: Some(self.challenge(Some(&e), &[])),
                })
            }
        }
    }
}

/// How long a client is asked to wait while the issuer's keys are out of reach.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The resource server as the HTTP transport's authenticator
/// ([`HttpConfig::authenticate`](crate::transport::http::HttpConfig::authenticate)): every
/// request needs a valid token, a caller without a tool's scopes gets its `403` challenge,
/// and the metadata is served beside the endpoint (see
/// [`authenticate_request`](ResourceServer::authenticate_request) and
/// [`metadata_router`](ResourceServer::metadata_router)).
impl Authenticate for ResourceServer {
    fn authenticate<'a>(
        &'a self,
        request: RequestParts<'a>,
    ) -> BoxFuture<'a, Result<Option<Principal>, AuthError>> {
        Box::pin(async move { self.authenticate_request(&request).await.map(Some) })
    }

    fn insufficient_scope(&self, scopes: &[&str]) -> String {
        ResourceServer::insufficient_scope(self, scopes)
    }

    fn routes(&self) -> Option<Router> {
        Some(self.metadata_router())
    }
}

/// axum middleware that lets through only requests with a valid bearer access token, for
/// `middleware::from_fn_with_state(resource_server, require_bearer)` in front of routes of
/// an application (the MCP endpoint itself takes the resource server as its authenticator,
/// [`HttpConfig::authenticate`](crate::transport::http::HttpConfig::authenticate)).
///
/// Refusals are those of [`ResourceServer::authenticate_request`], each with a JSON-RPC
/// error body; a valid token's [`Principal`] goes on as a request extension, which the MCP
/// endpoint takes as the request's principal. GETs of the metadata pass without a token.
pub async fn require_bearer(
    State(server): State<ResourceServer>,
    mut request: Request,
    next: Next,
) -> Response {
    if request.uri().path().starts_with(WELL_KNOWN) {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let found = {
        let view = RequestParts::new(&parts.method, &parts.uri, &parts.headers);
        server.authenticate_request(&view).await
    };
    match found {
        Ok(principal) => {
            parts.extensions.insert(principal);
            request = Request::from_parts(parts, body);
            next.run(request).await
        }
        Err(e) => refusal(e),
    }
}

/// A refusal with the transport's JSON-RPC error body and its headers.
fn refusal(error: AuthError) -> Response {
    let (status, challenge, retry) = match &error {
        AuthError::Unauthorized { challenge, .. } => {
            (StatusCode::UNAUTHORIZED, challenge.clone(), None)
        }
        AuthError::InsufficientScope { challenge, .. } => {
            (StatusCode::FORBIDDEN, Some(challenge.clone()), None)
        }
        AuthError::Unavailable { retry_after, .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, None, Some(*retry_after))
        }
        _ => (StatusCode::FORBIDDEN, None, None),
    };
    let mut response = plain_error(status, &error.to_string());
    if let Some(challenge) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
    }
    if let Some(retry) = retry {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry.as_secs()));
    }
    response
}
