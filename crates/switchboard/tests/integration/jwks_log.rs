//! What the gateway logs of its JWKS URL: never the user info or query a credential may
//! travel in.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::auth::{claims, post_as, request, sign, AUDIENCE, ISSUER};
use crate::common::TestGateway;

/// A JWKS that cannot be fetched (nothing listens at its port) is logged by its URL with
/// the user info and query left out. Before, the log line carried the whole URL (review
/// LOW).
#[tokio::test]
async fn a_failed_jwks_fetch_logs_no_credential_of_its_url() {
    let url = "http://jwks-user:jwks-pass@127.0.0.1:9/jwks?token=jwks-query-secret";
    let mut gw = TestGateway::start(&[
        "--jwt-issuer",
        ISSUER,
        "--jwks-url",
        url,
        "--jwt-audience",
        AUDIENCE,
    ])
    .await;
    let token = sign("k1", &claims("alice"));
    let r = post_as(
        &gw,
        Some(&token),
        None,
        &request(json!(1), "ping", json!({})),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    assert!(gw.terminate_within(Duration::from_secs(10)).await);
    let log = gw.stderr.lock().clone();
    assert!(log.contains("JWKS fetch failed"), "{log}");
    assert!(log.contains("127.0.0.1:9/jwks"), "{log}");
    for secret in ["jwks-pass", "jwks-query-secret"] {
        assert!(!log.contains(secret), "{secret} in {log}");
    }
}
