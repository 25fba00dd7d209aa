//! Admission: `Host` and `Origin` checks (DNS-rebinding protection) and authentication,
//! before a request's body is read.

use super::App;
use super::config::{AuthError, Principal};
use super::response::plain_error;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};

impl App {
    /// Checks `Host` and `Origin` (DNS-rebinding protection) and authenticates: the
    /// [`Principal`] an application's layer set comes first, then the authenticator.
    pub(super) fn admit(
        &self,
        headers: &HeaderMap,
        given: Option<&Principal>,
    ) -> Result<Option<String>, Refused> {
        if !self.config.any_host
            && let Some(host) = headers.get(header::HOST)
        {
            let host = host.to_str().unwrap_or_default().to_ascii_lowercase();
            let ok = is_loopback_host(&host)
                || self
                    .config
                    .allowed_hosts
                    .iter()
                    .any(|a| *a == host || host_name(&host) == a);
            if !ok {
                tracing::debug!(%host, "request refused: Host not allowed");
                return Err(Refused::new(StatusCode::FORBIDDEN, "Host not allowed"));
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            let ok = is_loopback_origin(origin)
                || self.config.allowed_origins.iter().any(|a| a == origin);
            if !ok {
                tracing::debug!(%origin, "request refused: Origin not allowed");
                return Err(Refused::new(StatusCode::FORBIDDEN, "Origin not allowed"));
            }
        }
        if let Some(principal) = given {
            return Ok(Some(principal.0.clone()));
        }
        match &self.config.authenticator {
            None => Ok(None),
            Some(auth) => auth(headers).map_err(|e| {
                let (status, challenge) = match &e {
                    AuthError::Unauthorized { challenge, .. } => {
                        (StatusCode::UNAUTHORIZED, challenge.clone())
                    }
                    AuthError::Forbidden(_) => (StatusCode::FORBIDDEN, None),
                };
                Refused {
                    status,
                    message: e.to_string(),
                    challenge,
                }
            }),
        }
    }
}

/// A request refused before its body is read.
pub(super) struct Refused {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) challenge: Option<String>,
}

impl Refused {
    pub(super) fn new(status: StatusCode, message: &str) -> Self {
        Self {
            status,
            message: message.to_owned(),
            challenge: None,
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> HttpResponse {
        let mut response = plain_error(self.status, &self.message);
        if let Some(c) = self.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, c);
        }
        response
    }
}

pub(super) fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    })
}

pub(super) fn is_loopback_host(host: &str) -> bool {
    let name = host_name(host);
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

pub(super) fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    !rest.contains('/') && is_loopback_host(&rest.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_and_origins() {
        for host in [
            "localhost",
            "localhost:3000",
            "127.0.0.1:9",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example.com",
            "evil.example.com:80",
            "127.0.0.2",
            "localhost.evil",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
        assert!(is_loopback_origin("http://localhost:5173"));
        assert!(is_loopback_origin("https://127.0.0.1"));
        assert!(!is_loopback_origin("http://evil.example.com"));
        assert!(!is_loopback_origin("null"));
        assert!(!is_loopback_origin("http://localhost.evil.com"));
    }
}
