use super::*;

#[test]
fn algorithms() {
    assert_eq!(parse_algorithm("RS256"), Ok(Algorithm::RS256));
    assert!(parse_algorithm("HS256").is_err());
    assert!(parse_algorithm("none").is_err());
}

#[tokio::test]
async fn api_keys_and_missing_credentials() {
    let auth = Authenticator::new(
        vec![("ci".into(), "0123456789abcdef-secret".into())],
        None,
        "http://127.0.0.1:1",
    )
    .unwrap();
    let mut h = HeaderMap::new();
    assert!(matches!(
        auth.authenticate(&h).await,
        Err(AuthFailure::Missing)
    ));
    h.insert(
        header::AUTHORIZATION,
        "Bearer 0123456789abcdef-secret".parse().unwrap(),
    );
    let p = auth.authenticate(&h).await.unwrap();
    assert_eq!((p.issuer.as_str(), p.subject.as_str()), ("api-key", "ci"));
    h.insert(
        header::AUTHORIZATION,
        "Bearer 0123456789abcdef-secreT".parse().unwrap(),
    );
    assert!(auth.authenticate(&h).await.is_err());
    h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
    assert!(auth.authenticate(&h).await.is_err());
    assert!(Authenticator::new(vec![("x".into(), "short".into())], None, "").is_err());
}

/// A key set server that answers its first request with `k1` and every later one with
/// 500, counting them.
async fn failing_jwks() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let jwk = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../switchboard/tests/integration/keys/k1.jwk.json"
    ))
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let mut read = 0;
            while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf[read..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
            let reply = match counted.fetch_add(1, Ordering::SeqCst) {
                0 => {
                    let body = format!("{{\"keys\":[{jwk}]}}");
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                }
                _ => "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\
                      connection: close\r\n\r\n"
                    .to_owned(),
            };
            let _ = conn.write_all(reply.as_bytes()).await;
        }
    });
    (url, hits)
}

/// While the issuer's key set cannot be fetched, the stale keys serve and the fetch is
/// retried after a back-off, not by every request: each waited on (and made) its own
/// fetch, up to 10 s each behind one lock, so JWT callers were served one per fetch
/// (review MEDIUM).
#[tokio::test]
async fn a_failing_key_set_fetch_is_not_retried_by_every_request() {
    let (url, hits) = failing_jwks().await;
    let mut config = JwtConfig::new("https://idp.test".into(), vec!["aud".into()], url);
    // Always stale: every lookup would fetch.
    config.jwks_max_age = Duration::ZERO;
    let validator = JwtValidator::new(config);
    for _ in 0..6 {
        assert!(
            validator.key(Some("k1")).await.is_some(),
            "the stale key serves"
        );
    }
    // The first fetch, and one that failed; then nothing until the back-off passes.
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
}
