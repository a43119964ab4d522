//! `auth: tokenExchange` (RFC 8693) end to end: each caller's verified JWT is exchanged for a
//! token of the backend's audience, and only that caller's requests carry it, on every path a
//! remote is reached by: a stateless Modern remote (Legacy sessions and Modern requests alike),
//! and a Legacy-only remote (an upstream session per client session, a partition per Modern
//! principal).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{
    incoming, jwt, legacy_call, modern_call, modern_tool, seen, session, Dir, Sts, Upstream,
    API_KEY, AUDIENCE, CLIENT_ID, CLIENT_SECRET,
};
use crate::auth::Jwks;
use crate::common::TestGateway;
use crate::leaks::Evidence;

fn exchanged(sub: &str, n: u32) -> String {
    format!("Bearer xt.{sub}.{AUDIENCE}.{n}")
}

/// The token the token service issues `sub` first (without `Bearer `).
fn issued(sub: &str) -> String {
    format!("xt.{sub}.{AUDIENCE}.1")
}

/// Stops `gw` and searches everything its run showed (logs, stdout, `/status`, `/metrics`,
/// the audit log in `dir`) for `secrets` and the client secret: zero hits. `bearer`: a
/// credential for `/status` and `/metrics`.
async fn no_leaks(mut gw: TestGateway, dir: &Dir, bearer: &str, secrets: &[&str]) {
    let audit = dir.0.join("audit.jsonl");
    let mut all = secrets.to_vec();
    all.push(CLIENT_SECRET);
    Evidence::collect(&mut gw, Some(bearer), Some(&audit))
        .await
        .assert_free_of(&all);
}

/// `run --url` with `--upstream-auth token-exchange` and its options.
async fn run_exchanging(up: &Upstream, sts: &Sts, dir: &Dir, jwks: &Jwks) -> TestGateway {
    run_exchanging_with(up, sts, dir, jwks, &[]).await
}

/// [`run_exchanging`] with more flags.
async fn run_exchanging_with(
    up: &Upstream,
    sts: &Sts,
    dir: &Dir,
    jwks: &Jwks,
    extra: &[&str],
) -> TestGateway {
    let secret = dir.secret();
    let keys = dir.keys();
    let mut args: Vec<String> = [
        "--url",
        &up.url,
        "--upstream-auth",
        "token-exchange",
        "--upstream-token-endpoint",
        &sts.url,
        "--upstream-audience",
        AUDIENCE,
        "--upstream-client-id",
        CLIENT_ID,
        "--upstream-client-secret-file",
        &secret,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(incoming(&jwks.url, &keys));
    args.push("--audit-log".into());
    args.push(dir.0.join("audit.jsonl").to_string_lossy().into_owned());
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestGateway::start(&args).await
}

/// No request the upstream got carried a caller's own token, and every one carried either
/// nothing (the gateway's own requests) or a token the token service issued.
fn only_exchanged_tokens(log: &[Value], originals: &[&str]) {
    for entry in log {
        let auth = entry["auth"].as_str().unwrap();
        for original in originals {
            assert!(
                !auth.contains(original),
                "a caller's own token upstream: {entry}"
            );
        }
        assert!(
            auth == "none" || auth.starts_with("Bearer xt."),
            "neither the gateway's own nor an exchanged token: {entry}"
        );
    }
}

/// A Modern (stateless) remote behind `run --url`: Alice's and Bob's calls, interleaved across
/// Legacy sessions and Modern requests, each reach the remote with the caller's own exchanged
/// token (exactly the one the token service issued for that subject), never the other's and
/// never the JWT itself; repeated calls reuse the cached token (one exchange per subject).
#[tokio::test]
async fn each_caller_reaches_a_modern_remote_with_its_own_exchanged_token_in_both_eras() {
    let sts = Sts::start(&[]).await;
    let up = Upstream::start("modern", &[]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("modern");
    let gw = run_exchanging(&up, &sts, &dir, &jwks).await;
    let (alice, bob) = (jwt("alice"), jwt("bob"));
    let alice_sid = session(&gw, &alice).await;
    let bob_sid = session(&gw, &bob).await;
    // Interleaved, so a token remembered from one caller would show up in the other's call.
    assert_eq!(
        seen(&legacy_call(&gw, &alice, &alice_sid).await),
        exchanged("alice", 1)
    );
    assert_eq!(seen(&modern_call(&gw, &bob).await), exchanged("bob", 1));
    assert_eq!(
        seen(&legacy_call(&gw, &bob, &bob_sid).await),
        exchanged("bob", 1)
    );
    assert_eq!(seen(&modern_call(&gw, &alice).await), exchanged("alice", 1));
    assert_eq!(
        seen(&legacy_call(&gw, &alice, &alice_sid).await),
        exchanged("alice", 1)
    );
    let stats = sts.stats().await;
    assert_eq!(
        stats["exchanges"],
        serde_json::json!({"alice": 1, "bob": 1}),
        "one exchange per subject, however many calls: {stats}"
    );
    assert_eq!(
        up.calls().await,
        [
            exchanged("alice", 1),
            exchanged("bob", 1),
            exchanged("bob", 1),
            exchanged("alice", 1),
            exchanged("alice", 1)
        ]
    );
    only_exchanged_tokens(&up.log().await, &[&alice, &bob]);
    let (a, b) = (issued("alice"), issued("bob"));
    no_leaks(gw, &dir, &alice, &[&alice, &bob, &a, &b]).await;
}

/// An API-key holder and an anonymous caller have no token to exchange: their calls to a
/// token-exchange backend are refused with a JSON-RPC error saying so, in both eras, and reach
/// the remote neither as the gateway nor without credentials. A JWT caller in between still
/// gets its own token.
#[tokio::test]
async fn callers_without_a_token_are_refused_and_never_sent() {
    let sts = Sts::start(&[]).await;
    let up = Upstream::start("modern", &[]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("refused");
    let gw = run_exchanging(&up, &sts, &dir, &jwks).await;
    let sid = session(&gw, API_KEY).await;
    let refusals = [
        legacy_call(&gw, API_KEY, &sid).await,
        modern_call(&gw, API_KEY).await,
    ];
    for refused in &refusals {
        assert_eq!(refused["error"]["code"], 403, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("no bearer token of its own"), "{message}");
    }
    let carol = jwt("carol");
    assert_eq!(seen(&modern_call(&gw, &carol).await), exchanged("carol", 1));
    assert_eq!(up.calls().await, [exchanged("carol", 1)]);
    assert_eq!(
        sts.stats().await["exchanges"],
        serde_json::json!({"carol": 1})
    );
    only_exchanged_tokens(&up.log().await, &[&carol, API_KEY]);
    no_leaks(gw, &dir, &carol, &[&carol, API_KEY, &issued("carol")]).await;

    // Without authentication configured, every caller is the anonymous principal: refused too.
    let anon_dir = Dir::new("anonymous");
    let secret = anon_dir.secret();
    let gw = TestGateway::start(&[
        "--url",
        &up.url,
        "--upstream-auth",
        "token-exchange",
        "--upstream-token-endpoint",
        &sts.url,
        "--upstream-audience",
        AUDIENCE,
        "--upstream-client-id",
        CLIENT_ID,
        "--upstream-client-secret-file",
        &secret,
    ])
    .await;
    let refused = modern_call(&gw, "ignored-without-auth").await;
    assert_eq!(refused["error"]["code"], 403, "{refused}");
    assert_eq!(
        up.calls().await,
        [exchanged("carol", 1)],
        "nothing more reached it"
    );
    let mut gw = gw;
    Evidence::collect(&mut gw, None, None)
        .await
        .assert_free_of(&[CLIENT_SECRET, "ignored-without-auth"]);
}

/// A Modern call that times out at the gateway is cancelled at the (stateless) remote, and
/// the cancellation carries the caller's exchanged token, as the call did: a remote that
/// checks tokens accepts it. The handle is shared by every principal, so it has no token of
/// its own to send it with.
#[tokio::test]
async fn a_timed_out_calls_cancellation_carries_its_callers_exchanged_token() {
    let sts = Sts::start(&[]).await;
    let up = Upstream::start("modern", &[]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("cancel");
    let gw = run_exchanging_with(&up, &sts, &dir, &jwks, &["--request-timeout", "1"]).await;
    let alice = jwt("alice");
    let timed_out = modern_tool(&gw, &alice, "slow").await;
    assert!(timed_out.get("error").is_some(), "{timed_out}");
    let mut cancels = Vec::new();
    for _ in 0..100 {
        cancels = up
            .log()
            .await
            .into_iter()
            .filter(|e| e["method"] == "notifications/cancelled")
            .collect();
        if !cancels.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(cancels.len(), 1, "{:?}", up.log().await);
    assert_eq!(cancels[0]["auth"], exchanged("alice", 1).as_str());
    only_exchanged_tokens(&up.log().await, &[&alice]);
    no_leaks(gw, &dir, &alice, &[&alice, &issued("alice")]).await;
}

/// A token service that refuses a subject and quotes the client secret and the subject token
/// in its `error_description`: the caller learns the RFC 6749 code only, and neither the
/// secret nor the token appears in the answer or in the gateway's logs.
#[tokio::test]
async fn a_token_service_error_passes_on_its_code_and_nothing_else() {
    let sts = Sts::start(&["--refuse-subject", "mallory"]).await;
    let up = Upstream::start("modern", &[]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("sts-error");
    let gw = run_exchanging(&up, &sts, &dir, &jwks).await;
    let mallory = jwt("mallory");
    let refused = modern_call(&gw, &mallory).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("invalid_grant"), "{refused}");
    let text = refused.to_string();
    assert!(!text.contains(CLIENT_SECRET), "{text}");
    assert!(!text.contains(&mallory), "{text}");
    assert_eq!(
        sts.stats().await["refused"],
        serde_json::json!(["refused subject"])
    );
    assert!(up.calls().await.is_empty(), "nothing was sent upstream");
    // Give the log line time to be read from the pipe, then search every line.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let logs = gw.stderr.lock().clone();
    assert!(logs.contains("token exchange failed"), "{logs}");
    assert!(!logs.contains(CLIENT_SECRET), "{logs}");
    assert!(!logs.contains(&mallory), "{logs}");
    no_leaks(gw, &dir, &mallory, &[&mallory]).await;
}

/// A Legacy-only remote behind `serve --config` (`auth: tokenExchange` in the file): every
/// client session gets an upstream session of its own and every Modern principal a partition,
/// each opened and used with its caller's exchanged token only. The remote's own record, by
/// its session ids, shows no upstream session ever carried two principals' tokens.
#[tokio::test]
async fn upstream_sessions_and_partitions_carry_one_callers_token_only() {
    let sts = Sts::start(&["--expect-scope", "tools"]).await;
    let up = Upstream::start("legacy", &[]).await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("legacy");
    let config = dir.write(
        "sb.yaml",
        &format!(
            "backends:\n  - name: acting\n    url: {}\n    auth:\n      type: tokenExchange\n      tokenEndpoint: {}\n      clientId: {CLIENT_ID}\n      clientSecretFile: sts.secret\n      audience: {AUDIENCE}\n      scopes: [tools]\n",
            up.url, sts.url
        ),
    );
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
    .args(incoming(&jwks.url, &keys))
    .arg("--audit-log")
    .arg(dir.0.join("audit.jsonl"));
    let gw = TestGateway::start_command(cmd).await;
    let (alice, bob) = (jwt("alice"), jwt("bob"));
    let alice_sid = session(&gw, &alice).await;
    let bob_sid = session(&gw, &bob).await;
    assert_eq!(
        seen(&legacy_call(&gw, &alice, &alice_sid).await),
        exchanged("alice", 1)
    );
    assert_eq!(
        seen(&legacy_call(&gw, &bob, &bob_sid).await),
        exchanged("bob", 1)
    );
    assert_eq!(seen(&modern_call(&gw, &alice).await), exchanged("alice", 1));
    assert_eq!(seen(&modern_call(&gw, &bob).await), exchanged("bob", 1));
    assert_eq!(
        seen(&legacy_call(&gw, &alice, &alice_sid).await),
        exchanged("alice", 1)
    );
    assert_eq!(seen(&modern_call(&gw, &alice).await), exchanged("alice", 1));
    // An API-key holder's session cannot use the backend, and opens nothing upstream.
    let ops_sid = session(&gw, API_KEY).await;
    let refused = legacy_call(&gw, API_KEY, &ops_sid).await;
    assert_eq!(refused["error"]["code"], 403, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no bearer token of its own"),
        "{refused}"
    );
    let log = up.log().await;
    only_exchanged_tokens(&log, &[&alice, &bob, API_KEY]);
    // By upstream session: which tokens each carried.
    let mut by_session: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in &log {
        let session = entry["session"].as_str().unwrap_or("(none)").to_owned();
        let auth = entry["auth"].as_str().unwrap().to_owned();
        by_session.entry(session).or_default().insert(auth);
    }
    let (mut alices, mut bobs) = (0, 0);
    for (session, tokens) in &by_session {
        if session == "(none)" {
            continue;
        }
        let users: BTreeSet<&str> = tokens
            .iter()
            .filter(|t| *t != "none")
            .map(String::as_str)
            .collect();
        assert!(
            users.len() <= 1,
            "upstream session {session} carried {tokens:?}"
        );
        match users.iter().next().copied() {
            Some(t) if t == exchanged("alice", 1) => alices += 1,
            Some(t) if t == exchanged("bob", 1) => bobs += 1,
            Some(other) => panic!("unexpected token {other}"),
            None => {}
        }
    }
    // Alice: her client session's upstream session and her Modern partition; Bob the same.
    assert_eq!((alices, bobs), (2, 2), "{by_session:?}");
    // Each initialize that opened a user's upstream session carried that user's token.
    let opened: Vec<&str> = log
        .iter()
        .filter(|e| e["method"] == "initialize" && e["auth"] != "none")
        .map(|e| e["auth"].as_str().unwrap())
        .collect();
    assert_eq!(opened.len(), 4, "{log:?}");
    let stats = sts.stats().await;
    assert_eq!(
        stats["exchanges"],
        serde_json::json!({"alice": 1, "bob": 1}),
        "{stats}"
    );
    let (a, b) = (issued("alice"), issued("bob"));
    no_leaks(gw, &dir, &alice, &[&alice, &bob, API_KEY, &a, &b]).await;
}

/// `validate` knows `auth`: a complete one is summarised (`type: oauth` with its keys too),
/// each type's misused keys are refused, and a key no type has is refused as unknown.
#[tokio::test]
async fn validate_knows_every_auth_key() {
    let dir = Dir::new("validate");
    let run = |name: &str, auth: &str| {
        let config = dir.write(
            name,
            &format!(
                "backends:\n  - name: remote\n    url: http://127.0.0.1:9/mcp\n    auth: {auth}\n"
            ),
        );
        std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["validate", "--config", &config])
            .output()
            .unwrap()
    };
    let ok = run(
        "ok.yaml",
        "{type: tokenExchange, tokenEndpoint: 'http://127.0.0.1:9/token', clientId: sb, clientSecretFile: sts.secret, audience: a, scopes: [tools], resource: 'https://r.example/mcp'}",
    );
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(out.contains("auth tokenExchange"), "{out}");
    assert!(!out.contains(CLIENT_SECRET), "{out}");
    let oauth = run(
        "oauth.yaml",
        "{type: oauth, scopes: [repo], clientMetadataUrl: 'https://gw.example/oauth/client-metadata.json', tokenEndpointAuth: none}",
    );
    let out = String::from_utf8_lossy(&oauth.stdout);
    assert!(
        oauth.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&oauth.stderr)
    );
    assert!(out.contains("auth oauth"), "{out}");
    for (bad, says) in [
        (
            "{type: oauth, tokenEndpointAuth: private_key_jwt}",
            "backends[0].auth.tokenEndpointAuth: expected one of",
        ),
        (
            "{type: oauth, clientMetadataUrl: 'http://gw.example/cm.json'}",
            "backends[0].auth.clientMetadataUrl:",
        ),
        (
            "{type: oauth, clientSecretFile: sts.secret}",
            "backends[0].auth.clientId: required with clientSecretFile",
        ),
        (
            "{type: oauth, audience: a}",
            "backends[0].auth.audience: not a key of type oauth",
        ),
    ] {
        let refused = run("oauth-bad.yaml", bad);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{bad}");
        assert!(err.contains(says), "{bad}: {err}");
    }
    let unknown = run("unknown.yaml", "{type: passthrough, clientSecret: x}");
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(!unknown.status.success());
    assert!(
        err.contains("backends[0].auth.clientSecret: unknown key"),
        "{err}"
    );
    let cleartext = run("cleartext.yaml", "{type: clientCredentials, tokenEndpoint: 'http://sts.example.com/token', clientId: sb, clientSecretFile: sts.secret}");
    let err = String::from_utf8_lossy(&cleartext.stderr);
    assert!(!cleartext.status.success());
    assert!(
        err.contains("backends[0].auth.tokenEndpoint: must be https"),
        "{err}"
    );
    let wrong = run("wrong.yaml", "{type: clientCredentials, tokenEndpoint: 'http://127.0.0.1:9/token', clientId: sb, clientSecretFile: sts.secret, audience: a}");
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        err.contains("backends[0].auth.audience: not a key of type clientCredentials"),
        "{err}"
    );
}
