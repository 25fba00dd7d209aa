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
    }
}
