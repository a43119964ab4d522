//! A root gateway runs every sandboxed backend as the same `nobody`: each sandbox hides the
//! other backends' homes (a default one under /var/cache/switchboard/sandbox, a configured
//! one anywhere), so one backend cannot read what another keeps in its home. Each still has
//! its own at `/home/switchboard`.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{ready, Dir, HOSTILE, SB};
use crate::common::{tool_text, TestGateway};

/// A tool of backend `backend` (its answer text).
async fn tool(gw: &TestGateway, sid: &str, backend: &str, name: &str, args: Value) -> String {
    let r = gw
        .call_tool(Some(sid), json!(1), &format!("{backend}_{name}"), args)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert!(v.get("error").is_none(), "{backend}_{name}: {v}");
    tool_text(&v).to_owned()
}

/// Two sandboxed backends, `x` with the default home and `y` with a configured one: each
/// writes a marker to its home; neither lists nor reads the other's home at its host path
/// (nor finds it beside its own), and each still sees its own marker.
#[tokio::test]
async fn a_sandboxed_backend_cannot_see_another_backend_s_home() {
    if !ready("neighbours") {
        return;
    }
    let dir = Dir::new("neighbours");
    let x = format!("sbx{}", std::process::id());
    let y_home = dir.0.join("homes").join("y");
    // There before the gateway starts, as a home that outlives restarts is.
    std::fs::create_dir_all(&y_home).unwrap();
    // Where `x`'s default home is: as root /var/cache (backends run as nobody), else under
    // the gateway's home (which every sandbox masks anyway).
    let gateway_home = dir.0.join("gateway-home");
    std::fs::create_dir_all(&gateway_home).unwrap();
    let x_home = match switchboard_root() {
        true => std::path::PathBuf::from("/var/cache/switchboard/sandbox").join(&x),
        false => gateway_home.join(".cache/switchboard/sandbox").join(&x),
    };
    let yaml = format!(
        "aggregation: {{conflictResolution: prefix}}\nbackends:\n\
         \x20 - name: {x}\n    command: python3\n    args: [{HOSTILE}]\n\
         \x20   sandbox: {{memory: 256MiB}}\n\
         \x20 - name: y\n    command: python3\n    args: [{HOSTILE}]\n\
         \x20   sandbox: {{memory: 256MiB, home: {}}}\n",
        y_home.display()
    );
    let config = dir.write("sb.yaml", &yaml, 0o644);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"])
        .env("HOME", &gateway_home)
        .env_remove("XDG_CACHE_HOME")
        .current_dir(&dir.0);
    let gw = TestGateway::start_command(cmd).await;
    let sid = gw.session().await;

    for (b, marker) in [(x.as_str(), "x-marker"), ("y", "y-marker")] {
        let path = format!("/home/switchboard/{marker}");
        let w = tool(&gw, &sid, b, "write", json!({"path": path})).await;
        assert_eq!(w, "ok: written", "{b}");
        let own = tool(&gw, &sid, b, "read", json!({"path": "/home/switchboard"})).await;
        assert_eq!(own, format!(r#"ok: ["{marker}"]"#), "{b} sees its own home");
    }
    // On the host, both markers are there.
    assert!(x_home.join("x-marker").is_file());
    assert!(y_home.join("y-marker").is_file());

    let pairs = [
        ("y", &x_home, "x-marker"),
        (x.as_str(), &y_home, "y-marker"),
    ];
    for (reader, home, marker) in pairs {
        let listed = tool(&gw, &sid, reader, "read", json!({"path": home})).await;
        assert!(
            !listed.contains(marker),
            "{reader} listed {home:?}: {listed}"
        );
        let file = home.join(marker);
        let read = tool(&gw, &sid, reader, "read", json!({"path": file})).await;
        assert!(read.starts_with("error:"), "{reader} read {file:?}: {read}");
        let parent = home.parent().unwrap();
        let beside = tool(&gw, &sid, reader, "read", json!({"path": parent})).await;
        let name = home.file_name().unwrap().to_str().unwrap();
        assert!(
            !beside.contains(&format!("\"{name}\"")),
            "{reader} listed {parent:?}: {beside}"
        );
    }
    drop(gw);
    if switchboard_root() {
        let _ = std::fs::remove_dir_all(&x_home);
    }
}

/// Whether the tests (and so the gateway they start) run as root.
fn switchboard_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
