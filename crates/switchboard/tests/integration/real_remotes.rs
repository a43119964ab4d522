//! Real remote MCP servers nobody here wrote, behind `switchboard run --url`:
//! `@modelcontextprotocol/server-everything` (TypeScript SDK 1.x, Legacy-only) in its
//! `streamableHttp` and `sse` modes, and a Python SDK 2.3 `MCPServer`
//! (`backends/py_http_server.py`, both eras on one Streamable HTTP endpoint). Each is driven by
//! rmcp's client in both eras and by the official Python SDK clients (1.x over Streamable HTTP
//! and HTTP+SSE, 2.3 pinned to 2026-07-28), asserting on the servers' real answers: echoed
//! text, tool lists, progress notifications, log messages naming their own upstream session.
//!
//! The server-everything tests are opt-in (`SWITCHBOARD_NPX_TESTS=1`, as in `everything.rs`):
//! they fetch the package from the npm registry. `scripts/test.sh`, which CI runs, opts in.

// Log messages are the deprecated (SEP-2577) logging feature, which rmcp marks deprecated;
// these servers still use it, and hearing them is the point.
#[allow(deprecated)]
mod drive;
mod remote;

use drive::{Era, Spec};
use remote::{Remote, Transport};

use crate::common::{stats, TestGateway};
use crate::legacy_sse::eventually;

fn npx_enabled() -> bool {
    let on = std::env::var_os("SWITCHBOARD_NPX_TESTS").is_some();
    if !on {
        eprintln!(
            "real remote test not enabled (set SWITCHBOARD_NPX_TESTS=1; scripts/test.sh does)"
        );
    }
    on
}

/// The gateway fronting a remote: `switchboard run --url <remote> <args>`, which serves both
/// eras and both client transports whatever the remote speaks.
struct Front {
    /// Kept alive for the test.
    gw: TestGateway,
    /// Its Streamable HTTP endpoint.
    mcp: String,
    /// Its HTTP+SSE endpoint.
    sse: String,
}

async fn front(remote: &Remote, args: &[&str]) -> Front {
    let mut all = vec!["--url", remote.url.as_str()];
    all.extend_from_slice(args);
    let gw = TestGateway::start_with(&all, &[]).await;
    Front {
        mcp: gw.url.clone(),
        sse: format!("{}/sse", gw.base()),
        gw,
    }
}

impl Front {
    /// The era the gateway learned the remote speaks is `era`, and once the clients are gone
    /// no client session and no call is left behind.
    async fn finish(self, era: &str) {
        assert_eq!(stats(&self.gw).await["backendEra"], era);
        eventually("every client session and call to end", || async {
            let s = stats(&self.gw).await;
            s["sessions"] == 0 && s["tableEntries"] == 0
        })
        .await;
    }
}

/// Every client against `front`: rmcp in each era and the Python SDK 1.x over Streamable
/// HTTP, the Python SDK 2.3 in the Modern era, the Python SDK 1.x over HTTP+SSE.
async fn every_client(front: &Front, spec: &Spec, label: &str) {
    for era in [Era::Legacy, Era::Modern] {
        drive::rmcp(&front.mcp, era, spec, label).await;
    }
    drive::python_legacy(&front.mcp, "streamable", spec).await;
    // KNOWN GAP, pinned so it is noticed when it closes: a Modern request's own log messages
    // (opted in with `_meta` logLevel, sent on that request's response stream) are dropped:
    // `core::dispatch` gets them from the stateless shared handle without the stream they
    // came on ("log messages cannot be attributed in shared mode"). Progress on the same
    // stream is delivered. Directly, the Python SDK server's do reach this client.
    drive::python_modern(&front.mcp, spec, false).await;
    drive::python_legacy(&front.sse, "sse", spec).await;
}

/// Two Legacy rmcp sessions at once each get their own upstream session (the log tool's
/// answer names it), and each hears only the log messages of its own.
async fn two_sessions_each_hear_their_own_logs(front: &Front, spec: &Spec) {
    let (a, b) = tokio::join!(
        drive::rmcp(&front.mcp, Era::Legacy, spec, "session a"),
        drive::rmcp(&front.mcp, Era::Legacy, spec, "session b"),
    );
    let (a, b) = (a.expect("a's session"), b.expect("b's session"));
    assert_ne!(a, b, "two client sessions on one upstream session");
}

#[tokio::test]
async fn server_everything_streamable_http_behind_run_url() {
    if !npx_enabled() {
        return;
    }
    let remote = Remote::everything(Transport::Streamable).await;
    let spec = Spec::everything();
    let front = front(&remote, &[]).await;
    every_client(&front, &spec, "everything streamableHttp").await;
    two_sessions_each_hear_their_own_logs(&front, &spec).await;
    front.finish("legacy").await;
    remote.stop().await;
}

#[tokio::test]
async fn server_everything_sse_behind_run_url_transport_sse() {
    if !npx_enabled() {
        return;
    }
    let remote = Remote::everything(Transport::Sse).await;
    let spec = Spec::everything();
    let front = front(&remote, &["--transport", "sse"]).await;
    every_client(&front, &spec, "everything sse").await;
    two_sessions_each_hear_their_own_logs(&front, &spec).await;
    front.finish("legacy").await;
    remote.stop().await;
}

/// Without `--transport`, the gateway's `initialize` POST to `/sse` gets server-everything's
/// 404 (an HTML page), and it falls back to HTTP+SSE on the same URL.
#[tokio::test]
async fn server_everything_sse_is_autodetected() {
    if !npx_enabled() {
        return;
    }
    let remote = Remote::everything(Transport::Sse).await;
    let spec = Spec::everything();
    let front = front(&remote, &[]).await;
    drive::rmcp(
        &front.mcp,
        Era::Legacy,
        &spec,
        "everything sse, autodetected",
    )
    .await;
    drive::python_legacy(&front.mcp, "streamable", &spec).await;
    drive::python_legacy(&front.sse, "sse", &spec).await;
    front.finish("legacy").await;
    remote.stop().await;
}

/// The Python SDK 2.3 server speaks both eras: Legacy clients reach it through a session,
/// Modern ones statelessly.
#[tokio::test]
async fn python_sdk_server_behind_run_url() {
    let python = drive::sdk_python("modern").await;
    let remote = Remote::python_sdk(&python).await;
    let front = front(&remote, &[]).await;
    every_client(&front, &Spec::python_sdk(), "python sdk 2.3 server").await;
    front.finish("dual").await;
    remote.stop().await;
}
