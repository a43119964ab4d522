//! Token exchange and client credentials against a loopback token service that records every
//! request (its `Authorization` and form) and answers as each test says.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// One request the token service received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) authorization: String,
    pub(crate) form: Vec<(String, String)>,
}

impl Seen {
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.form
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

type Answer = Arc<dyn Fn(&Seen, usize) -> (u16, String) + Send + Sync>;

/// A token service answering with `answer(request, n)` (n counts from 1), one request per
/// connection; returns its token endpoint URL and what it saw.
pub(crate) async fn token_service(answer: Answer) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let (url, seen, _) = slow_token_service(answer, Duration::ZERO).await;
    (url, seen)
}

/// Requests being answered at once, and the most there ever were.
#[derive(Debug, Default)]
pub(crate) struct Load {
    now: std::sync::atomic::AtomicUsize,
    pub(crate) peak: std::sync::atomic::AtomicUsize,
}

/// [`token_service`] that takes `delay` to answer each request, counting how many it is
/// answering at once.
pub(crate) async fn slow_token_service(
    answer: Answer,
    delay: Duration,
) -> (String, Arc<Mutex<Vec<Seen>>>, Arc<Load>) {
    use std::sync::atomic::Ordering;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    let load = Arc::new(Load::default());
    let counted = load.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (log, answer, load) = (log.clone(), answer.clone(), counted.clone());
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
                        let len = header(head, "content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        if body.len() >= len {
                            break (head.to_owned(), body.to_owned());
                        }
                    }
                };
                let request = Seen {
                    authorization: header(&head, "authorization").unwrap_or_default(),
                    form: body
                        .split('&')
                        .filter_map(|p| p.split_once('='))
                        .map(|(k, v)| (decode(k), decode(v)))
                        .collect(),
                };
                let n = {
                    let mut log = log.lock();
                    log.push(request.clone());
                    log.len()
                };
                let at_once = load.now.fetch_add(1, Ordering::SeqCst) + 1;
                load.peak.fetch_max(at_once, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                load.now.fetch_sub(1, Ordering::SeqCst);
                let (status, json) = answer(&request, n);
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{json}",
                    json.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, seen, load)
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_owned())
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// Issues `x-<subject token>-<n>` for the exchange's subject, `cc-<n>` for client credentials.
pub(crate) fn issuing(lifetime: u64) -> Answer {
    Arc::new(move |r: &Seen, n| {
        let token = match r.get("subject_token") {
            Some(subject) => format!("x-{subject}-{n}"),
            None => format!("cc-{n}"),
        };
        let json = serde_json::json!({"access_token": token, "token_type": "Bearer",
            "expires_in": lifetime, "issued_token_type": ACCESS_TOKEN_TYPE});
        (200, json.to_string())
    })
}

pub(crate) fn exchange_config(url: &str) -> TokenExchangeConfig {
    TokenExchangeConfig {
        backend: "internal".into(),
        token_endpoint: url.into(),
        client_id: "switch board".into(),
        client_secret: Secret::new("s3cr:et\n"),
        audience: Some("internal-mcp".into()),
        scopes: vec!["tools".into(), "read".into()],
        resource: Some("https://internal.example/mcp".into()),
        timeout: Duration::from_secs(5),
    }
}

pub(crate) fn cc_config(url: &str) -> ClientCredentialsConfig {
    ClientCredentialsConfig {
        token_endpoint: url.into(),
        client_id: "switchboard".into(),
        client_secret: Secret::new("cc-secret"),
        scopes: vec!["batch".into()],
        timeout: Duration::from_secs(5),
    }
}

fn alice() -> Credential {
    Credential::bearer("alice.jwt", "https://idp", "alice").unwrap()
}

fn bob() -> Credential {
    Credential::bearer("bob.jwt", "https://idp", "bob").unwrap()
}

fn text(h: Option<HeaderValue>) -> String {
    h.map(|h| h.to_str().unwrap().to_owned())
        .unwrap_or_else(|| "none".into())
}

#[tokio::test]
async fn an_exchange_sends_rfc_8693_and_is_cached_per_subject() {
    let (url, seen) = token_service(issuing(600)).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    assert!(auth.acts_as_caller());
    let (a, b) = (alice(), bob());
    assert_eq!(
        text(auth.authorization(Some(&a)).await.unwrap()),
        "Bearer x-alice.jwt-1"
    );
    assert_eq!(
        text(auth.authorization(Some(&b)).await.unwrap()),
        "Bearer x-bob.jwt-2"
    );
    assert_eq!(
        text(auth.authorization(Some(&a)).await.unwrap()),
        "Bearer x-alice.jwt-1"
    );
    assert_eq!(
        text(auth.authorization(Some(&b)).await.unwrap()),
        "Bearer x-bob.jwt-2"
    );
    let seen = seen.lock();
    assert_eq!(seen.len(), 2, "one exchange per subject");
    let first = &seen[0];
    use base64::Engine;
    // client_secret_basic: id and secret form-encoded, then base64 ("switch+board:s3cr%3Aet").
    let expected = base64::engine::general_purpose::STANDARD.encode("switch+board:s3cr%3Aet");
    assert_eq!(first.authorization, format!("Basic {expected}"));
    assert_eq!(first.get("grant_type"), Some(TOKEN_EXCHANGE));
    assert_eq!(first.get("subject_token"), Some("alice.jwt"));
    assert_eq!(first.get("subject_token_type"), Some(ACCESS_TOKEN_TYPE));
    assert_eq!(first.get("audience"), Some("internal-mcp"));
    assert_eq!(first.get("scope"), Some("tools read"));
    assert_eq!(first.get("resource"), Some("https://internal.example/mcp"));
    assert_eq!(
        first.get("client_secret"),
        None,
        "the secret goes in the header only"
    );
}

#[tokio::test]
async fn a_caller_without_a_token_is_refused_and_the_gateway_sends_none() {
    let (url, seen) = token_service(issuing(600)).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let key_holder = Credential::without_token("api-key", "ops");
    assert_eq!(
        auth.authorization(Some(&key_holder)).await,
        Err(OutgoingAuthError::NoSubjectToken)
    );
    assert_eq!(auth.authorization(None).await, Ok(None));
    assert!(seen.lock().is_empty());
}

#[tokio::test]
async fn concurrent_first_calls_of_one_subject_make_one_exchange() {
    let (url, seen) = token_service(issuing(600)).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let calls = (0..8).map(|_| {
        let auth = auth.clone();
        tokio::spawn(async move { text(auth.authorization(Some(&alice())).await.unwrap()) })
    });
    for call in calls.collect::<Vec<_>>() {
        assert_eq!(call.await.unwrap(), "Bearer x-alice.jwt-1");
    }
    assert_eq!(seen.lock().len(), 1);
}

/// A token service that refuses a subject: the callers that queued behind the one exchange
/// take its refusal (one request for all of them), and a call right after is answered from
/// memory with the same error.
#[tokio::test]
async fn a_refusal_is_shared_by_those_waiting_on_it_and_remembered() {
    let refusing: Answer = Arc::new(|_, _| (400, r#"{"error":"invalid_grant"}"#.into()));
    let (url, seen, _) = slow_token_service(refusing, Duration::from_millis(100)).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let auth = auth.clone();
            tokio::spawn(async move { auth.authorization(Some(&alice())).await })
        })
        .collect();
    let refused = Err(OutgoingAuthError::Refused {
        code: "invalid_grant".into(),
    });
    for call in calls {
        assert_eq!(call.await.unwrap(), refused);
    }
    assert_eq!(seen.lock().len(), 1, "one request for every waiting caller");
    assert_eq!(auth.authorization(Some(&alice())).await, refused);
    assert_eq!(seen.lock().len(), 1, "answered from memory");
    // Another subject is asked about on its own.
    assert_eq!(auth.authorization(Some(&bob())).await, refused);
    assert_eq!(seen.lock().len(), 2);
}

/// A token issued for 0 s serves the call that fetched it and every call that waited on that
/// fetch: concurrent calls make one exchange, not one each in turn.
#[tokio::test]
async fn a_zero_lifetime_token_serves_the_calls_that_waited_for_it() {
    let (url, seen, _) = slow_token_service(issuing(0), Duration::from_millis(100)).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let auth = auth.clone();
            tokio::spawn(async move { text(auth.authorization(Some(&alice())).await.unwrap()) })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap(), "Bearer x-alice.jwt-1");
    }
    assert_eq!(seen.lock().len(), 1);
}

/// However many callers need a token at once, a backend's token service gets at most
/// MAX_TOKEN_REQUESTS requests at a time; every caller still gets its own token.
#[tokio::test]
async fn requests_to_a_token_service_are_capped_per_backend() {
    use std::sync::atomic::Ordering;
    let (url, seen, load) = slow_token_service(issuing(600), Duration::from_millis(100)).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let n = MAX_TOKEN_REQUESTS * 3;
    let calls: Vec<_> = (0..n)
        .map(|i| {
            let auth = auth.clone();
            tokio::spawn(async move {
                let who = Credential::bearer(&format!("u{i}.jwt"), "https://idp", &format!("u{i}"))
                    .unwrap();
                let got = text(auth.authorization(Some(&who)).await.unwrap());
                assert!(got.starts_with(&format!("Bearer x-u{i}.jwt-")), "{got}");
            })
        })
        .collect();
    for call in calls {
        call.await.unwrap();
    }
    assert_eq!(seen.lock().len(), n);
    let peak = load.peak.load(Ordering::SeqCst);
    assert!(
        peak <= MAX_TOKEN_REQUESTS,
        "{peak} requests at once, more than {MAX_TOKEN_REQUESTS}"
    );
}

#[tokio::test]
async fn a_short_lived_token_is_exchanged_again_and_a_refused_one_at_once() {
    // A 0 s token is used for no time at all: every call exchanges.
    let (url, seen) = token_service(issuing(0)).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let a = alice();
    assert_eq!(
        text(auth.authorization(Some(&a)).await.unwrap()),
        "Bearer x-alice.jwt-1"
    );
    assert_eq!(
        text(auth.authorization(Some(&a)).await.unwrap()),
        "Bearer x-alice.jwt-2"
    );
    assert_eq!(seen.lock().len(), 2);

    let (url, seen) = token_service(issuing(600)).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let first = auth.authorization(Some(&a)).await.unwrap().unwrap();
    assert!(auth.refused(Some(&a), &first).await);
    assert_eq!(
        text(auth.authorization(Some(&a)).await.unwrap()),
        "Bearer x-alice.jwt-2"
    );
    assert_eq!(seen.lock().len(), 2);
}

#[tokio::test]
async fn a_token_service_error_reaches_no_one_but_its_code() {
    let answer: Answer = Arc::new(|r: &Seen, _| {
        // A hostile or careless service quoting what it was sent.
        let quoted = format!(
            "{} {}",
            r.authorization,
            r.get("subject_token").unwrap_or("")
        );
        let json = serde_json::json!({"error": "invalid_grant", "error_description": quoted});
        (400, json.to_string())
    });
    let (url, _) = token_service(answer).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let err = auth.authorization(Some(&alice())).await.unwrap_err();
    assert_eq!(
        err,
        OutgoingAuthError::Refused {
            code: "invalid_grant".into()
        }
    );
    let shown = format!("{err} {err:?} {auth:?}");
    for secret in ["alice.jwt", "s3cr", "Basic", "switch"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }

    let hostile: Answer = Arc::new(|_, _| (400, r#"{"error":"x\" token=alice.jwt"}"#.into()));
    let (url, _) = token_service(hostile).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let err = auth.authorization(Some(&alice())).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        OutgoingAuthError::refused(None).to_string()
    );

    let page: Answer = Arc::new(|_, _| (502, "<html>alice.jwt</html>".into()));
    let (url, _) = token_service(page).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let err = auth.authorization(Some(&alice())).await.unwrap_err();
    assert_eq!(err, OutgoingAuthError::Status { status: 502 });
}

#[tokio::test]
async fn an_unusable_token_endpoint_is_refused_up_front() {
    for bad in ["ftp://h/token", "not a url", "https://id:secret@h/token"] {
        let err = OutgoingAuth::token_exchange(exchange_config(bad)).unwrap_err();
        assert!(
            matches!(err, OutgoingAuthError::Config(_)),
            "{bad}: {err:?}"
        );
        assert!(!err.to_string().contains("secret@"), "{err}");
    }
    // Nobody listening: unreachable, in fixed words.
    let auth = OutgoingAuth::token_exchange(exchange_config("http://127.0.0.1:9/token")).unwrap();
    assert_eq!(
        auth.authorization(Some(&alice())).await,
        Err(OutgoingAuthError::Unreachable)
    );
}

#[test]
fn a_plain_http_token_endpoint_is_refused_unless_it_is_loopback() {
    // The client secret (client_secret_basic) and callers' tokens would cross the network in
    // cleartext.
    for remote in [
        "http://sts.example.com/token",
        "http://10.0.0.7:8080/token",
        "http://[2001:db8::1]/token",
        "http://localhost.example.com/token",
        "http://128.0.0.1/token",
    ] {
        let err = OutgoingAuth::token_exchange(exchange_config(remote)).unwrap_err();
        assert!(
            matches!(&err, OutgoingAuthError::Config(m) if m.contains("https")),
            "{remote}: {err:?}"
        );
        let err = OutgoingAuth::client_credentials(cc_config(remote)).unwrap_err();
        assert!(matches!(err, OutgoingAuthError::Config(_)), "{remote}");
    }
    for allowed in [
        "https://sts.example.com/token",
        "http://127.0.0.1:9/token",
        "http://127.1.2.3:9/token",
        "http://[::1]:9/token",
        "http://localhost:9/token",
        "http://LocalHost/token",
    ] {
        assert!(
            OutgoingAuth::token_exchange(exchange_config(allowed)).is_ok(),
            "{allowed}"
        );
        assert!(check_token_endpoint(allowed).is_ok(), "{allowed}");
    }
}

#[tokio::test]
async fn client_credentials_are_the_gateways_own_cached_and_fetched_again_when_refused() {
    let (url, seen) = token_service(issuing(600)).await;
    let auth = OutgoingAuth::client_credentials(cc_config(&url)).unwrap();
    assert!(!auth.acts_as_caller());
    // The same token for the gateway and for every caller, fetched once.
    assert_eq!(text(auth.authorization(None).await.unwrap()), "Bearer cc-1");
    assert_eq!(
        text(auth.authorization(Some(&alice())).await.unwrap()),
        "Bearer cc-1"
    );
    let key_holder = Credential::without_token("api-key", "ops");
    assert_eq!(
        text(auth.authorization(Some(&key_holder)).await.unwrap()),
        "Bearer cc-1"
    );
    assert_eq!(seen.lock().len(), 1);
    let sent = auth.authorization(None).await.unwrap().unwrap();
    assert!(auth.refused(None, &sent).await);
    assert_eq!(text(auth.authorization(None).await.unwrap()), "Bearer cc-2");
    let seen = seen.lock();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].get("grant_type"), Some("client_credentials"));
    assert_eq!(seen[0].get("scope"), Some("batch"));
    assert_eq!(seen[0].get("subject_token"), None);
}

#[tokio::test]
async fn passthrough_and_static_never_fetch() {
    let a = alice();
    assert_eq!(
        text(
            OutgoingAuth::Passthrough
                .authorization(Some(&a))
                .await
                .unwrap()
        ),
        "Bearer alice.jwt"
    );
    // A caller without a token of its own is refused, as by an exchange: never sent with the
    // static headers alone (the gateway's identity). The gateway's own request has those only.
    let key_holder = Credential::without_token("api-key", "ops");
    assert_eq!(
        OutgoingAuth::Passthrough
            .authorization(Some(&key_holder))
            .await,
        Err(OutgoingAuthError::NoSubjectToken)
    );
    assert_eq!(
        OutgoingAuth::Passthrough.authorization(None).await,
        Ok(None)
    );
    assert_eq!(OutgoingAuth::Static.authorization(Some(&a)).await, Ok(None));
    let sent = HeaderValue::from_static("Bearer alice.jwt");
    assert!(!OutgoingAuth::Passthrough.refused(Some(&a), &sent).await);
}

#[test]
fn secrets_are_never_printed() {
    let s = Secret::new("hunter2\n");
    assert_eq!(s.expose(), "hunter2");
    assert!(!format!("{s:?}").contains("hunter2"));
    let config = exchange_config("http://127.0.0.1:9/token");
    assert!(!format!("{config:?}").contains("s3cr"));
}

/// A token service's answer is read as written: serde_json's own `Value` parsed the string
/// behind `$serde_json::private::RawValue` again (with a fresh nesting limit each time), so
/// the gateway read an `error` that is not in the document.
#[tokio::test]
async fn a_token_service_answer_is_read_as_written() {
    let hidden: Answer = Arc::new(|_, _| {
        (
            400,
            r#"{"$serde_json::private::RawValue":"{\"error\":\"invalid_grant\"}"}"#.into(),
        )
    });
    let (url, _) = token_service(hidden).await;
    let auth = OutgoingAuth::token_exchange(exchange_config(&url)).unwrap();
    let err = auth.authorization(Some(&alice())).await.unwrap_err();
    assert_eq!(err, OutgoingAuthError::Status { status: 400 });
}
