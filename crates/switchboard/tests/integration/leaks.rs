//! Leak checks: everything a gateway run showed to the outside — its stdout and stderr
//! (every log line, complete: read after the process exited), `/status`, `/metrics` and the
//! audit log — searched for a list of secrets (tokens, codes, verifiers, client secrets).
//! Each source must be non-empty, so an empty capture never passes for a clean one.

use std::time::Duration;

use crate::common::TestGateway;

/// What one gateway run showed, by source.
pub struct Evidence {
    sources: Vec<(&'static str, String)>,
}

impl Evidence {
    /// Reads `/status` and `/metrics` (with `bearer` when the gateway authenticates), then
    /// stops the gateway (SIGTERM) and takes its complete stdout and stderr, and the audit
    /// log at `audit` if given.
    pub async fn collect(
        gw: &mut TestGateway,
        bearer: Option<&str>,
        audit: Option<&std::path::Path>,
    ) -> Evidence {
        let mut sources = Vec::new();
        for (name, path) in [("/status", "/status"), ("/metrics", "/metrics")] {
            let mut request = gw.http.get(format!("{}{path}", gw.base()));
            if let Some(b) = bearer {
                request = request.bearer_auth(b);
            }
            let r = request.send().await.unwrap();
            assert!(r.status().is_success(), "{path}: HTTP {}", r.status());
            sources.push((name, r.text().await.unwrap()));
        }
        assert!(
            gw.terminate_within(Duration::from_secs(20)).await,
            "the gateway did not stop"
        );
        assert!(
            gw.stdout.closed(Duration::from_secs(10)).await,
            "stdout did not close"
        );
        let mut done = gw.stderr_done.clone();
        tokio::time::timeout(Duration::from_secs(10), done.wait_for(|d| *d))
            .await
            .expect("stderr did not close")
            .unwrap();
        let stdout = [gw.startup.clone(), gw.stdout.lines()].concat().join("\n");
        sources.push(("stdout", stdout));
        sources.push(("stderr (logs)", gw.stderr.lock().clone()));
        if let Some(path) = audit {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            sources.push(("audit log", text));
        }
        Evidence { sources }
    }

    /// Adds a source collected elsewhere (the spans an OTLP receiver got).
    pub fn add(&mut self, source: &'static str, text: String) {
        self.sources.push((source, text));
    }

    /// No source holds any of `secrets` (each non-empty, as is every source).
    pub fn assert_free_of(&self, secrets: &[&str]) {
        for (source, text) in &self.sources {
            assert!(
                !text.trim().is_empty(),
                "{source} is empty: nothing was searched"
            );
            for secret in secrets {
                assert!(!secret.is_empty(), "an empty secret matches everything");
                assert!(
                    !text.contains(secret),
                    "a secret ({} chars, starting {:?}) in {source}",
                    secret.len(),
                    secret.chars().take(6).collect::<String>()
                );
            }
        }
    }

    /// The text of `source` (for a test's own assertions).
    pub fn of(&self, source: &str) -> &str {
        self.sources
            .iter()
            .find(|(s, _)| *s == source)
            .map_or("", |(_, t)| t.as_str())
    }
}

#[tokio::test]
async fn a_leak_check_finds_what_the_gateway_printed() {
    // The fixture's echo result is no secret, but the check must see what a run shows: the
    // audit log records the call, stdout and stderr the run.
    let dir = crate::acting::Dir::new("leak-self");
    let audit = dir.0.join("audit.jsonl");
    let audit_arg = audit.to_string_lossy().into_owned();
    let mut gw = TestGateway::start(&["--audit-log", &audit_arg]).await;
    let sid = gw.session().await;
    let reply = gw
        .call_tool(
            Some(&sid),
            serde_json::json!(1),
            "echo",
            serde_json::json!({"message": "hello"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let evidence = Evidence::collect(&mut gw, None, Some(&audit)).await;
    evidence.assert_free_of(&["never-printed-0b7e"]);
    assert!(evidence.of("audit log").contains("tools/call"));
    assert!(evidence.of("stdout").contains("switchboard: "));
    let caught = std::panic::catch_unwind(|| evidence.assert_free_of(&["tools/call"]));
    assert!(
        caught.is_err(),
        "a string the audit log holds must be found"
    );
}
