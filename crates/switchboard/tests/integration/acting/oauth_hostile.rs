//! Per-user OAuth against hostile or moved upstreams, through the real binary: a token kept
//! for one server is never sent to another that took its backend's name, a pre-registered
//! client's credentials never reach an authorization server other than the pinned one, and a
//! reload cannot add a per-user backend where anonymous callers would share one user's
//! tokens.

use serde_json::Value;

use super::browser::Browser;
use super::oauth::{browse, consent_url, modern_consent_url, Protected};
use super::{
    incoming, jwt, legacy_call, modern_call, python, seen, session, Dir, Upstream as Recorder,
};
use crate::auth::Jwks;
use crate::common::TestGateway;
use crate::reload::{hangup, rewrite, BOUND, REFUSED, RELOADED};
use crate::vmcp::stdio;

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
    let authorize = Browser::default().click_start(&asked).await;
    let authorize = authorize.map_err(|p| p.body).unwrap();
    assert!(
        authorize.starts_with(&second.base),
        "consent at the new server: {authorize}"
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

/// The pre-registered client of these tests, known to the real authorization server.
const PRE_CLIENT: &str = "sb-pre";

/// `run --url up` with the pre-registered client pinned to `issuer`.
async fn pre_registered(up: &Protected, issuer: &str, jwks: &str, dir: &Dir) -> TestGateway {
    let keys = dir.keys();
    let secret = dir.secret();
    let mut args: Vec<String> = [
        "--url",
        &up.rec.url,
        "--upstream-auth",
        "oauth",
        "--upstream-client-id",
        PRE_CLIENT,
        "--upstream-client-secret-file",
        &secret,
        "--upstream-authorization-server",
        issuer,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(incoming(jwks, &keys));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestGateway::start(&args).await
}

/// A pre-registered client is pinned to its authorization server: a remote whose metadata
/// names another one (an "evil" authorization server) gets no consent link to it, and the
/// client's credentials never reach it, even when a user opens whatever link came back.
#[tokio::test]
async fn a_pre_registered_clients_secret_never_goes_to_another_authorization_server() {
    let evil = protected(&[]).await;
    let client = format!("{PRE_CLIENT}:{}", super::CLIENT_SECRET);
    let up = protected(&["--authorization-server", &evil.base, "--client", &client]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-pinned");
    let gw = pre_registered(&up, &up.base, &jwks.url, &dir).await;
    let alice = jwt("alice");

    let answer = modern_call(&gw, &alice).await;
    // What a user would do with a consent link, had one come back.
    let link = answer["result"]["inputRequests"]["authorization"]["params"]["url"].as_str();
    if let Some(url) = link {
        browse(url, "alice").await;
    }
    let log = evil.as_log().await;
    assert!(
        !log.iter().any(|e| e["kind"] == "token-request"),
        "the client's credentials went to the other server: {log:?}"
    );
    assert!(
        link.is_none(),
        "a consent link to the other server: {answer}"
    );
    let text = answer.to_string();
    assert!(!text.contains(&evil.base), "{text}");
    assert!(
        text.contains("authorizationServer"),
        "a clear error: {text}"
    );
    assert!(!text.contains(super::CLIENT_SECRET), "{text}");
}

/// The pinned authorization server itself is used as before: consent, the code redeemed with
/// the pre-registered client's Basic credentials, the caller's own token.
#[tokio::test]
async fn a_pre_registered_client_works_at_its_own_authorization_server() {
    let client = format!("{PRE_CLIENT}:{}", super::CLIENT_SECRET);
    let up = protected(&["--client", &client]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-pinned-ok");
    let gw = pre_registered(&up, &up.base, &jwks.url, &dir).await;
    let alice = jwt("alice");
    let url = modern_consent_url(&modern_call(&gw, &alice).await);
    let browser = Browser::default();
    let authorize = browser.click_start(&url).await.map_err(|p| p.body).unwrap();
    assert!(
        authorize.contains(&format!("client_id={PRE_CLIENT}")),
        "{authorize}"
    );
    let done = browser.open(&format!("{authorize}&test_user=alice")).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let token = seen(&modern_call(&gw, &alice).await);
    assert!(token.starts_with("Bearer at.alice."), "{token}");
    let log = up.as_log().await;
    assert!(!log.iter().any(|e| e["kind"] == "register"), "{log:?}");
    assert!(
        log.iter()
            .any(|e| e["kind"] == "token-request" && e["basic"] == true),
        "{log:?}"
    );
}

/// The names `/status` lists.
async fn status_names(gw: &TestGateway) -> Vec<String> {
    let status: Value = gw
        .http
        .get(format!("{}/status", gw.base()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    status["backends"]
        .as_array()
        .unwrap_or_else(|| panic!("no backends in {status}"))
        .iter()
        .map(|b| b["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Anonymous callers off loopback are one principal: a per-user OAuth backend is refused at
/// startup there, and a reload cannot add one either. A later valid reload applies (so the
/// refusal was the reload's answer, not a worker that stopped), still without it.
#[tokio::test]
async fn a_reload_cannot_add_a_per_user_backend_for_anonymous_callers_off_loopback() {
    let up = protected(&["--public-lists"]).await;
    let dir = Dir::new("oauth-anon-reload");
    // Two backends: an aggregating gateway (one alone would be a transparent proxy, whose
    // backends no reload changes).
    let pair = format!("backends:\n{}{}", stdio("a", ""), stdio("b", ""));
    let config = dir.write("sb.yaml", &pair);
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.args(["serve", "--config", &config])
        .args(["--host", "0.0.0.0", "--port", "0"])
        .arg("--allow-anonymous-non-loopback");
    let gw = TestGateway::start_command(cmd).await;
    let config = std::path::PathBuf::from(config);
    let oauth = "    auth:\n      type: oauth\n";
    let with_svc = format!("{pair}  - name: svc\n    url: {}\n{oauth}", up.rec.url);
    rewrite(&config, &with_svc);
    hangup(&gw);
    let line = gw.wait_stdout(REFUSED, BOUND).await;
    assert!(line.contains("share one user's tokens"), "{line}");
    assert!(line.contains("svc"), "{line}");
    assert_eq!(status_names(&gw).await, ["a", "b"]);

    rewrite(&config, &format!("{pair}{}", stdio("c", "")));
    hangup(&gw);
    gw.wait_stdout(RELOADED, BOUND).await;
    let names = status_names(&gw).await;
    assert_eq!(names, ["a", "b", "c"]);
    let asked = up.rec.log().await;
    assert!(
        asked.is_empty(),
        "the refused backend was contacted: {asked:?}"
    );
}

/// A revoked consent is final for an open Legacy session too: the upstream session opened
/// with the caller's token stops carrying it at the next call (it goes without, and the
/// caller is asked again), instead of sending the revoked token for the session's life.
#[tokio::test]
async fn a_revoked_token_leaves_the_callers_open_upstream_session() {
    let up = protected_legacy().await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-revoke-session");
    let keys = dir.keys();
    let mut args: Vec<String> = ["--url", &up.rec.url, "--upstream-auth", "oauth"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(incoming(&jwks.url, &keys));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = TestGateway::start(&args).await;
    let carol = jwt("carol");
    let init = serde_json::json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let auth = format!("Bearer {carol}");
    let opened = gw
        .post_raw(None, init.to_string(), &[("authorization", &auth)])
        .await;
    assert_eq!(browse(&consent_url(&opened.json()), "carol").await.0, 200);
    let sid = session(&gw, &carol).await;
    let token = seen(&legacy_call(&gw, &carol, &sid).await);
    assert!(token.starts_with("Bearer at.carol."), "{token}");

    let removed: Value = gw
        .http
        .delete(format!("{}/oauth/tokens/default", gw.base()))
        .bearer_auth(&carol)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(removed["removed"], true, "{removed}");
    let after = legacy_call(&gw, &carol, &sid).await;
    let last = up
        .rec
        .log()
        .await
        .into_iter()
        .rev()
        .find(|e| e["method"] == "tools/call")
        .unwrap();
    assert_eq!(last["auth"], "none", "the revoked token was sent: {after}");
    // And the caller is asked again.
    consent_url(&after);
}

/// `upstream.py --oauth` (Legacy, sessions).
async fn protected_legacy() -> Protected {
    let (child, url) = python("upstream.py", &["--era", "legacy", "--oauth"]).await;
    let base = url.trim_end_matches("/mcp").to_owned();
    Protected {
        rec: Recorder { _child: child, url },
        base,
    }
}

/// A click whose form never finishes, sent with a live flow's anti-forgery cookie from the
/// gateway's origin (so the pre-check passes and the body is read), is answered once the
/// body deadline passes, not held: `POST /oauth/start` read its form with no deadline, and
/// its connection stayed busy, never evicted, for good (review HIGH).
#[tokio::test]
async fn an_unfinished_click_form_is_answered_at_the_body_deadline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = Protected::start("modern", "3600").await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-slow-form");
    let gw = super::oauth::gateway(&up, &jwks.url, &dir).await;
    let url = modern_consent_url(&modern_call(&gw, &jwt("alice")).await);
    let shown = reqwest::get(&url).await.unwrap();
    let set = shown.headers()["set-cookie"].to_str().unwrap();
    let cookie = set.split(';').next().unwrap().to_owned();
    let (origin, rest) = url.split_once("/oauth/start?flow=").unwrap();
    let authority = origin.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(authority).await.unwrap();
    let head = format!(
        "POST /oauth/start HTTP/1.1\r\nHost: {authority}\r\nOrigin: {origin}\r\n\
         Cookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: 1000\r\n\r\nflow={rest}&csrf="
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BOUND, s.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "the connection was held past the body deadline"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // The body's deadline answered, not the pre-check (which says the click was forged).
    assert!(answer.contains("The form could not be read."), "{answer}");
}
