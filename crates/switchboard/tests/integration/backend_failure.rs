//! Backend death and deadlines: every request still gets exactly one answer, promptly.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{tool_text, TestGateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_backend_fails_pending_requests_at_once_and_it_restarts() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let pid = backend_pid(&gw, &sid).await;

    let in_flight: Vec<_> = (0..50)
        .map(|i| gw.call_tool(Some(&sid), json!(i), "slow", json!({"ms": 30_000})))
        .collect();
    let all = futures::future::join_all(in_flight);
    tokio::pin!(all);
    // Let the calls reach the backend: a call that completes proves earlier ones were written.
    let marker = gw.call_tool(Some(&sid), json!("marker"), "echo", json!({"text":"m"}));
    let marker = tokio::select! {
        m = marker => m,
        _ = &mut all => panic!("slow calls finished early"),
    };
    assert_eq!(tool_text(&marker.json()), "m");

    let killed = Instant::now();
    kill9(&pid);
    let replies = tokio::time::timeout(Duration::from_secs(5), all)
        .await
        .expect("pending requests hung");
    let elapsed = killed.elapsed();
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.text);
        let v = r.json();
        assert_eq!(v["id"], json!(i));
        assert_eq!(v["error"]["code"], -32603);
    }
    // The supervisor restarts the backend; the same session keeps working (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = gw
            .call_tool(Some(&sid), json!("after"), "echo", json!({"text":"back"}))
            .await;
        if r.status == StatusCode::OK {
            assert_eq!(tool_text(&r.json()), "back");
            break;
        }
        assert_eq!(
            r.status,
            StatusCode::BAD_GATEWAY,
            "while restarting: an error, never silence"
        );
        assert!(Instant::now() < deadline, "backend never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_ne!(backend_pid(&gw, &sid).await, pid, "a new process");
}

#[tokio::test]
async fn killing_the_gateway_leaves_no_backend_behind() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let backend = backend_pid(&gw, &sid).await;
    assert!(std::path::Path::new(&format!("/proc/{backend}")).exists());
    kill9(&gw.pid().to_string());
    let deadline = Instant::now() + Duration::from_secs(10);
    while crate::common::process_running(&backend) {
        assert!(
            Instant::now() < deadline,
            "backend {backend} outlived the gateway"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn backend_pid(gw: &TestGateway, sid: &str) -> String {
    tool_text(
        &gw.call_tool(Some(sid), json!("pid"), "pid", json!({}))
            .await
            .json(),
    )
    .to_owned()
}

fn kill9(pid: &str) {
    let status = std::process::Command::new("kill")
        .args(["-9", pid])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn deadline_exceeded_is_504_on_json_and_an_error_frame_on_sse() {
    let gw = TestGateway::start(&["--request-timeout", "0.3"]).await;
    let sid = gw.session().await;
    let r = gw
        .call_tool(
            Some(&sid),
            json!(12345678901234567890u64),
            "slow",
            json!({"ms": 5000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(
        r.text.contains(r#""id":12345678901234567890"#),
        "{}",
        r.text
    );
    assert_eq!(r.error_code(), -32000);

    let body = json!({"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"name":"slow","arguments":{"ms":5000}}});
    let r = gw
        .post_raw(
            Some(&sid),
            body.to_string(),
            &[("accept", "text/event-stream, application/json;q=0.1")],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["id"], "t");
    assert_eq!(v["error"]["code"], -32000);
    // The gateway is still healthy and serving.
    let r = gw
        .call_tool(Some(&sid), json!(1), "echo", json!({"text":"ok"}))
        .await;
    assert_eq!(tool_text(&r.json()), "ok");
}

#[tokio::test]
async fn a_backend_that_never_initializes_fails_startup() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args([
            "run",
            "--port",
            "0",
            "--startup-timeout",
            "0.5",
            "--",
            "sleep",
            "30",
        ])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("backend did not become ready"), "{stderr}");
}

/// POSTs being handled (or streaming their answer) are bounded: beyond the bound the gateway
/// answers 503 at once instead of queueing; a freed slot admits the next request.
#[tokio::test]
async fn requests_in_flight_are_bounded() {
    let gw = TestGateway::start(&["--max-in-flight", "2"]).await;
    let slow = |i: u64| gw.call_tool(None, json!(i), "slow", json!({"ms": 1500}));
    let busy = async {
        // Both slow calls hold their slots once the backend has them (bounded wait).
        let deadline = Instant::now() + Duration::from_secs(10);
        while crate::common::stats(&gw).await["tableEntries"].as_u64() < Some(2) {
            assert!(
                Instant::now() < deadline,
                "slow calls never reached the backend"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        gw.call_tool(None, json!("third"), "echo", json!({"text":"x"}))
            .await
    };
    let (a, b, third) = tokio::join!(slow(1), slow(2), busy);
    assert_eq!(
        third.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        third.text
    );
    assert!(
        third.json().get("id").is_none(),
        "the body was never read: no id"
    );
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
    let r = gw
        .call_tool(None, json!(4), "echo", json!({"text":"free again"}))
        .await;
    assert_eq!(tool_text(&r.json()), "free again");
}
