//! The shipped JSON Schema, and its errors as `path: message` lines
//! (`backends[2].command: required`). Messages never quote a value from the file: a value
//! may be a secret.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::{Location, LocationSegment};
use serde_json::Value;

use super::ConfigError;

/// `schema/switchboard.schema.json`, compiled into the binary so `validate` checks against
/// exactly the schema this build understands.
pub(crate) const SCHEMA: &str = include_str!("../../../../schema/switchboard.schema.json");

/// Every schema error in `doc`, in the schema's traversal order.
pub(crate) fn check(doc: &Value) -> Vec<ConfigError> {
    let schema: Value = match serde_json::from_str(SCHEMA) {
        Ok(s) => s,
        Err(e) => return vec![ConfigError::new("", format!("the built-in schema: {e}"))],
    };
    let validator = match jsonschema::draft202012::new(&schema) {
        Ok(v) => v,
        Err(e) => return vec![ConfigError::new("", format!("the built-in schema: {e}"))],
    };
    let mut out: Vec<ConfigError> = Vec::new();
    for error in validator.iter_errors(doc) {
        let at = display_path(doc, error.instance_path());
        let segments: Vec<String> = error
            .instance_path()
            .iter()
            .map(|s| match s {
                LocationSegment::Index(i) => i.to_string(),
                LocationSegment::Property(p) => p.into_owned(),
            })
            .collect();
        let known = || super::suggest::schema_keys(&schema, &segments);
        for e in describe(&at, error.kind(), &known).unwrap_or_else(|| {
            // A kind this file does not phrase itself; the masked form quotes no value.
            vec![ConfigError::new(&at, error.masked().to_string())]
        }) {
            if !out.contains(&e) {
                out.push(e);
            }
        }
    }
    out
}

/// `known`: the keys the schema allows at `at` (for "did you mean").
fn describe(
    at: &str,
    kind: &ValidationErrorKind,
    known: &dyn Fn() -> Vec<String>,
) -> Option<Vec<ConfigError>> {
    let one = |message: String| Some(vec![ConfigError::new(at, message)]);
    match kind {
        ValidationErrorKind::Required { property } => {
            let key = property.as_str().unwrap_or_default();
            Some(vec![ConfigError::new(&join_key(at, key), "required")])
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let known = known();
            let candidates = || known.iter().map(String::as_str);
            Some(
                unexpected
                    .iter()
                    .map(|k| {
                        let message = super::suggest::with_hint("unknown key", k, candidates());
                        ConfigError::new(&join_key(at, k), message)
                    })
                    .collect(),
            )
        }
        ValidationErrorKind::Type { kind } => one(format!("expected {}", type_names(kind))),
        ValidationErrorKind::Enum { options } => {
            let names: Vec<String> = match &**options {
                Value::Array(items) => items.iter().map(|v| v.to_string()).collect(),
                other => vec![other.to_string()],
            };
            one(format!("expected one of {}", names.join(", ")))
        }
        ValidationErrorKind::Pattern { pattern } => one(format!("must match {pattern}")),
        ValidationErrorKind::Minimum { limit } => one(format!("must be at least {limit}")),
        ValidationErrorKind::Maximum { limit } => one(format!("must be at most {limit}")),
        ValidationErrorKind::MinLength { limit: 1 } => one("must not be empty".to_owned()),
        ValidationErrorKind::MinItems { limit: 1 } => one("needs at least one entry".to_owned()),
        _ => None,
    }
}

fn type_names(kind: &TypeKind) -> String {
    match kind {
        TypeKind::Single(t) => article(&t.to_string()),
        TypeKind::Multiple(set) => set
            .iter()
            .map(|t| article(&t.to_string()))
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

fn article(name: &str) -> String {
    match name {
        "object" | "array" | "integer" => format!("an {name}"),
        "null" => name.to_owned(),
        _ => format!("a {name}"),
    }
}

/// `/backends/2/env/KEY` → `backends[2].env.KEY`. A segment is an index only where the
/// document has an array (an `env` key may well be `"1"`).
pub(crate) fn display_path(doc: &Value, location: &Location) -> String {
    let mut out = String::new();
    let mut at = Some(doc);
    for segment in location.iter() {
        let key = match segment {
            LocationSegment::Index(i) if at.is_some_and(Value::is_array) => {
                out.push_str(&format!("[{i}]"));
                at = at.and_then(|v| v.get(i));
                continue;
            }
            LocationSegment::Index(i) => i.to_string(),
            LocationSegment::Property(p) => p.into_owned(),
        };
        at = at.and_then(|v| v.get(&key));
        out = join_key(&out, &key);
    }
    out
}

/// `path` + `.key`, or `["key"]` when the key is not a plain word.
pub(crate) fn join_key(path: &str, key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$');
    match (path.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::from(key)),
    }
}
