//! An HTTP+SSE session with a session store: its stream is the session, so it has no record
//! (its id, which travels in a URL, never becomes a Streamable HTTP session).

use reqwest::StatusCode;
use serde_json::json;

use super::client::{replica, Endpoint};
use super::redis::Redis;
use crate::common::stats;
use crate::legacy_sse::{eventually, SseClient};

/// Subscribing and setting a log level wrote the HTTP+SSE session's record, and after its
/// stream closed its id opened a Streamable HTTP session from that record, on any replica,
/// for the record's lifetime (review LOW). Now the id is unknown on `/mcp` while the
/// stream is open and after it closed.
#[tokio::test]
async fn an_http_sse_session_never_becomes_a_streamable_one_through_the_store() {
    let Some(redis) = Redis::start_or_skip("sse_records").await else {
        return;
    };
    let gw = replica(&redis, &[]).await;
    let mut c = SseClient::open(&gw).await;
    let sub = json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"test://static/resource/1"}});
    assert_eq!(c.request(&sub).await["result"], json!({}));
    let lvl = json!({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}});
    assert_eq!(c.request(&lvl).await["result"], json!({}));
    let sid = c.session.clone();
    let list = json!({"jsonrpc":"2.0","id":3,"method":"tools/list"});
    let ep = Endpoint::of(&gw);
    assert_eq!(
        ep.post(Some(&sid), &list).await.status,
        StatusCode::NOT_FOUND
    );
    drop(c);
    eventually("the HTTP+SSE session to end", || async {
        stats(&gw).await["sessions"] == 0
    })
    .await;
    let after = ep.post(Some(&sid), &list).await;
    assert_eq!(after.status, StatusCode::NOT_FOUND, "{}", after.text);
    let other = replica(&redis, &[]).await;
    let there = Endpoint::of(&other).post(Some(&sid), &list).await;
    assert_eq!(there.status, StatusCode::NOT_FOUND, "{}", there.text);
}
