//! Resource URIs whose scheme differs only in case (RFC 3986: a scheme is case-insensitive,
//! the rest of the URI is not): routed to the backend that listed the URI or its template, and
//! judged by the policy in the same canonical form, so a case variant reaches nothing the
//! caller may not read; with guardrails configured too.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{modern, request, Dir, Era, SB};
use crate::common::{Reply, TestGateway};

/// A `backends:` entry for `backends/schemes.py NAME` (its scheme is its name).
fn schemes(name: &str) -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/schemes.py"
    );
    format!("  - name: {name}\n    command: python3\n    args: [{script}, {name}]\n")
}

/// Everyone may do everything but read `rema://secret`.
const POLICY: &str = r#"
permit(principal, action, resource);
forbid(principal, action == Action::"read_resource", resource == Resource::"rema://secret");
"#;

/// A guardrail on every answer: the route then confirms what the guardrails judged a read to
/// be about (`guardrails::Checked`), a case variant included. Before, a variant was refused
/// ("retry") on every try: the listed URI was taken for a rename of the one sent.
const GUARDED: &str = "guardrails:\n  - name: size\n    on: [response]\n    check: {maxBytes: 1MiB, action: truncate}\n";

async fn read(gw: &TestGateway, era: Era, sid: &str, uri: &str) -> Reply {
    let params = json!({ "uri": uri });
    match era {
        Era::Legacy => {
            gw.post(Some(sid), &request(json!(1), "resources/read", params))
                .await
        }
        Era::Modern => modern(gw, json!(1), "resources/read", params, &[]).await,
    }
}

/// The text `uri` reads as, asserting success.
async fn text(gw: &TestGateway, era: Era, sid: &str, uri: &str) -> String {
    let r = read(gw, era, sid, uri).await;
    let answer: Value = r.json();
    assert_eq!(r.status, StatusCode::OK, "{era:?} {uri}: {}", r.text);
    let text = answer["result"]["contents"][0]["text"].as_str();
    text.unwrap_or_else(|| panic!("{era:?} {uri}: {answer}"))
        .to_owned()
}

#[tokio::test]
async fn a_scheme_in_another_case_routes_like_the_listed_one_and_is_judged_like_it() {
    let dir = Dir::new("schemes");
    let policy = dir.write("policy.cedar", POLICY);
    let yaml = format!(
        "policy: {{file: {}}}\n{GUARDED}backends:\n{}{}",
        policy.display(),
        schemes("rema"),
        schemes("remb")
    );
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    let sid = gw.session().await;

    for era in [Era::Legacy, Era::Modern] {
        // Listed URIs and a template, each reached by its own backend, the URI passed as sent.
        for (uri, backend) in [
            ("rema://info", "rema"),
            ("remA://info", "rema"),
            ("REMB://info", "remb"),
            ("Remb://items/7", "remb"),
        ] {
            let got = text(&gw, era, &sid, uri).await;
            assert_eq!(got, format!("{backend} read {uri}"), "{era:?}");
        }
        // Only the scheme is case-insensitive: the rest of the URI is compared exactly.
        let other = read(&gw, era, &sid, "rema://INFO").await;
        assert!(other.json()["result"].is_null(), "{era:?}: {}", other.text);
        assert!(
            other.text.contains("rema://INFO"),
            "{era:?}: not an unknown resource: {}",
            other.text
        );

        // A forbidden URI is answered as a missing one, and so is each case variant of it
        // (the URI quoted as sent): never read.
        let missing = read(&gw, era, &sid, "rema://nothing").await;
        let blank = |r: &crate::common::Reply, uri: &str| (r.status, r.text.replace(uri, "URI"));
        for variant in ["rema://secret", "REMA://secret", "reMa://secret"] {
            let r = read(&gw, era, &sid, variant).await;
            assert_eq!(r.status, StatusCode::OK, "{era:?} {variant}: {}", r.text);
            assert_eq!(
                blank(&r, variant),
                blank(&missing, "rema://nothing"),
                "{era:?} {variant}"
            );
        }
    }
}
