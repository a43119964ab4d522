//! `auth: oauth` / `--upstream-auth oauth`: per-user OAuth to a remote, through the real
//! binary, against `acting/upstream.py --oauth` (a protected MCP server that is its own
//! authorization server: discovery, dynamic registration, PKCE, `iss`, refresh tokens). Each
//! principal's first call gets a URL elicitation (Legacy: -32042; Modern: an `input_required`
//! result) carrying its own authorization URL; a
//! scripted browser follows it (the authorization server redirects to the gateway's
//! `/oauth/callback`); the retry succeeds with that principal's own token, never another's.

use serde_json::Value;

use super::browser::Browser;
use super::{
    incoming, jwt, legacy_call, modern_call, python, seen, session, Dir, Upstream as Recorder,
};
use crate::auth::Jwks;
use crate::common::TestGateway;

/// The protected remote with its own authorization server.
pub(super) struct Protected {
    pub(super) rec: Recorder,
    pub(super) base: String,
}

impl Protected {
    pub(super) async fn start(era: &str, lifetime: &str) -> Protected {
        let (child, url) = python(
            "upstream.py",
            &["--era", era, "--oauth", "--lifetime", lifetime],
        )
        .await;
        let base = url.trim_end_matches("/mcp").to_owned();
        Protected {
            rec: Recorder { _child: child, url },
            base,
        }
    }

    pub(super) async fn as_log(&self) -> Vec<Value> {
        reqwest::get(format!("{}/as-log", self.base))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

pub(super) async fn gateway(up: &Protected, jwks: &str, dir: &Dir) -> TestGateway {
    gateway_with(up, jwks, dir, &[]).await
}

/// [`gateway`] with more flags.
pub(super) async fn gateway_with(
    up: &Protected,
    jwks: &str,
    dir: &Dir,
    extra: &[&str],
) -> TestGateway {
    let keys = dir.keys();
    let mut args: Vec<String> = ["--url", &up.rec.url, "--upstream-auth", "oauth"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    args.extend(incoming(jwks, &keys));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestGateway::start(&args).await
}

/// The URL of a URL elicitation error, checked for shape: the gateway's start page, never the
/// authorization server's URL.
pub(super) fn consent_url(answer: &Value) -> String {
    assert_eq!(answer["error"]["code"], -32042, "{answer}");
    let e = &answer["error"]["data"]["elicitations"][0];
    assert_eq!(e["mode"], "url", "{answer}");
    assert!(e["elicitationId"].as_str().is_some_and(|s| !s.is_empty()));
    let url = e["url"].as_str().unwrap().to_owned();
    assert!(url.contains("/oauth/start?flow="), "{url}");
    assert!(
        answer["error"]["message"].as_str().unwrap().contains(&url),
        "the message holds the URL for clients that only show errors"
    );
    url
}

/// The URL of a Modern `input_required` result (2026-07-28 has no -32042): its input request
/// is a URL-mode elicitation of the gateway's start page.
pub(super) fn modern_consent_url(answer: &Value) -> String {
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    let request = &result["inputRequests"]["authorization"];
    assert_eq!(request["method"], "elicitation/create", "{answer}");
    assert_eq!(request["params"]["mode"], "url", "{answer}");
    let url = request["params"]["url"].as_str().unwrap().to_owned();
    assert!(url.contains("/oauth/start?flow="), "{url}");
    url
}

/// What the user's browser does: opens the start page at `url`, clicks it, and follows the
/// authorization server (signing in as `user`) back to the gateway's callback; the final
/// status and page (or the page that refused on the way).
pub(super) async fn browse(url: &str, user: &str) -> (u16, String) {
    let browser = Browser::default();
    let authorize = match browser.click_start(url).await {
        Ok(authorize) => authorize,
        Err(refused) => return (refused.status, refused.body),
    };
    assert!(
        authorize.contains("code_challenge_method=S256"),
        "{authorize}"
    );
    assert!(authorize.contains("resource="), "{authorize}");
    let page = browser.open(&format!("{authorize}&test_user={user}")).await;
    (page.status, page.body)
}

#[tokio::test]
async fn each_principal_consents_for_itself_and_gets_only_its_own_token() {
    let up = Protected::start("modern", "3600").await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth");
    let gw = gateway(&up, &jwks.url, &dir).await;
    let (alice, bob) = (jwt("alice"), jwt("bob"));

    let alice_url = modern_consent_url(&modern_call(&gw, &alice).await);
    let bob_url = modern_consent_url(&modern_call(&gw, &bob).await);
    assert_ne!(
        alice_url, bob_url,
        "each principal its own authorization request"
    );

    let (status, page) = browse(&alice_url, "alice").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("close this tab"), "{page}");
    let first = seen(&modern_call(&gw, &alice).await);
    assert!(first.starts_with("Bearer at.alice."), "{first}");
    // Bob has given no consent: still asked, never sent Alice's token.
    modern_consent_url(&modern_call(&gw, &bob).await);

    // The same authorization link again: its state was used; nothing changes.
    let (status, page) = browse(&alice_url, "alice").await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("already used"), "{page}");
    // A callback with a state the gateway never issued.
    let forged = reqwest::get(format!("{}/oauth/callback?state=forged&code=x", gw.base()))
        .await
        .unwrap();
    assert_eq!(forged.status(), 400);

    assert_eq!(browse(&bob_url, "bob").await.0, 200);
    let bobs = seen(&modern_call(&gw, &bob).await);
    assert!(bobs.starts_with("Bearer at.bob."), "{bobs}");
    assert_eq!(
        seen(&modern_call(&gw, &alice).await),
        first,
        "kept, not re-asked"
    );

    // The consents live in the process's one token vault, the one `/oauth/tokens` reads:
    // Alice sees her own entry only, and revoking it asks her again, not Bob.
    let client = reqwest::Client::new();
    let listed: Value = client
        .get(format!("{}/oauth/tokens", gw.base()))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = listed.to_string();
    assert!(
        !text.contains("at.alice") && !text.contains("at.bob"),
        "{text}"
    );
    let entries: Vec<&Value> = match &listed {
        Value::Array(a) => a.iter().collect(),
        other => other["tokens"].as_array().expect("a list").iter().collect(),
    };
    assert_eq!(entries.len(), 1, "{listed}");
    let backend = entries[0]["backend"].as_str().unwrap().to_owned();
    let removed: Value = client
        .delete(format!("{}/oauth/tokens/{backend}", gw.base()))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(removed["removed"], true, "{removed}");
    modern_consent_url(&modern_call(&gw, &alice).await);
    assert_eq!(
        seen(&modern_call(&gw, &bob).await),
        bobs,
        "Bob's consent kept"
    );

    // What reached the remote: each authenticated call carried its caller's own token; the
    // callers' incoming JWTs never left the gateway.
    for entry in up.rec.log().await {
        let auth = entry["auth"].as_str().unwrap();
        assert!(auth == "none" || auth.starts_with("Bearer at."), "{entry}");
        assert!(!auth.contains(&alice) && !auth.contains(&bob));
    }
    // One dynamic registration for the authorization server; every token request named the
    // resource.
    let log = up.as_log().await;
    assert_eq!(
        log.iter().filter(|e| e["kind"] == "register").count(),
        1,
        "{log:?}"
    );
    for e in log.iter().filter(|e| e["kind"] == "token") {
        assert_eq!(e["resource"], format!("{}/mcp", up.base), "{e}");
    }
    // It registered its issuer's own redirect URI (`/oauth/i/<32 hex>/callback`), where the
    // browsers came back (mix-up defence).
    let register = log.iter().find(|e| e["kind"] == "register").unwrap();
    let uri = register["redirect_uris"][0].as_str().unwrap_or_default();
    let tag = (uri.strip_prefix(&format!("{}/oauth/i/", gw.base())))
        .and_then(|rest| rest.strip_suffix("/callback"))
        .unwrap_or_default();
    assert!(
        tag.len() == 32 && tag.bytes().all(|b| b.is_ascii_hexdigit()),
        "{register}"
    );
    // No token, code or refresh token in anything the gateway wrote.
    let written = format!("{}{}", gw.stderr.lock(), gw.startup.join("\n"));
    for secret in ["at.alice", "at.bob", "rt.", "code.alice", "code.bob"] {
        assert!(
            !written.contains(secret),
            "{secret} in the gateway's output"
        );
    }
}

#[tokio::test]
async fn a_legacy_session_gets_the_url_elicitation_and_its_retry_succeeds() {
    let up = Protected::start("legacy", "3600").await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-legacy");
    let gw = gateway(&up, &jwks.url, &dir).await;
    let carol = jwt("carol");
    // A Legacy client's `initialize` opens its own upstream session, as the caller: that is
    // where the remote first asks for the caller's authorization.
    let auth = format!("Bearer {carol}");
    let init = serde_json::json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let opened = gw
        .post_raw(None, init.to_string(), &[("authorization", &auth)])
        .await;
    let url = consent_url(&opened.json());
    assert_eq!(browse(&url, "carol").await.0, 200);
    let sid = session(&gw, &carol).await;
    let got = seen(&legacy_call(&gw, &carol, &sid).await);
    assert!(got.starts_with("Bearer at.carol."), "{got}");
}

#[tokio::test]
async fn a_token_about_to_expire_is_refreshed_with_its_resource() {
    // Issued for 5 s: inside the 30 s margin at once, so the next call refreshes it.
    let up = Protected::start("modern", "5").await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-refresh");
    let gw = gateway(&up, &jwks.url, &dir).await;
    let dave = jwt("dave");
    let url = modern_consent_url(&modern_call(&gw, &dave).await);
    assert_eq!(browse(&url, "dave").await.0, 200);
    let first = seen(&modern_call(&gw, &dave).await);
    let second = seen(&modern_call(&gw, &dave).await);
    assert!(first.starts_with("Bearer at.dave.") && second.starts_with("Bearer at.dave."));
    assert_ne!(first, second, "each call found its token about to expire");
    let log = up.as_log().await;
    let refreshes: Vec<_> = log
        .iter()
        .filter(|e| e["kind"] == "token" && e["grant"] == "refresh_token")
        .collect();
    assert!(refreshes.len() >= 2, "{log:?}");
    for e in refreshes {
        assert_eq!(e["resource"], format!("{}/mcp", up.base), "{e}");
        assert_eq!(e["user"], "dave");
    }
}

/// Anonymous callers are one principal: off loopback they would share one user's tokens, so a
/// per-user OAuth backend refuses to start there even with the anonymous opt-in.
#[tokio::test]
async fn anonymous_callers_off_loopback_are_refused_with_a_per_user_backend() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args([
            "run",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--allow-anonymous-non-loopback",
            "--url",
            "http://127.0.0.1:9/mcp",
            "--upstream-auth",
            "oauth",
        ])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("share one user's tokens"), "{err}");
}

/// Login CSRF: Alice's authorization must not be completable by anyone else's browser. Her
/// start page names her; its click binds the flow to her browser; the authorization server's
/// URL opened in Bob's browser (signed in there as bob) comes back to the callback without
/// her browser's cookie and is refused; nothing is kept for Alice (she is asked again) and
/// no request for her ever carries bob's token. Another site cannot click for a browser (no
/// anti-forgery cookie), and a started flow cannot be started again elsewhere.
#[tokio::test]
async fn an_authorization_completes_only_in_the_browser_that_started_it() {
    let up = Protected::start("modern", "3600").await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-csrf");
    let gw = gateway(&up, &jwks.url, &dir).await;
    let alice = jwt("alice");

    let url = modern_consent_url(&modern_call(&gw, &alice).await);
    // The page's form must carry the gateway's origin: under `no-referrer` a real browser
    // posts it with `Origin: null`, which was refused as forged (review HIGH).
    let shown = reqwest::get(&url).await.unwrap();
    assert_eq!(shown.headers()["referrer-policy"], "same-origin");
    let alices = Browser::default();
    let page = alices.get(&url).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("&quot;alice&quot;"),
        "names whom it is for: {}",
        page.body
    );

    // Another site's auto-submitted form: the fields, without the page's Strict cookie.
    let flow = url.split("flow=").nth(1).unwrap();
    let csrf_at = page.body.find("name=\"csrf\" value=\"").unwrap() + 19;
    let csrf = &page.body[csrf_at..csrf_at + page.body[csrf_at..].find('"').unwrap()];
    let forged = Browser::default()
        .post(
            &format!("{}/oauth/start", gw.base()),
            &[("flow", flow), ("csrf", csrf)],
        )
        .await;
    assert_eq!(forged.status, 400, "{}", forged.body);

    // A page on another port of the gateway's host is the same site: the Strict cookie goes
    // with its form, but its Origin is not the gateway's.
    let sibling = alices
        .post_from(
            &format!("{}/oauth/start", gw.base()),
            &[("flow", flow), ("csrf", csrf)],
            "http://127.0.0.1:1",
        )
        .await;
    assert_eq!(sibling.status, 400, "{}", sibling.body);

    // Alice clicks; her authorization server URL then reaches Bob's browser.
    let authorize = alices.click_start(&url).await.map_err(|p| p.body).unwrap();
    let again = Browser::default().click_start(&url).await;
    assert!(
        again.is_err_and(|p| p.status == 400 && p.body.contains("already started")),
        "a started flow is not started again in another browser"
    );
    let bobs = Browser::default()
        .open(&format!("{authorize}&test_user=bob"))
        .await;
    assert_eq!(bobs.status, 400, "{}", bobs.body);
    assert!(
        bobs.body.contains("not started in this browser"),
        "{}",
        bobs.body
    );

    // Nothing was kept for Alice: she is asked again, and her next consent is her own.
    let url = modern_consent_url(&modern_call(&gw, &alice).await);
    assert_eq!(browse(&url, "alice").await.0, 200);
    let sent = seen(&modern_call(&gw, &alice).await);
    assert!(sent.starts_with("Bearer at.alice."), "{sent}");
    let log = up.as_log().await;
    let tokens_for_bob = log
        .iter()
        .filter(|e| e["kind"] == "token" && e["user"] == "bob")
        .count();
    assert_eq!(tokens_for_bob, 0, "bob's code was never redeemed: {log:?}");
}
