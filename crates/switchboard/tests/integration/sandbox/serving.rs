//! A sandboxed backend serves as it would unsandboxed (lists and calls, both eras), every
//! process of it is sandboxed (the shared one, each Legacy session's own, each Modern
//! partition's), and a host that cannot sandbox refuses to start, naming the fix.

use std::path::Path;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{ready, Dir, ENV_SENTINEL, SB};
use crate::common::{tool_text, TestGateway};

/// `serve` of the sandboxed fixture (and a plain one beside it, so names are prefixed), with
/// `MARK` in its configured environment and the sentinel in the gateway's.
async fn fixture(dir: &Dir, isolation: &str, mark: &str, era: &str) -> TestGateway {
    let yaml = format!(
        "sandbox: on\naggregation: {{conflictResolution: prefix}}\nbackends:\n\
         \x20 - name: boxed\n    command: {SB}\n    args: [fixture, --era, {era}]\n\
         \x20   isolation: {isolation}\n\
         \x20   env: {{SB_IT_MARK: {mark}}}\n\
         \x20 - name: plain\n    command: {SB}\n    args: [fixture]\n    sandbox: off\n"
    );
    let config = dir.write("sb.yaml", &yaml, 0o644);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"])
        .env("SB_IT_SECRET", ENV_SENTINEL);
    TestGateway::start_command(cmd).await
}

/// Host processes whose environment holds `SB_IT_MARK=mark`: each must be sandboxed (the
/// sandbox's HOME, none of the gateway's variables, as nobody when the tests run as root).
fn marked_processes(mark: &str) -> usize {
    let needle = format!("SB_IT_MARK={mark}");
    let mut found = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let vars: Vec<String> = environ
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if !vars.contains(&needle) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let fixture = format!("{SB}\0fixture\0");
        if !cmdline.starts_with(fixture.as_bytes()) {
            // The sandbox's own bwrap processes carry the same environment.
            continue;
        }
        found += 1;
        assert!(
            vars.iter().any(|v| v == "HOME=/home/switchboard"),
            "{vars:?}"
        );
        assert!(!vars.iter().any(|v| v.contains(ENV_SENTINEL)), "{vars:?}");
        if switchboard_runs_as_root() {
            let status = std::fs::read_to_string(entry.path().join("status")).unwrap();
            assert!(status.contains("Uid:\t65534\t65534"), "{status}");
        }
    }
    found
}

fn switchboard_runs_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

async fn call(gw: &TestGateway, sid: Option<&str>, tool: &str, args: Value) -> String {
    let r = gw.call_tool(sid, json!(tool), tool, args).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    tool_text(&r.json()).to_owned()
}

/// Lists and calls reach a sandboxed backend as they reach any other, Legacy and Modern.
#[tokio::test]
async fn a_sandboxed_backend_serves_lists_and_calls_in_both_eras() {
    if !ready("serves") {
        return;
    }
    let dir = Dir::new("serves");
    let mark = format!("serves-{}", std::process::id());
    let gw = fixture(&dir, "shared", &mark, "dual").await;
    assert!(
        gw.startup
            .iter()
            .any(|l| l.starts_with("switchboard: backend boxed sandboxed: bubblewrap")),
        "{:?}",
        gw.startup
    );
    let sid = gw.session().await;
    let list = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    let names: Vec<String> = list.json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"boxed_echo".to_owned()), "{names:?}");
    let said = call(&gw, Some(&sid), "boxed_echo", json!({"text": "hi"})).await;
    assert_eq!(said, "hi");
    let home = call(&gw, Some(&sid), "boxed_env", json!({"name": "HOME"})).await;
    assert_eq!(home, "/home/switchboard");
    let plain = call(
        &gw,
        Some(&sid),
        "plain_env",
        json!({"name": "SB_IT_SECRET"}),
    )
    .await;
    assert_eq!(
        plain, ENV_SENTINEL,
        "the unsandboxed one inherits, as before"
    );
    let params = json!({"name": "boxed_echo", "arguments": {"text": "modern"}});
    let r = crate::vmcp::modern(&gw, json!(2), "tools/call", params, &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&r.json()), "modern");
    assert_eq!(marked_processes(&mark), 1);
}

/// Per-session isolation (a Legacy-only backend, so Modern callers get a partition): each
/// Legacy session's own process and each Modern partition's are started the same way as the
/// shared one, so each is sandboxed.
#[tokio::test]
async fn per_session_processes_and_modern_partitions_are_sandboxed() {
    if !ready("per-session") {
        return;
    }
    let dir = Dir::new("per-session");
    let mark = format!("per-session-{}", std::process::id());
    let gw = fixture(&dir, "per-session", &mark, "legacy").await;
    assert_eq!(marked_processes(&mark), 1, "the shared one");
    let sid = gw.session().await;
    let home = call(&gw, Some(&sid), "boxed_env", json!({"name": "HOME"})).await;
    assert_eq!(home, "/home/switchboard");
    assert_eq!(marked_processes(&mark), 2, "and the session's own");
    let params = json!({"name": "boxed_env", "arguments": {"name": "SB_IT_SECRET"}});
    let r = crate::vmcp::modern(&gw, json!(2), "tools/call", params, &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&r.json()), "");
    assert_eq!(marked_processes(&mark), 3, "and the Modern partition's");
}

async fn switchboard(args: &[&str], path: &str, cwd: &Path) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(args)
        .env("PATH", path)
        .current_dir(cwd)
        .kill_on_drop(true);
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), cmd.output())
        .await
        .expect("finished within 30 s")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// No bubblewrap on the gateway's PATH: `validate` and `serve` refuse, naming the package
/// and the opt-out (never a silent fallback to an unsandboxed backend). Needs no bwrap.
#[tokio::test]
async fn without_bubblewrap_the_gateway_refuses_to_start_naming_the_fix() {
    let dir = Dir::new("no-bwrap");
    let yaml = format!(
        "backends:\n  - name: boxed\n    command: {SB}\n    args: [fixture]\n    sandbox: on\n"
    );
    let config = dir.write("sb.yaml", &yaml, 0o644);
    let path = config.to_str().unwrap();
    for args in [
        &["validate", "--config", path][..],
        &["serve", "--config", path, "--port", "0"][..],
    ] {
        let (ok, text) = switchboard(args, "/nonexistent", &dir.0).await;
        assert!(!ok, "{args:?}: {text}");
        assert!(
            text.contains("backends[0].sandbox: bwrap is not installed")
                && text.contains("apt-get install bubblewrap")
                && text.contains("`sandbox: off`"),
            "{args:?}: {text}"
        );
        assert!(!text.contains("listening on"), "{text}");
    }
}

/// What the sandbox cannot honour is refused by `validate` with its path: an allow-list
/// entry that is not `host:port` (a wildcard, a missing port), a command the sandbox hides,
/// a listed path that does not exist.
#[tokio::test]
async fn validate_refuses_what_the_sandbox_cannot_honour() {
    if !ready("refusals") {
        return;
    }
    let dir = Dir::new("refusals");
    let yaml = format!(
        "backends:\n\
         \x20 - name: a\n    command: {SB}\n    args: [fixture]\n\
         \x20   sandbox: {{network: {{allow: [\"api.github.com:443\", \"*.github.com:443\", \"x.com\"]}}}}\n\
         \x20 - name: b\n    command: /root/bin/server\n    sandbox: {{memory: 1GiB}}\n\
         \x20 - name: c\n    command: {SB}\n    sandbox: {{filesystem: {{read: [/no/such/dir]}}}}\n"
    );
    let config = dir.write("sb.yaml", &yaml, 0o644);
    let own_path = std::env::var("PATH").unwrap();
    let args = ["validate", "--config", config.to_str().unwrap()];
    let (ok, text) = switchboard(&args, &own_path, &dir.0).await;
    assert!(!ok, "{text}");
    for expected in [
        "backends[0].sandbox.network.allow[1]: `*.github.com:443`: the host must be",
        "backends[0].sandbox.network.allow[2]: `x.com`: expected host:port",
        "backends[1].command: /root/bin/server is hidden in the sandbox (under /root)",
        "backends[2].sandbox.filesystem.read[0]: does not exist",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
}
