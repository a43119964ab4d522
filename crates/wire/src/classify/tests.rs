use super::*;

fn req(method: &str, meta: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"_meta":{meta}}}}}"#)
}

const MODERN_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

fn run(body: &str, header: Option<&str>) -> Result<Era, i32> {
    let msg = Message::parse(body.as_bytes()).unwrap();
    classify(&msg, header).map_err(|e| e.code)
}

#[test]
fn truth_table() {
    let modern = Ok(Era::Modern("2026-07-28".into()));
    let cases: Vec<(String, Option<&str>, Result<Era, i32>)> = vec![
        // Valid Modern via _meta only, and via header + _meta.
        (req("tools/list", MODERN_META), None, modern.clone()),
        (req("tools/list", MODERN_META), Some("2026-07-28"), modern.clone()),
        // Header/body mismatch.
        (req("tools/list", MODERN_META), Some("2025-11-25"), Err(codes::HEADER_MISMATCH)),
        // Unsupported version, header and body agreeing (the conformance "v999.0.0" probe).
        (req("tools/list", r#"{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}"#), Some("v999.0.0"), Err(codes::UNSUPPORTED_PROTOCOL_VERSION)),
        (req("tools/list", r#"{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}"#), None, Err(codes::UNSUPPORTED_PROTOCOL_VERSION)),
        // Modern signal without a usable protocolVersion.
        (req("tools/list", r#"{"io.modelcontextprotocol/protocolVersion":5,"io.modelcontextprotocol/clientCapabilities":{}}"#), None, Err(codes::INVALID_PARAMS)),
        (req("tools/list", r#"{"io.modelcontextprotocol/protocolVersion":5}"#), Some("2026-07-28"), Err(codes::HEADER_MISMATCH)),
        (req("tools/list", "{}"), Some("2026-07-28"), Err(codes::INVALID_PARAMS)),
        (r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#.into(), None, Err(codes::INVALID_PARAMS)),
        // clientCapabilities missing or not an object.
        (req("tools/list", r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#), None, Err(codes::INVALID_PARAMS)),
        (req("tools/list", r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}"#), None, Err(codes::INVALID_PARAMS)),
        // logLevel (or clientInfo) alone is not a Modern signal; an older header outranks it.
        (req("tools/list", r#"{"io.modelcontextprotocol/logLevel":"debug"}"#), None, Ok(Era::Legacy)),
        (req("tools/list", r#"{"io.modelcontextprotocol/clientInfo":{"name":"x","version":"1"}}"#), Some("2025-11-25"), Ok(Era::Legacy)),
        // initialize without a Modern claim is Legacy; with one it is Modern (then 404 upstream).
        (req("initialize", r#"{"progressToken":1}"#), None, Ok(Era::Legacy)),
        (req("initialize", MODERN_META), None, modern.clone()),
        // Tolerant _meta extraction.
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.into(), None, Ok(Era::Legacy)),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}"#.into(), None, Ok(Era::Legacy)),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":"x"}}"#.into(), None, Ok(Era::Legacy)),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":null}}"#.into(), Some("2025-06-18"), Ok(Era::Legacy)),
        // Notifications classify the same way.
        (r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#.into(), None, modern),
    ];
    for (body, header, want) in cases {
        assert_eq!(run(&body, header), want, "{body} with header {header:?}");
    }
}

#[test]
fn unsupported_lists_what_we_serve() {
    let e = unsupported("v9");
    let data = e.data.unwrap();
    assert_eq!(data["requested"], "v9");
    assert!(data["supported"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v == "2026-07-28"));
}
