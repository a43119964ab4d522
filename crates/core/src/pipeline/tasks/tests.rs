//! The task stage's polls as the caller (a watched listen's `tasks/get`), against a real stdio
//! backend that records every line it is sent and answers none.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::tasks::watch::Polled;
use crate::{Backend, BackendEra, Backends, Era, Exchange, Gateway, GatewayConfig};
use crate::{Principal, Registry};

/// A Modern backend writing every line it is sent to `file`, answering none.
fn recorder(
    registry: &Arc<Registry>,
    file: &std::path::Path,
) -> (Backend, switchboard_upstream::UpstreamOwner) {
    let script = format!("cat > '{}'", file.display());
    let config = switchboard_upstream::StdioConfig::new("sh", vec!["-c".into(), script]);
    let era = BackendEra {
        legacy: false,
        modern: true,
    };
    let caps = json!({"extensions": {crate::tasks::EXTENSION: {}}});
    crate::pipeline::tests::stdio_backend(registry, &config, ("2026-07-28", era, caps))
}

/// A watched listen's poll is checked against its caller's token as it goes out, not only
/// when its round was started: a caller whose token has expired sends the backend nothing
/// (the sentinel sent after it is the first line the backend reads).
#[tokio::test]
async fn a_poll_past_its_callers_token_expiry_is_never_sent() {
    let dir = std::env::temp_dir().join(format!("sb-poll-expired-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let file = dir.join("lines");
    let config = GatewayConfig::default();
    let registry = config.registry();
    let (backend, _process) = recorder(&registry, &file);
    let upstream = backend.handle.clone();
    let gateway = Gateway::new(Backends::single(backend), registry, config);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let caller = Principal {
        issuer: "https://issuer.example".into(),
        subject: "carol".into(),
        claims: json!({"sub": "carol", "exp": now - 5})
            .as_object()
            .cloned()
            .expect("claims"),
        credential: None,
    };
    // Carol's own task: a poll of it would go to the backend.
    let owner = crate::tasks::Owner::of(&caller, None);
    let tables = gateway.registry.tables(&gateway.backends.primary().id);
    let sessions = &gateway.registry.sessions;
    (tables.tasks).record_for(sessions, &owner, r#"{"task":{"taskId":"t-1"}}"#, None);
    let handle = tables
        .tasks
        .handle_for(Some(&owner), "t-1")
        .expect("a handle");
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{}}"#;
    let msg = switchboard_wire::Message::parse(body).expect("a request");
    let ex = Exchange {
        caller: &caller,
        era: Era::Modern,
        msg: &msg,
        stream: None,
    };
    // Bounds the failure only: with the check, the poll answers without the backend.
    let polled = tokio::time::timeout(Duration::from_secs(10), gateway.task_state(&ex, &handle))
        .await
        .expect("a poll past the token's expiry answers at once, without the backend");
    let sentinel = br#"{"jsonrpc":"2.0","method":"notifications/sentinel"}"#.to_vec();
    upstream.send_line(sentinel).await.expect("the sentinel");
    let mut lines = String::new();
    for _ in 0..200 {
        lines = std::fs::read_to_string(&file).unwrap_or_default();
        if lines.contains("notifications/sentinel") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        lines.contains("notifications/sentinel"),
        "the sentinel arrived"
    );
    assert!(
        lines.starts_with(r#"{"jsonrpc":"2.0","method":"notifications/sentinel"}"#),
        "the backend was sent something before the sentinel: {lines}"
    );
    assert!(matches!(polled, Polled::Failed), "{polled:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
