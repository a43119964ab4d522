//! The reference servers `@modelcontextprotocol/server-filesystem` and `server-everything`
//! (npm, pinned, installed beforehand by `scripts/install-test-clients.sh servers`: the
//! sandbox has no network) sandboxed through `serve`: lists and calls answer as they would
//! unsandboxed, a read inside the bound path works, and a read outside it fails because the
//! sandbox hides the file, not because the server refuses it: the server is given the
//! *parent* of the bound directory as its allowed directory, and the same server with the same
//! arguments unsandboxed beside it reads that file.
//!
//! Opt-in like the other npm tests (`SWITCHBOARD_NPX_TESTS=1`; `scripts/test.sh` sets it),
//! since the install fetches the packages from the npm registry.

use std::path::{Path, PathBuf};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{ready, Dir, SB};
use crate::common::{tool_text, TestGateway};

const INSIDE: &str = "sb-it-inside-sentinel-4d02";
const OUTSIDE: &str = "sb-it-outside-sentinel-e71b";

/// The `node_modules` directories of server-filesystem and server-everything.
async fn installed() -> (PathBuf, PathBuf) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = tokio::process::Command::new("bash")
        .arg(format!("{root}/scripts/install-test-clients.sh"))
        .arg("servers")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "installing the reference servers failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines().map(PathBuf::from);
    (lines.next().unwrap(), lines.next().unwrap())
}

fn entry(modules: &Path, package: &str) -> String {
    modules
        .join("@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
        .display()
        .to_string()
}

/// Tool names of `tools/list`.
async fn tool_names(gw: &TestGateway, sid: &str) -> Vec<String> {
    let list = gw
        .post(
            Some(sid),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.text);
    list.json()["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {}", list.text))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A tool's first text, and whether it is a tool error.
async fn call(gw: &TestGateway, sid: &str, tool: &str, args: Value) -> (String, bool) {
    let r = gw.call_tool(Some(sid), json!(tool), tool, args).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert!(v.get("error").is_none(), "{tool}: {v}");
    let is_error = v["result"]["isError"].as_bool().unwrap_or(false);
    (tool_text(&v).to_owned(), is_error)
}

#[tokio::test]
async fn reference_servers_work_sandboxed_and_the_sandbox_hides_what_the_server_allows() {
    if std::env::var_os("SWITCHBOARD_NPX_TESTS").is_none() {
        eprintln!("sandboxed reference servers test not enabled (set SWITCHBOARD_NPX_TESTS=1; scripts/test.sh does)");
        return;
    }
    if !ready("servers") {
        return;
    }
    let (fs_modules, everything_modules) = installed().await;
    // The server's allowed directory: under /tmp, which every sandbox replaces by a private
    // one, so inside only what is bound exists (bubblewrap makes the bound path's parents).
    let allowed = PathBuf::from(format!("/tmp/sb-sandbox-servers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&allowed);
    std::fs::create_dir_all(allowed.join("shared")).unwrap();
    let allowed = Dir(allowed);
    let inside = allowed.write("shared/inside.txt", INSIDE, 0o644);
    let outside = allowed.write("outside.txt", OUTSIDE, 0o644);
    let dir = Dir::new("servers");
    let fs = entry(&fs_modules, "server-filesystem");
    let root = allowed.0.display();
    let yaml = format!(
        "aggregation: {{conflictResolution: prefix}}\nbackends:\n\
         \x20 - name: files\n    command: node\n    args: [{fs}, {root}]\n\
         \x20   sandbox:\n      filesystem: {{read: [{root}/shared, {}]}}\n\
         \x20 - name: plain\n    command: node\n    args: [{fs}, {root}]\n    sandbox: off\n\
         \x20 - name: everything\n    command: node\n    args: [{}]\n\
         \x20   sandbox:\n      filesystem: {{read: [{}]}}\n",
        fs_modules.display(),
        entry(&everything_modules, "server-everything"),
        everything_modules.display(),
    );
    let config = dir.write("sb.yaml", &yaml, 0o644);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"])
        .current_dir(&dir.0);
    let gw = TestGateway::start_command(cmd).await;
    for name in ["files", "everything"] {
        let line = format!("switchboard: backend {name} sandboxed: bubblewrap");
        assert!(
            gw.startup.iter().any(|l| l.starts_with(&line)),
            "{name}: {:?}",
            gw.startup
        );
    }
    let sid = gw.session().await;

    let names = tool_names(&gw, &sid).await;
    for tool in [
        "files_read_text_file",
        "files_list_directory",
        "everything_echo",
    ] {
        assert!(names.iter().any(|n| n == tool), "{tool} in {names:?}");
    }
    let (echo, _) = call(&gw, &sid, "everything_echo", json!({"message": "boxed"})).await;
    assert_eq!(echo, "Echo: boxed");
    let resources = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list"}),
        )
        .await;
    let listed = resources.json()["result"]["resources"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(listed > 0, "{}", resources.text);

    // The server allows the whole directory, the file outside the bound child included.
    let (dirs, _) = call(&gw, &sid, "files_list_allowed_directories", json!({})).await;
    assert!(dirs.contains(&root.to_string()), "{dirs}");
    let (read, error) = call(&gw, &sid, "files_read_text_file", json!({"path": inside})).await;
    assert!(!error && read == INSIDE, "{read}");
    // Outside the bound path but inside the server's allowed one: the file does not exist in
    // the sandbox (the server did not refuse it: no "Access denied").
    let (read, error) = call(&gw, &sid, "files_read_text_file", json!({"path": outside})).await;
    assert!(error, "{read}");
    assert!(read.contains("ENOENT"), "{read}");
    assert!(
        !read.contains(OUTSIDE) && !read.contains("Access denied"),
        "{read}"
    );
    let (listing, _) = call(
        &gw,
        &sid,
        "files_list_directory",
        json!({"path": root.to_string()}),
    )
    .await;
    assert!(
        listing.contains("shared") && !listing.contains("outside.txt"),
        "{listing}"
    );
    // The same server with the same arguments, unsandboxed, reads it: the refusal above is the
    // sandbox's.
    let (read, error) = call(&gw, &sid, "plain_read_text_file", json!({"path": outside})).await;
    assert!(!error && read == OUTSIDE, "{read}");
    // Outside what the server allows: refused by the server itself, sandbox or not.
    let (read, error) = call(
        &gw,
        &sid,
        "files_read_text_file",
        json!({"path": "/etc/hostname"}),
    )
    .await;
    assert!(error && read.contains("Access denied"), "{read}");
    // Still serving after the refusals.
    let (echo, _) = call(&gw, &sid, "everything_echo", json!({"message": "after"})).await;
    assert_eq!(echo, "Echo: after");
}
