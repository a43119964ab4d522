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
    call: (&str, Value),
) -> Reply {
    as_key_accepting(gw, key, era, session, call, None).await
}

/// [`as_key`] with an `Accept` header of its own (one preferring a stream: the early gate).
async fn as_key_accepting(
    gw: &TestGateway,
    key: &str,
    era: Era,
    session: Option<&str>,
    (method, params): (&str, Value),
    accept: Option<&str>,
) -> Reply {
    let auth = format!("Bearer {key}");
    let mut extra = vec![("authorization", auth.as_str())];
    if let Some(accept) = accept {
        extra.push(("accept", accept));
    }
    match era {
        Era::Legacy => {
            let body = request(json!(1), method, params);
            gw.post_raw(session, body.to_string(), &extra).await
        }
        Era::Modern => modern(gw, json!(1), method, params, &extra).await,
    }
}

/// A reply with `name` blanked out: status, content type and body, to compare a hidden
/// item's answer with a missing one's.
fn blanked(r: &Reply, name: &str) -> (StatusCode, String, String) {
    let content_type = r.headers["content-type"].to_str().unwrap().to_owned();
    (r.status, content_type, r.text.replace(name, "NAME"))
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
    // A tool she may not see is answered exactly as one that does not exist: status, content
    // type and body, as JSON and when a stream is preferred (the early gate).
    for accept in [None, Some("text/event-stream, application/json;q=0.1")] {
        let denied = as_key_accepting(gw, ALICE, era, a, call("beta_echo"), accept).await;
        let missing = as_key_accepting(gw, ALICE, era, a, call("nosuch"), accept).await;
        assert_eq!(denied.status, StatusCode::OK, "{era:?}: {}", denied.text);
        assert_eq!(denied.error_code(), -32602, "{era:?}: {}", denied.text);
        assert!(
            denied.text.contains("unknown tool: beta_echo"),
            "{}",
            denied.text
        );
        assert_eq!(
            blanked(&denied, "beta_echo"),
            blanked(&missing, "nosuch"),
            "{era:?} {accept:?}"
        );
    }
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

/// Everything, except alpha's own `exit`, whatever it is exposed as.
const BY_ORIGIN: &str = r#"
permit(principal, action, resource);
forbid(principal, action == Action::"call_tool", resource)
  when { resource has backend && resource.backend == "alpha" && resource.original == "exit" };
"#;

/// Every tool name the admin lists in `era`, all pages.
async fn listed(gw: &TestGateway, era: Era, session: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..20 {
        let params = cursor
            .as_ref()
            .map_or(json!({}), |c| json!({ "cursor": c }));
        let r = as_key(gw, ADMIN, era, session, ("tools/list", params)).await;
        let result = r.json()["result"].clone();
        out.extend(names(result["tools"].as_array().expect("tools")));
        match result["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return out,
        }
    }
    panic!("tools/list did not end within 20 pages");
}

/// `name` is refused by the policy exactly as a missing tool is (a deny-list policy lets a
/// missing name through to the unknown-name answer: the hidden one must get the same, or a
/// caller could map which tools exist that it may not see) and not listed.
async fn forbidden_and_unlisted(gw: &TestGateway, era: Era, s: Option<&str>, name: &str) {
    let call = |name: &str| ("tools/call", json!({"name": name, "arguments": {}}));
    let denied = as_key(gw, ADMIN, era, s, call(name)).await;
    let missing = as_key(gw, ADMIN, era, s, call("no_such_tool")).await;
    assert_eq!(denied.status, StatusCode::OK, "{era:?} {name}");
    assert_eq!(denied.json()["error"]["code"], -32602, "{era:?} {name}");
    assert_eq!(
        blanked(&denied, name),
        blanked(&missing, "no_such_tool"),
        "{era:?}"
    );
    let now = listed(gw, era, s).await;
    assert!(!now.iter().any(|n| n == name), "{era:?}: {name} listed");
}

/// A Cedar policy naming a backend and its own tool name keeps covering that tool when its
/// exposed name changes at run time (growy adds a colliding `exit`: `conditional` prefixes
/// alpha's); the other backend's tool of the same name stays usable; audit lines of routed
/// calls name the backend (and the original name where it differs).
#[tokio::test]
async fn a_policy_by_backend_and_original_name_survives_a_run_time_rename() {
    let dir = super::Dir::new("origin-policy");
    let policy = dir.write("policy.cedar", BY_ORIGIN);
    let audit = dir.0.join("audit.log");
    let yaml = format!(
        "auth:\n  apiKeys:\n    - {{name: admin, key: {ADMIN}}}\npolicy: {{file: {}}}\naudit: {{log: {}}}\nbackends:\n{}{}",
        policy.display(),
        audit.display(),
        super::stdio("alpha", ""),
        super::growy("growy", 3, 100)
    );
    let served = super::serve("origin-policy", &yaml, None).await;
    let gw = &served.gw;
    let (sid, _) = session_as(gw, ADMIN).await;
    let eras = [(Era::Legacy, Some(sid.as_str())), (Era::Modern, None)];
    // Bare at first: alpha's `exit` is `exit`.
    for (era, s) in eras {
        assert!(
            listed(gw, era, s).await.iter().any(|n| n == "echo"),
            "{era:?}"
        );
        forbidden_and_unlisted(gw, era, s, "exit").await;
    }
    let grow = (
        "tools/call",
        json!({"name": "grow", "arguments": {"name": "exit"}}),
    );
    let grown = as_key(gw, ADMIN, Era::Legacy, Some(&sid), grow).await;
    assert_eq!(grown.json()["result"]["content"][0]["text"], "grown exit");
    // The merged list follows growy's `list_changed` (bounded wait for the re-fetch).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !listed(gw, Era::Legacy, Some(&sid))
        .await
        .contains(&"growy_exit".to_owned())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "growy_exit never listed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for (era, s) in eras {
        let now = listed(gw, era, s).await;
        assert!(!now.iter().any(|n| n == "exit"), "{era:?}: {now:?}");
        forbidden_and_unlisted(gw, era, s, "alpha_exit").await;
        let theirs = ("tools/call", json!({"name": "growy_exit", "arguments": {}}));
        let r = as_key(gw, ADMIN, era, s, theirs).await;
        assert_eq!(
            r.json()["result"]["content"][0]["text"],
            "exit from growy",
            "{era:?}"
        );
    }
    let lines = audit_lines(
        &audit,
        |l| l["outcome"] == "allowed" && l["target"]["tool"] == "growy_exit",
        2,
    )
    .await;
    for line in &lines {
        assert_eq!(
            (&line["backend"], &line["original"]),
            (&json!("growy"), &json!("exit")),
            "{line}"
        );
    }
    let denied = audit_lines(
        &audit,
        |l| l["outcome"] == "denied" && l["target"]["tool"] == "alpha_exit",
        2,
    )
    .await;
    assert!(
        denied
            .iter()
            .all(|l| l["backend"] == "alpha" && l["original"] == "exit"),
        "{denied:?}"
    );
    let bare = audit_lines(
        &audit,
        |l| l["target"]["tool"] == "echo" || l["target"]["tool"] == "exit",
        0,
    )
    .await;
    assert!(bare.iter().all(|l| l.get("original").is_none()), "{bare:?}");
}

/// At least `want` complete audit lines that `pick` accepts (bounded wait for the writer).
async fn audit_lines(
    path: &std::path::Path,
    pick: impl Fn(&Value) -> bool,
    want: usize,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        let found: Vec<Value> = complete
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|l| pick(l))
            .collect();
        if found.len() >= want {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {want} audit lines",
            found.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
