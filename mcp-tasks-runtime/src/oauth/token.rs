//! Validating one access token.

use super::config::OAuthConfig;
use super::keys::IssuerKeys;
use crate::model::JsonObject;
use crate::principal::Principal;
use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{DecodingKey, Validation};
use serde_json::Value;
use std::time::{Duration, UNIX_EPOCH};

/// Why an access token was refused. Each is answered `401` with `error="invalid_token"`,
/// but [`KeysUnavailable`](Self::KeysUnavailable), which is the server's trouble (`503`).
///
/// The messages never quote the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token is not a JWT this server can read.
    #[error("the access token is malformed: {0}")]
    Malformed(String),
    /// Its algorithm is not accepted (`none`, HMAC, one off the allow-list, or not its key's).
    #[error("the access token's algorithm is not accepted: {0}")]
    Algorithm(String),
    /// Its issuer is not one this server trusts.
    #[error("the access token's issuer is not trusted")]
    UntrustedIssuer,
    /// No key of its issuer has its key id (after fetching the keys again).
    #[error("the access token's signing key is not known{}", .0.as_ref().map(|k| format!(" (key id {k})")).unwrap_or_default())]
    UnknownKey(Option<String>),
    /// Its signature does not verify.
    #[error("the access token's signature is invalid")]
    BadSignature,
    /// It has expired.
    #[error("the access token has expired")]
    Expired,
    /// It is not valid yet (`nbf`).
    #[error("the access token is not valid yet")]
    NotYetValid,
    /// It was issued for another resource (`aud`).
    #[error("the access token was not issued for this resource")]
    WrongAudience,
    /// A claim this server requires is missing.
    #[error("the access token has no `{0}` claim")]
    MissingClaim(String),
    /// The issuer's signing keys could not be fetched: the token could not be checked.
    #[error("the issuer's signing keys cannot be fetched: {0}")]
    KeysUnavailable(String),
    /// Introspection says the (opaque) token is not active: unknown, expired or revoked.
    #[error("the access token is not active")]
    Inactive,
    /// The introspection endpoint could not be asked: the token could not be checked.
    #[error("the token introspection endpoint cannot be asked: {0}")]
    IntrospectionUnavailable(String),
}

impl TokenError {
    /// `true` when the server, not the token, is at fault: answer `503`, not `401`.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Self::KeysUnavailable(_) | Self::IntrospectionUnavailable(_)
        )
    }
}

/// Checks `token` against the issuer it names, among `issuers`.
pub(super) async fn validate(
    config: &OAuthConfig,
    issuers: &[IssuerKeys],
    token: &str,
) -> Result<Principal, TokenError> {
    let header = jsonwebtoken::decode_header(token).map_err(|e| {
        // `none` and unknown algorithms are not algorithms `jsonwebtoken` reads.
        match (e.kind(), token_alg(token)) {
            (ErrorKind::Json(_), Some(alg)) => TokenError::Algorithm(alg),
            _ => TokenError::Malformed(e.to_string()),
        }
    })?;
    if !config.algorithms.contains(&header.alg) {
        return Err(TokenError::Algorithm(format!("{:?}", header.alg)));
    }
    // The issuer is read before the signature is checked, only to choose whose keys check
    // it; only configured issuers are ever contacted.
    let claimed = unverified_issuer(token)?;
    let issuer = issuers
        .iter()
        .find(|i| i.issuer == claimed)
        .ok_or(TokenError::UntrustedIssuer)?;
    let jwk = issuer
        .key(
            header.kid.as_deref(),
            header.alg,
            config.key_refresh_interval,
        )
        .await?;
    let key = DecodingKey::from_jwk(&jwk)
        .map_err(|e| TokenError::Malformed(format!("the signing key is unusable: {e}")))?;
    let mut validation = Validation::new(header.alg);
    validation.leeway = config.leeway.as_secs();
    validation.validate_nbf = true;
    validation.set_issuer(&[&issuer.issuer]);
    validation.set_audience(&[&config.resource]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    let data = jsonwebtoken::decode::<JsonObject>(token, &key, &validation).map_err(|e| match e
        .kind()
    {
        ErrorKind::ExpiredSignature => TokenError::Expired,
        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
        ErrorKind::InvalidAudience => TokenError::WrongAudience,
        ErrorKind::InvalidIssuer => TokenError::UntrustedIssuer,
        ErrorKind::InvalidSignature => TokenError::BadSignature,
        ErrorKind::MissingRequiredClaim(claim) => TokenError::MissingClaim(claim.clone()),
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            TokenError::Algorithm(format!("{:?}", header.alg))
        }
        _ => TokenError::Malformed(e.to_string()),
    })?;
    Ok(principal(config, data.claims))
}

/// The `alg` a token's header names, read as text (for one `jsonwebtoken` cannot parse).
fn token_alg(token: &str) -> Option<String> {
    let header = segment(token, 0).ok()?;
    header["alg"].as_str().map(str::to_owned)
}

/// The `iss` the token claims, before its signature is checked.
fn unverified_issuer(token: &str) -> Result<String, TokenError> {
    let claims = segment(token, 1)?;
    claims["iss"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| TokenError::MissingClaim("iss".into()))
}

/// Part `n` of a compact JWT, decoded as JSON.
fn segment(token: &str, n: usize) -> Result<Value, TokenError> {
    let part = token
        .split('.')
        .nth(n)
        .ok_or_else(|| TokenError::Malformed("not a JWT".into()))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::Malformed("not base64url".into()))?;
    serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed("not JSON".into()))
}

/// The principal the verified `claims` name.
fn principal(config: &OAuthConfig, mut claims: JsonObject) -> Principal {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let mut principal = Principal::new(text(claims.get("sub")).unwrap_or_default());
    principal.issuer = text(claims.get("iss"));
    principal.client_id = text(claims.get("client_id")).or_else(|| text(claims.get("azp")));
    principal.expires_at = claims
        .get("exp")
        .and_then(Value::as_u64)
        .map(|s| UNIX_EPOCH + Duration::from_secs(s));
    // `scope` is a space-separated string (RFC 9068); some issuers send `scp`, a list.
    let scopes: Vec<String> = match claims.get("scope").or_else(|| claims.get("scp")) {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    principal.scopes.extend(scopes);
    for name in &config.kept_claims {
        if let Some(value) = claims.remove(name) {
            principal.claims.insert(name.clone(), value);
        }
    }
    principal
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_principal_reads_the_standard_claims_and_keeps_the_ones_asked_for() {
        let config = OAuthConfig::new("https://mcp.example/mcp", "https://id.example")
            .keep_claims(["tenant"]);
        let claims = json!({"sub": "ann", "iss": "https://id.example", "azp": "cli",
            "exp": 2_000_000_000u64, "scp": ["a", "b"], "tenant": "acme", "email": "x"});
        let p = principal(&config, claims.as_object().unwrap().clone());
        assert_eq!(p.subject, "ann");
        assert_eq!(p.client_id.as_deref(), Some("cli"));
        assert!(p.has_scope("a") && p.has_scope("b"));
        assert_eq!(p.claims.get("tenant"), Some(&json!("acme")));
        assert!(!p.claims.contains_key("email"));
        assert_eq!(
            p.expires_at,
            Some(UNIX_EPOCH + Duration::from_secs(2_000_000_000))
        );
        let spaced = json!({"sub": "bob", "scope": "x  y"});
        let p = principal(&config, spaced.as_object().unwrap().clone());
        assert_eq!(p.scopes.iter().collect::<Vec<_>>(), ["x", "y"]);
    }

    #[test]
    fn the_claimed_issuer_and_algorithm_are_read_without_trusting_them() {
        let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let token = format!(
            "{}.{}.",
            b64(json!({"alg": "none"})),
            b64(json!({"iss": "https://id.example", "sub": "x"}))
        );
        assert_eq!(token_alg(&token).as_deref(), Some("none"));
        assert_eq!(unverified_issuer(&token).unwrap(), "https://id.example");
        assert!(matches!(
            unverified_issuer("abc"),
            Err(TokenError::Malformed(_))
        ));
    }
}
