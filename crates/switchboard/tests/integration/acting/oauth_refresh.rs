//! Per-user OAuth refresh against the authorization server's failures and the user's revoke:
//! a revoke while a refresh is in flight is final (the refreshed token is not written back);
//! an authorization server that cannot answer now fails that call with its reason and keeps
//! the token, so the next call refreshes without asking for consent again.

use std::time::Duration;

use serde_json::Value;

use super::oauth::{browse, gateway, modern_consent_url, Protected};
use super::{jwt, modern_call, seen, Dir};
use crate::auth::Jwks;
use crate::common::TestGateway;

async fn get(url: String) {
    let r = reqwest::get(url).await.unwrap();
    assert!(r.status().is_success());
}

/// `GET /oauth/tokens` as `token`: the backends it holds a token for.
async fn held(gw: &TestGateway, token: &str) -> Vec<Value> {
    let r = reqwest::Client::new()
        .get(format!("{}/oauth/tokens", gw.base()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    body["tokens"].as_array().cloned().unwrap_or_default()
}

async fn token_requests(up: &Protected) -> usize {
    let log = up.as_log().await;
    log.iter().filter(|e| e["kind"] == "token-request").count()
}

/// Consents for alice on a remote whose tokens live 5 s (inside the refresh margin: every
/// later call refreshes first).
async fn consented(name: &str) -> (Protected, Jwks, Dir, TestGateway, String) {
    let up = Protected::start("modern", "5").await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new(name);
    let gw = gateway(&up, &jwks.url, &dir).await;
    let alice = jwt("alice");
    let url = modern_consent_url(&modern_call(&gw, &alice).await);
    assert_eq!(browse(&url, "alice").await.0, 200);
    (up, jwks, dir, gw, alice)
}

#[tokio::test]
async fn a_revoke_while_a_refresh_is_in_flight_is_final() {
    let (up, _jwks, _dir, gw, alice) = consented("oauth-revoke-refresh").await;
    let before = token_requests(&up).await;
    get(format!("{}/as-hold", up.base)).await;
    let call = modern_call(&gw, &alice);
    let revoke_after_the_refresh_started = async {
        // The refresh has reached the authorization server (held there) before the revoke.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while token_requests(&up).await == before {
            assert!(tokio::time::Instant::now() < deadline, "no refresh started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let revoked = reqwest::Client::new()
            .delete(format!("{}/oauth/tokens/default", gw.base()))
            .bearer_auth(&alice)
            .send()
            .await
            .unwrap();
        assert!(revoked.status().is_success(), "{}", revoked.status());
        get(format!("{}/as-release", up.base)).await;
    };
    let (_answer, ()) = tokio::join!(call, revoke_after_the_refresh_started);
    assert!(
        held(&gw, &alice).await.is_empty(),
        "the refreshed token was written back after the revoke"
    );
    modern_consent_url(&modern_call(&gw, &alice).await);
}

#[tokio::test]
async fn an_authorization_server_down_for_a_moment_costs_one_call_not_the_consent() {
    let (up, _jwks, _dir, gw, alice) = consented("oauth-refresh-transient").await;
    let first = seen(&modern_call(&gw, &alice).await);
    assert!(first.starts_with("Bearer at.alice."), "{first}");
    get(format!("{}/as-fail?n=1", up.base)).await;

    let failed = modern_call(&gw, &alice).await;
    assert!(failed.get("error").is_some(), "{failed}");
    assert_ne!(failed["result"]["resultType"], "input_required", "{failed}");
    assert!(!held(&gw, &alice).await.is_empty(), "the token was kept");

    let next = seen(&modern_call(&gw, &alice).await);
    assert!(
        next.starts_with("Bearer at.alice.") && next != first,
        "{next}"
    );
    let authorizations = up
        .as_log()
        .await
        .iter()
        .filter(|e| e["kind"] == "authorize")
        .count();
    assert_eq!(authorizations, 1, "no second consent");
}
