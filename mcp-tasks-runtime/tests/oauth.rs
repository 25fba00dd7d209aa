//! The OAuth resource server against a real OpenID provider (`oidc-provider`, started from
//! `tests/oauth` with its pinned lock file): tokens it issues by client credentials are
//! accepted, and every way a token can be wrong is refused with its own reason, as is an
//! issuer whose keys cannot be fetched, within a bound.

#![cfg(feature = "oauth")]

mod provider;

use base64::Engine as _;
use mcp_tasks_runtime::oauth::{OAuthConfig, ResourceServer, TokenError};
use provider::{Caller, JsonValue, Provider, RESOURCE, WITHIN};
use serde_json::{Value, json};
use std::time::Duration;

async fn check(server: &ResourceServer, token: &str) -> Result<Value, TokenError> {
    let principal = tokio::time::timeout(WITHIN, server.authenticate(token))
        .await
        .expect("validation ends")?;
    Ok(json!({
        "sub": principal.subject,
        "scopes": principal.scopes,
        "client": principal.client_id,
        "iss": principal.issuer,
        "expires": principal.expires_at.is_some(),
    }))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(part: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_the_trusted_issuer_for_this_resource_are_accepted() {
    let provider = Provider::fresh("accept");
    let server = provider.resource_server();
    let token = provider.token("machine", "echo:write", RESOURCE).await;
    assert_eq!(
        check(&server, &token).await.unwrap(),
        json!({"sub": "machine", "scopes": ["echo:write"], "client": "machine",
               "iss": provider.issuer, "expires": true})
    );
    let rsa = provider
        .token("rsa", "echo:write tasks:read", RESOURCE)
        .await;
    let principal = check(&server, &rsa).await.unwrap();
    assert_eq!(principal["scopes"], json!(["echo:write", "tasks:read"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_wrong_token_is_refused_with_its_reason() {
    let provider = Provider::fresh("refuse");
    let server = provider.resource_server();
    let good = provider.token("machine", "echo:write", RESOURCE).await;
    let parts: Vec<&str> = good.split('.').collect();

    // Issued for another resource.
    let elsewhere = provider
        .token("machine", "echo:write", "http://127.0.0.1:9/other")
        .await;
    assert_eq!(
        check(&server, &elsewhere).await,
        Err(TokenError::WrongAudience)
    );

    // Not valid for an hour yet.
    let future = provider.token("future", "echo:write", RESOURCE).await;
    assert_eq!(check(&server, &future).await, Err(TokenError::NotYetValid));

    // A changed signature, and changed claims under the old signature.
    let mut signature = unb64(parts[2]);
    signature[10] ^= 1;
    let tampered = format!("{}.{}.{}", parts[0], parts[1], b64(&signature));
    assert_eq!(
        check(&server, &tampered).await,
        Err(TokenError::BadSignature)
    );
    let mut claims: Value = serde_json::from_slice(&unb64(parts[1])).unwrap();
    claims["scope"] = json!("echo:write admin");
    let widened = format!(
        "{}.{}.{}",
        parts[0],
        b64(claims.to_string().as_bytes()),
        parts[2]
    );
    assert_eq!(
        check(&server, &widened).await,
        Err(TokenError::BadSignature)
    );

    // `alg: none`, with the real claims and no signature.
    let none = format!("{}.{}.", b64(br#"{"alg":"none","typ":"at+jwt"}"#), parts[1]);
    assert!(matches!(
        check(&server, &none).await,
        Err(TokenError::Algorithm(_))
    ));

    // HS256 keyed with the issuer's public key (the classic confusion).
    let jwks: Value = reqwest::get(format!("{}/jwks", provider.issuer))
        .await
        .unwrap()
        .json_value()
        .await;
    let public = jwks["keys"][0].to_string();
    let hmac = jsonwebtoken::encode(
        &jsonwebtoken::Header {
            kid: jwks["keys"][0]["kid"].as_str().map(str::to_owned),
            ..jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256)
        },
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(public.as_bytes()).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        check(&server, &hmac).await,
        Err(TokenError::Algorithm(_))
    ));

    // A key id the issuer does not have.
    let mut header: Value = serde_json::from_slice(&unb64(parts[0])).unwrap();
    header["kid"] = json!("made-up");
    let unknown = format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        parts[1],
        parts[2]
    );
    assert_eq!(
        check(&server, &unknown).await,
        Err(TokenError::UnknownKey(Some("made-up".into())))
    );

    // Another issuer's token, and garbage.
    let other = Provider::fresh("refuse-other");
    let foreign = other.token("machine", "echo:write", RESOURCE).await;
    assert_eq!(
        check(&server, &foreign).await,
        Err(TokenError::UntrustedIssuer)
    );
    assert!(matches!(
        check(&server, "not a token").await,
        Err(TokenError::Malformed(_))
    ));

    // Expired: valid for 2 s, checked without leeway once they are over.
    let short = provider.token("short", "echo:write", RESOURCE).await;
    assert!(check(&server, &short).await.is_ok());
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(check(&server, &short).await, Err(TokenError::Expired));

    // The good one still passes.
    assert!(check(&server, &good).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_keys_are_fetched_again_and_the_old_ones_stop_working() {
    let first = Provider::fresh("rotate");
    let (port, keys) = (first.port(), first.keys.clone());
    let server = ResourceServer::new(
        OAuthConfig::new(RESOURCE, &first.issuer).key_refresh_interval(Duration::ZERO),
    )
    .unwrap();
    let old = first.token("machine", "echo:write", RESOURCE).await;
    assert!(check(&server, &old).await.is_ok());
    drop(first);
    // The same issuer, with new keys.
    std::fs::remove_file(&keys).unwrap();
    let second = Provider::start(&keys, port);
    let new = second.token("machine", "echo:write", RESOURCE).await;
    assert!(check(&server, &new).await.is_ok(), "the new key is fetched");
    assert!(matches!(
        check(&server, &old).await,
        Err(TokenError::UnknownKey(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_that_is_down_or_silent_is_an_error_in_bounded_time() {
    let provider = Provider::fresh("down");
    let token = provider.token("machine", "echo:write", RESOURCE).await;
    let issuer = provider.issuer.clone();
    drop(provider);
    // Nobody listens at the issuer any more.
    let server = provider_less(&issuer);
    assert!(matches!(
        check(&server, &token).await,
        Err(TokenError::KeysUnavailable(_))
    ));

    // An issuer that accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_issuer = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let claims =
        json!({"iss": silent_issuer, "sub": "x", "aud": RESOURCE, "exp": 4_000_000_000u64});
    let forged = format!(
        "{}.{}.{}",
        b64(br#"{"alg":"ES256","kid":"k"}"#),
        b64(claims.to_string().as_bytes()),
        b64(b"sig")
    );
    let server = ResourceServer::new(
        OAuthConfig::new(RESOURCE, &silent_issuer).fetch_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let refused = check(&server, &forged).await;
    assert!(
        matches!(&refused, Err(e @ TokenError::KeysUnavailable(_)) if e.is_unavailable()),
        "{refused:?}"
    );
    held.abort();
}

fn provider_less(issuer: &str) -> ResourceServer {
    ResourceServer::new(OAuthConfig::new(RESOURCE, issuer).fetch_timeout(Duration::from_secs(2)))
        .unwrap()
}

/// A server behind [`require_bearer`], on loopback: its base URL.
async fn serve_protected(provider: &Provider) -> String {
    use mcp_tasks_runtime::axum::{Router, middleware};
    use mcp_tasks_runtime::model::{CallToolResult, Content, TaskSupport};
    use mcp_tasks_runtime::oauth::require_bearer;
    use mcp_tasks_runtime::transport::http::HttpConfig;
    use mcp_tasks_runtime::{Server, Tool};
    let whoami = |cx: mcp_tasks_runtime::TaskContext, _| async move {
        let who = cx
            .principal()
            .map_or_else(|| "nobody".to_owned(), |p| p.subject.clone());
        Ok(CallToolResult::success(vec![Content::text(who)]))
    };
    let server = Server::builder()
        .tool(Tool::new("whoami", whoami).task_support(TaskSupport::Optional))
        .build()
        .unwrap();
    let rs = provider.resource_server();
    let app = Router::new()
        .merge(server.http_router(HttpConfig::new().path("/mcp")))
        .layer(middleware::from_fn_with_state(rs.clone(), require_bearer))
        .merge(rs.metadata_router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { mcp_tasks_runtime::axum::serve(listener, app).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_endpoint_behind_the_layer_is_a_resource_server() {
    let provider = Provider::fresh("layer");
    let base = serve_protected(&provider).await;

    // The metadata, without a token, at the path-aware and the bare well-known paths.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let metadata: Value = reqwest::get(format!("{base}{path}"))
            .await
            .unwrap()
            .json_value()
            .await;
        assert_eq!(metadata["resource"], RESOURCE);
        assert_eq!(metadata["authorization_servers"], json!([provider.issuer]));
    }

    // No token: 401, a challenge naming the metadata, a JSON-RPC body.
    let (status, headers, body) = Caller::new(&base, None)
        .post(json!({"jsonrpc": "2.0", "id": 0, "method": "ping"}))
        .await;
    assert_eq!(status, 401);
    let challenge = headers["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with(
            "Bearer resource_metadata=\"http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp\""
        ),
        "{challenge}"
    );
    assert!(!challenge.contains("error="), "{challenge}");
    assert_eq!(body["error"]["code"], -32600, "{body}");

    // A token for another resource: 401 with invalid_token, and the token is not echoed.
    let elsewhere = provider
        .token("machine", "echo:write", "http://127.0.0.1:9/other")
        .await;
    let (status, headers, body) = Caller::new(&base, Some(elsewhere.clone()))
        .post(json!({"jsonrpc": "2.0", "id": 0, "method": "ping"}))
        .await;
    assert_eq!(status, 401);
    let challenge = headers["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(!challenge.contains(&elsewhere) && !body.to_string().contains(&elsewhere));

    // A valid token: its subject owns the session and the tasks it creates.
    let mut machine = Caller::new(
        &base,
        Some(provider.token("machine", "echo:write", RESOURCE).await),
    );
    assert_eq!(machine.initialize().await, 200);
    let r = machine.call("tools/call", json!({"name": "whoami"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "machine", "{r}");
    let r = machine
        .call("tools/call", json!({"name": "whoami", "task": {}}))
        .await;
    let id = r["result"]["task"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let r = machine.call("tasks/get", json!({"taskId": id})).await;
    assert!(r.get("error").is_none(), "{r}");

    // Another principal of the same issuer sees nothing of it.
    let mut other = Caller::new(
        &base,
        Some(provider.token("rsa", "echo:write", RESOURCE).await),
    );
    assert_eq!(other.initialize().await, 200);
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let r = other.call(method, json!({"taskId": id})).await;
        assert!(r.get("error").is_some(), "{method}: {r}");
    }
    // Nor can it use the first principal's session.
    other.session = machine.session.clone();
    let (status, _, _) = other
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": id}}))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_introspected_and_the_answer_kept_for_a_while() {
    use mcp_tasks_runtime::oauth::Introspection;
    let provider = Provider::fresh("introspect");
    let introspection = |cache: Duration| {
        Introspection::new(
            format!("{}/token/introspection", provider.issuer),
            "machine",
            "secret",
        )
        .cache_for(cache)
    };
    let server = |cache: Duration| {
        ResourceServer::new(
            OAuthConfig::new(RESOURCE, &provider.issuer).introspection(introspection(cache)),
        )
        .unwrap()
    };
    let cached = server(Duration::from_secs(600));
    let opaque = provider.token("opaque", "echo:write", RESOURCE).await;
    assert_ne!(opaque.split('.').count(), 3, "an opaque token: {opaque}");
    let principal = check(&cached, &opaque).await.unwrap();
    assert_eq!(principal["sub"], "opaque", "{principal}");
    assert_eq!(principal["client"], "opaque", "{principal}");
    assert_eq!(principal["scopes"], json!(["echo:write"]), "{principal}");
    assert_eq!(principal["iss"], json!(provider.issuer));
    // JWTs are still checked locally.
    let jwt = provider.token("machine", "echo:write", RESOURCE).await;
    assert_eq!(check(&cached, &jwt).await.unwrap()["sub"], "machine");

    // For another resource, or unknown: refused.
    let elsewhere = provider
        .token("opaque", "echo:write", "http://127.0.0.1:9/other")
        .await;
    assert_eq!(
        check(&cached, &elsewhere).await,
        Err(TokenError::WrongAudience)
    );
    assert_eq!(
        check(&cached, "not-a-token-the-provider-issued").await,
        Err(TokenError::Inactive)
    );

    // Revoked: the kept answer still holds until it expires; a server that keeps none
    // refuses it at once.
    let revoked = reqwest::Client::new()
        .post(format!("{}/token/revocation", provider.issuer))
        .basic_auth("opaque", Some("secret"))
        .form(&[("token", opaque.as_str())])
        .send()
        .await
        .unwrap();
    assert!(revoked.status().is_success(), "{}", revoked.status());
    assert!(check(&cached, &opaque).await.is_ok(), "kept for a while");
    assert_eq!(
        check(&server(Duration::ZERO), &opaque).await,
        Err(TokenError::Inactive)
    );

    // The endpoint out of reach: the server's trouble, in bounded time.
    let fresh = provider.token("opaque", "echo:write", RESOURCE).await;
    let issuer = provider.issuer.clone();
    drop(provider);
    let unreachable = ResourceServer::new(
        OAuthConfig::new(RESOURCE, &issuer)
            .fetch_timeout(Duration::from_secs(2))
            .introspection(Introspection::new(
                format!("{issuer}/token/introspection"),
                "machine",
                "secret",
            )),
    )
    .unwrap();
    let refused = check(&unreachable, &fresh).await;
    assert!(
        matches!(&refused, Err(e @ TokenError::IntrospectionUnavailable(_)) if e.is_unavailable()),
        "{refused:?}"
    );
}
