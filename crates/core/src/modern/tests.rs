use super::*;
use serde_json::value::RawValue;

#[test]
fn a_legacy_client_gets_no_modern_only_members() {
    let r = r#"{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"b"},"x":1}}"#;
    assert_eq!(
        legacy_result(r).unwrap().get(),
        r#"{"content":[],"_meta":{"x":1}}"#
    );
    let pending = r#"{"resultType":"input_required","inputRequests":{}}"#;
    assert!(legacy_result(pending).is_none());
    assert!(legacy_result(r#"{"content":[]}"#).is_none());
}

#[test]
fn a_legacy_result_is_stamped_complete_in_one_spelling_only() {
    let r = RawValue::from_string(r#"{"ResultType":"input_required","re\u017fultType":1,"inputRequests":{},"resultType":"x","resultType":"y"}"#.into()).unwrap();
    let out = stamp(&r, "tools/call", "{}").unwrap();
    let want = r#"{"inputRequests":{},"resultType":"complete","_meta":{}}"#;
    assert_eq!(out.get(), want);
}

#[test]
fn reserved_keys_are_stripped_and_others_kept() {
    let p = RawValue::from_string(r#"{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":1,"app/key":2}}"#.into()).unwrap();
    assert_eq!(
        strip_reserved(&p).unwrap().get(),
        r#"{"name":"x","_meta":{"progressToken":1,"app/key":2}}"#
    );
}

#[test]
fn meta_merge_keeps_existing_members() {
    let r = RawValue::from_string(r#"{"tools":[],"_meta":{"a":1}}"#.into()).unwrap();
    let out = merge_meta(&r, r#"{"io.modelcontextprotocol/serverInfo":{"name":"s"}}"#).unwrap();
    assert_eq!(
        out.get(),
        r#"{"tools":[],"_meta":{"a":1,"io.modelcontextprotocol/serverInfo":{"name":"s"}}}"#
    );
}

#[test]
fn capabilities_are_flags_only() {
    let caps = json!({"tools":{"listChanged":true},"tasks":{"list":{}},"logging":{}});
    assert_eq!(
        flags_only(&caps),
        json!({"tools":{"listChanged":true},"logging":{}})
    );
}
