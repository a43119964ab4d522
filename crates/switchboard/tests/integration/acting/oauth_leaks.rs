//! Leak check over per-user OAuth runs: two principals consent (the start page, the click, the
//! authorization server, the callback), call, and have their tokens refreshed; then every log
//! line, stdout, `/status`, `/metrics`, the audit log and the spans exported over OTLP are
//! searched for every secret of the runs: authorization codes, states, PKCE verifiers, access
//! and refresh tokens, the dynamic registration's client secret (what the authorization
//! server minted or was sent), and the gateway's own flow keys, anti-forgery tokens and
//! browser cookies. Zero hits.

use super::browser::Browser;
use super::oauth::{gateway_with, modern_consent_url, Protected};
use super::{jwt, modern_call, seen, Dir};
use crate::auth::Jwks;
use crate::leaks::Evidence;
use crate::traces::Receiver;

/// Consents for `user` (`token`, its bearer) through a browser of its own; every secret the
/// gateway showed that browser on the way (flow key, anti-forgery token, cookies, state).
async fn consent(gw: &crate::common::TestGateway, token: &str, user: &str) -> Vec<String> {
    let url = modern_consent_url(&modern_call(gw, token).await);
    let browser = Browser::default();
    let page = browser.get(&url).await;
    let authorize = browser.click_start(&url).await.map_err(|p| p.body).unwrap();
    let done = browser.open(&format!("{authorize}&test_user={user}")).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let mut secrets = browser.cookie_values();
    secrets.push(url.split("flow=").nth(1).unwrap().to_owned());
    let csrf_at = page.body.find("name=\"csrf\" value=\"").unwrap() + 19;
    let csrf = &page.body[csrf_at..];
    secrets.push(csrf[..csrf.find('"').unwrap()].to_owned());
    secrets
}

#[tokio::test]
async fn no_oauth_secret_reaches_a_log_status_metrics_or_audit_line() {
    // Issued for 5 s: inside the refresh margin at once, so every call refreshes.
    let up = Protected::start("modern", "5").await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-leaks");
    let audit = dir.0.join("audit.jsonl");
    let audit_arg = audit.to_string_lossy().into_owned();
    let mut receiver = Receiver::start().await;
    let flags = [
        "--audit-log",
        &audit_arg,
        "--otlp-endpoint",
        receiver.url.as_str(),
    ];
    let mut gw = gateway_with(&up, &jwks.url, &dir, &flags).await;
    let (alice, bob) = (jwt("alice"), jwt("bob"));

    let mut secrets = consent(&gw, &alice, "alice").await;
    secrets.extend(consent(&gw, &bob, "bob").await);
    for (token, user) in [(&alice, "alice"), (&bob, "bob"), (&alice, "alice")] {
        let sent = seen(&modern_call(&gw, token).await);
        assert!(sent.starts_with(&format!("Bearer at.{user}.")), "{sent}");
    }
    let minted: Vec<String> = reqwest::get(format!("{}/as-secrets", up.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        minted.iter().filter(|s| s.starts_with("rt.")).count() >= 4,
        "consents and refreshes happened: {minted:?}"
    );
    secrets.extend(minted);
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let mut evidence = Evidence::collect(&mut gw, Some(&alice), Some(&audit)).await;
    // The gateway flushed its spans when it stopped (collect waits for that).
    let spans = receiver.all();
    assert!(spans.len() >= 5, "spans were exported: {}", spans.len());
    evidence.add("exported spans", serde_json::to_string(&spans).unwrap());
    evidence.assert_free_of(&secrets);
}
