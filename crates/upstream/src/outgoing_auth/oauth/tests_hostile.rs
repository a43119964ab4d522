//! What the engine refuses from hostile or moved servers: tokens kept for another resource.

use std::sync::Arc;
use std::time::Duration;

use super::*;
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
        scope: None,
        issuer: issuer.into(),
        resource: resource.into(),
        client_id: "c".into(),
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
