//! Finding out how to authorize with a protected server: its `WWW-Authenticate` challenge
//! (RFC 6750), its Protected Resource Metadata (RFC 9728), and the metadata of its
//! authorization server (RFC 8414, or OpenID Connect discovery).

use super::super::AuthError;
use reqwest::Url;
use serde_json::Value;

/// The most a metadata document or token response may weigh.
const MAX_DOCUMENT: usize = 1 << 20;

/// What a `Bearer` challenge says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub(crate) resource_metadata: Option<String>,
    pub(crate) scope: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) error_description: Option<String>,
}

impl Challenge {
    /// The `Bearer` challenge among the `WWW-Authenticate` challenges of `header`.
    pub(crate) fn parse(header: &str) -> Option<Self> {
        let mut rest = header.trim_start();
        loop {
            let (scheme, after) = split_token(rest);
            if scheme.is_empty() {
                return None;
            }
            let (params, next) = parse_params(after);
            if scheme.eq_ignore_ascii_case("bearer") {
                let get = |k: &str| {
                    params
                        .iter()
                        .find(|(name, _)| name.eq_ignore_ascii_case(k))
                        .map(|(_, v)| v.clone())
                };
                return Some(Self {
                    resource_metadata: get("resource_metadata"),
                    scope: get("scope"),
                    error: get("error"),
                    error_description: get("error_description"),
                });
            }
            rest = next?;
        }
    }

    /// What the challenge says is wrong, for people.
    pub(crate) fn reason(&self) -> Option<String> {
        match (&self.error, &self.error_description) {
            (_, Some(d)) => Some(d.clone()),
            (Some(e), None) => Some(e.clone()),
            _ => None,
        }
    }
}

/// A leading token and what follows it.
fn split_token(s: &str) -> (&str, &str) {
    let s = s.trim_start_matches([' ', '\t', ',']);
    let end = s
        .find(|c: char| c.is_whitespace() || c == ',' || c == '=')
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// `k=v, k="v"` parameters up to the next scheme: the parameters, and the rest from that
/// scheme on (if any).
fn parse_params(mut s: &str) -> (Vec<(String, String)>, Option<&str>) {
    let mut params = Vec::new();
    loop {
        let trimmed = s.trim_start_matches([' ', '\t', ',']);
        if trimmed.is_empty() {
            return (params, None);
        }
        let (name, after) = split_token(trimmed);
        let after = after.trim_start();
        let Some(value) = after.strip_prefix('=') else {
            // A token without `=`: the next challenge's scheme.
            return (params, Some(trimmed));
        };
        let value = value.trim_start();
        let (text, rest) = if let Some(quoted) = value.strip_prefix('"') {
            let mut text = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            text.push(escaped);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => text.push(c),
                }
            }
            (text, &quoted[end.min(quoted.len())..])
        } else {
            let end = value.find([',', ' ', '\t']).unwrap_or(value.len());
            (value[..end].to_owned(), &value[end..])
        };
        params.push((name.to_owned(), text));
        s = rest;
    }
}

/// An authorization server's metadata, as far as this client uses it.
#[derive(Clone, Debug)]
pub(crate) struct ServerMetadata {
    pub(crate) issuer: String,
    pub(crate) authorization_endpoint: Option<String>,
    pub(crate) token_endpoint: String,
    pub(crate) registration_endpoint: Option<String>,
    pub(crate) revocation_endpoint: Option<String>,
    pub(crate) code_challenge_methods: Vec<String>,
    pub(crate) scopes_supported: Vec<String>,
    pub(crate) auth_methods: Vec<String>,
}

/// What discovery found for one protected server.
#[derive(Clone, Debug)]
pub(crate) struct Discovered {
    /// The resource to ask tokens for (RFC 8707).
    pub(crate) resource: String,
    pub(crate) server: ServerMetadata,
    /// The scope to ask for: the challenge's, else the resource's `scopes_supported`.
    pub(crate) scope: Option<String>,
}

/// Fetches a JSON document within [`MAX_DOCUMENT`].
pub(crate) async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, AuthError> {
    let fail = |reason: String| AuthError::Endpoint {
        url: url.to_owned(),
        reason,
    };
    let response = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| fail(describe(&e)))?;
    let status = response.status();
    let body = read_body(url, response).await?;
    if !status.is_success() {
        return Err(fail(format!("it answered HTTP {status}")));
    }
    serde_json::from_slice(&body).map_err(|_| fail("it sent no JSON document".into()))
}

/// A response's body, within [`MAX_DOCUMENT`].
pub(crate) async fn read_body(
    url: &str,
    mut response: reqwest::Response,
) -> Result<Vec<u8>, AuthError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| AuthError::Endpoint {
        url: url.to_owned(),
        reason: describe(&e),
    })? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_DOCUMENT {
            return Err(AuthError::Endpoint {
                url: url.to_owned(),
                reason: format!("it sent more than {MAX_DOCUMENT} bytes"),
            });
        }
    }
    Ok(body)
}

pub(crate) fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "it did not answer in time".into()
    } else if error.is_connect() {
        "cannot connect to it".into()
    } else {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }
}

/// An `https` URL, or `http` on a loopback host, without a fragment.
pub(crate) fn check_endpoint(what: &str, uri: &str) -> Result<Url, AuthError> {
    crate::oauth_urls::usable(uri)
        .map_err(|why| AuthError::Discovery(format!("{what} `{uri}` is not usable: {why}")))
}

/// Where a resource's metadata may be when its challenge does not say: the path-aware
/// well-known URL, then the root one (RFC 9728 §3.1).
pub(crate) fn resource_metadata_urls(server: &Url) -> Vec<String> {
    let path = server.path().trim_end_matches('/');
    let mut urls = Vec::new();
    let mut url = server.clone();
    url.set_query(None);
    url.set_fragment(None);
    if !path.is_empty() {
        url.set_path(&crate::oauth_urls::resource_metadata_path(server));
        urls.push(url.to_string());
    }
    url.set_path(crate::oauth_urls::RESOURCE_METADATA);
    urls.push(url.to_string());
    urls
}

/// Where an authorization server's metadata may be, in the order MCP asks clients to try:
/// RFC 8414's well-known URL (inserted before the issuer's path), then OpenID Connect's
/// (inserted, then appended).
pub(crate) fn server_metadata_urls(issuer: &Url) -> Vec<String> {
    let path = issuer.path().trim_end_matches('/');
    let at = |p: String| {
        let mut url = issuer.clone();
        url.set_query(None);
        url.set_path(&p);
        url.to_string()
    };
    if path.is_empty() {
        vec![
            at("/.well-known/oauth-authorization-server".into()),
            at("/.well-known/openid-configuration".into()),
        ]
    } else {
        vec![
            at(format!("/.well-known/oauth-authorization-server{path}")),
            at(format!("/.well-known/openid-configuration{path}")),
            at(format!("{path}/.well-known/openid-configuration")),
        ]
    }
}

/// Whether metadata naming `resource` may be used for the endpoint `server`: the same
/// origin, and the resource's path the server's or one above it.
pub(crate) fn resource_covers(resource: &str, server: &Url) -> bool {
    let Ok(resource) = Url::parse(resource) else {
        return false;
    };
    if resource.origin() != server.origin() {
        return false;
    }
    let (r, s) = (
        resource.path().trim_end_matches('/'),
        server.path().trim_end_matches('/'),
    );
    r.is_empty() || s == r || s.starts_with(&format!("{r}/"))
}

/// Discovers how to authorize with `server`: from `challenge`'s metadata URL, or the
/// well-known ones.
pub(crate) async fn discover(
    http: &reqwest::Client,
    server: &str,
    challenge: Option<&Challenge>,
) -> Result<Discovered, AuthError> {
    let server_url =
        Url::parse(server).map_err(|_| AuthError::Discovery(format!("`{server}` is not a URL")))?;
    let candidates = match challenge.and_then(|c| c.resource_metadata.clone()) {
        Some(url) => {
            check_endpoint("resource_metadata", &url)?;
            vec![url]
        }
        None => resource_metadata_urls(&server_url),
    };
    let mut failures = Vec::new();
    let mut found = None;
    for url in &candidates {
        match get_json(http, url).await {
            Ok(doc) if doc["resource"].is_string() => {
                found = Some(doc);
                break;
            }
            Ok(_) => failures.push(format!("{url} is not protected resource metadata")),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let Some(metadata) = found else {
        return Err(AuthError::Discovery(format!(
            "no protected resource metadata: {}",
            failures.join("; ")
        )));
    };
    let resource = metadata["resource"].as_str().unwrap_or_default().to_owned();
    if !resource_covers(&resource, &server_url) {
        return Err(AuthError::Discovery(format!(
            "the metadata is for the resource {resource}, not for {server}"
        )));
    }
    let issuer = metadata["authorization_servers"]
        .as_array()
        .and_then(|list| list.iter().find_map(Value::as_str))
        .ok_or_else(|| {
            AuthError::Discovery(format!(
                "the metadata of {resource} names no authorization server"
            ))
        })?
        .to_owned();
    let server_metadata = authorization_server(http, &issuer).await?;
    let scope = challenge
        .and_then(|c| c.scope.clone())
        .filter(|s| !s.trim().is_empty())
        .or_else(|| {
            let listed: Vec<&str> = metadata["scopes_supported"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            (!listed.is_empty()).then(|| listed.join(" "))
        });
    Ok(Discovered {
        resource,
        server: server_metadata,
        scope,
    })
}

/// The metadata of the authorization server `issuer`, which must name itself exactly.
pub(crate) async fn authorization_server(
    http: &reqwest::Client,
    issuer: &str,
) -> Result<ServerMetadata, AuthError> {
    let url = check_endpoint("authorization server", issuer)?;
    let mut failures = Vec::new();
    for candidate in server_metadata_urls(&url) {
        let doc = match get_json(http, &candidate).await {
            Ok(doc) => doc,
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        if doc["issuer"] != issuer {
            return Err(AuthError::Discovery(format!(
                "the metadata at {candidate} names the issuer {} instead of {issuer}",
                doc["issuer"]
            )));
        }
        let text = |k: &str| doc[k].as_str().map(str::to_owned);
        let list = |k: &str| -> Vec<String> {
            doc[k]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        let token_endpoint = text("token_endpoint").ok_or_else(|| {
            AuthError::Discovery(format!(
                "the metadata at {candidate} names no token_endpoint"
            ))
        })?;
        check_endpoint("token_endpoint", &token_endpoint)?;
        for (what, endpoint) in [
            ("authorization_endpoint", text("authorization_endpoint")),
            ("registration_endpoint", text("registration_endpoint")),
            ("revocation_endpoint", text("revocation_endpoint")),
        ] {
            if let Some(endpoint) = endpoint {
                check_endpoint(what, &endpoint)?;
            }
        }
        return Ok(ServerMetadata {
            issuer: issuer.to_owned(),
            authorization_endpoint: text("authorization_endpoint"),
            token_endpoint,
            registration_endpoint: text("registration_endpoint"),
            revocation_endpoint: text("revocation_endpoint"),
            code_challenge_methods: list("code_challenge_methods_supported"),
            scopes_supported: list("scopes_supported"),
            auth_methods: list("token_endpoint_auth_methods_supported"),
        });
    }
    Err(AuthError::Discovery(format!(
        "no authorization server metadata for {issuer}: {}",
        failures.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_are_read_among_others() {
        let c = Challenge::parse(
            r#"Basic realm="x", Bearer resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp", scope="a b", error="invalid_token", error_description="it \"expired\"""#,
        )
        .unwrap();
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://a.example/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.scope.as_deref(), Some("a b"));
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(c.reason().as_deref(), Some("it \"expired\""));
        let bare = Challenge::parse("bearer error=invalid_token, Basic realm=x").unwrap();
        assert_eq!(bare.error.as_deref(), Some("invalid_token"));
        assert_eq!(bare.resource_metadata, None);
        assert_eq!(Challenge::parse("Basic realm=\"x\""), None);
        assert_eq!(Challenge::parse("Bearer"), Some(Challenge::default()));
    }

    #[test]
    fn metadata_urls_follow_the_rfcs_order() {
        let server = Url::parse("https://a.example/mcp?x=1").unwrap();
        assert_eq!(
            resource_metadata_urls(&server),
            [
                "https://a.example/.well-known/oauth-protected-resource/mcp",
                "https://a.example/.well-known/oauth-protected-resource"
            ]
        );
        let issuer = Url::parse("https://id.example/tenant1").unwrap();
        assert_eq!(
            server_metadata_urls(&issuer),
            [
                "https://id.example/.well-known/oauth-authorization-server/tenant1",
                "https://id.example/.well-known/openid-configuration/tenant1",
                "https://id.example/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            server_metadata_urls(&Url::parse("https://id.example").unwrap()).len(),
            2
        );
    }

    #[test]
    fn metadata_must_be_for_this_server() {
        let server = Url::parse("https://a.example/mcp").unwrap();
        assert!(resource_covers("https://a.example/mcp", &server));
        assert!(resource_covers("https://a.example/", &server));
        assert!(resource_covers("https://a.example", &server));
        assert!(!resource_covers("https://a.example/other", &server));
        assert!(!resource_covers("https://a.example/mc", &server));
        assert!(!resource_covers("https://b.example/mcp", &server));
        assert!(!resource_covers("http://a.example/mcp", &server));
    }

    #[test]
    fn endpoints_are_https_or_loopback() {
        assert!(check_endpoint("x", "https://id.example/token").is_ok());
        assert!(check_endpoint("x", "http://127.0.0.1:4000/token").is_ok());
        assert!(check_endpoint("x", "http://localhost/token").is_ok());
        assert!(check_endpoint("x", "http://id.example/token").is_err());
        assert!(check_endpoint("x", "https://id.example/token#f").is_err());
    }
}
