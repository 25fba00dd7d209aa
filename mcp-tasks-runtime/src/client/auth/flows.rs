//! The OAuth 2.1 grants a terminal user or a machine needs: authorization code with PKCE
//! (S256) and a loopback redirect, client credentials, refresh; dynamic client registration
//! (RFC 7591) and token revocation (RFC 7009).

use super::super::AuthError;
use super::discovery::{Discovered, ServerMetadata, describe, read_body};
use super::tokens::{Grant, now_secs};
use base64::Engine as _;
use reqwest::Url;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The client an authorization server knows this client as.
#[derive(Clone)]
pub(crate) struct ClientAuth {
    pub(crate) id: String,
    pub(crate) secret: Option<String>,
    /// `client_secret_basic`, `client_secret_post` or `none`.
    pub(crate) method: String,
    pub(crate) registered: bool,
}

impl ClientAuth {
    /// A client with a secret (or none), sending it the way the server supports.
    pub(crate) fn new(id: String, secret: Option<String>, server: &ServerMetadata) -> Self {
        let method = match &secret {
            None => "none",
            Some(_)
                if !server.auth_methods.is_empty()
                    && !server
                        .auth_methods
                        .iter()
                        .any(|m| m == "client_secret_basic")
                    && server
                        .auth_methods
                        .iter()
                        .any(|m| m == "client_secret_post") =>
            {
                "client_secret_post"
            }
            Some(_) => "client_secret_basic",
        };
        Self {
            id,
            secret,
            method: method.into(),
            registered: false,
        }
    }

    fn of(grant: &Grant) -> Self {
        Self {
            id: grant.client_id.clone(),
            secret: grant.client_secret.clone(),
            method: grant.auth_method.clone(),
            registered: grant.registered,
        }
    }
}

/// 32 random bytes, base64url: a PKCE verifier (43 characters) or a `state`.
fn random_text() -> Result<String, AuthError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| AuthError::SignIn(format!("no random numbers: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The S256 challenge of a PKCE verifier (RFC 7636 §4.2).
fn s256(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Posts a form to the token (or revocation) endpoint with the client's authentication;
/// the JSON answer, or the OAuth error it carries.
async fn post_form(
    http: &reqwest::Client,
    url: &str,
    client: &ClientAuth,
    mut form: Vec<(&str, String)>,
) -> Result<Value, AuthError> {
    let mut request = http
        .post(url)
        .header(reqwest::header::ACCEPT, "application/json");
    match (client.method.as_str(), &client.secret) {
        ("client_secret_basic", Some(secret)) => {
            // RFC 6749 §2.3.1: both are form-encoded before they are joined.
            let encode =
                |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            request = request.basic_auth(encode(&client.id), Some(encode(secret)));
        }
        ("client_secret_post", Some(secret)) => {
            form.push(("client_id", client.id.clone()));
            form.push(("client_secret", secret.clone()));
        }
        _ => form.push(("client_id", client.id.clone())),
    }
    let response = request
        .form(&form)
        .send()
        .await
        .map_err(|e| AuthError::Endpoint {
            url: url.to_owned(),
            reason: describe(&e),
        })?;
    let status = response.status();
    let body = read_body(url, response).await?;
    let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(error) = doc["error"].as_str() {
        return Err(AuthError::Refused {
            error: error.to_owned(),
            description: doc["error_description"].as_str().map(str::to_owned),
        });
    }
    if !status.is_success() {
        return Err(AuthError::Endpoint {
            url: url.to_owned(),
            reason: format!("it answered HTTP {status}"),
        });
    }
    Ok(doc)
}

/// The grant a token response makes, for `server` and `resource`.
fn grant_of(
    doc: &Value,
    server: &str,
    discovered: &Discovered,
    client: &ClientAuth,
    flow: &str,
) -> Result<Grant, AuthError> {
    let endpoint = &discovered.server.token_endpoint;
    let access_token = doc["access_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| AuthError::Endpoint {
            url: endpoint.clone(),
            reason: "its answer has no access_token".into(),
        })?;
    let token_type = doc["token_type"].as_str().unwrap_or_default();
    if !token_type.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Endpoint {
            url: endpoint.clone(),
            reason: format!("it issued a `{token_type}` token, not a bearer token"),
        });
    }
    let issued_at = now_secs();
    Ok(Grant {
        server: server.to_owned(),
        resource: discovered.resource.clone(),
        issuer: discovered.server.issuer.clone(),
        token_endpoint: endpoint.clone(),
        revocation_endpoint: discovered.server.revocation_endpoint.clone(),
        client_id: client.id.clone(),
        client_secret: client.secret.clone(),
        auth_method: client.method.clone(),
        registered: client.registered,
        flow: flow.to_owned(),
        access_token: access_token.to_owned(),
        issued_at,
        expires_at: doc["expires_in"].as_u64().map(|s| issued_at + s),
        refresh_token: doc["refresh_token"].as_str().map(str::to_owned),
        scope: doc["scope"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| discovered.scope.clone()),
    })
}

/// What a stored grant knows of its server, to renew it without discovery.
fn discovered_of(grant: &Grant) -> Discovered {
    Discovered {
        resource: grant.resource.clone(),
        server: ServerMetadata {
            issuer: grant.issuer.clone(),
            authorization_endpoint: None,
            token_endpoint: grant.token_endpoint.clone(),
            registration_endpoint: None,
            revocation_endpoint: grant.revocation_endpoint.clone(),
            code_challenge_methods: Vec::new(),
            scopes_supported: Vec::new(),
            auth_methods: Vec::new(),
        },
        scope: grant.scope.clone(),
    }
}

/// A token by client credentials (RFC 6749 §4.4), for the discovered resource.
pub(crate) async fn client_credentials(
    http: &reqwest::Client,
    server: &str,
    discovered: &Discovered,
    client: &ClientAuth,
) -> Result<Grant, AuthError> {
    let mut form = vec![
        ("grant_type", "client_credentials".to_owned()),
        ("resource", discovered.resource.clone()),
    ];
    if let Some(scope) = &discovered.scope {
        form.push(("scope", scope.clone()));
    }
    let doc = post_form(http, &discovered.server.token_endpoint, client, form).await?;
    grant_of(&doc, server, discovered, client, "client_credentials")
}

/// A new access token for a stored grant: by its refresh token, or by its client
/// credentials again. `None` when it has neither.
pub(crate) async fn renew(
    http: &reqwest::Client,
    grant: &Grant,
) -> Result<Option<Grant>, AuthError> {
    let client = ClientAuth::of(grant);
    let discovered = discovered_of(grant);
    if let Some(refresh_token) = &grant.refresh_token {
        let form = vec![
            ("grant_type", "refresh_token".to_owned()),
            ("refresh_token", refresh_token.clone()),
            ("resource", grant.resource.clone()),
        ];
        let doc = post_form(http, &grant.token_endpoint, &client, form).await?;
        let mut renewed = grant_of(&doc, &grant.server, &discovered, &client, &grant.flow)?;
        // A server that does not rotate refresh tokens keeps the old one valid.
        if renewed.refresh_token.is_none() {
            renewed.refresh_token = Some(refresh_token.clone());
        }
        tracing::debug!(server = %grant.server, "access token refreshed");
        return Ok(Some(renewed));
    }
    if grant.flow == "client_credentials" && client.secret.is_some() {
        let renewed = client_credentials(http, &grant.server, &discovered, &client).await?;
        tracing::debug!(server = %grant.server, "access token renewed by client credentials");
        return Ok(Some(renewed));
    }
    Ok(None)
}

/// Registers a public native client for the loopback redirect `redirect_uri` (RFC 7591).
pub(crate) async fn register(
    http: &reqwest::Client,
    server: &ServerMetadata,
    redirect_uri: &str,
    name: &str,
) -> Result<ClientAuth, AuthError> {
    let Some(endpoint) = &server.registration_endpoint else {
        return Err(AuthError::Registration(format!(
            "{} offers no dynamic client registration; give a client id registered with it",
            server.issuer
        )));
    };
    let metadata = json!({
        "client_name": name,
        "application_type": "native",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let response = http
        .post(endpoint)
        .header(reqwest::header::ACCEPT, "application/json")
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(metadata.to_string())
        .send()
        .await
        .map_err(|e| AuthError::Registration(format!("{endpoint}: {}", describe(&e))))?;
    let status = response.status();
    let body = read_body(endpoint, response).await?;
    let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !status.is_success() {
        return Err(AuthError::Registration(format!(
            "{endpoint} answered HTTP {status}{}",
            doc["error_description"]
                .as_str()
                .or(doc["error"].as_str())
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        )));
    }
    let id = doc["client_id"]
        .as_str()
        .ok_or_else(|| AuthError::Registration(format!("{endpoint} gave no client_id")))?;
    let secret = doc["client_secret"].as_str().map(str::to_owned);
    let mut client = ClientAuth::new(id.to_owned(), secret, server);
    if let Some(method) = doc["token_endpoint_auth_method"].as_str() {
        client.method = method.to_owned();
    }
    client.registered = true;
    tracing::debug!(issuer = %server.issuer, client = %client.id, "client registered");
    Ok(client)
}

/// The loopback listener the browser comes back to.
pub(crate) struct Loopback {
    listener: TcpListener,
    pub(crate) redirect_uri: String,
}

impl Loopback {
    /// Listens on 127.0.0.1, on a port the system picks.
    pub(crate) async fn bind() -> Result<Self, AuthError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| AuthError::SignIn(format!("cannot listen on 127.0.0.1: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| AuthError::SignIn(e.to_string()))?
            .port();
        Ok(Self {
            listener,
            redirect_uri: format!("http://127.0.0.1:{port}/callback"),
        })
    }

    /// Waits for the redirect that carries `state`: its query parameters. Requests for
    /// other paths, or with another state, are answered and ignored.
    async fn wait(&self, state: &str) -> Result<Vec<(String, String)>, AuthError> {
        loop {
            let (mut socket, _) = self
                .listener
                .accept()
                .await
                .map_err(|e| AuthError::SignIn(format!("the loopback listener failed: {e}")))?;
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                match tokio::time::timeout(Duration::from_secs(10), socket.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            let line = String::from_utf8_lossy(&head);
            let target = line
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("GET "))
                .and_then(|l| l.split(' ').next())
                .unwrap_or_default()
                .to_owned();
            let url = Url::parse(&format!("http://127.0.0.1{target}")).ok();
            let params: Vec<(String, String)> = url
                .as_ref()
                .map(|u| u.query_pairs().into_owned().collect())
                .unwrap_or_default();
            let matches = url.as_ref().is_some_and(|u| u.path() == "/callback")
                && params.iter().any(|(k, v)| k == "state" && v == state);
            let (status, text) = if !matches {
                ("404 Not Found", "Nothing here.")
            } else if params.iter().any(|(k, _)| k == "error") {
                (
                    "200 OK",
                    "The sign-in was refused. You can close this window.",
                )
            } else {
                (
                    "200 OK",
                    "Signed in: mcp-tasks has its token. You can close this window.",
                )
            };
            let page = format!(
                "<!doctype html><meta charset=\"utf-8\"><title>mcp-tasks</title><p>{text}</p>"
            );
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\ncache-control: no-store\r\n\r\n{page}",
                page.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
            if matches {
                return Ok(params);
            }
        }
    }
}

/// What the authorization code flow needs besides the server.
pub(crate) struct SignIn<'a> {
    pub(crate) loopback: Loopback,
    pub(crate) client: ClientAuth,
    pub(crate) open: &'a (dyn Fn(&str) + Send + Sync),
    pub(crate) timeout: Duration,
}

/// Authorization code with PKCE (S256), the browser coming back to the loopback listener;
/// the `resource` parameter names the MCP server (RFC 8707) in both requests.
pub(crate) async fn authorization_code(
    http: &reqwest::Client,
    server: &str,
    discovered: &Discovered,
    sign_in: SignIn<'_>,
) -> Result<Grant, AuthError> {
    let metadata = &discovered.server;
    let endpoint = metadata.authorization_endpoint.as_deref().ok_or_else(|| {
        AuthError::Discovery(format!("{} has no authorization_endpoint", metadata.issuer))
    })?;
    if !metadata.code_challenge_methods.iter().any(|m| m == "S256") {
        return Err(AuthError::Discovery(format!(
            "{} does not say it supports PKCE with S256 (code_challenge_methods_supported)",
            metadata.issuer
        )));
    }
    let verifier = random_text()?;
    let state = random_text()?;
    let mut url = Url::parse(endpoint)
        .map_err(|_| AuthError::Discovery(format!("`{endpoint}` is not a URL")))?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &sign_in.client.id)
            .append_pair("redirect_uri", &sign_in.loopback.redirect_uri)
            .append_pair("code_challenge", &s256(&verifier))
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state)
            .append_pair("resource", &discovered.resource);
        if let Some(scope) = &discovered.scope {
            query.append_pair("scope", scope);
            // OpenID Connect grants `offline_access` (a refresh token) only with consent.
            if scope.split(' ').any(|s| s == "offline_access") {
                query.append_pair("prompt", "consent");
            }
        }
    }
    (sign_in.open)(url.as_str());
    let params = tokio::time::timeout(sign_in.timeout, sign_in.loopback.wait(&state))
        .await
        .map_err(|_| {
            AuthError::SignIn(format!(
                "no answer from the browser within {} s",
                sign_in.timeout.as_secs()
            ))
        })??;
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if let Some(error) = get("error") {
        return Err(AuthError::Refused {
            error,
            description: get("error_description"),
        });
    }
    // RFC 9207: an issuer named in the answer must be the one asked.
    if let Some(iss) = get("iss")
        && iss != metadata.issuer
    {
        return Err(AuthError::SignIn(format!(
            "the answer came from the issuer {iss}, not {}",
            metadata.issuer
        )));
    }
    let code = get("code").ok_or_else(|| AuthError::SignIn("the answer has no code".into()))?;
    let form = vec![
        ("grant_type", "authorization_code".to_owned()),
        ("code", code),
        ("redirect_uri", sign_in.loopback.redirect_uri.clone()),
        ("code_verifier", verifier),
        ("resource", discovered.resource.clone()),
    ];
    let doc = post_form(http, &metadata.token_endpoint, &sign_in.client, form).await?;
    grant_of(
        &doc,
        server,
        discovered,
        &sign_in.client,
        "authorization_code",
    )
}

/// Asks the authorization server to revoke the grant's tokens (RFC 7009), when it offers
/// revocation; failures are only logged.
pub(crate) async fn revoke(http: &reqwest::Client, grant: &Grant) {
    let Some(endpoint) = &grant.revocation_endpoint else {
        return;
    };
    let client = ClientAuth::of(grant);
    let tokens = [
        (grant.refresh_token.as_ref(), "refresh_token"),
        (Some(&grant.access_token), "access_token"),
    ];
    for (token, hint) in tokens {
        if let Some(token) = token {
            let form = vec![
                ("token", token.clone()),
                ("token_type_hint", hint.to_owned()),
            ];
            if let Err(e) = post_form(http, endpoint, &client, form).await {
                tracing::debug!(error = %e, "cannot revoke a token");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_s256_matches_rfc_7636() {
        // RFC 7636, Appendix B.
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let verifier = random_text().unwrap();
        assert_eq!(verifier.len(), 43);
        assert_ne!(verifier, random_text().unwrap());
    }

    #[test]
    fn a_secret_goes_the_way_the_server_takes_it() {
        let mut server = ServerMetadata {
            issuer: "https://id.example".into(),
            authorization_endpoint: None,
            token_endpoint: "https://id.example/token".into(),
            registration_endpoint: None,
            revocation_endpoint: None,
            code_challenge_methods: vec![],
            scopes_supported: vec![],
            auth_methods: vec![],
        };
        let method = |s: &ServerMetadata, secret: Option<&str>| {
            ClientAuth::new("c".into(), secret.map(str::to_owned), s).method
        };
        assert_eq!(method(&server, None), "none");
        assert_eq!(method(&server, Some("s")), "client_secret_basic");
        server.auth_methods = vec!["client_secret_post".into()];
        assert_eq!(method(&server, Some("s")), "client_secret_post");
        server.auth_methods.push("client_secret_basic".into());
        assert_eq!(method(&server, Some("s")), "client_secret_basic");
    }

    #[tokio::test]
    async fn the_loopback_answers_only_its_own_redirect() {
        let loopback = Loopback::bind().await.unwrap();
        let uri = loopback.redirect_uri.clone();
        let browser = tokio::spawn(async move {
            let http = reqwest::Client::new();
            let other = http.get(format!("{uri}?code=x&state=other")).send().await;
            let ours = http.get(format!("{uri}?code=abc&state=s1")).send().await;
            (other.unwrap().status(), ours.unwrap().status())
        });
        let params = loopback.wait("s1").await.unwrap();
        assert!(params.contains(&("code".into(), "abc".into())));
        let (other, ours) = browser.await.unwrap();
        assert_eq!((other.as_u16(), ours.as_u16()), (404, 200));
    }
}
