//! A Modern backend's notifications tagged for a caller's `subscriptions/listen` stream pass
//! the guardrails like every other channel: a log message and a progress note carrying a key
//! arrive redacted (or not at all), never as the backend wrote them.

use serde_json::{json, Value};

use super::{Dir, AWS, REDACTING, REJECTING};
use crate::common::TestGateway;

const REDACTED: &str = "[REDACTED:aws_access_key]";

/// `run --guardrails FILE` in front of `tagger.py` (a Modern backend that leaks on listens).
async fn tagger(dir: &Dir, rules: &str) -> TestGateway {
    let file = dir.write("guards.yaml", rules);
    let script = format!(
        "{}/tests/integration/backends/tagger.py",
        env!("CARGO_MANIFEST_DIR")
    );
    TestGateway::start_with(&["--guardrails", &file], &["python3", &script]).await
}

/// The listen stream's messages after its acknowledgement, once `leak` was called, up to and
/// including the sentinel list change (so nothing delivered before it is missed).
async fn leaked_on_listen(gw: &TestGateway) -> Vec<Value> {
    let listen = crate::vmcp::modern_listen(gw, json!({"toolsListChanged": true})).await;
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        listen.bytes_stream(),
    ));
    let ack = crate::modern::next_message(&mut events).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    let reply =
        crate::modern::modern(gw, json!(1), "tools/call", json!({"name": "leak"}), &[]).await;
    assert!(reply.text.contains("leaked"), "{}", reply.text);
    let mut seen = Vec::new();
    loop {
        let m = crate::modern::next_message(&mut events).await;
        let done = m["method"] == "notifications/tools/list_changed";
        seen.push(m);
        if done {
            return seen;
        }
    }
}

#[tokio::test]
async fn a_tagged_log_message_and_progress_note_are_redacted() {
    let dir = Dir::new("listen-redact");
    let gw = tagger(&dir, REDACTING).await;
    let seen = leaked_on_listen(&gw).await;
    let text = serde_json::to_string(&seen).unwrap();
    assert!(!text.contains(AWS), "{text}");
    let methods: Vec<&str> = seen.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(
        methods,
        [
            "notifications/message",
            "notifications/progress",
            "notifications/tools/list_changed"
        ],
        "{text}"
    );
    assert_eq!(seen[0]["params"]["data"], format!("key {REDACTED}"));
    assert_eq!(seen[1]["params"]["message"], format!("key {REDACTED}"));
    let tag = "io.modelcontextprotocol/subscriptionId";
    assert_eq!(seen[0]["params"]["_meta"][tag], "L", "re-tagged: {text}");
}

/// Under `reject` only the sentinel arrives.
#[tokio::test]
async fn a_tagged_log_message_and_progress_note_are_refused() {
    let dir = Dir::new("listen-reject");
    let gw = tagger(&dir, REJECTING).await;
    let seen = leaked_on_listen(&gw).await;
    let text = serde_json::to_string(&seen).unwrap();
    assert_eq!(seen.len(), 1, "only the sentinel: {text}");
}
