//! An OpenAPI backend's spec is read again on reload: an operation added to the spec file
//! becomes a tool after SIGHUP, and each listening Legacy session hears the tools change once.

use super::{hangup, listening_sessions, sentinel, until_sentinel, BOUND, RELOADED, TOOLS_CHANGED};
use crate::vmcp::{serve, stdio, tool_names, Dir, Era};

/// A spec with a GET operation per name in `ops`, on a base URL nothing listens on (listing
/// needs no call).
fn spec(ops: &[&str]) -> String {
    let mut paths = String::new();
    for op in ops {
        paths.push_str(&format!(
            "  /{op}:\n    get:\n      operationId: {op}\n      summary: {op} the thing\n      responses: {{'200': {{description: ok}}}}\n"
        ));
    }
    format!("openapi: 3.1.0\ninfo: {{title: api, version: '1'}}\npaths:\n{paths}")
}

#[tokio::test]
async fn a_changed_spec_is_read_again_on_reload_and_sessions_hear_it_once() {
    let specs = Dir::new("reload-openapi-spec");
    let file = specs.write("api.yaml", &spec(&["ping"]));
    let yaml = format!(
        "aggregation: {{conflictResolution: prefix}}\nbackends:\n{}  - name: api\n    openapi: {{spec: {}, baseUrl: \"http://127.0.0.1:9/v1\"}}\n",
        stdio("keep", ""),
        file.display()
    );
    let served = serve("reload-openapi", &yaml, None).await;
    let gw = &served.gw;
    let (sessions, mut streams) = listening_sessions(gw, 2).await;
    let s0 = Some(sessions[0].as_str());
    let before = tool_names(gw, Era::Legacy, s0).await;
    assert!(before.iter().any(|n| n == "api_ping"), "{before:?}");
    assert!(!before.iter().any(|n| n == "api_pong"), "{before:?}");

    specs.write("api.yaml", &spec(&["ping", "pong"]));
    hangup(gw);
    gw.wait_stdout(RELOADED, BOUND).await;
    for era in [Era::Legacy, Era::Modern] {
        let now = tool_names(
            gw,
            era,
            (era == Era::Legacy).then_some(sessions[0].as_str()),
        )
        .await;
        assert!(now.iter().any(|n| n == "api_pong"), "{era:?}: {now:?}");
    }
    sentinel(gw, &sessions[0]).await;
    for (n, stream) in streams.iter_mut().enumerate() {
        let events = until_sentinel(stream).await;
        let heard = events
            .iter()
            .filter(|e| e["method"] == TOOLS_CHANGED)
            .count();
        assert_eq!(heard, 1, "session {n}: {events:?}");
    }
}
