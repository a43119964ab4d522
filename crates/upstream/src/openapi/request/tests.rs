use serde_json::{json, Map, Value};

use super::*;
use crate::openapi::tools::Catalog;

fn op(spec: Value) -> Operation {
    let (c, _) = Catalog::from_document(&spec).unwrap();
    c.tools.into_iter().next().unwrap().op
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn base() -> Base {
    Base::parse("http://127.0.0.1:9/api/").unwrap()
}

fn spec(params: Value) -> Value {
    json!({"openapi": "3.1.0", "paths": {"/items/{id}": {"post": {
        "operationId": "x", "parameters": params,
        "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}},
        "responses": {}}}}})
}

fn id_param() -> Value {
    json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"}})
}

#[test]
fn path_query_headers_and_body_are_built_exactly() {
    let o = op(spec(json!([id_param(),
        {"name": "tag", "in": "query", "schema": {"type": "array"}},
        {"name": "ids", "in": "query", "explode": false, "schema": {"type": "array"}},
        {"name": "pipe", "in": "query", "style": "pipeDelimited", "schema": {"type": "array"}},
        {"name": "f", "in": "query", "style": "deepObject", "schema": {"type": "object"}},
        {"name": "X-Req", "in": "header", "schema": {"type": "string"}},
        {"name": "sid", "in": "cookie", "schema": {"type": "string"}}])));
    let a = args(
        json!({"id": "a b%", "tag": ["x", "y z"], "ids": [1, 2], "pipe": ["p", "q"],
        "f": {"k": "v"}, "X-Req": "r1", "sid": "s;1", "body": {"n": 1}}),
    );
    let r = build(&base(), &o, &a, &[]).unwrap();
    assert_eq!(r.method(), hyper::Method::POST);
    assert_eq!(
        r.uri().to_string(),
        "http://127.0.0.1:9/api/items/a%20b%25?tag=x&tag=y%20z&ids=1,2&pipe=p%7Cq&f%5Bk%5D=v"
    );
    assert_eq!(r.headers()["x-req"], "r1");
    assert_eq!(r.headers()["cookie"], "sid=s%3B1");
    assert_eq!(r.headers()["content-type"], "application/json");
}

#[test]
fn path_values_cannot_leave_their_segment() {
    let o = op(spec(json!([id_param()])));
    for bad in ["../admin", "a/b", "..", ".", "", "a\\b"] {
        let e = build(&base(), &o, &args(json!({"id": bad})), &[]).unwrap_err();
        assert!(matches!(e, OpenApiError::Argument(_)), "{bad}: {e}");
    }
    let ok = build(&base(), &o, &args(json!({"id": "..."})), &[]).unwrap();
    assert_eq!(ok.uri().path(), "/api/items/...");
    let enc = build(&base(), &o, &args(json!({"id": "%2e%2e"})), &[]).unwrap();
    assert_eq!(enc.uri().path(), "/api/items/%252e%252e");
}

#[test]
fn header_values_cannot_carry_line_breaks_or_override_configured_headers() {
    let o = op(spec(json!([id_param(),
        {"name": "X-A", "in": "header", "schema": {"type": "string"}},
        {"name": "Authorization2", "in": "header", "schema": {"type": "string"}}])));
    for bad in ["a\r\nX-Evil: 1", "a\nb", "a\rb"] {
        let e = build(&base(), &o, &args(json!({"id": "1", "X-A": bad})), &[]).unwrap_err();
        assert!(e.to_string().contains("CR, LF"), "{e}");
    }
    let fixed = [(
        HeaderName::from_static("authorization2"),
        HeaderValue::from_static("secret"),
    )];
    let a = args(json!({"id": "1", "Authorization2": "mine"}));
    let r = build(&base(), &o, &a, &fixed).unwrap();
    let values: Vec<_> = r.headers().get_all("authorization2").iter().collect();
    assert_eq!(values, ["secret"]);
}

#[test]
fn form_bodies_and_the_base_url() {
    let s = json!({"openapi": "3.1.0", "paths": {"/f": {"post": {"operationId": "f",
        "requestBody": {"content": {"application/x-www-form-urlencoded": {"schema": {
            "type": "object"}}}}, "responses": {}}}}});
    let o = op(s);
    let a = args(json!({"body": {"a": "x y", "b": [1, 2]}}));
    let r = build(&Base::parse("https://h.example").unwrap(), &o, &a, &[]).unwrap();
    assert_eq!(r.uri().to_string(), "https://h.example/f");
    assert_eq!(
        r.headers()["content-type"],
        "application/x-www-form-urlencoded"
    );
    for bad in ["ftp://h", "/rel", "http://h/x?q=1"] {
        assert!(Base::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn exploded_object_keys_cannot_be_another_query_parameter() {
    let o = op(spec(json!([id_param(),
        {"name": "limit", "in": "query", "schema": {"type": "integer"}},
        {"name": "filter", "in": "query", "schema": {"type": "object"}},
        {"name": "deep", "in": "query", "style": "deepObject", "schema": {"type": "object"}},
        {"name": "flat", "in": "query", "explode": false, "schema": {"type": "object"}}])));
    for bad in [
        json!({"id": "1", "filter": {"limit": 100000}}),
        json!({"id": "1", "limit": 5, "filter": {"a": 1, "limit": 100000}}),
        json!({"id": "1", "filter": {"deep": "x"}}),
    ] {
        let e = build(&base(), &o, &args(bad.clone()), &[]).unwrap_err();
        assert!(
            e.to_string().contains("is another query parameter"),
            "{bad}: {e}"
        );
    }
    // Its own name, and keys of a deepObject or an unexploded object, stay in their place.
    let a = json!({"id": "1", "filter": {"filter": 1},
        "deep": {"limit": 3}, "flat": {"limit": 4}});
    let r = build(&base(), &o, &args(a), &[]).unwrap();
    assert_eq!(
        r.uri().query(),
        Some("filter=1&deep%5Blimit%5D=3&flat=limit,4")
    );
}

#[test]
fn header_cookie_and_url_lengths_are_bounded() {
    let o = op(spec(json!([id_param(),
        {"name": "q", "in": "query", "schema": {"type": "string"}},
        {"name": "X-A", "in": "header", "schema": {"type": "string"}},
        {"name": "c1", "in": "cookie", "schema": {"type": "string"}},
        {"name": "c2", "in": "cookie", "schema": {"type": "string"}}])));
    let at_most = "h".repeat(MAX_HEADER_VALUE);
    let over = "h".repeat(MAX_HEADER_VALUE + 1);
    let ok = build(&base(), &o, &args(json!({"id": "1", "X-A": at_most})), &[]).unwrap();
    assert_eq!(ok.headers()["x-a"].len(), MAX_HEADER_VALUE);
    for (a, why) in [
        (
            json!({"id": "1", "X-A": over}),
            "header parameter X-A is longer",
        ),
        (
            json!({"id": "1", "c1": over}),
            "cookie parameter c1 is longer",
        ),
        (
            json!({"id": "1", "c1": at_most, "c2": "x"}),
            "cookie parameters are longer",
        ),
        (
            json!({"id": "1", "q": "q".repeat(MAX_URL)}),
            "URL would be longer",
        ),
        (json!({"id": "i".repeat(MAX_URL)}), "URL would be longer"),
    ] {
        let e = build(&base(), &o, &args(a), &[]).unwrap_err().to_string();
        assert!(e.contains(why), "{why}: {e}");
    }
    let q = "q".repeat(MAX_URL - 100);
    let ok = build(&base(), &o, &args(json!({"id": "1", "q": q})), &[]).unwrap();
    assert!(ok.uri().to_string().len() <= MAX_URL);
}
