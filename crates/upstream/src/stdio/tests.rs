use super::*;

/// Collects unsolicited messages for assertions.
#[derive(Debug, Default)]
struct Collect(Mutex<Vec<String>>);

impl InboundSink for Collect {
    fn deliver(&self, line: &Bytes, _msg: &Message<'_>, _backend: &crate::Upstream) {
        self.0
            .lock()
            .push(String::from_utf8_lossy(line).into_owned());
    }
}

/// Panics on every message it is handed (a routing bug).
#[derive(Debug, Default)]
struct Panics;

impl InboundSink for Panics {
    fn deliver(&self, _line: &Bytes, _msg: &Message<'_>, _backend: &crate::Upstream) {
        panic!("a routing bug");
    }
}

/// A panic while routing one backend message drops that message only: the reader lives on
/// and every call still gets its answer.
#[tokio::test]
async fn a_panicking_sink_loses_one_message_not_the_backend() {
    let (handle, process) = spawn(&python(REVERSE_BACKEND, &["2"]), Arc::new(Panics)).unwrap();
    let first = handle.call("k1", request("k1", "a")).await.unwrap();
    let second = handle.call("k2", request("k2", "b")).await.unwrap();
    // The notification (handed to the sink, which panics) comes before both answers.
    for (call, method) in [(first, "a"), (second, "b")] {
        let answer = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("the answer arrived")
            .unwrap();
        assert_eq!(answer.payload(), format!(r#"{{"echo": "{method}"}}"#));
    }
    process.shutdown(Duration::from_secs(5)).await;
}

fn start(config: &StdioConfig) -> (StdioHandle, StdioProcess, Arc<Collect>) {
    let sink = Arc::new(Collect::default());
    let (h, p) = spawn(config, sink.clone()).unwrap();
    (h, p, sink)
}

/// A backend in Python: reads `n` request lines, then answers them in reverse order with
/// `{"echo": <method>}`; first writes a non-JSON line and an over-long line, which must be
/// skipped without disturbing the answers.
const REVERSE_BACKEND: &str = r#"
import json, sys
n = int(sys.argv[1])
reqs = [json.loads(sys.stdin.readline()) for _ in range(n)]
print("this is not json", flush=True)
print("x" * 5000, flush=True)
print(json.dumps({"jsonrpc": "2.0", "method": "notifications/hello"}), flush=True)
for r in reversed(reqs):
    print(json.dumps({"jsonrpc": "2.0", "id": r["id"], "result": {"echo": r["method"]}}), flush=True)
sys.stdin.read()
"#;

fn python(script: &str, args: &[&str]) -> StdioConfig {
    let mut all = vec!["-c".to_owned(), script.to_owned()];
    all.extend(args.iter().map(|s| s.to_string()));
    let mut c = StdioConfig::new("python3", all);
    c.max_line_bytes = 1024;
    c
}

fn request(key: &str, method: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":"{key}","method":"{method}"}}"#).into_bytes()
}

#[tokio::test]
async fn answers_reach_their_own_call_out_of_order() {
    let (handle, process, inbound) = start(&python(REVERSE_BACKEND, &["3"]));
    let mut calls = Vec::new();
    for (k, m) in [("k1", "a"), ("k2", "b"), ("k3", "c")] {
        calls.push((m, handle.call(k, request(k, m)).await.unwrap()));
    }
    for (method, call) in calls {
        let answer = call.await.unwrap();
        assert_eq!(answer.member(), "result");
        assert_eq!(answer.payload(), format!(r#"{{"echo": "{method}"}}"#));
    }
    // The notification was written before the answers, so it was delivered before they resolved.
    let seen = inbound.0.lock().clone();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].contains("notifications/hello"));
    assert_eq!(handle.pending_len(), 0);
    process.shutdown(Duration::from_secs(5)).await;
    assert!(handle.is_closed());
}

#[tokio::test]
async fn backend_death_fails_every_pending_call() {
    let script = "import sys\nfor _ in range(5): sys.stdin.readline()\nsys.exit(3)\n";
    let (handle, _process, _inbound) = start(&python(script, &[]));
    let mut calls = Vec::new();
    for i in 0..5 {
        let key = format!("k{i}");
        calls.push(handle.call(&key, request(&key, "x")).await.unwrap());
    }
    for call in calls {
        let err = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .unwrap();
        // They say how the process ended, in words.
        let err = err.unwrap_err();
        assert!(matches!(err, UpstreamError::Exited(_)), "{err:?}");
        assert_eq!(err.to_string(), "backend exited with status 3");
    }
    assert_eq!(handle.pending_len(), 0);
    // Later calls fail at once instead of waiting for a dead process.
    assert!(matches!(
        handle.call("late", request("late", "x")).await,
        Err(UpstreamError::Exited(_))
    ));
}

#[tokio::test]
async fn dropped_call_is_forgotten_and_its_late_answer_goes_nowhere() {
    let (handle, process, _inbound) = start(&python(REVERSE_BACKEND, &["2"]));
    let abandoned = handle.call("gone", request("gone", "a")).await.unwrap();
    assert_eq!(handle.pending_len(), 1);
    drop(abandoned);
    assert_eq!(handle.pending_len(), 0);
    let kept = handle.call("kept", request("kept", "b")).await.unwrap();
    assert_eq!(kept.await.unwrap().payload(), r#"{"echo": "b"}"#);
    assert!(
        handle.call("kept", request("kept", "c")).await.is_ok(),
        "a resolved key may be reused"
    );
    process.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn duplicate_pending_key_is_refused() {
    let (handle, process, _inbound) = start(&python(REVERSE_BACKEND, &["2"]));
    let _first = handle.call("same", request("same", "a")).await.unwrap();
    assert!(matches!(
        handle.call("same", request("same", "b")).await,
        Err(UpstreamError::DuplicateKey)
    ));
    process.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn spawn_failure_is_reported() {
    let err = spawn(
        &StdioConfig::new("/nonexistent/backend", vec![]),
        Arc::new(Collect::default()),
    )
    .unwrap_err();
    assert!(matches!(err, UpstreamError::Spawn { .. }));
}

/// Answers every request with `{"echo": <method>}`, except: a line containing `garble` gets
/// the `"id": null` parse-error answer, and `hold` requests are answered only together with
/// the next request that is not held.
const GARBLE_BACKEND: &str = r#"
import json, sys
held = []
for line in sys.stdin:
    if "garble" in line:
        print(json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}), flush=True)
        continue
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "hold":
        held.append(m)
        continue
    for r in held + [m]:
        print(json.dumps({"jsonrpc": "2.0", "id": r["id"], "result": {"echo": r["method"]}}), flush=True)
    held = []
"#;

/// What the call gets: the gateway's words, not the backend's (whose message may quote a
/// line; the answer's `"id": null` placeholder kept the backend's error in use before).
const PARSE_ERROR: &str =
    r#"{"code":-32700,"message":"Parse error: the backend could not parse the request"}"#;

#[tokio::test]
async fn a_null_id_error_answers_the_one_call_it_can_only_be() {
    let (handle, process, inbound) = start(&python(GARBLE_BACKEND, &[]));
    // Nothing answered yet, the only line written: certainly this call's.
    let first = handle.call("g1", request("g1", "garble")).await.unwrap();
    // Bounded so that a call left unresolved fails the test rather than hanging it.
    let answer = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the garbled call must be answered")
        .unwrap();
    assert!(answer.is_error());
    assert_eq!(answer.payload(), PARSE_ERROR);
    // After an answered call, again.
    let ok = handle.call("a", request("a", "ok")).await.unwrap();
    assert_eq!(ok.await.unwrap().payload(), r#"{"echo": "ok"}"#);
    let second = handle.call("g2", request("g2", "garble")).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), second).await;
    assert_eq!(second.expect("answered").unwrap().payload(), PARSE_ERROR);
    assert!(inbound.0.lock().is_empty(), "nothing unsolicited");
    process.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_null_id_error_that_may_be_another_lines_goes_to_nobody() {
    let (handle, process, _inbound) = start(&python(GARBLE_BACKEND, &[]));
    // Two calls in flight: the error could be either's.
    let held = handle.call("h", request("h", "hold")).await.unwrap();
    let garbled = handle.call("g", request("g", "garble")).await.unwrap();
    let release = handle.call("r", request("r", "release")).await.unwrap();
    // The backend wrote the error before these answers, so it has been read by now.
    assert_eq!(held.await.unwrap().payload(), r#"{"echo": "hold"}"#);
    assert_eq!(release.await.unwrap().payload(), r#"{"echo": "release"}"#);
    assert_eq!(handle.pending_len(), 1, "the garbled call keeps waiting");
    drop(garbled);

    // A notification the backend could not parse, then one call: the error is the
    // notification's, and the call must get its own answer.
    handle
        .send_line(br#"{"jsonrpc":"2.0","method":"garble"}"#.to_vec())
        .await
        .unwrap();
    let next = handle.call("n", request("n", "next")).await.unwrap();
    assert_eq!(next.await.unwrap().payload(), r#"{"echo": "next"}"#);

    // A withdrawn call's line is a candidate too, until a later line is answered.
    let withdrawn = handle.call("w", request("w", "garble")).await.unwrap();
    drop(withdrawn);
    let after = handle.call("x", request("x", "hold")).await.unwrap();
    let release = handle.call("y", request("y", "release")).await.unwrap();
    assert_eq!(after.await.unwrap().payload(), r#"{"echo": "hold"}"#);
    assert_eq!(release.await.unwrap().payload(), r#"{"echo": "release"}"#);
    process.shutdown(Duration::from_secs(5)).await;
}

/// Keeps the handle each request came with, and every notification's text.
#[derive(Debug, Default)]
struct Asked {
    handles: Mutex<Vec<crate::Upstream>>,
    notes: Mutex<Vec<String>>,
    heard: tokio::sync::Notify,
}

impl InboundSink for Asked {
    fn deliver(&self, line: &Bytes, msg: &Message<'_>, backend: &crate::Upstream) {
        match msg.id {
            Some(_) => self.handles.lock().push(backend.clone()),
            None => self
                .notes
                .lock()
                .push(String::from_utf8_lossy(line).into_owned()),
        }
        self.heard.notify_waiters();
    }
}

impl Asked {
    /// Waits (bounded) until `ready` holds of what was heard.
    async fn until(&self, ready: impl Fn(&Asked) -> bool) {
        let wait = async {
            loop {
                let heard = self.heard.notified();
                if ready(self) {
                    return;
                }
                heard.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .expect("heard in time");
    }
}

/// Asks its client something (request id 0, as SDKs number them per process), then tells
/// of every line it reads (`notifications/got`, with its own name).
const ASKS_BACKEND: &str = r#"
import json, sys
name = sys.argv[1]
print(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {}}), flush=True)
for line in sys.stdin:
    print(json.dumps({"jsonrpc": "2.0", "method": "notifications/got", "params": {"by": name, "line": json.loads(line)}}), flush=True)
"#;

/// The handle a backend's request comes with reaches the process that asked, also after a
/// restart installed another in the backend's slot: an answer a client gives late goes to
/// the asker (or nowhere), never to its successor, whose own request 0 is someone else's
/// question. The successor hears the sentinel sent after that answer, and not the answer.
#[tokio::test]
async fn an_answer_goes_to_the_process_that_asked_not_its_successor() {
    let old_sink = Arc::new(Asked::default());
    let (slot, old) = spawn(&python(ASKS_BACKEND, &["old"]), old_sink.clone()).unwrap();
    old_sink.until(|a| !a.handles.lock().is_empty()).await;
    let asker = old_sink.handles.lock()[0].clone();
    let new_sink = Arc::new(Asked::default());
    let (standby, new) = spawn(&python(ASKS_BACKEND, &["new"]), new_sink.clone()).unwrap();
    new_sink.until(|a| !a.handles.lock().is_empty()).await;
    slot.adopt(&standby);
    let answer = br#"{"jsonrpc":"2.0","id":0,"result":{"action":"accept"}}"#;
    asker.send_line(answer.to_vec()).await.unwrap();
    slot.send_line(br#"{"jsonrpc":"2.0","method":"sentinel"}"#.to_vec())
        .await
        .unwrap();
    new_sink.until(|a| !a.notes.lock().is_empty()).await;
    old_sink.until(|a| !a.notes.lock().is_empty()).await;
    let heard_new = new_sink.notes.lock().clone();
    assert_eq!(heard_new.len(), 1, "{heard_new:?}");
    assert!(
        heard_new[0].contains(r#""method": "sentinel""#),
        "{heard_new:?}"
    );
    let heard_old = old_sink.notes.lock().clone();
    assert!(
        heard_old[0].contains(r#""action": "accept""#),
        "{heard_old:?}"
    );
    old.shutdown(Duration::from_secs(5)).await;
    new.shutdown(Duration::from_secs(5)).await;
}

/// Answers `hidden` with a result holding serde_json's RawValue key, `old` with a wrong
/// `jsonrpc`, anything else with an echo, in order.
const UNREAD_BACKEND: &str = r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m["method"] == "hidden":
        out = {"jsonrpc": "2.0", "id": m["id"], "result": {"x": {"$serde_json::private::RawValue": "{}"}}}
    elif m["method"] == "old":
        out = {"jsonrpc": "1.0", "id": m["id"], "result": {}}
    else:
        out = {"jsonrpc": "2.0", "id": m["id"], "result": {"echo": m["method"]}}
    print(json.dumps(out), flush=True)
"#;

/// An answer the gateway does not read (one holding the key serde_json's `Value` would
/// expand, or not JSON-RPC 2.0) fails its call at once, with the gateway's own words; before,
/// it was skipped and the call waited for its deadline. Shown by order: the echo answered
/// after it finds it already resolved.
#[tokio::test]
async fn an_answer_not_read_fails_its_call_at_once() {
    use futures::FutureExt;
    let (handle, process, inbound) = start(&python(UNREAD_BACKEND, &[]));
    for method in ["hidden", "old"] {
        let unread = handle.call("u1", request("u1", method)).await.unwrap();
        let after = handle.call("e1", request("e1", "echo")).await.unwrap();
        let echo = tokio::time::timeout(Duration::from_secs(10), after).await;
        assert_eq!(
            echo.expect("answered").unwrap().payload(),
            r#"{"echo": "echo"}"#
        );
        let answer = unread
            .now_or_never()
            .expect("resolved before the echo")
            .unwrap();
        assert!(answer.is_error(), "{method}");
        assert!(answer.payload().contains("-32603"), "{}", answer.payload());
        assert!(
            !answer.payload().contains("RawValue"),
            "{}",
            answer.payload()
        );
    }
    assert!(inbound.0.lock().is_empty(), "nothing unsolicited");
    process.shutdown(Duration::from_secs(5)).await;
}
