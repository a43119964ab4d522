//! Outgoing auth on the wire, against a loopback server that records every request's
//! `Authorization` headers: the caller's token replaces the static one only when configured
//! (`passthrough`), a stateless handle never carries one caller's token (or one exchanged for
//! it) into another's request, a session keeps its caller's token for what it sends on its
//! own and refuses another caller's request, and a token obtained for the remote that it
//! refuses (401) is fetched again once.

use std::sync::Arc;

use hyper::header::{HeaderName, HeaderValue};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::outgoing_auth::tests::{cc_config, exchange_config, issuing, token_service};
use crate::outgoing_auth::{OutgoingAuth, OutgoingAuthError};
use crate::remote::{Mode, RemoteConfig, RemoteEndpoint, RemoteError, RemoteUpstream};
use crate::{Credential, InboundSink, Upstream, UpstreamError};

#[derive(Debug)]
pub(super) struct Quiet;
impl InboundSink for Quiet {
    fn deliver(&self, _: &bytes::Bytes, _: &switchboard_wire::Message<'_>, _: &Upstream) {}
}

type Seen = Arc<Mutex<Vec<Vec<String>>>>;

/// Answers every POST with `{"result":{}}` for its id (202 for a notification), one request
/// per connection; records each request's `Authorization` values, in arrival order.
async fn recorder() -> (String, Seen) {
    refusing(&[]).await
}

/// [`recorder`] that answers 401 (no body) to a request whose `Authorization` is one of
/// `refused`. A request of method `test/slow` is recorded, then answered after 10 s.
async fn refusing(refused: &[&str]) -> (String, Seen) {
    let refused: Arc<Vec<String>> = Arc::new(refused.iter().map(|r| r.to_string()).collect());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let log = log.clone();
            let refused = refused.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body) = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len = content_length(head);
                        if body.len() >= len {
                            break (head.to_owned(), body.to_owned());
                        }
                    }
                };
                let auth: Vec<String> = head
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .filter(|(n, _)| n.eq_ignore_ascii_case("authorization"))
                    .map(|(_, v)| v.trim().to_owned())
                    .collect();
                let refuse = auth.iter().any(|a| refused.contains(a));
                log.lock().push(auth);
                if body.contains(r#""method":"test/slow""#) {
                    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
                }
                if refuse {
                    let reply = "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\
                                 connection: close\r\n\r\n";
                    let _ = sock.write_all(reply.as_bytes()).await;
                    return;
                }
                let reply = match serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("id").cloned())
                {
                    Some(id) => {
                        let json = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             mcp-session-id: s1\r\ncontent-length: {}\r\n\
                             connection: close\r\n\r\n{json}",
                            json.len()
                        )
                    }
                    None => "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\
                             connection: close\r\n\r\n"
                        .to_owned(),
                };
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, seen)
}

fn content_length(head: &str) -> usize {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

fn upstream(url: &str, forward: bool, mode: Mode) -> Upstream {
    let mut config = RemoteConfig::new(url);
    config.headers = vec![(
        HeaderName::from_static("authorization"),
        HeaderValue::from_static("Bearer static"),
    )];
    if forward {
        config.auth = OutgoingAuth::Passthrough;
    }
    with(config, mode)
}

fn with(config: RemoteConfig, mode: Mode) -> Upstream {
    let endpoint = RemoteEndpoint::new(config).unwrap();
    Upstream::Remote(RemoteUpstream::new(&endpoint, mode, Arc::new(Quiet)))
}

fn jwt(who: &str) -> Credential {
    Credential::bearer(&format!("{who}-token"), "https://idp", who).unwrap()
}

fn line(key: &str, method: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":"{key}","method":"{method}","params":{{}}}}"#).into_bytes()
}

async fn call(up: &Upstream, key: &str, method: &str, who: Option<&Credential>) {
    let pending = up.call_as(key, line(key, method), who).await.unwrap();
    let answer = pending.await.unwrap();
    assert!(!answer.is_error(), "{answer:?}");
}

#[tokio::test]
async fn a_stateless_handle_sends_each_callers_token_with_its_own_request_only() {
    let (url, seen) = recorder().await;
    let up = upstream(&url, true, Mode::Stateless);
    let alice = jwt("alice");
    let bob = jwt("bob");
    call(&up, "k1", "tools/list", Some(&alice)).await;
    call(&up, "k2", "tools/list", None).await;
    call(&up, "k3", "tools/list", Some(&bob)).await;
    assert_eq!(
        *seen.lock(),
        vec![
            vec!["Bearer alice-token".to_owned()],
            vec!["Bearer static".to_owned()],
            vec!["Bearer bob-token".to_owned()],
        ]
    );
}

#[tokio::test]
async fn without_the_option_a_callers_token_never_leaves() {
    let (url, seen) = recorder().await;
    for mode in [Mode::Stateless, Mode::Session] {
        let up = upstream(&url, false, mode);
        let alice = jwt("alice");
        call(&up, "k1", "tools/list", Some(&alice)).await;
    }
    assert_eq!(
        *seen.lock(),
        vec![
            vec!["Bearer static".to_owned()],
            vec!["Bearer static".to_owned()]
        ]
    );
}

/// Passthrough beside a static header holding a gateway credential (`X-Api-Key`): a caller
/// without a token of its own is refused, in both modes, and nothing reaches the remote (the
/// static header alone would be the gateway acting for it).
#[tokio::test]
async fn passthrough_refuses_a_caller_without_a_token_and_sends_nothing() {
    let (url, seen) = recorder().await;
    let mut config = RemoteConfig::new(&url);
    config.headers = vec![(
        HeaderName::from_static("x-api-key"),
        HeaderValue::from_static("gateway-credential"),
    )];
    config.auth = OutgoingAuth::Passthrough;
    for mode in [Mode::Stateless, Mode::Session] {
        for who in [
            Credential::without_token("api-key", "ops"),
            Credential::without_token("anonymous", "anonymous"),
        ] {
            let up = with(config.clone(), mode);
            let refused = up
                .call_as("k1", line("k1", "tools/call"), Some(&who))
                .await
                .unwrap()
                .await;
            assert!(
                matches!(
                    refused,
                    Err(UpstreamError::Remote(RemoteError::OutgoingAuth(
                        OutgoingAuthError::NoSubjectToken
                    )))
                ),
                "{refused:?}"
            );
        }
    }
    assert!(seen.lock().is_empty(), "{:?}", seen.lock());
}

#[tokio::test]
async fn a_session_keeps_its_callers_token_for_what_it_sends_on_its_own() {
    let (url, seen) = recorder().await;
    let up = upstream(&url, true, Mode::Session);
    let alice = jwt("alice");
    call(&up, "k1", "initialize", Some(&alice)).await;
    let note = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#;
    up.send_line(note.to_vec()).await.unwrap();
    let seen = seen.lock();
    assert_eq!(seen[0], vec!["Bearer alice-token".to_owned()]);
    assert_eq!(seen[1], vec!["Bearer alice-token".to_owned()]);
}

#[tokio::test]
async fn a_session_acting_as_its_caller_refuses_another_callers_request() {
    let (url, seen) = recorder().await;
    let up = upstream(&url, true, Mode::Session);
    let (alice, bob) = (jwt("alice"), jwt("bob"));
    call(&up, "k1", "initialize", Some(&alice)).await;
    let refused = up.call_as("k2", line("k2", "tools/list"), Some(&bob)).await;
    assert!(
        matches!(
            refused,
            Err(UpstreamError::Remote(RemoteError::OutgoingAuth(
                OutgoingAuthError::ForeignSession
            )))
        ),
        "{refused:?}"
    );
    // Alice's later token (a refreshed one) is still hers.
    let refreshed = Credential::bearer("alice-token-2", "https://idp", "alice").unwrap();
    call(&up, "k3", "tools/list", Some(&refreshed)).await;
    assert_eq!(
        *seen.lock(),
        vec![
            vec!["Bearer alice-token".to_owned()],
            vec!["Bearer alice-token-2".to_owned()]
        ]
    );
}

#[tokio::test]
async fn an_exchanging_handle_sends_each_caller_its_own_exchanged_token() {
    let (sts, exchanges) = token_service(issuing(600)).await;
    let (url, seen) = recorder().await;
    let mut config = RemoteConfig::new(&url);
    config.auth = OutgoingAuth::token_exchange(exchange_config(&sts)).unwrap();
    let stateless = with(config.clone(), Mode::Stateless);
    let (alice, bob) = (jwt("alice"), jwt("bob"));
    call(&stateless, "k1", "tools/call", Some(&alice)).await;
    call(&stateless, "k2", "tools/call", Some(&bob)).await;
    call(&stateless, "k3", "tools/call", None).await;
    call(&stateless, "k4", "tools/call", Some(&alice)).await;
    let key_holder = Credential::without_token("api-key", "ops");
    let refused = stateless
        .call_as("k5", line("k5", "tools/call"), Some(&key_holder))
        .await
        .unwrap()
        .await;
    assert!(
        matches!(
            refused,
            Err(UpstreamError::Remote(RemoteError::OutgoingAuth(
                OutgoingAuthError::NoSubjectToken
            )))
        ),
        "{refused:?}"
    );
    // A session of Alice's carries her exchanged token on its own lines too.
    let session = with(config, Mode::Session);
    call(&session, "k6", "initialize", Some(&alice)).await;
    let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    session.send_line(note.to_vec()).await.unwrap();
    assert_eq!(
        *seen.lock(),
        vec![
            vec!["Bearer x-alice-token-1".to_owned()],
            vec!["Bearer x-bob-token-2".to_owned()],
            vec![],
            vec!["Bearer x-alice-token-1".to_owned()],
            vec!["Bearer x-alice-token-1".to_owned()],
            vec!["Bearer x-alice-token-1".to_owned()],
        ]
    );
    assert_eq!(exchanges.lock().len(), 2, "one exchange per subject");
}

#[tokio::test]
async fn a_refused_gateway_token_is_fetched_again_once() {
    let (sts, fetches) = token_service(issuing(600)).await;
    let (url, seen) = refusing(&["Bearer cc-1"]).await;
    let mut config = RemoteConfig::new(&url);
    config.auth = OutgoingAuth::client_credentials(cc_config(&sts)).unwrap();
    for mode in [Mode::Stateless, Mode::Session] {
        let up = with(config.clone(), mode);
        call(&up, "k1", "tools/list", Some(&jwt("alice"))).await;
    }
    assert_eq!(
        *seen.lock(),
        vec![
            vec!["Bearer cc-1".to_owned()],
            vec!["Bearer cc-2".to_owned()],
            vec!["Bearer cc-2".to_owned()],
        ]
    );
    assert_eq!(fetches.lock().len(), 2);

    // A remote refusing every token: one refetch, then the 401 is the answer.
    let (url, seen) = refusing(&["Bearer cc-3", "Bearer cc-4"]).await;
    let mut config = RemoteConfig::new(&url);
    let (sts, fetches) = token_service(issuing(600)).await;
    config.auth = OutgoingAuth::client_credentials(cc_config(&sts)).unwrap();
    // Two fetches first, so this token service issues cc-3 and cc-4 next.
    for _ in 0..2 {
        let auth = config.auth.clone();
        let sent = auth.authorization(None).await.unwrap().unwrap();
        assert!(auth.refused(None, &sent).await);
    }
    let up = with(config, Mode::Stateless);
    let failed = up
        .call_as("k1", line("k1", "tools/list"), None)
        .await
        .unwrap()
        .await;
    assert!(
        matches!(
            failed,
            Err(UpstreamError::Remote(RemoteError::Status { status: 401 }))
        ),
        "{failed:?}"
    );
    assert_eq!(seen.lock().len(), 2);
    assert_eq!(fetches.lock().len(), 4);
}

/// The requests `seen` once there are `n` (waits up to 5 s).
async fn when_seen(seen: &Seen, n: usize) -> Vec<Vec<String>> {
    for _ in 0..500 {
        if seen.lock().len() >= n {
            return seen.lock().clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{n} requests never arrived: {:?}", seen.lock());
}

fn cancel(key: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":"{key}","reason":"timed out"}}}}"#
    )
    .into_bytes()
}

/// On a stateless handle (shared by every principal), the cancellation of a call acting as
/// its caller carries that call's credential, as the call did (a remote checking tokens
/// accepts it), sent as core sends it: the call withdrawn, then the line. Used once: a second
/// cancellation of the same key, or one of a key this handle never carried, has none.
#[tokio::test]
async fn a_cancellation_on_a_stateless_handle_carries_its_calls_credential() {
    let (sts, _) = token_service(issuing(600)).await;
    let mut exchanging = RemoteConfig::new("http://127.0.0.1:9/mcp");
    exchanging.auth = OutgoingAuth::token_exchange(exchange_config(&sts)).unwrap();
    let mut passing = RemoteConfig::new("http://127.0.0.1:9/mcp");
    passing.auth = OutgoingAuth::Passthrough;
    for (config, sent) in [
        (exchanging, "Bearer x-alice-token-1"),
        (passing, "Bearer alice-token"),
    ] {
        let (url, seen) = recorder().await;
        let config = RemoteConfig {
            url: url.clone(),
            ..config
        };
        let up = with(config, Mode::Stateless);
        let pending = up
            .call_as("k1", line("k1", "test/slow"), Some(&jwt("alice")))
            .await
            .unwrap();
        when_seen(&seen, 1).await;
        drop(pending);
        up.try_send_line(cancel("k1")).unwrap();
        let seen_now = when_seen(&seen, 2).await;
        assert_eq!(seen_now[0], vec![sent.to_owned()]);
        assert_eq!(seen_now[1], vec![sent.to_owned()], "the cancellation");
        up.send_line(cancel("k1")).await.unwrap();
        up.send_line(cancel("k9")).await.unwrap();
        let seen_now = when_seen(&seen, 4).await;
        assert_eq!(seen_now[2..], [Vec::<String>::new(), Vec::new()]);
    }
}
