//! `POST /mcp` is answered without the router (`http::direct`). Its admission must be the
//! router's, refusal for refusal: each case is sent both to `/mcp` and to `POST /messages`
//! (an admitted route still behind the router's admission layer), and the two answers must
//! agree in status, `WWW-Authenticate` and body before the route's own handling begins.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::TestGateway;

const KEY: &str = "direct-key-0123456789abcdef";

fn keys_file() -> String {
    let path = crate::auth::temp_file("keys", &format!("direct:{KEY}\n"));
    path.to_string_lossy().into_owned()
}

/// Status, `WWW-Authenticate` and body of a POST to `path` with `headers`.
async fn answer(
    gw: &TestGateway,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, String, String) {
    let mut req = gw
        .http
        .post(format!("{}{path}", gw.base()))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, challenge, r.text().await.unwrap())
}

/// What is sent, the refusal expected, and the headers sent.
type Case<'a> = (&'a str, StatusCode, Vec<(&'a str, &'a str)>);

#[tokio::test]
async fn direct_post_is_admitted_exactly_as_the_router_admits() {
    let keys = keys_file();
    let gw = TestGateway::start(&["--api-keys-file", &keys]).await;
    let good = format!("Bearer {KEY}");
    let cases: [Case; 4] = [
        ("no credential", StatusCode::UNAUTHORIZED, vec![]),
        (
            "an unknown key",
            StatusCode::UNAUTHORIZED,
            vec![("authorization", "Bearer not-a-key-0123456789abcdef")],
        ),
        (
            "a foreign Origin, with a valid key",
            StatusCode::FORBIDDEN,
            vec![("authorization", &good), ("origin", "http://evil.example")],
        ),
        (
            "a forged replica hop, with a valid key",
            StatusCode::FORBIDDEN,
            vec![("authorization", &good), ("switchboard-hop", "v1.forged")],
        ),
    ];
    for (what, status, headers) in &cases {
        let direct = answer(&gw, "/mcp", headers).await;
        let routed = answer(&gw, "/messages?session_id=none", headers).await;
        assert_eq!(direct.0, *status, "{what}: direct POST /mcp: {direct:?}");
        assert_eq!(direct, routed, "{what}: direct and routed admission differ");
    }
    // Admitted: the direct path reaches the handler (a ping is answered) and the routed one
    // its own (an unknown session).
    let admitted = answer(&gw, "/mcp", &[("authorization", &good)]).await;
    assert_eq!(admitted.0, StatusCode::OK, "{admitted:?}");
    let pong: serde_json::Value = serde_json::from_str(&admitted.2).unwrap();
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    let routed = answer(
        &gw,
        "/messages?session_id=none",
        &[("authorization", &good)],
    )
    .await;
    assert_eq!(routed.0, StatusCode::NOT_FOUND, "{routed:?}");
}
