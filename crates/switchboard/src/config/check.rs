//! Checks across entries that a schema cannot state (or states badly): unique backend names,
//! exactly one of `command`/`url`/`openapi` and the keys that only make sense with one of them, and
//! `aggregation.priority` naming configured backends. They read the JSON value, so they run
//! and report alongside the schema's errors.
//!
//! Hook for later: `manual` conflict resolution needs an override for every colliding name,
//! which is known only once the backends' lists are fetched; the aggregating core checks that
//! at startup (and `validate` will print its mapping once the core can compute it).

use std::collections::HashMap;

use serde_json::Value;

use super::ConfigError;

const URL_ONLY: [&str; 5] = [
    "transport",
    "headers",
    "headersFile",
    "forwardCallerToken",
    "auth",
];
const COMMAND_ONLY: [&str; 6] = ["args", "env", "cwd", "isolation", "sandbox", "replicas"];
/// What an `openapi` backend does not take (its credentials are `headers`/`headersFile`;
/// `auth` strategies are not wired to it yet).
const OPENAPI_NOT: [&str; 9] = [
    "args",
    "replicas",
    "env",
    "cwd",
    "isolation",
    "sandbox",
    "transport",
    "forwardCallerToken",
    "auth",
];

pub(crate) fn across(doc: &Value) -> Vec<ConfigError> {
    let mut out = Vec::new();
    let backends = doc
        .get("backends")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, b) in backends.iter().enumerate() {
        let at = format!("backends[{i}]");
        if let Some(name) = b.get("name").and_then(Value::as_str) {
            if let Some(first) = seen.get(name) {
                out.push(ConfigError::new(
                    &format!("{at}.name"),
                    format!("\"{name}\" is already the name of backends[{first}]"),
                ));
            } else {
                seen.insert(name, i);
            }
        }
        out.extend(kind(b, &at));
        if b.get("auth").is_some() && b.get("forwardCallerToken").is_some() {
            out.push(ConfigError::new(
                &format!("{at}.forwardCallerToken"),
                "give auth or forwardCallerToken (an alias of auth: {type: passthrough}), not both",
            ));
        }
    }
    if let Some(issuer) = doc.pointer("/auth/jwt/issuer").and_then(Value::as_str) {
        if let Some(why) = switchboard_http::reserved_issuer(issuer) {
            out.push(ConfigError::new("auth.jwt.issuer", why));
        }
    }
    if let Some(priority) = doc
        .pointer("/aggregation/priority")
        .and_then(Value::as_array)
    {
        let mut listed: HashMap<&str, usize> = HashMap::new();
        for (i, p) in priority.iter().enumerate() {
            let Some(name) = p.as_str() else { continue };
            let at = format!("aggregation.priority[{i}]");
            if !seen.contains_key(name) {
                let message = super::suggest::with_hint(
                    format!("no backend is named \"{name}\""),
                    name,
                    backends
                        .iter()
                        .filter_map(|b| b.get("name").and_then(Value::as_str)),
                );
                out.push(ConfigError::new(&at, message));
            } else if let Some(first) = listed.insert(name, i) {
                out.push(ConfigError::new(
                    &at,
                    format!("\"{name}\" is already listed at priority[{first}]"),
                ));
            }
        }
    }
    out
}

/// Exactly one of `command`, `url` and `openapi`, and no key of another kind.
fn kind(b: &Value, at: &str) -> Vec<ConfigError> {
    let Some(obj) = b.as_object() else {
        return Vec::new();
    };
    let given: Vec<&str> = ["command", "url", "openapi"]
        .into_iter()
        .filter(|k| obj.contains_key(*k))
        .collect();
    let (wrong, kind): (&[&str], &str) = match given[..] {
        [] => {
            return vec![ConfigError::new(
                &format!("{at}.command"),
                "required (or url, for a remote server; or openapi, for a REST API)",
            )]
        }
        ["command"] => (&URL_ONLY[..], "url"),
        ["url"] => (&COMMAND_ONLY[..], "command"),
        ["openapi"] => (&OPENAPI_NOT[..], "command or url"),
        _ => {
            return vec![ConfigError::new(
                at,
                format!(
                    "give one of command, url or openapi, not {}",
                    given.join(" and ")
                ),
            )]
        }
    };
    wrong
        .iter()
        .filter(|k| obj.contains_key(**k))
        .map(|k| ConfigError::new(&format!("{at}.{k}"), format!("only for a {kind} backend")))
        .collect()
}
