//! The webhook against a real HTTP server in the test: allow, reject, replace, slow (closed
//! and open), bad JSON, down (the breaker), and every body signed.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{answer, audit_lines, call, gateway, texts, Dir, Mode, AWS};

const SECRET: &str = "hook-secret-0123456789";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    Allow,
    Reject,
    Replace,
    Slow,
    BadJson,
    /// `replace` with a result that carries a key (as the unredacted original might).
    ReplaceWithKey,
}

/// What the test server received: each body, and whether its signature verified.
#[derive(Debug, Default)]
struct Seen {
    bodies: Vec<Value>,
    signed: Vec<bool>,
}

struct Hook {
    url: String,
    behaviour: Arc<Mutex<Behaviour>>,
    seen: Arc<Mutex<Seen>>,
    /// The secret signatures are verified with (`SECRET` until a test rotates it).
    secret: Arc<Mutex<String>>,
}

async fn hook_server() -> Hook {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/check", listener.local_addr().unwrap());
    let behaviour = Arc::new(Mutex::new(Behaviour::Allow));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let secret = Arc::new(Mutex::new(SECRET.to_owned()));
    let (b, s, k) = (behaviour.clone(), seen.clone(), secret.clone());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (b, s, k) = (b.clone(), s.clone(), k.clone());
            tokio::spawn(serve_one(conn, b, s, k));
        }
    });
    Hook {
        url,
        behaviour,
        seen,
        secret,
    }
}

async fn serve_one(
    mut conn: tokio::net::TcpStream,
    behaviour: Arc<Mutex<Behaviour>>,
    seen: Arc<Mutex<Seen>>,
    secret: Arc<Mutex<String>>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let Ok(n) = conn.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_owned))
    };
    let len: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let Ok(n) = conn.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = &buf[head_end..head_end + len];
    let key = secret.lock().clone();
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(body);
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let signed = header("x-switchboard-signature") == Some(format!("sha256={expected}"));
    let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let direction = value["direction"].as_str().unwrap_or_default().to_owned();
    {
        let mut s = seen.lock();
        s.bodies.push(value);
        s.signed.push(signed);
    }
    let mode = *behaviour.lock();
    let reply = match mode {
        Behaviour::Allow => json!({"action": "allow"}).to_string(),
        Behaviour::Reject => json!({"action": "reject", "message": "no"}).to_string(),
        Behaviour::Replace if direction == "request" => {
            json!({"action": "replace", "replacement": {"text": "swapped"}}).to_string()
        }
        Behaviour::Replace => json!({"action": "replace", "replacement":
            {"content": [{"type": "text", "text": "from the hook"}]}})
        .to_string(),
        Behaviour::Slow => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            json!({"action": "allow"}).to_string()
        }
        Behaviour::BadJson => "{not json".to_owned(),
        Behaviour::ReplaceWithKey => json!({"action": "replace", "replacement":
            {"content": [{"type": "text", "text": format!("key {}", super::AWS)}]}})
        .to_string(),
    };
    let out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        reply.len()
    );
    let _ = conn.write_all(out.as_bytes()).await;
}

fn rules(url: &str, failure: &str, secret: &str) -> String {
    format!(
        "guardrails:\n  - name: corp\n    tools: [echo]\n    webhook: {{url: \"{url}\", secretFile: {secret}, timeout: 500ms, failure: {failure}}}\n"
    )
}

fn refused_by_corp(m: &[Value]) -> bool {
    let err = &answer(m)["error"];
    err["code"] == -32602 && err["message"] == "Refused by guardrail \"corp\""
}

#[tokio::test]
async fn the_webhook_allows_rejects_replaces_and_fails_closed() {
    let hook = hook_server().await;
    let dir = Dir::new("hook-closed");
    let secret = dir.write("hook.key", &format!("{SECRET}\n"));
    let (gw, audit) = gateway(&dir, Mode::Run, &rules(&hook.url, "closed", &secret)).await;
    let s = gw.session().await;
    let echo = |t: &str| format!(r#"{{"text":"{t}"}}"#);

    // allow: the answer is the backend's; two signed POSTs with the documented body.
    let (_, m) = call(&gw, Some(&s), "echo", &echo("hi"), false).await;
    assert_eq!(texts(&answer(&m)["result"])[0], "hi");
    {
        let seen = hook.seen.lock();
        assert_eq!(seen.bodies.len(), 2, "{:?}", seen.bodies);
        assert!(seen.signed.iter().all(|s| *s), "every body is signed");
        let req = &seen.bodies[0];
        assert_eq!(req["guardrail"], "corp");
        assert_eq!(
            req["principal"],
            json!({"iss": "anonymous", "sub": "anonymous"})
        );
        assert_eq!(req["backend"], "default");
        assert_eq!(req["tool"], "echo");
        assert_eq!(req["era"], "legacy");
        assert_eq!(req["direction"], "request");
        assert_eq!(req["message"]["method"], "tools/call");
        assert_eq!(req["message"]["params"]["arguments"]["text"], "hi");
        assert_eq!(seen.bodies[1]["direction"], "response");
        assert_eq!(
            seen.bodies[1]["message"]["result"]["content"][0]["text"],
            "hi"
        );
    }
    // Modern: the same hook, era modern.
    let (_, m) = call(&gw, None, "echo", &echo("hey"), false).await;
    assert_eq!(texts(&answer(&m)["result"])[0], "hey");
    assert_eq!(hook.seen.lock().bodies[2]["era"], "modern");

    // reject.
    *hook.behaviour.lock() = Behaviour::Reject;
    let (_, m) = call(&gw, Some(&s), "echo", &echo("x"), false).await;
    assert!(refused_by_corp(&m), "{m:?}");

    // replace: the request's arguments, then the response's result.
    *hook.behaviour.lock() = Behaviour::Replace;
    let (_, m) = call(&gw, Some(&s), "echo", &echo("x"), false).await;
    assert_eq!(texts(&answer(&m)["result"]), ["from the hook"]);
    let n = hook.seen.lock().bodies.len();
    // The response the hook was shown is the backend's answer to the swapped arguments.
    assert_eq!(
        hook.seen.lock().bodies[n - 1]["message"]["result"]["content"][0]["text"],
        "swapped"
    );

    // slow (past the 500 ms timeout) and bad JSON: failure closed rejects.
    for b in [Behaviour::Slow, Behaviour::BadJson] {
        *hook.behaviour.lock() = b;
        let (_, m) = call(&gw, Some(&s), "echo", &echo("x"), false).await;
        assert!(refused_by_corp(&m), "{b:?}: {m:?}");
    }
    let (text, lines) = audit_lines(&audit, 6).await;
    assert!(
        lines.iter().any(|l| l["kind"] == "webhook_timeout"),
        "{text}"
    );
    assert!(lines.iter().any(|l| l["kind"] == "webhook_error"), "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l["action"] == "reject" && l["kind"] == "webhook"),
        "{text}"
    );
    assert!(!gw.stderr.lock().contains(SECRET));
}

#[tokio::test]
async fn a_slow_webhook_failing_open_allows() {
    let hook = hook_server().await;
    *hook.behaviour.lock() = Behaviour::Slow;
    let dir = Dir::new("hook-open");
    let secret = dir.write("hook.key", SECRET);
    let (gw, audit) = gateway(&dir, Mode::Run, &rules(&hook.url, "open", &secret)).await;
    let s = gw.session().await;
    let (_, m) = call(&gw, Some(&s), "echo", r#"{"text":"through"}"#, false).await;
    assert_eq!(texts(&answer(&m)["result"])[0], "through");
    let (text, lines) = audit_lines(&audit, 2).await;
    assert!(
        lines
            .iter()
            .all(|l| l["action"] == "warn" && l["kind"] == "webhook_timeout"),
        "{text}"
    );
}

#[tokio::test]
async fn a_webhook_that_is_down_opens_its_breaker() {
    // A port nobody listens on: connections are refused at once.
    let url = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/check", l.local_addr().unwrap())
    };
    let dir = Dir::new("hook-down");
    let secret = dir.write("hook.key", SECRET);
    let (gw, audit) = gateway(&dir, Mode::Run, &rules(&url, "closed", &secret)).await;
    let s = gw.session().await;
    for _ in 0..6 {
        let (_, m) = call(&gw, Some(&s), "echo", r#"{"text":"x"}"#, false).await;
        assert!(refused_by_corp(&m), "{m:?}");
    }
    let (text, lines) = audit_lines(&audit, 6).await;
    assert!(
        lines[..5]
            .iter()
            .all(|l| l["kind"] == "webhook_unavailable"),
        "{text}"
    );
    assert_eq!(lines[5]["kind"], "webhook_breaker_open", "{text}");
}

/// A hook's replacement is checked by the built-in rules as the original was: it cannot
/// bring back what they redact (the hook is shown the unredacted answer), nor what they
/// refuse.
#[tokio::test]
async fn a_webhook_replacement_cannot_undo_a_redaction() {
    let hook = hook_server().await;
    *hook.behaviour.lock() = Behaviour::ReplaceWithKey;
    // Redacted: the backend's answer had the key, and so has the hook's replacement; refused:
    // the backend's answer was clean, the replacement is not.
    for (action, tool, args, expected) in [
        (
            "redact",
            "leak",
            r#"{"kind":"secrets"}"#,
            "key [REDACTED:aws_access_key]",
        ),
        (
            "reject",
            "echo",
            r#"{"text":"hi"}"#,
            "Refused by guardrail \"secrets\"",
        ),
    ] {
        let dir = Dir::new(&format!("hook-rescan-{action}"));
        let secret = dir.write("hook.key", SECRET);
        let rules = format!(
            "guardrails:\n  - name: secrets\n    on: [response]\n    check: {{secrets: builtin, action: {action}}}\n  - name: corp\n    on: [response]\n    webhook: {{url: \"{}\", secretFile: {secret}, timeout: 2s}}\n",
            hook.url
        );
        let (gw, _) = gateway(&dir, Mode::Run, &rules).await;
        let s = gw.session().await;
        let (reply, m) = call(&gw, Some(&s), tool, args, false).await;
        assert_eq!(texts(&answer(&m)["result"]), [expected], "{}", reply.text);
        assert!(!reply.text.contains(AWS), "{}", reply.text);
    }
}

/// A backend's error answer goes to the webhooks as a result does: allowed, refused
/// (`-32603` naming the guardrail), and a replacement that is not an error object refused.
#[tokio::test]
async fn a_backend_error_goes_to_the_webhook() {
    let hook = hook_server().await;
    let dir = Dir::new("hook-error");
    let secret = dir.write("hook.key", SECRET);
    let rules = format!(
        "guardrails:\n  - name: corp\n    on: [response]\n    webhook: {{url: \"{}\", secretFile: {secret}, timeout: 2s}}\n",
        hook.url
    );
    let (gw, _) = gateway(&dir, Mode::Run, &rules).await;
    let s = gw.session().await;
    let read = json!({"jsonrpc":"2.0","id":3,"method":"resources/read",
        "params":{"uri": "file:///missing"}});
    let err = gw.post(Some(&s), &read).await.json();
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("missing"),
        "{err}"
    );
    {
        let seen = hook.seen.lock();
        let last = seen.bodies.last().expect("the hook was asked");
        assert_eq!(last["direction"], "response");
        assert_eq!(last["message"]["error"], err["error"]);
    }
    for b in [Behaviour::Reject, Behaviour::Replace] {
        *hook.behaviour.lock() = b;
        let v = gw.post(Some(&s), &read).await.json();
        assert_eq!(v["error"]["code"], -32603, "{b:?}: {v}");
        assert_eq!(
            v["error"]["message"], "Refused by guardrail \"corp\"",
            "{b:?}"
        );
    }
}

/// Task status on a listen comes from the caller's own `tasks/get`, checked as one: with a
/// webhook that rejects every answer, a task's direct `tasks/get` is refused, and a listen
/// asking for its status does not get it (the task is not acknowledged, so nothing of it is
/// sent), where a poll past the guardrails would have acknowledged it and sent its state.
#[tokio::test]
async fn task_status_on_a_listen_is_checked_by_the_webhook() {
    let hook = hook_server().await;
    *hook.behaviour.lock() = Behaviour::Reject;
    let dir = Dir::new("hook-watch");
    let secret = dir.write("hook.key", &format!("{SECRET}\n"));
    let (gw, _) = gateway(&dir, Mode::Run, &rules(&hook.url, "closed", &secret)).await;
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 30}});
    let created = crate::vmcp::modern(&gw, json!(1), "tools/call", call, &[]).await;
    let task = created.json()["result"]["taskId"].clone();
    assert!(
        task.as_str().is_some_and(|t| t.starts_with("sbt-")),
        "{}",
        created.text
    );
    let direct = crate::vmcp::modern(&gw, json!(2), "tasks/get", json!({"taskId": task}), &[]);
    let direct = direct.await;
    assert!(direct.text.contains("corp"), "refused: {}", direct.text);
    let listen = crate::vmcp::modern_listen_declaring(&gw, json!({"taskIds": [task]})).await;
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        listen.bytes_stream(),
    ));
    let ack = crate::modern::next_message(&mut events).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"], json!({}), "{ack}");
}

/// A webhook secret rotated in its `secretFile` signs the bodies from the next reload
/// (SIGHUP) on: the file's contents count as part of the guardrails. Before, the config file
/// was unchanged, so the reload kept the old secret until a restart.
#[tokio::test]
async fn a_rotated_webhook_secret_signs_from_the_next_reload() {
    const ROTATED: &str = "hook-secret-rotated-98765";
    let hook = hook_server().await;
    let dir = Dir::new("hook-rotate");
    let secret = dir.write("hook.key", &format!("{SECRET}\n"));
    let (gw, _) = gateway(&dir, Mode::Serve, &rules(&hook.url, "closed", &secret)).await;
    let s = gw.session().await;
    let (_, m) = call(&gw, Some(&s), "echo", r#"{"text":"before"}"#, false).await;
    assert_eq!(texts(&answer(&m)["result"])[0], "before");
    assert!(hook.seen.lock().signed.iter().all(|s| *s));

    *hook.secret.lock() = ROTATED.to_owned();
    std::fs::write(&secret, format!("{ROTATED}\n")).unwrap();
    crate::reload::hangup(&gw);
    let line = gw
        .wait_stdout(crate::reload::RELOADED, crate::reload::BOUND)
        .await;
    assert!(line.contains("guardrails replaced"), "{line}");
    let before = hook.seen.lock().bodies.len();
    let (_, m) = call(&gw, Some(&s), "echo", r#"{"text":"after"}"#, false).await;
    assert_eq!(texts(&answer(&m)["result"])[0], "after");
    let seen = hook.seen.lock();
    assert_eq!(seen.signed.len(), before + 2, "{:?}", seen.bodies);
    assert!(
        seen.signed[before..].iter().all(|s| *s),
        "signed with the old secret"
    );
    assert!(!gw.stderr.lock().contains(ROTATED));
}
