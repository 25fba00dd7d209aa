//! Who makes a request, as an authenticator found out: a subject with the scopes and facts
//! its credentials carry.

use crate::model::JsonObject;
use std::collections::BTreeSet;
use std::time::SystemTime;

/// An authenticated caller: the subject of a validated access token, or whoever an
/// application's own authentication names.
///
/// Made by [`Principal::new`] and the `with_*` methods, or by the OAuth resource server
/// (feature `oauth`) from a token's claims.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Principal {
    /// Who it is: a token's `sub`, a user id.
    pub subject: String,
    /// What it may do: a token's `scope` (or `scp`).
    pub scopes: BTreeSet<String>,
    /// The OAuth client it acts through: a token's `client_id` (or `azp`).
    pub client_id: Option<String>,
    /// Who vouches for it: a token's `iss`.
    pub issuer: Option<String>,
    /// When its credentials stop being valid: a token's `exp`.
    pub expires_at: Option<SystemTime>,
    /// Other claims kept for the application (the resource server keeps those it is told to).
    pub claims: JsonObject,
    /// The name its tasks are owned under, when the subject alone does not tell principals
    /// apart (see [`with_owner`](Self::with_owner)).
    owner: Option<String>,
}

impl Principal {
    /// A principal named `subject`, with no scopes or other facts.
    pub fn new(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            scopes: BTreeSet::new(),
            client_id: None,
            issuer: None,
            expires_at: None,
            claims: JsonObject::new(),
            owner: None,
        }
    }

    /// The same, acting through the OAuth client `client_id`.
    #[must_use]
    pub fn with_client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = Some(client_id.into());
        self
    }

    /// The same, owning its tasks under `name` rather than its subject: for authenticators
    /// whose subjects are unique only together with something else (the subjects of several
    /// trusted issuers, say).
    #[must_use]
    pub fn with_owner(mut self, name: impl Into<String>) -> Self {
        self.owner = Some(name.into());
        self
    }

    /// The name its tasks are owned under: its subject, unless
    /// [`with_owner`](Self::with_owner) named another. Two requests whose principals have the
    /// same owner name see the same tasks.
    pub fn owner_name(&self) -> &str {
        self.owner.as_deref().unwrap_or(&self.subject)
    }

    /// `true` when it holds every scope of `needed`.
    pub fn has_scopes<S: AsRef<str>>(&self, needed: &[S]) -> bool {
        needed.iter().all(|s| self.has_scope(s.as_ref()))
    }

    /// What a task keeps of it, so that whichever process runs the task knows who asked:
    /// the subject, the scopes, the client, the issuer and the owner name; never the
    /// credentials, their expiry or other claims.
    pub fn for_record(&self) -> Self {
        Self {
            subject: self.subject.clone(),
            scopes: self.scopes.clone(),
            client_id: self.client_id.clone(),
            issuer: self.issuer.clone(),
            expires_at: None,
            claims: JsonObject::new(),
            owner: self.owner.clone(),
        }
    }

    /// The same, holding `scopes` as well.
    #[must_use]
    pub fn with_scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes.extend(scopes.into_iter().map(Into::into));
        self
    }

    /// The same, vouched for by `issuer`.
    #[must_use]
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// `true` when it holds `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.contains(scope)
    }

    /// The scopes among `needed` it does not hold, in their order.
    pub fn missing_scopes<'a>(&self, needed: &[&'a str]) -> Vec<&'a str> {
        needed
            .iter()
            .copied()
            .filter(|s| !self.has_scope(s))
            .collect()
    }
}

/// A principal as a task record stores it (see [`Principal::for_record`]).
#[derive(serde::Serialize, serde::Deserialize)]
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]
struct Stored {
    #[serde(rename = "sub")]
    subject: String,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    scopes: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_id: Option<String>,
    #[serde(default, rename = "iss", skip_serializing_if = "Option::is_none")]
    issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
}

impl Principal {
    /// What a stored task keeps of it, as JSON.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
        allow(dead_code)
    )]
    pub(crate) fn to_stored(&self) -> serde_json::Value {
        serde_json::to_value(Stored {
            subject: self.subject.clone(),
            scopes: self.scopes.clone(),
            client_id: self.client_id.clone(),
            issuer: self.issuer.clone(),
            owner: self.owner.clone(),
        })
        .unwrap_or_default()
    }

    /// The principal a stored task kept, if `value` is one.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
        allow(dead_code)
    )]
    pub(crate) fn from_stored(value: serde_json::Value) -> Option<Self> {
        let stored: Stored = serde_json::from_value(value).ok()?;
        Some(Self {
            subject: stored.subject,
            scopes: stored.scopes,
            client_id: stored.client_id,
            issuer: stored.issuer,
            expires_at: None,
            claims: JsonObject::new(),
            owner: stored.owner,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_held_or_missing() {
        let p = Principal::new("ann")
            .with_scopes(["reports:read", "reports:write"])
            .with_issuer("https://id.example.com");
        assert!(p.has_scope("reports:write"));
        assert!(!p.has_scope("admin"));
        assert_eq!(
            p.missing_scopes(&["admin", "reports:read", "billing"]),
            ["admin", "billing"]
        );
        assert_eq!(p.issuer.as_deref(), Some("https://id.example.com"));
        assert!(p.has_scopes(&["reports:read", "reports:write"]));
        assert!(!p.has_scopes(&["reports:read", "admin"]));
        assert_eq!(p.owner_name(), "ann");
        assert_eq!(p.clone().with_owner("idp#ann").owner_name(), "idp#ann");
    }

    #[test]
    fn a_record_keeps_who_asked_and_not_their_credentials() {
        let mut p = Principal::new("ann")
            .with_scopes(["a"])
            .with_client_id("cli")
            .with_issuer("https://id.example");
        p.expires_at = Some(SystemTime::now());
        p.claims
            .insert("email".into(), serde_json::json!("ann@example.com"));
        let kept = p.for_record();
        assert_eq!(kept.subject, "ann");
        assert!(kept.has_scope("a"));
        assert_eq!(kept.client_id.as_deref(), Some("cli"));
        assert_eq!(kept.issuer.as_deref(), Some("https://id.example"));
        assert!(kept.expires_at.is_none() && kept.claims.is_empty());
        let stored = kept.to_stored();
        assert_eq!(
            stored,
            serde_json::json!({"sub": "ann", "scopes": ["a"], "client_id": "cli", "iss": "https://id.example"})
        );
        assert_eq!(Principal::from_stored(stored), Some(kept));
        assert_eq!(Principal::from_stored(serde_json::json!(3)), None);
    }
}
