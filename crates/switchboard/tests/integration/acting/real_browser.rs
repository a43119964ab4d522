//! Per-user OAuth consent in a real browser (headless Chromium through playwright-core,
//! `scripts/install-chromium.sh`), where the scripted browser of the other tests cannot
//! stand in: what a browser sends with the click (`Origin`, `Sec-Fetch-Site`) follows the
//! page's own headers. Skipped, loudly, only when chromium is not installed and
//! `SWITCHBOARD_UI_TESTS` is unset, as the status page's test is.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::oauth::{gateway, modern_consent_url, Protected};
use super::{jwt, modern_call, seen, Dir};
use crate::auth::Jwks;

/// Alice clicks her start page in Chromium: the click is taken (it left the start page for
/// the authorization server and came back to the callback), and her retry carries the token
/// that consent issued. The start
/// page said `Referrer-Policy: no-referrer`, under which Chromium posts the form with
/// `Origin: null`, and every real click was refused as forged (review HIGH).
#[tokio::test]
async fn a_real_browser_click_completes_a_consent() {
    if !crate::ui::chromium_present() && std::env::var_os("SWITCHBOARD_UI_TESTS").is_none() {
        eprintln!(
            "*** REAL BROWSER TEST SKIPPED: chromium is not installed (scripts/install-chromium.sh; \
             set SWITCHBOARD_UI_TESTS=1 to install and require it) ***"
        );
        return;
    }
    let (chromium, modules) = crate::ui::install().await;
    let up = Protected::start("modern", "3600").await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("oauth-real-browser");
    let gw = gateway(&up, &jwks.url, &dir).await;
    let alice = jwt("alice");
    let url = modern_consent_url(&modern_call(&gw, &alice).await);
    let driver = Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/integration/clients/oauth_click.mjs"
        ))
        .args([&url, &chromium, &modules])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node");
    let mut lines = BufReader::new(driver.stdout.unwrap()).lines();
    let mut next = async || {
        let line = tokio::time::timeout(Duration::from_secs(90), lines.next_line()).await;
        let line = line.expect("the driver answered in time").unwrap();
        line.expect("the driver ended early")
    };
    let at = next().await;
    assert!(at.starts_with("AT "), "the click was refused: {at}");
    assert!(at.contains("/callback?code="), "{at}");
    let done = next().await;
    assert!(done.contains("close this tab"), "{done}");
    // The test authorization server signed the browser in as `nobody`: the token that
    // consent issued is alice's now, and her retry carries it.
    let sent = seen(&modern_call(&gw, &alice).await);
    assert!(sent.starts_with("Bearer at.nobody."), "{sent}");
}
