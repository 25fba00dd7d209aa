//! Admission: `Host` and `Origin` checks (DNS-rebinding protection), authentication, and the
//! media types of the Streamable HTTP rules (`Content-Type`, `Accept`), before a request's
//! body is read.

use super::config::{AuthError, Principal, ProxyHeader, RequestParts};
use super::response::plain_error;
use super::{App, sessions};
use crate::sync::LockExt as _;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use std::net::IpAddr;
use std::sync::Arc;

/// The client's address, as the server put it in a request that goes through the router.
pub(super) fn peer_of(extensions: &axum::http::Extensions) -> Option<std::net::SocketAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0)
}

impl App {
    /// Checks `Host` and `Origin` (DNS-rebinding protection) and authenticates: the
    /// [`Principal`] an application's layer set comes first, then the authenticator, which
    /// is told `peer`, the client's address.
    pub(super) async fn admit(
        &self,
        parts: &axum::http::request::Parts,
        peer: Option<std::net::SocketAddr>,
    ) -> Result<Option<Arc<Principal>>, Refused> {
        let headers = &parts.headers;
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
        if let Some(principal) = parts.extensions.get::<Principal>() {
            return Ok(Some(Arc::new(principal.clone())));
        }
        let Some(auth) = &self.config.authenticator else {
            return Ok(None);
        };
        let request = RequestParts {
            method: &parts.method,
            uri: &parts.uri,
            headers,
            peer,
        };
        match auth.authenticate(request).await {
            Ok(principal) => Ok(principal.map(Arc::new)),
            Err(e) => {
                tracing::debug!(reason = %e, "request refused by the authenticator");
                Err(Refused::of(e))
            }
        }
    }

    /// The `WWW-Authenticate` value of a `403` for a caller that lacks `scopes`.
    pub(super) fn insufficient_scope(&self, scopes: &[&str]) -> String {
        match &self.config.authenticator {
            Some(auth) => auth.insufficient_scope(scopes),
            None => format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\"",
                scopes.join(" ")
            ),
        }
    }
}

/// The media type of a JSON-RPC body.
const JSON: &str = "application/json";
/// The media type of a stream of server-sent events.
const EVENT_STREAM: &str = "text/event-stream";

impl App {
    /// Checks the media types of a POST: a JSON body (else 415), and an `Accept` that takes
    /// both a JSON answer and an event stream (else 406).
    pub(super) fn negotiate_post(&self, headers: &HeaderMap) -> Result<(), Refused> {
        // What clients send, accepted without taking the headers apart.
        let usual = headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == JSON.as_bytes())
            && usual_accept(headers);
        if usual {
            return Ok(());
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(str::trim);
        if !content_type.is_some_and(|t| t.eq_ignore_ascii_case(JSON)) {
            return Err(Refused::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Content-Type must be application/json",
            ));
        }
        if !accepts(headers, &[JSON, EVENT_STREAM], self.config.lenient_accept) {
            return Err(Refused::new(
                StatusCode::NOT_ACCEPTABLE,
                "Accept must allow both application/json and text/event-stream",
            ));
        }
        Ok(())
    }

    /// Checks the `Accept` of a GET: it must take an event stream (else 406).
    pub(super) fn negotiate_get(&self, headers: &HeaderMap) -> Result<(), Refused> {
        if accepts(headers, &[EVENT_STREAM], self.config.lenient_accept) {
            Ok(())
        } else {
            Err(Refused::new(
                StatusCode::NOT_ACCEPTABLE,
                "a GET stream needs Accept: text/event-stream",
            ))
        }
    }
}

impl App {
    /// The client's address: the peer's or, while the hop is a trusted proxy, the address
    /// it forwarded in the configured header, read from the right.
    pub(super) fn client_address(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Option<IpAddr> {
        let mut client = peer?.to_canonical();
        let trusted = &self.config.trusted_proxies;
        if !trusted.contains(&client) {
            return Some(client);
        }
        for hop in forwarded_chain(headers, self.config.proxy_header)
            .iter()
            .rev()
        {
            match hop {
                Some(ip) => client = ip.to_canonical(),
                // A hop that names no address: the nearest trusted proxy is all we know.
                None => break,
            }
            if !trusted.contains(&client) {
                break;
            }
        }
        Some(client)
    }

    /// The requestor an anonymous request is charged to: the configured key, else the
    /// client's address (IPv6 by its /64), else one requestor for every unknown address.
    pub(super) fn anonymous_requestor(
        &self,
        headers: &HeaderMap,
        client: Option<IpAddr>,
    ) -> Arc<str> {
        if let Some(key) = self
            .config
            .anonymous_requestor
            .as_ref()
            .and_then(|f| f(headers, client))
        {
            return format!("key:{key}").into();
        }
        let Some(ip) = client else {
            return "address:unknown".into();
        };
        let group = sessions::client_group(ip);
        let mut keys = self.requestor_keys.locked();
        if let Some(key) = keys.get(&group) {
            return Arc::clone(key);
        }
        if keys.len() >= super::REQUESTOR_KEYS {
            keys.clear();
        }
        let key: Arc<str> = format!("address:{group}").into();
        keys.insert(group, Arc::clone(&key));
        key
    }
}

/// The addresses of a forwarding header, client first; `None` for an entry that names none
/// (`unknown`, an obfuscated node, garbage).
fn forwarded_chain(headers: &HeaderMap, header: ProxyHeader) -> Vec<Option<IpAddr>> {
    let values = |name: &str| {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    match header {
        ProxyHeader::XForwardedFor => values("x-forwarded-for")
            .iter()
            .flat_map(|v| v.split(','))
            .map(node_address)
            .collect(),
        ProxyHeader::Forwarded => values("forwarded")
            .iter()
            .flat_map(|v| v.split(','))
            .map(|element| {
                element.split(';').find_map(|pair| {
                    let (name, value) = pair.split_once('=')?;
                    name.trim().eq_ignore_ascii_case("for").then_some(value)
                })
            })
            .map(|node| node.and_then(node_address))
            .collect(),
    }
}

/// The address of one forwarded node: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `"[2001:db8::1]:4711"` (quoted or not).
fn node_address(node: &str) -> Option<IpAddr> {
    let node = node.trim().trim_matches('"');
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    if let Ok(ip) = node.parse() {
        return Some(ip);
    }
    let (host, port) = node.rsplit_once(':')?;
    port.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4))
        .flatten()
}

/// Whether the `Accept` headers allow every media type of `wanted`. Strictly, each must be
/// named (with a quality above zero), as the Streamable HTTP rules ask of clients; `lenient`
/// also takes a missing `Accept` and wildcards (`*/*`, `text/*`).
/// Whether the request has one `Accept` header naming exactly JSON and event streams, as
/// clients write it: a header that needs no parsing.
fn usual_accept(headers: &HeaderMap) -> bool {
    const USUAL: [&[u8]; 4] = [
        b"application/json, text/event-stream",
        b"text/event-stream, application/json",
        b"application/json,text/event-stream",
        b"text/event-stream,application/json",
    ];
    let mut values = headers.get_all(header::ACCEPT).iter();
    match (values.next(), values.next()) {
        (Some(only), None) => USUAL.contains(&only.as_bytes()),
        _ => false,
    }
}

fn accepts(headers: &HeaderMap, wanted: &[&str], lenient: bool) -> bool {
    if headers.get(header::ACCEPT).is_none() {
        return lenient;
    }
    // The media ranges named with a quality above zero, read again for each wanted type
    // rather than copied (a request names two or three).
    let ranges = || {
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|item| {
                let mut parts = item.split(';');
                let range = parts.next()?.trim();
                let refused = parts.any(|p| {
                    let (name, value) = p.split_once('=').unwrap_or((p, ""));
                    name.trim().eq_ignore_ascii_case("q")
                        && value.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
                });
                (!range.is_empty() && !refused).then_some(range)
            })
    };
    wanted.iter().all(|want| {
        let family = want.split('/').next().unwrap_or_default();
        ranges().any(|range| {
            range.eq_ignore_ascii_case(want)
                || (lenient
                    && (range == "*/*"
                        || range
                            .strip_suffix("/*")
                            .is_some_and(|f| f.eq_ignore_ascii_case(family))))
        })
    })
}

/// A request refused before its body is read.
pub(super) struct Refused {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) challenge: Option<String>,
    pub(super) retry_after: Option<std::time::Duration>,
}

impl Refused {
    pub(super) fn new(status: StatusCode, message: &str) -> Self {
        Self {
            status,
            message: message.to_owned(),
            challenge: None,
            retry_after: None,
        }
    }

    /// The answer to an authenticator's refusal.
    fn of(error: AuthError) -> Self {
        let message = error.to_string();
        let (status, challenge, retry_after) = match error {
            AuthError::Unauthorized { challenge, .. } => {
                (StatusCode::UNAUTHORIZED, challenge, None)
            }
            AuthError::Forbidden(_) => (StatusCode::FORBIDDEN, None, None),
            AuthError::InsufficientScope { challenge, .. } => {
                (StatusCode::FORBIDDEN, Some(challenge), None)
            }
            AuthError::Unavailable { retry_after, .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, None, Some(retry_after))
            }
        };
        Self {
            status,
            message,
            challenge,
            retry_after,
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> HttpResponse {
        let mut response = plain_error(self.status, &self.message);
        if let Some(c) = self.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, c);
        }
        if let Some(after) = self.retry_after {
            let seconds = after.as_secs_f64().ceil().max(1.0) as u64;
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
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

    #[test]
    fn accept_takes_named_types_strictly_and_wildcards_only_when_lenient() {
        let with = |accept: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(a) = accept {
                headers.insert(header::ACCEPT, HeaderValue::from_str(a).unwrap());
            }
            headers
        };
        let both = [JSON, EVENT_STREAM];
        #[rustfmt::skip]
        let cases: [(Option<&str>, bool, bool); 10] = [
            // (Accept, strict, lenient)
            (Some("application/json, text/event-stream"), true, true),
            (Some("text/event-stream;q=0.9, Application/JSON"), true, true),
            (Some("application/json"), false, false),
            (Some("text/event-stream"), false, false),
            (Some("application/json, text/event-stream;q=0"), false, false),
            (Some("*/*"), false, true),
            (Some("application/*, text/*"), false, true),
            (Some("application/json, */*;q=0"), false, false),
            (Some(""), false, false),
            (None, false, true),
        ];
        for (accept, strict, lenient) in cases {
            let headers = with(accept);
            // The headers taken without parsing are only ever ones the parser takes too.
            if usual_accept(&headers) {
                assert!(
                    strict,
                    "{accept:?} passes unparsed but the parser refuses it"
                );
            }
            assert_eq!(accepts(&headers, &both, false), strict, "{accept:?} strict");
            assert_eq!(
                accepts(&headers, &both, true),
                lenient,
                "{accept:?} lenient"
            );
        }
        assert!(accepts(
            &with(Some("text/event-stream")),
            &[EVENT_STREAM],
            false
        ));
        for usual in [
            "application/json, text/event-stream",
            "text/event-stream,application/json",
        ] {
            assert!(usual_accept(&with(Some(usual))), "{usual}");
            assert!(accepts(&with(Some(usual)), &both, false), "{usual}");
        }
        for unusual in [
            "application/json",
            "application/json, text/event-stream;q=0",
            "*/*",
        ] {
            assert!(!usual_accept(&with(Some(unusual))), "{unusual}");
        }
        let mut twice = with(Some("application/json, text/event-stream"));
        twice.append(header::ACCEPT, HeaderValue::from_static("text/html"));
        assert!(!usual_accept(&twice));
        assert!(!accepts(&with(Some("*/*")), &[EVENT_STREAM], false));
        assert!(accepts(&with(Some("*/*")), &[EVENT_STREAM], true));
    }

    #[test]
    fn forwarded_nodes_and_chains() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(node_address("192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(node_address(" 192.0.2.1:4711"), ip("192.0.2.1"));
        assert_eq!(node_address("2001:db8::1"), ip("2001:db8::1"));
        assert_eq!(node_address("\"[2001:db8::1]:4711\""), ip("2001:db8::1"));
        assert_eq!(node_address("unknown"), None);
        assert_eq!(node_address("_hidden"), None);
        let mut headers = HeaderMap::new();
        headers.append(
            "x-forwarded-for",
            HeaderValue::from_static("1.1.1.1, 2.2.2.2"),
        );
        headers.append("x-forwarded-for", HeaderValue::from_static("3.3.3.3"));
        headers.append(
            "forwarded",
            HeaderValue::from_static(
                "for=4.4.4.4;proto=https, by=x;for=\"[2001:db8::2]:80\", for=unknown",
            ),
        );
        assert_eq!(
            forwarded_chain(&headers, ProxyHeader::XForwardedFor),
            [ip("1.1.1.1"), ip("2.2.2.2"), ip("3.3.3.3")]
        );
        assert_eq!(
            forwarded_chain(&headers, ProxyHeader::Forwarded),
            [ip("4.4.4.4"), ip("2001:db8::2"), None]
        );
    }
}
