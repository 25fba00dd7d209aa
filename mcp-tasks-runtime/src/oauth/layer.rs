//! The resource server in front of a mounted MCP endpoint, as axum middleware.

use super::ResourceServer;
use super::metadata::WELL_KNOWN;
use crate::transport::http::Principal as RequestPrincipal;
use crate::transport::http::response::plain_error;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;

impl ResourceServer {
    /// A router that serves the metadata document at [`metadata_path`](Self::metadata_path)
    /// (and at the bare well-known path, for clients that look there first). Merge it into
    /// the app beside the MCP endpoint; it needs no token.
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

/// axum middleware that lets through only requests with a valid bearer access token, for
/// `middleware::from_fn_with_state(resource_server, require_bearer)` on the MCP routes.
///
/// - No token: `401` with a challenge naming the metadata and the scopes supported.
/// - A token refused: `401` with `error="invalid_token"` and the reason.
/// - The issuer's keys out of reach: `503` with `Retry-After`.
/// - A valid token: the request goes on with a [`Principal`](RequestPrincipal) extension
///   naming its owner ([`ResourceServer::owner_name`]), so the tasks it creates are its own,
///   and the whole [`Principal`](crate::principal::Principal) as another extension.
///
/// Each refusal carries a JSON-RPC error body; GETs of the metadata pass without a token.
/// The token is never logged.
pub async fn require_bearer(
    State(server): State<ResourceServer>,
    mut request: Request,
    next: Next,
) -> Response {
    if request.uri().path().starts_with(WELL_KNOWN) {
        return next.run(request).await;
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        })
        .map(|(_, token)| token.trim().to_owned());
    let Some(token) = token else {
        tracing::debug!("request refused: no bearer token");
        return refuse(
            StatusCode::UNAUTHORIZED,
            "this server needs a bearer access token",
            Some(server.challenge(None, &[])),
        );
    };
    match server.authenticate(&token).await {
        Ok(principal) => {
            let name = server.owner_name(&principal);
            request.extensions_mut().insert(RequestPrincipal::new(name));
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(e) if e.is_unavailable() => {
            let mut response = refuse(StatusCode::SERVICE_UNAVAILABLE, &e.to_string(), None);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            response
        }
        Err(e) => {
            tracing::debug!(reason = %e, "request refused: bearer token");
            refuse(
                StatusCode::UNAUTHORIZED,
                &e.to_string(),
                Some(server.challenge(Some(&e), &[])),
            )
        }
    }
}

/// A refusal with the transport's JSON-RPC error body and, for a `401`, its challenge.
fn refuse(status: StatusCode, message: &str, challenge: Option<String>) -> Response {
    let mut response = plain_error(status, message);
    if let Some(challenge) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}
