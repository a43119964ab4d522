//! Per-user OAuth across replicas on one Redis: a consent given through one replica serves
//! the same principal's calls through the other (the token vault is the shared, sealed Redis
//! one, under the replicas' common key); another principal is still asked on both; a revoke
//! through one replica is final on the other too (no replica keeps a token the vault no
//! longer has).

use super::oauth::{browse, gateway_with, modern_consent_url, Protected};
use super::{jwt, modern_call, seen, Dir};
use crate::auth::Jwks;
use crate::replicas::redis::Redis;

#[tokio::test]
async fn a_consent_through_one_replica_serves_calls_through_the_other() {
    let Some(redis) = Redis::start_or_skip("oauth_replicas").await else {
        return;
    };
    let up = Protected::start("modern", "3600").await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-replicas");
    let key = {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.0.join("tokens.key");
        std::fs::write(&path, [0x3c; 32]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path.to_string_lossy().into_owned()
    };
    // Each Legacy session is an upstream session of one replica: the others forward to it.
    let replica_secret = dir.write(
        "replica.secret",
        "replica-secret-0123456789abcdef-0123456789abcdef",
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(&replica_secret, mode).unwrap();
    }
    let url = redis.url();
    let shared = [
        "--session-store",
        &url,
        "--session-store-prefix",
        "sboauth",
        "--token-store-key-file",
        &key,
        "--replica-secret-file",
        &replica_secret,
    ];
    let (one, two) = tokio::join!(
        gateway_with(&up, &jwks.url, &dir, &shared),
        gateway_with(&up, &jwks.url, &dir, &shared)
    );
    let (alice, bob) = (jwt("alice"), jwt("bob"));

    let consent = modern_consent_url(&modern_call(&one, &alice).await);
    assert!(consent.starts_with(&one.base()), "{consent}");
    assert_eq!(browse(&consent, "alice").await.0, 200);
    let through_two = seen(&modern_call(&two, &alice).await);
    assert!(through_two.starts_with("Bearer at.alice."), "{through_two}");
    assert_eq!(seen(&modern_call(&one, &alice).await), through_two);
    // Bob gave no consent anywhere: asked on both, never sent Alice's token.
    modern_consent_url(&modern_call(&two, &bob).await);
    modern_consent_url(&modern_call(&one, &bob).await);

    // Alice revokes through two; one asks her again.
    let revoked = reqwest::Client::new()
        .delete(format!("{}/oauth/tokens/default", two.base()))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert!(revoked.status().is_success(), "{}", revoked.status());
    modern_consent_url(&modern_call(&one, &alice).await);
    let log = up.rec.log().await;
    let after_revoke = log
        .iter()
        .rev()
        .find(|e| e["method"] == "tools/call")
        .unwrap();
    assert_ne!(
        after_revoke["auth"].as_str(),
        Some(through_two.as_str()),
        "the revoked token was not sent again: {after_revoke}"
    );
}
