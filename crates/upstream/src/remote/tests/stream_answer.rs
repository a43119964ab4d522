//! A streamable HTTP remote's answer on a POST's event stream that the gateway does not read
//! (it holds serde_json's RawValue key, which `Value` would expand) fails its call at once;
//! before, it was skipped and the call waited for the stream to end or its deadline, and
//! then for a resumption. A stream that ends without its answer where nothing can resume it
//! (no upstream session) fails its call at once too, without waiting the remote's `retry`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::credential::Quiet;
use super::read_request;
use crate::remote::{Mode, RemoteConfig, RemoteEndpoint, RemoteUpstream};
use crate::Upstream;

/// A remote answering each POST with an event stream that carries one event (with an id and a
/// long `retry`, so that the stream could be resumed) and then ends: the answer holding the
/// key, or (`answer` false) a notification.
async fn remote(answer: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Some((_, body)) = read_request(&mut sock).await else {
                    return;
                };
                let request: Value = serde_json::from_str(&body).unwrap_or_default();
                let event = if answer {
                    json!({"jsonrpc": "2.0", "id": request["id"],
                        "result": {"x": {"$serde_json::private::RawValue": "1"}}})
                } else {
                    json!({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "info", "data": "working"}})
                };
                // With an event id and a long `retry`: a stream that ended here would be
                // resumed after 30 s (review of def8b69: so was one whose answer was not read).
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
                     id: e1\nretry: 30000\nevent: message\ndata: {event}\n\n"
                );
                let _ = sock.write_all(reply.as_bytes()).await;
                // The stream ends after it: the unread answer must end the call, not a
                // resumption.
                drop(sock);
            });
        }
    });
    url
}

/// The call `k1` to a stateless client of the remote at `url`, bounded so that a call left
/// waiting fails the test rather than hanging it: a resumption would wait 30 s first, and the
/// call's own deadline is a minute away.
async fn call(url: &str) -> Result<crate::BackendResponse, crate::UpstreamError> {
    let mut config = RemoteConfig::new(url);
    config.call_timeout = Duration::from_secs(60);
    let endpoint = RemoteEndpoint::new(config).unwrap();
    let up = Upstream::Remote(RemoteUpstream::new(
        &endpoint,
        Mode::Stateless,
        Arc::new(Quiet),
    ));
    let line = json!({"jsonrpc": "2.0", "id": "k1", "method": "tools/list", "params": {}});
    let call = up
        .call_as("k1", line.to_string().into_bytes(), None)
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), call).await;
    answer.expect("answered at once")
}

#[tokio::test]
async fn an_unread_answer_on_the_stream_fails_its_call_at_once() {
    let err = call(&remote(true).await).await.expect_err("not an answer");
    assert!(err.to_string().contains("could not be read"), "{err}");
}

/// Review of 5712813: without an upstream session there is nothing to resume (a GET names
/// the session), yet the call slept the remote's `retry` before finding that out.
#[tokio::test]
async fn a_stream_cut_where_nothing_can_resume_it_fails_its_call_at_once() {
    let err = call(&remote(false).await)
        .await
        .expect_err("no answer came");
    assert!(
        matches!(
            err,
            crate::UpstreamError::Remote(crate::remote::RemoteError::NoAnswer)
        ),
        "{err}"
    );
}
