//! The engine's pure parts: challenge parsing, discovery order, registration choice, scope
//! selection, the flow table, and the callback's checks (state, iss) before any request.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::authorization::{select_scope, url, Request};
use super::discovery::{resource_candidates, server_candidates, validate_server};
use super::registration::{choose, method_for, Choice};
use super::*;

mod browser;
mod hostile;
mod mixup;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn bearer_challenges_are_parsed() {
    let c = challenge::parse(
        r#"Bearer error="insufficient_scope", scope="mcp:write mcp:read", resource_metadata="http://h/.well-known/oauth-protected-resource/mcp""#,
    )
    .unwrap();
    assert!(c.insufficient_scope());
    assert_eq!(c.scope.as_deref(), Some("mcp:write mcp:read"));
    assert_eq!(
        c.resource_metadata.as_deref(),
        Some("http://h/.well-known/oauth-protected-resource/mcp")
    );
    // Another scheme first, unquoted values, escapes, case.
    let c =
        challenge::parse(r#"Basic realm="x", bearer error=invalid_token, scope="a\"b""#).unwrap();
    assert_eq!(c.error.as_deref(), Some("invalid_token"));
    assert_eq!(c.scope.as_deref(), Some("a\"b"));
    assert!(challenge::parse(r#"Basic realm="x""#).is_none());
    assert_eq!(challenge::parse("Bearer").unwrap(), Challenge::default());
    // An unterminated quoted string is no challenge at all.
    assert!(challenge::parse(r#"Bearer scope="open"#).is_none());
}

#[test]
fn protected_resource_metadata_is_tried_header_then_path_then_root() {
    let c = resource_candidates("http://h:1/mcp", Some("http://h:1/custom.json"));
    let urls: Vec<_> = c.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(
        urls,
        [
            "http://h:1/custom.json",
            "http://h:1/.well-known/oauth-protected-resource/mcp",
            "http://h:1/.well-known/oauth-protected-resource"
        ]
    );
    // Each names the resource its document must be about.
    assert_eq!(c[0].1, "http://h:1/mcp");
    assert_eq!(c[1].1, "http://h:1/mcp");
    assert_eq!(c[2].1, "http://h:1");
    let root = resource_candidates("https://h/", None);
    assert_eq!(root.len(), 1);
    assert_eq!(root[0].0, "https://h/.well-known/oauth-protected-resource");
}

#[test]
fn server_metadata_is_tried_in_the_specs_order() {
    assert_eq!(
        server_candidates("http://as:9/tenant1"),
        [
            "http://as:9/.well-known/oauth-authorization-server/tenant1",
            "http://as:9/.well-known/openid-configuration/tenant1",
            "http://as:9/tenant1/.well-known/openid-configuration"
        ]
    );
    assert_eq!(
        server_candidates("http://as:9"),
        [
            "http://as:9/.well-known/oauth-authorization-server",
            "http://as:9/.well-known/openid-configuration"
        ]
    );
}

fn server_doc(issuer: &str) -> serde_json::Value {
    json!({"issuer": issuer, "authorization_endpoint": "https://as.example/authorize",
        "token_endpoint": format!("{issuer}/token"), "code_challenge_methods_supported": ["S256"]})
}

#[test]
fn server_metadata_must_name_its_issuer_exactly_and_offer_s256() {
    assert!(validate_server(&server_doc("http://as:9"), "http://as:9").is_ok());
    // A trailing slash is another issuer (compared as written).
    assert!(validate_server(&server_doc("http://as:9/"), "http://as:9").is_err());
    assert!(validate_server(&server_doc("https://attacker.example.com"), "http://as:9").is_err());
    let mut no_pkce = server_doc("http://as:9");
    no_pkce["code_challenge_methods_supported"] = json!(["plain"]);
    assert!(validate_server(&no_pkce, "http://as:9").is_err());
    let mut absent = server_doc("http://as:9");
    absent
        .as_object_mut()
        .unwrap()
        .remove("code_challenge_methods_supported");
    assert!(validate_server(&absent, "http://as:9").is_err());
}

#[test]
fn registration_prefers_pre_registered_then_metadata_document_then_dynamic() {
    let mut meta = validate_server(&server_doc("http://as:9"), "http://as:9").unwrap();
    meta.registration_endpoint = Some("http://as:9/register".into());
    let cimd = "https://gw.example/oauth/client-metadata.json";
    let pre = ClientSettings {
        client_id: Some("pre".into()),
        client_metadata_url: Some(cimd.into()),
        ..Default::default()
    };
    meta.cimd_supported = true;
    assert_eq!(choose(&pre, &meta).unwrap(), Choice::PreRegistered);
    let doc = ClientSettings {
        client_metadata_url: Some(cimd.into()),
        ..Default::default()
    };
    assert_eq!(
        choose(&doc, &meta).unwrap(),
        Choice::MetadataDocument(cimd.into())
    );
    // Not supported by this server: dynamic registration.
    meta.cimd_supported = false;
    assert_eq!(
        choose(&doc, &meta).unwrap(),
        Choice::Dynamic("http://as:9/register".into())
    );
    meta.registration_endpoint = None;
    assert!(choose(&doc, &meta).is_err());
}

#[test]
fn token_endpoint_auth_follows_the_server_and_the_secret() {
    let basic = strings(&["client_secret_basic"]);
    let post = strings(&["client_secret_post"]);
    assert_eq!(method_for(None, Some(&basic), true), TokenAuth::Basic);
    assert_eq!(method_for(None, Some(&post), true), TokenAuth::Post);
    assert_eq!(method_for(None, None, true), TokenAuth::Basic);
    assert_eq!(method_for(None, Some(&basic), false), TokenAuth::None);
    assert_eq!(
        method_for(Some(TokenAuth::Post), Some(&basic), true),
        TokenAuth::Post
    );
}

#[test]
fn scope_is_the_challenges_then_the_resources_then_the_configured() {
    let supported = strings(&["mcp:basic", "mcp:read"]);
    let configured = strings(&["repo"]);
    assert_eq!(
        select_scope(Some("mcp:basic"), Some(&supported), &configured, None, None).as_deref(),
        Some("mcp:basic")
    );
    assert_eq!(
        select_scope(None, Some(&supported), &configured, None, None).as_deref(),
        Some("mcp:basic mcp:read")
    );
    assert_eq!(
        select_scope(None, None, &configured, None, None).as_deref(),
        Some("repo")
    );
    assert_eq!(select_scope(None, None, &[], None, None), None);
    // A step-up keeps what was asked before.
    assert_eq!(
        select_scope(Some("mcp:write"), None, &[], Some("mcp:basic"), None).as_deref(),
        Some("mcp:write mcp:basic")
    );
    // offline_access only when the authorization server lists it.
    let with_offline = strings(&["mcp:basic", "offline_access"]);
    assert_eq!(
        select_scope(
            None,
            Some(&strings(&["mcp:basic"])),
            &[],
            None,
            Some(&with_offline)
        )
        .as_deref(),
        Some("mcp:basic offline_access")
    );
    assert_eq!(
        select_scope(
            None,
            Some(&strings(&["mcp:basic"])),
            &[],
            None,
            Some(&supported)
        )
        .as_deref(),
        Some("mcp:basic")
    );
}

#[test]
fn the_authorization_url_carries_pkce_state_and_resource() {
    let u = url(&Request {
        endpoint: "http://as:9/authorize",
        client_id: "https://gw/cm.json",
        redirect_uri: "http://127.0.0.1:8/oauth/callback",
        challenge: "abc",
        state: "st",
        resource: "http://h:1/mcp",
        scope: Some("a b"),
    });
    assert_eq!(
        u,
        "http://as:9/authorize?response_type=code&client_id=https%3A%2F%2Fgw%2Fcm.json\
         &redirect_uri=http%3A%2F%2F127.0.0.1%3A8%2Foauth%2Fcallback&code_challenge=abc\
         &code_challenge_method=S256&state=st&resource=http%3A%2F%2Fh%3A1%2Fmcp&scope=a+b"
    );
}

/// An OpenID provider drops `offline_access` (and issues no refresh token) from a request
/// without `prompt=consent` (OpenID Connect Core §11; oidc-provider does): asked with it, and
/// only then.
#[test]
fn offline_access_is_asked_with_prompt_consent() {
    let request = |scope| Request {
        endpoint: "http://as:9/auth",
        client_id: "c",
        redirect_uri: "http://127.0.0.1:8/oauth/callback",
        challenge: "abc",
        state: "st",
        resource: "http://h:1/mcp",
        scope,
    };
    let offline = url(&request(Some("tools offline_access")));
    assert!(
        offline.ends_with("&scope=tools+offline_access&prompt=consent"),
        "{offline}"
    );
    for scope in [Some("tools"), Some("offline_accessx"), None] {
        let u = url(&request(scope));
        assert!(!u.contains("prompt="), "{u}");
    }
}

fn backend(flows: &Arc<Flows>) -> Arc<Backend> {
    Backend::new(
        OAuthConfig {
            backend: "gh".into(),
            server_url: "http://127.0.0.1:1/mcp".into(),
            scopes: vec![],
            client: ClientSettings::default(),
            timeout: Duration::from_secs(1),
        },
        flows.clone(),
        Arc::new(crate::outgoing_auth::MemoryVault::new(
            crate::outgoing_auth::vault::VaultKeyMaterial::ephemeral().unwrap(),
        )),
    )
    .unwrap()
}

fn flow(backend: &Arc<Backend>, owner: u8, iss_required: bool) -> flows::Flow {
    flows::Flow {
        principal: format!("p{owner}"),
        backend: backend.clone(),
        registration: registration::Registration {
            issuer: "http://as:9".into(),
            client_id: "c".into(),
            secret: None,
            auth: TokenAuth::None,
            dynamic: true,
        },
        verifier: Secret::new("v"),
        // Nothing listens here: a check that passes would fail at the token request.
        token_endpoint: "http://127.0.0.1:1/token".into(),
        resource: "http://127.0.0.1:1/mcp".into(),
        redirect_uri: "http://127.0.0.1:2/oauth/callback".into(),
        scope: None,
        issuer: "http://as:9".into(),
        iss_required,
        created: std::time::Instant::now(),
        start: format!("start{owner}"),
        csrf: Secret::new("csrf"),
        authorize_url: "http://as:9/authorize?state=x".into(),
        browser: Some(Secret::new("browser")),
    }
}

/// The path a callback of `flow(..)` arrives at (its `redirect_uri`'s).
const CB: &str = "/oauth/callback";

/// The `Cookie` header of the browser that started `flow(_, owner, _)`.
fn browser_of(owner: u8) -> Option<&'static str> {
    match owner {
        1 => Some("sb_oauth_start1=browser"),
        _ => Some("sb_oauth_start2=browser"),
    }
}
#[test]
fn over_https_the_cookies_are_host_only_and_secure() {
    let flows = Arc::new(Flows::default());
    flows.set_public_url("HTTPS://gw.example");
    let b = backend(&flows);
    flows.insert("s1".into(), fresh(&b, 1)).unwrap();
    let page = flows.start_page("start1").unwrap();
    let set = page.csrf_cookie.header();
    assert!(
        set.starts_with("__Host-sb_csrf_start1=csrf; Path=/;"),
        "{set}"
    );
    assert!(
        set.ends_with("; Secure") && !set.contains("Domain"),
        "{set}"
    );
    let from = ClickFrom {
        origin: Some("https://gw.example"),
        fetch_site: Some("same-origin"),
    };
    // The unprefixed name (settable by a sibling subdomain or over http) is not the cookie.
    let unprefixed = flows.begin(b"flow=start1&csrf=csrf", Some("sb_csrf_start1=csrf"), from);
    assert_eq!(unprefixed.unwrap_err(), StartError::Forged);
    let started = flows
        .begin(
            b"flow=start1&csrf=csrf",
            Some("__Host-sb_csrf_start1=csrf"),
            from,
        )
        .unwrap();
    assert!(started
        .cookie
        .header()
        .starts_with("__Host-sb_oauth_start1="));
    // The secrets stay out of Debug output.
    let shown = format!("{started:?} {:?} {page:?}", started.cookie);
    assert!(
        !shown.contains("csrf\"") && !shown.contains("authorize"),
        "{shown}"
    );
}

#[test]
fn one_principal_cannot_fill_the_table_for_everyone() {
    let flows = Arc::new(Flows::default());
    let b = backend(&flows);
    for n in 0..(MAX_FLOWS_PER_PRINCIPAL + 2) {
        let flow = flows::Flow {
            start: format!("p1-start-{n}"),
            ..fresh(&b, 1)
        };
        flows.insert(format!("s{n}"), flow).unwrap();
    }
    assert_eq!(
        flows.pending(),
        MAX_FLOWS_PER_PRINCIPAL,
        "the oldest were replaced"
    );
    assert!(flows.start_page("p1-start-0").is_err());
    assert!(flows
        .start_page(&format!("p1-start-{}", MAX_FLOWS_PER_PRINCIPAL + 1))
        .is_ok());
    flows.insert("other".into(), fresh(&b, 2)).unwrap();
    assert_eq!(flows.pending(), MAX_FLOWS_PER_PRINCIPAL + 1);
}

/// A short-lived token without a refresh token is used for half its life, not dropped at
/// once for being inside the 30 s margin (a 10 s one used to send every call to consent); one
/// with a refresh token is refreshed 30 s ahead.
#[test]
fn a_short_lived_token_is_used_for_half_its_life() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = |issued_at: Option<u64>, expires_at: u64| crate::outgoing_auth::UpstreamToken {
        access_token: "a".into(),
        refresh_token: None,
        expires_at: Some(expires_at),
        issued_at,
        scope: None,
        issuer: "https://as.example".into(),
        resource: "https://mcp.example".into(),
        client_id: "c".into(),
        client_secret: None,
        client_auth: None,
    };
    assert!(tokens::fresh(&token(Some(now), now + 10)));
    assert!(!tokens::fresh(&token(Some(now - 7), now + 3)));
    assert!(tokens::fresh(&token(Some(now), now + 3600)));
    assert!(!tokens::fresh(&token(Some(now - 3590), now + 10)));
    // Of unknown age: the full margin.
    assert!(!tokens::fresh(&token(None, now + 10)));
    assert!(tokens::fresh(&token(None, now + 60)));
    let refreshable = crate::outgoing_auth::UpstreamToken {
        refresh_token: Some("r".into()),
        ..token(Some(now), now + 10)
    };
    assert!(!tokens::fresh(&refreshable));
}

/// A reload builds a second backend under the same name; when the reload does not adopt it
/// (it is dropped), the one in service is still the one a revoke reaches, and when both are
/// alive the newer one is.
#[test]
fn a_dropped_reload_copy_does_not_hide_the_backend_in_service() {
    let flows = Arc::new(Flows::default());
    let serving = backend(&flows);
    let copy = backend(&flows);
    assert!(Arc::ptr_eq(&flows.backend("gh").unwrap(), &copy));
    drop(copy);
    assert!(Arc::ptr_eq(&flows.backend("gh").unwrap(), &serving));
    drop(serving);
    assert!(flows.backend("gh").is_none());
}

/// A token records the client it was issued to only when that client came from dynamic
/// registration: a configured client's secret stays in the config, where rotating or removing
/// it takes effect.
#[test]
fn only_a_dynamic_clients_secret_travels_with_its_tokens() {
    let answer = json!({"access_token": "at-1", "token_type": "Bearer", "expires_in": 60});
    let client = |dynamic| registration::Registration {
        issuer: "https://as.example".into(),
        client_id: "c".into(),
        secret: Some(Secret::new("s3cret-value")),
        auth: TokenAuth::Basic,
        dynamic,
    };
    let kept =
        tokens::token_from(&answer, &client(true), "https://mcp.example", None, None).unwrap();
    assert_eq!(kept.client_secret.as_deref(), Some("s3cret-value"));
    assert_eq!(kept.client_auth.as_deref(), Some("client_secret_basic"));
    assert!(!format!("{kept:?}").contains("s3cret-value"));
    let configured =
        tokens::token_from(&answer, &client(false), "https://mcp.example", None, None).unwrap();
    assert_eq!(configured.client_secret, None);
    assert_eq!(configured.client_auth, None);
}

/// A flow not yet started in any browser (as `consent` records it).
fn fresh(backend: &Arc<Backend>, owner: u8) -> flows::Flow {
    flows::Flow {
        browser: None,
        ..flow(backend, owner, false)
    }
}
