//! `auth: passthrough` (and its alias `forwardCallerToken`) beside static headers that hold a
//! gateway credential (`X-Api-Key`): a caller with a verified JWT reaches the remote with its
//! own token, and a caller without one (an API key's holder, an anonymous caller) is refused,
//! never sent with the static headers alone, which would be the gateway's identity.

use super::{incoming, jwt, legacy_call, modern_call, seen, session, Dir, Upstream, API_KEY};
use crate::auth::Jwks;
use crate::common::TestGateway;

/// The gateway's own credential at the remote, sent as a static header.
const GATEWAY_KEY: &str = "X-Api-Key: gateway-credential-5b1e";

fn refused(answer: &serde_json::Value) {
    assert_eq!(answer["error"]["code"], 403, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no bearer token of its own"), "{message}");
}

#[tokio::test]
async fn a_caller_without_a_token_is_refused_and_never_sent_with_the_gateways_headers() {
    let up = Upstream::start("modern", &[]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("passthrough");
    let keys = dir.keys();
    let mut args: Vec<String> = [
        "--url",
        &up.url,
        "--upstream-auth",
        "passthrough",
        "--header",
        GATEWAY_KEY,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(incoming(&jwks.url, &keys));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = TestGateway::start(&args).await;
    let alice = jwt("alice");
    assert_eq!(
        seen(&modern_call(&gw, &alice).await),
        format!("Bearer {alice}")
    );
    let sid = session(&gw, API_KEY).await;
    refused(&legacy_call(&gw, API_KEY, &sid).await);
    refused(&modern_call(&gw, API_KEY).await);
    assert_eq!(
        up.calls().await,
        [format!("Bearer {alice}")],
        "the API key holder's calls reached nothing"
    );

    // Without authentication every caller is the anonymous principal: refused too, from the
    // file's forwardCallerToken as from the flag.
    let config = dir.write(
        "sb.yaml",
        &format!(
            "backends:\n  - name: remote\n    url: {}\n    forwardCallerToken: true\n    headers: {{X-Api-Key: gateway-credential-5b1e}}\n",
            up.url
        ),
    );
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.args([
        "serve",
        "--config",
        &config,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]);
    let gw = TestGateway::start_command(cmd).await;
    refused(&modern_call(&gw, "ignored-without-auth").await);
    let sid = session(&gw, "ignored-without-auth").await;
    refused(&legacy_call(&gw, "ignored-without-auth", &sid).await);
    assert_eq!(up.calls().await.len(), 1, "nothing more reached it");
    // Every call that reached it carried a caller's own token beside the gateway's key; what
    // carried the key alone is the gateway's own (its handshake, its list fetches).
    for entry in up.log().await {
        assert_eq!(entry["apiKey"], "gateway-credential-5b1e", "{entry}");
        if entry["method"] == "tools/call" {
            assert_ne!(entry["auth"], "none", "{entry}");
        }
    }
}
