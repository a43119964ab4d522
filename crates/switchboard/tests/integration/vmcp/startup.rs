//! One backend that does not start stops only itself: `serve` starts with the others, shows
//! the missing ones in `/status`, leaves them out of lists, retries them, and lets each join
//! (with a `list_changed`) once it answers.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

use super::{call_text, remote, serve, stdio, tool_names, Era};
use crate::common::Listener;
use crate::fixture_http::FixtureHttp;

const SECRET: &str = "sb-static-remote-secret-0123456789";

/// `backends/refusing_http.py`: every request answered 401 quoting its `Authorization`.
async fn refusing() -> (tokio::process::Child, u16) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/refusing_http.py"
    );
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let port = line.strip_prefix("listening on ").unwrap().parse().unwrap();
    (child, port)
}

/// A loopback port that refuses connections and that no other test can take meanwhile: a
/// socket bound to it without listening (a released port 0 could be anyone's by the time the
/// gateway dials it). Dropped, the port is free again.
struct RefusingPort {
    _socket: rustix::fd::OwnedFd,
    port: u16,
}

fn refusing_port() -> RefusingPort {
    use rustix::net::{bind, getsockname, socket_with, AddressFamily, SocketFlags, SocketType};
    // Close-on-exec: a child process (the refusing remote, a fixture) must not keep it bound.
    let socket = socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    bind(
        &socket,
        &std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0),
    )
    .unwrap();
    let bound: std::net::SocketAddrV4 = getsockname(&socket).unwrap().try_into().unwrap();
    RefusingPort {
        _socket: socket,
        port: bound.port(),
    }
}

async fn status(gw: &crate::common::TestGateway) -> Value {
    let r = gw
        .http
        .get(format!("{}/status", gw.base()))
        .send()
        .await
        .unwrap();
    r.json().await.unwrap()
}

fn entry<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {status}"))
}

/// Waits (bounded) until the Legacy session lists `tool`.
async fn until_listed(gw: &crate::common::TestGateway, sid: &str, tool: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if tool_names(gw, Era::Legacy, Some(sid))
            .await
            .iter()
            .any(|t| t == tool)
        {
            return;
        }
        assert!(Instant::now() < deadline, "{tool} never joined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_without_an_unreachable_and_a_refusing_remote_and_picks_both_up() {
    let down = refusing_port();
    let down_port = down.port;
    let (locked, locked_port) = refusing().await;
    let yaml = format!(
        "backends:\n{}{}{}    headers: {{Authorization: \"Bearer {SECRET}\"}}\n",
        stdio("local", ""),
        remote("down", &format!("http://127.0.0.1:{down_port}/mcp")),
        remote("locked", &format!("http://127.0.0.1:{locked_port}/mcp")),
    );
    let served = serve("startup-missing", &yaml, None).await;
    let gw = &served.gw;

    // Serving the one that started, in both eras; the others are shown, not listed.
    let sid = gw.session().await;
    for era in [Era::Legacy, Era::Modern] {
        let sid = (era == Era::Legacy).then_some(sid.as_str());
        let names = tool_names(gw, era, sid).await;
        assert!(names.iter().any(|t| t == "echo"), "{era:?}: {names:?}");
        assert!(!names
            .iter()
            .any(|t| t.starts_with("down_") || t.starts_with("locked_")));
        assert_eq!(
            call_text(gw, era, sid, "echo", json!({"text": "hi"})).await,
            "hi"
        );
    }
    let s = status(gw).await;
    assert_eq!(entry(&s, "down")["state"], "unhealthy", "{s}");
    assert_eq!(
        entry(&s, "down")["lastError"]["message"],
        "failed to start: remote unreachable"
    );
    assert_eq!(entry(&s, "locked")["state"], "unauthenticated", "{s}");
    assert_eq!(
        entry(&s, "locked")["lastError"]["message"],
        "failed to start: remote answered HTTP 401"
    );
    assert_eq!(entry(&s, "local")["state"], "healthy", "{s}");

    // The unreachable one comes up: it joins, announced to the session.
    let mut listener = Listener::open(gw, &sid, None).await;
    drop(down);
    let _down = FixtureHttp::start_at(down_port, &[]).await;
    let changed = listener.next().await;
    assert_eq!(changed.data["method"], "notifications/tools/list_changed");
    until_listed(gw, &sid, "down_echo").await;
    assert_eq!(
        call_text(
            gw,
            Era::Legacy,
            Some(&sid),
            "down_echo",
            json!({"text": "d"})
        )
        .await,
        "d"
    );

    // The refusing one starts accepting: it joins too.
    // Killed and reaped before its port is taken again: dropped, it was only signalled, and
    // could still hold the port when the fixture bound it ("fixture exited before listening").
    let mut locked = locked;
    locked.kill().await.unwrap();
    let _locked = FixtureHttp::start_at(locked_port, &[]).await;
    until_listed(gw, &sid, "locked_echo").await;
    assert_eq!(
        call_text(gw, Era::Modern, None, "locked_echo", json!({"text": "l"})).await,
        "l"
    );
    let s = status(gw).await;
    assert_eq!(entry(&s, "locked")["state"], "healthy", "{s}");
    assert!(s["ready"].as_bool().unwrap(), "{s}");

    // The refusing remote's body quoted the configured secret: it reached no log or output.
    let logs = gw.stderr.lock().clone();
    assert!(!logs.contains(SECRET), "the secret reached the logs");
    assert!(!s.to_string().contains(SECRET));
}

/// A backend that never started and is then removed from the file is forgotten: `/status`
/// no longer shows it and `/readyz` (ready when all serve) is ready again (found by review:
/// it stayed missing, shown and retried forever).
#[tokio::test]
async fn a_missing_backend_removed_from_the_file_is_forgotten() {
    let down = refusing_port();
    let down_port = down.port;
    let with = |down: bool| {
        let mut yaml = format!(
            "health: {{readyWhen: all}}\nbackends:\n{}",
            stdio("local", "")
        );
        if down {
            yaml.push_str(&remote(
                "down",
                &format!("http://127.0.0.1:{down_port}/mcp"),
            ));
        }
        yaml
    };
    let served = serve("startup-forgotten", &with(true), None).await;
    let gw = &served.gw;
    let ready = |gw: &crate::common::TestGateway| {
        let url = format!("{}/readyz", gw.base());
        let http = gw.http.clone();
        async move { http.get(url).send().await.unwrap().status() }
    };
    assert_eq!(ready(gw).await, reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(entry(&status(gw).await, "down")["state"], "unhealthy");

    crate::reload::rewrite(&crate::reload::config_of(&served._dir), &with(false));
    // Bounded: the watcher, or a retry that read the new file first, forgets it (which
    // line it prints depends on which: the priority order changed too).
    let deadline = Instant::now() + crate::reload::BOUND;
    loop {
        let s = status(gw).await;
        let shown = s["backends"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["name"] == "down");
        if !shown {
            break;
        }
        assert!(Instant::now() < deadline, "still shown: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ready(gw).await, reqwest::StatusCode::OK);
}
