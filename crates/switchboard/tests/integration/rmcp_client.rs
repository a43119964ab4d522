//! A real MCP client written by others (rmcp) drives the gateway.

use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::json;

use crate::common::TestGateway;

fn args(v: serde_json::Value) -> rmcp::model::JsonObject {
    v.as_object().unwrap().clone()
}

#[tokio::test]
async fn rmcp_clients_list_and_call_tools_side_by_side() {
    let gw = TestGateway::start(&[]).await;
    let a = ().serve(StreamableHttpClientTransport::from_uri(gw.url.clone())).await.unwrap();
    let b = ().serve(StreamableHttpClientTransport::from_uri(gw.url.clone())).await.unwrap();
    let info = a.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().unwrap().name,
        "switchboard-fixture"
    );

    let tools = a.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    for want in ["echo", "test_simple_text", "slow"] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    let (ra, rb) = tokio::join!(
        a.call_tool(
            CallToolRequestParams::new("echo")
                .with_arguments(args(json!({"text":"from a","delayMs":100})))
        ),
        b.call_tool(
            CallToolRequestParams::new("echo").with_arguments(args(json!({"text":"from b"})))
        ),
    );
    let text = |r: rmcp::model::CallToolResult| r.content[0].as_text().unwrap().text.clone();
    assert_eq!(text(ra.unwrap()), "from a");
    assert_eq!(text(rb.unwrap()), "from b");

    let simple = a
        .call_tool(CallToolRequestParams::new("test_simple_text"))
        .await
        .unwrap();
    assert!(!simple.content.is_empty());
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}
