//! `switchboard bench` end to end: the load driver against the fixture directly over stdio and
//! through a real gateway. Only correctness is asserted (every answer verified, none lost);
//! timings vary too much between machines to assert on.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::common::TestGateway;

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");

/// Runs `switchboard bench <args>` and returns its `--json` report.
async fn bench(args: &[&str]) -> Value {
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new(BIN)
            .arg("bench")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("bench did not finish within 120s")
    .expect("spawn switchboard bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout:?}"))
}

fn assert_clean(report: &Value, requests: u64) {
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["wrong_answers"], 0, "{report}");
    assert_eq!(report["requests"], requests, "{report}");
    assert_eq!(report["ok"], requests, "{report}");
    for key in [
        "requests_per_sec",
        "p50_us",
        "p90_us",
        "p99_us",
        "max_us",
        "duration_secs",
    ] {
        assert!(report[key].is_number(), "{key} missing in {report}");
    }
}

#[tokio::test]
async fn bench_drives_the_fixture_directly_over_stdio() {
    let report = bench(&[
        "--requests",
        "2000",
        "--concurrency",
        "16",
        "--warmup",
        "0",
        "--json",
        "--stdio",
        "--",
        BIN,
        "fixture",
    ])
    .await;
    assert_clean(&report, 2000);
    assert_eq!(report["era"], "legacy");
}

#[tokio::test]
async fn bench_drives_the_gateway_over_legacy_sessions() {
    let gw = TestGateway::start(&[]).await;
    let report = bench(&[
        "--url",
        &gw.url,
        "--requests",
        "2000",
        "--concurrency",
        "16",
        "--sessions",
        "8",
        "--warmup",
        "0",
        "--json",
    ])
    .await;
    assert_clean(&report, 2000);
    assert_eq!(report["sessions"], 8);
}

/// `--target-pid` charges the gateway for its whole tree: the gateway and the stdio fixture it
/// spawned are both counted (at least two processes), and 2000 requests cost some CPU.
#[tokio::test]
async fn bench_charges_the_target_process_tree() {
    let gw = TestGateway::start(&[]).await;
    let pid = gw.pid().to_string();
    let report = bench(&[
        "--url",
        &gw.url,
        "--requests",
        "2000",
        "--concurrency",
        "8",
        "--warmup",
        "0",
        "--target-pid",
        &pid,
        "--json",
    ])
    .await;
    assert_clean(&report, 2000);
    assert!(
        report["target_tree_processes"].as_u64().unwrap() >= 2,
        "{report}"
    );
    assert!(
        report["target_tree_cpu_us_per_req"].as_f64().unwrap() > 0.0,
        "{report}"
    );
}

#[tokio::test]
async fn bench_drives_the_gateway_with_modern_stateless_requests() {
    let gw = TestGateway::start(&[]).await;
    let report = bench(&[
        "--url",
        &gw.url,
        "--era",
        "modern",
        "--requests",
        "500",
        "--warmup",
        "0",
        "--json",
    ])
    .await;
    assert_clean(&report, 500);
    assert_eq!(report["sessions"], 0, "Modern opens no sessions: {report}");
}

#[tokio::test]
async fn bench_modern_stdio_and_a_refusing_target_fails_loudly() {
    let report = bench(&[
        "--era",
        "modern",
        "--requests",
        "500",
        "--warmup",
        "0",
        "--json",
        "--stdio",
        "--",
        BIN,
        "fixture",
    ])
    .await;
    assert_clean(&report, 500);

    // A tool the fixture does not have: the probe fails with a clear message, not a report.
    let out = Command::new(BIN)
        .args([
            "bench",
            "--tool",
            "no-such-tool",
            "--requests",
            "5",
            "--stdio",
            "--",
            BIN,
            "fixture",
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("probe request failed"));
}

#[tokio::test]
async fn bench_fanout_reaches_every_listen_stream() {
    let gw = TestGateway::start(&[]).await;
    let report = bench(&["--url", &gw.url, "--fanout", "50", "--json"]).await;
    assert_eq!(report["fanout"], 50, "{report}");
    assert_eq!(report["delivered"], 50, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
}
