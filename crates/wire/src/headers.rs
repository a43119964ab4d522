//! Modern (2026-07-28) HTTP header rules that can be checked without I/O: `Mcp-Method` and
//! `Mcp-Name` must mirror the body (mcp-wire.md §3.3). Values may use the
//! `=?base64?<base64 of UTF-8>?=` sentinel encoding.

use base64::Engine;

use crate::classify::mismatch;
use crate::{ErrorObject, Message};

/// Decodes a header value: the sentinel form to its UTF-8 text, anything else as-is.
/// `None` when a sentinel value is not valid base64 or not UTF-8.
pub fn decode_value(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_owned()),
    }
}

/// Encodes a value for a mirror header: as-is when it is visible ASCII without surrounding
/// spaces (what a header can carry unchanged), else in the `=?base64?…?=` sentinel form.
pub fn encode_value(value: &str) -> String {
    let visible = value.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    let padded = value.starts_with(' ') || value.ends_with(' ');
    // A plain value that looks like a sentinel would be decoded as one.
    let looks_encoded = value.starts_with("=?base64?") && value.ends_with("?=");
    let plain = visible && !padded && !looks_encoded;
    if plain {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

/// The body value `Mcp-Name` must mirror: `params.name` for `tools/call` and `prompts/get`,
/// `params.uri` for `resources/read`, `params.taskId` for the Tasks extension's `tasks/get`,
/// `tasks/update` and `tasks/cancel`.
fn name_member(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Checks `Mcp-Method` (required on every request, case-sensitive) and `Mcp-Name` (required
/// where the method has a name) against the body. `None` header = absent; `Some(None)` =
/// present but not visible ASCII.
pub fn check_modern(
    msg: &Message<'_>,
    mcp_method: Option<Option<&str>>,
    mcp_name: Option<Option<&str>>,
) -> Result<(), ErrorObject> {
    let method = msg.method.unwrap_or_default();
    match mcp_method {
        None => return Err(mismatch("Mcp-Method header is required")),
        Some(Some(h)) if h == method => {}
        Some(_) => {
            return Err(mismatch(format!(
                "Header mismatch: Mcp-Method does not match the body method '{method}'"
            )))
        }
    }
    let Some(member) = name_member(method) else {
        return Ok(());
    };
    let body_value = msg
        .param(member)
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok());
    match (body_value, mcp_name) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(mismatch("Mcp-Name header is required for this method")),
        (Some(body), Some(header)) => {
            if header.and_then(decode_value).as_deref() == Some(body.as_str()) {
                Ok(())
            } else {
                Err(mismatch(format!(
                    "Header mismatch: Mcp-Name does not match the body {member}"
                )))
            }
        }
    }
}

/// One `x-mcp-header` designation in a tool's `inputSchema`: the argument at `path` (a chain
/// of `properties` keys) is mirrored in the header `Mcp-Param-{name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// The full header name, lowercase (`mcp-param-region`).
    pub header: String,
    /// The argument's location: property names from the top of `arguments`.
    pub path: Vec<String>,
}

/// Every `x-mcp-header` designation reachable from `schema` through `properties` alone (the
/// spec ignores ones behind `items`, combinators or `$ref`).
pub fn param_headers(schema: &serde_json::Value) -> Vec<ParamHeader> {
    let mut out = Vec::new();
    collect(schema, &mut Vec::new(), &mut out);
    out
}

fn collect(schema: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>) {
    let Some(props) = schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
    else {
        return;
    };
    for (name, prop) in props {
        path.push(name.clone());
        if let Some(h) = prop.get("x-mcp-header").and_then(serde_json::Value::as_str) {
            out.push(ParamHeader {
                header: format!("mcp-param-{}", h.to_ascii_lowercase()),
                path: path.clone(),
            });
        }
        collect(prop, path, out);
        path.pop();
    }
}

/// Why a tool's `x-mcp-header` designations make the tool unusable (SEP-2243), or `None` when
/// they are valid (or there are none). A designation must be a non-empty RFC 9110 token,
/// unique within the schema ignoring case, on a `string`, `integer` or `boolean` property.
/// A client drops such a tool from its list and never calls it.
pub fn invalid_designation(schema: &serde_json::Value) -> Option<String> {
    let mut seen = Vec::new();
    invalid_in(schema, &mut Vec::new(), &mut seen)
}

fn invalid_in(
    schema: &serde_json::Value,
    path: &mut Vec<String>,
    seen: &mut Vec<String>,
) -> Option<String> {
    let props = schema
        .get("properties")
        .and_then(serde_json::Value::as_object)?;
    for (name, prop) in props {
        path.push(name.clone());
        if let Some(designation) = prop.get("x-mcp-header") {
            let at = path.join(".");
            let Some(header) = designation.as_str() else {
                return Some(format!("x-mcp-header of {at} is not a string"));
            };
            if header.is_empty() {
                return Some(format!("x-mcp-header of {at} is empty"));
            }
            if !header.bytes().all(is_tchar) {
                return Some(format!("x-mcp-header of {at} is not an HTTP token"));
            }
            let folded = header.to_ascii_lowercase();
            if seen.contains(&folded) {
                return Some(format!("x-mcp-header of {at} repeats another's name"));
            }
            seen.push(folded);
            if !primitive(prop.get("type")) {
                return Some(format!(
                    "x-mcp-header of {at} is on a property that is not a string, integer or boolean"
                ));
            }
        }
        if let Some(why) = invalid_in(prop, path, seen) {
            return Some(why);
        }
        path.pop();
    }
    None
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether a property's `type` allows only what a header can mirror: `string`, `integer`,
/// `boolean` (in a list, also `null`: a null value omits the header).
fn primitive(kind: Option<&serde_json::Value>) -> bool {
    let allowed = |t: &str| matches!(t, "string" | "integer" | "boolean");
    match kind {
        Some(serde_json::Value::String(t)) => allowed(t),
        Some(serde_json::Value::Array(types)) => {
            let names: Vec<_> = types.iter().filter_map(serde_json::Value::as_str).collect();
            names.len() == types.len()
                && names.iter().any(|t| allowed(t))
                && names.iter().all(|t| allowed(t) || *t == "null")
        }
        _ => false,
    }
}

/// Checks the `Mcp-Param-*` headers of a `tools/call` against its arguments: a designated
/// argument with a value needs its header, equal after sentinel decoding (integers compare
/// numerically, booleans as `true`/`false`); a header without a value in the body is a
/// mismatch too. A designated argument spelled another way is refused ([`designated`]).
/// `header` returns `None` when absent, `Some(None)` when not visible ASCII.
pub fn check_params<'h>(
    arguments: Option<&serde_json::Value>,
    spec: &[ParamHeader],
    header: impl Fn(&str) -> Option<Option<&'h str>>,
) -> Result<(), ErrorObject> {
    for p in spec {
        let value = designated(arguments, p)?.filter(|v| !v.is_null());
        let matches = match (value, header(&p.header)) {
            (None, None) => true,
            (None, Some(_)) | (Some(_), None) | (Some(_), Some(None)) => false,
            (Some(v), Some(Some(h))) => decode_value(h).is_some_and(|h| mirrors(v, &h)),
        };
        if !matches {
            return Err(mismatch(format!(
                "Header mismatch: {} does not match the argument {}",
                p.header,
                p.path.join(".")
            )));
        }
    }
    Ok(())
}

/// The `Mcp-Param-*` headers a client must send for these `arguments` (what
/// [`check_params`] accepts): for an upstream that checks them. Refused as [`check_params`]
/// refuses a designated argument spelled another way.
pub fn param_values(
    arguments: Option<&serde_json::Value>,
    spec: &[ParamHeader],
) -> Result<Vec<(String, String)>, ErrorObject> {
    let mut out = Vec::new();
    for p in spec {
        let text = match designated(arguments, p)? {
            Some(serde_json::Value::String(s)) => encode_value(s),
            Some(serde_json::Value::Bool(b)) => b.to_string(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => continue,
        };
        out.push((p.header.clone(), text));
    }
    Ok(out)
}

/// The value of the argument `p` designates, `None` when absent. Refused (-32602) when an
/// object on its path holds a member that names the designated one for a parser matching keys
/// loosely ([`crate::keys_fold_equal`]: `Region` for `region`, with or without `region`
/// beside it): Go's `encoding/json` reads that member as the argument, so the backend would act
/// on a value no header mirrors and the gateway never compared.
fn designated<'a>(
    arguments: Option<&'a serde_json::Value>,
    p: &ParamHeader,
) -> Result<Option<&'a serde_json::Value>, ErrorObject> {
    let mut at = arguments;
    for name in &p.path {
        let Some(members) = at.and_then(serde_json::Value::as_object) else {
            return Ok(None);
        };
        let loose = |k: &String| k != name && crate::keys_fold_equal(k, name);
        if members.keys().any(loose) {
            return Err(ErrorObject::new(
                crate::codes::INVALID_PARAMS,
                format!(
                    "Invalid params: the argument {} (mirrored in {}) is spelled another way",
                    p.path.join("."),
                    p.header
                ),
            ));
        }
        at = members.get(name);
    }
    Ok(at)
}

fn mirrors(body: &serde_json::Value, header: &str) -> bool {
    match body {
        serde_json::Value::String(s) => s == header,
        serde_json::Value::Bool(b) => header == if *b { "true" } else { "false" },
        serde_json::Value::Number(n) => match (n.as_i64(), header.parse::<i64>().ok()) {
            (Some(a), Some(b)) => a == b,
            _ => n
                .as_f64()
                .zip(header.parse::<f64>().ok())
                .is_some_and(|(a, b)| a == b),
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests;
