//! The URL rules of OAuth that the resource server (`oauth`) and the client (`client`) both
//! follow: which endpoints may be used, and where a resource's metadata is.

use reqwest::Url;

/// The well-known path of RFC 9728 Protected Resource Metadata.
pub(crate) const RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource";

/// `uri` as an endpoint OAuth may use: an absolute `https` URL without a fragment, or
/// `http` on a loopback host; else why not.
pub(crate) fn usable(uri: &str) -> Result<Url, &'static str> {
    let url = Url::parse(uri).map_err(|_| "not an absolute URL")?;
    if url.fragment().is_some() {
        return Err("it has a fragment");
    }
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        "http" => Err("plain http is allowed on loopback hosts only"),
        _ => Err("not an https URL"),
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// Where the metadata of the resource `resource` is served, path-aware (RFC 9728 §3.1):
/// the well-known path with the resource's path after it, e.g.
/// `/.well-known/oauth-protected-resource/mcp` for `https://mcp.example.com/mcp`.
pub(crate) fn resource_metadata_path(resource: &Url) -> String {
    format!(
        "{RESOURCE_METADATA}{}",
        resource.path().trim_end_matches('/')
    )
}
