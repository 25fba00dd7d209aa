//! RFC 7662 token introspection, for access tokens that are not JWTs (opaque tokens): the
//! authorization server is asked whether a token is active and for whom, and its answer is
//! kept for a short while.

use super::TokenError;
use super::config::{OAuthConfig, check_uri};
use crate::model::JsonObject;
use crate::principal::Principal;
use crate::sync::LockExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// The most answers kept at once; past it the expired ones go, then all of them.
const MAX_CACHED: usize = 10_000;

/// The most an introspection answer may weigh.
const MAX_ANSWER: usize = 64 * 1024;

/// Where and how opaque access tokens are introspected (RFC 7662): the authorization
/// server's introspection endpoint and the resource server's own client credentials there.
#[derive(Clone)]
pub struct Introspection {
    pub(super) endpoint: String,
    pub(super) client_id: String,
    pub(super) client_secret: String,
    pub(super) cache_for: Duration,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspection")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("cache_for", &self.cache_for)
            .finish_non_exhaustive()
    }
}

impl Introspection {
    /// Introspects at `endpoint` (the authorization server's `introspection_endpoint`),
    /// authenticating as `client_id` with `client_secret` (HTTP Basic). An active token's
    /// answer is kept for 30 s by default (never past the token's `exp`).
    pub fn new(
        endpoint: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            cache_for: Duration::from_secs(30),
        }
    }

    /// How long an active token's answer is kept (zero: ask every time). A token revoked
    /// meanwhile is still accepted until then: keep it short.
    #[must_use]
    pub fn cache_for(mut self, ttl: Duration) -> Self {
        self.cache_for = ttl;
        self
    }

    pub(super) fn check(&self) -> Result<(), super::ConfigError> {
        check_uri("introspection endpoint", &self.endpoint).map(|_| ())
    }
}

/// Answers kept by the SHA-256 of their token (the token itself is never kept).
#[derive(Debug, Default)]
pub(super) struct Cache {
    answers: Mutex<HashMap<[u8; 32], (Principal, Instant)>>,
}

impl Cache {
    fn get(&self, key: &[u8; 32]) -> Option<Principal> {
        let mut answers = self.answers.locked();
        match answers.get(key) {
            Some((principal, until)) if *until > Instant::now() => Some(principal.clone()),
            Some(_) => {
                answers.remove(key);
                None
            }
            None => None,
        }
    }

    fn put(&self, key: [u8; 32], principal: Principal, until: Instant) {
        let mut answers = self.answers.locked();
        if answers.len() >= MAX_CACHED {
            let now = Instant::now();
            answers.retain(|_, (_, until)| *until > now);
            if answers.len() >= MAX_CACHED {
                answers.clear();
            }
        }
        answers.insert(key, (principal, until));
    }
}

/// `true` for a token that is not a compact JWS (three base64url parts): one to introspect.
pub(super) fn is_opaque(token: &str) -> bool {
    token.split('.').count() != 3
}

/// Asks the introspection endpoint about `token` (or finds the answer kept).
pub(super) async fn introspect(
    config: &OAuthConfig,
    introspection: &Introspection,
    http: &reqwest::Client,
    cache: &Cache,
    token: &str,
) -> Result<Principal, TokenError> {
    let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    if let Some(principal) = cache.get(&key) {
        return Ok(principal);
    }
    let unavailable = |why: String| TokenError::IntrospectionUnavailable(why);
    let endpoint = &introspection.endpoint;
    let response = http
        .post(endpoint)
        .basic_auth(&introspection.client_id, Some(&introspection.client_secret))
        .header(reqwest::header::ACCEPT, "application/json")
        .form(&[("token", token), ("token_type_hint", "access_token")])
        .send()
        .await
        .map_err(|e| {
            unavailable(if e.is_timeout() {
                format!("{endpoint} did not answer in time")
            } else {
                format!("cannot reach {endpoint}")
            })
        })?;
    let status = response.status();
    if !status.is_success() {
        return Err(unavailable(format!("{endpoint} answered {status}")));
    }
    let body = response
        .bytes()
        .await
        .map_err(|_| unavailable(format!("cannot read the answer of {endpoint}")))?;
    if body.len() > MAX_ANSWER {
        return Err(unavailable(format!(
            "{endpoint} sent more than {MAX_ANSWER} bytes"
        )));
    }
    let answer: JsonObject = serde_json::from_slice(&body)
        .map_err(|_| unavailable(format!("{endpoint} sent no JSON object")))?;
    let (principal, exp) = judge(config, answer)?;
    let mut until = Instant::now() + introspection.cache_for;
    if let Some(left) = exp.and_then(|exp| exp.duration_since(SystemTime::now()).ok()) {
        until = until.min(Instant::now() + left);
    }
    if !introspection.cache_for.is_zero() {
        cache.put(key, principal.clone(), until);
    }
    Ok(principal)
}

/// The principal an introspection answer names, if it is an active token of a trusted
/// issuer, issued for this resource and not expired; and its expiry.
fn judge(
    config: &OAuthConfig,
    answer: JsonObject,
) -> Result<(Principal, Option<SystemTime>), TokenError> {
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err(TokenError::Inactive);
    }
    let text = |name: &str| answer.get(name).and_then(Value::as_str).map(str::to_owned);
    let issuer = text("iss");
    if let Some(issuer) = &issuer
        && !config.issuers.iter().any(|i| i == issuer)
    {
        return Err(TokenError::UntrustedIssuer);
    }
    let audience_ok = match answer.get("aud") {
        Some(Value::String(aud)) => *aud == config.resource,
        Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(&config.resource)),
        _ => false,
    };
    if !audience_ok {
        return Err(TokenError::WrongAudience);
    }
    let now = SystemTime::now();
    let at = |name: &str| {
        answer
            .get(name)
            .and_then(Value::as_u64)
            .map(|s| UNIX_EPOCH + Duration::from_secs(s))
    };
    let exp = at("exp");
    if exp.is_some_and(|exp| exp + config.leeway < now) {
        return Err(TokenError::Expired);
    }
    if at("nbf").is_some_and(|nbf| nbf > now + config.leeway) {
        return Err(TokenError::NotYetValid);
    }
    let client_id = text("client_id");
    // A token a client got for itself (client credentials) may name no subject: the client
    // is the subject.
    let subject = text("sub")
        .or_else(|| client_id.clone())
        .ok_or_else(|| TokenError::MissingClaim("sub".into()))?;
    let mut principal = Principal::new(subject);
    principal.issuer = issuer.or_else(|| config.issuers.first().cloned());
    principal.client_id = client_id;
    principal.expires_at = exp;
    if let Some(scope) = answer.get("scope").and_then(Value::as_str) {
        principal
            .scopes
            .extend(scope.split_whitespace().map(str::to_owned));
    }
    for name in &config.kept_claims {
        if let Some(value) = answer.get(name) {
            principal.claims.insert(name.clone(), value.clone());
        }
    }
    Ok((principal, exp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(v: Value) -> JsonObject {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn an_answer_is_judged_like_a_token() {
        let config = OAuthConfig::new("https://mcp.example/mcp", "https://id.example");
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 600;
        let good = json!({"active": true, "iss": "https://id.example", "client_id": "cli",
            "aud": ["https://mcp.example/mcp"], "scope": "a b", "exp": exp});
        let (p, _) = judge(&config, answer(good.clone())).unwrap();
        assert_eq!(
            (p.subject.as_str(), p.client_id.as_deref()),
            ("cli", Some("cli"))
        );
        assert!(p.has_scopes(&["a", "b"]));
        let mut wrong = good.clone();
        wrong["active"] = json!(false);
        assert_eq!(
            judge(&config, answer(wrong)).err(),
            Some(TokenError::Inactive)
        );
        let mut wrong = good.clone();
        wrong["aud"] = json!("https://other.example/mcp");
        assert_eq!(
            judge(&config, answer(wrong)).err(),
            Some(TokenError::WrongAudience)
        );
        let mut wrong = good.clone();
        wrong["iss"] = json!("https://evil.example");
        assert_eq!(
            judge(&config, answer(wrong)).err(),
            Some(TokenError::UntrustedIssuer)
        );
        let mut wrong = good;
        wrong["exp"] = json!(1);
        assert_eq!(
            judge(&config, answer(wrong)).err(),
            Some(TokenError::Expired)
        );
        assert!(is_opaque("abc") && !is_opaque("a.b.c"));
    }
}
