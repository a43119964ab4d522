//! What the engine refuses from hostile or moved servers: tokens kept for another resource.

use std::sync::Arc;
use std::time::Duration;

use super::super::*;
use crate::outgoing_auth::vault::UpstreamToken;

fn backend_at(server_url: &str, client: ClientSettings) -> Arc<Backend> {
    Backend::new(
        OAuthConfig {
            backend: "gh".into(),
            server_url: server_url.into(),
            scopes: vec![],
            client,
            timeout: Duration::from_secs(1),
        },
        Arc::new(Flows::default()),
        Arc::new(crate::outgoing_auth::MemoryVault::new(
            crate::outgoing_auth::vault::VaultKeyMaterial::ephemeral().unwrap(),
        )),
    )
    .unwrap()
}

fn token_for(resource: &str, issuer: &str) -> UpstreamToken {
    UpstreamToken {
        access_token: "at".into(),
        refresh_token: None,
        expires_at: None,
        issued_at: None,
        scope: None,
        issuer: issuer.into(),
        resource: resource.into(),
        client_id: "c".into(),
        client_secret: None,
        client_auth: None,
    }
}

#[tokio::test]
async fn a_kept_token_is_used_only_for_the_resource_it_was_issued_for() {
    let b = backend_at("https://mcp.example.com/mcp", ClientSettings::default());
    for resource in [
        "https://mcp.example.com/mcp",
        "https://mcp.example.com/mcp/",
        "https://mcp.example.com",
    ] {
        assert!(
            b.bound_here(&token_for(resource, "https://as")),
            "{resource}"
        );
    }
    for resource in [
        "https://other.example.com/mcp",
        "https://mcp.example.com/other",
        "https://mcp.example.com:8443/mcp",
        "http://mcp.example.com/mcp",
    ] {
        assert!(
            !b.bound_here(&token_for(resource, "https://as")),
            "{resource}"
        );
    }
    // One found in the vault for another resource is forgotten, not sent.
    let key = crate::outgoing_auth::vault::VaultKey::new("p", "gh");
    b.keep(
        "p",
        &token_for("https://other.example.com/mcp", "https://as"),
    )
    .await
    .unwrap();
    assert_eq!(b.token("p").await.unwrap(), None);
    assert!(b.vault.get(&key).await.unwrap().is_none());
}

fn pinned(issuer: &str) -> ClientSettings {
    ClientSettings {
        client_id: Some("pre".into()),
        client_secret: Some(Secret::new("s")),
        authorization_server: Some(issuer.into()),
        ..Default::default()
    }
}

#[test]
fn a_pinned_authorization_server_is_the_only_one_used() {
    use super::discovery::{issuer_of, validate_server};
    use super::registration::{choose, Choice};
    let doc = serde_json::json!({"resource": "https://mcp.example.com/mcp",
        "authorization_servers": ["https://evil.example", "https://as.example"]});
    assert_eq!(issuer_of(&doc, None).unwrap(), "https://evil.example");
    assert_eq!(
        issuer_of(&doc, Some("https://as.example")).unwrap(),
        "https://as.example"
    );
    let err = issuer_of(&doc, Some("https://other.example")).unwrap_err();
    assert!(err.to_string().contains("authorizationServer"), "{err}");
    // Nor does a pre-registered client go to another server's metadata.
    let meta = |issuer: &str| {
        validate_server(
            &serde_json::json!({"issuer": issuer, "authorization_endpoint": format!("{issuer}/a"),
                "token_endpoint": format!("{issuer}/t"), "code_challenge_methods_supported": ["S256"]}),
            issuer,
        )
        .unwrap()
    };
    let client = pinned("https://as.example");
    assert_eq!(
        choose(&client, &meta("https://as.example")).unwrap(),
        Choice::PreRegistered
    );
    assert!(choose(&client, &meta("https://evil.example")).is_err());
}

#[test]
fn a_pre_registered_client_needs_its_authorization_server() {
    let unpinned = ClientSettings {
        client_id: Some("pre".into()),
        ..Default::default()
    };
    let err = Backend::new(
        OAuthConfig {
            backend: "gh".into(),
            server_url: "https://mcp.example.com/mcp".into(),
            scopes: vec![],
            client: unpinned,
            timeout: Duration::from_secs(1),
        },
        Arc::new(Flows::default()),
        default_vault().unwrap(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("authorizationServer"), "{err}");
    // A kept token of another issuer is not used with a pinned one.
    let b = backend_at("https://mcp.example.com/mcp", pinned("https://as.example"));
    let resource = "https://mcp.example.com/mcp";
    assert!(b.bound_here(&token_for(resource, "https://as.example")));
    assert!(!b.bound_here(&token_for(resource, "https://evil.example")));
}

#[test]
fn the_authorization_endpoint_must_be_https_or_loopback() {
    use super::discovery::validate_server;
    let doc = |endpoint: &str| {
        serde_json::json!({"issuer": "https://as.example", "authorization_endpoint": endpoint,
            "token_endpoint": "https://as.example/t", "code_challenge_methods_supported": ["S256"]})
    };
    for good in [
        "https://as.example/authorize",
        "http://127.0.0.1:9/authorize",
        "http://localhost/authorize",
    ] {
        assert!(
            validate_server(&doc(good), "https://as.example").is_ok(),
            "{good}"
        );
    }
    for bad in [
        "javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "http://as.example/authorize",
        "https://user:pw@as.example/authorize",
        "/authorize",
        "",
    ] {
        let err = validate_server(&doc(bad), "https://as.example").unwrap_err();
        assert!(err.to_string().contains("https"), "{bad}: {err}");
    }
}

#[test]
fn per_issuer_maps_are_bounded_and_keep_the_latest() {
    let mut map = std::collections::HashMap::new();
    for i in 0..100 {
        per_issuer(&mut map, &format!("https://as{i}.example"), i);
        assert!(map.len() <= MAX_ISSUERS);
        assert_eq!(map.get(&format!("https://as{i}.example")), Some(&i));
    }
    assert_eq!(map.len(), MAX_ISSUERS);
    // One already kept is replaced in place, nothing else forgotten.
    let before: Vec<String> = map.keys().cloned().collect();
    per_issuer(&mut map, &before[0], 7);
    let mut after: Vec<String> = map.keys().cloned().collect();
    let mut before = before;
    before.sort();
    after.sort();
    assert_eq!(before, after);
}

/// A kept token that does not open (sealed with another key: a rotated key file, or another
/// replica's) is as good as none: removed, so the principal's next call goes out without
/// one and its 401 leads to consent, and the principal's own delete removes it. Review: every
/// call of the principal failed with "token store unavailable", and so did the delete.
#[tokio::test]
async fn a_kept_token_that_does_not_open_is_removed_not_a_lockout() {
    use crate::outgoing_auth::vault::{TokenVault, VaultKey, VaultKeyMaterial};
    use crate::outgoing_auth::MemoryVault;
    let server = "https://mcp.example.com/mcp";
    let key = VaultKey::new("alice", "gh");
    let elsewhere = MemoryVault::new(VaultKeyMaterial::ephemeral().unwrap());
    elsewhere
        .put(&key, &token_for(server, "https://as"))
        .await
        .unwrap();
    let sealed = elsewhere.sealed(&key).unwrap();
    let here = Arc::new(MemoryVault::new(VaultKeyMaterial::ephemeral().unwrap()));
    let config = OAuthConfig {
        backend: "gh".into(),
        server_url: server.into(),
        scopes: vec![],
        client: ClientSettings::default(),
        timeout: Duration::from_secs(1),
    };
    let b = Backend::new(config, Arc::new(Flows::default()), here.clone()).unwrap();

    here.put_sealed(&key, sealed.clone());
    assert!(b.token("alice").await.unwrap().is_none());
    assert!(here.sealed(&key).is_none(), "the unreadable value is gone");

    here.put_sealed(&key, sealed);
    let revoked = b.revoke("alice").await.unwrap();
    assert!(revoked.removed && revoked.upstream.is_none());
    assert!(here.sealed(&key).is_none());
    // A newer build's format is not this build's to remove: no token here, kept there.
    let mut newer = sealed_again(&elsewhere, &key, server).await;
    newer[0] = newer[0].wrapping_add(1);
    here.put_sealed(&key, newer.clone());
    // Nor is it a consent: a session carrying the principal's token drops it (review: a value
    // put there in another shape kept a withdrawn token in use).
    assert!(b.revoked("alice").await);
    assert!(b.token("alice").await.unwrap().is_none());
    assert_eq!(here.sealed(&key), Some(newer));
    // Nothing else was touched: another principal's token still opens.
    let bob = VaultKey::new("bob", "gh");
    here.put(&bob, &token_for(server, "https://as"))
        .await
        .unwrap();
    assert!(b.token("bob").await.unwrap().is_some());
}

/// `vault`'s sealed value of a token for `server`, under `key`.
async fn sealed_again(
    vault: &crate::outgoing_auth::MemoryVault,
    key: &crate::outgoing_auth::vault::VaultKey,
    server: &str,
) -> Vec<u8> {
    use crate::outgoing_auth::vault::TokenVault;
    vault
        .put(key, &token_for(server, "https://as"))
        .await
        .unwrap();
    vault.sealed(key).unwrap()
}

/// A vault where a consent lands right after the next read: `get` answers what was there,
/// then `landing` is written (a callback completing between the engine's read and its
/// removal of what it read).
#[derive(Debug)]
struct Landing {
    inner: Arc<crate::outgoing_auth::MemoryVault>,
    landing: parking_lot::Mutex<Option<UpstreamToken>>,
}

impl crate::outgoing_auth::TokenVault for Landing {
    fn get<'a>(
        &'a self,
        key: &'a crate::outgoing_auth::VaultKey,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<UpstreamToken>, crate::outgoing_auth::VaultError>,
    > {
        Box::pin(async move {
            let read = self.inner.get(key).await;
            let landing = self.landing.lock().take();
            if let Some(token) = landing {
                self.inner.put(key, &token).await?;
            }
            read
        })
    }
    fn put<'a>(
        &'a self,
        key: &'a crate::outgoing_auth::VaultKey,
        token: &'a UpstreamToken,
    ) -> futures::future::BoxFuture<'a, Result<(), crate::outgoing_auth::VaultError>> {
        self.inner.put(key, token)
    }
    fn replace<'a>(
        &'a self,
        key: &'a crate::outgoing_auth::VaultKey,
        stale: &'a str,
        token: &'a UpstreamToken,
    ) -> futures::future::BoxFuture<'a, Result<bool, crate::outgoing_auth::VaultError>> {
        self.inner.replace(key, stale, token)
    }
    fn remove<'a>(
        &'a self,
        key: &'a crate::outgoing_auth::VaultKey,
    ) -> futures::future::BoxFuture<'a, Result<bool, crate::outgoing_auth::VaultError>> {
        self.inner.remove(key)
    }
    fn remove_if<'a>(
        &'a self,
        key: &'a crate::outgoing_auth::VaultKey,
        stale: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<bool, crate::outgoing_auth::VaultError>> {
        self.inner.remove_if(key, stale)
    }
    fn remove_unopenable<'a>(
        &'a self,
        key: &'a crate::outgoing_auth::VaultKey,
    ) -> futures::future::BoxFuture<'a, Result<bool, crate::outgoing_auth::VaultError>> {
        self.inner.remove_unopenable(key)
    }
    fn list<'a>(
        &'a self,
        principal: Option<&'a str>,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Vec<crate::outgoing_auth::vault::TokenSummary>, crate::outgoing_auth::VaultError>,
    > {
        self.inner.list(principal)
    }
    fn refresh_lock<'a>(
        &'a self,
        key: &'a crate::outgoing_auth::VaultKey,
        wait: Duration,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<crate::outgoing_auth::vault::RefreshGuard>, crate::outgoing_auth::VaultError>,
    > {
        self.inner.refresh_lock(key, wait)
    }
}

/// What the engine forgets is exactly what it read: a kept token that does not open, one
/// issued for another server, or an expired one without a refresh token. A consent completed
/// between that read and the removal stays (the removal was unconditional: the user who had
/// just consented was asked again).
#[tokio::test]
async fn a_consent_landing_between_read_and_removal_is_kept() {
    use crate::outgoing_auth::vault::{TokenVault, VaultKey, VaultKeyMaterial};
    use crate::outgoing_auth::MemoryVault;
    let server = "https://mcp.example.com/mcp";
    let key = VaultKey::new("alice", "gh");
    let elsewhere = MemoryVault::new(VaultKeyMaterial::ephemeral().unwrap());
    let unopenable = sealed_again(&elsewhere, &key, server).await;
    let mut expired = token_for(server, "https://as");
    expired.access_token = "expired".into();
    expired.expires_at = Some(1);
    let mut moved = token_for("https://other.example.com/mcp", "https://as");
    moved.access_token = "moved".into();
    let mut fresh = token_for(server, "https://as");
    fresh.access_token = "fresh".into();

    for before in ["unopenable", "expired", "moved"] {
        let inner = Arc::new(MemoryVault::new(VaultKeyMaterial::ephemeral().unwrap()));
        match before {
            "unopenable" => inner.put_sealed(&key, unopenable.clone()),
            "expired" => inner.put(&key, &expired).await.unwrap(),
            _ => inner.put(&key, &moved).await.unwrap(),
        }
        let vault = Arc::new(Landing {
            inner: inner.clone(),
            landing: parking_lot::Mutex::new(Some(fresh.clone())),
        });
        let config = OAuthConfig {
            backend: "gh".into(),
            server_url: server.into(),
            scopes: vec![],
            client: ClientSettings::default(),
            timeout: Duration::from_secs(1),
        };
        let b = Backend::new(config, Arc::new(Flows::default()), vault).unwrap();
        // This call read what was there before the consent: it goes out without a token.
        assert!(b.token("alice").await.unwrap().is_none(), "{before}");
        let kept = inner.get(&key).await.unwrap();
        assert_eq!(
            kept.map(|t| t.access_token).as_deref(),
            Some("fresh"),
            "{before}"
        );
        // The next call uses it.
        assert!(b.token("alice").await.unwrap().is_some(), "{before}");
    }
    // Without a landing, each is still removed.
    let inner = MemoryVault::new(VaultKeyMaterial::ephemeral().unwrap());
    inner.put_sealed(&key, unopenable);
    assert!(inner.remove_unopenable(&key).await.unwrap());
    assert!(inner.sealed(&key).is_none());
    inner.put(&key, &fresh).await.unwrap();
    assert!(!inner.remove_unopenable(&key).await.unwrap());
    assert!(inner.sealed(&key).is_some());
}
