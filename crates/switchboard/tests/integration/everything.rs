//! Real third-party server: `npx -y @modelcontextprotocol/server-everything` (Legacy-only,
//! TypeScript SDK 1.x) behind the gateway, driven by rmcp clients of both eras.
//!
//! Opt-in (`SWITCHBOARD_NPX_TESTS=1`) because it fetches the package from the npm registry;
//! `scripts/test.sh`, which CI runs, opts in.

use crate::common::{stats, TestGateway};

#[tokio::test]
async fn rmcp_clients_of_both_eras_use_server_everything() {
    if std::env::var_os("SWITCHBOARD_NPX_TESTS").is_none() {
        eprintln!("server-everything test not enabled (set SWITCHBOARD_NPX_TESTS=1; scripts/test.sh does)");
        return;
    }
    let gw = TestGateway::start_with(
        &["--startup-timeout", "120"],
        &["npx", "-y", crate::common::SERVER_EVERYTHING],
    )
    .await;
    assert_eq!(stats(&gw).await["backendEra"], "legacy");
    crate::common::rmcp_both_eras(&gw.url, "server-everything", "message", |sent| {
        format!("Echo: {sent}")
    })
    .await;
}
