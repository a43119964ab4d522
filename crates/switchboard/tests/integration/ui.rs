//! The status page (`/ui`) in headless Chromium (playwright-core, `scripts/install-chromium.sh`):
//! it shows every backend field of `/status` (checked value by value against it: state, era,
//! transport, breaker, restarts, uptime, PID, in flight, item counts, rate, p50, p99, last
//! error), sessions by principal and its links; a backend healthy, then unhealthy once killed,
//! never behind a closed breaker; a quarantined tool, whose Approve button brings it back to
//! `tools/list`; its CSP refuses an inline script. For a caller who is not a trust approver
//! it still shows the status, and says the trust panel needs one. Skipped, loudly, only when chromium is
//! absent and `SWITCHBOARD_UI_TESTS` is unset (`scripts/test.sh` sets it, so CI cannot skip).

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::ops_status::{assert_breakers_agree, status, tool_names_as, Scene, OPS};
use crate::trust::serve;
use crate::vmcp::{self, Dir};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Chromium and playwright-core's `node_modules`, installing what is missing.
pub(crate) async fn install() -> (String, String) {
    let out = Command::new(format!("{ROOT}/scripts/install-chromium.sh"))
        .stderr(Stdio::inherit())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(1200), out)
        .await
        .expect("install-chromium.sh did not finish in time")
        .expect("run install-chromium.sh");
    assert!(out.status.success(), "install-chromium.sh failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let chromium = lines.next().expect("chromium path").to_owned();
    let modules = lines.next().expect("node_modules path").to_owned();
    (chromium, modules)
}

pub(crate) fn chromium_present() -> bool {
    ["chromium", "chromium-browser"].iter().any(|c| {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The page driver's next line; fails the test on its failure line or after `within`.
async fn expect_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    prefix: &str,
    within: Duration,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = tokio::time::timeout(left, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the page did not show {prefix} within {within:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the page driver ended before {prefix}"));
        assert!(!line.starts_with("PAGE-ERROR"), "{line}");
        assert!(!line.starts_with("FAILED"), "waiting for {prefix}: {line}");
        if line.starts_with(prefix) {
            return line;
        }
    }
}

/// The operator's page with three backends (one killed), two principals and a quarantined
/// tool: every field it shows per backend (state, era, transport, breaker, restarts, uptime,
/// PID, in flight, item counts, rate, p50, p99, last error), per principal and in its links is
/// checked against `/status` read at the same time; it never shows a backend unhealthy behind
/// a closed breaker; an inline script is refused by its CSP; Approve brings the quarantined
/// tool back. The screenshot it takes goes to `target/ui.png`; with
/// `SWITCHBOARD_UPDATE_SCREENSHOT=1` it replaces the documentation's (`docs/images/ui.png`), so
/// an ordinary test run leaves the checkout as it was.
#[tokio::test]
async fn status_page_shows_every_backend_field_of_status_and_approves_a_quarantined_tool() {
    if !chromium_present() && std::env::var_os("SWITCHBOARD_UI_TESTS").is_none() {
        eprintln!(
            "*** UI TEST SKIPPED: chromium is not installed (scripts/install-chromium.sh; \
             set SWITCHBOARD_UI_TESTS=1 to install and require it) ***"
        );
        return;
    }
    let (chromium, modules) = install().await;
    let mut scene = Scene::start("ui", 2).await;
    assert_no_inline_script(&scene.gw).await;
    scene.traffic(8).await;
    scene.crash_gamma(scene.pid_of("gamma_pid").await).await;
    let screenshot = match std::env::var_os("SWITCHBOARD_UPDATE_SCREENSHOT") {
        Some(_) => format!("{ROOT}/docs/images/ui.png"),
        None => format!("{ROOT}/target/ui.png"),
    };
    std::fs::create_dir_all(format!("{ROOT}/target")).unwrap();
    let _ = std::fs::remove_file(&screenshot);
    let mut driver = Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/integration/clients/ui_status.mjs"
        ))
        .args([&scene.gw.base(), &chromium, &modules, &screenshot, OPS])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node");
    let mut to_page = driver.stdin.take().unwrap();
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let step = Duration::from_secs(60);
    expect_line(&mut lines, "HEALTHY", step).await;

    let s = scene.kill_beta().await;
    assert_breakers_agree(&s);
    to_page.write_all(b"next\n").await.unwrap();
    expect_line(&mut lines, "UNHEALTHY", step).await;

    scene.quarantine_alpha_echo().await;
    to_page.write_all(b"next\n").await.unwrap();
    let row = expect_line(&mut lines, "QUARANTINED", step).await;
    assert!(
        row.contains("alpha") && row.contains("description"),
        "{row}"
    );
    let checked = expect_line(&mut lines, "CHECKED", step).await;
    eprintln!("{checked}");
    expect_line(&mut lines, "CSP-REFUSES-INLINE", step).await;
    expect_line(&mut lines, "APPROVED", step).await;
    assert_breakers_agree(&status(&scene.gw).await);
    let names = tool_names_as(&scene.gw, OPS).await;
    assert!(names.iter().any(|n| n == "alpha_echo"), "{names:?}");
    drop(to_page);
    let status = tokio::time::timeout(step, driver.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    assert!(std::path::Path::new(&screenshot).exists());
}

/// The page's CSP allows only its own script (no inline script, no `eval`), and the page has
/// none inline: every `<script>` is loaded by `src`, no element carries an event attribute.
async fn assert_no_inline_script(gw: &crate::common::TestGateway) {
    let page = gw
        .http
        .get(format!("{}/ui", gw.base()))
        .send()
        .await
        .unwrap();
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("script-src 'self';"), "{csp}");
    assert!(!csp.contains("unsafe-"), "{csp}");
    let html = page.text().await.unwrap().to_lowercase();
    for tag in html.split("<script").skip(1) {
        let open = tag.split('>').next().unwrap_or_default();
        assert!(open.contains(" src="), "an inline script: <script{open}>");
    }
    assert!(
        !html.contains(" onclick=") && !html.contains(" onload="),
        "{html}"
    );
}

/// A default `serve` (no approvers): `/trust` is 403 for the caller, and the page still shows
/// every backend's state, saying the trust panel needs an approver (it was blank: both
/// answers were dropped on the 403).
#[tokio::test]
async fn status_page_shows_the_status_to_a_caller_who_is_not_an_approver() {
    if !chromium_present() && std::env::var_os("SWITCHBOARD_UI_TESTS").is_none() {
        eprintln!("*** UI TEST SKIPPED: chromium is not installed ***");
        return;
    }
    let (chromium, modules) = install().await;
    let dir = Dir::new("ui-viewer");
    let yaml = format!(
        "backends:\n{}{}",
        vmcp::stdio("alpha", ""),
        vmcp::stdio("beta", "")
    );
    let config = dir.write("sb.yaml", &yaml);
    let gw = serve(&config).await;
    let screenshot = format!("{ROOT}/target/ui-viewer.png");
    let driver = Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/integration/clients/ui_status.mjs"
        ))
        .args([&gw.base(), &chromium, &modules, &screenshot, "viewer"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node");
    let mut driver = driver;
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let line = expect_line(&mut lines, "VIEWER", Duration::from_secs(60)).await;
    assert!(line.contains("trust.approvers"), "{line}");
    let status = tokio::time::timeout(Duration::from_secs(30), driver.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}
