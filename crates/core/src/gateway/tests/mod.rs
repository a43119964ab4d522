//! The gateway's own loops: the reaper's clock driving session teardowns; its reloads
//! (`reload`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use switchboard_upstream::StdioConfig;

use crate::{Backend, BackendEra, BackendId, BackendInfo, Gateway, GatewayConfig};
use crate::{Principal, Registry};

mod reload;

const SESSIONS: usize = 4;

/// A shared backend that records every line it receives in `log` and never answers. The
/// shell stays (`; exit` keeps it from exec-ing `cat`) and holds stdout open: an ended
/// stdout would mean a dead backend.
fn silent_backend(
    registry: &Arc<Registry>,
    log: &std::path::Path,
) -> (Backend, switchboard_upstream::UpstreamOwner) {
    let script = "cat > \"$0\"; exit".to_owned();
    let config = StdioConfig::new("sh", vec!["-c".into(), script, log.display().to_string()]);
    let (handle, process) =
        switchboard_upstream::spawn_stdio(&config, registry.sink()).expect("spawn sh");
    let backend = Backend {
        handle,
        info: BackendInfo {
            protocol_version: "2025-11-25".into(),
            capabilities: json!({}),
            server_info: json!({"name": "silent"}),
            instructions: None,
            era: BackendEra {
                legacy: true,
                modern: false,
            },
        },
        internal: None,
        legacy_unprobed: false,
    };
    (backend, process)
}

/// Each expired session is the last subscriber of its own URI, so its teardown sends an
/// upstream unsubscribe and waits (an hour) for an answer that never comes. Torn down one
/// at a time, the backend would see one unsubscribe; concurrently, it sees all of them.
#[tokio::test]
async fn expired_sessions_are_torn_down_concurrently() {
    let log = std::env::temp_dir().join(format!("sb-reaper-{}", crate::route::random_hex()));
    let config = GatewayConfig {
        session_ttl: Duration::from_millis(1),
        request_timeout: Duration::from_secs(3600),
        ..GatewayConfig::default()
    };
    let registry = config.registry();
    let (backend, process) = silent_backend(&registry, &log);
    let gateway = Gateway::new(crate::Backends::single(backend), registry.clone(), config);
    for i in 0..SESSIONS {
        let sid = registry
            .sessions
            .create("2025-11-25", &Principal::anonymous())
            .expect("session");
        let uri = format!("test://{i}");
        let tables = registry.tables(&BackendId::default_id());
        let lock = tables.subs.lock(&uri).await;
        registry
            .sessions
            .add_subscription(sid.as_str(), &(BackendId::default_id(), uri.clone()))
            .expect("live session");
        tables.subs.add(&lock, sid.as_str());
    }
    let stop = CancellationToken::new();
    let reaper = tokio::spawn(gateway.clone().run_reaper(stop.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let unsubscribes = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("\"resources/unsubscribe\"")
            .count()
    };
    while unsubscribes() < SESSIONS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "teardowns ran one at a time: {} of {SESSIONS} unsubscribes sent",
            unsubscribes()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(unsubscribes(), SESSIONS);
    assert_eq!(
        gateway.operator().session_count(),
        0,
        "removed from the table at once"
    );
    stop.cancel();
    reaper.await.expect("reaper stops");
    gateway.background.join(Duration::ZERO).await;
    process.shutdown(Duration::from_secs(5)).await;
    let _ = std::fs::remove_file(&log);
}

/// A client notification naming a task (`notifications/tasks/status` with a guessed id, any
/// notification with the related-task tag) reaches no shared backend, where task ids are the
/// gateway's handles and never the client's to name; the notification sent after it, naming
/// none, does, and shows the first was not merely late (review LOW).
#[tokio::test]
async fn a_client_notification_naming_a_task_reaches_no_shared_backend() {
    let log = std::env::temp_dir().join(format!("sb-notify-{}", crate::route::random_hex()));
    let config = GatewayConfig::default();
    let registry = config.registry();
    let (backend, process) = silent_backend(&registry, &log);
    let gateway = Gateway::new(crate::Backends::single(backend), registry.clone(), config);
    let caller = Principal::anonymous();
    let sid = (registry.sessions)
        .create("2025-11-25", &caller)
        .expect("session");
    let naming = [
        r#"{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"guessed-1","status":"cancelled"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"guessed-2"}}}}"#,
    ];
    let sentinel = r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":{}}"#;
    for line in naming.iter().chain([&sentinel]) {
        let msg = switchboard_wire::Message::parse(line.as_bytes()).unwrap();
        gateway.notify(&caller, Some(&sid), &msg).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let seen = || std::fs::read_to_string(&log).unwrap_or_default();
    while !seen().contains("roots/list_changed") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sentinel never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = seen();
    assert!(!seen.contains("guessed"), "{seen}");
    gateway.background.join(Duration::ZERO).await;
    process.shutdown(Duration::from_secs(5)).await;
    let _ = std::fs::remove_file(&log);
}
