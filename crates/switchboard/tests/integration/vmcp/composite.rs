//! Composite tools through the real binary (`serve --config` with `compositeTools`): a 4-step
//! DAG — two parallel steps on two fixture backends, an elicitation, a retried flaky step whose
//! arguments read an earlier step's structuredContent — run by a Modern client (this test's
//! own HTTP client speaking 2026-07-28: `input_required`, then the retry with
//! `inputResponses` and the gateway's handle as `requestState`) and by a Legacy client (rmcp,
//! with an elicitation handler: the gateway asks it on its session); the audit log shows every
//! step; another principal's resume gets exactly the unknown-handle answer. And a composite
//! claiming `readOnlyHint` over a step that is not read-only keeps `serve` from starting.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{request, stdio, Dir, SB, V};
use crate::common::{Reply, TestGateway};

const ALICE: &str = "alice-workflow-key-0123456789";
const BOB: &str = "bob-workflow-key-0123456789ab";

/// The DAG: `left` (alpha's echo, slow enough that `right` starts before it ends) and
/// `right` (beta's instance) in parallel; `confirm` asks the user; `flaky` fails twice and is
/// retried, its key built from `left`'s structuredContent.
const TRIP: &str = r#"
  - name: plan_trip
    description: Plans a trip (composite)
    inputSchema: {type: object, properties: {city: {type: string}, key: {type: string}}, required: [city, key]}
    outputSchema: {type: object, required: [greeting, attempt], properties: {greeting: {type: string}, attempt: {type: integer}}}
    maxParallel: 2
    inputTimeout: 30s
    timeout: 60s
    steps:
      - id: left
        type: tool
        tool: alpha.echo
        arguments: {text: "{{ params.city }}", delayMs: 300}
      - id: right
        type: tool
        tool: beta.slow
        arguments: {ms: 300}
      - id: who
        type: tool
        tool: beta.instance
        dependsOn: [right]
      - id: each
        type: forEach
        dependsOn: [left]
        items: "{{ [steps.left.output.text, 'Lyon'] }}"
        maxParallel: 2
        step:
          id: one
          type: tool
          tool: alpha.echo
          arguments: {text: "{{ item }}-{{ index }}"}
      - id: confirm
        type: elicitation
        dependsOn: [left, who, each]
        message: "Go to {{ steps.left.output.text }}?"
        requestedSchema: {type: object, properties: {name: {type: string}}, required: [name]}
      - id: flaky
        type: tool
        tool: alpha.flaky
        dependsOn: [confirm]
        arguments: {key: "{{ params.key }}-{{ steps.left.output.text }}", failures: 2}
        onError: {action: retry, maxRetries: 3, backoff: 10ms}
    output:
      greeting: "Hello {{ steps.confirm.output.name }} in {{ steps.left.output.text }}"
      instance: "{{ steps.who.output.instance }}"
      attempt: "{{ steps.flaky.output.attempt }}"
      stops: "{{ steps.each.output }}"
"#;

fn config(dir: &Dir, composites: &str) -> (String, std::path::PathBuf) {
    let audit = dir.0.join("audit.log");
    let yaml = format!(
        "auth:\n  apiKeys:\n    - {{name: alice, key: {ALICE}}}\n    - {{name: bob, key: {BOB}}}\naudit: {{log: {}}}\nbackends:\n{}{}compositeTools:{composites}",
        audit.display(),
        stdio("alpha", ""),
        stdio("beta", ""),
    );
    (yaml, audit)
}

/// A Modern `tools/call` as `key`'s holder, declaring elicitation.
async fn call_as(gw: &TestGateway, key: &str, id: u64, name: &str, mut params: Value) -> Reply {
    params["name"] = json!(name);
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let auth = format!("Bearer {key}");
    let headers = [
        ("mcp-protocol-version", V),
        ("mcp-method", "tools/call"),
        ("mcp-name", name),
        ("authorization", auth.as_str()),
    ];
    let body = request(json!(id), "tools/call", params);
    gw.post_raw(None, body.to_string(), &headers).await
}

/// The audit log's lines once `done` says it is complete (bounded wait: the log is written
/// by its own thread).
async fn audit_lines(path: &std::path::Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if done(&lines) {
            return lines;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "audit log incomplete: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn events<'a>(lines: &'a [Value], event: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["event"] == event).collect()
}

/// The audit log shows the run of `plan_trip` step by step (the elicitation step's start
/// outcome is `asked`: `input_required` for Modern, `started` for Legacy), its two first steps
/// in parallel, every line the caller's, and each inner call's own `tools/call` line.
async fn every_step_audited(audit: &std::path::Path, asked: &str) {
    let lines = audit_lines(audit, |l| !events(l, "workflow_finished").is_empty()).await;
    let wf: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["event"]
                .as_str()
                .is_some_and(|e| e.starts_with("workflow"))
        })
        .collect();
    let summary: Vec<String> = wf
        .iter()
        .map(|l| {
            format!(
                "{} {} {} {}",
                l["event"].as_str().unwrap(),
                l["step"].as_str().unwrap_or("-"),
                l["outcome"].as_str().unwrap(),
                l["attempt"]
            )
        })
        .collect();
    let has = |s: &str| summary.iter().any(|l| l == s);
    let confirm = format!("workflow_step_started confirm {asked} 1");
    for want in [
        "workflow_started - started null",
        "workflow_step_started left started 1",
        "workflow_step_started right started 1",
        "workflow_step_finished left completed 1",
        "workflow_step_finished right completed 1",
        "workflow_step_finished who completed 1",
        "workflow_step_finished each[0] completed 1",
        "workflow_step_finished each[1] completed 1",
        confirm.as_str(),
        "workflow_step_finished confirm completed 1",
        "workflow_step_finished flaky failed 1",
        "workflow_step_finished flaky failed 2",
        "workflow_step_finished flaky completed 3",
        "workflow_finished - completed null",
    ] {
        assert!(has(want), "missing `{want}` in {summary:#?}");
    }
    // Parallel: both first steps started before either finished.
    let pos = |s: &str| summary.iter().position(|l| l == s).unwrap();
    let first_finish = pos("workflow_step_finished left completed 1")
        .min(pos("workflow_step_finished right completed 1"));
    assert!(
        pos("workflow_step_started right started 1") < first_finish,
        "{summary:#?}"
    );
    assert!(
        pos("workflow_step_started left started 1") < first_finish,
        "{summary:#?}"
    );
    // Every line is Alice's, and each inner call has its own tools/call line.
    assert!(
        wf.iter().all(|l| l["principal"]["sub"] == "alice"),
        "{wf:#?}"
    );
    let inner = lines
        .iter()
        .filter(|l| l["method"] == "tools/call" && l["tool"] != "plan_trip")
        .count();
    assert!(
        inner >= 6,
        "left, right, who and three flaky attempts: {lines:#?}"
    );
}

#[tokio::test]
async fn a_modern_client_runs_the_dag_and_only_its_owner_resumes_it() {
    let dir = Dir::new("composite-modern");
    let (yaml, audit) = config(&dir, TRIP);
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;

    // Listed with the floor its steps give (fixture tools declare no annotations).
    let list = super::modern(
        &gw,
        json!(0),
        "tools/list",
        json!({}),
        &[("authorization", &format!("Bearer {ALICE}"))],
    )
    .await;
    let tools = list.json()["result"]["tools"].clone();
    let trip = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "plan_trip");
    let trip = trip.unwrap_or_else(|| panic!("plan_trip not listed: {tools}"));
    assert_eq!(
        trip["annotations"],
        json!({"readOnlyHint": false, "destructiveHint": true, "openWorldHint": true})
    );

    let args = json!({"arguments": {"city": "Paris", "key": "k1"}});
    let first = call_as(&gw, ALICE, 1, "plan_trip", args.clone()).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let result = first.json()["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{result}");
    let ask = &result["inputRequests"]["confirm"];
    assert_eq!(ask["method"], "elicitation/create");
    assert_eq!(ask["params"]["message"], "Go to Paris?");
    let handle = result["requestState"].as_str().unwrap().to_owned();
    assert!(handle.len() >= 64, "at least 128 bits: {handle}");

    // Bob (another principal) and an unknown handle get the same answer, byte for byte.
    let answer = json!({"confirm": {"action": "accept", "content": {"name": "Ada"}}});
    let mut resume = args.clone();
    resume["inputResponses"] = answer.clone();
    resume["requestState"] = json!(handle);
    let foreign = call_as(&gw, BOB, 2, "plan_trip", resume.clone()).await;
    let mut unknown_params = resume.clone();
    unknown_params["requestState"] = json!(format!("wf_{}", "0".repeat(64)));
    let unknown = call_as(&gw, ALICE, 2, "plan_trip", unknown_params).await;
    assert_eq!(foreign.status, unknown.status);
    assert_eq!(
        foreign.text, unknown.text,
        "foreign resume differs from an unknown handle"
    );
    assert!(
        foreign.text.contains("Invalid or expired requestState"),
        "{}",
        foreign.text
    );

    // The owner's resume finishes the run (Bob's attempt did not spend the handle).
    let done = call_as(&gw, ALICE, 3, "plan_trip", resume.clone()).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    let result = done.json()["result"].clone();
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(result["isError"], false, "{result}");
    let out = &result["structuredContent"];
    assert_eq!(out["greeting"], "Hello Ada in Paris");
    assert_eq!(
        out["attempt"], 3,
        "two failures, then the third attempt: {out}"
    );
    assert!(
        out["instance"].as_str().is_some_and(|s| !s.is_empty()),
        "{out}"
    );

    // Single use: the same handle again is unknown.
    let again = call_as(&gw, ALICE, 2, "plan_trip", resume).await;
    assert_eq!(again.text, unknown.text);

    every_step_audited(&audit, "input_required").await;
}

/// Two composites that each ask once, then greet with the answer.
const ASK_TWICE: &str = r#"
  - name: ask_one
    inputTimeout: 30s
    steps:
      - id: confirm
        type: elicitation
        message: "Who?"
        requestedSchema: {type: object, properties: {name: {type: string}}, required: [name]}
    output:
      greeting: "Hello {{ steps.confirm.output.name }}"
  - name: ask_two
    inputTimeout: 30s
    steps:
      - id: confirm
        type: elicitation
        message: "Who else?"
        requestedSchema: {type: object, properties: {name: {type: string}}, required: [name]}
    output:
      greeting: "Bye {{ steps.confirm.output.name }}"
"#;

#[tokio::test]
async fn a_resume_through_another_composite_leaves_the_handle_to_its_own() {
    let dir = Dir::new("composite-wrong-name");
    let (yaml, _) = config(&dir, ASK_TWICE);
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;

    let first = call_as(&gw, ALICE, 1, "ask_one", json!({"arguments": {}})).await;
    let result = first.json()["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{}", first.text);
    let handle = result["requestState"].as_str().unwrap().to_owned();
    let resume = json!({
        "arguments": {},
        "inputResponses": {"confirm": {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": handle,
    });
    // The owner's own handle through the other composite's name: refused like an unknown one.
    let wrong = call_as(&gw, ALICE, 2, "ask_two", resume.clone()).await;
    let mut unknown_params = resume.clone();
    unknown_params["requestState"] = json!(format!("wf_{}", "0".repeat(64)));
    let unknown = call_as(&gw, ALICE, 2, "ask_two", unknown_params).await;
    assert_eq!(wrong.status, unknown.status);
    assert_eq!(wrong.text, unknown.text, "wrong name differs from unknown");

    // The refusal did not spend the handle: the right composite resumes and finishes.
    let done = call_as(&gw, ALICE, 3, "ask_one", resume).await;
    let result = done.json()["result"].clone();
    assert_eq!(result["resultType"], "complete", "{}", done.text);
    assert_eq!(
        result["structuredContent"]["greeting"], "Hello Ada",
        "{result}"
    );
}

#[tokio::test]
async fn a_composite_safer_than_its_steps_keeps_serve_from_starting() {
    let dir = Dir::new("composite-unsafe");
    let composite = r#"
  - name: looks_safe
    annotations: {readOnlyHint: true}
    steps:
      - id: write
        type: tool
        tool: alpha.echo
        arguments: {text: x}
"#;
    let (yaml, _) = config(&dir, composite);
    let config = dir.write("sb.yaml", &yaml);
    let (stdout, stderr) = refused(&["serve", "--host", "127.0.0.1", "--port", "0"], &config).await;
    assert!(
        stderr.contains("composite tool `looks_safe` claims readOnlyHint: true but its step `write` calls `alpha.echo`, which is not"),
        "stderr: {stderr}\nstdout: {stdout}"
    );
    assert!(!stdout.contains("listening on"), "{stdout}");
}

/// Runs `switchboard ARGS --config CONFIG`, which must exit non-zero: its stdout and stderr.
async fn refused(args: &[&str], config: &std::path::Path) -> (String, String) {
    let out = tokio::process::Command::new(SB)
        .args(args)
        .args(["--config", config.to_str().unwrap()])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("switchboard did not exit")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded: {stdout}");
    (stdout, stderr)
}

#[tokio::test]
async fn a_step_naming_no_backend_is_refused_by_validate_and_serve() {
    let dir = Dir::new("composite-no-backend");
    let composite = r#"
  - name: lost
    steps:
      - id: fine
        type: tool
        tool: alpha.echo
        arguments: {text: x}
      - id: astray
        type: tool
        tool: nosuchbackend.echo
        arguments: {text: y}
  - name: lost_in_loop
    steps:
      - id: each
        type: forEach
        items: "{{ [1, 2] }}"
        step:
          id: one
          type: tool
          tool: nosuchbackend.echo
"#;
    let (yaml, _) = config(&dir, composite);
    let config = dir.write("sb.yaml", &yaml);
    let why = "names no backend: `nosuchbackend` is not in backends (alpha, beta)";
    for args in [&["validate"][..], &["serve", "--port", "0"]] {
        let (stdout, stderr) = refused(args, &config).await;
        for path in [
            "compositeTools[0].steps[1].tool",
            "compositeTools[1].steps[0].step.tool",
        ] {
            let line = format!("{path}: `nosuchbackend.echo` {why}");
            assert!(stderr.contains(&line), "{args:?}: {line}\nstderr: {stderr}");
        }
        assert!(!stdout.contains("listening on"), "{stdout}");
    }
}

/// rmcp's client as `key`'s holder, declaring elicitation and answering with a name.
#[derive(Clone)]
struct Answers;

impl rmcp::ClientHandler for Answers {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut caps = rmcp::model::ClientCapabilities::default();
        caps.elicitation = Some(rmcp::model::ElicitationCapability::default());
        let mut info = rmcp::model::ClientConfig::default();
        info.capabilities = caps;
        info
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let rmcp::model::ElicitRequestParams::FormElicitationParams { message, .. } = &request
        else {
            return Err(rmcp::ErrorData::invalid_params("expected a form", None));
        };
        // The message is the step's template over an earlier step's output.
        let name = if message == "Go to Paris?" {
            "Ada"
        } else {
            "wrong message"
        };
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({ "name": name })),
        )
    }
}

#[tokio::test]
async fn a_legacy_client_runs_the_dag_and_is_asked_on_its_session() {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt;

    let dir = Dir::new("composite-legacy");
    let (yaml, audit) = config(&dir, TRIP);
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url.clone()).auth_header(ALICE),
    );
    let service = tokio::time::timeout(Duration::from_secs(60), Answers.serve(transport))
        .await
        .expect("rmcp connects in time")
        .expect("rmcp connects");
    let args = json!({"city": "Paris", "key": "legacy"});
    let params = rmcp::model::CallToolRequestParams::new("plan_trip")
        .with_arguments(args.as_object().cloned().unwrap());
    let result = tokio::time::timeout(Duration::from_secs(30), service.call_tool(params))
        .await
        .expect("plan_trip answered within 30 s")
        .expect("plan_trip succeeds");
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let out = result
        .structured_content
        .clone()
        .expect("structuredContent");
    assert_eq!(out["greeting"], "Hello Ada in Paris", "{out}");
    assert_eq!(out["attempt"], 3, "{out}");
    every_step_audited(&audit, "started").await;
    let _ = service.cancel().await;
}

/// Bob may call the composite but not the tool its step calls: the step is refused as his own
/// call would be, so the run fails naming the step; Alice (allowed both) gets the result.
#[tokio::test]
async fn each_step_is_authorized_as_the_caller() {
    let dir = Dir::new("composite-policy");
    let policy = dir.write(
        "policy.cedar",
        r#"
permit(principal == ApiKey::"alice", action, resource);
permit(principal == ApiKey::"bob", action == Action::"list_tools", resource);
permit(principal == ApiKey::"bob", action == Action::"call_tool", resource == Tool::"greet");
"#,
    );
    let composite = r#"
  - name: greet
    steps:
      - id: first
        type: tool
        tool: alpha.echo
        arguments: {text: hi}
"#;
    let (yaml, audit) = config(&dir, composite);
    let yaml = format!("policy: {{file: {}}}\n{yaml}", policy.display());
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    // Listed to Bob as the policy judges its call (a composite has no backend origin).
    let auth = format!("Bearer {BOB}");
    let list = super::modern(
        &gw,
        json!(9),
        "tools/list",
        json!({}),
        &[("authorization", &auth)],
    )
    .await;
    let tools = list.json()["result"]["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["greet"], "{}", list.text);
    let bob = call_as(&gw, BOB, 1, "greet", json!({})).await;
    assert_eq!(bob.status, StatusCode::OK, "{}", bob.text);
    let result = bob.json()["result"].clone();
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("workflow `greet` failed: step `first` failed:"),
        "{text}"
    );
    let alice = call_as(&gw, ALICE, 2, "greet", json!({})).await;
    let result = alice.json()["result"].clone();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"]["first"]["text"], "hi",
        "{result}"
    );
    // Bob's inner call was refused on the ordinary path, and audited as his denial.
    let lines = audit_lines(&audit, |l| events(l, "workflow_finished").len() >= 2).await;
    let denied = lines.iter().any(|l| {
        l["method"] == "tools/call" && l["outcome"] == "denied" && l["principal"]["sub"] == "bob"
    });
    assert!(denied, "{lines:#?}");
}
