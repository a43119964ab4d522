use std::sync::Arc;

use serde_json::{json, Value};

use super::*;

fn upstream() -> OpenApiUpstream {
    let doc = parse(tools::tests::PETS).unwrap();
    let (catalog, _) = Catalog::from_document(&doc).unwrap();
    // Port 9 (discard) on loopback: nothing answers, so a call that got through would fail
    // as unreachable, not as refused.
    OpenApiUpstream::new(Arc::new(catalog), OpenApiConfig::new("http://127.0.0.1:9")).unwrap()
}

async fn ask(u: &OpenApiUpstream, method: &str, params: Value) -> (bool, Value) {
    let line = json!({"jsonrpc": "2.0", "id": "k1", "method": method, "params": params});
    let answer = u.call("k1", line.to_string().into_bytes()).await.unwrap();
    (
        answer.is_error(),
        serde_json::from_str(answer.payload()).unwrap(),
    )
}

fn modern_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}})
}

#[tokio::test]
async fn it_answers_both_eras_handshakes_and_lists() {
    let u = upstream();
    let (err, init) = ask(&u, "initialize", json!({"protocolVersion": "2025-06-18"})).await;
    assert!(!err);
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert_eq!(init["serverInfo"]["name"], "Pets");
    assert!(init["capabilities"]["tools"].is_object());
    let (err, d) = ask(&u, "server/discover", json!({"_meta": modern_meta()})).await;
    assert!(!err, "{d}");
    assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(d["resultType"], "complete");
    let (_, list) = ask(&u, "tools/list", json!({"_meta": modern_meta()})).await;
    assert_eq!(list["tools"].as_array().unwrap().len(), 4);
    assert_eq!(
        list["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "Pets"
    );
    let (err, e) = ask(&u, "resources/list", json!({})).await;
    assert!(err);
    assert_eq!(e["code"], -32601);
    let (err, e) = ask(
        &u,
        "ping",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}),
    )
    .await;
    assert!(err);
    assert_eq!(e["code"], -32022);
    assert_eq!(u.pending_len(), 0);
}

#[tokio::test]
async fn bad_calls_are_refused_before_anything_is_sent() {
    let u = upstream();
    let (err, e) = ask(&u, "tools/call", json!({"name": "nope"})).await;
    assert!(err);
    assert_eq!(e["code"], -32602);
    let (err, r) = ask(
        &u,
        "tools/call",
        json!({"name": "listPets", "arguments": {"limit": "x"}}),
    )
    .await;
    assert!(!err);
    assert_eq!(r["isError"], true);
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("invalid arguments: /limit"),
        "{r}"
    );
    let (_, r) = ask(
        &u,
        "tools/call",
        json!({"name": "get_pets_petId", "arguments": {"petId": ".."}}),
    )
    .await;
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("refused before sending"),
        "{r}"
    );
    assert!(u.is_reachable(), "nothing was sent");
}

/// A directory of this test's own (removed on drop).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sb-openapi-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `read_file` on another thread: its error, or `None` if it did not return in 10 s.
fn read_error(path: std::path::PathBuf) -> Option<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(read_file(&path).map(|_| ()).map_err(|e| e.to_string()));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(10)).ok()?;
    Some(got.expect_err("it was read"))
}

#[test]
fn a_spec_file_is_read_only_if_regular_and_only_up_to_the_bound() {
    let dir = TempDir::new("read");
    let fifo = dir.0.join("spec.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    for special in [fifo, "/dev/zero".into(), dir.0.clone()] {
        let e = read_error(special.clone()).unwrap_or_else(|| panic!("{special:?} hung"));
        assert!(e.ends_with("not a regular file"), "{special:?}: {e}");
    }
    let big = dir.0.join("big.yaml");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(MAX_SPEC_BYTES as u64 + 1).unwrap();
    let e = read_error(big).unwrap();
    assert!(
        e.ends_with(&format!("larger than {MAX_SPEC_BYTES} bytes")),
        "{e}"
    );
    let ok = dir.0.join("ok.yaml");
    std::fs::write(&ok, tools::tests::PETS).unwrap();
    assert!(read_file(&ok).is_ok());
}

/// A tool call to an API at `port` (which fails: nothing there answers), its text.
async fn call_at(port: u16) -> (OpenApiUpstream, String) {
    let doc = parse(tools::tests::PETS).unwrap();
    let (catalog, _) = Catalog::from_document(&doc).unwrap();
    let config = OpenApiConfig::new(format!("http://127.0.0.1:{port}"));
    let u = OpenApiUpstream::new(Arc::new(catalog), config).unwrap();
    let args = json!({"name": "listPets", "arguments": {"limit": 1}});
    let (_, r) = ask(&u, "tools/call", args).await;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or("").to_owned();
    (u, text)
}

#[tokio::test]
async fn only_a_failed_connect_marks_the_api_unreachable() {
    // Accepts, reads the request, and closes without answering.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        let _ = conn.read(&mut buf).await;
    });
    let (u, text) = call_at(port).await;
    server.await.unwrap();
    assert!(text.starts_with("the API did not answer"), "{text}");
    assert!(u.is_reachable(), "a dropped call is not an unreachable API");
    // Nothing listens there any more: the connection is refused.
    let (u, text) = call_at(port).await;
    assert!(text.starts_with("the API did not answer"), "{text}");
    assert!(!u.is_reachable());
}

/// Answers one request with `body` as `text/plain`.
async fn answer_once(body: Vec<u8>) -> u16 {
    answer_once_as("text/plain", body).await
}

/// Answers one request with `body` as `content_type`.
async fn answer_once_as(content_type: &'static str, body: Vec<u8>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf).await;
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let _ = conn.write_all(head.as_bytes()).await;
        let _ = conn.write_all(&body).await;
    });
    port
}

#[tokio::test]
async fn a_result_that_would_pass_the_line_bound_is_a_too_large_error() {
    let doc = parse(tools::tests::PETS).unwrap();
    let (catalog, _) = Catalog::from_document(&doc).unwrap();
    let catalog = Arc::new(catalog);
    let args = json!({"name": "listPets", "arguments": {"limit": 1}});
    // 20000 control bytes: well within the response bound, six times that as JSON text.
    for (body, too_large) in [(vec![1u8; 20_000], true), (vec![b'a'; 20_000], false)] {
        let port = answer_once(body).await;
        let mut config = OpenApiConfig::new(format!("http://127.0.0.1:{port}"));
        config.max_response_bytes = 64 * 1024;
        config.max_result_bytes = 64 * 1024;
        let u = OpenApiUpstream::new(catalog.clone(), config).unwrap();
        let (_, r) = ask(&u, "tools/call", args.clone()).await;
        let text = r["content"][0]["text"].as_str().unwrap_or("");
        match too_large {
            true => {
                assert_eq!(r["isError"], true, "{text:.80}");
                assert!(text.contains("too large"), "{text:.80}");
                assert!(text.contains("more than 65536 bytes"), "{text:.80}");
            }
            false => assert_eq!(text.len(), 20_000, "{r}"),
        }
    }
}

/// `[0,0,…]` of `n` elements: the JSON text with the most values per byte.
fn zeros(n: usize) -> Vec<u8> {
    let mut body = b"[0".to_vec();
    body.extend(std::iter::repeat_n(*b",0", n - 1).flatten());
    body.push(b']');
    body
}

/// A JSON answer is parsed only when its result could fit (it is carried twice) and its
/// parsed size, estimated from above, is within `MAX_PARSED_BYTES`: parsed, JSON takes tens
/// of times its text (review: a 14 MiB array of zeros took the gateway to 1.1 GB before the
/// result was found too large; then a 2 MiB array of one-element arrays to ~190 MB).
#[tokio::test]
async fn a_json_answer_too_large_or_too_large_parsed_is_refused_unparsed() {
    let doc = parse(tools::tests::PETS).unwrap();
    let (catalog, _) = Catalog::from_document(&doc).unwrap();
    let catalog = Arc::new(catalog);
    let args = json!({"name": "listPets", "arguments": {"limit": 1}});
    let max = response::MAX_PARSED_BYTES;
    // `[[0],[0],…]`: 2 MiB of text, hundreds of bytes per element parsed.
    let nested = {
        let mut body = b"[[0]".to_vec();
        body.extend(std::iter::repeat_n(*b",[0]", (2 << 20) / 4).flatten());
        body.push(b']');
        body
    };
    let cases = [
        // Over half the result bound: it can never be sent, and is not even parsed (invalid
        // JSON is "too large" too, not "not JSON").
        (zeros(20_000), 64 * 1024, Some("more than 65536 bytes")),
        (
            zeros(20_000)[1..].to_vec(),
            64 * 1024,
            Some("more than 65536 bytes"),
        ),
        (zeros(15_000), 64 * 1024, None),
        // Within the bound, but larger than parsing may take.
        (zeros(max / 160), 16 << 20, Some("too large to check")),
        (nested, 16 << 20, Some("too large to check")),
        (zeros(max / 200), 16 << 20, None),
        // A string is a string: `Value`'s own reading would find `[]` here (an empty list of
        // pets, valid), and parse any structure hidden there past the estimate.
        (
            br#"{"$serde_json::private::RawValue":"[]"}"#.to_vec(),
            16 << 20,
            None,
        ),
    ];
    for (body, bound, refused) in cases {
        let size = body.len();
        let port = answer_once_as("application/json", body).await;
        let mut config = OpenApiConfig::new(format!("http://127.0.0.1:{port}"));
        config.max_response_bytes = 16 << 20;
        config.max_result_bytes = bound;
        let u = OpenApiUpstream::new(catalog.clone(), config).unwrap();
        let (_, r) = ask(&u, "tools/call", args.clone()).await;
        let text = r["content"][0]["text"].as_str().unwrap_or("");
        match refused {
            Some(why) => {
                assert_eq!(r["isError"], true, "{size}: {text:.80}");
                assert!(text.contains(why), "{size}: {text:.80}");
            }
            // Parsed, and checked against listPets' response schema (pets, not numbers).
            None => assert!(text.contains("response schema"), "{size}: {text:.80}"),
        }
    }
}

#[test]
fn the_parsed_size_is_counted_outside_strings_only() {
    use response::parsed_size;
    assert_eq!(parsed_size(b"0"), 1 + 160);
    assert_eq!(parsed_size(b"[0,0]"), 5 + 160 + 400 + 160);
    assert_eq!(parsed_size(br#"{"a":1}"#), 7 + 160 + 600 + 160);
    assert_eq!(parsed_size(br#""a,b:[{""#), 8 + 160);
    // An escaped quote stays in the string; an escaped backslash ends it.
    assert_eq!(parsed_size(br#"["a\",[{",1]"#), 12 + 160 + 400 + 160);
    assert_eq!(parsed_size(br#"["a\\",[1]]"#), 11 + 160 + 400 + 160 + 400);
}

/// A secret written into the base URL's path (`…/bot${TOKEN}`) never comes back, as a
/// configured header's does not: an API quoting its request line hands it back otherwise
/// (review: it reached the caller in the text and `structuredContent`).
#[tokio::test]
async fn a_secret_in_the_base_urls_path_is_redacted_from_results() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let n = conn.read(&mut buf).await.unwrap();
        let line = String::from_utf8_lossy(&buf[..n]);
        let first = line.lines().next().unwrap_or_default().to_owned();
        let body = serde_json::to_vec(&json!({"request": first})).unwrap();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let _ = conn.write_all(head.as_bytes()).await;
        let _ = conn.write_all(&body).await;
    });
    let doc = parse(tools::tests::PETS).unwrap();
    let (catalog, _) = Catalog::from_document(&doc).unwrap();
    let secret = "123456:BotPathSecretXYZ";
    let mut config = OpenApiConfig::new(format!("http://127.0.0.1:{port}/bot{secret}"));
    config.secrets = vec![secret.to_owned()];
    let u = OpenApiUpstream::new(Arc::new(catalog), config).unwrap();
    let args = json!({"name": "deletePet", "arguments": {"petId": "a"}});
    let (_, r) = ask(&u, "tools/call", args).await;
    let text = r.to_string();
    assert!(
        text.contains("/pets/a"),
        "the request line came back: {text}"
    );
    assert!(!text.contains("BotPathSecretXYZ"), "{text}");
}

/// The spec and the request line are read as written too: a call's arguments behind
/// serde_json's RawValue key stay a string (review of 4cf4ec5: both still went through
/// `Value`'s own reading), and a spec holding the key, JSON or YAML, is refused (it would
/// reach the tools' definitions, which the gateway reads again: review of 8d4c7f1).
#[tokio::test]
async fn a_spec_and_a_request_are_read_as_written() {
    for text in [
        r#"{"openapi": "3.1.0", "paths": {}, "x": {"$serde_json::private::RawValue": "[]"}}"#,
        "openapi: 3.1.0\npaths: {}\nx:\n  \"$serde_json::private::RawValue\": \"[]\"\n",
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.message.contains("does not pass"), "{text}: {e:?}");
    }
    assert!(
        parse(r#"{"openapi": "3.1.0", "paths": {}, "x": "$serde_json::private::RawValue"}"#)
            .is_ok()
    );
    let u = upstream();
    let hidden = json!({"$serde_json::private::RawValue": "{\"limit\": 1}"});
    let (_, r) = ask(
        &u,
        "tools/call",
        json!({"name": "listPets", "arguments": hidden}),
    )
    .await;
    let text = r["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.starts_with("invalid arguments"), "{r}");
}

/// An API's answer that holds serde_json's RawValue key as a key (a pet's free-form member
/// keyed by a user) is not passed on: kept as a key by the reader, it went into the result,
/// where every other reader of the gateway's took it for JSON to parse again, and the
/// response guardrails, failing to read the answer, let it through unchecked (review HIGH).
#[tokio::test]
async fn an_answer_holding_serde_jsons_key_is_refused() {
    let doc = parse(tools::tests::PETS).unwrap();
    let (catalog, _) = Catalog::from_document(&doc).unwrap();
    let catalog = Arc::new(catalog);
    let args = json!({"name": "listPets", "arguments": {"limit": 1}});
    let body = br#"[{"name":"rex","meta":{"$serde_json::private::RawValue":"1"}}]"#.to_vec();
    let port = answer_once_as("application/json", body).await;
    let u = OpenApiUpstream::new(
        catalog.clone(),
        OpenApiConfig::new(format!("http://127.0.0.1:{port}")),
    )
    .unwrap();
    let (_, r) = ask(&u, "tools/call", args.clone()).await;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("does not pass"), "{text}");
    // The same pet without it is passed.
    let port = answer_once_as(
        "application/json",
        br#"[{"name":"rex","meta":{"k":"1"}}]"#.to_vec(),
    )
    .await;
    let u = OpenApiUpstream::new(
        catalog,
        OpenApiConfig::new(format!("http://127.0.0.1:{port}")),
    )
    .unwrap();
    let (_, r) = ask(&u, "tools/call", args).await;
    assert_ne!(r["isError"], true, "{r}");
}

/// A large JSON answer is parsed and checked with the worker's other tasks handed to another
/// thread: on a runtime of one worker, a task that only yields goes on running while the
/// parse runs (before, the worker ran nothing else until the parse ended, up to ~0.1 s
/// within the bounds). The only await before the parse is an uncontended semaphore, which
/// does not yield, so without the hand-off the ticker cannot move.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_large_answer_is_parsed_off_the_workers() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let doc = parse(tools::tests::PETS).unwrap();
    let (catalog, _) = Catalog::from_document(&doc).unwrap();
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = {
        let ticks = ticks.clone();
        tokio::spawn(async move {
            loop {
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    };
    // 1.3 MiB, within what parsing may take.
    let body = zeros(response::MAX_PARSED_BYTES / 200);
    let moved = tokio::spawn(async move {
        let tool = catalog.get("listPets").unwrap();
        let before = ticks.load(Ordering::Relaxed);
        let status = hyper::StatusCode::OK;
        let answer = ("application/json", &body[..]);
        let (result, _room) = response::result(tool, status, answer, usize::MAX).await;
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        (ticks.load(Ordering::Relaxed) - before, text)
    });
    let (moved, text) = moved.await.unwrap();
    ticker.abort();
    // Parsed and checked: the schema wants pets, not numbers.
    assert!(text.contains("response schema"), "{text:.80}");
    assert!(
        moved > 0,
        "the worker ran nothing else while the answer was parsed"
    );
}
