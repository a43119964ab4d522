//! Real third-party server: `npx -y @modelcontextprotocol/server-everything` (Legacy-only,
//! TypeScript SDK 1.x) behind the gateway, driven by rmcp clients of both eras.
//!
//! Opt-in (`SWITCHBOARD_NPX_TESTS=1`) because it fetches the package from the npm registry;
//! `scripts/test.sh`, which CI runs, opts in.

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::ClientLifecycleMode;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ClientServiceExt;
use serde_json::json;

use crate::common::{stats, TestGateway};

#[tokio::test]
async fn rmcp_clients_of_both_eras_use_server_everything() {
    if std::env::var_os("SWITCHBOARD_NPX_TESTS").is_none() {
        eprintln!("server-everything test not enabled (set SWITCHBOARD_NPX_TESTS=1; scripts/test.sh does)");
        return;
    }
    let gw = TestGateway::start_with(
        &["--startup-timeout", "120"],
        &["npx", "-y", "@modelcontextprotocol/server-everything"],
    )
    .await;
    assert_eq!(stats(&gw).await["backendEra"], "legacy");
    for lifecycle in [
        ClientLifecycleMode::Initialize,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    ] {
        let label = format!("{lifecycle:?}");
        let client = ()
            .serve_with_lifecycle(
                StreamableHttpClientTransport::from_uri(gw.url.clone()),
                lifecycle,
            )
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let tools = client
            .list_all_tools()
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert!(tools.iter().any(|t| t.name == "echo"), "{label}: {tools:?}");
        let args = json!({"message": label}).as_object().unwrap().clone();
        let r = client
            .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(
            r.content[0].as_text().unwrap().text,
            format!("Echo: {label}")
        );
        client.cancel().await.unwrap();
    }
}
