//! The token vault through the real binary: `tokenStore` in `validate`, the caller's own
//! `GET /oauth/tokens` and `DELETE /oauth/tokens/{backend}`, and the operator's `switchboard
//! tokens list|revoke`. Tokens are put in the vault of a real Redis (one this test started)
//! through `RedisTokenVault` with the gateway's key, as a replica would after a consent.

use std::process::Output;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use switchboard_store::{RedisStore, RedisTokenVault};
use switchboard_upstream::outgoing_auth::{
    principal_key, TokenVault, UpstreamToken, VaultKey, VaultKeyMaterial,
};

use crate::acting::{incoming, jwt, Dir, API_KEY};
use crate::auth::{Jwks, ISSUER};
use crate::common::TestGateway;
use crate::replicas::redis::Redis;

const SWITCHBOARD: &str = env!("CARGO_BIN_EXE_switchboard");
const KEY: [u8; 32] = [0x5a; 32];
const PREFIX: &str = "sbtok";

/// Runs `switchboard ARGS` to completion (bounded: a hang fails the test).
async fn switchboard(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(args).envs(env.iter().copied()).kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("switchboard did not finish within 30s")
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Writes the 32-byte key file with `mode`; its path.
fn key_file(dir: &Dir, mode: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.0.join("tokens.key");
    std::fs::write(&path, KEY).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_string_lossy().into_owned()
}

fn token(access: &str) -> UpstreamToken {
    UpstreamToken {
        access_token: access.into(),
        refresh_token: Some(format!("{access}-refresh")),
        expires_at: Some(4_000_000_000),
        issued_at: None,
        scope: Some("repo".into()),
        issuer: "https://github.example.com".into(),
        resource: "https://api.github.example.com/mcp".into(),
        client_id: "switchboard".into(),
        client_secret: None,
        client_auth: None,
    }
}

fn vault(redis: &Redis) -> RedisTokenVault {
    let store = RedisStore::new(&redis.url(), None, PREFIX, Duration::from_secs(60)).unwrap();
    RedisTokenVault::new(&store, VaultKeyMaterial::from_bytes(&KEY))
}

fn of(sub: &str, backend: &str) -> VaultKey {
    VaultKey::new(principal_key(ISSUER, sub), backend)
}

async fn get(gw: &TestGateway, path: &str, bearer: Option<&str>) -> (StatusCode, Value) {
    send(gw, reqwest::Method::GET, path, bearer).await
}

async fn send(
    gw: &TestGateway,
    method: reqwest::Method,
    path: &str,
    bearer: Option<&str>,
) -> (StatusCode, Value) {
    let mut r = gw.http.request(method, format!("{}{path}", gw.base()));
    if let Some(b) = bearer {
        r = r.bearer_auth(b);
    }
    let r = r.send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}")),
    )
}

#[tokio::test]
async fn validate_explains_a_bad_token_key_file() {
    let dir = Dir::new("tok-validate");
    let config = dir.write(
        "sb.yaml",
        "tokenStore: {encryptionKeyFile: tokens.key}\nbackends: [{name: a, command: x}]\n",
    );
    let args = ["validate", "--config", &config];
    let out = switchboard(&args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("tokenStore.encryptionKeyFile: ")
            && text(&out).contains("cannot be read"),
        "{}",
        text(&out)
    );
    key_file(&dir, 0o644);
    let out = switchboard(&args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("0600"), "{}", text(&out));
    key_file(&dir, 0o600);
    let out = switchboard(&args, &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("token store: in memory, sealed with the key in tokens.key"));
    std::fs::write(dir.0.join("tokens.key"), b"too short\n").unwrap();
    let out = switchboard(&args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("exactly 32"), "{}", text(&out));
    let out = switchboard(
        &[
            "validate",
            "--config",
            &dir.write(
                "k.yaml",
                "tokenStore: {}\nbackends: [{name: a, command: x}]\n",
            ),
        ],
        &[],
    )
    .await;
    assert!(
        text(&out).contains("tokenStore.encryptionKeyFile: required"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn without_redis_tokens_stay_in_memory_and_the_cli_says_so() {
    let dir = Dir::new("tok-memory");
    let gw = TestGateway::start(&[]).await;
    assert!(
        gw.startup
            .iter()
            .any(|l| l.contains("token store in memory with a random key")),
        "{:?}",
        gw.startup
    );
    let config = dir.write("sb.yaml", "backends: [{name: a, command: x}]\n");
    for args in [
        vec!["tokens", "--config", &config, "list"],
        vec!["tokens", "revoke", "--principal", "p", "--backend", "b"],
    ] {
        let out = switchboard(&args, &[]).await;
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            text(&out).contains("tokens live in the running gateway's memory"),
            "{}",
            text(&out)
        );
    }
}

/// Alice and Bob each have a token for `github`; Alice also one for `linear`. Each sees only
/// their own; Alice's DELETE removes her own github token and never Bob's; an anonymous
/// caller gets 401; the operator's CLI lists and revokes across principals.
#[tokio::test]
async fn callers_manage_their_own_tokens_and_operators_all() {
    let Some(redis) = Redis::start_or_skip("tokens_routes").await else {
        return;
    };
    let dir = Dir::new("tok-routes");
    let key = key_file(&dir, 0o600);
    let jwks = Jwks::serve(&["k1"]).await;
    let keys = dir.keys();
    let url = redis.url();
    let mut args = vec![
        "--session-store",
        &url,
        "--session-store-prefix",
        PREFIX,
        "--token-store-key-file",
        &key,
    ];
    let incoming = incoming(&jwks.url, &keys);
    args.extend(incoming.iter().map(String::as_str));
    let gw = TestGateway::start(&args).await;
    assert!(
        gw.startup
            .iter()
            .any(|l| l.starts_with("switchboard: token store in redis://")),
        "{:?}",
        gw.startup
    );
    let v = vault(&redis);
    v.put(&of("alice", "github"), &token("alice-gh-secret"))
        .await
        .unwrap();
    v.put(&of("alice", "linear"), &token("alice-li-secret"))
        .await
        .unwrap();
    v.put(&of("bob", "github"), &token("bob-gh-secret"))
        .await
        .unwrap();
    let (alice, bob) = (jwt("alice"), jwt("bob"));

    let (status, body) = get(&gw, "/oauth/tokens", Some(&alice)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let backends: Vec<&str> = body["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["backend"].as_str().unwrap())
        .collect();
    assert_eq!(backends, ["github", "linear"]);
    assert!(body["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["principal"] == principal_key(ISSUER, "alice")));
    assert!(!body.to_string().contains("secret"), "{body}");

    // No credential: admission refuses it as for /mcp.
    let (status, _) = get(&gw, "/oauth/tokens", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // An API key's holder has its own (empty) list.
    let (status, body) = get(&gw, "/oauth/tokens", Some(API_KEY)).await;
    assert_eq!(
        (status, body["tokens"].as_array().unwrap().len()),
        (StatusCode::OK, 0)
    );

    let delete = reqwest::Method::DELETE;
    let (status, body) = send(&gw, delete.clone(), "/oauth/tokens/github", Some(&alice)).await;
    assert_eq!(
        (status, body["removed"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{body}"
    );
    let (_, body) = send(&gw, delete.clone(), "/oauth/tokens/github", Some(&alice)).await;
    assert_eq!(body["removed"], false);
    assert!(v.get(&of("alice", "github")).await.unwrap().is_none());
    assert_eq!(
        v.get(&of("bob", "github"))
            .await
            .unwrap()
            .unwrap()
            .access_token,
        "bob-gh-secret"
    );
    assert!(v.get(&of("alice", "linear")).await.unwrap().is_some());
    let (_, body) = get(&gw, "/oauth/tokens", Some(&bob)).await;
    assert_eq!(body["tokens"][0]["backend"], "github");

    // The operator: every token, without secrets; revoke names the principal.
    let env = [("SWITCHBOARD_LOG", "warn")];
    let cli = [
        "tokens",
        "--session-store",
        &url,
        "--session-store-prefix",
        PREFIX,
        "--token-store-key-file",
        &key,
    ];
    let list = |more: &'static [&'static str]| {
        let mut a: Vec<&str> = cli.to_vec();
        a.extend_from_slice(more);
        a
    };
    let out = switchboard(&list(&["list", "--json"]), &env).await;
    assert!(out.status.success(), "{}", text(&out));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["tokens"].as_array().unwrap().len(), 2, "{listed}");
    assert!(!text(&out).contains("secret"), "{}", text(&out));
    let bob_key = principal_key(ISSUER, "bob");
    let mut revoke = list(&["revoke", "--backend", "github", "--principal"]);
    revoke.push(&bob_key);
    let out = switchboard(&revoke, &env).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(v.get(&of("bob", "github")).await.unwrap().is_none());
    let out = switchboard(&revoke, &env).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing left to revoke: {}",
        text(&out)
    );
    let out = switchboard(&list(&["list"]), &env).await;
    let shown = text(&out);
    assert!(
        shown.contains("\tlinear\t") && !shown.contains("\tgithub\t"),
        "{shown}"
    );

    // Nothing secret in what the gateway wrote.
    let logs = format!("{}\n{}", gw.startup.join("\n"), gw.stderr.lock());
    for secret in [
        "alice-gh-secret",
        "alice-li-secret",
        "bob-gh-secret",
        "refresh",
    ] {
        assert!(!logs.contains(secret), "{secret} in the gateway's output");
    }
}

#[tokio::test]
async fn an_anonymous_caller_has_no_tokens_to_manage() {
    let gw = TestGateway::start(&[]).await;
    let (status, body) = get(&gw, "/oauth/tokens", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("authenticate"),
        "{body}"
    );
    let (status, _) = send(&gw, reqwest::Method::DELETE, "/oauth/tokens/github", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
