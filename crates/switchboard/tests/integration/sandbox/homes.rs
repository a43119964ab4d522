//! A sandboxed per-session backend's processes each get a home of their own: what one
//! caller's process writes to `$HOME` or its working directory, another caller's process
//! does not see; each starts from a copy of the backend's home (its warm caches); and a
//! session's home is gone once the session is.

use std::path::{Path, PathBuf};

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

/// The private homes on the host now, each with its entries.
fn private_homes(sessions: &Path) -> Vec<(PathBuf, Vec<String>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(sessions).unwrap().flatten() {
        let mut names: Vec<String> = std::fs::read_dir(entry.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        out.push((entry.path(), names));
    }
    out
}

/// Two principals on a sandboxed per-session backend (and a Modern partition of the
/// first): the first's process writes a marker to its `$HOME` and one to its working
/// directory; the second's process sees neither (only its own sentinel and the copy of the
/// backend's home), nor does the backend's home; after the first's session is deleted (the
/// DELETE waits for its process to end, and its home is removed right after), its home is
/// gone while the second's is still there.
#[tokio::test]
async fn each_caller_s_process_has_a_home_of_its_own_removed_with_it() {
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

    let mut sessions = home.clone().into_os_string();
    sessions.push(".sessions");
    let sessions = PathBuf::from(sessions);
    let homes = private_homes(&sessions);
    let with = |name: &str| {
        homes
            .iter()
            .find(|(_, names)| names.iter().any(|n| n == name))
            .map(|(p, _)| p.clone())
            .unwrap_or_else(|| panic!("no private home holds {name}: {homes:?}"))
    };
    let alice_home = with("alice-home-marker");
    assert_eq!(alice_home, with("alice-cwd-marker"));
    let bob_home = with("bob-sentinel");
    assert_ne!(alice_home, with("alice-modern-marker"), "a partition's own");
    assert_ne!(alice_home, bob_home);
    for hidden in [&home, &sessions] {
        let listed = tool(&gw, BOB, Some(&bob), "read", json!({"path": hidden})).await;
        assert_eq!(listed, "ok: []", "masked: {}", hidden.display());
    }
    let backend_home: Vec<String> = std::fs::read_dir(&home)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(backend_home, ["cache"], "the backend's home is untouched");
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::metadata(&alice_home).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        if std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
            assert_eq!(meta.uid(), 65534, "owned by the sandbox's user");
        }
    }

    let r = gw
        .http
        .delete(&gw.url)
        .header("mcp-session-id", &alice)
        .header("authorization", bearer(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    // DELETE answers once the session's process has ended; its home is removed right after
    // (off the runtime): bounded, on the condition.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while alice_home.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "alice's home outlived her session"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(bob_home.join("bob-sentinel").exists(), "bob's is still his");
}
