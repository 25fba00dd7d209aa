//! What the resource server tells clients: its RFC 9728 metadata and the
//! `WWW-Authenticate` challenges (RFC 6750) that point to it.

use super::{ResourceServer, TokenError};
use reqwest::Url;
use serde_json::{Value, json};

/// The well-known path of RFC 9728 Protected Resource Metadata.
pub const WELL_KNOWN: &str = crate::oauth_urls::RESOURCE_METADATA;

impl ResourceServer {
    /// The Protected Resource Metadata document (RFC 9728): the resource, the authorization
    /// servers that issue tokens for it, how tokens are sent, and its scopes and name when
    /// configured.
    pub fn metadata(&self) -> Value {
        let config = &self.inner.config;
        let mut doc = json!({
            "resource": config.resource,
            "authorization_servers": config.issuers,
            "bearer_methods_supported": ["header"],
        });
        if !config.scopes_supported.is_empty() {
            doc["scopes_supported"] = json!(config.scopes_supported);
        }
        if let Some(name) = &config.resource_name {
            doc["resource_name"] = json!(name);
        }
        doc
    }

    /// Where the metadata is served, path-aware (RFC 9728 §3.1): the well-known path with
    /// the resource's path after it, e.g. `/.well-known/oauth-protected-resource/mcp` for
    /// `https://mcp.example.com/mcp`.
    pub fn metadata_path(&self) -> String {
        Url::parse(&self.inner.config.resource).map_or_else(
            |_| WELL_KNOWN.to_owned(),
            |url| crate::oauth_urls::resource_metadata_path(&url),
        )
    }

    /// The metadata's absolute URL, as the challenges name it.
    pub fn metadata_url(&self) -> String {
        match Url::parse(&self.inner.config.resource) {
            Ok(mut url) => {
                url.set_path(&self.metadata_path());
                url.set_query(None);
                url.to_string()
            }
            Err(_) => self.metadata_path(),
        }
    }

    /// The `WWW-Authenticate` value of a `401`: the metadata's URL and the scopes to ask for,
    /// and, when a token was sent and refused, `error="invalid_token"` with why.
    pub fn challenge(&self, refused: Option<&TokenError>, scopes: &[&str]) -> String {
        let mut params = vec![("resource_metadata", self.metadata_url())];
        let scopes = if scopes.is_empty() {
            self.inner.config.scopes_supported.join(" ")
        } else {
            scopes.join(" ")
        };
        if !scopes.is_empty() {
            params.push(("scope", scopes));
        }
        if let Some(refused) = refused {
            params.push(("error", "invalid_token".into()));
            params.push(("error_description", refused.to_string()));
        }
        bearer(&params)
    }

    /// The `WWW-Authenticate` value of a `403` for a token that lacks `scopes`.
    pub fn insufficient_scope(&self, scopes: &[&str]) -> String {
        bearer(&[
            ("error", "insufficient_scope".into()),
            ("scope", scopes.join(" ")),
            ("resource_metadata", self.metadata_url()),
            (
                "error_description",
                format!("this needs the scope {}", scopes.join(" ")),
            ),
        ])
    }
}

/// `Bearer k="v", …`, each value a quoted string (RFC 9110 §5.6.4).
fn bearer(params: &[(&str, String)]) -> String {
    let params: Vec<String> = params
        .iter()
        .map(|(k, v)| {
            let v: String = v
                .chars()
                .filter(|c| !c.is_control())
                .flat_map(|c| match c {
                    '"' | '\\' => vec!['\\', c],
                    c => vec![c],
                })
                .collect();
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("Bearer {}", params.join(", "))
}

#[cfg(test)]
mod tests {
    use super::super::OAuthConfig;
    use super::*;

    fn server() -> ResourceServer {
        ResourceServer::new(
            OAuthConfig::new("https://mcp.example.com/mcp", "https://id.example.com")
                .scopes_supported(["reports:read", "reports:write"])
                .resource_name("Reports"),
        )
        .unwrap()
    }

    #[test]
    fn metadata_names_the_resource_and_its_authorization_servers() {
        let s = server();
        assert_eq!(
            s.metadata(),
            json!({
                "resource": "https://mcp.example.com/mcp",
                "authorization_servers": ["https://id.example.com"],
                "bearer_methods_supported": ["header"],
                "scopes_supported": ["reports:read", "reports:write"],
                "resource_name": "Reports",
            })
        );
        assert_eq!(
            s.metadata_path(),
            "/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            s.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
    }

    #[test]
    fn challenges_point_to_the_metadata_and_say_what_is_wrong() {
        let s = server();
        assert_eq!(
            s.challenge(None, &[]),
            "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", \
             scope=\"reports:read reports:write\""
        );
        let refused = s.challenge(Some(&TokenError::Expired), &["reports:write"]);
        assert!(refused.contains("scope=\"reports:write\""), "{refused}");
        assert!(refused.contains("error=\"invalid_token\""), "{refused}");
        assert!(
            refused.contains("error_description=\"the access token has expired\""),
            "{refused}"
        );
        let forbidden = s.insufficient_scope(&["reports:write"]);
        assert!(
            forbidden.starts_with("Bearer error=\"insufficient_scope\", scope=\"reports:write\"")
        );
        assert_eq!(
            bearer(&[("a", "say \"hi\"\\\n".into())]),
            "Bearer a=\"say \\\"hi\\\"\\\\\""
        );
    }
}
