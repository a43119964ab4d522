//! Pure parts of the remote client; the wire behaviour is tested against `fixture --http` in
//! the switchboard integration tests (`remote_client`).

mod credential;
mod listen_first;
mod listen_revoked;
mod sse_session;
mod stream_answer;
mod tool_screen;

use super::*;

#[test]
fn a_json_answer_must_name_the_request() {
    let body = Bytes::from_static(br#"{"jsonrpc":"2.0","id":"k1","result":{"ok":true}}"#);
    let answer = answer_from(body.clone(), r#""k1""#, StatusCode::OK).unwrap();
    assert!(!answer.is_error());
    assert_eq!(answer.payload(), r#"{"ok":true}"#);
    assert!(matches!(
        answer_from(body, r#""k2""#, StatusCode::OK),
        Err(RemoteError::Malformed(_))
    ));
}

#[test]
fn an_error_status_with_a_json_rpc_body_is_still_an_answer() {
    let body =
        Bytes::from_static(br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"x"}}"#);
    let answer = answer_from(body, "3", StatusCode::NOT_FOUND).unwrap();
    assert!(answer.is_error());
    assert_eq!(answer.status(), 404);
    let html = Bytes::from_static(b"<html>bad gateway</html>");
    match answer_from(html, "3", StatusCode::BAD_GATEWAY) {
        Err(e @ RemoteError::Status { status: 502 }) => {
            assert!(
                !e.to_string().contains("bad gateway"),
                "the body is never kept"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn media_type_ignores_parameters_and_case() {
    let mut h = hyper::HeaderMap::new();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("Text/Event-Stream; charset=utf-8"),
    );
    assert_eq!(content_type(&h), "text/event-stream");
    assert_eq!(content_type(&hyper::HeaderMap::new()), "");
}

#[derive(Debug)]
struct Nothing;
impl RemoteSink for Nothing {
    fn deliver(&self, _: &Bytes, _: &Message<'_>) {}
}

#[test]
fn only_http_urls_are_accepted() {
    for bad in ["ftp://h/mcp", "/mcp", "not a url"] {
        let err = RemoteClient::new(RemoteConfig::new(bad), Arc::new(Nothing)).unwrap_err();
        assert!(matches!(err, RemoteError::InvalidUrl(_)), "{bad}: {err:?}");
    }
}

/// One HTTP request's head and body.
pub(super) async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::io::AsyncReadExt::read(sock, &mut chunk)
            .await
            .unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = (head.lines())
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return Some((head.to_owned(), body.to_owned()));
            }
        }
    }
}
