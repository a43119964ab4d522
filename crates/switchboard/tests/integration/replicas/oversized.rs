//! A session whose record is larger than the store takes (an `initialize` carrying 100 KiB
//! of `capabilities.experimental`): refused, unless the replica may serve sessions from
//! memory, and then served here without writing it again at every request.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::client::{replica, Endpoint};
use super::redis::Redis;
use crate::common::tool_text;

/// How often the gateway's log names a record too large for the store.
fn too_large_lines(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("larger than the session store takes"))
        .count()
}

/// Before, the record was silently not written: the session was served (without the
/// fallback too), and every request found it missing from the store and serialized and
/// refused it again, with a warning each time (review MEDIUM).
#[tokio::test]
async fn a_session_too_large_for_the_store_is_refused_or_served_here_once_warned() {
    let Some(redis) = Redis::start_or_skip("oversized").await else {
        return;
    };
    let big = "x".repeat(100 * 1024);
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"experimental":{"big":{"v":big}}},
        "clientInfo":{"name":"oversized","version":"0"}}});

    let strict = replica(&redis, &[]).await;
    let r = Endpoint::of(&strict).post(None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.error_code(), -32602, "{}", r.text);
    assert!(r.text.contains("session store"), "{}", r.text);
    assert!(r.headers.get("mcp-session-id").is_none(), "no session made");

    let mut lenient = replica(&redis, &["--session-store-fallback", "memory"]).await;
    let here = Endpoint::of(&lenient);
    let r = here.post(None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    here.initialized(&sid).await;
    for i in 0..20 {
        let r = here.echo(&sid, json!(i), "here").await;
        assert_eq!(tool_text(&r.json()), "here", "{}", r.text);
    }
    assert!(lenient.terminate_within(Duration::from_secs(10)).await);
    let log = lenient.stderr.lock().clone();
    assert_eq!(too_large_lines(&log), 1, "{log}");
}
