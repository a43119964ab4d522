//! What a backend can take of the host beyond its own processes: its scratch tmpfs' memory
//! (bounded together: a write past a bound fails with ENOSPC while the gateway serves on;
//! `/dev` and the other masks are read-only), a user namespace of its own (none)
//! and the gateway's file descriptors (a backend, sandboxed or not, holds only 0, 1 and 2,
//! even of what the gateway itself inherited without close-on-exec).

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{ready, Dir, HOSTILE, SB};
use crate::common::{tool_text, TestGateway};

/// `hostile` sandboxed (256 MiB of memory) and `plain` (the same script, unsandboxed),
/// served by a gateway started holding descriptor 7 without close-on-exec, as a careless
/// supervisor or shell would hand it one.
async fn gateway(dir: &Dir) -> TestGateway {
    let yaml = format!(
        "aggregation: {{conflictResolution: prefix}}\nbackends:\n\
         \x20 - name: hostile\n    command: python3\n    args: [{HOSTILE}]\n\
         \x20   sandbox: {{memory: 256MiB, pids: 32}}\n\
         \x20 - name: plain\n    command: python3\n    args: [{HOSTILE}]\n    sandbox: off\n"
    );
    let config = dir.write("sb.yaml", &yaml, 0o644);
    let mut cmd = tokio::process::Command::new("sh");
    cmd.args(["-c", r#"exec 7</dev/null; exec "$0" "$@""#, SB])
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"])
        .current_dir(&dir.0);
    TestGateway::start_command(cmd).await
}

async fn tool(gw: &TestGateway, sid: &str, name: &str, args: Value) -> String {
    let r = gw.call_tool(Some(sid), json!(name), name, args).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert!(v.get("error").is_none(), "{name}: {v}");
    tool_text(&v).to_owned()
}

#[tokio::test]
async fn a_backend_holds_no_descriptor_of_the_gateway_s() {
    if !ready("fds") {
        return;
    }
    let dir = Dir::new("fds");
    let gw = gateway(&dir).await;
    let held = std::fs::read_link(format!("/proc/{}/fd/7", gw.pid()));
    assert!(held.is_ok(), "the gateway holds descriptor 7");
    let sid = gw.session().await;
    for backend in ["hostile", "plain"] {
        let fds = tool(&gw, &sid, &format!("{backend}_fds"), json!({})).await;
        let fds: Value = serde_json::from_str(&fds).unwrap();
        let open: Vec<&str> = fds
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(open, ["0", "1", "2"], "{backend}: {fds}");
    }
}

#[tokio::test]
async fn a_backend_filling_its_tmp_stops_at_the_bound_and_the_gateway_serves_on() {
    if !ready("tmpfs") {
        return;
    }
    let dir = Dir::new("tmpfs");
    let gw = gateway(&dir).await;
    let sid = gw.session().await;
    // /tmp, /var/tmp and /dev/shm share `memory` (256 MiB: six eighths, one, one).
    let bounded = [
        ("/tmp/fill", 400, 192),
        ("/var/tmp/fill", 400, 32),
        ("/dev/shm/fill", 400, 32),
    ];
    for (path, tried, bound) in bounded {
        let said = tool(
            &gw,
            &sid,
            "hostile_fill",
            json!({"path": path, "mib": tried}),
        )
        .await;
        let v: Value = serde_json::from_str(&said).unwrap();
        let wrote = v["mib"].as_u64().unwrap();
        assert!(wrote <= bound, "{path}: {v}");
        assert!(wrote > 0, "{path}: it may use the space: {v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains("No space left on device"), "{path}: {v}");
    }
    // Filled together, and kept, they hold no more than `memory` of the host's memory.
    let mut held = 0;
    for path in ["/tmp/keep", "/var/tmp/keep", "/dev/shm/keep"] {
        let args = json!({"path": path, "mib": 400, "keep": true});
        let v: Value = serde_json::from_str(&tool(&gw, &sid, "hostile_fill", args).await).unwrap();
        assert!(v["mib"].as_u64().unwrap() > 0, "{path}: {v}");
        held += v["mib"].as_u64().unwrap();
    }
    assert!(held <= 256, "the scratch tmpfs hold {held} MiB together");
    for path in ["/tmp/keep", "/var/tmp/keep", "/dev/shm/keep"] {
        tool(&gw, &sid, "hostile_fill", json!({"path": path, "mib": 0})).await;
    }
    // bubblewrap's /dev is a tmpfs of its own, and the masks meant to stay empty (/run,
    // /home, /root) are tmpfs: read-only, so nothing fills them (before, the masks held
    // 16 MiB each, outside the budget; review LOW).
    for path in ["/dev/fill", "/run/fill", "/home/fill", "/root/fill"] {
        let args = json!({"path": path, "mib": 64});
        let v: Value = serde_json::from_str(&tool(&gw, &sid, "hostile_fill", args).await).unwrap();
        assert_eq!(v["mib"], 0, "{path}: {v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains("Read-only file system"), "{path}: {v}");
    }
    let null = tool(&gw, &sid, "hostile_write", json!({"path": "/dev/null"})).await;
    assert_eq!(null, "ok: written", "its devices still work");
    let me = tool(&gw, &sid, "hostile_whoami", json!({})).await;
    assert!(me.contains("\"uid\""), "the backend lives on: {me}");
    let fine = tool(&gw, &sid, "plain_whoami", json!({})).await;
    assert!(fine.contains("\"uid\""), "and so does the other: {fine}");
}

/// A sandboxed backend cannot make a user namespace of its own, where it could mount a
/// tmpfs of any size (its memory counted against no bound) and reach kernel code only a
/// namespace's root may; the same script unsandboxed can (so the refusal is the sandbox's).
/// Before, `unshare -Urm` inside worked (review MEDIUM).
#[tokio::test]
async fn a_backend_cannot_make_a_user_namespace_of_its_own() {
    if !ready("userns") {
        return;
    }
    let dir = Dir::new("userns");
    let gw = gateway(&dir).await;
    let sid = gw.session().await;
    let inside: Value =
        serde_json::from_str(&tool(&gw, &sid, "hostile_userns", json!({})).await).unwrap();
    assert_eq!(inside["rc"], -1, "{inside}");
    let outside: Value =
        serde_json::from_str(&tool(&gw, &sid, "plain_userns", json!({})).await).unwrap();
    assert_eq!(outside["rc"], 0, "{outside}");
}
