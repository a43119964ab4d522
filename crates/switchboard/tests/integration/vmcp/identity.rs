//! Who is asking decides what the virtual server is: two principals (API keys and a Cedar
//! policy from the config file) see different merged lists and capabilities; and a real
//! client (rmcp) uses a prefixed tool through `serve`.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{modern, names, request, trio, Era};
use crate::common::{Reply, TestGateway};

const ALICE: &str = "alice-vmcp-key-0123456789ab";
const ADMIN: &str = "admin-vmcp-key-0123456789ab";

/// Alice may list tools and call alpha's echo only, by its exposed name.
const POLICY: &str = r#"
permit(principal == ApiKey::"admin", action, resource);
permit(principal == ApiKey::"alice", action == Action::"list_tools", resource);
permit(principal == ApiKey::"alice", action == Action::"call_tool", resource == Tool::"alpha_echo");
"#;

/// A POST as `key`'s holder, in `era` (`session` for Legacy).
async fn as_key(
    gw: &TestGateway,
    key: &str,
    era: Era,
    session: Option<&str>,
    (method, params): (&str, Value),
) -> Reply {
    let auth = format!("Bearer {key}");
    let extra = [("authorization", auth.as_str())];
    match era {
        Era::Legacy => {
            let body = request(json!(1), method, params);
            gw.post_raw(session, body.to_string(), &extra).await
        }
        Era::Modern => modern(gw, json!(1), method, params, &extra).await,
    }
}

/// Opens a Legacy session as `key`'s holder; returns it and the initialize result.
async fn session_as(gw: &TestGateway, key: &str) -> (String, Value) {
    let params = json!({"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}});
    let r = as_key(gw, key, Era::Legacy, None, ("initialize", params)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let result = r.json()["result"].clone();
    let auth = format!("Bearer {key}");
    let done = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    let r = gw
        .post_raw(Some(&sid), done.to_string(), &[("authorization", &auth)])
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    (sid, result)
}

#[tokio::test]
async fn two_principals_see_their_own_merged_lists_and_capabilities() {
    let dir = super::Dir::new("principals-policy");
    let policy = dir.write("policy.cedar", POLICY);
    let top = format!(
        "auth:\n  apiKeys:\n    - {{name: alice, key: {ALICE}}}\n    - {{name: admin, key: {ADMIN}}}\npolicy: {{file: {}}}\n",
        policy.display()
    );
    let served = trio("principals", &top).await;
    let gw = &served.gw;
    let (alice, alice_init) = session_as(gw, ALICE).await;
    let (admin, admin_init) = session_as(gw, ADMIN).await;
    // Capabilities: only what the caller may use, in both eras.
    let has = |v: &Value, cap: &str| v["capabilities"].get(cap).is_some();
    assert!(
        has(&alice_init, "tools") && !has(&alice_init, "resources"),
        "{alice_init}"
    );
    assert!(!has(&alice_init, "prompts"), "{alice_init}");
    assert!(
        has(&admin_init, "resources") && has(&admin_init, "prompts"),
        "{admin_init}"
    );
    let discover = |key| async move {
        let r = as_key(gw, key, Era::Modern, None, ("server/discover", json!({}))).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.json()["result"].clone()
    };
    let (alice_disc, admin_disc) = (discover(ALICE).await, discover(ADMIN).await);
    assert!(
        has(&alice_disc, "tools") && !has(&alice_disc, "resources"),
        "{alice_disc}"
    );
    assert!(has(&admin_disc, "resources"), "{admin_disc}");

    for era in [Era::Legacy, Era::Modern] {
        let legacy = era == Era::Legacy;
        let (a, b) = (
            legacy.then_some(alice.as_str()),
            legacy.then_some(admin.as_str()),
        );
        each_sees_its_own_tools(gw, era, a, b).await;
    }
}

/// In `era`, Alice lists and calls only her one tool (another is exactly a missing one);
/// the admin lists and calls every backend's.
async fn each_sees_its_own_tools(gw: &TestGateway, era: Era, a: Option<&str>, b: Option<&str>) {
    let list = ("tools/list", json!({}));
    let mine = as_key(gw, ALICE, era, a, list.clone()).await.json();
    let theirs = as_key(gw, ADMIN, era, b, list).await.json();
    assert_eq!(
        names(mine["result"]["tools"].as_array().unwrap()),
        ["alpha_echo"],
        "{era:?}"
    );
    let all = names(theirs["result"]["tools"].as_array().unwrap());
    assert!(
        all.len() > 100 && all.iter().any(|n| n == "beta_echo"),
        "{era:?}"
    );
    let call = |name: &str| {
        (
            "tools/call",
            json!({"name": name, "arguments": {"text": "hi"}}),
        )
    };
    let ok = as_key(gw, ALICE, era, a, call("alpha_echo")).await;
    assert_eq!(ok.json()["result"]["content"][0]["text"], "hi", "{era:?}");
    let denied = as_key(gw, ALICE, era, a, call("beta_echo")).await;
    let missing = as_key(gw, ALICE, era, a, call("nosuch")).await;
    assert_eq!(
        denied.status,
        StatusCode::FORBIDDEN,
        "{era:?}: {}",
        denied.text
    );
    let blank = |r: &Reply, n: &str| (r.status, r.text.replace(n, "NAME"));
    assert_eq!(
        blank(&denied, "beta_echo"),
        blank(&missing, "nosuch"),
        "{era:?}"
    );
    let admin_call = as_key(gw, ADMIN, era, b, call("beta_echo")).await;
    assert_eq!(
        admin_call.json()["result"]["content"][0]["text"],
        "hi",
        "{era:?}"
    );
}

#[tokio::test]
async fn rmcp_lists_and_calls_prefixed_tools_through_serve() {
    use rmcp::model::{CallToolRequestParams, ProtocolVersion};
    use rmcp::service::ClientLifecycleMode;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ClientServiceExt;
    let served = trio("rmcp", "").await;
    for lifecycle in [
        ClientLifecycleMode::Initialize,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    ] {
        let label = format!("{lifecycle:?}");
        let transport = StreamableHttpClientTransport::from_uri(served.gw.url.clone());
        let client = ().serve_with_lifecycle(transport, lifecycle).await.unwrap();
        let info = client.peer_info().expect("server info");
        assert_eq!(
            info.server_info.as_ref().unwrap().name,
            "switchboard",
            "{label}"
        );
        let tools = client.list_all_tools().await.unwrap();
        for want in ["alpha_echo", "beta_echo", "gamma_echo", "beta_only_slow"] {
            assert!(tools.iter().any(|t| t.name == want), "{label}: {want}");
        }
        for tool in ["alpha_echo", "gamma_echo"] {
            let text = format!("{label} via {tool}");
            let args = json!({ "text": text }).as_object().unwrap().clone();
            let r = client
                .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
                .await
                .unwrap_or_else(|e| panic!("{label} {tool}: {e}"));
            assert_eq!(r.content[0].as_text().unwrap().text, text);
        }
        client.cancel().await.unwrap();
    }
}
