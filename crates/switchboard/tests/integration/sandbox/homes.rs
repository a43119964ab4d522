//! A sandboxed per-session backend's processes each get a home of their own, a tmpfs inside
//! their sandbox: what one caller's process writes to `$HOME` or its working directory,
//! another caller's process does not see; each starts from a copy of the backend's home (its
//! warm caches, read-only at the seed's place); nothing of it lands on the host; and a write
//! past its bound fails with ENOSPC.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{ready, Dir, HOSTILE, SB};
use crate::common::{tool_text, TestGateway};

const ALICE: &str = "alice-sandbox-homes-key-0123456789";
const BOB: &str = "bob-sandbox-homes-key-0123456789";

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// A Legacy session of `key`'s principal.
async fn session_as(gw: &TestGateway, key: &str) -> String {
    let auth = bearer(key);
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name":"it","version":"0"}}});
    let r = gw
        .post_raw(None, init.to_string(), &[("authorization", &auth)])
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let done = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    let r = gw
        .post_raw(Some(&sid), done.to_string(), &[("authorization", &auth)])
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    sid
}

/// A hostile tool's answer, on `sid` (Legacy) or as a Modern request (None).
async fn tool(gw: &TestGateway, key: &str, sid: Option<&str>, name: &str, args: Value) -> String {
    let auth = bearer(key);
    let params = json!({"name": format!("hostile_{name}"), "arguments": args});
    let r = match sid {
        Some(sid) => {
            let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":params});
            gw.post_raw(Some(sid), body.to_string(), &[("authorization", &auth)])
                .await
        }
        None => {
            crate::vmcp::modern(
                gw,
                json!(1),
                "tools/call",
                params,
                &[("authorization", &auth)],
            )
            .await
        }
    };
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert!(v.get("error").is_none(), "{name}: {v}");
    tool_text(&v).to_owned()
}

/// Every entry under `dir` (links not followed) with its size and modification time.
fn tree(dir: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = std::fs::symlink_metadata(entry.path()).unwrap();
        out.push((entry.path(), meta.len(), meta.modified().ok()));
        if meta.is_dir() {
            out.extend(tree(&entry.path()));
        }
    }
    out.sort();
    out
}

/// Two principals on a sandboxed per-session backend (and a Modern partition of the
/// first): the first's process writes a marker to its `$HOME` and one to its working
/// directory; the second's process sees neither (only its own sentinel and the copy of the
/// backend's home), nor the backend's home at its host path; the first fills its home up
/// to the bound (`memory`) and no further; and on the host nothing under the backend's
/// home or beside it changed, while the processes ran and after the first's session is
/// deleted.
#[tokio::test]
async fn each_caller_s_process_has_a_bounded_home_of_its_own_inside_its_sandbox() {
    if !ready("homes") {
        return;
    }
    let dir = Dir::new("homes");
    let home = dir.0.join("backend-home");
    dir.write("backend-home/cache/warm.txt", "cached", 0o644);
    let yaml = format!(
        "auth:\n  apiKeys:\n    - {{name: alice, key: {ALICE}}}\n    - {{name: bob, key: {BOB}}}\n\
         aggregation: {{conflictResolution: prefix}}\nbackends:\n\
         \x20 - name: hostile\n    command: python3\n    args: [{HOSTILE}]\n\
         \x20   isolation: per-session\n\
         \x20   sandbox: {{home: {}, memory: 256MiB, pids: 32}}\n\
         \x20 - name: fixture\n    command: {SB}\n    args: [fixture]\n",
        home.display()
    );
    let config = dir.write("sb.yaml", &yaml, 0o644);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"])
        .current_dir(&dir.0);
    let gw = TestGateway::start_command(cmd).await;
    // The backend's home and what is beside it, once the gateway has started.
    let host = tree(&dir.0);

    let alice = session_as(&gw, ALICE).await;
    let me: Value =
        serde_json::from_str(&tool(&gw, ALICE, Some(&alice), "whoami", json!({})).await).unwrap();
    assert_eq!(
        me["cwd"], "/home/switchboard",
        "the cwd defaults to the home"
    );
    for path in ["/home/switchboard/alice-home-marker", "alice-cwd-marker"] {
        let w = tool(&gw, ALICE, Some(&alice), "write", json!({"path": path})).await;
        assert_eq!(w, "ok: written", "{path}");
    }
    let w = tool(
        &gw,
        ALICE,
        None,
        "write",
        json!({"path": "alice-modern-marker"}),
    )
    .await;
    assert_eq!(w, "ok: written", "the Modern partition's");
    let listed = tool(&gw, ALICE, Some(&alice), "read", json!({"path": "."})).await;
    assert_eq!(
        listed, r#"ok: ["alice-cwd-marker", "alice-home-marker", "cache"]"#,
        "the session's own, not the partition's"
    );
    // A sessionless Legacy request runs on the backend's shared process: what it writes stays
    // in that process's own home, never in the seed of the processes started after it (Bob's
    // below). Before, the shared process wrote the backend's home itself.
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "name": "hostile_write", "arguments": {"path": "/home/switchboard/sessionless-marker"}}});
    let r = (gw.post_raw(None, body.to_string(), &[("authorization", &bearer(ALICE))])).await;
    assert_eq!(tool_text(&r.json()), "ok: written", "{}", r.text);

    let bob = session_as(&gw, BOB).await;
    let w = tool(
        &gw,
        BOB,
        Some(&bob),
        "write",
        json!({"path": "bob-sentinel"}),
    )
    .await;
    assert_eq!(w, "ok: written");
    for path in ["/home/switchboard", "."] {
        let listed = tool(&gw, BOB, Some(&bob), "read", json!({"path": path})).await;
        assert_eq!(listed, r#"ok: ["bob-sentinel", "cache"]"#, "{path}");
    }
    let warm = tool(
        &gw,
        BOB,
        Some(&bob),
        "read",
        json!({"path": "cache/warm.txt"}),
    )
    .await;
    assert_eq!(warm, "ok: cached", "a copy of the backend's home");
    let listed = tool(&gw, BOB, Some(&bob), "read", json!({"path": &home})).await;
    assert_eq!(listed, "ok: []", "masked at its host path");
    let seed = "/run/switchboard/seed";
    let listed = tool(&gw, BOB, Some(&bob), "read", json!({"path": seed})).await;
    assert_eq!(listed, r#"ok: ["cache"]"#, "the seed: the backend's home");
    let w = tool(
        &gw,
        BOB,
        Some(&bob),
        "write",
        json!({"path": format!("{seed}/bob-was-here")}),
    )
    .await;
    assert!(w.contains("Read-only file system"), "{w}");

    // The home holds at most `memory` (256 MiB).
    let said = tool(
        &gw,
        ALICE,
        Some(&alice),
        "fill",
        json!({"path": "/home/switchboard/fill", "mib": 400}),
    )
    .await;
    let v: Value = serde_json::from_str(&said).unwrap();
    let wrote = v["mib"].as_u64().unwrap();
    assert!(wrote > 0 && wrote <= 256, "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.contains("No space left on device"), "{v}");

    assert_eq!(tree(&dir.0), host, "nothing of the callers' on the host");
    let r = gw
        .http
        .delete(&gw.url)
        .header("mcp-session-id", &alice)
        .header("authorization", bearer(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    // DELETE answers once the session's process has ended: nothing was left to remove.
    assert_eq!(tree(&dir.0), host, "nothing left behind");
    let listed = tool(&gw, BOB, Some(&bob), "read", json!({"path": "."})).await;
    assert_eq!(
        listed, r#"ok: ["bob-sentinel", "cache"]"#,
        "bob's is still his"
    );
}
