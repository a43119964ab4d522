//! Per-user OAuth against hostile or moved upstreams, through the real binary: a token kept
//! for one server is never sent to another that took its backend's name, a pre-registered
//! client's credentials never reach an authorization server other than the pinned one, and a
//! reload cannot add a per-user backend where anonymous callers would share one user's
//! tokens.

use serde_json::Value;

use super::oauth::{browse, modern_consent_url, Protected};
use super::{incoming, jwt, modern_call, python, seen, Dir, Upstream as Recorder};
use crate::auth::Jwks;
use crate::common::TestGateway;
use crate::reload::{hangup, rewrite, BOUND, RELOADED};

/// `serve --config` on `yaml` (written as `sb.yaml` in `dir`), taking the test issuer's JWTs.
async fn serve(dir: &Dir, jwks: &str, yaml: &str) -> (TestGateway, std::path::PathBuf) {
    let config = dir.write("sb.yaml", yaml);
    let keys = dir.keys();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.args([
        "serve",
        "--config",
        &config,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ])
    .args(incoming(jwks, &keys));
    (TestGateway::start_command(cmd).await, config.into())
}

/// `upstream.py --oauth` (Modern) with `extra` flags.
async fn protected(extra: &[&str]) -> Protected {
    let mut args = vec!["--era", "modern", "--oauth"];
    args.extend_from_slice(extra);
    let (child, url) = python("upstream.py", &args).await;
    let base = url.trim_end_matches("/mcp").to_owned();
    Protected {
        rec: Recorder { _child: child, url },
        base,
    }
}

/// One per-user OAuth backend `svc` at `url`.
fn svc(url: &str) -> String {
    format!("backends:\n  - name: svc\n    url: {url}\n    auth:\n      type: oauth\n")
}

/// The `Authorization` of every `tools/call` `up` received.
async fn auths(up: &Protected) -> Vec<String> {
    up.rec
        .log()
        .await
        .iter()
        .filter(|e| e["method"] == "tools/call")
        .map(|e| e["auth"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The vault is keyed by backend name: a reload that points `svc` at another server must not
/// send the first server's token there. The call reaches the new server without a token and
/// its 401 asks the caller for consent there.
#[tokio::test]
async fn a_token_kept_for_one_server_is_not_sent_to_the_next_one_of_that_name() {
    // Public lists: an aggregating gateway lists the tools without a user's token.
    let first = protected(&["--public-lists"]).await;
    let second = protected(&["--public-lists"]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-moved");
    let (gw, config) = serve(&dir, &jwks.url, &svc(&first.rec.url)).await;
    let alice = jwt("alice");

    let url = modern_consent_url(&modern_call(&gw, &alice).await);
    assert_eq!(browse(&url, "alice").await.0, 200);
    let token = seen(&modern_call(&gw, &alice).await);
    assert!(token.starts_with("Bearer at.alice."), "{token}");

    rewrite(&config, &svc(&second.rec.url));
    hangup(&gw);
    gw.wait_stdout(RELOADED, BOUND).await;

    let asked = modern_consent_url(&modern_call(&gw, &alice).await);
    assert!(
        asked.starts_with(&second.base),
        "consent at the new server: {asked}"
    );
    let sent = auths(&second).await;
    assert!(!sent.is_empty(), "the call reached the new server");
    assert!(
        sent.iter().all(|a| a == "none"),
        "the first server's token went to the second: {sent:?}"
    );
    // The first server's authorization server saw no refresh made for the second either.
    let log: Vec<Value> = first.as_log().await;
    assert!(
        !log.iter().any(|e| e["grant"] == "refresh_token"),
        "{log:?}"
    );
}
