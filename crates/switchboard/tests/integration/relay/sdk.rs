//! Every cell of (client era × backend era) asking for input, with real SDK clients: rmcp's
//! client (Legacy, with an elicitation handler) and the Python SDK 2.3.0 (`clients/
//! py_relay.py`, Legacy or 2026-07-28 mode, answering from callbacks), through `run` and
//! through `serve` (one virtual server over a Modern-only stdio fixture, a Legacy-only
//! per-session stdio fixture and a Legacy-only remote fixture).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{json, Value};

use super::modern_backend;
use crate::fixture_http::FixtureHttp;
use crate::vmcp::{remote, serve, Served, SB};

const ELICIT: &str = "test_input_required_result_elicitation";

/// An rmcp client that declares elicitation and answers every question with `name`,
/// recording the messages it was asked.
#[derive(Clone)]
struct Asked {
    name: &'static str,
    messages: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Asked {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.elicitation = Some(ElicitationCapability::default());
        let mut info = ClientConfig::default();
        info.capabilities = caps;
        info
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let message = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            _ => "other".to_owned(),
        };
        self.messages.lock().push(message);
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": self.name})))
    }
}

async fn rmcp_legacy(url: &str, name: &'static str) -> (RunningService<RoleClient, Asked>, Asked) {
    let asked = Asked {
        name,
        messages: Arc::default(),
    };
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let service = tokio::time::timeout(Duration::from_secs(60), asked.clone().serve(transport))
        .await
        .expect("rmcp did not connect in time")
        .expect("rmcp connects");
    (service, asked)
}

/// rmcp's text answer to `tool`, bounded.
async fn rmcp_call(service: &RunningService<RoleClient, Asked>, tool: &str) -> String {
    let params = CallToolRequestParams::new(tool.to_owned());
    let result = tokio::time::timeout(Duration::from_secs(30), service.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{tool}: no answer within 30 s"))
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    result.content[0].as_text().expect("text").text.clone()
}

/// `py_relay.py URL MODE TOOL...` with the Python SDK 2.3.0.
async fn python(url: &str, mode: &str, tools: &[&str]) -> Value {
    let python = crate::legacy_sse::sdk_python("modern").await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/clients/py_relay.py"
    );
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&python)
            .arg(script)
            .args([url, mode])
            .args(tools)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("python client timed out")
    .unwrap();
    assert!(
        out.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn text_of(report: &Value, tool: &str) -> String {
    let r = &report["results"][tool];
    r["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{tool}: {r} in {report}"))
        .to_owned()
}

#[tokio::test]
async fn run_legacy_sdk_clients_answer_a_modern_backends_input() {
    let gw = modern_backend(&[]).await;
    let (service, asked) = rmcp_legacy(&gw.url, "Rusty").await;
    assert_eq!(rmcp_call(&service, ELICIT).await, "Hello, Rusty!");
    assert_eq!(*asked.messages.lock(), ["What is your name?"]);
    let _ = service.cancel().await;
    let tools = [
        ELICIT,
        "test_input_required_result_sampling",
        "test_input_required_result_list_roots",
        "test_input_required_result_multi_round",
    ];
    let report = python(&gw.url, "legacy", &tools).await;
    assert_eq!(text_of(&report, ELICIT), "Hello, Py!", "{report}");
    assert_eq!(
        text_of(&report, tools[1]),
        "LLM response: Paris",
        "{report}"
    );
    assert!(
        text_of(&report, tools[2]).contains("file:///py"),
        "{report}"
    );
    assert_eq!(
        text_of(&report, tools[3]),
        "Hello Py, your favorite color is green"
    );
}

#[tokio::test]
async fn run_modern_sdk_client_answers_a_modern_backends_input_through_sealed_state() {
    let gw = modern_backend(&[]).await;
    let tools = [
        ELICIT,
        "test_input_required_result_request_state",
        "test_input_required_result_multi_round",
        "test_input_required_result_multiple_inputs",
    ];
    let report = python(&gw.url, "2026-07-28", &tools).await;
    assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
    assert_eq!(text_of(&report, ELICIT), "Hello, Py!", "{report}");
    assert!(
        text_of(&report, tools[1]).starts_with("state-ok"),
        "{report}"
    );
    assert_eq!(
        text_of(&report, tools[2]),
        "Hello Py, your favorite color is green"
    );
    assert!(report["results"][tools[3]]["text"].is_string(), "{report}");
}

/// `mod`: Modern-only stdio fixture; `leg`: Legacy-only per-session stdio fixture; `rem`: a
/// Legacy-only remote fixture. Every name collides, so each is prefixed with its backend.
pub(super) async fn every_era(name: &str) -> Served {
    let rem = FixtureHttp::start(&["--era", "legacy"]).await;
    let yaml = format!(
        "timeouts: {{request: 30s}}\nbackends:\n\
         \x20 - name: mod\n    command: {SB}\n    args: [fixture, --era, modern]\n\
         \x20 - name: leg\n    command: {SB}\n    args: [fixture, --era, legacy]\n    isolation: per-session\n{}",
        remote("rem", &rem.url)
    );
    serve(name, &yaml, Some(rem)).await
}

#[tokio::test]
async fn serve_every_cell_asks_the_right_client() {
    let served = every_era("relay-cells").await;
    let url = &served.gw.url;
    let tools: Vec<String> = ["mod", "leg", "rem"]
        .iter()
        .map(|b| format!("{b}_{ELICIT}"))
        .collect();
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    // Legacy client: Modern backend (relayed by the gateway), Legacy ones (forwarded).
    let (service, asked) = rmcp_legacy(url, "Rusty").await;
    for tool in &tools {
        assert_eq!(rmcp_call(&service, tool).await, "Hello, Rusty!", "{tool}");
    }
    assert_eq!(asked.messages.lock().len(), 3);
    let _ = service.cancel().await;
    // Modern client: Modern backend (sealed relay), Legacy ones (MRTR bridge; the remote too).
    let report = python(url, "2026-07-28", &tools).await;
    for tool in &tools {
        assert_eq!(text_of(&report, tool), "Hello, Py!", "{tool}: {report}");
    }
    assert_eq!(report["asked"].as_array().unwrap().len(), 3, "{report}");
    // And the Python SDK's own Legacy mode against the Modern backend of the set.
    let report = python(url, "legacy", &tools[..1]).await;
    assert_eq!(text_of(&report, tools[0]), "Hello, Py!", "{report}");
}

/// HTTP+SSE (2024-11-05) sessions are asked too: the Python SDK 1.x `sse_client`, two
/// sessions side by side, against a Modern-only backend; each is asked its own questions.
#[tokio::test]
async fn sse_sdk_clients_answer_a_modern_backends_input() {
    let gw = modern_backend(&[]).await;
    let v = crate::legacy_sse::python_sse_client(&gw, "py_sse_isolated.py").await;
    for name in ["a", "b"] {
        let (c, seen) = (&v[name], &v[name]["seen"]);
        assert_eq!(seen["sampling"], json!([format!("{name}-prompt")]), "{v}");
        assert_eq!(c["sampled"], format!("LLM response: {name}-sampled"), "{v}");
        assert_eq!(
            seen["elicitation"],
            json!([format!("{name}-question")]),
            "{v}"
        );
        assert!(
            c["elicited"].as_str().unwrap().contains("action=accept"),
            "{v}"
        );
        assert_eq!(c["roots"], format!("Client roots: file:///{name}"), "{v}");
    }
}
