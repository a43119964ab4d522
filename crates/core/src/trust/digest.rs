//! What a tool pin is made of: the canonical JSON of the definition's fields that tell a
//! model what the tool does (name, title, description, schemas, annotations) and its
//! SHA-256. Canonical means keys sorted at every depth and no whitespace, written here rather
//! than left to `serde_json`: its map keeps insertion order when any crate in the build turns
//! on `preserve_order`, and a pin must not depend on the feature set.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The definition fields a pin covers. Anything else a backend adds (`_meta`, `icons`,
/// execution hints) may change without re-approval: it does not change what the model reads.
pub(crate) const PINNED_FIELDS: [&str; 6] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// Longest old/new value an audit diff quotes per field, in bytes.
pub(crate) const DIFF_VALUE_LIMIT: usize = 1024;

/// The pinned part of `tool`: its [`PINNED_FIELDS`] that are present.
pub(crate) fn pinned_part(tool: &Value) -> Value {
    let mut out = Map::new();
    for field in PINNED_FIELDS {
        if let Some(v) = tool.get(field) {
            out.insert(field.to_owned(), v.clone());
        }
    }
    Value::Object(out)
}

/// `value` as canonical JSON text.
pub(crate) fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        // Scalars: serde_json's own text (strings escaped, numbers as parsed).
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The pin digest of a tool definition: lowercase hex SHA-256 of the canonical pinned part.
pub(crate) fn digest(tool: &Value) -> String {
    hex(&Sha256::digest(canonical(&pinned_part(tool)).as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The pinned fields whose values differ between `old` and `new` (pinned parts), in
/// [`PINNED_FIELDS`] order. Without the old definition (it was too large to keep) every
/// field is reported as changed.
pub(crate) fn changed_fields(old: Option<&Value>, new: &Value) -> Vec<&'static str> {
    PINNED_FIELDS
        .into_iter()
        .filter(|f| match old {
            Some(old) => old.get(*f).map(canonical) != new.get(*f).map(canonical),
            None => true,
        })
        .collect()
}

/// A bounded diff for an audit line: per changed field, its old and new canonical text,
/// each cut to [`DIFF_VALUE_LIMIT`] bytes (`null` where absent).
pub(crate) fn diff(old: Option<&Value>, new: &Value, fields: &[&str]) -> Value {
    let quote = |v: Option<&Value>| match v {
        Some(v) => Value::String(cut(&canonical(v), DIFF_VALUE_LIMIT)),
        None => Value::Null,
    };
    let mut out = Map::new();
    for field in fields {
        let mut one = Map::new();
        one.insert("old".into(), quote(old.and_then(|o| o.get(*field))));
        one.insert("new".into(), quote(new.get(*field)));
        out.insert((*field).to_owned(), Value::Object(one));
    }
    Value::Object(out)
}

/// At most `limit` bytes of `s` (on a character boundary), with `…` when cut.
fn cut(s: &str, limit: usize) -> String {
    if s.len() <= limit {
        return s.to_owned();
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_digest() {
        let a: Value = serde_json::from_str(
            r#"{"name":"echo","description":"Echo","inputSchema":{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str(
            "{ \"inputSchema\" : { \"properties\" : { \"a\" : {\"type\":\"integer\"},\n \"b\": {\"type\": \"string\"} }, \"type\": \"object\" },\n\t\"description\": \"Echo\", \"name\": \"echo\" }",
        )
        .unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(digest(&a).len(), 64);
    }

    #[test]
    fn any_pinned_value_change_changes_the_digest() {
        let base = json!({"name":"echo","title":"E","description":"Echo",
            "inputSchema":{"type":"object"},"outputSchema":{"type":"object"},
            "annotations":{"readOnlyHint":true}});
        let d = digest(&base);
        for (field, value) in [
            ("name", json!("echo2")),
            ("title", json!("E2")),
            ("description", json!("Echo!")),
            ("inputSchema", json!({"type":"object","required":["x"]})),
            ("outputSchema", json!({"type":"string"})),
            ("annotations", json!({"readOnlyHint":false})),
        ] {
            let mut changed = base.clone();
            changed[field] = value;
            assert_ne!(digest(&changed), d, "{field}");
            assert_eq!(changed_fields(Some(&base), &changed), vec![field]);
        }
        let mut removed = base.clone();
        removed.as_object_mut().unwrap().remove("title");
        assert_ne!(digest(&removed), d);
        // Fields outside the pin do not count.
        let mut meta = base.clone();
        meta["_meta"] = json!({"x": 1});
        meta["icons"] = json!([]);
        assert_eq!(digest(&meta), d);
    }

    #[test]
    fn diffs_are_bounded() {
        let old = json!({"name":"t","description":"short"});
        let new = json!({"name":"t","description":"x".repeat(5000)});
        let fields = changed_fields(Some(&old), &new);
        assert_eq!(fields, vec!["description"]);
        let d = diff(Some(&old), &new, &fields);
        assert_eq!(d["description"]["old"], json!("\"short\""));
        let quoted = d["description"]["new"].as_str().unwrap();
        assert!(quoted.len() <= DIFF_VALUE_LIMIT + 3, "{}", quoted.len());
        assert!(quoted.ends_with('…'));
    }
}
