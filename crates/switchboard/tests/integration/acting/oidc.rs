//! Per-user OAuth end to end against a real authorization server nobody here wrote: panva's
//! `oidc-provider` (npm, pinned by `scripts/install-test-clients.sh oidc`, configured by
//! `acting/oidc_provider.mjs`: dynamic registration, PKCE S256, resource indicators with RS256
//! JWT access tokens bound to the resource, refresh tokens for `offline_access`, `iss` in its
//! answers, its own sign-in and consent pages, and only OpenID discovery, no RFC 8414
//! document). The upstream (`acting/upstream.py --oidc-issuer`) is a protected MCP server that
//! takes only that server's tokens for itself (signature by its JWKS, issuer, audience, expiry)
//! and records the `Authorization` of every request.
//!
//! Two principals in each era: the first call gets the URL elicitation (Legacy: -32042;
//! Modern: `input_required`); each user's own scripted browser (its own cookies) opens the
//! gateway's start page, signs in at oidc-provider and consents; the retry succeeds with a
//! token whose `sub` is that user and whose `aud` is the upstream; the other principal is
//! still asked. Access tokens live 5 s (inside the gateway's refresh margin), so later calls
//! refresh, with the resource, and never send an expired token. A revoke is also a revocation
//! at oidc-provider (RFC 7009: it ends the grant), asks that user again and leaves the other's
//! consent alone. In the Modern run the issuer has a path and the vault is Redis: what it holds
//! is ciphertext; every log line, `/status`, `/metrics`, audit line and exported span is
//! searched for every secret oidc-provider issued or was sent. Two replicas on one Redis:
//! a consent through one serves calls through the other.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Child;

use super::browser::Browser;
use super::oauth::{consent_url, modern_consent_url};
use super::{incoming, jwt, legacy_call, listening, modern_call, seen, session, Dir, Upstream};
use crate::auth::Jwks;
use crate::common::TestGateway;
use crate::leaks::Evidence;
use crate::replicas::redis::Redis;
use crate::traces::Receiver;

/// `oidc-provider` on loopback.
struct Provider {
    _child: Child,
    issuer: String,
    /// Its origin, where its test routes are.
    origin: String,
}

impl Provider {
    /// Access tokens living `ttl` seconds; an issuer with `path` (e.g. `/tenant`) if given.
    async fn start(ttl: &str, path: Option<&str>) -> Provider {
        let modules = install_oidc_provider().await;
        let mut args = vec![modules.as_str(), "--ttl", ttl];
        if let Some(path) = path {
            args.extend(["--issuer-path", path]);
        }
        let (child, issuer) = listening("node", "oidc_provider.mjs", &args).await;
        let after = issuer.find("://").unwrap() + 3;
        let end = issuer[after..]
            .find('/')
            .map_or(issuer.len(), |i| after + i);
        Provider {
            _child: child,
            origin: issuer[..end].to_owned(),
            issuer,
        }
    }

    async fn test_route(&self, route: &str) -> Value {
        let url = format!("{}/test/{route}", self.origin);
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }

    /// What it did: `[{"kind": "register" | "authorize" | "token" | "token-error" | ...}]`.
    async fn log(&self) -> Vec<Value> {
        self.test_route("log").await.as_array().unwrap().clone()
    }

    /// Every token, code, verifier and client secret it issued or was sent.
    async fn secrets(&self) -> Vec<String> {
        let all = self.test_route("secrets").await;
        let all = all.as_array().unwrap().iter();
        all.map(|s| s.as_str().unwrap().to_owned()).collect()
    }
}

/// What `scripts/install-test-clients.sh oidc` prints: oidc-provider's `node_modules`.
async fn install_oidc_provider() -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = tokio::process::Command::new("bash")
        .arg(format!("{root}/scripts/install-test-clients.sh"))
        .arg("oidc")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "install-test-clients.sh oidc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The claims of the JWT in `authorization` (`Bearer JWT`), unverified (the upstream verified
/// it before answering).
fn claims(authorization: &str) -> Value {
    let token = authorization
        .strip_prefix("Bearer ")
        .unwrap_or_else(|| panic!("not a bearer token: {authorization}"));
    let payload = token.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(&base64url(payload)).expect("JSON claims")
}

fn base64url(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c).expect("base64url") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// `switchboard run --url <upstream> --upstream-auth oauth`, accepting the test issuer's JWTs,
/// with `extra` flags.
async fn gateway(up: &Upstream, jwks: &str, dir: &Dir, extra: &[&str]) -> TestGateway {
    let keys = dir.keys();
    let mut args: Vec<String> = ["--url", &up.url, "--upstream-auth", "oauth"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    args.extend(incoming(jwks, &keys));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestGateway::start(&args).await
}

/// `user` consents in `browser` (their own): the gateway's start page at `url`, clicked, then
/// oidc-provider's sign-in and consent, back to the gateway's callback.
async fn consent(browser: &Browser, url: &str, user: &str) {
    let authorize = browser.click_start(url).await.map_err(|p| p.body).unwrap();
    assert!(
        authorize.contains("code_challenge_method=S256"),
        "{authorize}"
    );
    assert!(authorize.contains("resource="), "{authorize}");
    assert!(
        authorize.contains("offline_access") && authorize.contains("prompt=consent"),
        "a refresh token asked for as an OpenID provider needs it: {authorize}"
    );
    let done = browser.sign_in(&authorize, user).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("close this tab"), "{}", done.body);
}

/// The claims of the token `authorization` carried: issued by `op` to `user` for `up`.
fn assert_token_of(authorization: &str, user: &str, op: &Provider, up: &Upstream) {
    let c = claims(authorization);
    assert_eq!(c["sub"], user, "{c}");
    assert_eq!(c["iss"], op.issuer.as_str(), "{c}");
    assert_eq!(c["aud"], up.url.as_str(), "bound to the upstream: {c}");
}

/// Every `Authorization` the upstream got, with its JWT's `sub`: each one a token of the
/// user whose calls were sent with it (`sent`: per user, what `whoami` answered them), never
/// a caller's own incoming token, and never one the upstream refused.
async fn assert_each_got_its_own(
    up: &Upstream,
    sent: &HashMap<&str, Vec<String>>,
    incoming: &[&str],
) {
    let refused: Vec<Value> = reqwest::get(up.url.replace("/mcp", "/refused"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        refused.is_empty(),
        "the gateway sent a token the upstream refused: {refused:?}"
    );
    for entry in up.log().await {
        let auth = entry["auth"].as_str().unwrap();
        assert!(incoming.iter().all(|t| !auth.contains(t)), "{entry}");
        if auth == "none" {
            continue;
        }
        let sub = claims(auth)["sub"].as_str().unwrap().to_owned();
        assert!(
            sent.contains_key(sub.as_str()),
            "a token of someone else: {entry}"
        );
        let owner = sent
            .iter()
            .find(|(_, tokens)| tokens.iter().any(|t| t == auth))
            .map(|(user, _)| *user);
        if let Some(owner) = owner {
            assert_eq!(owner, sub, "{entry}");
        }
    }
}

/// Waits until `authorization`'s token has expired (its `exp` passed; at most 10 s).
async fn until_expired(authorization: &str) {
    let exp = claims(authorization)["exp"].as_u64().unwrap();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    assert!(exp <= now() + 10, "a short-lived token: {exp}");
    while now() <= exp {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The refresh grants oidc-provider answered, each for `resource`.
async fn refreshes(op: &Provider, resource: &str) -> usize {
    let log = op.log().await;
    let grants: Vec<&Value> = log
        .iter()
        .filter(|e| e["kind"] == "token" && e["grant"] == "refresh_token")
        .collect();
    for g in &grants {
        assert_eq!(g["resource"], resource, "{g}");
    }
    assert!(
        !log.iter().any(|e| e["kind"] == "token-error"),
        "oidc-provider refused a token request: {log:?}"
    );
    grants.len()
}

/// The flags of a replica whose token vault is `redis`, sealed under a key all replicas share
/// (written into `dir`), with the secret they forward with.
fn shared_vault(dir: &Dir, redis: &Redis) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let key = dir.0.join("tokens.key");
    let replica = dir.0.join("replica.secret");
    std::fs::write(&key, [0x6b; 32]).unwrap();
    std::fs::write(&replica, "replica-secret-oidc-0123456789abcdef-0123456789").unwrap();
    for file in [&key, &replica] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    vec![
        "--session-store".into(),
        redis.url(),
        "--session-store-prefix".into(),
        "sboidc".into(),
        "--token-store-key-file".into(),
        path(key),
        "--replica-secret-file".into(),
        path(replica),
    ]
}

/// The vault in `redis` holds `principals` sealed values: no token `op` issued, no claim, no
/// JSON readable in any.
async fn assert_sealed(redis: &Redis, op: &Provider, principals: usize) {
    let stored = redis.values("sboidc*tok:*").await;
    let keys: Vec<&String> = stored.iter().map(|(k, _)| k).collect();
    assert_eq!(stored.len(), principals, "{keys:?}");
    let issued = op.secrets().await;
    for (key, value) in &stored {
        let text = String::from_utf8_lossy(value);
        for needle in ["eyJ", "alice", "bob", "access_token", "refresh", &op.issuer] {
            assert!(!text.contains(needle), "{needle} readable in {key}");
        }
        for secret in &issued {
            assert!(!text.contains(secret.as_str()), "a token readable in {key}");
        }
    }
}

/// `DELETE /oauth/tokens/default` as the holder of `token`: forgotten by the gateway and
/// revoked at the provider (RFC 7009: its log shows one more revocation).
async fn revoke(gw: &TestGateway, op: &Provider, token: &str) {
    let revocations = |log: &[Value]| log.iter().filter(|e| e["kind"] == "revoke").count();
    let before = revocations(&op.log().await);
    let removed: Value = reqwest::Client::new()
        .delete(format!("{}/oauth/tokens/default", gw.base()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(removed["removed"], true, "{removed}");
    assert_eq!(removed["revokedUpstream"], true, "{removed}");
    assert!(revocations(&op.log().await) > before, "{removed}");
}

#[tokio::test]
async fn modern_callers_consent_at_oidc_provider_and_each_gets_only_its_own_token() {
    let op = Provider::start("5", Some("/tenant")).await;
    let up = Upstream::start("modern", &["--oidc-issuer", &op.issuer]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oidc-modern");
    let redis = Redis::start_or_skip("oidc_modern_vault").await;
    let audit = dir.0.join("audit.jsonl").to_string_lossy().into_owned();
    let mut receiver = Receiver::start().await;
    let mut flags = vec![
        "--audit-log".to_owned(),
        audit.clone(),
        "--otlp-endpoint".to_owned(),
        receiver.url.clone(),
    ];
    if let Some(redis) = &redis {
        flags.extend(shared_vault(&dir, redis));
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut gw = gateway(&up, &jwks.url, &dir, &flags).await;
    let (alice, bob) = (jwt("alice"), jwt("bob"));
    let (alices, bobs) = (Browser::default(), Browser::default());

    let alice_url = modern_consent_url(&modern_call(&gw, &alice).await);
    let bob_url = modern_consent_url(&modern_call(&gw, &bob).await);
    assert_ne!(alice_url, bob_url);
    consent(&alices, &alice_url, "alice").await;
    let first = seen(&modern_call(&gw, &alice).await);
    assert_token_of(&first, "alice", &op, &up);
    // Bob gave no consent: asked again, with his own elicitation.
    let bob_again = modern_consent_url(&modern_call(&gw, &bob).await);
    assert_ne!(bob_again, alice_url);
    consent(&bobs, &bob_again, "bob").await;
    let bob_first = seen(&modern_call(&gw, &bob).await);
    assert_token_of(&bob_first, "bob", &op, &up);

    // Alice's token expires; her next call goes out with a refreshed one, never the old.
    until_expired(&first).await;
    let second = seen(&modern_call(&gw, &alice).await);
    assert_token_of(&second, "alice", &op, &up);
    assert_ne!(first, second);
    assert!(refreshes(&op, &up.url).await >= 1);

    if let Some(redis) = &redis {
        assert_sealed(redis, &op, 2).await;
    }

    // Alice revokes: asked again; Bob's consent stays.
    revoke(&gw, &op, &alice).await;
    modern_consent_url(&modern_call(&gw, &alice).await);
    let bob_later = seen(&modern_call(&gw, &bob).await);
    assert_token_of(&bob_later, "bob", &op, &up);

    let sent = HashMap::from([
        ("alice", vec![first, second]),
        ("bob", vec![bob_first, bob_later]),
    ]);
    assert_each_got_its_own(&up, &sent, &[&alice, &bob]).await;
    let log = op.log().await;
    assert_eq!(
        log.iter().filter(|e| e["kind"] == "register").count(),
        1,
        "{log:?}"
    );
    for e in log.iter().filter(|e| e["kind"] == "authorize") {
        assert_eq!(e["resource"], up.url.as_str(), "{e}");
    }

    let mut secrets = op.secrets().await;
    assert!(
        secrets.len() >= 8,
        "codes, verifiers, tokens, a client secret: {}",
        secrets.len()
    );
    secrets.extend(alices.cookie_values());
    secrets.extend(bobs.cookie_values());
    secrets.retain(|s| s.len() >= 8);
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let audit = std::path::PathBuf::from(audit);
    let mut evidence = Evidence::collect(&mut gw, Some(&alice), Some(audit.as_path())).await;
    // The gateway flushed its spans when it stopped (collect waits for that).
    let spans = receiver.all();
    assert!(spans.len() >= 5, "spans were exported: {}", spans.len());
    evidence.add("exported spans", serde_json::to_string(&spans).unwrap());
    evidence.assert_free_of(&secrets);
}

#[tokio::test]
async fn legacy_sessions_consent_at_oidc_provider_and_each_gets_only_its_own_token() {
    let op = Provider::start("5", None).await;
    let up = Upstream::start("legacy", &["--oidc-issuer", &op.issuer]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oidc-legacy");
    let gw = gateway(&up, &jwks.url, &dir, &[]).await;
    let (carol, dave) = (jwt("carol"), jwt("dave"));
    let init = serde_json::json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let initialize = |token: &str| {
        let auth = format!("Bearer {token}");
        let gw = &gw;
        let body = init.to_string();
        async move {
            gw.post_raw(None, body, &[("authorization", &auth)])
                .await
                .json()
        }
    };

    // A Legacy `initialize` opens the caller's own upstream session: there it is asked.
    let carol_url = consent_url(&initialize(&carol).await);
    let dave_url = consent_url(&initialize(&dave).await);
    assert_ne!(carol_url, dave_url);
    consent(&Browser::default(), &carol_url, "carol").await;
    let sid = session(&gw, &carol).await;
    let first = seen(&legacy_call(&gw, &carol, &sid).await);
    assert_token_of(&first, "carol", &op, &up);
    // Dave is still asked, with his own elicitation.
    let dave_again = consent_url(&initialize(&dave).await);
    consent(&Browser::default(), &dave_again, "dave").await;
    let dave_sid = session(&gw, &dave).await;
    let daves = seen(&legacy_call(&gw, &dave, &dave_sid).await);
    assert_token_of(&daves, "dave", &op, &up);

    until_expired(&first).await;
    let second = seen(&legacy_call(&gw, &carol, &sid).await);
    assert_token_of(&second, "carol", &op, &up);
    assert_ne!(first, second, "refreshed after expiry");
    assert!(refreshes(&op, &up.url).await >= 1);

    // Carol revokes: a new session of hers is asked again; Dave's stays served.
    revoke(&gw, &op, &carol).await;
    consent_url(&initialize(&carol).await);
    let dave_later = seen(&legacy_call(&gw, &dave, &dave_sid).await);
    assert_token_of(&dave_later, "dave", &op, &up);

    let sent = HashMap::from([
        ("carol", vec![first, second]),
        ("dave", vec![daves, dave_later]),
    ]);
    assert_each_got_its_own(&up, &sent, &[&carol, &dave]).await;
    let written = format!("{}{}", gw.stderr.lock(), gw.startup.join("\n"));
    for secret in op.secrets().await.iter().filter(|s| s.len() >= 8) {
        assert!(
            !written.contains(secret.as_str()),
            "a secret in the gateway's output"
        );
    }
}

/// Two replicas on one Redis (the sealed vault under their shared key): a consent given at
/// oidc-provider through one serves the same principal's calls through the other; another
/// principal is still asked on both.
#[tokio::test]
async fn a_consent_at_oidc_provider_through_one_replica_serves_calls_through_the_other() {
    let Some(redis) = Redis::start_or_skip("oidc_replicas").await else {
        return;
    };
    let op = Provider::start("5", None).await;
    let up = Upstream::start("modern", &["--oidc-issuer", &op.issuer]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oidc-replicas");
    let flags = shared_vault(&dir, &redis);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (one, two) = tokio::join!(
        gateway(&up, &jwks.url, &dir, &flags),
        gateway(&up, &jwks.url, &dir, &flags)
    );
    let (alice, bob) = (jwt("alice"), jwt("bob"));

    let url = modern_consent_url(&modern_call(&one, &alice).await);
    assert!(url.starts_with(&one.base()), "{url}");
    consent(&Browser::default(), &url, "alice").await;
    let through_two = seen(&modern_call(&two, &alice).await);
    assert_token_of(&through_two, "alice", &op, &up);
    // (Tokens live 5 s, inside the refresh margin: each call through either replica may
    // refresh, so the token is Alice's, not necessarily the same one.)
    let through_one = seen(&modern_call(&one, &alice).await);
    assert_token_of(&through_one, "alice", &op, &up);
    modern_consent_url(&modern_call(&two, &bob).await);
    modern_consent_url(&modern_call(&one, &bob).await);
    // Expired: the replica that did not register the client refreshes it all the same (the
    // client it was issued to travels, sealed, with the token), without asking again.
    until_expired(&through_two).await;
    let refreshed = seen(&modern_call(&two, &alice).await);
    assert_token_of(&refreshed, "alice", &op, &up);
    assert_ne!(refreshed, through_two);
    assert!(refreshes(&op, &up.url).await >= 1);
    // One registration per replica that started a consent (Bob's, asked through both);
    // refreshing Alice's token through the other replica made none.
    let log = op.log().await;
    assert_eq!(
        log.iter().filter(|e| e["kind"] == "register").count(),
        2,
        "{log:?}"
    );
    let sent = HashMap::from([("alice", vec![through_two, through_one, refreshed])]);
    assert_each_got_its_own(&up, &sent, &[&alice, &bob]).await;
}
