//! The merged lists a request routes by, as a reload changes them under it.

use serde_json::json;
use switchboard_wire::Message;

use crate::catalog::Kind;
use crate::pipeline::tests::stdio_backend;
use crate::vmcp::VmcpConfig;
use crate::{BackendEra, BackendId, Backends, Era, Exchange, Gateway, GatewayConfig, Principal};

/// A backend that lists one tool, `echo`, and answers anything else with an empty result.
const ONE_TOOL: &str = r#"
import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    tools = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    result = tools if m["method"] == "tools/list" else {}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"#;

/// A reload clears the merged lists and builds them again (`Reload::reshape`); a call
/// admitted just before the clear and routed just after it finds none. It is routed once they
/// are built again, not answered "the merged list could not be built" (a call to a backend
/// the reload kept failed so under load).
#[tokio::test]
async fn a_call_routed_while_a_reload_rebuilds_the_lists_is_routed_once_they_are_built() {
    let config = GatewayConfig {
        vmcp: Some(VmcpConfig::default()),
        ..GatewayConfig::default()
    };
    let registry = config.registry();
    let program = switchboard_upstream::StdioConfig::new(
        "python3",
        vec!["-c".to_owned(), ONE_TOOL.to_owned()],
    );
    let era = BackendEra {
        legacy: true,
        modern: false,
    };
    let declared = ("2025-11-25", era, json!({"tools": {}}));
    let (a, _a) = stdio_backend(&registry, &program, declared.clone());
    let (b, _b) = stdio_backend(&registry, &program, declared);
    let id = |name: &str| BackendId::try_from(name).expect("a backend name");
    let backends = Backends::new(vec![(id("a"), a), (id("b"), b)]).expect("two backends");
    let gateway = Gateway::new(backends, registry, config);
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a_echo"}}"#;
    let msg = Message::parse(body).expect("a request");
    let caller = Principal::anonymous();
    let call = Exchange {
        caller: &caller,
        era: Era::Legacy { session: None },
        msg: &msg,
        stream: None,
    };
    let local = super::LocalAnswers::of(&gateway).expect("aggregating");
    local
        .prepare(&msg)
        .await
        .expect("the lists, as admission builds them");
    let vmcp = gateway.vmcp().expect("aggregating");
    // The reload's clear, between the call's admission and its routing.
    vmcp.forget_view(Kind::Tools);
    assert!(vmcp.current(Kind::Tools).is_none());
    let route = gateway.request_route(&call, "tools/call").await;
    let route = route
        .expect("routed once the lists are built")
        .expect("a route");
    assert_eq!(route.backend, id("a"));
}
