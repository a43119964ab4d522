//! `sandbox.network.allow`: the hostile backend reaches a listed loopback `host:port`
//! through the gateway's egress proxy (bridged into its sandbox at `127.0.0.1`, named by
//! `https_proxy`/`http_proxy`), is refused with 403 everywhere else, and still cannot
//! reach anything directly (its own network namespace). The refusals come first; the
//! listener's first and only connections are the allowed ones, so no refused attempt
//! reached it. The gateway's log names each refused `host:port`, never a URL's user-info.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{hostile_sandboxed, hostile_sandboxed_in, ready};

/// Accepts `n` connections one after another; sends each one's first line (of an HTTP
/// request head), then answers it `pong` and closes it.
fn serve(listener: TcpListener, n: usize) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..n {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && matches!(s.read(&mut b), Ok(1)) {
                head.push(b[0]);
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            let _ = tx.send(text.lines().next().unwrap_or_default().to_owned());
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\npong",
            );
        }
    });
    rx
}

#[tokio::test]
async fn the_allow_list_is_reached_through_the_proxy_and_nothing_else() {
    if !ready("egress") {
        return;
    }
    let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = allowed.local_addr().unwrap().port();
    let unlisted = TcpListener::bind("127.0.0.1:0").unwrap();
    unlisted.set_nonblocking(true).unwrap();
    let other = unlisted.local_addr().unwrap().port();
    let more = format!("\n      network: {{allow: [\"127.0.0.1:{port}\"]}}");
    let h = hostile_sandboxed("egress", &more, |_| Vec::new()).await;
    let seen = serve(allowed, 2);

    let env: Value = serde_json::from_str(&h.tool("env", json!({})).await).unwrap();
    let proxy = env["https_proxy"].as_str().unwrap_or_default().to_owned();
    assert!(proxy.starts_with("http://127.0.0.1:"), "{env}");
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy"] {
        assert_eq!(env[var], json!(proxy), "{var}: {env}");
    }
    assert!(
        env.get("NO_PROXY").is_none() && env.get("no_proxy").is_none(),
        "{env}"
    );

    // Around the proxy: nothing (its own loopback only).
    let direct = h.tool("connect", json!({"port": port})).await;
    assert!(
        direct.starts_with("error: ConnectionRefusedError"),
        "{direct}"
    );
    // Not listed: another port, the same listener by another name, plain HTTP elsewhere.
    for target in [format!("127.0.0.1:{other}"), format!("localhost:{port}")] {
        let t = h
            .tool("tunnel", json!({"target": target, "send": "x"}))
            .await;
        assert_eq!(
            t, "error: ConnectionError: HTTP/1.1 403 Forbidden",
            "{target}"
        );
    }
    let url = format!("http://user:pw-sentinel-41@127.0.0.1:{other}/refused");
    let g = h.tool("proxied_get", json!({"url": url})).await;
    assert!(g.starts_with("error: HTTPError: HTTP Error 403"), "{g}");

    // Listed: a tunnel, then a plain request (user-info in the URL).
    let tunneled = h
        .tool(
            "tunnel",
            json!({"target": format!("127.0.0.1:{port}"),
                   "send": "GET /tunneled HTTP/1.1\r\nHost: x\r\n\r\n"}),
        )
        .await;
    assert!(tunneled.starts_with("ok: HTTP/1.1 200 OK"), "{tunneled}");
    assert!(tunneled.ends_with("pong"), "{tunneled}");
    let url = format!("http://user:pw-sentinel-41@127.0.0.1:{port}/plain?q=1");
    let plain = h.tool("proxied_get", json!({"url": url})).await;
    assert_eq!(plain, "ok: 200 pong");
    let wait = Duration::from_secs(10);
    assert_eq!(seen.recv_timeout(wait).unwrap(), "GET /tunneled HTTP/1.1");
    assert_eq!(seen.recv_timeout(wait).unwrap(), "GET /plain?q=1 HTTP/1.1");
    // Every refusal was answered before: a connection it had opened would be queued.
    assert!(
        unlisted.accept().is_err(),
        "the unlisted port saw a connection"
    );

    let logs = h.gw.stderr.lock().clone();
    for target in [format!("127.0.0.1:{other}"), format!("localhost:{port}")] {
        assert!(
            logs.contains(&format!("backend hostile tried {target}, which is not in")),
            "{target} not logged: {logs}"
        );
    }
    assert!(!logs.contains("pw-sentinel-41"), "user-info logged: {logs}");
    let said = format!("network only through the egress proxy, to 127.0.0.1:{port})");
    assert!(
        h.gw.startup.iter().any(|l| l.contains(&said)),
        "{:?}",
        h.gw.startup
    );
    h.fixture_serves().await;
}

/// Every backend's egress socket lives under one directory of the gateway's in its temporary
/// directory, which every sandbox hides: with a `TMPDIR` the backend can see (here inside its
/// writable `out`), it finds the rest of that directory but not the sockets, so it cannot
/// borrow another backend's proxy (and allow list).
#[tokio::test]
async fn the_egress_sockets_are_hidden_even_where_the_temporary_directory_is_visible() {
    if !ready("egress-hidden") {
        return;
    }
    let more = "\n      network: {allow: [\"127.0.0.1:9\"]}";
    let h = hostile_sandboxed_in(
        "egress-hidden",
        more,
        |_| Vec::new(),
        |dir| {
            let tmp = dir.join("out/tmp");
            std::fs::create_dir_all(&tmp).unwrap();
            std::fs::write(tmp.join("visible-sentinel"), "x").unwrap();
            vec![("TMPDIR", tmp)]
        },
    )
    .await;
    let tmp = h.dir.0.join("out/tmp");
    let egress: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sb-egress-"))
        .collect();
    assert_eq!(
        egress.len(),
        1,
        "the gateway made its egress directory there"
    );
    let seen = h.tool("read", json!({"path": tmp.to_string_lossy()})).await;
    assert!(seen.contains("visible-sentinel"), "{seen}");
    assert!(!seen.contains("sb-egress-"), "{seen}");
    let inside = h
        .tool(
            "read",
            json!({"path": tmp.join(&egress[0]).to_string_lossy()}),
        )
        .await;
    assert!(inside.starts_with("error: FileNotFoundError"), "{inside}");
    h.fixture_serves().await;
}

/// The bridge alone (it needs no sandbox): its program gets the proxy variables (and no
/// `NO_PROXY`), exits with the program's status (a signal's death as 128 + its number),
/// and passes `SIGTERM` on.
#[tokio::test]
async fn the_bridge_passes_on_its_program_s_status_and_signals() {
    use tokio::io::AsyncBufReadExt;
    let bridge = |script: &str| {
        let mut cmd = tokio::process::Command::new(super::SB);
        cmd.args([
            "sandbox-bridge",
            "--socket",
            "/nonexistent/egress.sock",
            "--",
        ])
        .args(["sh", "-c", script])
        .env("NO_PROXY", "example.com")
        .env("no_proxy", "example.com")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
        cmd
    };
    let out = bridge(
        "echo $HTTP_PROXY $HTTPS_PROXY $http_proxy ${NO_PROXY-none} ${no_proxy-none}; exit 3",
    )
    .output()
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let words: Vec<&str> = said.split_whitespace().collect();
    assert!(words[0].starts_with("http://127.0.0.1:"), "{said}");
    assert_eq!(words[..3], [words[0]; 3], "{said}");
    assert_eq!(words[3..], ["none", "none"], "{said}");

    let out = bridge("kill -ABRT $$").output().await.unwrap();
    assert_eq!(out.status.code(), Some(134), "{out:?}");

    let mut child = bridge("trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done")
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("ready"));
    let pid = child.id().unwrap().to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(7),
        "the program's own exit, after its TERM trap"
    );
}
