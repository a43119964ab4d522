//! `--upstream-auth client-credentials`: the gateway acts as itself, with a token of its own
//! from the client credentials grant, for every caller and for its own requests; a token the
//! remote refuses (401) is fetched again once and the request retried.

use super::{
    incoming, jwt, legacy_call, modern_call, seen, session, Dir, Sts, Upstream, API_KEY, CLIENT_ID,
    CLIENT_SECRET,
};
use crate::auth::Jwks;
use crate::common::TestGateway;

/// The remote refuses the first token the token service issues: the gateway's first request
/// (its startup probe) gets 401, the gateway fetches a second token and retries, and from then
/// on every request, a JWT caller's and an API-key holder's alike, carries that second token.
/// Exactly two grants happen, and the refused token was used once.
#[tokio::test]
async fn the_gateway_token_serves_everyone_and_a_refused_one_is_fetched_again_once() {
    let sts = Sts::start(&[]).await;
    let first = format!("cc.{CLIENT_ID}.1");
    let second = format!("Bearer cc.{CLIENT_ID}.2");
    let up = Upstream::start("modern", &["--refuse", &first]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("cc");
    let secret = dir.secret();
    let keys = dir.keys();
    let mut args: Vec<String> = [
        "--url",
        &up.url,
        "--upstream-auth",
        "client-credentials",
        "--upstream-token-endpoint",
        &sts.url,
        "--upstream-client-id",
        CLIENT_ID,
        "--upstream-client-secret-file",
        &secret,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(incoming(&jwks.url, &keys));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = TestGateway::start(&args).await;
    let alice = jwt("alice");
    let sid = session(&gw, &alice).await;
    assert_eq!(seen(&legacy_call(&gw, &alice, &sid).await), second);
    assert_eq!(seen(&modern_call(&gw, &alice).await), second);
    assert_eq!(seen(&modern_call(&gw, API_KEY).await), second);
    let stats = sts.stats().await;
    assert_eq!(stats["clientCredentials"], 2, "{stats}");
    assert_eq!(stats["exchanges"], serde_json::json!({}), "{stats}");
    let log = up.log().await;
    let refused: Vec<_> = log.iter().filter(|e| e["status"] == 401).collect();
    assert_eq!(refused.len(), 1, "{log:?}");
    assert_eq!(
        log[0]["auth"],
        format!("Bearer {first}"),
        "the first request got 401"
    );
    assert_eq!(
        log[1]["auth"],
        second.as_str(),
        "and was retried at once with the second"
    );
    for entry in &log[1..] {
        assert_eq!(entry["auth"], second.as_str(), "{entry}");
    }
    let logs = gw.stderr.lock().clone();
    assert!(!logs.contains(CLIENT_SECRET), "{logs}");
    assert!(
        !logs.contains("cc.switchboard"),
        "no token in the logs: {logs}"
    );
}
