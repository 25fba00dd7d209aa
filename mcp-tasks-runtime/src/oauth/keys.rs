//! Each trusted issuer's signing keys: found through its metadata, cached, fetched again
//! for a key id the cache does not know, at most once per refresh interval.

use super::token::TokenError;
use crate::sync::LockExt;
use jsonwebtoken::jwk::{Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily};
use reqwest::Url;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The most a metadata document or key set may weigh.
const MAX_DOCUMENT: usize = 1 << 20;

/// One issuer's keys.
#[derive(Debug)]
pub(super) struct IssuerKeys {
    pub(super) issuer: String,
    http: reqwest::Client,
    cache: Mutex<Cache>,
    /// Held while fetching, so that concurrent misses fetch once.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Cache {
    jwks_uri: Option<String>,
    keys: Arc<JwkSet>,
    /// When the keys were last fetched (or a fetch failed), and how it failed.
    fetched: Option<(Instant, Option<String>)>,
}

impl IssuerKeys {
    pub(super) fn new(issuer: String, http: reqwest::Client) -> Self {
        Self {
            issuer,
            http,
            cache: Mutex::new(Cache::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The key that verifies a token signed with `alg` under `kid`.
    pub(super) async fn key(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
        refresh_interval: Duration,
    ) -> Result<Jwk, TokenError> {
        if let Some(key) = pick(&self.cache.locked().keys, kid, alg)? {
            return Ok(key);
        }
        let _fetching = self.fetching.lock().await;
        let recent = {
            let cache = self.cache.locked();
            if let Some(key) = pick(&cache.keys, kid, alg)? {
                return Ok(key);
            }
            cache
                .fetched
                .as_ref()
                .filter(|(at, _)| at.elapsed() < refresh_interval)
                .map(|(_, failure)| failure.clone())
        };
        match recent {
            // Fetched a moment ago: the key is not there, or the issuer could not be reached.
            Some(None) => return Err(TokenError::UnknownKey(kid.map(str::to_owned))),
            Some(Some(failure)) => return Err(TokenError::KeysUnavailable(failure)),
            None => {}
        }
        let fetched = self.fetch().await;
        let mut cache = self.cache.locked();
        match fetched {
            Ok((jwks_uri, keys)) => {
                tracing::debug!(issuer = %self.issuer, keys = keys.keys.len(), "signing keys fetched");
                cache.jwks_uri = Some(jwks_uri);
                cache.keys = Arc::new(keys);
                cache.fetched = Some((Instant::now(), None));
                pick(&cache.keys, kid, alg)?.ok_or(TokenError::UnknownKey(kid.map(str::to_owned)))
            }
            Err(failure) => {
                tracing::warn!(issuer = %self.issuer, %failure, "cannot fetch signing keys");
                cache.fetched = Some((Instant::now(), Some(failure.clone())));
                Err(TokenError::KeysUnavailable(failure))
            }
        }
    }

    /// The issuer's key set, and where it was found.
    async fn fetch(&self) -> Result<(String, JwkSet), String> {
        let known = self.cache.locked().jwks_uri.clone();
        let jwks_uri = match known {
            Some(uri) => uri,
            None => self.discover().await?,
        };
        let body = self.get(&jwks_uri).await?;
        let keys = serde_json::from_value(body)
            .map_err(|e| format!("the key set at {jwks_uri} is not a JWKS: {e}"))?;
        Ok((jwks_uri, keys))
    }

    /// The `jwks_uri` of the issuer's metadata: RFC 8414 first, then OpenID Connect
    /// discovery. The metadata must name this issuer exactly.
    async fn discover(&self) -> Result<String, String> {
        let mut failures = Vec::new();
        for url in discovery_urls(&self.issuer)? {
            match self.get(url.as_str()).await {
                Ok(metadata) => {
                    if metadata["issuer"] != self.issuer.as_str() {
                        return Err(format!(
                            "the metadata at {url} names issuer {} instead",
                            metadata["issuer"]
                        ));
                    }
                    let jwks_uri = metadata["jwks_uri"]
                        .as_str()
                        .ok_or_else(|| format!("the metadata at {url} names no jwks_uri"))?;
                    super::config::check_uri("jwks_uri", jwks_uri).map_err(|e| e.to_string())?;
                    return Ok(jwks_uri.to_owned());
                }
                Err(failure) => failures.push(failure),
            }
        }
        Err(failures.join("; "))
    }

    /// A JSON document, within the client's timeout and [`MAX_DOCUMENT`].
    async fn get(&self, url: &str) -> Result<Value, String> {
        let response = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| describe(url, &e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{url} answered {status}"));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_DOCUMENT as u64)
        {
            return Err(format!("{url} sent more than {MAX_DOCUMENT} bytes"));
        }
        let body = response.bytes().await.map_err(|e| describe(url, &e))?;
        if body.len() > MAX_DOCUMENT {
            return Err(format!("{url} sent more than {MAX_DOCUMENT} bytes"));
        }
        serde_json::from_slice(&body).map_err(|e| format!("{url} sent no JSON document: {e}"))
    }
}

fn describe(url: &str, error: &reqwest::Error) -> String {
    if error.is_timeout() {
        format!("{url} did not answer in time")
    } else if error.is_connect() {
        format!("cannot connect to {url}")
    } else {
        format!("cannot fetch {url}: {error}")
    }
}

/// Where an issuer's metadata may be: RFC 8414's well-known URI (inserted before the
/// issuer's path), then OpenID Connect's (appended to it).
fn discovery_urls(issuer: &str) -> Result<[Url; 2], String> {
    let base = Url::parse(issuer).map_err(|e| format!("issuer {issuer}: {e}"))?;
    let path = base.path().trim_end_matches('/').to_owned();
    let mut oauth = base.clone();
    oauth.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
    let mut openid = base;
    openid.set_path(&format!("{path}/.well-known/openid-configuration"));
    Ok([oauth, openid])
}

/// The key of `keys` for `kid` and `alg`: the one with that id, or without an id the only
/// one that fits the algorithm. A key whose own `alg` or use says otherwise is refused.
fn pick(keys: &JwkSet, kid: Option<&str>, alg: Algorithm) -> Result<Option<Jwk>, TokenError> {
    let fits = |k: &&Jwk| {
        k.common
            .key_algorithm
            .is_none_or(|a| a == KeyAlgorithm::from(alg))
            && !matches!(k.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature)
            && key_family_fits(k, alg)
    };
    let key = match kid {
        Some(kid) => match keys.find(kid) {
            Some(key) if fits(&key) => Some(key.clone()),
            Some(_) => {
                return Err(TokenError::Algorithm(format!(
                    "{alg:?}, which key {kid} is not for"
                )));
            }
            None => None,
        },
        None => {
            let mut fitting = keys.keys.iter().filter(fits);
            match (fitting.next(), fitting.next()) {
                (Some(only), None) => Some(only.clone()),
                _ => None,
            }
        }
    };
    Ok(key)
}

/// `true` when `key`'s type can verify `alg`.
fn key_family_fits(key: &Jwk, alg: Algorithm) -> bool {
    use jsonwebtoken::jwk::AlgorithmParameters as P;
    matches!(
        (&key.algorithm, alg.family()),
        (P::RSA(_), AlgorithmFamily::Rsa)
            | (P::EllipticCurve(_), AlgorithmFamily::Ec)
            | (P::OctetKeyPair(_), AlgorithmFamily::Ed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_inserts_the_well_known_part_before_the_issuer_s_path() {
        let [oauth, openid] = discovery_urls("https://id.example.com").unwrap();
        assert_eq!(
            oauth.as_str(),
            "https://id.example.com/.well-known/oauth-authorization-server"
        );
        assert_eq!(
            openid.as_str(),
            "https://id.example.com/.well-known/openid-configuration"
        );
        let [oauth, openid] = discovery_urls("https://id.example.com/tenant/1/").unwrap();
        assert_eq!(
            oauth.as_str(),
            "https://id.example.com/.well-known/oauth-authorization-server/tenant/1"
        );
        assert_eq!(
            openid.as_str(),
            "https://id.example.com/tenant/1/.well-known/openid-configuration"
        );
    }

    fn set(keys: Value) -> JwkSet {
        serde_json::from_value(serde_json::json!({ "keys": keys })).unwrap()
    }

    #[test]
    fn a_key_is_picked_by_id_or_as_the_only_one_that_fits() {
        let ec = serde_json::json!({"kty": "EC", "crv": "P-256", "kid": "ec1", "alg": "ES256",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"});
        let rsa = serde_json::json!({"kty": "RSA", "kid": "rsa1", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"});
        let keys = set(serde_json::json!([ec, rsa]));
        assert!(
            pick(&keys, Some("ec1"), Algorithm::ES256)
                .unwrap()
                .is_some()
        );
        assert!(
            pick(&keys, Some("nope"), Algorithm::ES256)
                .unwrap()
                .is_none()
        );
        // The key says ES256; a token that says otherwise is refused.
        assert!(pick(&keys, Some("ec1"), Algorithm::ES384).is_err());
        // Without an id: the only key that can verify the algorithm.
        let only = pick(&keys, None, Algorithm::RS256).unwrap().unwrap();
        assert_eq!(only.common.key_id.as_deref(), Some("rsa1"));
        assert!(pick(&keys, None, Algorithm::EdDSA).unwrap().is_none());
    }
}
