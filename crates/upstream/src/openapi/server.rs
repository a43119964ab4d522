//! The MCP side of an OpenAPI backend: it answers as a server of both eras would. Legacy:
//! `initialize`, `ping`; Modern (a request whose `_meta` carries the envelope, or
//! `server/discover`): results marked `resultType: complete` with the server's info; both:
//! `tools/list` (one page) and `tools/call`. Anything else is "method not found". It holds no
//! state between requests, so one instance serves every session and caller.

use serde_json::{json, Value};

use switchboard_wire::classify::{META_PROTOCOL_VERSION, META_SERVER_INFO};
use switchboard_wire::{codes, version};

use super::tools::Catalog;

/// A JSON-RPC error to answer with.
#[derive(Debug)]
pub(crate) struct RpcError {
    pub(crate) code: i32,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

impl RpcError {
    fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(crate) fn to_value(&self) -> Value {
        let mut v = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            v["data"] = d.clone();
        }
        v
    }
}

/// What a request asks for, once its era and method are known.
#[derive(Debug)]
pub(crate) enum Ask {
    /// Answered at once.
    Now(Result<Value, RpcError>),
    /// `tools/call` of this tool with these arguments (answered after the HTTP exchange).
    Call {
        tool: String,
        args: serde_json::Map<String, Value>,
    },
}

/// Whether `params` make it a Modern request.
pub(crate) fn is_modern(method: &str, params: &Value) -> bool {
    method == "server/discover" || params["_meta"].get(META_PROTOCOL_VERSION).is_some()
}

/// Decides `method` with `params` in its era.
pub(crate) fn ask(catalog: &Catalog, method: &str, params: &Value) -> Ask {
    let modern = is_modern(method, params);
    if modern {
        let asked = params["_meta"][META_PROTOCOL_VERSION]
            .as_str()
            .unwrap_or("");
        if !version::is_modern(asked) {
            let mut e = RpcError::new(
                codes::UNSUPPORTED_PROTOCOL_VERSION,
                "Unsupported protocol version",
            );
            e.data = Some(json!({"supported": version::MODERN, "requested": asked}));
            return Ask::Now(Err(e));
        }
    }
    let answer = match (method, modern) {
        ("initialize", false) => Ok(initialize(catalog, params)),
        ("ping", false) => Ok(json!({})),
        ("server/discover", true) => Ok(json!({
            "supportedVersions": version::MODERN,
            "capabilities": capabilities(),
            "instructions": catalog.description,
            "ttlMs": 300_000,
            "cacheScope": "public",
        })),
        ("tools/list", _) => Ok(json!({"tools": catalog.tools.iter()
            .map(|t| t.definition.clone()).collect::<Vec<_>>()})),
        ("tools/call", _) => return call(catalog, params),
        (other, _) => Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
        )),
    };
    Ask::Now(answer)
}

fn call(catalog: &Catalog, params: &Value) -> Ask {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Ask::Now(Err(RpcError::new(
            codes::INVALID_PARAMS,
            "params.name is required",
        )));
    };
    if catalog.get(name).is_none() {
        return Ask::Now(Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!("Unknown tool: {name}"),
        )));
    }
    let args = match params.get("arguments") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => {
            return Ask::Now(Err(RpcError::new(
                codes::INVALID_PARAMS,
                "params.arguments must be an object",
            )))
        }
    };
    Ask::Call {
        tool: name.to_owned(),
        args,
    }
}

/// What a Modern result carries besides its content.
pub(crate) fn decorate(catalog: &Catalog, method: &str, result: &mut Value) {
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    obj.entry("resultType").or_insert(json!("complete"));
    if method == "tools/list" {
        obj.entry("ttlMs").or_insert(json!(0));
        obj.entry("cacheScope").or_insert(json!("public"));
    }
    let meta = obj.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(META_SERVER_INFO.into(), server_info(catalog));
    }
}

fn capabilities() -> Value {
    json!({"tools": {"listChanged": false}})
}

fn server_info(catalog: &Catalog) -> Value {
    json!({"name": catalog.title, "version": catalog.version})
}

fn initialize(catalog: &Catalog, params: &Value) -> Value {
    let asked = params["protocolVersion"].as_str().unwrap_or("");
    let agreed = if version::LEGACY.contains(&asked) {
        asked
    } else {
        version::LATEST_LEGACY
    };
    let mut v = json!({
        "protocolVersion": agreed,
        "capabilities": capabilities(),
        "serverInfo": server_info(catalog),
    });
    if let Some(d) = &catalog.description {
        v["instructions"] = json!(d);
    }
    v
}
