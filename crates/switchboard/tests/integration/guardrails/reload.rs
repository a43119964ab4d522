//! Guardrails are part of what `serve` reloads: a file that adds a rule has it check what
//! flows from then on: answers, and a backend's messages on their way to a client.

use serde_json::Value;

use super::{answer, call, Dir, AWS, REDACTING};
use crate::common::TestGateway;
use crate::reload::{rewrite, BOUND, RELOADED};

/// The first progress note's `message.note` of a `noisy` call (with a progress token) in
/// session `s`; asserts the call's answer came.
async fn progress_note(gw: &TestGateway, s: &str) -> Value {
    let (reply, m) = call(gw, Some(s), "noisy", r#"{"ask":false}"#, true).await;
    let done = m.iter().find(|v| v["id"] == 7);
    assert!(done.is_some(), "the answer: {}", reply.text);
    let progress = m.iter().find(|v| v["method"] == "notifications/progress");
    progress.unwrap_or_else(|| panic!("{}", reply.text))["params"]["message"]["note"].clone()
}

#[tokio::test]
async fn a_reload_that_adds_a_guardrail_checks_notifications_from_then_on() {
    let dir = Dir::new("reload-notes");
    let leaky = format!(
        "{}/tests/integration/backends/leaky.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let backends =
        format!("backends:\n  - name: leaky\n    command: python3\n    args: [{leaky}]\n");
    let config = dir.write("sb.yaml", &backends);
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.args(["serve", "--config", &config, "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    let s = gw.session().await;
    assert_eq!(
        progress_note(&gw, &s).await,
        format!("key {AWS}"),
        "no rule yet"
    );

    rewrite(
        std::path::Path::new(&config),
        &format!("{REDACTING}{backends}"),
    );
    gw.wait_stdout(RELOADED, BOUND).await;
    let note = progress_note(&gw, &s).await;
    assert_eq!(note, "key [REDACTED:aws_access_key]");
    // And answers: `leaky`'s result carries the key escaped and split.
    let (reply, _) = call(&gw, Some(&s), "leaky", "{}", false).await;
    assert!(
        reply.text.contains("[REDACTED:aws_access_key]"),
        "{}",
        reply.text
    );
    assert!(!reply.text.contains("KIAIOSF"), "{}", reply.text);
}

/// A webhook that allows everything, holding the first body it receives until `release`:
/// its URL, the signal that the held body arrived, and the release.
async fn holding_hook() -> (
    String,
    tokio::sync::oneshot::Receiver<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/check", listener.local_addr().unwrap());
    let (arrived, arrival) = tokio::sync::oneshot::channel();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut hold = Some((arrived, released));
        while let Ok((mut conn, _)) = listener.accept().await {
            // One body per connection (the gateway's client may keep it open): read the
            // head and the announced length.
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            let complete = |buf: &[u8]| {
                let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                (buf.len() >= end + len).then_some(())
            };
            while complete(&buf).is_none() {
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            if let Some((arrived, released)) = hold.take() {
                let _ = arrived.send(());
                let _ = released.await;
            }
            let reply = r#"{"action":"allow"}"#;
            let out = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
            let _ = conn.write_all(out.as_bytes()).await;
        }
    });
    (url, arrival, release)
}

/// A call checked before a reload that adds the backend serving its tool, with a guardrail
/// of that backend's own, and routed after it, never reaches that backend unchecked by that
/// guardrail: routing finds it served elsewhere than the guardrails judged (by every rule
/// then configured: the name was nobody's) under guardrails since replaced, and answers
/// "retry"; the retry is refused by the new backend's own rule. The gateway's webhook holds
/// the first check across the reload. Before, the call reached `leaky` with the key its
/// rule rejects (review, issue 33). (A tool override: the aggregating core, which reloads
/// backends.)
#[tokio::test]
async fn a_call_checked_before_a_reload_adding_its_backend_is_not_sent_there_unchecked() {
    checked_then_reloaded(false, false).await;
}

/// The same for a Modern call.
#[tokio::test]
async fn a_modern_call_checked_before_a_reload_adding_its_backend_is_not_sent_there_unchecked() {
    checked_then_reloaded(true, false).await;
}

/// The same when the backend serving the tool was there already, without rules of its own,
/// and the reload gives it one: the route reaches the item the guardrails judged, but they
/// are no longer the ones in force (a reload may equally replace the backend under the same
/// name). Before the review's fix, the call reached `x` with the key.
#[tokio::test]
async fn a_call_checked_before_a_reload_giving_its_backend_a_rule_is_not_sent_unchecked() {
    checked_then_reloaded(false, true).await;
}

/// A call of `leaky` with a key, held at the gateway's webhook across a reload that adds
/// backend `x` (`x_before`: gives the `x` already served) a rule rejecting keys: answered
/// "retry", and the retry is refused by that rule.
async fn checked_then_reloaded(modern: bool, x_before: bool) {
    let dir = Dir::new(match (modern, x_before) {
        (true, _) => "reload-judged-m",
        (false, false) => "reload-judged",
        (false, true) => "reload-judged-x",
    });
    let (url, arrival, release) = holding_hook().await;
    let secret = dir.write("hook.key", "hook-secret-0123456789");
    let hook = format!(
        "guardrails:\n  - name: corp\n    on: [request]\n    webhook: {{url: \"{url}\", secretFile: {secret}, timeout: 60s, failure: closed}}\n"
    );
    let fixture = format!(
        "backends:\n  - name: fixture\n    command: {}\n    args: [fixture]\n    tools:\n      overrides:\n        leak: {{title: Leak}}\n",
        env!("CARGO_BIN_EXE_switchboard")
    );
    let leaky = format!(
        "{}/tests/integration/backends/leaky.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let x = format!("  - name: x\n    command: python3\n    args: [{leaky}]\n");
    let before = match x_before {
        true => x.as_str(),
        false => "",
    };
    let config = dir.write("sb.yaml", &format!("{hook}{fixture}{before}"));
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.args(["serve", "--config", &config, "--port", "0"]);
    let gw = std::sync::Arc::new(TestGateway::start_command(cmd).await);
    let s = match modern {
        true => None,
        false => Some(gw.session().await),
    };

    let args = format!(r#"{{"key":"{AWS}"}}"#);
    let calling = {
        let (gw, s, args) = (gw.clone(), s.clone(), args.clone());
        tokio::spawn(async move { call(&gw, s.as_deref(), "leaky", &args, false).await })
    };
    tokio::time::timeout(BOUND, arrival)
        .await
        .expect("the call reached the webhook")
        .unwrap();
    let x = format!(
        "{x}    guardrails:\n      - name: x-secrets\n        on: [request]\n        check: {{secrets: builtin, action: reject}}\n"
    );
    rewrite(
        std::path::Path::new(&config),
        &format!("{hook}{fixture}{x}"),
    );
    gw.wait_stdout(RELOADED, BOUND).await;
    release.send(()).unwrap();
    let (reply, m) = calling.await.unwrap();
    let first = answer(&m);
    assert!(first.get("result").is_none(), "reached x: {}", reply.text);
    let message = first["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("retry"), "{}", reply.text);

    let (reply, m) = call(&gw, s.as_deref(), "leaky", &args, false).await;
    let err = &answer(&m)["error"];
    assert_eq!(
        err["message"], "Refused by guardrail \"x-secrets\"",
        "{}",
        reply.text
    );
}
