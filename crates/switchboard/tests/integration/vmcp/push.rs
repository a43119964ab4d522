//! A backend's `list_changed` through the virtual server: one payload-free notification on
//! every Legacy session's listen stream, and the next list re-derived from the backend.

use serde_json::json;

use super::{call_text, growy, serve, stdio, tool_names, Era};
use crate::common::{Listener, TestGateway};

/// The next event's method on `stream`, which must carry no params.
async fn next_method(stream: &mut Listener) -> String {
    let event = stream.next().await;
    assert!(event.data.get("params").is_none(), "{:?}", event.data);
    assert!(event.data.get("id").is_none(), "{:?}", event.data);
    event.data["method"].as_str().unwrap().to_owned()
}

/// Every stream's next two events are `first`, then the sentinel `prompts/list_changed`
/// (so `first` came exactly once before it).
async fn each_saw_once(streams: &mut [Listener], first: &str) {
    for (n, stream) in streams.iter_mut().enumerate() {
        assert_eq!(next_method(stream).await, first, "session {n}");
        let sentinel = "notifications/prompts/list_changed";
        assert_eq!(
            next_method(stream).await,
            sentinel,
            "session {n}: {first} twice?"
        );
    }
}

/// The sentinel: the fixture announces a prompts change (after whatever came before it).
async fn sentinel(gw: &TestGateway, sid: &str) {
    let args = json!({"kind": "prompts_list_changed"});
    call_text(gw, Era::Legacy, Some(sid), "trigger", args).await;
}

#[tokio::test]
async fn a_backends_list_changed_reaches_every_session_once_and_the_next_list_shows_it() {
    let yaml = format!("backends:\n{}{}", stdio("alpha", ""), growy("growy", 3, 2));
    let served = serve("list-changed", &yaml, None).await;
    let gw = &served.gw;
    let mut sessions = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..3 {
        let sid = gw.session().await;
        streams.push(Listener::open(gw, &sid, None).await);
        sessions.push(sid);
    }
    // No collisions: every name is bare.
    let before = tool_names(gw, Era::Legacy, Some(&sessions[0])).await;
    assert!(before.iter().any(|n| n == "g0002") && before.iter().any(|n| n == "echo"));
    assert!(!before.iter().any(|n| n == "fresh"));

    // Growy's own list grows (it notifies before answering), then the sentinel.
    let grown = grow(gw, &sessions[1], "fresh").await;
    assert_eq!(grown, "grown fresh");
    sentinel(gw, &sessions[2]).await;
    each_saw_once(&mut streams, "notifications/tools/list_changed").await;
    for era in [Era::Legacy, Era::Modern] {
        let s = (era == Era::Legacy).then_some(sessions[0].as_str());
        let now = tool_names(gw, era, s).await;
        assert!(now.iter().any(|n| n == "fresh"), "{era:?}: {now:?}");
        assert_eq!(now.len(), before.len() + 1, "{era:?}");
        let answer = call_text(gw, era, s, "fresh", json!({})).await;
        assert_eq!(answer, "fresh from growy");
    }

    // The fixture's own announcement, likewise once per session.
    let args = json!({"kind": "tools_list_changed"});
    call_text(gw, Era::Legacy, Some(&sessions[0]), "trigger", args).await;
    sentinel(gw, &sessions[0]).await;
    each_saw_once(&mut streams, "notifications/tools/list_changed").await;
    a_new_collision_prefixes_both(gw, &sessions[0], &mut streams).await;
}

/// Makes growy add tool `name`.
async fn grow(gw: &TestGateway, sid: &str, name: &str) -> String {
    let args = json!({ "name": name });
    call_text(gw, Era::Legacy, Some(sid), "grow", args).await
}

/// Growy adds `echo`, which alpha has: `conditional` now prefixes both, and each reaches its
/// own backend.
async fn a_new_collision_prefixes_both(gw: &TestGateway, sid: &str, streams: &mut [Listener]) {
    grow(gw, sid, "echo").await;
    sentinel(gw, sid).await;
    each_saw_once(streams, "notifications/tools/list_changed").await;
    let s = Some(sid);
    let now = tool_names(gw, Era::Legacy, s).await;
    assert!(!now.iter().any(|n| n == "echo"), "{now:?}");
    let mine = call_text(gw, Era::Legacy, s, "alpha_echo", json!({"text": "alpha's"})).await;
    assert_eq!(mine, "alpha's");
    let theirs = call_text(gw, Era::Legacy, s, "growy_echo", json!({})).await;
    assert_eq!(theirs, "echo from growy");
}
