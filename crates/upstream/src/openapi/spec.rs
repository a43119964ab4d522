//! Reading a spec: YAML or JSON text into one JSON value (YAML mapping keys such as an
//! unquoted `200:` become strings), its OpenAPI version (3.0 or 3.1), and JSON pointers.

use serde_json::Value;

use super::error::SpecError;

/// Largest spec accepted, in bytes.
pub const MAX_SPEC_BYTES: usize = 16 * 1024 * 1024;

/// Which OpenAPI revision a document follows (they differ in their schema dialect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// 3.0.x: an extended subset of JSON Schema draft 4 (`nullable`, boolean `exclusive*`).
    V30,
    /// 3.1.x: JSON Schema 2020-12.
    V31,
}

/// The spec's text as a JSON value (JSON when it looks like JSON, else YAML).
pub fn parse(text: &str) -> Result<Value, SpecError> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(SpecError::new(
            "",
            format!("larger than {MAX_SPEC_BYTES} bytes"),
        ));
    }
    let doc = if text.trim_start().starts_with('{') {
        // As written (`plain`): no string parsed again behind serde_json's RawValue key.
        switchboard_wire::plain::parse(text.as_bytes()).map_err(|e| {
            SpecError::new(
                "",
                format!(
                    "not valid JSON: line {}, column {}: {e}",
                    e.line(),
                    e.column()
                ),
            )
        })?
    } else {
        super::yaml::parse(text)?
    };
    // The key would reach tool definitions and answers, which the gateway reads again.
    let written = serde_json::to_string(&doc).unwrap_or_default();
    if switchboard_wire::holds_reserved_key(&written) {
        return Err(SpecError::new(
            "",
            "holds the object key $serde_json::private::RawValue, which the gateway does not pass",
        ));
    }
    Ok(doc)
}

/// The document's OpenAPI version; Swagger 2.0 and other versions are refused.
pub(crate) fn version(doc: &Value) -> Result<Version, SpecError> {
    if !doc.is_object() {
        return Err(SpecError::new("", "the document is not an object"));
    }
    if doc.get("swagger").is_some() {
        return Err(SpecError::new(
            "#/swagger",
            "Swagger 2.0 is not supported: convert it to OpenAPI 3",
        ));
    }
    match doc.get("openapi").and_then(Value::as_str) {
        Some(v) if v.starts_with("3.0.") || v == "3.0" => Ok(Version::V30),
        Some(v) if v.starts_with("3.1.") || v == "3.1" => Ok(Version::V31),
        Some(v) => Err(SpecError::new(
            "#/openapi",
            format!("OpenAPI {v} is not supported (3.0 and 3.1 are)"),
        )),
        None => Err(SpecError::new(
            "#/openapi",
            "missing: not an OpenAPI 3 document",
        )),
    }
}

/// `token` escaped for a JSON pointer (`/` → `~1`, `~` → `~0`).
pub(crate) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The value a local reference (`#/components/schemas/Pet`) names.
pub(crate) fn lookup<'a>(doc: &'a Value, reference: &str) -> Result<&'a Value, String> {
    let Some(pointer) = reference.strip_prefix('#') else {
        return Err(format!(
            "$ref {reference:?} is not local to the document (only #/… references are)"
        ));
    };
    let decoded = percent_encoding::percent_decode_str(pointer).decode_utf8_lossy();
    doc.pointer(&decoded)
        .ok_or_else(|| format!("$ref {reference:?} does not resolve"))
}

/// Follows `$ref`s of a non-schema object (parameter, request body, response) to its target.
pub(crate) fn deref<'a>(doc: &'a Value, mut v: &'a Value) -> Result<&'a Value, String> {
    for _ in 0..16 {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => v = lookup(doc, r)?,
            None => return Ok(v),
        }
    }
    Err("a chain of more than 16 $refs".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_and_json_both_parse_and_numeric_keys_become_strings() {
        let y = parse("openapi: 3.0.3\npaths:\n  /a:\n    get:\n      responses:\n        200: {description: ok}\n").unwrap();
        assert_eq!(
            y["paths"]["/a"]["get"]["responses"]["200"]["description"],
            "ok"
        );
        let j = parse(r#"{"openapi":"3.1.0"}"#).unwrap();
        assert_eq!(version(&j).unwrap(), Version::V31);
        assert_eq!(version(&y).unwrap(), Version::V30);
        assert!(parse("openapi: [unclosed").is_err());
        assert!(parse("{nope")
            .unwrap_err()
            .message
            .contains("not valid JSON"));
        let e = version(&json!({"swagger": "2.0"})).unwrap_err();
        assert_eq!(e.pointer, "#/swagger");
        assert_eq!(
            version(&json!({"openapi": "4.0"})).unwrap_err().pointer,
            "#/openapi"
        );
    }

    #[test]
    fn references_resolve_locally_only() {
        let doc = json!({"components": {"schemas": {"a/b": {"type": "string"}}}});
        assert_eq!(
            lookup(&doc, "#/components/schemas/a~1b").unwrap()["type"],
            "string"
        );
        assert!(lookup(&doc, "other.yaml#/x").is_err());
        assert!(lookup(&doc, "#/components/schemas/none").is_err());
        let looped = json!({"a": {"$ref": "#/a"}});
        assert!(deref(&looped, &looped["a"]).is_err());
    }
}
