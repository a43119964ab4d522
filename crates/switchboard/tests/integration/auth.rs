//! The authenticated multi-user gateway: bearer credentials (static API keys, OAuth JWTs
//! checked against a JWKS served by the test), session ownership on every transport, Cedar
//! authorization with list filtering on both eras, the audit log, and rate limits.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{stats_as, tool_text, Listener, Reply, TestGateway};

const ALICE: &str = "alice-key-0123456789abcdef";
const BOB: &str = "bob-key-0123456789abcdef01";
const ADMIN: &str = "admin-key-0123456789abcdef";
const V: &str = "2026-07-28";

/// A fresh file with `contents` in a per-test temporary directory.
pub(crate) fn temp_file(name: &str, contents: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "switchboard-auth-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn keys_file() -> String {
    temp_file(
        "keys",
        &format!("# test keys\nalice:{ALICE}\nbob:{BOB}\nadmin:{ADMIN}\n"),
    )
    .to_string_lossy()
    .into_owned()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// POST as the holder of `token` (None: no credential).
pub(crate) async fn post_as(
    gw: &TestGateway,
    token: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> Reply {
    let auth = token.map(bearer);
    let mut extra = Vec::new();
    if let Some(a) = auth.as_deref() {
        extra.push(("authorization", a));
    }
    gw.post_raw(session, body.to_string(), &extra).await
}

/// Opens a Legacy session as the holder of `token`.
async fn session_as(gw: &TestGateway, token: &str) -> (String, Value) {
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}});
    let r = post_as(gw, Some(token), None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let done = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(
        post_as(gw, Some(token), Some(&sid), &done).await.status,
        StatusCode::ACCEPTED
    );
    (sid, r.json())
}

fn call(id: Value, name: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args}})
}

pub(crate) fn request(id: Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
}

/// A Modern request as the holder of `token`.
async fn modern_as(
    gw: &TestGateway,
    token: &str,
    id: Value,
    method: &str,
    mut params: Value,
) -> Reply {
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {}});
    let name = params
        .get("name")
        .or(params.get("uri"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let auth = bearer(token);
    let mut headers = vec![
        ("mcp-protocol-version", V),
        ("mcp-method", method),
        ("authorization", auth.as_str()),
    ];
    if let Some(n) = name.as_deref() {
        headers.push(("mcp-name", n));
    }
    let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
    gw.post_raw(None, body.to_string(), &headers).await
}

fn tool_names(v: &Value) -> Vec<String> {
    v["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A raw GET/DELETE on `/mcp` as the holder of `token`.
async fn raw(
    gw: &TestGateway,
    method: reqwest::Method,
    token: &str,
    session: &str,
    extra: &[(&str, &str)],
) -> (StatusCode, String) {
    let mut req = gw
        .http
        .request(method, &gw.url)
        .header("accept", "text/event-stream")
        .header("authorization", bearer(token))
        .header("mcp-session-id", session);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    // A 200 listen stream never ends: read only error bodies.
    let text = if status == StatusCode::OK {
        String::new()
    } else {
        r.text().await.unwrap()
    };
    (status, text)
}

/// Opens `GET /sse` as the holder of `token` and returns the session id and the stream.
async fn open_sse(
    gw: &TestGateway,
    token: &str,
) -> (
    String,
    std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>,
    >,
) {
    let r = gw
        .http
        .get(format!("{}/sse", gw.base()))
        .header("accept", "text/event-stream")
        .header("authorization", bearer(token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(r.bytes_stream()));
    let endpoint = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let e = events.next().await.unwrap().unwrap();
            if e.event.as_deref() == Some("endpoint") {
                return e.data.unwrap();
            }
        }
    })
    .await
    .unwrap();
    let sid = endpoint.split_once("session_id=").unwrap().1.to_owned();
    let events: std::pin::Pin<Box<dyn futures::Stream<Item = _> + Send>> = events;
    (sid, events)
}

/// A reply with `name` blanked out (status, content type, body): a hidden item's answer
/// compared with a missing one's.
fn blanked(r: &crate::common::Reply, name: &str) -> (StatusCode, String, String) {
    let content_type = r.headers["content-type"].to_str().unwrap().to_owned();
    (r.status, content_type, r.text.replace(name, "NAME"))
}

async fn post_messages(
    gw: &TestGateway,
    token: &str,
    sid: &str,
    body: &Value,
) -> (StatusCode, String) {
    let r = gw
        .http
        .post(format!("{}/messages?session_id={sid}", gw.base()))
        .header("content-type", "application/json")
        .header("authorization", bearer(token))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

#[tokio::test]
async fn credentials_are_required_and_the_metadata_is_served() {
    let keys = keys_file();
    let gw = TestGateway::start(&["--api-keys-file", &keys]).await;
    let ping = request(json!(1), "ping", json!({}));
    let expected = format!(
        "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource\"",
        gw.base()
    );
    // No credential: 401 on every MCP route, with the challenge naming the metadata.
    let r = post_as(&gw, None, None, &ping).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers["www-authenticate"], expected.as_str());
    let body = r.json();
    assert!(body.get("id").is_none(), "{body}");
    assert_eq!(body["error"]["code"], -32600);
    for (method, path) in [
        (reqwest::Method::GET, "/mcp"),
        (reqwest::Method::DELETE, "/mcp"),
        (reqwest::Method::GET, "/sse"),
        (reqwest::Method::POST, "/messages?session_id=x"),
    ] {
        let r = gw
            .http
            .request(method.clone(), format!("{}{path}", gw.base()))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{method} {path}");
        assert!(r.headers().contains_key("www-authenticate"));
    }
    // A wrong key, or another scheme: invalid_token.
    for auth in [bearer("not-a-key-0123456789"), format!("Basic {ALICE}")] {
        let r = gw
            .post_raw(None, ping.to_string(), &[("authorization", auth.as_str())])
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            r.headers["www-authenticate"],
            format!("{expected}, error=\"invalid_token\"").as_str()
        );
    }
    // The Origin check still comes first (403, not 401).
    let r = gw
        .post_raw(None, ping.to_string(), &[("origin", "http://evil.example")])
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // RFC 9728 documents, without credentials.
    for (path, resource) in [
        ("/.well-known/oauth-protected-resource", gw.base()),
        ("/.well-known/oauth-protected-resource/mcp", gw.url.clone()),
    ] {
        let r = gw
            .http
            .get(format!("{}{path}", gw.base()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let doc: Value = r.json().await.unwrap();
        assert_eq!(doc["resource"], resource.as_str());
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    // A valid key works; healthz needs nothing.
    assert_eq!(
        post_as(&gw, Some(ALICE), None, &ping).await.status,
        StatusCode::OK
    );
    let r = gw
        .http
        .get(format!("{}/healthz", gw.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_session_is_usable_only_by_its_principal() {
    let keys = keys_file();
    let gw = TestGateway::start(&["--api-keys-file", &keys]).await;
    let (alice, _) = session_as(&gw, ALICE).await;
    let (bob, _) = session_as(&gw, BOB).await;

    // Bob replaying Alice's session id gets exactly what a forged id gets.
    let forged = "0123456789abcdef0123456789abcdef";
    let echo = call(json!(7), "echo", json!({"text":"x"}));
    let stolen = post_as(&gw, Some(BOB), Some(&alice), &echo).await;
    let unknown = post_as(&gw, Some(BOB), Some(forged), &echo).await;
    assert_eq!(stolen.status, StatusCode::NOT_FOUND);
    assert_eq!(stolen.error_code(), -32001);
    assert_eq!(stolen.text, unknown.text, "no oracle");
    let note = json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"});
    assert_eq!(
        post_as(&gw, Some(BOB), Some(&alice), &note).await.status,
        StatusCode::NOT_FOUND
    );
    let get = raw(&gw, reqwest::Method::GET, BOB, &alice, &[]).await;
    assert_eq!(get.0, StatusCode::NOT_FOUND);
    let resume = raw(
        &gw,
        reqwest::Method::GET,
        BOB,
        &alice,
        &[("last-event-id", "listen-1")],
    )
    .await;
    assert_eq!(resume.0, StatusCode::NOT_FOUND);
    assert_eq!(
        get.1,
        raw(&gw, reqwest::Method::GET, BOB, forged, &[]).await.1
    );
    let delete = raw(&gw, reqwest::Method::DELETE, BOB, &alice, &[]).await;
    assert_eq!(delete.0, StatusCode::NOT_FOUND);

    // HTTP+SSE: Bob cannot post into Alice's stream.
    let (sse_alice, mut alice_events) = open_sse(&gw, ALICE).await;
    let init = request(
        json!(1),
        "initialize",
        json!({"protocolVersion":"2024-11-05",
        "capabilities":{},"clientInfo":{"name":"it","version":"0"}}),
    );
    let (status, _) = post_messages(&gw, BOB, &sse_alice, &init).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = post_messages(&gw, BOB, &sse_alice, &echo).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // …nor use an HTTP+SSE id on /mcp (or the other way round), even his own.
    assert_eq!(
        post_as(&gw, Some(ALICE), Some(&sse_alice), &echo)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let (status, _) = post_messages(&gw, ALICE, &sse_alice, &init).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let e = alice_events.next().await.unwrap().unwrap();
            if let Some(d) = e.data.filter(|d| !d.is_empty()) {
                return serde_json::from_str::<Value>(&d).unwrap();
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        answer["id"], 1,
        "Alice's own stream carries her answer: {answer}"
    );

    // Alice's session still works after all of that, and so does Bob's own.
    let r = post_as(
        &gw,
        Some(ALICE),
        Some(&alice),
        &call(json!(1), "echo", json!({"text":"mine"})),
    )
    .await;
    assert_eq!(tool_text(&r.json()), "mine");
    assert_eq!(
        raw(&gw, reqwest::Method::GET, ALICE, &alice, &[]).await.0,
        StatusCode::OK
    );
    assert_eq!(
        raw(&gw, reqwest::Method::DELETE, BOB, &bob, &[]).await.0,
        StatusCode::NO_CONTENT
    );
    let r = post_as(
        &gw,
        Some(ALICE),
        Some(&alice),
        &call(json!(2), "echo", json!({"text":"still"})),
    )
    .await;
    assert_eq!(tool_text(&r.json()), "still");
}

/// A JWKS endpoint on 127.0.0.1 whose key set the test can swap; counts fetches.
pub(crate) struct Jwks {
    pub(crate) url: String,
    body: Arc<Mutex<String>>,
    hits: Arc<AtomicUsize>,
}

impl Jwks {
    pub(crate) async fn serve(keys: &[&str]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        let body = Arc::new(Mutex::new(String::new()));
        let hits = Arc::new(AtomicUsize::new(0));
        let (b, h) = (body.clone(), hits.clone());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (b, h) = (b.clone(), h.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut read = 0;
                    while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf[read..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => read += n,
                        }
                    }
                    h.fetch_add(1, Ordering::SeqCst);
                    let body = b.lock().clone();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                });
            }
        });
        let jwks = Jwks { url, body, hits };
        jwks.set(keys);
        jwks
    }

    fn set(&self, keys: &[&str]) {
        let keys: Vec<Value> = keys
            .iter()
            .map(|k| serde_json::from_str(&fixture(&format!("{k}.jwk.json"))).unwrap())
            .collect();
        *self.body.lock() = json!({ "keys": keys }).to_string();
    }
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/integration/keys/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

pub(crate) const ISSUER: &str = "https://idp.switchboard.test";
pub(crate) const AUDIENCE: &str = "switchboard-test";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub(crate) fn claims(sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now(), "nbf": now() - 10,
        "exp": now() + 600, "groups": ["it"]})
}

pub(crate) fn sign(kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    let der = std::fs::read(format!(
        "{}/tests/integration/keys/{kid}.der",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let key = EncodingKey::from_rsa_der(&der);
    encode(&header, claims, &key).unwrap()
}

fn b64(bytes: &[u8]) -> String {
    use std::fmt::Write;
    // base64url without padding, enough for a test token.
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            let _ = out.write_char(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

async fn status_with(gw: &TestGateway, token: &str) -> StatusCode {
    post_as(gw, Some(token), None, &request(json!(1), "ping", json!({})))
        .await
        .status
}

#[tokio::test]
async fn jwts_are_validated_against_the_jwks_and_rotation_is_picked_up() {
    let jwks = Jwks::serve(&["k1"]).await;
    let audit = temp_file("audit.log", "");
    let audit_path = audit.to_string_lossy().into_owned();
    let gw = TestGateway::start_env(
        &[
            "--jwt-issuer",
            ISSUER,
            "--jwks-url",
            &jwks.url,
            "--jwt-audience",
            AUDIENCE,
            "--jwks-refresh-cooldown",
            "1",
            "--audit-log",
            &audit_path,
            "--audit-bodies",
        ],
        &[],
        &[("SWITCHBOARD_LOG", "debug")],
    )
    .await;
    let mut tokens = Vec::new();
    let good = sign("k1", &claims("alice"));
    tokens.push(good.clone());
    let (sid, _) = session_as(&gw, &good).await;
    let r = post_as(
        &gw,
        Some(&good),
        Some(&sid),
        &call(json!(1), "echo", json!({"text":"hi"})),
    )
    .await;
    assert_eq!(tool_text(&r.json()), "hi");

    // Another subject of the same issuer is another principal.
    let carol = sign("k1", &claims("carol"));
    tokens.push(carol.clone());
    let r = post_as(
        &gw,
        Some(&carol),
        Some(&sid),
        &call(json!(1), "echo", json!({})),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    let mut with = |f: &dyn Fn(&mut Value)| {
        let mut c = claims("alice");
        f(&mut c);
        let t = sign("k1", &c);
        tokens.push(t.clone());
        t
    };
    let expired = with(&|c| {
        c["exp"] = json!(now() - 3600);
        c["nbf"] = json!(now() - 7200);
    });
    let not_yet = with(&|c| c["nbf"] = json!(now() + 3600));
    let wrong_aud = with(&|c| c["aud"] = json!("someone-else"));
    let wrong_iss = with(&|c| c["iss"] = json!("https://evil.example"));
    let no_sub = with(&|c| {
        c.as_object_mut().unwrap().remove("sub");
    });
    let payload = good.split('.').nth(1).unwrap().to_owned();
    let alg_none = format!("{}.{payload}.", b64(br#"{"alg":"none","typ":"JWT"}"#));
    // Algorithm confusion: HS256 keyed with the public key the gateway holds.
    let hs256 = encode(
        &Header {
            kid: Some("k1".into()),
            ..Header::new(Algorithm::HS256)
        },
        &claims("alice"),
        &EncodingKey::from_secret(fixture("k1.jwk.json").as_bytes()),
    )
    .unwrap();
    let mut tampered = good.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let mut forged_claims = good.split('.').map(str::to_owned).collect::<Vec<_>>();
    forged_claims[1] = b64(claims("mallory").to_string().as_bytes());
    let swapped = forged_claims.join(".");
    let unknown_kid = sign("k2", &claims("alice"));
    for (what, token) in [
        ("expired", &expired),
        ("not yet valid", &not_yet),
        ("wrong audience", &wrong_aud),
        ("wrong issuer", &wrong_iss),
        ("no subject", &no_sub),
        ("alg none", &alg_none),
        ("HS256 confusion", &hs256),
        ("tampered signature", &tampered),
        ("swapped claims", &swapped),
        ("unknown kid", &unknown_kid),
        ("garbage", &"a.b.c".to_owned()),
    ] {
        tokens.push(token.clone());
        assert_eq!(
            status_with(&gw, token).await,
            StatusCode::UNAUTHORIZED,
            "{what}"
        );
    }
    // Unknown kids refetch the key set at most once per cooldown.
    let before = jwks.hits.load(Ordering::SeqCst);
    for _ in 0..5 {
        assert_eq!(
            status_with(&gw, &unknown_kid).await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert!(
        jwks.hits.load(Ordering::SeqCst) - before <= 1,
        "JWKS hammered"
    );

    // Rotation: the issuer now signs with k2 only.
    jwks.set(&["k2"]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let rotated = sign("k2", &claims("alice"));
    tokens.push(rotated.clone());
    assert_eq!(status_with(&gw, &rotated).await, StatusCode::OK);
    // Same issuer and subject, new key: still Alice, still her session.
    let r = post_as(
        &gw,
        Some(&rotated),
        Some(&sid),
        &call(json!(2), "echo", json!({"text":"again"})),
    )
    .await;
    assert_eq!(tool_text(&r.json()), "again");

    // No token, valid or not, ever reaches a log line or the audit log (bodies included).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let logs = gw.stderr.lock().clone();
    assert!(
        logs.contains("bearer credential rejected"),
        "debug logs were captured"
    );
    let audit_text = std::fs::read_to_string(&audit).unwrap();
    assert!(audit_text.contains("\"sub\":\"alice\""), "{audit_text}");
    for t in &tokens {
        let signature = t.rsplit('.').next().unwrap();
        for text in [&logs, &audit_text] {
            assert!(!text.contains(t.as_str()), "a token leaked");
            if signature.len() > 16 {
                assert!(!text.contains(signature), "a token signature leaked");
            }
        }
    }
}

const POLICY: &str = r#"
permit(principal == ApiKey::"admin", action, resource);
permit(principal == ApiKey::"alice", action in [Action::"list_tools", Action::"list_prompts"], resource);
permit(principal == ApiKey::"alice", action == Action::"call_tool", resource == Tool::"echo");
"#;

/// Every complete line of the audit log so far (one the writer thread is still writing is
/// left for the next read).
fn audit_lines(path: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits (bounded) for the audit writer thread to write a line `want` accepts; returns it.
async fn audited(path: &PathBuf, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines = audit_lines(path);
        if let Some(line) = lines.iter().find(|l| want(l)) {
            return line.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no audit line for {what} in {lines:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The audit log's name for a session: the first 8 characters of its id and an ellipsis.
fn label(sid: &str) -> String {
    format!("{}…", &sid[..8])
}

#[tokio::test]
async fn a_cedar_policy_filters_lists_and_denies_calls_on_both_eras() {
    let keys = keys_file();
    let policy = temp_file("policy.cedar", POLICY);
    let audit = temp_file("audit.log", "");
    let gw = TestGateway::start(&[
        "--api-keys-file",
        &keys,
        "--policy",
        policy.to_str().unwrap(),
        "--audit-log",
        audit.to_str().unwrap(),
    ])
    .await;
    let (admin, _) = session_as(&gw, ADMIN).await;
    let (alice, init) = session_as(&gw, ALICE).await;
    // Capabilities she cannot list are not advertised.
    let caps = &init["result"]["capabilities"];
    assert!(
        caps.get("tools").is_some() && caps.get("resources").is_none(),
        "{caps}"
    );

    // Legacy: only the permitted tool is listed; anything else is 403.
    let list = request(json!(1), "tools/list", json!({}));
    assert_eq!(
        tool_names(&post_as(&gw, Some(ALICE), Some(&alice), &list).await.json()),
        ["echo"]
    );
    assert!(tool_names(&post_as(&gw, Some(ADMIN), Some(&admin), &list).await.json()).len() > 5);
    let r = post_as(
        &gw,
        Some(ALICE),
        Some(&alice),
        &call(json!("x"), "add", json!({"a":1,"b":2})),
    )
    .await;
    // A tool she may not see is answered as a missing one (HTTP 200, -32602), not 403.
    assert_eq!(r.status, StatusCode::OK);
    let err = r.json();
    assert_eq!(err["id"], "x");
    assert_eq!(err["error"]["code"], -32602);
    // A tool that does not exist looks exactly the same.
    let missing = post_as(
        &gw,
        Some(ALICE),
        Some(&alice),
        &call(json!("x"), "no_such_tool", json!({})),
    )
    .await;
    assert_eq!(blanked(&missing, "no_such_tool"), blanked(&r, "add"));
    let ok = post_as(
        &gw,
        Some(ALICE),
        Some(&alice),
        &call(json!(2), "echo", json!({"text":"hi"})),
    )
    .await;
    assert_eq!(tool_text(&ok.json()), "hi");
    // As a stream (progress token), the same: answered as a missing tool is, on the stream.
    let streamed = |name: &str| {
        let mut c = call(json!(3), name, json!({"a":1,"b":2}));
        c["params"]["_meta"] = json!({"progressToken": "p"});
        c
    };
    let hidden = post_as(&gw, Some(ALICE), Some(&alice), &streamed("add")).await;
    let missing = post_as(&gw, Some(ALICE), Some(&alice), &streamed("no_such_tool")).await;
    assert_eq!(hidden.error_code(), -32602, "{}", hidden.text);
    assert_eq!(blanked(&missing, "no_such_tool"), blanked(&hidden, "add"));
    // Prompts she may list but not get: an empty list. Resources: not even listable.
    let prompts = post_as(
        &gw,
        Some(ALICE),
        Some(&alice),
        &request(json!(4), "prompts/list", json!({})),
    )
    .await;
    assert_eq!(prompts.json()["result"]["prompts"], json!([]));
    let resources = post_as(
        &gw,
        Some(ALICE),
        Some(&alice),
        &request(json!(5), "resources/list", json!({})),
    )
    .await;
    assert_eq!(resources.status, StatusCode::FORBIDDEN);
    // A denied subscription never enters the routing table (to a resource she may not read:
    // answered as a missing resource); unknown methods are denied.
    let before = stats_as(&gw, Some(ADMIN)).await["tableEntries"].clone();
    let sub = |uri: &str| request(json!(6), "resources/subscribe", json!({ "uri": uri }));
    let hidden = post_as(&gw, Some(ALICE), Some(&alice), &sub("test://watched")).await;
    let missing = post_as(&gw, Some(ALICE), Some(&alice), &sub("test://nothing")).await;
    assert_eq!(hidden.error_code(), -32602, "{}", hidden.text);
    assert_eq!(
        blanked(&hidden, "test://watched"),
        blanked(&missing, "test://nothing")
    );
    assert_eq!(stats_as(&gw, Some(ADMIN)).await["tableEntries"], before);
    let odd = request(json!(7), "made/up", json!({}));
    assert_eq!(
        post_as(&gw, Some(ALICE), Some(&alice), &odd).await.status,
        StatusCode::FORBIDDEN
    );

    // Modern: the same policy.
    let r = modern_as(&gw, ALICE, json!(10), "tools/list", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_names(&r.json()), ["echo"]);
    let r = modern_as(
        &gw,
        ALICE,
        json!(11),
        "tools/call",
        json!({"name":"add","arguments":{"a":1,"b":2}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.error_code(), -32602);
    let r = modern_as(
        &gw,
        ALICE,
        json!(12),
        "tools/call",
        json!({"name":"echo","arguments":{"text":"m"}}),
    )
    .await;
    assert_eq!(tool_text(&r.json()), "m");
    let r = modern_as(&gw, ALICE, json!(13), "server/discover", json!({})).await;
    let caps = &r.json()["result"]["capabilities"];
    assert!(
        caps.get("tools").is_some() && caps.get("resources").is_none(),
        "{caps}"
    );
    let r = modern_as(&gw, ADMIN, json!(14), "server/discover", json!({})).await;
    assert!(r.json()["result"]["capabilities"]
        .get("resources")
        .is_some());

    // HTTP+SSE: accepted, and answered on the stream as a missing tool is.
    let (sse, mut events) = open_sse(&gw, ALICE).await;
    for (id, name) in [(20, "add"), (21, "no_such_tool")] {
        let body = call(json!(id), name, json!({"a":1,"b":2}));
        let (status, _) = post_messages(&gw, ALICE, &sse, &body).await;
        assert_eq!(status, StatusCode::ACCEPTED);
    }
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 2 {
        let e = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an answer on the stream")
            .unwrap()
            .unwrap();
        let Some(data) = e.data else { continue };
        let v: Value = serde_json::from_str(&data).unwrap();
        if let Some(id) = v["id"].as_i64() {
            answers.insert(id, v);
        }
    }
    assert_eq!(answers[&20]["error"]["code"], -32602, "{answers:?}");
    assert_eq!(
        answers[&20]["error"].to_string().replace("add", "NAME"),
        answers[&21]["error"]
            .to_string()
            .replace("no_such_tool", "NAME")
    );

    // list_changed reaches Alice; her re-list stays filtered.
    let mut listener = Listener::open_with(&gw, &alice, &[("authorization", &bearer(ALICE))]).await;
    let r = post_as(
        &gw,
        Some(ADMIN),
        Some(&admin),
        &call(json!(30), "trigger", json!({"kind":"tools_list_changed"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let e = listener.next().await;
    assert_eq!(e.data["method"], "notifications/tools/list_changed");
    let relist = post_as(&gw, Some(ALICE), Some(&alice), &list).await;
    assert_eq!(tool_names(&relist.json()), ["echo"]);

    // An admin call the backend fails (unknown tool): an error outcome.
    let r = post_as(
        &gw,
        Some(ADMIN),
        Some(&admin),
        &call(json!(40), "no_such_tool", json!({})),
    )
    .await;
    assert!(r.json().get("error").is_some(), "{}", r.text);

    // The audit log has one line per operation: allowed, denied and failed calls included.
    let mut lines = Vec::new();
    for _ in 0..50 {
        lines = audit_lines(&audit);
        if lines.iter().any(|l| l["id"] == "40") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let find = |outcome: &str, tool: &str| {
        lines.iter().find(|l| {
            l["method"] == "tools/call" && l["outcome"] == outcome && l["target"]["tool"] == tool
        })
    };
    let allowed = find("allowed", "echo").expect("allowed call audited");
    assert_eq!(allowed["principal"], json!({"iss":"api-key","sub":"alice"}));
    assert!(
        allowed["session"].as_str().unwrap().len() < 12,
        "session ids are shortened"
    );
    assert!(allowed["latencyMs"].is_number() && allowed["time"].is_string());
    assert!(
        allowed.get("request").is_none(),
        "bodies only with --audit-bodies"
    );
    let denied = find("denied", "add").expect("denied call audited");
    assert_eq!(denied["reason"], "policy");
    assert!(
        find("error", "no_such_tool").is_some(),
        "failed call audited"
    );
    assert!(lines
        .iter()
        .any(|l| l["era"] == "modern" && l["session"] == "stateless" && l["outcome"] == "allowed"));
    let text = std::fs::read_to_string(&audit).unwrap();
    let logs = gw.stderr.lock().clone();
    for key in [ALICE, BOB, ADMIN] {
        assert!(!text.contains(key) && !logs.contains(key), "a key leaked");
    }
}

#[tokio::test]
async fn session_lifecycle_and_refused_credentials_are_audited() {
    let keys = keys_file();
    let audit = temp_file("audit.log", "");
    let gw = TestGateway::start(&[
        "--api-keys-file",
        &keys,
        "--audit-log",
        audit.to_str().unwrap(),
        "--max-sessions",
        "2",
        // Alice fills the table (the default share would stop her at one).
        "--max-sessions-per-principal",
        "2",
    ])
    .await;
    // Client-chosen text that would break a hand-built line, and longer than is kept.
    let client_name = format!("probe\"}},\"outcome\":\"forged\n{}", "x".repeat(400));
    let init = json!({"jsonrpc":"2.0","id":"init-1","method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":client_name,"version":"7.1"}}});
    let r = post_as(&gw, Some(ALICE), None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();

    // Who opened which session, at which version, with what client.
    let opened = audited(&audit, "Alice's initialize", |l| {
        l["method"] == "initialize"
    })
    .await;
    assert_eq!(opened["principal"], json!({"iss":"api-key","sub":"alice"}));
    assert_eq!(opened["session"], label(&sid));
    assert_eq!(
        (&opened["outcome"], &opened["era"], &opened["id"]),
        (&json!("allowed"), &json!("legacy"), &json!("\"init-1\""))
    );
    assert_eq!(opened["protocolVersion"], "2025-06-18");
    assert_eq!(opened["client"]["version"], "7.1");
    let kept = opened["client"]["name"].as_str().unwrap();
    assert_eq!(
        (kept.len(), opened["clientTruncated"].clone()),
        (256, json!(true))
    );
    assert!(client_name.starts_with(kept));

    // An HTTP+SSE session is opened by its stream and initialized on it.
    let (sse, events) = open_sse(&gw, ALICE).await;
    let (status, _) = post_messages(&gw, ALICE, &sse, &init).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let sse_init = audited(&audit, "the HTTP+SSE initialize", |l| {
        l["method"] == "initialize" && l["session"] == label(&sse)
    })
    .await;
    assert_eq!(sse_init["outcome"], "allowed");
    // A refused initialize (the table is full) is audited with its reason.
    let r = post_as(&gw, Some(BOB), None, &init).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    let refused = audited(&audit, "Bob's refused initialize", |l| {
        l["method"] == "initialize" && l["principal"]["sub"] == "bob"
    })
    .await;
    assert_eq!(
        (&refused["outcome"], &refused["reason"], &refused["session"]),
        (
            &json!("error"),
            &json!("too many sessions (limit 2)"),
            &json!("stateless")
        )
    );
    // Closing the stream ends that session.
    drop(events);
    let closed = audited(&audit, "the HTTP+SSE session's end", |l| {
        l["event"] == "session_end" && l["session"] == label(&sse)
    })
    .await;
    assert_eq!(
        (&closed["reason"], &closed["outcome"]),
        (&json!("stream_closed"), &json!("ended"))
    );

    // 401s: no credential; a wrong key (on /mcp, and on /messages naming a real session).
    const WRONG: &str = "wrong-key-SECRET-0123456789abcdef";
    let ping = request(json!(1), "ping", json!({}));
    assert_eq!(
        post_as(&gw, None, None, &ping).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post_as(&gw, Some(WRONG), Some(&sid), &ping).await.status,
        StatusCode::UNAUTHORIZED
    );
    let (status, _) = post_messages(&gw, WRONG, &sid, &ping).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // DELETE ends Alice's session: the last line, so once it is there every line before it is.
    let (status, _) = raw(&gw, reqwest::Method::DELETE, ALICE, &sid, &[]).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let ended = audited(&audit, "the DELETE", |l| {
        l["event"] == "session_end" && l["session"] == label(&sid)
    })
    .await;
    assert_eq!(ended["principal"], json!({"iss":"api-key","sub":"alice"}));
    assert_eq!(
        (&ended["reason"], &ended["outcome"]),
        (&json!("deleted"), &json!("ended"))
    );

    let lines = audit_lines(&audit);
    let refused: Vec<&Value> = lines
        .iter()
        .filter(|l| l["outcome"] == "unauthenticated")
        .collect();
    assert_eq!(refused.len(), 3, "{refused:#?}");
    for l in &refused {
        assert_eq!(l["event"], "authentication");
        assert!(l.get("principal").is_none(), "nobody was authenticated");
    }
    assert_eq!(
        (
            &refused[0]["reason"],
            &refused[0]["httpMethod"],
            &refused[0]["path"]
        ),
        (&json!("missing_credential"), &json!("POST"), &json!("/mcp"))
    );
    assert!(refused[0].get("detail").is_none());
    for (l, path) in [(refused[1], "/mcp"), (refused[2], "/messages")] {
        assert_eq!(
            (&l["reason"], &l["detail"], &l["path"]),
            (
                &json!("invalid_credential"),
                &json!("unknown API key"),
                &json!(path)
            )
        );
    }
    // Every line is one JSON object (the client's text did not break out), and nothing
    // secret is in the file: no key, no header, no raw session id (the /messages query).
    assert!(lines.iter().all(|l| l["outcome"] != "forged"));
    let text = std::fs::read_to_string(&audit).unwrap();
    for secret in [WRONG, "SECRET", ALICE, BOB, &sid, &sse] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
    let lower = text.to_ascii_lowercase();
    assert!(
        !lower.contains("authorization") && !lower.contains("bearer"),
        "{text}"
    );
}

#[tokio::test]
async fn per_session_initialize_and_expiry_are_audited() {
    let keys = keys_file();
    let audit = temp_file("audit.log", "");
    let gw = TestGateway::start(&[
        "--isolation",
        "per-session",
        "--api-keys-file",
        &keys,
        "--audit-log",
        audit.to_str().unwrap(),
        "--session-ttl",
        "0.5",
    ])
    .await;
    let (sid, init) = session_as(&gw, ALICE).await;
    let opened = audited(&audit, "the per-session initialize", |l| {
        l["method"] == "initialize"
    })
    .await;
    assert_eq!(opened["principal"], json!({"iss":"api-key","sub":"alice"}));
    assert_eq!(opened["session"], label(&sid));
    assert_eq!(opened["outcome"], "allowed");
    // The version the session's own backend answered with.
    assert_eq!(opened["protocolVersion"], init["result"]["protocolVersion"]);
    assert_eq!(opened["client"], json!({"name":"it","version":"0"}));
    // Left idle, it expires.
    let ended = audited(&audit, "the expiry", |l| {
        l["event"] == "session_end" && l["session"] == label(&sid)
    })
    .await;
    assert_eq!(
        (&ended["reason"], &ended["principal"]["sub"]),
        (&json!("expired"), &json!("alice"))
    );
}

#[tokio::test]
async fn rate_limits_apply_per_principal_and_per_tool() {
    let keys = keys_file();
    let gw = TestGateway::start(&[
        "--api-keys-file",
        &keys,
        "--tool-rate-limit",
        "echo=2/h",
        "--rate-limit",
        "8/h",
    ])
    .await;
    let (alice, _) = session_as(&gw, ALICE).await;
    for i in 0..2 {
        let r = post_as(
            &gw,
            Some(ALICE),
            Some(&alice),
            &call(json!(i), "echo", json!({"text":"x"})),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
    }
    let r = post_as(
        &gw,
        Some(ALICE),
        Some(&alice),
        &call(json!(9), "echo", json!({})),
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    let v = r.json();
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (json!(9), json!(429))
    );
    let retry = v["error"]["data"]["retryAfterSeconds"].as_u64().unwrap();
    assert!(retry > 60, "{retry}");
    assert_eq!(r.headers["retry-after"], retry.to_string().as_str());
    // Modern: the same bucket.
    let r = modern_as(
        &gw,
        ALICE,
        json!(10),
        "tools/call",
        json!({"name":"echo","arguments":{}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    // Other tools are limited only by the principal's own budget: 8, of which the two
    // admitted echo calls used 2 (refused requests take no token).
    let mut statuses = Vec::new();
    for i in 0..7 {
        let r = post_as(
            &gw,
            Some(ALICE),
            Some(&alice),
            &call(json!(100 + i), "add", json!({"a":1,"b":2})),
        )
        .await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 200, 429],
        "{statuses:?}"
    );
    // Bob has his own buckets.
    let (bob, _) = session_as(&gw, BOB).await;
    let r = post_as(
        &gw,
        Some(BOB),
        Some(&bob),
        &call(json!(1), "echo", json!({"text":"b"})),
    )
    .await;
    assert_eq!(tool_text(&r.json()), "b");
}

#[tokio::test]
async fn anonymous_callers_are_refused_on_non_loopback_binds() {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["run", "--host", "0.0.0.0", "--port", "0"])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("exits at once")
    .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-anonymous-non-loopback"));
}

/// One principal may hold at most `--max-sessions-per-principal` sessions: beyond that its
/// `initialize` gets 429 with a JSON-RPC error echoing the id and no session, other principals
/// are unaffected, and ending a session gives its place back.
#[tokio::test]
async fn one_principal_cannot_take_every_session() {
    let keys = keys_file();
    let gw = TestGateway::start(&[
        "--api-keys-file",
        &keys,
        "--max-sessions-per-principal",
        "2",
    ])
    .await;
    let (first, _) = session_as(&gw, ALICE).await;
    let _second = session_as(&gw, ALICE).await;
    let init = json!({"jsonrpc":"2.0","id":"third","method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}});
    let r = post_as(&gw, Some(ALICE), None, &init).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert!(r.headers.get("mcp-session-id").is_none());
    let body = r.json();
    assert_eq!(body["id"], "third");
    assert!(body["error"]["code"].is_i64(), "{body}");
    let _bob = session_as(&gw, BOB).await;
    let bearer_alice = bearer(ALICE);
    let deleted = gw
        .http
        .delete(&gw.url)
        .header("authorization", bearer_alice.as_str())
        .header("mcp-session-id", first.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let _again = session_as(&gw, ALICE).await;
}

/// With authentication on and no `--max-sessions-per-principal`, one principal holds at most
/// an eighth of the session table: before, none was set by default, and one principal could
/// take every session (review MEDIUM: bob got 503 for the session TTL).
#[tokio::test]
async fn with_authentication_a_principal_holds_an_eighth_of_the_sessions_by_default() {
    let keys = keys_file();
    let gw = TestGateway::start(&["--api-keys-file", &keys, "--max-sessions", "16"]).await;
    let _alice = (session_as(&gw, ALICE).await, session_as(&gw, ALICE).await);
    let init = json!({"jsonrpc":"2.0","id":"third","method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}});
    let r = post_as(&gw, Some(ALICE), None, &init).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    let _bob = session_as(&gw, BOB).await;
}

/// `switchboard_policy_evaluations_total{outcome}` as alice reads it.
async fn evaluations(gw: &TestGateway, outcome: &str) -> f64 {
    let metric = "switchboard_policy_evaluations_total";
    crate::replicas::client::counter_as(gw, Some(ALICE), metric, ("outcome", outcome)).await
}

/// A request answered as JSON is decided once, on the request path (its denial the same 403
/// the early gate gave); only a streamed answer is decided early too.
#[tokio::test]
async fn the_policy_is_evaluated_once_per_json_request_on_both_eras() {
    let keys = keys_file();
    let policy = temp_file("policy.cedar", POLICY);
    let gw = TestGateway::start(&[
        "--api-keys-file",
        &keys,
        "--policy",
        policy.to_str().unwrap(),
    ])
    .await;
    let (alice, _) = session_as(&gw, ALICE).await;
    let (allow0, deny0) = (
        evaluations(&gw, "allow").await,
        evaluations(&gw, "deny").await,
    );
    for i in 0..5 {
        let echo = call(json!(i), "echo", json!({"text": format!("l{i}")}));
        let ok = post_as(&gw, Some(ALICE), Some(&alice), &echo).await;
        assert_eq!(tool_text(&ok.json()), format!("l{i}"));
        let params = json!({"name": "echo", "arguments": {"text": format!("m{i}")}});
        let ok = modern_as(&gw, ALICE, json!(i), "tools/call", params).await;
        assert_eq!(tool_text(&ok.json()), format!("m{i}"));
    }
    assert_eq!(
        evaluations(&gw, "allow").await - allow0,
        10.0,
        "one per request"
    );
    let add = call(json!("x"), "add", json!({"a": 1, "b": 2}));
    let denied = post_as(&gw, Some(ALICE), Some(&alice), &add).await;
    assert_eq!(
        (denied.status, denied.json()["error"]["code"].clone()),
        (StatusCode::OK, json!(-32602)),
        "a hidden tool is a missing one"
    );
    let denied = modern_as(&gw, ALICE, json!("y"), "resources/list", json!({})).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
    assert_eq!(
        evaluations(&gw, "deny").await - deny0,
        2.0,
        "one per denied request"
    );
    // A client whose Accept prefers a stream is still denied with a plain 403, not an error
    // event on a 200 stream (a method she may not use: 403 is kept for those).
    let meta = json!({"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": "z", "method": "resources/list",
        "params": {"_meta": meta}});
    let auth = bearer(ALICE);
    let headers = [
        ("accept", "application/json;q=0.1, text/event-stream"),
        ("mcp-protocol-version", V),
        ("mcp-method", "resources/list"),
        ("authorization", auth.as_str()),
    ];
    let denied = gw.post_raw(None, body.to_string(), &headers).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{}", denied.text);
    assert_eq!(denied.json()["error"]["code"], 403);
    // Streamed (a progress token): decided before the stream opens, and on the request path.
    let allow1 = evaluations(&gw, "allow").await;
    let mut streamed = call(json!(9), "echo", json!({"text": "s"}));
    streamed["params"]["_meta"] = json!({"progressToken": "p"});
    let ok = post_as(&gw, Some(ALICE), Some(&alice), &streamed).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(evaluations(&gw, "allow").await - allow1, 2.0);
}
