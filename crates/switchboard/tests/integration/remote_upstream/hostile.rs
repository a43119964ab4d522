//! Remotes that misbehave (hand-written on raw sockets, `raw`): every client request still gets
//! one clear, bounded answer, and the gateway keeps serving. Also what the gateway sends them:
//! its configured outgoing headers, never the client's own credentials.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::raw::{Fault, RawRemote, HOSTILE_CLIENT};
use super::{assert_failure, call, gateway, keys_file, open_session, post_as, Failure, ALICE};
use crate::common::TestGateway;

/// Fails the test instead of hanging it.
const AT_MOST: Duration = Duration::from_secs(30);

/// Streamable HTTP named explicitly: autodetection would try HTTP+SSE on a 4xx, which these
/// servers do not speak.
async fn gateway_for(remote: &RawRemote, args: &[&str]) -> TestGateway {
    let mut all = vec!["--transport", "streamable"];
    all.extend_from_slice(args);
    gateway(&remote.url, &all).await
}

#[tokio::test]
async fn an_html_answer_to_initialize_is_a_clear_error_and_the_gateway_keeps_serving() {
    let remote = RawRemote::start(Fault::HtmlToClientInitialize).await;
    let gw = gateway_for(&remote, &[]).await;
    let init = json!({"jsonrpc": "2.0", "id": "init-1", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": HOSTILE_CLIENT, "version": "0"}}});
    let r = tokio::time::timeout(AT_MOST, gw.post(None, &init))
        .await
        .expect("initialize answered with HTML by the remote was never answered");
    assert_failure(&r, Failure::BadGateway, json!("init-1"));
    assert!(
        r.headers.get("mcp-session-id").is_none(),
        "no session from a failed handshake"
    );
    assert!(
        !r.text.contains("Please sign in"),
        "the remote's page is not relayed: {}",
        r.text
    );
    // Another client's handshake (not answered with HTML) works on the same gateway.
    let sid = open_session(&gw, None, json!({})).await;
    let r = gw
        .post(Some(&sid), &call(json!(1), "work", json!({})))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn a_stream_that_never_answers_is_cut_by_the_request_timeout() {
    let remote = RawRemote::start(Fault::EndlessStreamForCalls).await;
    let gw = gateway_for(&remote, &["--request-timeout", "1"]).await;
    let sid = open_session(&gw, None, json!({})).await;
    let started = Instant::now();
    let r = tokio::time::timeout(
        AT_MOST,
        gw.post(Some(&sid), &call(json!(5), "work", json!({}))),
    )
    .await
    .expect("a call on an endless stream was never answered");
    let took = started.elapsed();
    assert_failure(&r, Failure::Timeout, json!(5));
    assert!(
        took < Duration::from_secs(5),
        "504 only after {took:?} with a 1 s timeout"
    );
    // The gateway lets go of the stream it gave up on (it would otherwise run for ever).
    let mut closed = remote.endless_closed.clone();
    tokio::time::timeout(Duration::from_secs(5), closed.wait_for(|n| *n >= 1))
        .await
        .expect("the gateway kept reading the endless stream after its 504")
        .unwrap();
    let cancelled = remote
        .seen
        .lock()
        .iter()
        .any(|s| s.body["method"] == "notifications/cancelled");
    eprintln!(
        "endless stream: 504 after {took:?}; notifications/cancelled sent upstream: {cancelled}"
    );
    // The session is still usable.
    let r = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn an_answer_over_the_size_bound_is_a_clear_bad_gateway() {
    let remote = RawRemote::start(Fault::HugeAnswerToCalls).await;
    let gw = gateway_for(&remote, &[]).await;
    let sid = open_session(&gw, None, json!({})).await;
    let r = tokio::time::timeout(
        AT_MOST,
        gw.post(Some(&sid), &call(json!(9), "work", json!({}))),
    )
    .await
    .expect("a call answered with an oversized message was never answered");
    assert_failure(&r, Failure::BadGateway, json!(9));
    assert!(
        r.text.len() < 64 * 1024,
        "the oversized answer was relayed ({} bytes)",
        r.text.len()
    );
    let r = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// `--header 'Name: ${VAR}'` is expanded from the gateway's environment and sent on every
/// request to the remote; the client's own bearer credential never is.
#[tokio::test]
async fn configured_headers_reach_the_remote_and_client_credentials_do_not() {
    let remote = RawRemote::start(Fault::Polite).await;
    let keys = keys_file();
    let args = [
        "--url",
        &remote.url,
        "--transport",
        "streamable",
        "--api-keys-file",
        &keys,
        "--header",
        "X-Upstream-Token: ${UPSTREAM_TOKEN}",
    ];
    let gw = TestGateway::start_env(&args, &[], &[("UPSTREAM_TOKEN", "s3cret-upstream")]).await;
    let sid = open_session(&gw, Some(ALICE), json!({})).await;
    let r = post_as(
        &gw,
        Some(ALICE),
        Some(&sid),
        &call(json!(1), "work", json!({})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let methods = remote.methods();
    for expected in ["initialize", "notifications/initialized", "tools/call"] {
        assert!(
            methods.iter().any(|m| m == expected),
            "{expected} never reached the remote: {methods:?}"
        );
    }
    for seen in remote.seen.lock().iter() {
        let token = seen.headers.iter().find(|(k, _)| k == "x-upstream-token");
        assert_eq!(
            token.map(|(_, v)| v.as_str()),
            Some("s3cret-upstream"),
            "{} {} without the expanded header",
            seen.method,
            seen.body
        );
        for (name, value) in &seen.headers {
            assert!(
                !value.contains(ALICE),
                "the client's key reached the remote in {name}"
            );
        }
    }
    assert!(
        !gw.stderr.lock().contains("s3cret-upstream"),
        "the outgoing credential was logged"
    );
}

const SECRET: &str = "s3cret-static-upstream-credential";

/// `run --url` for `remote` with a static `Authorization: Bearer SECRET` (from the
/// environment), logging at debug.
fn secret_args(remote: &RawRemote) -> Vec<String> {
    let args = [
        "--url",
        &remote.url,
        "--transport",
        "streamable",
        "--header",
        "Authorization: Bearer ${UPSTREAM_TOKEN}",
    ];
    args.iter().map(|a| a.to_string()).collect()
}

/// Whether the remote received the configured credential (the premise of the leak tests).
fn remote_got_secret(remote: &RawRemote) -> bool {
    let expected = format!("Bearer {SECRET}");
    let seen = remote.seen.lock();
    seen.iter()
        .any(|s| s.header("authorization").as_deref() == Some(expected.as_str()))
}

/// A remote that quotes the credential it was sent in a 401's body: the gateway tells the
/// client, the audit log and its own logs (at debug too) the status, never the body, so the
/// configured secret appears in none of them.
#[tokio::test]
async fn a_remote_quoting_its_credential_in_an_error_body_leaks_it_nowhere() {
    let remote = RawRemote::start(Fault::EchoAuthIn401ToCalls).await;
    let audit = crate::auth::temp_file("audit.log", "");
    let mut args = secret_args(&remote);
    args.extend([
        "--audit-log".to_owned(),
        audit.to_string_lossy().into_owned(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = [("UPSTREAM_TOKEN", SECRET), ("SWITCHBOARD_LOG", "debug")];
    let gw = TestGateway::start_env(&args, &[], &env).await;
    let sid = open_session(&gw, None, json!({})).await;
    let legacy = tokio::time::timeout(
        AT_MOST,
        gw.post(Some(&sid), &call(json!(1), "work", json!({}))),
    )
    .await
    .expect("a Legacy call was never answered");
    let modern = tokio::time::timeout(
        AT_MOST,
        super::modern_call(&gw, None, "work", json!({}), json!({})),
    )
    .await
    .expect("a Modern call was never answered");
    assert!(
        remote_got_secret(&remote),
        "the remote never got the credential"
    );
    for (era, r) in [("Legacy", &legacy), ("Modern", &modern)] {
        assert!(
            r.text.contains("\"error\""),
            "{era}: not an error: {}",
            r.text
        );
        assert!(
            !r.text.contains(SECRET),
            "{era}: the client got the secret: {}",
            r.text
        );
    }
    // Both calls are audited (as errors) before the test looks for the secret there.
    let lines = tokio::time::timeout(AT_MOST, async {
        loop {
            let text = std::fs::read_to_string(&audit).unwrap_or_default();
            let errors = text.lines().filter(|l| l.contains("\"outcome\":\"error\""));
            if errors.count() >= 2 {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the failed calls were never audited");
    assert!(
        lines.contains("401"),
        "the audit line names the status: {lines}"
    );
    assert!(
        !lines.contains(SECRET),
        "the audit log has the secret: {lines}"
    );
    let logs = gw.stderr.lock().clone();
    assert!(!logs.contains(SECRET), "the logs have the secret:\n{logs}");
}

/// The same remote refusing the gateway's own startup traffic, in plain text or as a
/// JSON-RPC error: `run` fails to start naming the status or the error code, not the body.
#[tokio::test]
async fn a_startup_refusal_quoting_the_credential_does_not_print_it() {
    for (fault, named) in [
        (Fault::EchoAuthIn401, "401"),
        (Fault::EchoAuthInJsonRpcError, "-32001"),
    ] {
        startup_refusal(fault, named).await;
    }
}

async fn startup_refusal(fault: Fault, named: &str) {
    let remote = RawRemote::start(fault).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["run", "--host", "127.0.0.1", "--port", "0"])
        .args(secret_args(&remote))
        .envs([("UPSTREAM_TOKEN", SECRET), ("SWITCHBOARD_LOG", "debug")])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(AT_MOST, out)
        .await
        .expect("run kept going with a remote that refuses everything")
        .unwrap();
    assert!(
        remote_got_secret(&remote),
        "the remote never got the credential"
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{fault:?}: {text}");
    assert!(
        text.contains(named),
        "{fault:?}: the error names {named}: {text}"
    );
    assert!(
        !text.contains(SECRET),
        "{fault:?}: the secret was printed:\n{text}"
    );
}

/// A remote URL with user-info (`user:password@host`), logging at debug: the password is in
/// no log line (the HTTP client's connection pool names the hosts it pools at debug; the
/// fixture keeps connections alive, so they are pooled).
#[tokio::test]
async fn a_url_password_is_never_logged_at_debug() {
    const PASSWORD: &str = "pa55word-in-the-url";
    let fx = crate::fixture_http::FixtureHttp::start(&[]).await;
    let url = fx
        .url
        .replacen("http://", &format!("http://someone:{PASSWORD}@"), 1);
    let args = ["--url", url.as_str()];
    let gw = TestGateway::start_env(&args, &[], &[("SWITCHBOARD_LOG", "debug")]).await;
    let sid = open_session(&gw, None, json!({})).await;
    let r = gw
        .post(Some(&sid), &call(json!(1), "instance", json!({})))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let logs = gw.stderr.lock().clone();
    assert!(logs.contains("DEBUG"), "not logging at debug:\n{logs}");
    assert!(
        !logs.contains(PASSWORD),
        "the URL's password was logged:\n{logs}"
    );
}
